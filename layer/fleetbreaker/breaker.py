"""The circuit breaker: admission, the protected call, and recording its outcome."""

from __future__ import annotations

import functools
import logging
import random
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, overload

from fleetbreaker import state as rules
from fleetbreaker.cache import RecordCache
from fleetbreaker.config import BreakerConfig
from fleetbreaker.errors import (
    CircuitOpenError,
    ConfigError,
    CorruptRecordError,
    InvalidTokenError,
    TableNotFoundError,
)
from fleetbreaker.events import BreakerListener, LoggingListener
from fleetbreaker.ramp import RecoveryRamp
from fleetbreaker.state import Decision, Outcome, Policy, Record, State
from fleetbreaker.stores.memory import MemoryStore

if TYPE_CHECKING:
    from typing import ParamSpec

    from fleetbreaker.stores.base import Store

    P = ParamSpec("P")

R = TypeVar("R")
Clock = Callable[[], int]
MAX_NAME_BYTES = 1024  # DynamoDB allows 2048 for a partition key; leave room for Redis keys

log = logging.getLogger("fleetbreaker")


def system_clock() -> int:
    """Epoch milliseconds from the wall clock (shared with other containers' clocks)."""
    return time.time_ns() // 1_000_000


def validate_name(name: object) -> str:
    if not isinstance(name, str):
        raise ConfigError(f"breaker name must be a string, got {type(name).__name__}")
    if not name or not name.strip():
        raise ConfigError("breaker name must not be empty")
    size = len(name.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        raise ConfigError(f"breaker name is {size} bytes; the limit is {MAX_NAME_BYTES} (UTF-8)")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise ConfigError(f"breaker name must not contain control characters: {name!r}")
    return name


@dataclass(frozen=True)
class Admission:
    """The breaker's answer for one call.

    ``token`` is set for a probe: pass it back to :meth:`CircuitBreaker.record` (it is what a
    Step Functions workflow carries between the gate's check and record steps).
    """

    name: str
    decision: Decision
    state: State
    retry_after: float = 0.0
    token: str | None = None
    degraded: bool = False

    @property
    def allowed(self) -> bool:
        return self.decision is not Decision.REJECT


@dataclass(frozen=True)
class RecordResult:
    """What :meth:`CircuitBreaker.record` did with an outcome."""

    applied: bool
    state: State
    detail: str


@dataclass
class BreakerStats:
    """Counters of one breaker instance in this container."""

    store_errors: int = 0
    degradations: int = 0
    corrupt_records: int = 0


_UNSET: Any = object()
_REFRESH_WAIT_S = 2.0  # longer than a store read can take with the default timeouts


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
        ``CIRCUIT_BREAKER_TABLE`` is set.
    config:
        A :class:`BreakerConfig`; defaults apply when omitted.
    fallback:
        Called instead of raising :class:`CircuitOpenError` when a call is rejected, as
        ``fallback(circuit, *args, **kwargs)`` where ``circuit`` is the rejecting
        :class:`Admission` and the rest are the call's own arguments.
    listeners:
        Event hooks; defaults to a :class:`LoggingListener`.
    clock, rng:
        Injectable epoch-millisecond clock and random source (tests move time by hand).

    Example
    -------
    >>> breaker = CircuitBreaker("payment-api", store=DynamoDBStore("CircuitBreakers"))
    >>> @breaker
    ... def charge(order): ...
    >>> breaker.call(charge, order)
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
    ) -> None:
        self.name = validate_name(name)
        if config is None:
            config = BreakerConfig()
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
        self.stats = BreakerStats()
        self._policy = Policy.from_config(config)
        self._cache = RecordCache(round(config.cache_ttl * 1000))
        self._local = MemoryStore()
        self._ramp = (
            RecoveryRamp(config.recovery_ramp_seconds) if config.recovery_ramp_seconds else None
        )
        self._lock = threading.Lock()
        self._paused_until = 0
        self._degraded = False
        self._missing_table_logged = False
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
        return self._degraded

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
        now = self.clock()
        record = self._read(now)
        verdict = rules.verdict(record, self._policy, now)
        if verdict.try_probe:
            nonce = secrets.token_hex(8)
            outcome = self._run(
                "claim_probe",
                now,
                lambda store: store.claim_probe(self.name, self._policy, now, nonce, record),
            )
            if outcome.token is not None:
                admission = Admission(
                    self.name, Decision.PROBE, State.HALF_OPEN, 0.0, outcome.token, self._degraded
                )
                self._emit("on_decision", self.name, admission.decision, admission.state)
                return admission
            verdict = rules.verdict(outcome.record, self._policy, now)
            if verdict.try_probe:  # lost every race for a slot: wait for the next lease to end
                verdict = rules.Verdict(Decision.REJECT, verdict.state, 100)
        if self._ramp is not None and verdict.state is State.CLOSED:
            # Recovery ramp: decided locally from the record already read (no store request).
            ramped_ms = self._ramp.rejects(record, now, self.rng.random())
            if ramped_ms:
                verdict = rules.Verdict(Decision.REJECT, State.CLOSED, ramped_ms)
        if verdict.decision is Decision.ALLOW and not self._degraded:
            admission = self._allow[verdict.state]  # the hot path: no allocation
        else:
            admission = Admission(
                self.name,
                verdict.decision,
                verdict.state,
                verdict.retry_after_ms / 1000,
                None,
                self._degraded,
            )
        self._emit("on_decision", self.name, admission.decision, admission.state)
        return admission

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
        if success:
            return RecordResult(True, self._state_of(self._read(now)), "success: nothing to write")
        return self._count_failure(now)

    def force_open(self) -> State:
        """Operator override: reject every call until :meth:`reset`."""
        return self._force(State.FORCED_OPEN)

    def disable(self) -> State:
        """Operator override: allow every call and record nothing until :meth:`reset`."""
        return self._force(State.DISABLED)

    def reset(self) -> State:
        """Release an override or close the breaker, forgetting failures and back-off."""
        return self._force(State.CLOSED)

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
        admission = self.check()
        if admission.decision is Decision.REJECT:
            self._emit("on_rejected", self.name, admission.state, admission.retry_after)
            if fallback is None:
                raise CircuitOpenError(self.name, admission.state, admission.retry_after)
            self._emit("on_fallback", self.name, admission.state)
            result: R = fallback(admission, *args, **kwargs)
            return result
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

    def _finish(self, admission: Admission, success: bool) -> None:
        if admission.decision is Decision.PROBE and admission.token is not None:
            self._settle(admission.token, success, self.clock())
        elif admission.state is State.DISABLED or success:
            return
        else:
            self._count_failure(self.clock())

    def _count_failure(self, now: int) -> RecordResult:
        observed = self._cache.last_seen
        outcome = self._run(
            "record_failure",
            now,
            lambda store: store.record_failure(self.name, self._policy, now, observed),
        )
        state = self._state_of(outcome.record)
        if outcome.changed:
            self._emit("on_failure_recorded", self.name, state)
            return RecordResult(True, state, "failure counted")
        return RecordResult(False, state, f"breaker is {state.value}: failure not counted")

    def _settle(self, token: str, success: bool, now: int) -> RecordResult:
        observed = self._cache.last_seen
        jitter = 1.0 - self.rng.random() * self.config.recovery_jitter
        outcome = self._run(
            "settle_probe",
            now,
            lambda store: store.settle_probe(
                self.name, self._policy, now, token, success, jitter, observed
            ),
        )
        state = self._state_of(outcome.record)
        self._emit("on_probe", self.name, success, outcome.changed)
        if outcome.changed:
            return RecordResult(True, state, f"probe {'succeeded' if success else 'failed'}")
        return RecordResult(False, state, "stale probe token: its lease has ended; nothing changed")

    def _force(self, target: State) -> State:
        # Operator actions go to the store or fail loudly: a silent local override would
        # leave the rest of the fleet unaware of it.
        now = self.clock()
        outcome = self.store.force_state(self.name, self._policy, now, target)
        self._cache.put(outcome.record, now)
        if outcome.transition is not None:
            self._emit("on_transition", self.name, *outcome.transition)
        return self._state_of(outcome.record)

    @staticmethod
    def _state_of(record: Record | None) -> State:
        return record.state if record is not None else State.CLOSED

    def _read(self, now: int) -> Record | None:
        hit, record = self._cache.get(now)
        if hit:
            return record
        if self._store_paused(now):
            return self._local.load(self.name, now)
        # One thread per container refreshes; the others wait for its answer (bounded: longer
        # than a store read can take) instead of sending the same read, or acting on a view
        # older than cache_ttl: that view may still say closed after the fleet tripped.
        if not self._cache.begin_refresh(wait_s=_REFRESH_WAIT_S):
            return self._load(now)
        try:
            hit, record = self._cache.get(now)
            if hit:
                return record
            if self._store_paused(now):  # the refresh this thread waited for failed
                return self._local.load(self.name, now)
            return self._load(now)
        finally:
            self._cache.end_refresh()

    def _load(self, now: int) -> Record | None:
        self._emit("on_store_call_start", self.name, "load")
        started = time.perf_counter()
        try:
            record = self.store.load(self.name, now)
        except CorruptRecordError as exc:
            self._store_call_done("load", started, ok=True)
            self.stats.corrupt_records += 1
            self._emit("on_corrupt_record", self.name, str(exc))
            record = None
        except Exception as exc:
            self._store_call_done("load", started, ok=False)
            self._degrade("load", exc, now)
            return self._local.load(self.name, now)
        else:
            self._store_call_done("load", started, ok=True)
        self._cache.put(record, now)
        return record

    def _run(self, operation: str, now: int, op: Callable[[Store], Outcome]) -> Outcome:
        """One store operation, or its local twin while the store is out of reach."""
        if self._store_paused(now):
            return op(self._local)
        self._emit("on_store_call_start", self.name, operation)
        started = time.perf_counter()
        try:
            outcome = op(self.store)
        except Exception as exc:
            self._store_call_done(operation, started, ok=False)
            self._degrade(operation, exc, now)
            return op(self._local)
        self._store_call_done(operation, started, ok=True)
        self._cache.put(outcome.record, now)
        if outcome.transition is not None:
            self._emit("on_transition", self.name, *outcome.transition)
        return outcome

    def _store_paused(self, now: int) -> bool:
        return self._degraded and now < self._paused_until

    def _store_call_done(self, operation: str, started: float, ok: bool) -> None:
        elapsed_ms = (time.perf_counter() - started) * 1000
        self._emit("on_store_call", self.name, operation, elapsed_ms, ok)
        if ok and self._degraded:
            with self._lock:
                recovered, self._degraded = self._degraded, False
            if recovered:
                # The fleet's record is authoritative again; local counts are dropped.
                self._local.seed(self.name, None)
                self._emit("on_recovered", self.name)

    def _degrade(self, operation: str, exc: Exception, now: int) -> None:
        with self._lock:
            first = not self._degraded
            self._degraded = True
            self._paused_until = now + round(self.config.store_backoff_seconds * 1000)
            if first:
                # Start from the fleet's last known state: a breaker last seen open keeps
                # rejecting until its open window ends.
                self._local.seed(self.name, self._cache.last_seen)
            self.stats.store_errors += 1
            if first:
                self.stats.degradations += 1
            quiet = isinstance(exc, TableNotFoundError) and self._missing_table_logged
            if isinstance(exc, TableNotFoundError):
                self._missing_table_logged = True
        if not quiet:
            self._emit("on_store_error", self.name, operation, exc)
        if first:
            # The error itself was just reported; the reason stays short and generic.
            self._emit("on_degraded", self.name, f"store {operation} failed")

    def _emit(self, hook: str, *args: Any) -> None:
        for method in self._hooks[hook]:
            try:
                method(*args)
            except Exception:
                log.exception("circuit %s: listener %r failed in %s", self.name, method, hook)


def _default_store() -> Store:
    import os

    from fleetbreaker.stores.dynamodb import TABLE_ENV, DynamoDBStore
    from fleetbreaker.stores.redis import URL_ENV, RedisStore

    # Redis first: a stack that adds a cache keeps its table, and the URL is the opt-in.
    if os.environ.get(URL_ENV):
        return RedisStore()
    if os.environ.get(TABLE_ENV):
        return DynamoDBStore()
    raise ConfigError(
        f"CircuitBreaker needs a store: pass store=DynamoDBStore(...), RedisStore(...) or "
        f"MemoryStore(), or set {TABLE_ENV} to use DynamoDB ({URL_ENV} for Redis)"
    )
