"""The circuit breaker: admission, the protected call, and recording its outcome."""

from __future__ import annotations

import functools
import hashlib
import logging
import random
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, overload

from fleetbreaker import frozen
from fleetbreaker import state as rules
from fleetbreaker.cache import RecordCache
from fleetbreaker.config import BreakerConfig
from fleetbreaker.errors import CircuitOpenError, ConfigError, InvalidTokenError
from fleetbreaker.events import BreakerListener, LoggingListener, StateChange
from fleetbreaker.ramp import RecoveryRamp
from fleetbreaker.reporting import (
    MAX_REFRESH_STRETCH,
    SLOW_WATCH_MAX_PERIOD_S,
    TARGET_REFRESHES_PER_S,
    TARGET_REPORTS_PER_S,
    CallTally,
    SlowCallWatcher,
    fleet_interval_ms,
    fleet_size,
    max_interval_ms,
    next_interval_ms,
    process_container_id,
    recent_failing,
    refresh_ms,
    urgent_allowed,
    wants_urgent_report,
    write_rate,
)
from fleetbreaker.state import Decision, Policy, ProbeReport, Record, Snapshot, State
from fleetbreaker.stores.base import AdminStore
from fleetbreaker.stores.fallback import FallbackStats, FallbackStore

if TYPE_CHECKING:
    from typing import ParamSpec

    from fleetbreaker.stores.base import Store

    P = ParamSpec("P")

R = TypeVar("R")
Clock = Callable[[], int]
MAX_NAME_BYTES = 1024  # DynamoDB allows 2048 for a partition key; leave room for Redis keys
MAX_CONTAINER_ID = 64  # container ids are kept in the record (quorum), so they stay short

log = logging.getLogger("fleetbreaker")


def system_clock() -> int:
    """Epoch milliseconds from the wall clock (shared with other containers' clocks)."""
    return time.time_ns() // 1_000_000


def validate_name(name: object) -> str:
    if not isinstance(name, str):
        raise ConfigError(f"breaker name must be a string, got {type(name).__name__}")
    if not name or not name.strip():
        raise ConfigError("breaker name must not be empty")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        # A lone surrogate (e.g. from a JSON "\udcff" escape) has no UTF-8 form: no store
        # could keep the name.
        raise ConfigError(f"breaker name must be valid Unicode text: {name!r}") from None
    if size > MAX_NAME_BYTES:
        raise ConfigError(f"breaker name is {size} bytes; the limit is {MAX_NAME_BYTES} (UTF-8)")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise ConfigError(f"breaker name must not contain control characters: {name!r}")
    return name


def container_key(container_id: str) -> str:
    """The short, fixed-size key a container's id is counted under in the quorum."""
    return hashlib.blake2s(container_id.encode("utf-8"), digest_size=4).hexdigest()


def validate_container_id(container_id: object) -> str:
    if not isinstance(container_id, str):
        raise ConfigError(f"container_id must be a string, got {type(container_id).__name__}")
    if not 1 <= len(container_id) <= MAX_CONTAINER_ID or not container_id.isprintable():
        raise ConfigError(
            f"container_id must be 1 to {MAX_CONTAINER_ID} printable characters: {container_id!r}"
        )
    return container_id


@dataclass(frozen=True)
class Admission:
    """The breaker's answer for one call.

    ``token`` is set for a probe: pass it back to :meth:`CircuitBreaker.record` (it is what a
    Step Functions workflow carries between the gate's check and record steps).

    ``shadow`` is set in shadow mode when an enforcing breaker would not simply have allowed
    the call: ``reject`` (the call runs anyway) or ``probe`` (it runs without a lease, and
    its outcome settles a probe only after it finished). ``decision`` is then ``allow``.
    """

    name: str
    decision: Decision
    state: State
    retry_after: float = 0.0
    token: str | None = None
    degraded: bool = False
    shadow: Decision | None = None

    @property
    def would_reject(self) -> bool:
        """Shadow mode: an enforcing breaker would have rejected this call."""
        return self.shadow is Decision.REJECT

    @property
    def allowed(self) -> bool:
        return self.decision is not Decision.REJECT


@dataclass(frozen=True)
class RecordResult:
    """What :meth:`CircuitBreaker.record` did with an outcome."""

    applied: bool
    state: State
    detail: str


# Counters of one breaker instance in this container: its fallback store's.
BreakerStats = FallbackStats

_UNSET: Any = object()


