"""The circuit breaker: admission, the protected call, and recording its outcome."""

from __future__ import annotations

import functools
import logging
import math
import random
import secrets
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from fleetbreaker import state as rules
from fleetbreaker.cache import RecordCache
from fleetbreaker.config import BreakerConfig
from fleetbreaker.controls import OperatorControls
from fleetbreaker.errors import CircuitOpenError, ConfigError, InvalidTokenError
from fleetbreaker.events import BreakerListener, Hooks, LoggingListener
from fleetbreaker.frozen import replace
from fleetbreaker.naming import process_container_id, validate_container_id, validate_name
from fleetbreaker.results import Admission, RecordResult, StoreErrorStats
from fleetbreaker.state import Decision, Policy, ProbeReport, Record, State
from fleetbreaker.stores.fallback import FallbackStore

if TYPE_CHECKING:
    from typing import ParamSpec

    from fleetbreaker.ramp import RecoveryRamp
    from fleetbreaker.refresh import Census
    from fleetbreaker.reporting import Reporter
    from fleetbreaker.shadow import ShadowMode
    from fleetbreaker.snapshot import Snapshot
    from fleetbreaker.stores.base import Store

    P = ParamSpec("P")

R = TypeVar("R")
Clock = Callable[[], int]

log = logging.getLogger("fleetbreaker")


def system_clock() -> int:
    """Epoch milliseconds from the wall clock (shared with other containers' clocks)."""
    return time.time_ns() // 1_000_000


# Enum members read through their class cost a descriptor call on Python 3.11 (about ten
# times a module global's read, three of them per decision): the hot path reads these.
_ALLOW, _PROBE, _REJECT = Decision.ALLOW, Decision.PROBE, Decision.REJECT
_CLOSED, _DISABLED = State.CLOSED, State.DISABLED

_UNSET: Any = object()


