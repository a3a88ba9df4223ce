"""Validated, immutable breaker configuration."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import InitVar, field
from typing import Any

from fleetbreaker.errors import ConfigError
from fleetbreaker.frozen import public_value
from fleetbreaker.record import MAX_PROBE_SLOTS

ExceptionTypes = tuple[type[BaseException], ...]

# Fields BreakerConfig.from_env reads, each from BREAKER_<FIELD NAME IN CAPITALS>.
ENV_FIELDS: dict[str, type[int] | type[float] | type[str] | type[bool]] = {
    "failure_threshold": int,
    "window_seconds": float,
    "recovery_timeout": float,
    "max_recovery_timeout": float,
    "half_open_max_probes": int,
    "half_open_successes": int,
    "probe_lease_seconds": float,
    "cache_ttl": float,
    "store_backoff_seconds": float,
    "failure_rate_threshold": float,
    "minimum_calls": int,
    "slow_call_duration": float,
    "slow_call_rate_threshold": float,
    "min_containers": int,
    "report_interval": float,
    "store_deadline_seconds": float,
    "recovery_ramp_seconds": float,
    "mode": str,
    "verify_store": bool,
}
# What a breaker does with a call it would reject: "enforce" rejects it, "shadow" runs it and
# counts it (WouldReject) while the breaker keeps counting, tripping and recovering as usual.
MODES = ("enforce", "shadow")
# The quorum's container ids are kept in the breaker's record, so their number is capped.
MAX_MIN_CONTAINERS = 10
# Powertools' CircuitBreakerConfig names accepted as keyword aliases (docs/migrating-from-
# powertools.md): the same meaning under another name, so no DeprecationWarning.
POWERTOOLS_ALIASES = {
    "success_threshold": "half_open_successes",
    "handled_exceptions": "failure_exceptions",
    "local_cache_max_age": "cache_ttl",
}
# A container holds its counts at most this long before reporting them.
MAX_REPORT_INTERVAL = 2.0
_KIND_NAMES = {int: "a whole number", float: "a number", str: "text", bool: "true or false"}
# A boolean variable's spellings (any case), as the shell and YAML write them.
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _from_text(kind: type[Any], raw: str) -> Any:
    """A variable's text as ``kind``; ValueError when it is not one (``bool("false")`` would
    be True: a boolean is spelled out)."""
    if kind is not bool:
        return kind(raw)
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ValueError(raw)


# Bounds every accepted number must respect, so the breaker can live with it: epoch ms plus a
# duration in ms stays within the record's 14 digits (state.MAX_RECORD_DIGITS) for centuries,
# a TTL in ms fits Redis' PEXPIRE, and any wait stays far inside threading.TIMEOUT_MAX.
MAX_SECONDS = 1_000_000_000.0  # about 31 years: durations and record_ttl_seconds
MAX_COUNT = 1_000_000_000  # failure_threshold, minimum_calls, half_open_successes
# A store operation's deadline: a Lambda invocation runs at most 15 minutes.
MAX_DEADLINE_SECONDS = 900.0
# recovery_backoff ** 64 (state.open_duration_ms) must stay a finite double.
MAX_RECOVERY_BACKOFF = 100.0


def env_number(
    env: Mapping[str, str],
    name: str,
    default: float,
    kind: type[int] | type[float] = float,
    *,
    allow_zero: bool = False,
) -> Any:
    """A positive (or, with ``allow_zero``, non-negative) number from an environment variable.

    Unset or empty gives ``default``; anything else that is not such a number raises
    :class:`ConfigError` naming the variable. Functions use it for their own settings.
    """
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name} must be {_KIND_NAMES[kind]}, got {raw!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {raw!r}")
    return value


def env_variable(field_name: str) -> str:
    """The variable :meth:`BreakerConfig.from_env` reads a field from: ``BREAKER_<FIELD>``."""
    if field_name not in ENV_FIELDS:
        raise ConfigError(f"{field_name!r} is not read from the environment")
    return f"BREAKER_{field_name.upper()}"


def env_field(field_name: str, environ: Mapping[str, str] | None = None) -> Any:
    """One field's value from its ``BREAKER_*`` variable, checked as ``from_env`` checks it.

    None when the variable is unset or empty. The CLI counts its figures over the
    functions' window with it.

    Example
    -------
    >>> env_field("window_seconds", {"BREAKER_WINDOW_SECONDS": "30"})
    30.0
    """
    env = os.environ if environ is None else environ
    variable = env_variable(field_name)
    if not env.get(variable, "").strip():
        return None
    return getattr(BreakerConfig.from_env({variable: env[variable]}), field_name)


def _shown(value: object) -> str:
    # repr() of a 400-digit int is long (and past 4,300 digits, an error): show its size.
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"an integer of {len(str(abs(value)))} digits"
    return repr(value)


def _positive_int(name: str, value: object, *, most: int = MAX_COUNT) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ConfigError(
            f"{name} must be a positive integer up to {most:,}, got {_shown(value)}",
            fields=(name,),
        )


def _as_float(value: object) -> float | None:
    """``value`` as a finite float, or None (a bool, a non-number, inf, nan, 10**400)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _positive_number(
    name: str, value: object, *, allow_zero: bool = False, most: float = MAX_SECONDS
) -> None:
    number = _as_float(value)
    if number is None or not (number >= 0 if allow_zero else number > 0) or number > most:
        kind = "a non-negative" if allow_zero else "a positive"
        raise ConfigError(
            f"{name} must be {kind} number of seconds up to {most:,.0f}, got {_shown(value)}",
            fields=(name,),
        )