class CircuitBreaker:
    """One named breaker, shared by every container that uses the same store and name.

    Parameters
    ----------
    name:
        The dependency this breaker protects, e.g. ``"payment-api"`` (1 to 1024 UTF-8 bytes).
    store:
        Where the fleet's shared state lives: ``DynamoDBStore``, ``RedisStore`` or, for one
        process only, ``MemoryStore``. When omitted: a ``RedisStore`` if
        ``CIRCUIT_BREAKER_REDIS_URL`` is set, else a ``DynamoDBStore`` if
        ``CIRCUIT_BREAKER_TABLE`` is set (see :func:`fleetbreaker.stores.from_env`). The
        breaker wraps it in a :class:`~fleetbreaker.stores.fallback.FallbackStore`: each
        store operation gets ``store_deadline_seconds``, and a store that fails or misses
        it is left alone for ``store_backoff_seconds`` while local state answers.
    config:
        A :class:`BreakerConfig`. When omitted it is read from the ``BREAKER_*`` variables
        (:meth:`BreakerConfig.from_env`), as the store is from ``CIRCUIT_BREAKER_*``; an
        explicit ``config`` ignores them. Precedence: explicit argument, then environment,
        then the documented defaults.
    fallback:
        Called instead of raising :class:`CircuitOpenError` when a call is rejected, as
        ``fallback(circuit, *args, **kwargs)`` where ``circuit`` is the rejecting
        :class:`Admission` and the rest are the call's own arguments.
    listeners:
        Event hooks; defaults to a :class:`LoggingListener`.
    clock, rng:
        Injectable epoch-millisecond clock and random source (tests move time by hand).
        Call durations (slow calls) are measured on this clock too.
    container_id:
        The identity ``min_containers`` counts; default a random id per process (one Lambda
        container is one process). Pass one to run a fleet inside one process.

    Example
    -------
    >>> breaker = CircuitBreaker("payment-api", store=MemoryStore())
    >>> @breaker
    ... def charge(amount):
    ...     return f"charged {amount}"
    >>> charge(10)
    'charged 10'
    >>> breaker.call(charge, 20)
    'charged 20'
    """

    def __init__(
        self,
        name: str,
        store: Store | None = None,
        config: BreakerConfig | None = None,
        fallback: Callable[..., Any] | None = None,
        *,
        listeners: Iterable[BreakerListener] | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        container_id: str | None = None,
    ) -> None:
        self.name = validate_name(name)
        if config is None:
            config = BreakerConfig.from_env()
        elif not isinstance(config, BreakerConfig):
            raise ConfigError(f"config must be a BreakerConfig, got {type(config).__name__}")
        self.config = config
        if fallback is not None and not callable(fallback):
            raise ConfigError(f"fallback must be callable, got {fallback!r}")
        self.fallback = fallback
        self.store: Store = store if store is not None else _default_store()
        self.listeners: list[BreakerListener] = (
            list(listeners) if listeners is not None else [LoggingListener()]
        )
        self.clock: Clock = clock or system_clock
        self.rng = rng or random.Random()
        # The policy follows the live-tuned settings stored with the record (see _policy).
        self._tuned_text = ""
        self._policy = Policy.from_config(config)
        # Shadow mode (config.mode, live-tunable): read only off the hot path.
        self._shadow = config.shadow
        self._cache = RecordCache(round(config.cache_ttl * 1000))
        # A store that decides on its own clock refused a probe claim of this generation
        # until this time (on our clock): (gen, until_ms). See _admit.
        self._claim_barred: tuple[int, int] | None = None
        # Waiting for another thread's refresh: longer than a store read can take.
        self._refresh_wait_s = config.store_deadline_seconds + 1.0
        self._store = FallbackStore(
            self.store,
            clock=self.clock,
            backoff_seconds=config.store_backoff_seconds,
            deadline_seconds=config.store_deadline_seconds,
            emit=self._emit,
            on_answer=self._answered,
        )
        self.stats: BreakerStats = self._store.fallback_stats
        self._ramp = (
            RecoveryRamp(config.recovery_ramp_seconds) if config.recovery_ramp_seconds else None
        )
        self._allow = {
            state: Admission(self.name, Decision.ALLOW, state)
            for state in (State.CLOSED, State.DISABLED)
        }
        # Per hook, only the listeners that override it: a hook nobody implements costs nothing.
        self._hooks: dict[str, list[Callable[..., None]]] = {
            hook: [
                getattr(listener, hook)
                for listener in self.listeners
                if getattr(type(listener), hook, None) is not getattr(BreakerListener, hook)
            ]
            for hook in vars(BreakerListener)
            if hook.startswith("on_")
        }
        self.container_id = (
            process_container_id() if container_id is None else validate_container_id(container_id)
        )
        # The record keeps quorum ids, so they go in as a short digest: 8 hex characters
        # whatever the id's length keep the record under one write unit.
        self._container_key = container_key(self.container_id)
        # Rate policy, slow calls, quorum: calls are tallied here and reported in batches.
        self._base_interval_ms = max(1, round(config.effective_report_interval * 1000))
        self._interval_ms = self._base_interval_ms
        self._has_reported = False  # a newcomer adopts the fleet's interval once
        # Whether the record showed no reports when this container first read it: it may be
        # one of a crowd that started together (see _join_fleet). None: not read yet.
        self._started_cold: bool | None = None
        # Containers on this breaker, as the last closed record with reports showed (kept
        # while open: the fleet's refreshes must stay spread while it waits out an outage).
        self._fleet = 0.0
        self._reported = False  # whether a report of this container has reached the store
        self._started_ms = self.clock()
        self._tally: CallTally | None = None
        self._watcher: SlowCallWatcher | None = None
        self._watching = False
        self._failure_result = config.failure_result
        if config.reporting and not callable(getattr(self.store, "report", None)):
            raise ConfigError(
                f"{type(self.store).__name__} has no report operation: the rate policy, slow "
                "calls and min_containers need one (every store of this package has it)"
            )
        self._adopt_reporting(config, self._policy)

    @classmethod
    def from_env(
        cls, name: str, *, environ: Mapping[str, str] | None = None, **config_overrides: Any
    ) -> CircuitBreaker:
        """A breaker whose store and config both come from the environment.

        The store from the ``CIRCUIT_BREAKER_*`` variables (:func:`fleetbreaker.stores.
        from_env`), the config from ``BREAKER_*`` (:meth:`BreakerConfig.from_env`), with
        ``config_overrides`` (classification predicates, for instance) taking precedence
        over the variables. ``environ`` defaults to ``os.environ``.

        Example
        -------
        >>> breaker = CircuitBreaker.from_env(
        ...     "payment-api",
        ...     environ={"CIRCUIT_BREAKER_TABLE": "CircuitBreakers",
        ...              "BREAKER_FAILURE_THRESHOLD": "3"},
        ...     failure_exceptions=(TimeoutError,),
        ... )
        >>> breaker.config.failure_threshold, breaker.config.failure_exceptions
        (3, (<class 'TimeoutError'>,))
        """
        from fleetbreaker.stores import from_env as store_from_env

        config = BreakerConfig.from_env(environ, **config_overrides)
        return cls(name, store=store_from_env(environ), config=config)

    def __repr__(self) -> str:
        return f"CircuitBreaker({self.name!r}, store={type(self.store).__name__})"

    # -- public API ------------------------------------------------------------------------

    @property
    def state(self) -> State:
        """The breaker's state as this container sees it (cached for ``cache_ttl``)."""
        record = self._read(self.clock())
        return record.state if record is not None else State.CLOSED

    @property
    def degraded(self) -> bool:
        """True while the store is unreachable and the breaker runs on local state."""
        return self._store.degraded

    def snapshot(self) -> Snapshot:
        """The fleet's view of this breaker, read through the cache.

        State, generation, the sliding window's calls, failures and slow calls, the failing
        containers (up to ``min_containers``), the rates, ``retry_after`` and ``open_until``.
        """
        now = self.clock()
        return rules.snapshot_of(self.name, self._read(now), self._policy, now, self.mode)

    @property
    def mode(self) -> str:
        """``"enforce"`` or ``"shadow"``: the config's mode, or the fleet's live-tuned one."""
        return "shadow" if self._shadow else "enforce"

    def report_hung_calls(self) -> int:
        """Report the calls running past ``slow_call_duration`` as slow calls, now.

        The breaker's watcher thread does this every quarter of that duration; a simulation
        or a test with an injected clock calls it after moving the clock. Returns how many
        calls it reported.
        """
        tally = self._tally
        if tally is None:
            return 0
        now = self.clock()
        hung = tally.sweep(now)
        if hung:
            # Out of turn: the Lambda timeout may kill this container before the call ends.
            self._flush(now, urgent=True)
        return hung

    def call(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
        """Run ``fn(*args, **kwargs)`` through the breaker.

        Raises :class:`CircuitOpenError` when rejected and no fallback is set; otherwise
        returns ``fn``'s result (or the fallback's) and re-raises ``fn``'s exceptions.
        """
        return self._guarded(fn, self.fallback, args, kwargs)

    @overload
    def __call__(self, fn: Callable[P, R], /) -> Callable[P, R]: ...

    @overload
    def __call__(
        self, fn: None = None, /, *, fallback: Callable[..., Any] | None = ...
    ) -> Callable[[Callable[P, R]], Callable[P, R]]: ...

    def __call__(self, fn: Callable[..., Any] | None = None, /, *, fallback: Any = _UNSET) -> Any:
        """Decorator: ``@breaker`` or ``@breaker(fallback=...)``."""
        if fn is not None:
            return self._decorate(fn, self.fallback)
        if fallback is not _UNSET and fallback is not None and not callable(fallback):
            raise ConfigError(f"fallback must be callable, got {fallback!r}")
        chosen = self.fallback if fallback is _UNSET else fallback
        return lambda inner: self._decorate(inner, chosen)

    def check(self) -> Admission:
        """Decide one call without running anything: allow, probe (with a token) or reject.

        Pair it with :meth:`record`. ``call`` and the decorator do both for you.
        """
        return self._admit(self.clock())

    def _admit(self, now: int) -> Admission:
        record = self._read(now)
        verdict = rules.verdict(record, self._policy, now)
        if verdict.decision is Decision.PROBE and self._claim_barred is not None:
            verdict = self._keep_refusal(record, verdict, now)
        if verdict.decision is Decision.PROBE and self._shadow:
            # No lease while the call runs: an enforcing container must be able to probe.
            return self._shadow_admission(verdict, Decision.PROBE)
        if verdict.decision is Decision.PROBE:
            nonce = secrets.token_hex(8)
            outcome = self._store.claim_probe(self.name, self._policy, now, nonce, record)
            self._observe(outcome.record)
            if outcome.token is not None:
                admission = Admission(
                    self.name, Decision.PROBE, State.HALF_OPEN, 0.0, outcome.token, self.degraded
                )
                self._emit("on_decision", self.name, admission.decision, admission.state)
                return admission
            verdict = rules.verdict(outcome.record, self._policy, now)
            wait = outcome.retry_after_ms
            if verdict.decision is Decision.PROBE and wait and outcome.record is not None:
                self._claim_barred = (outcome.record.gen, now + wait)
                verdict = rules.Verdict(Decision.REJECT, verdict.state, wait)
            elif verdict.decision is Decision.PROBE:
                # Lost every race for a slot: wait for the next lease to end.
                verdict = rules.Verdict(Decision.REJECT, verdict.state, 100)
        if self._ramp is not None and verdict.state is State.CLOSED:
            # Recovery ramp: decided locally from the record already read (no store request).
            ramped_ms = self._ramp.rejects(record, now, self.rng.random())
            if ramped_ms:
                verdict = rules.Verdict(Decision.REJECT, State.CLOSED, ramped_ms)
        degraded = self._store.degraded
        if verdict.decision is Decision.ALLOW and not degraded:
            admission = self._allow[verdict.state]  # the hot path: no allocation
        elif verdict.decision is Decision.REJECT and self._shadow:
            return self._shadow_admission(verdict, Decision.REJECT)
        else:
            admission = Admission(
                self.name,
                verdict.decision,
                verdict.state,
                verdict.retry_after_ms / 1000,
                None,
                degraded,
            )
        self._emit("on_decision", self.name, admission.decision, admission.state)
        return admission

    def _shadow_admission(self, verdict: rules.Verdict, would: Decision) -> Admission:
        """Shadow mode: allow the call, saying what an enforcing breaker would have decided."""
        retry_after = verdict.retry_after_ms / 1000
        admission = Admission(
            self.name,
            Decision.ALLOW,
            verdict.state,
            0.0,
            None,
            self._store.degraded,
            would,
        )
        self._emit("on_decision", self.name, Decision.ALLOW, verdict.state)
        if would is Decision.REJECT:
            self.stats.would_rejects += 1
            self._emit("on_would_reject", self.name, verdict.state, retry_after)
        return admission

    def _keep_refusal(
        self, record: Record | None, verdict: rules.Verdict, now: int
    ) -> rules.Verdict:
        """The store refused a claim on its own clock, for this generation: ours runs ahead.

        Keep its answer until it said, instead of asking again on every call.
        """
        barred = self._claim_barred
        if barred is None or record is None or record.gen != barred[0] or now >= barred[1]:
            return verdict
        return rules.Verdict(Decision.REJECT, verdict.state, barred[1] - now)

    def record(self, success: bool, token: str | None = None) -> RecordResult:
        """Report the outcome of a call admitted by :meth:`check`.

        With a probe ``token`` the probe is settled (a token whose lease has ended is a
        no-op, reported with ``applied=False``); without one a failure is counted and a
        success, as always in closed state, writes nothing.
        """
        now = self.clock()
        if token is not None:
            if not isinstance(token, str) or rules.lease_slot(token) is None:
                raise InvalidTokenError(f"not a probe token of this package: {token!r}")
            return self._settle(token, success, now)
        if self._shadow:
            shadowed = self._shadow_outcome(success, now)
            if shadowed is not None:
                return shadowed
        tally = self._tally
        if tally is not None:
            if now >= tally.due_ms:
                self._due(tally, now)
            if success:
                next(tally.good)
            else:
                self._tally_bad(tally, None, True, now)
            return RecordResult(True, self._state_of(self._cache.last_seen), "call tallied")
        if success:
            return RecordResult(True, self._state_of(self._read(now)), "success: nothing to write")
        return self._count_failure(now)

    def force_open(self, *, reason: str | None = None, by: str | None = None) -> State:
        """Operator override: reject every call until :meth:`reset`.

        ``reason`` and ``by`` (default: the local user), when either is given, are stored
        with the record as its last operator action (the store must be an AdminStore).
        """
        return self._force(State.FORCED_OPEN, reason, by)

    def disable(self, *, reason: str | None = None, by: str | None = None) -> State:
        """Operator override: allow every call and record nothing until :meth:`reset`."""
        return self._force(State.DISABLED, reason, by)

    def reset(self, *, reason: str | None = None, by: str | None = None) -> State:
        """Release an override or close the breaker, forgetting failures and back-off."""
        return self._force(State.CLOSED, reason, by)

    def _retune(self, text: str) -> None:
        # Live tuning is rare: its module loads when a record first carries settings.
        from fleetbreaker import tuning

        config = self.config
        try:
            values = tuning.decode_tuned(text)
        except ConfigError as exc:
            log.warning("circuit %s: ignoring its tuned settings: %s", self.name, exc)
            values = {}
        for setting, value in sorted(values.items()):
            try:
                config = tuning.apply_tuning(config, {setting: value})
            except ConfigError as exc:
                # Another version of the package may store settings this one cannot use.
                log.warning("circuit %s: ignoring tuned %s: %s", self.name, setting, exc)
        # Policy before text: a thread that sees the new text must also see its policy.
        policy = Policy.from_config(config)
        self._adopt_reporting(config, policy)
        self._policy = policy
        self._shadow = config.shadow
        self._tuned_text = text

    def _adopt_reporting(self, config: BreakerConfig, policy: Policy) -> None:
        """Tally and report calls (rate policy, slow calls, quorum) as ``config`` says.

        Called at construction and when live tuning changes the settings: tuning can switch a
        running fleet between the count and the rate policy, or change the slow-call duration.
        """
        if not config.reporting:
            self._tally = None
            return
        tally = self._tally
        if tally is None:
            tally = CallTally(policy, self._base_interval_ms)
            tally.start(self.clock())
        tally.slow_ms = policy.slow_ms
        if config.slow_call_duration is not None:
            # At most 1 s: the watcher waits one period before it reads a new one, so a long
            # tuned duration must not keep it asleep after the operator tunes back.
            period = min(max(0.005, config.slow_call_duration / 4), SLOW_WATCH_MAX_PERIOD_S)
            if self._watcher is None:
                self._watcher = SlowCallWatcher(self.report_hung_calls, period)
            self._watcher.period_s = period
        self._tally = tally

    # -- internals -------------------------------------------------------------------------

    def _decorate(
        self, fn: Callable[..., R], fallback: Callable[..., Any] | None
    ) -> Callable[..., R]:
        @functools.wraps(fn)
        def protected(*args: Any, **kwargs: Any) -> R:
            return self._guarded(fn, fallback, args, kwargs)

        protected.breaker = self  # type: ignore[attr-defined]
        return protected

    def _guarded(
        self,
        fn: Callable[..., R],
        fallback: Callable[..., Any] | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> R:
        now = self.clock()
        admission = self._admit(now)
        if admission.decision is Decision.REJECT:
            self._emit("on_rejected", self.name, admission.state, admission.retry_after)
            if fallback is None:
                raise CircuitOpenError(self.name, admission.state, admission.retry_after)
            self._emit("on_fallback", self.name, admission.state)
            result: R = fallback(admission, *args, **kwargs)
            return result
        if admission.shadow is not None:
            return self._shadow_call(admission, fn, args, kwargs)
        tally = self._tally
        if tally is not None and admission.decision is Decision.ALLOW:
            if admission.state is State.DISABLED:
                return fn(*args, **kwargs)
            return self._tallied(tally, now, fn, args, kwargs)
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            self._finish(admission, success=not self.config.counts_exception(exc))
            raise
        except BaseException:
            # Interrupted (SystemExit, KeyboardInterrupt): no verdict on the dependency. A
            # probe lease simply runs out.
            raise
        try:
            failed = self.config.counts_result(result)
        except Exception:
            log.exception(
                "circuit %s: failure_result predicate raised; counted as failure", self.name
            )
            failed = True
        self._finish(admission, success=not failed)
        return result

    def _shadow_call(
        self,
        admission: Admission,
        fn: Callable[..., R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> R:
        """Shadow mode: run a call an enforcing breaker would have rejected or probed.

        A would-be rejected call counts nowhere (an enforcing fleet would not have made it).
        A would-be probe settles a probe after it finished: see :meth:`_shadow_probe`.
        """
        if admission.shadow is Decision.REJECT:
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            self._shadow_probe(not self.config.counts_exception(exc), self.clock())
            raise
        self._shadow_probe(not self._judge(result), self.clock())
        return result

    def _shadow_outcome(self, success: bool, now: int) -> RecordResult | None:
        """Shadow mode, :meth:`record` without a token: None when it counts as usual.

        While the breaker would reject, the outcome counts nowhere; when a probe is due, it
        settles one (see :meth:`_shadow_probe`).
        """
        record = self._read(now)
        verdict = rules.verdict(record, self._policy, now)
        if verdict.decision is Decision.PROBE:
            return self._shadow_probe(success, now)
        if verdict.decision is Decision.REJECT:
            state = self._state_of(record)
            return RecordResult(False, state, f"shadow: breaker is {state.value}; not counted")
        return None

    def _shadow_probe(self, success: bool, now: int) -> RecordResult:
        """Settle a probe with the outcome of a call that already ran (shadow mode).

        The lease is claimed only now, with the outcome known, and settled at once: it lives
        for the two round trips in between (and at most two store deadlines, should this
        container die between them), never for the call's duration, so an enforcing
        container is never kept from probing by a shadow call. Losing the claim means an
        enforcing breaker would have rejected the call: it counts as a would-be rejection.
        """
        lease_ms = max(1, round(self.config.store_deadline_seconds * 2000))
        policy = frozen.replace(self._policy, lease_ms=min(self._policy.lease_ms, lease_ms))
        observed = self._cache.last_seen
        claim = self._store.claim_probe(self.name, policy, now, secrets.token_hex(8), observed)
        if claim.token is None:
            state = self._state_of(claim.record)
            verdict = rules.verdict(claim.record, self._policy, now)
            if verdict.decision is not Decision.ALLOW:
                self.stats.would_rejects += 1
                self._emit("on_would_reject", self.name, state, verdict.retry_after_ms / 1000)
            return RecordResult(False, state, "shadow: probe slot taken; not counted")
        return self._settle(claim.token, success, self.clock())

    def _tallied(
        self,
        tally: CallTally,
        now: int,
        fn: Callable[..., R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> R:
        # The rate policy's hot path, kept flat on purpose (it is measured against
        # Powertools in bench/): a good call costs one atomic counter step, plus a dict entry
        # and a second clock read when slow-call detection times it.
        if now >= tally.due_ms:
            self._due(tally, now)
        slow_ms = tally.slow_ms
        if slow_ms is None:
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                self._tally_bad(tally, None, self.config.counts_exception(exc))
                raise
            if self._failure_result is not None and self._judge(result):
                self._tally_bad(tally, None, True)
            else:
                next(tally.good)
            return result
        number = next(tally.numbers)
        running = tally.running
        running[number] = now
        if not self._watching:
            self._start_watcher()
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            failed = self.config.counts_exception(exc)
            started = running.pop(number, None)
            if started is None:
                if tally.late(failed):
                    self._maybe_flush_urgently(tally, self.clock())
            else:
                self._tally_bad(tally, started, failed)
            raise
        except BaseException:
            # Interrupted (SystemExit, KeyboardInterrupt): no verdict on the dependency.
            running.pop(number, None)
            raise
        failed = self._failure_result is not None and self._judge(result)
        end = self.clock()
        started = running.pop(number, None)
        if started is None:  # the watcher reported it slow while it ran
            if tally.late(failed):
                self._maybe_flush_urgently(tally, end)
        elif end - started < slow_ms and not failed:
            next(tally.good)
        else:
            self._tally_bad(tally, started, failed, end)
        return result

    def _judge(self, result: Any) -> bool:
        """Whether a returned value counts as a failure (a raising predicate: it does)."""
        try:
            return self.config.counts_result(result)
        except Exception:
            log.exception(
                "circuit %s: failure_result predicate raised; counted as failure", self.name
            )
            return True

    def _tally_bad(
        self, tally: CallTally, started: int | None, failed: bool, now: int | None = None
    ) -> None:
        now = self.clock() if now is None else now
        if tally.bad(started, now, failed):
            self._maybe_flush_urgently(tally, now)

    def _start_watcher(self) -> None:
        if self._watcher is not None:
            self._watcher.ensure_running()
        self._watching = True

    def _maybe_flush_urgently(self, tally: CallTally, now: int) -> None:
        record = self._cache.last_seen
        degraded = self._store.degraded
        if degraded:
            # On local state: the local breaker's record, and its own quorum (alone()).
            record = self._store.local.load(self.name, now)
        policy = rules.alone(self._policy) if degraded else self._policy
        if now < tally.urgent_after_ms or not wants_urgent_report(
            record, tally, policy, self._container_key, now
        ):
            return
        # One out-of-turn decision per cache_ttl per container, thinned across a large fleet.
        tally.urgent_after_ms = now + self._cache.ttl_ms
        counts = rules.window_counts(record, self._policy, now)
        if urgent_allowed(counts, self._policy, self._interval_ms, self._cache.ttl_ms, self.rng):
            self._flush(now, urgent=True)

    def _due(self, tally: CallTally, now: int) -> None:
        """The hot path's check fired: the report is due, or only the tally's span ended."""
        if now >= tally.report_due_ms:
            self._flush(now)
        else:
            tally.rotate(now)

    def _flush(self, now: int, load_if_empty: bool = False, urgent: bool = False) -> Record | None:
        """Report the tally in one write; the answer refreshes the cache."""
        tally = self._tally
        assert tally is not None
        tally.rotate(now)
        read = not self._has_reported and not urgent
        if read and self._join_fleet(tally, now):
            # The first report waits for the fleet's interval: no write now. (It has just
            # read the record: that read is this refresh.)
            return self._cache.last_seen
        if recent_failing(tally.recent(), self._policy):
            # Its own recent calls are failing: those alone, so the newest buckets show the
            # outage (state.should_trip's short window); the older counts follow later.
            report = tally.take_recent(self._container_key, now, self._interval_ms)
        else:
            report = tally.take(self._container_key, now, self._interval_ms)
        if not report:
            if load_if_empty and not read:
                return self._store.load(self.name, now)
            return self._cache.last_seen
        observed = self._cache.last_seen
        outcome = self._store.report(self.name, self._policy, now, report, observed)
        self._reported = True
        after = outcome.record
        if (
            not outcome.changed
            and after is not None
            and after.state is State.CLOSED
            and rules.report_fits(after, report)
        ):
            # Closed, this generation, yet not counted: it lost every race. Not lost.
            tally.carry(report)
        tally.observe(after.gen if after is not None else 0)
        # Stretch the interval while the record takes more writes than one item should.
        counts = rules.window_counts(outcome.record, self._policy, now)
        interval = next_interval_ms(self._interval_ms, self._base_interval_ms, counts, self._policy)
        if not self._has_reported:
            # A newcomer joins at the interval the fleet already uses.
            self._has_reported = True
            joined = fleet_interval_ms(counts, self._policy, report.calls, now - self._started_ms)
            if joined is not None:
                interval = max(interval, min(joined, max_interval_ms(self._policy)))
        if interval != self._interval_ms:
            self._interval_ms = interval
            tally.reschedule(self._container_key, now, interval)
        if counts.calls:
            self._emit(
                "on_window", self.name, counts.calls, counts.failure_rate, counts.slow_call_rate
            )
        return outcome.record

    def _join_fleet(self, tally: CallTally, now: int) -> bool:
        """A newcomer whose first report is due: join the interval a hot fleet already uses.

        It reads the record first (one read in its life, and this refresh): the record tells
        how many calls the fleet's reports carry, and its own calls so far how fast it
        gathers them: together, the interval the others report at. Its newest buckets tell
        how fast reports arrive, which is all a fleet that started at once has to go on.
        Joining before the first write, not after it, keeps a thousand containers starting
        in the same second from adding a thousand writes a second.
        True when it joined (the counts then wait, spread by the interval's jitter).
        """
        record = self._store.load(self.name, now)
        counts = rules.window_counts(record, self._policy, now)
        if self._started_cold is None:
            self._started_cold = counts.reports == 0
        rate = write_rate(counts, self._policy)
        pending = tally.pending_calls()
        if rate < TARGET_REPORTS_PER_S / 2 or not pending:
            # A quiet record; or its first read, before any call of its own shows how fast
            # it gathers calls (nothing to report either).
            return False
        longest = max_interval_ms(self._policy)
        if self._started_cold:
            # The record was quiet when it started and is hot now: it started with a crowd
            # (Lambda adds up to 1,000 containers a second) whose size no record shows yet.
            # The longest interval is safe, the first report anywhere in it so the crowd's
            # first reports spread evenly; the report control shortens it if the crowd
            # turns out small.
            self._has_reported = True
            self._interval_ms = longest
            base = self._base_interval_ms
            tally.defer(now, longest, base + round(self.rng.random() * (longest - base)))
            self._refreshed(record, now)
            return True
        joined = fleet_interval_ms(counts, self._policy, pending, now - self._started_ms)
        by_rate = round(self._interval_ms * rate / TARGET_REPORTS_PER_S)
        interval = min(max(joined or 0, by_rate), longest)
        if interval <= self._interval_ms:
            return False
        self._has_reported = True  # joined: the first report's answer need not do it again
        self._interval_ms = interval
        tally.reschedule(self._container_key, now, self._interval_ms)
        self._refreshed(record, now)
        return True

    def _refreshed(self, record: Record | None, now: int) -> None:
        """Keep the record just read as fresh as the interval just joined says (the read's
        answer was cached under the base interval's estimate of the fleet)."""
        self._cache.put(record, now, self._fresh_ms(record, now))

    def _finish(self, admission: Admission, success: bool) -> None:
        if admission.decision is Decision.PROBE and admission.token is not None:
            self._settle(admission.token, success, self.clock())
        elif admission.state is State.DISABLED or success:
            return
        else:
            self._count_failure(self.clock())

    def _count_failure(self, now: int) -> RecordResult:
        observed = self._cache.last_seen
        outcome = self._store.record_failure(self.name, self._policy, now, observed)
        state = self._state_of(outcome.record)
        if outcome.changed:
            self._emit("on_failure_recorded", self.name, state)
            return RecordResult(True, state, "failure counted")
        return RecordResult(False, state, f"breaker is {state.value}: failure not counted")

    def _settle(self, token: str, success: bool, now: int) -> RecordResult:
        observed = self._cache.last_seen
        jitter = 1.0 - self.rng.random() * self.config.recovery_jitter
        report = ProbeReport(token, success, jitter)
        outcome = self._store.settle_probe(self.name, self._policy, now, report, observed)
        self._observe(outcome.record)
        state = self._state_of(outcome.record)
        self._emit("on_probe", self.name, success, outcome.changed)
        if outcome.changed:
            return RecordResult(True, state, f"probe {'succeeded' if success else 'failed'}")
        return RecordResult(False, state, "stale probe token: its lease has ended; nothing changed")

    def _force(self, target: State, reason: str | None = None, by: str | None = None) -> State:
        # Operator actions go to the store or fail loudly: a silent local override would
        # leave the rest of the fleet unaware of it.
        now = self.clock()
        if reason is None and by is None:
            outcome = self._store.force_state(self.name, self._policy, now, target)
        else:
            from fleetbreaker import tuning

            if not isinstance(self.store, AdminStore):
                raise ConfigError(
                    f"{type(self.store).__name__} cannot record who forced a breaker and why"
                )
            action = tuning.Action(
                target.value, by or tuning.local_user(), tuning.check_reason(reason), now
            )
            outcome = self._store.force_state(self.name, self._policy, now, target, action=action)
        if outcome.transition is not None:
            self._emit("on_transition", self.name, *outcome.transition)
            gen = outcome.record.gen if outcome.record is not None else 0
            change = StateChange(*outcome.transition, gen, rules.TransitionReason.OPERATOR)
            self._emit("on_state_change", self.name, change)
        return self._state_of(outcome.record)

    def _observe(self, record: Record | None) -> None:
        """Tell the tally the generation the store holds (its older counts are stale)."""
        tally = self._tally
        if tally is not None:
            tally.observe(record.gen if record is not None else 0)

    @staticmethod
    def _state_of(record: Record | None) -> State:
        return record.state if record is not None else State.CLOSED

    def _read(self, now: int) -> Record | None:
        hit, record = self._cache.get(now)
        if hit:
            return record
        if self._store.paused(now):  # answered locally: no store call to share
            return self._store.load(self.name, now)
        # One thread per container refreshes; the others wait for its answer (bounded: longer
        # than a store read can take) instead of sending the same read, or acting on a view
        # older than cache_ttl: that view may still say closed after the fleet tripped.
        if not self._cache.begin_refresh(wait_s=self._refresh_wait_s):
            return self._store.load(self.name, now)
        try:
            hit, record = self._cache.get(now)
            if hit:
                return record
            if self._tally is not None and not self._tally.stretched:
                # The report's answer is the fleet's record: it replaces the refresh read.
                # (Not while the interval is stretched: the record takes too many writes.)
                return self._flush(now, load_if_empty=True)
            # If the refresh this thread waited for failed, this answers locally.
            return self._store.load(self.name, now)
        finally:
            self._cache.end_refresh()

    def _answered(self, name: str, record: Record | None, now: int) -> None:
        # Every shared-store answer refreshes the cache; local answers never do.
        self._cache.put(record, now, self._fresh_ms(record, now))
        self._observe(record)
        # Live tuning travels with the record: a container applies it with the answer that
        # brings it, within cache_ttl, and the hot path reads a plain attribute.
        seen = self._cache.last_seen
        text = seen.tuned if seen is not None else ""
        if text != self._tuned_text:
            self._retune(text)

    def _fresh_ms(self, record: Record | None, now: int) -> int:
        """How long this answer stays fresh: cache_ttl, longer for a large fleet."""
        tally = self._tally
        if tally is None:
            return self._cache.ttl_ms  # the count policy's record does not show the fleet
        counts = rules.window_counts(record, self._policy, now)
        own_calls = tally.taken + tally.pending_calls()
        fleet = fleet_size(counts, self._policy, own_calls, now - self._started_ms)
        if not self._reported and self._started_cold and self._has_reported:
            # One of a crowd, waiting for its first report: the crowd's calls are not in the
            # window yet, so nothing shows its size. Refresh as a fleet large enough for the
            # longest wait (jittered), until its own report shows more.
            fleet = TARGET_REFRESHES_PER_S * MAX_REFRESH_STRETCH * self._cache.ttl_ms / 1000
        if fleet is not None:
            self._fleet = fleet
        return refresh_ms(self._fleet, self._cache.ttl_ms, self.rng)

    def _emit(self, hook: str, *args: Any) -> None:
        for method in self._hooks[hook]:
            try:
                method(*args)
            except Exception:
                log.exception("circuit %s: listener %r failed in %s", self.name, method, hook)


def _default_store() -> Store:
    from fleetbreaker.stores import from_env

    return from_env()