class CircuitBreaker(OperatorControls):
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
        self._shadow: ShadowMode | None = None
        self._cache = RecordCache(round(config.cache_ttl * 1000))
        # A store that decides on its own clock refused a probe claim of this generation
        # until this time (on our clock): (gen, until_ms). See _admit.
        self._claim_barred: tuple[int, int] | None = None
        # Waiting for another thread's refresh: longer than a store read can take.
        self._refresh_wait_s = config.store_deadline_seconds + 1.0
        self._hooks = Hooks(self.listeners, self.name)
        self._emit = self._hooks.emit
        self._decision_hooks = self._hooks.decision
        self._store = FallbackStore(
            self.store,
            clock=self.clock,
            backoff_seconds=config.store_backoff_seconds,
            deadline_seconds=config.store_deadline_seconds,
            emit=self._emit,
            on_answer=self._answered,
        )
        self.stats: StoreErrorStats = self._store.fallback_stats
        self._ramp: RecoveryRamp | None = None
        if config.recovery_ramp_seconds:
            from fleetbreaker.ramp import RecoveryRamp

            self._ramp = RecoveryRamp(config.recovery_ramp_seconds)
        self._allow = {state: Admission(self.name, _ALLOW, state) for state in (_CLOSED, _DISABLED)}
        self.container_id = (
            process_container_id() if container_id is None else validate_container_id(container_id)
        )
        # Rate policy, slow calls, quorum: calls are tallied and reported in batches by a
        # reporter, built (with its module) when the settings first ask for one.
        self._reporter: Reporter | None = None
        self._reporting: Reporter | None = None  # the reporter while the settings report
        # The plain count policy's fleet-size signal, built (with its module) at the first
        # refresh: its census writes stretch a large fleet's refreshes and thin its failure
        # writes (fleetbreaker.refresh.Census).
        self._census: Census | None = None
        if config.reporting and not callable(getattr(self.store, "report", None)):
            raise ConfigError(
                f"{type(self.store).__name__} has no report operation: the rate policy, slow "
                "calls and min_containers need one (every store of this package has it)"
            )
        self._adopt_reporting(config, self._policy)
        self._adopt_mode(config)
        if config.verify_store:  # a misconfigured store fails init (ConfigError), weather not
            self._store.verify(self.name, self.clock())

    def __repr__(self) -> str:
        return f"CircuitBreaker({self.name!r}, store={type(self.store).__name__})"

    # -- public API ------------------------------------------------------------------------

    @property
    def state(self) -> State:
        """The breaker's state as this container sees it (cached for ``cache_ttl``)."""
        record = self._read(self.clock())
        return record.state if record is not None else _CLOSED

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

    def report_hung_calls(self) -> int:
        """Report the calls running past ``slow_call_duration`` as slow calls, now.

        The breaker's watcher thread does this every quarter of that duration; a simulation
        or a test with an injected clock calls it after moving the clock. Returns how many
        calls it reported.
        """
        reporting = self._reporting
        return reporting.report_hung_calls() if reporting is not None else 0

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

    def check(self, *, probe_seconds: float | None = None) -> Admission:
        """Decide one call without running anything: allow, probe (with a token) or reject.

        Pair it with :meth:`record`. ``call`` and the decorator do both for you.

        ``probe_seconds`` is how long the call may take (its deadline, e.g. a workflow step's
        timeout): should this check win a probe, its lease lasts that long, capped by
        ``probe_lease_seconds``, so callers turned away meanwhile are told to come back at
        the probe's deadline rather than at the end of a whole lease. Default: the lease.
        """
        if probe_seconds is None:
            return self._admit(self.clock())
        if (
            isinstance(probe_seconds, bool)
            or not isinstance(probe_seconds, (int, float))
            or not 0 < probe_seconds < math.inf
        ):
            raise ValueError(f"probe_seconds must be a positive number, got {probe_seconds!r}")
        return self._admit(self.clock(), max(1, round(probe_seconds * 1000)))

    def _admit(self, now: int, lease_ms: int | None = None) -> Admission:
        record = self._read(now)
        verdict = rules.verdict(record, self._policy, now)
        if verdict.decision is _PROBE and (
            self._claim_barred is not None or self._census is not None
        ):
            verdict = self._keep_refusal(record, verdict, now)
        if verdict.decision is _PROBE and self._shadow is not None:
            # No lease while the call runs: an enforcing container must be able to probe.
            return self._shadow.admission(verdict, _PROBE)
        if verdict.decision is _PROBE:
            nonce = secrets.token_hex(8)
            policy = self._policy
            if lease_ms is not None and lease_ms < policy.lease_ms:
                policy = replace(policy, lease_ms=lease_ms)
            outcome = self._store.claim_probe(self.name, policy, now, nonce, record)
            self._observe(outcome.record)
            if outcome.token is not None:
                admission = Admission(
                    self.name, _PROBE, State.HALF_OPEN, 0.0, outcome.token, self.degraded
                )
                self._emit("on_decision", self.name, admission.decision, admission.state)
                return admission
            verdict = rules.verdict(outcome.record, self._policy, now)
            wait = outcome.retry_after_ms
            if verdict.decision is _PROBE and wait and outcome.record is not None:
                self._claim_barred = (outcome.record.gen, now + wait)
                verdict = rules.Verdict(_REJECT, verdict.state, wait)
            elif verdict.decision is _PROBE:
                # Lost every race for a slot: wait for the next lease to end.
                verdict = rules.Verdict(_REJECT, verdict.state, 100)
        if self._ramp is not None and verdict.state is _CLOSED:
            # Recovery ramp: decided locally from the record already read (no store request).
            ramped_ms = self._ramp.rejects(record, now, self.rng.random())
            if ramped_ms:
                verdict = rules.Verdict(_REJECT, _CLOSED, ramped_ms)
        degraded = self._store.degraded
        if verdict.decision is _ALLOW and not degraded:
            admission = self._allow[verdict.state]  # the hot path: no allocation
        elif verdict.decision is _REJECT and self._shadow is not None:
            return self._shadow.admission(verdict, _REJECT)
        else:
            admission = Admission(
                self.name,
                verdict.decision,
                verdict.state,
                verdict.retry_after_ms / 1000,
                None,
                degraded,
            )
        for hook in self._decision_hooks:  # inline: every admitted call passes here
            try:
                hook(self.name, admission.decision, admission.state)
            except Exception:
                self._hooks.failed(hook, "on_decision")
        return admission

    def _thin_claim(self, verdict: rules.Verdict) -> rules.Verdict:
        """A large count-policy fleet claims a probe with probability 1 / weight, as it writes
        failures (refresh.failure_weight): not thousands of claim writes in the second an
        open window ends. One that does not claim is turned away as a lost race is."""
        census = self._census
        if census is None or self._reporting is not None or self._shadow is not None:
            return verdict
        if self._store.degraded:
            return verdict
        weight = census.failure_weight()
        if weight <= 1 or self.rng.random() * weight < 1:
            return verdict
        return rules.Verdict(_REJECT, verdict.state, 100)

    def _keep_refusal(
        self, record: Record | None, verdict: rules.Verdict, now: int
    ) -> rules.Verdict:
        """The store refused a claim on its own clock, for this generation: ours runs ahead.

        Keep its answer until it said, instead of asking again on every call. Else, in a
        large count-policy fleet, claim only with probability 1 / weight (_thin_claim).
        """
        barred = self._claim_barred
        if barred is None or record is None or record.gen != barred[0] or now >= barred[1]:
            return self._thin_claim(verdict)
        return rules.Verdict(_REJECT, verdict.state, barred[1] - now)

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
        if self._shadow is not None:
            shadowed = self._shadow.outcome(success, now)
            if shadowed is not None:
                return shadowed
        reporting = self._reporting
        if reporting is not None:
            reporting.count(success, now)
            return RecordResult(True, self._state_of(self._cache.last_seen), "call tallied")
        if success:
            return RecordResult(True, self._state_of(self._read(now)), "success: nothing to write")
        return self._count_failure(now)

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
        if admission.decision is _REJECT:
            self._emit("on_rejected", self.name, admission.state, admission.retry_after_s)
            if fallback is None:
                raise CircuitOpenError(self.name, admission.state, admission.retry_after_s)
            self._emit("on_fallback", self.name, admission.state)
            result: R = fallback(admission, *args, **kwargs)
            return result
        if admission.shadow is not None:
            return self._shadow_mode().call(admission, fn, args, kwargs)
        reporting = self._reporting
        if reporting is not None and admission.decision is _ALLOW:
            if admission.state is _DISABLED:
                return fn(*args, **kwargs)
            return reporting.run(now, fn, args, kwargs)
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            self._finish(admission, success=not self.config.counts_exception(exc))
            raise
        except BaseException:
            # Interrupted (SystemExit, KeyboardInterrupt): no verdict on the dependency. A
            # probe lease simply runs out.
            raise
        self._finish(admission, success=not self._judge(result))
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

    def _finish(self, admission: Admission, success: bool) -> None:
        if admission.decision is _PROBE and admission.token is not None:
            self._settle(admission.token, success, self.clock())
        elif admission.state is _DISABLED or success:
            return
        else:
            self._count_failure(self.clock())

    def _count_failure(self, now: int) -> RecordResult:
        observed = self._cache.last_seen
        census = self._census
        weight = census.failure_weight() if census is not None else 1
        if weight > 1 and not self._store.degraded:
            # A large fleet: written with probability 1 / weight, counted weight times.
            if self.rng.random() * weight >= 1:
                state = self._state_of(observed)
                return RecordResult(False, state, f"failure not written: 1 in {weight} is")
            outcome = self._store.record_failure(self.name, self._policy, now, observed, weight)
        else:
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

    def _observe(self, record: Record | None) -> None:
        """Tell the tally the generation the store holds (its older counts are stale)."""
        reporting = self._reporting
        if reporting is not None:
            reporting.observe(record)

    @staticmethod
    def _state_of(record: Record | None) -> State:
        return record.state if record is not None else _CLOSED

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
            reporting = self._reporting
            if reporting is not None and reporting.refreshes_by_report:
                # The report's answer is the fleet's record: it replaces the refresh read.
                return reporting.flush(now, load_if_empty=True)
            if reporting is None:
                # The plain count policy: a read, or now and then a census write instead.
                return self._count_census(now).refresh(self._policy, now, self._cache.last_seen)
            # If the refresh this thread waited for failed, this answers locally.
            return self._store.load(self.name, now)
        finally:
            self._cache.end_refresh()

    def _count_census(self, now: int) -> Census:
        census = self._census
        if census is None:
            from fleetbreaker.naming import container_key
            from fleetbreaker.refresh import Census

            census = self._census = Census(
                self.name,
                self._store,
                self._cache.ttl_ms,
                container_key(self.container_id),
                self.rng,
                now,
                round(self.config.recovery_ramp_seconds * 1000),
                callable(getattr(self.store, "report", None)),
            )
        return census


def _default_store() -> Store:
    from fleetbreaker.stores import from_env

    return from_env()
