"""Degraded mode as a store: the shared store while it answers, a local twin while it cannot.

:class:`FallbackStore` wraps the fleet's shared store. Every operation goes to the shared
store under a total wall-clock deadline; a store error, or an answer that misses the deadline,
switches the wrapper to a per-container :class:`MemoryStore` seeded with the last record the
shared store returned (a breaker last seen open keeps rejecting until its open window ends),
and the shared store is left alone for a back-off measured from when the failure was seen.
The first successful shared answer after that drops the local state again.

Every answer comes back as a value to whoever asked: a write's
:class:`~fleetbreaker.record.Outcome` says by ``local`` whether the local twin gave it, and
:meth:`FallbackStore.read` is a load answered the same way. The wrapper calls nothing back:
the breaker puts each answer into its cache, its strategy and live tuning, in one place
(:meth:`fleetbreaker.core.CallCore.answered`).

:class:`~fleetbreaker.CircuitBreaker` wraps its store in one of these; it can also be used on
its own, since it implements the same store contract.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from fleetbreaker.clock import system_clock
from fleetbreaker.errors import (
    ConfigError,
    CorruptRecordError,
    StoreDeadlineError,
    StoreMisconfiguredError,
)
from fleetbreaker.events import (
    STORE_ANSWERED,
    STORE_DEADLINE,
    STORE_ERROR,
    STORE_INTERRUPTED,
    StateChange,
)
from fleetbreaker.frozen import replace
from fleetbreaker.policy import alone, check_weight
from fleetbreaker.record import Outcome, Record, State, TransitionReason
from fleetbreaker.results import StoreErrorStats
from fleetbreaker.rules import sliding_window, transition_reason
from fleetbreaker.stores import deadline
from fleetbreaker.stores.base import StoreStats

if TYPE_CHECKING:
    from fleetbreaker.policy import Policy
    from fleetbreaker.record import Action, ProbeReport, Report
    from fleetbreaker.stores.base import Store
    from fleetbreaker.stores.memory import MemoryStore

T = TypeVar("T")
Clock = Callable[[], int]
Emit = Callable[..., None]
Reason = Callable[["Outcome"], TransitionReason]


def _ignore(*_: Any) -> None:
    return None


class FallbackStore:
    """A store that falls back to local, per-container state when the shared one fails.

    Parameters
    ----------
    shared:
        The fleet's store (``DynamoDBStore``, ``RedisStore``, ...).
    local:
        The local twin (default: a new :class:`MemoryStore`).
    clock:
        Epoch-millisecond clock that stamps when a failure was seen (the back-off starts
        then, however long the failed call took).
    backoff_seconds:
        How long the shared store is left alone after a failure (0: retry on the next call).
    deadline_seconds:
        Total wall-clock time one shared operation may take, retries and slow replies
        included; past it the operation counts as a store error. None: no deadline (the
        call runs on the caller's thread, as it always does for a plain MemoryStore).
    emit:
        ``emit(hook, name, *args)`` receives the listener events (``on_store_call_start``,
        ``on_store_result``, ``on_store_call``, ``on_store_error``, ``on_degraded``,
        ``on_store_misconfigured``, ``on_recovered``, ``on_corrupt_record``,
        ``on_state_change``).
    watch_calls:
        Whether each operation is told to ``on_store_call_start``, ``on_store_result`` and
        ``on_store_call`` (with how it ended and how long it took). ``CircuitBreaker``
        passes False when none of its listeners has those hooks: every store call is then
        spared them and its clock reads. The other events are emitted either way.

    Example
    -------
    >>> from fleetbreaker.policy import Policy
    >>> store = FallbackStore(MemoryStore(), clock=lambda: 0)
    >>> policy = Policy.from_config(BreakerConfig(failure_threshold=1))
    >>> store.record_failure("payment-api", policy, 0, None).record.state
    <State.OPEN: 'open'>
    >>> store.degraded
    False
    """

    def __init__(
        self,
        shared: Store,
        local: MemoryStore | None = None,
        *,
        clock: Clock | None = None,
        backoff_seconds: float = 5.0,
        deadline_seconds: float | None = 1.0,
        emit: Emit | None = None,
        watch_calls: bool = True,
    ) -> None:
        if isinstance(backoff_seconds, bool) or not isinstance(backoff_seconds, (int, float)):
            raise ConfigError(f"backoff_seconds must be a number, got {backoff_seconds!r}")
        from fleetbreaker.config import MAX_DEADLINE_SECONDS, MAX_SECONDS

        if not 0 <= backoff_seconds <= MAX_SECONDS:
            raise ConfigError(
                f"backoff_seconds must be >= 0 and at most {MAX_SECONDS:,.0f}, "
                f"got {backoff_seconds!r}"
            )
        if deadline_seconds is not None and (
            isinstance(deadline_seconds, bool)
            or not isinstance(deadline_seconds, (int, float))
            or not 0 < deadline_seconds <= MAX_DEADLINE_SECONDS
        ):
            # Bounded: a wait past threading.TIMEOUT_MAX raises OverflowError on every call.
            raise ConfigError(
                "deadline_seconds must be a positive number or None (at most "
                f"{MAX_DEADLINE_SECONDS:g}), got {deadline_seconds!r}"
            )
        self.shared = shared
        self.kind = store_kind(shared)
        # The local twin is built on the first degradation: a healthy breaker never loads it.
        self._local = local
        self._local_lock = threading.Lock()
        self.clock: Clock = clock or system_clock
        self.backoff_ms = round(backoff_seconds * 1000)
        # The package's own MemoryStore answers from this process's memory with nothing to
        # wait for: it skips the worker hand-off (about 70 us a call).
        # (Not loaded yet: then ``shared`` cannot be one.)
        memory = sys.modules.get("fleetbreaker.stores.memory")
        in_process = memory is not None and type(shared) is memory.MemoryStore
        self.deadline_seconds = None if in_process else deadline_seconds
        self.stats = StoreStats()
        self.fallback_stats = StoreErrorStats()
        self._emit: Emit = emit or _ignore
        self.watch_calls = watch_calls
        self._slots = deadline.CallSlots()
        self._lock = threading.Lock()
        self._degraded = False
        self._paused_until = 0
        # Each breaker owns one wrapper: the last record the shared store returned (and its
        # name) is what a degradation starts the local twin from.
        self._last_seen: tuple[str, Record | None] | None = None
        # A misconfigured store fails every operation alike: its error is reported once per
        # breaker (and logged once per process, by LoggingListener), though counted each time.
        self._misconfiguration_reported = False
        self._prepared = False

    def __repr__(self) -> str:
        return f"FallbackStore({self.shared!r})"

    @property
    def local(self) -> MemoryStore:
        """The per-container twin that answers while the shared store cannot."""
        local = self._local
        if local is None:
            with self._local_lock:
                if self._local is None:
                    from fleetbreaker.stores.memory import MemoryStore

                    self._local = MemoryStore()
                local = self._local
        return local

    @property
    def degraded(self) -> bool:
        """True from a shared-store failure until the shared store answers again."""
        return self._degraded

    def paused(self, now_ms: int) -> bool:
        """Whether an operation at ``now_ms`` is answered locally without asking the store."""
        return self._degraded and now_ms < self._paused_until

    # -- the contract ----------------------------------------------------------------------

    def load(self, name: str, now_ms: int) -> Record | None:
        return self.read(name, now_ms).record

    def read(self, name: str, now_ms: int, *, strict: bool = False) -> Outcome:
        """A load, answered as a value: the record in an Outcome whose ``local`` says
        whether the local twin answered it (degraded) rather than the shared store.

        ``strict``: a misconfigured store raises :class:`ConfigError` (:meth:`verify`).
        """
        # Every cache refresh of a breaker is one of these: the checks of paused() and
        # _call() are written out, a frame each fewer.
        self.stats.count_read()
        if self._degraded and now_ms < self._paused_until:
            return _local_answer(self.local.load(name, now_ms))
        watched = self.watch_calls
        # None: the store-call hooks are not told of this call (_call_done).
        started = time.perf_counter() if watched else None
        try:
            # Inside the try: an interrupt during a listener's start hook still ends the
            # spans the listeners before it opened.
            if watched:
                self._emit("on_store_call_start", name, "load")
            if self._prepared and self.deadline_seconds is None:
                record = self.shared.load(name, now_ms)  # in process: nothing to bound
            else:
                record = self._call("load", name, lambda: self.shared.load(name, now_ms))
        except CorruptRecordError as exc:
            # The store answered; its record is unusable and counts as closed until the next
            # write replaces it.
            self._call_done(name, "load", started, None)
            self.fallback_stats.corrupt_records += 1
            self._emit("on_corrupt_record", name, str(exc))
            record = None
        except Exception as exc:
            self._call_done(name, "load", started, exc)
            if strict and isinstance(exc, StoreMisconfiguredError):
                raise ConfigError(f"the breaker's store is misconfigured: {exc}") from exc
            self._degrade(name, "load", exc)
            return _local_answer(self.local.load(name, now_ms))
        except BaseException as exc:
            self._call_done(name, "load", started, exc)
            raise
        else:
            if watched or self._degraded:  # (what _call_done would do, else nothing)
                self._call_done(name, "load", started, None)
        # What a degradation seeds the local twin from (_seen, written out).
        self._last_seen = (name, record)
        return Outcome(record)

    def verify(self, name: str, now_ms: int) -> Outcome:
        """One read of breaker ``name`` that raises :class:`ConfigError` when the store is
        misconfigured (:class:`~fleetbreaker.errors.StoreMisconfiguredError`: no such table,
        access denied, login refused), with the store's own message.

        Weather is let through: a store that is unreachable, slow or throttling leaves this
        wrapper degraded, as the first call would. The answer is returned as :meth:`read`
        returns it (``CircuitBreaker`` calls this at construction when ``verify_store`` is
        set, and caches a shared answer).
        """
        return self.read(name, now_ms, strict=True)

    def record_failure(
        self, name: str, policy: Policy, now_ms: int, observed: Record | None, weight: int = 1
    ) -> Outcome:
        if weight == 1:
            return self._forward("record_failure", name, policy, now_ms, observed, own_quorum=True)
        check_weight(weight)  # a caller's bug: raised, not taken for a store failure

        def send(store: Store) -> Outcome:
            if store is not self.shared:
                # The local twin is this container alone: its failures count once each.
                return store.record_failure(name, alone(policy), now_ms, observed)
            return store.record_failure(name, policy, now_ms, observed, weight)

        return self._operation("record_failure", name, now_ms, send, _reason_by_states(policy))

    def claim_probe(
        self, name: str, policy: Policy, now_ms: int, nonce: str, observed: Record | None
    ) -> Outcome:
        return self._forward("claim_probe", name, policy, now_ms, nonce, observed)

    def settle_probe(
        self, name: str, policy: Policy, now_ms: int, report: ProbeReport, observed: Record | None
    ) -> Outcome:
        return self._forward("settle_probe", name, policy, now_ms, report, observed)

    def report(
        self, name: str, policy: Policy, now_ms: int, report: Report, observed: Record | None
    ) -> Outcome:
        def reason(outcome: Outcome) -> TransitionReason:
            # The tripping write saw the window with this report in it: failures or slow calls.
            counts = sliding_window(policy).counts(
                sliding_window(policy).add(observed or Record(), now_ms, report), now_ms
            )
            before, after = outcome.transition or (State.CLOSED, State.OPEN)
            return transition_reason(before, after, policy, counts)

        return self._forward(
            "report", name, policy, now_ms, report, observed, own_quorum=True, reason=reason
        )

    def _forward(
        self,
        operation: str,
        name: str,
        policy: Policy,
        now_ms: int,
        *args: Any,
        own_quorum: bool = False,
        reason: Reason | None = None,
    ) -> Outcome:
        """One contract operation on the shared store, else on the local twin.

        ``own_quorum``: on the local twin the container is its own quorum (docs/architecture.md,
        "Store trouble"). ``reason`` says why a transition happened (default: from the states).
        """

        def send(store: Store) -> Outcome:
            used = alone(policy) if own_quorum and store is not self.shared else policy
            method: Callable[..., Outcome] = getattr(store, operation)
            return method(name, used, now_ms, *args)

        return self._operation(operation, name, now_ms, send, reason or _reason_by_states(policy))

    def census(self, name: str, policy: Policy, now_ms: int, observed: Record | None) -> Outcome:
        return self._forward("census", name, policy, now_ms, observed)

    def force_state(
        self, name: str, policy: Policy, now_ms: int, target: State, *, action: Action | None = None
    ) -> Outcome:
        # Operator actions go to the shared store or fail loudly: a silent local override
        # would leave the rest of the fleet unaware of it. The deadline still holds.
        self.stats.count_write()

        def force() -> Outcome:
            if action is None:
                return self.shared.force_state(name, policy, now_ms, target)
            # Only an AdminStore takes an action; the breaker checked the shared store is one.
            forced: Outcome = self.shared.force_state(  # type: ignore[call-arg]
                name, policy, now_ms, target, action=action
            )
            return forced

        outcome = _shared(self._call("force_state", name, force))
        self._seen(name, outcome.record)
        self._changed(name, outcome, TransitionReason.OPERATOR)
        return outcome

    # -- after a restored snapshot --------------------------------------------------------

    def restart(self) -> None:
        """Start over as a new container's store (after a restored snapshot).

        The shared store drops its connections (its ``drop_connections()``, when it has
        one), so the next operation opens a fresh one; this wrapper forgets the record it
        last saw, leaves degraded mode with its back-off and its local twin's counts (they
        were the snapshot's container's), and runs its calls on a new worker pool with new
        slots (:func:`~fleetbreaker.stores.deadline.restart_workers`: the pool is the
        process's, replaced by each store that restarts, before any of them calls again).
        """
        deadline.restart_workers()
        self._lock = threading.Lock()
        self._slots = deadline.CallSlots()
        self._degraded = False
        self._paused_until = 0
        self._last_seen = None
        if self._local is not None:
            self._local.clear()
        drop = getattr(self.shared, "drop_connections", None)
        if callable(drop):
            drop()

    # -- internals -------------------------------------------------------------------------

    def _call(self, operation: str, name: str, job: Callable[[], T]) -> T:
        if not self._prepared:
            # Building a client (boto3's takes 100 ms to over a second in a small, cold
            # Lambda) is cold start, not a store round trip: it runs outside the deadline,
            # once. A failure here is a store error like any other.
            prepare = getattr(self.shared, "prepare", None)
            if callable(prepare):
                prepare()
            self._prepared = True
        if self.deadline_seconds is None:
            return job()
        what = f"store {operation} for breaker {name!r}"
        return deadline.run_within(job, self.deadline_seconds, what, self._slots)

    def _operation(
        self,
        operation: str,
        name: str,
        now_ms: int,
        op: Callable[[Store], Outcome],
        reason: Reason,
    ) -> Outcome:
        self.stats.count_write()
        if self.paused(now_ms):
            return _local(op(self.local))
        watched = self.watch_calls
        # None: the store-call hooks are not told of this call (_call_done).
        started = time.perf_counter() if watched else None
        try:
            if watched:
                self._emit("on_store_call_start", name, operation)
            outcome = _shared(self._call(operation, name, lambda: op(self.shared)))
        except Exception as exc:
            self._call_done(name, operation, started, exc)
            self._degrade(name, operation, exc)
            return _local(op(self.local))
        except BaseException as exc:
            # KeyboardInterrupt, SystemExit: not the store's failure (no degradation), but
            # the listeners close what they opened (a span, its context) before it goes on.
            self._call_done(name, operation, started, exc)
            raise
        if watched or self._degraded:  # (what _call_done would do, else nothing)
            self._call_done(name, operation, started, None)
        self._seen(name, outcome.record)
        if outcome.transition is not None:
            self._changed(name, outcome, reason(outcome))
        return outcome

    def _changed(self, name: str, outcome: Outcome, reason: TransitionReason) -> None:
        """The one place a state change this container's write made is told (the shared
        store's: the local twin's changes are this container's alone)."""
        if outcome.transition is None:
            return
        gen = outcome.record.gen if outcome.record is not None else 0
        self._emit("on_state_change", name, StateChange(*outcome.transition, gen, reason))

    def _seen(self, name: str, record: Record | None) -> None:
        # What a degradation seeds the local twin from; the answer itself goes back to the
        # caller, which caches it (no hook from here into the breaker).
        self._last_seen = (name, record)

    def _call_done(
        self, name: str, operation: str, started: float | None, error: BaseException | None
    ) -> None:
        ok = error is None
        if started is not None:  # the call's start was told: its end is told too
            elapsed_ms = (time.perf_counter() - started) * 1000
            if ok:
                outcome = STORE_ANSWERED
            elif isinstance(error, StoreDeadlineError):
                outcome = STORE_DEADLINE
            elif isinstance(error, Exception):
                outcome = STORE_ERROR
            else:
                outcome = STORE_INTERRUPTED
            try:
                self._emit("on_store_result", name, operation, self.kind, outcome, error)
            finally:
                self._emit("on_store_call", name, operation, elapsed_ms, ok)
        if ok and self._degraded:
            with self._lock:
                recovered, self._degraded = self._degraded, False
                if recovered:
                    # The fleet's record is authoritative again; local counts are dropped.
                    self.local.clear()
            if recovered:
                self._emit("on_recovered", name)

    def _degrade(self, name: str, operation: str, exc: Exception) -> None:
        # The back-off starts when the failure was seen, not when the call started: a call
        # that failed slowly (an SDK retrying a refused connection for 25 s) must not leave
        # the back-off already over.
        seen_at = self.clock()
        with self._lock:
            first = not self._degraded
            self._degraded = True
            self._paused_until = seen_at + self.backoff_ms
            if first and self._last_seen is not None:
                # Start from the fleet's last known state: a breaker last seen open keeps
                # rejecting until its open window ends.
                self.local.seed(*self._last_seen)
            self.fallback_stats.store_errors += 1
            if first:
                self.fallback_stats.degradations += 1
            misconfigured = exc if isinstance(exc, StoreMisconfiguredError) else None
            quiet = misconfigured is not None and self._misconfiguration_reported
            if misconfigured is not None:
                self._misconfiguration_reported = True
        if not quiet:
            self._emit("on_store_error", name, operation, exc)
        if misconfigured is not None:
            # Configuration, not weather: every occurrence is counted (an alarm stays raised
            # while it lasts), and the listener decides how often to log it.
            self._emit("on_store_misconfigured", name, operation, misconfigured)
        if first:
            # The error itself was just reported; the reason stays short and generic.
            self._emit("on_degraded", name, f"store {operation} failed")


def store_kind(store: object) -> str:
    """A store's kind as tracing shows it: ``DynamoDBStore`` is ``dynamodb``."""
    kind = getattr(store, "kind", None)
    if isinstance(kind, str) and kind:
        return kind
    name = type(store).__name__
    return (name[: -len("Store")] if name.endswith("Store") and name != "Store" else name).lower()


def _local(outcome: Outcome) -> Outcome:
    """The local twin's answer, marked as this container's alone (never the fleet's record:
    a breaker does not cache it as one)."""
    return replace(outcome, local=True)


def _shared(outcome: Outcome) -> Outcome:
    """The shared store's answer, which is the fleet's record to this wrapper, whatever the
    store behind it is (a FallbackStore of the user's own answers from its twin)."""
    return replace(outcome, local=False) if outcome.local else outcome


def _local_answer(record: Record | None) -> Outcome:
    return Outcome(record, local=True)


def _reason_by_states(policy: Policy) -> Reason:
    def reason(outcome: Outcome) -> TransitionReason:
        before, after = outcome.transition or (State.CLOSED, State.CLOSED)
        return transition_reason(before, after, policy)

    return reason