def _is_number(value: object) -> bool:
    return _as_float(value) is not None


def check_mode(name: str, value: object) -> None:
    """ConfigError naming ``name`` unless ``value`` is one of :data:`MODES`."""
    if not isinstance(value, str) or value not in MODES:
        raise ConfigError(
            f"{name} must be one of {', '.join(MODES)}, got {value!r}", fields=(name,)
        )


def _exception_tuple(value: object) -> object:
    """Powertools' exception argument: one class, or an iterable of them, as a tuple."""
    if isinstance(value, type):
        return (value,)
    if isinstance(value, (list, set, frozenset)):
        return tuple(value)
    return value


def _exception_types(name: str, value: object) -> None:
    if not isinstance(value, tuple) or not all(
        isinstance(item, type) and issubclass(item, BaseException) for item in value
    ):
        raise ConfigError(
            f"{name} must be a tuple of exception classes, got {value!r}", fields=(name,)
        )


@public_value
class BreakerConfig:
    """How a breaker counts failures, opens and recovers.

    Parameters
    ----------
    failure_threshold:
        Failures, counted across the whole fleet, that open the breaker (default 5).
    window_seconds:
        Length of the window the failures must fall in (default 60).
    recovery_timeout:
        Seconds the breaker stays open the first time it opens (default 30; floats allowed).
    recovery_backoff:
        Factor applied to the open duration after each failed recovery (default 2.0).
    max_recovery_timeout:
        Cap on the open duration (default 300 s).
    recovery_jitter:
        Fraction of a grown open duration that is randomised away, 0 to 1 (default 0.2):
        a reopened breaker stays open between ``d * (1 - jitter)`` and ``d`` seconds.
    half_open_successes:
        Successful probes needed to close the breaker again (default 1).
    half_open_max_probes:
        Probes admitted at the same time while half-open, fleet-wide (default 1).
    probe_lease_seconds:
        How long a probe's lease lasts; a probe that has not reported by then is
        forgotten and its slot goes to the next caller (default 10 s).
    cache_ttl:
        Seconds a container trusts its cached copy of the breaker (default 1.0; 0 disables).
    record_ttl_seconds:
        Lifetime of an idle breaker record in the store (default one day). Garbage
        collection only: it never shortens an open window.
    store_backoff_seconds:
        After a store error the store is left alone this long and the breaker runs on its
        local, per-container state (default 5 s), counted from when the failure was seen.
    store_deadline_seconds:
        Total wall-clock time one store operation may take, SDK retries and slow replies
        included, whatever client the store uses (default 1.0 s). Past it the operation
        counts as a store error and the breaker runs on local state.
    recovery_ramp_seconds:
        After the breaker closes, each container admits a share of its calls that grows
        linearly from 10 % to all of them over this many seconds; the others are rejected
        with a short ``retry_after`` (default 0: off). See
        :class:`fleetbreaker.admission.RecoveryRamp`.
    failure_exceptions:
        Exception classes that count as failures (default ``(Exception,)``).
    ignored_exceptions:
        Exception classes that never count, even if listed in ``failure_exceptions``.
    is_failure:
        Optional predicate over a raised exception; when given it decides alone.
    failure_result:
        Optional predicate over a returned value, e.g. ``lambda r: r.status_code >= 500``.
        A result it accepts counts as a failure and is still returned to the caller.
    failure_rate_threshold:
        Opt-in rate policy: when set (0 < x <= 1) the breaker opens when, over a sliding
        ``window_seconds``, at least ``minimum_calls`` calls were recorded fleet-wide and
        failures / calls reached this fraction. ``failure_threshold`` is then not used.
        None (default) keeps the count policy.
    minimum_calls:
        Calls the window must hold, fleet-wide, before a rate can open the breaker (default 20).
    slow_call_duration:
        Seconds after which a call counts as slow, whatever its result, and is reported slow
        while it is still running (default None: no slow-call detection). Works with either
        failure policy.
    slow_call_rate_threshold:
        Slow calls / calls (with ``minimum_calls``) at which the breaker opens (default 1.0).
    min_containers:
        Quorum: the breaker opens only when the failures (or slow calls) in the window came
        from at least this many distinct containers (default 1, at most 10).
    report_interval:
        Longest a container holds its calls, failures and slow calls before reporting them in
        one write (default: ``cache_ttl``, at most 2 s). Applies when the rate policy, slow
        calls or a quorum is on.
    mode:
        ``"enforce"`` (default) rejects calls while the breaker is open; ``"shadow"`` counts,
        trips, half-opens and closes the same shared breaker but never rejects a call, never
        uses the fallback and never holds a probe lease while its call runs. It counts the
        calls it would have rejected (``WouldReject``). Switch a live fleet with
        ``fleetbreaker tune NAME --mode enforce``.
    verify_store:
        Read the breaker's record once at construction and raise :class:`ConfigError` when
        the store is misconfigured: no such table, a table keyed otherwise, access denied, a
        login refused (default False). An unreachable or slow store does not fail it: the
        breaker starts on local state, as it would on its first call.
    success_threshold, handled_exceptions, local_cache_max_age:
        Powertools' names for ``half_open_successes``, ``failure_exceptions`` (a single
        exception class is accepted too, as Powertools does) and ``cache_ttl``, accepted so a
        Powertools config moves over unchanged. Giving both names of one field is an error.

    Example
    -------
    >>> config = BreakerConfig(failure_threshold=3, recovery_timeout=10)
    >>> config.failure_threshold, config.recovery_timeout, config.cache_ttl
    (3, 10, 1.0)
    """

    failure_threshold: int = 5
    window_seconds: float = 60.0
    recovery_timeout: float = 30.0
    recovery_backoff: float = 2.0
    max_recovery_timeout: float = 300.0
    recovery_jitter: float = 0.2
    half_open_successes: int = 1
    half_open_max_probes: int = 1
    probe_lease_seconds: float = 10.0
    cache_ttl: float = 1.0
    record_ttl_seconds: int = 86_400
    store_backoff_seconds: float = 5.0
    store_deadline_seconds: float = 1.0
    recovery_ramp_seconds: float = 0.0
    failure_exceptions: ExceptionTypes = (Exception,)
    ignored_exceptions: ExceptionTypes = ()
    is_failure: Callable[[BaseException], bool] | None = field(default=None, compare=False)
    failure_result: Callable[[Any], bool] | None = field(default=None, compare=False)
    failure_rate_threshold: float | None = None
    minimum_calls: int = 20
    slow_call_duration: float | None = None
    slow_call_rate_threshold: float = 1.0
    min_containers: int = 1
    report_interval: float | None = None
    mode: str = "enforce"
    verify_store: bool = False
    # Powertools' names (POWERTOOLS_ALIASES): init-only, never stored or compared.
    success_threshold: InitVar[int | None] = None
    handled_exceptions: InitVar[Any] = None
    local_cache_max_age: InitVar[float | None] = None

    def __new__(cls, *args: Any, **kwargs: Any) -> BreakerConfig:
        config: BreakerConfig = super().__new__(cls)
        if args or kwargs:
            # The generated __init__ fills the defaults in before __post_init__ sees the
            # fields, so which ones the caller named is noted here (and dropped there): an
            # alias conflicts only with a field the caller gave, and record_ttl_seconds grows
            # to fit only when nobody gave it. (copy and pickle call __new__ bare: no note.)
            config.__dict__[_NAMED] = frozenset(_PARAMETERS[: len(args)]).union(kwargs)
        return config

    def __post_init__(
        self,
        success_threshold: int | None,
        handled_exceptions: Any,
        local_cache_max_age: float | None,
    ) -> None:
        named: frozenset[str] = self.__dict__.pop(_NAMED, frozenset())
        given = {
            "success_threshold": success_threshold,
            "handled_exceptions": handled_exceptions,
            "local_cache_max_age": local_cache_max_age,
        }
        spelled: dict[str, str] = {}  # field -> the Powertools name the caller used for it
        for alias, value in given.items():
            if value is None:
                continue
            target = POWERTOOLS_ALIASES[alias]
            if alias == "handled_exceptions":
                value = _exception_tuple(value)
            current = getattr(self, target)
            if target in named and current != value:
                raise ConfigError(
                    f"{alias} and {target} are two names of one setting ({alias} is "
                    f"Powertools' name): give one of them, got {alias}={_shown(value)} and "
                    f"{target}={_shown(current)}",
                    fields=(alias, target),
                )
            object.__setattr__(self, target, value)
            spelled[target] = alias
        try:
            self._check(fit_record_ttl="record_ttl_seconds" not in named)
        except ConfigError as exc:
            refused = exc.fields[0] if exc.fields else ""
            if refused not in spelled:
                raise
            # Name the field as the caller spelled it.
            alias = spelled[refused]
            message = alias + str(exc).removeprefix(refused)
            raise ConfigError(
                f"{message} ({alias} is Powertools' name for {refused})",
                fields=(alias, *exc.fields[1:]),
            ) from None

    def _check(self, *, fit_record_ttl: bool) -> None:
        # Each field on its own first, so a refusal names the field given (NaN, inf, 10**400)
        # rather than a rule that combines it with others.
        check_mode("mode", self.mode)
        if not isinstance(self.verify_store, bool):
            raise ConfigError(
                f"verify_store must be True or False, got {self.verify_store!r}",
                fields=("verify_store",),
            )
        _positive_int("failure_threshold", self.failure_threshold)
        _positive_int("half_open_successes", self.half_open_successes)
        _positive_int("half_open_max_probes", self.half_open_max_probes)
        if self.half_open_max_probes > MAX_PROBE_SLOTS:
            raise ConfigError(
                f"half_open_max_probes must be at most {MAX_PROBE_SLOTS}, "
                f"got {self.half_open_max_probes}",
                fields=("half_open_max_probes",),
            )
        _positive_int("record_ttl_seconds", self.record_ttl_seconds, most=int(MAX_SECONDS))
        for name in (
            "window_seconds",
            "recovery_timeout",
            "max_recovery_timeout",
            "probe_lease_seconds",
        ):
            _positive_number(name, getattr(self, name))
        _positive_number(
            "store_deadline_seconds", self.store_deadline_seconds, most=MAX_DEADLINE_SECONDS
        )
        for name in ("cache_ttl", "store_backoff_seconds", "recovery_ramp_seconds"):
            _positive_number(name, getattr(self, name), allow_zero=True)
        backoff = _as_float(self.recovery_backoff)
        if backoff is None or not 1 <= backoff <= MAX_RECOVERY_BACKOFF:
            raise ConfigError(
                f"recovery_backoff must be at least 1 (no shrinking) and at most "
                f"{MAX_RECOVERY_BACKOFF:g}, got {_shown(self.recovery_backoff)}",
                fields=("recovery_backoff",),
            )
        jitter = _as_float(self.recovery_jitter)
        if jitter is None or not 0 <= jitter <= 1:
            raise ConfigError(
                f"recovery_jitter must be between 0 and 1, got {_shown(self.recovery_jitter)}",
                fields=("recovery_jitter",),
            )
        _exception_types("failure_exceptions", self.failure_exceptions)
        _exception_types("ignored_exceptions", self.ignored_exceptions)
        for name in ("is_failure", "failure_result"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ConfigError(f"{name} must be callable or None, got {value!r}", fields=(name,))
        self._check_rate_policy()
        # Then the rules between fields.
        if self.max_recovery_timeout < self.recovery_timeout:
            raise ConfigError(
                "max_recovery_timeout must be at least recovery_timeout, got "
                f"{self.max_recovery_timeout!r} < {self.recovery_timeout!r}",
                fields=("max_recovery_timeout", "recovery_timeout"),
            )
        needed = math.ceil(self.max_recovery_timeout + self.probe_lease_seconds)
        if self.record_ttl_seconds >= needed:
            return
        if fit_record_ttl:
            # Nobody chose the TTL: it is garbage collection only, so a longer open window
            # (or lease) takes a longer-lived record rather than a refusal of a valid setting.
            object.__setattr__(self, "record_ttl_seconds", needed)
            return
        raise ConfigError(
            "record_ttl_seconds must outlast the longest open window plus a probe lease "
            f"(max_recovery_timeout + probe_lease_seconds = {needed:,} s), got "
            f"{self.record_ttl_seconds:,}: give at least {needed:,} (a record_ttl_seconds "
            "not given grows to fit)",
            fields=("record_ttl_seconds", "max_recovery_timeout", "probe_lease_seconds"),
        )

    def _check_rate_policy(self) -> None:
        for name in ("failure_rate_threshold", "slow_call_rate_threshold"):
            value = getattr(self, name)
            if value is None and name == "failure_rate_threshold":
                continue
            if not _is_number(value) or not 0 < float(value) <= 1:
                raise ConfigError(
                    f"{name} must be a fraction in (0, 1], got {_shown(value)}", fields=(name,)
                )
        _positive_int("minimum_calls", self.minimum_calls)
        _positive_int("min_containers", self.min_containers)
        if self.min_containers > MAX_MIN_CONTAINERS:
            raise ConfigError(
                f"min_containers must be at most {MAX_MIN_CONTAINERS}, got {self.min_containers}",
                fields=("min_containers",),
            )
        if self.slow_call_duration is not None:
            _positive_number("slow_call_duration", self.slow_call_duration)
        if self.report_interval is not None:
            _positive_number("report_interval", self.report_interval)
            if self.report_interval > MAX_REPORT_INTERVAL:
                raise ConfigError(
                    f"report_interval must be at most {MAX_REPORT_INTERVAL} s, "
                    f"got {self.report_interval!r}",
                    fields=("report_interval",),
                )

    @property
    def shadow(self) -> bool:
        """Whether the breaker only observes (``mode="shadow"``)."""
        return self.mode == "shadow"

    @property
    def reporting(self) -> bool:
        """Whether containers batch and report their calls (rate policy, slow calls, quorum)."""
        return (
            self.failure_rate_threshold is not None
            or self.slow_call_duration is not None
            or self.min_containers > 1
        )

    @property
    def effective_report_interval(self) -> float:
        """``report_interval``, or ``cache_ttl`` capped at 2 s when it is not set."""
        if self.report_interval is not None:
            return self.report_interval
        return min(self.cache_ttl, MAX_REPORT_INTERVAL)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> BreakerConfig:
        """A config from ``BREAKER_*`` environment variables (unset or empty: the default).

        Reads ``BREAKER_FAILURE_THRESHOLD``, ``BREAKER_WINDOW_SECONDS``,
        ``BREAKER_RECOVERY_TIMEOUT``, ``BREAKER_MAX_RECOVERY_TIMEOUT``,
        ``BREAKER_HALF_OPEN_MAX_PROBES``, ``BREAKER_HALF_OPEN_SUCCESSES``,
        ``BREAKER_PROBE_LEASE_SECONDS``, ``BREAKER_CACHE_TTL``,
        ``BREAKER_STORE_BACKOFF_SECONDS``, ``BREAKER_STORE_DEADLINE_SECONDS``,
        ``BREAKER_RECOVERY_RAMP_SECONDS`` and the rate
        policy's ``BREAKER_FAILURE_RATE_THRESHOLD``, ``BREAKER_MINIMUM_CALLS``,
        ``BREAKER_SLOW_CALL_DURATION``, ``BREAKER_SLOW_CALL_RATE_THRESHOLD``,
        ``BREAKER_MIN_CONTAINERS`` and ``BREAKER_REPORT_INTERVAL``, ``BREAKER_MODE``
        (``enforce`` or ``shadow``) and ``BREAKER_VERIFY_STORE`` (``true`` or ``false``, also
        ``1``/``0``, ``yes``/``no``, ``on``/``off``).

        Any other ``BREAKER_*``, ``CIRCUIT_BREAKER_*`` or ``FLEETBREAKER_*`` variable (a
        misspelling, most likely) is logged once per process at WARNING with the nearest
        known name, and refused with :class:`ConfigError` when ``verify_store`` is on
        (:mod:`fleetbreaker.environment`).

        Keyword arguments are the explicit part (classification predicates, for instance):
        each beats its variable, under either of its names, so ``local_cache_max_age=5``
        wins over ``BREAKER_CACHE_TTL`` as ``cache_ttl=5`` does. A bad value raises
        :class:`ConfigError` naming the variable; a refusal that combines fields names every
        variable that set one of them, and the variable of each field left at its default.

        Example
        -------
        >>> BreakerConfig.from_env({"BREAKER_FAILURE_THRESHOLD": "3"}).failure_threshold
        3
        >>> BreakerConfig.from_env({"BREAKER_CACHE_TTL": "2"}, local_cache_max_age=5).cache_ttl
        5
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field_name, kind in ENV_FIELDS.items():
            variable = env_variable(field_name)
            raw = env.get(variable, "").strip()
            if not raw:
                continue
            try:
                values[field_name] = _from_text(kind, raw)
            except ValueError:
                raise ConfigError(
                    f"{variable} must be {_KIND_NAMES[kind]}, got {raw!r}", fields=(field_name,)
                ) from None
        explicit = {POWERTOOLS_ALIASES.get(name, name) for name in overrides}
        for field_name in explicit:
            values.pop(field_name, None)
        try:
            config = cls(**values, **overrides)
        except ConfigError as exc:
            blamed = _blame_variables(exc, values, explicit)
            if blamed is exc:
                raise
            raise blamed from None
        # A misspelt BREAKER_* would leave its field at the default, unsaid: name it (a
        # WARNING once per process; under verify_store, a ConfigError).
        from fleetbreaker.environment import PREFIXES, check_variables, known_variables

        known = known_variables(env_variable(name) for name in ENV_FIELDS)
        strict_by = env_variable("verify_store") if config.verify_store else None
        refused = check_variables(env, PREFIXES, known, strict_by=strict_by)
        if refused is not None:
            raise ConfigError(refused)
        return config


# Init's parameters in order (fields, then Powertools' names): what positional arguments name.
_PARAMETERS: tuple[str, ...] = (*BreakerConfig.__frozen_fields__, *POWERTOOLS_ALIASES)  # type: ignore[attr-defined]
# Each field's default, as error messages quote it.
_DEFAULTS: dict[str, Any] = {
    name: entry.default for name, entry in BreakerConfig.__dataclass_fields__.items()
}
# The key under which __new__ hands __post_init__ the names the caller gave.
_NAMED = "_named_by_caller"


def _blame_variables(
    exc: ConfigError, from_env: Mapping[str, Any], explicit: Collection[str]
) -> ConfigError:
    """``exc`` naming the ``BREAKER_*`` variables that set the fields it is about, and the
    variable of each other field it involves that was left at its default; ``exc`` itself
    when no variable set any of them."""
    involved = exc.fields
    set_by_env = [name for name in involved if name in from_env]
    if not set_by_env:
        return exc
    hints = [
        f"{name} is its default {_shown(_DEFAULTS[name])}: {env_variable(name)} changes it"
        for name in involved
        if name in ENV_FIELDS and name not in from_env and name not in explicit
    ]
    variables = ", ".join(env_variable(name) for name in set_by_env)
    return ConfigError(f"{variables}: {'; '.join([str(exc), *hints])}", fields=involved)
