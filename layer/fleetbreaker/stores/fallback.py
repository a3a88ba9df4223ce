"""Degraded mode as a store: the shared store while it answers, a local twin while it cannot.

:class:`FallbackStore` wraps the fleet's shared store. Every operation goes to the shared
store under a total wall-clock deadline; a store error, or an answer that misses the deadline,
switches the wrapper to a per-container :class:`MemoryStore` seeded with the last record the
shared store returned (a breaker last seen open keeps rejecting until its open window ends),
and the shared store is left alone for a back-off measured from when the failure was seen.
The first successful shared answer after that drops the local state again.

:class:`~fleetbreaker.CircuitBreaker` wraps its store in one of these; it can also be used on
its own, since it implements the same store contract.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from fleetbreaker import state as rules
from fleetbreaker.errors import (
    ConfigError,
    CorruptRecordError,
    StoreDeadlineError,
    TableNotFoundError,
)
from fleetbreaker.events import STORE_ANSWERED, STORE_DEADLINE, STORE_ERROR, StateChange
from fleetbreaker.frozen import mutable_value
from fleetbreaker.state import (
    Record,
    State,
    TransitionReason,
    add_report,
    transition_reason,
    window_counts,
)
from fleetbreaker.stores.base import StoreStats
from fleetbreaker.stores.memory import MemoryStore

if TYPE_CHECKING:
    from fleetbreaker.state import Outcome, Policy, ProbeReport, Report
    from fleetbreaker.stores.base import Store
    from fleetbreaker.tuning import Action

T = TypeVar("T")
Clock = Callable[[], int]
Emit = Callable[..., None]
AnswerHook = Callable[["Record | None", int], None]
Reason = Callable[["Outcome"], TransitionReason]

# Store calls one FallbackStore (one breaker) may have running at once, stuck ones included.
# A caller past it waits for one to end, within its own deadline; when this many are stuck past
# their deadlines it fails at once. Callers arriving together cannot exceed it either.
MAX_STUCK_WORKERS = 4

# Store calls running at once in the whole process, over every breaker: the worker threads
# are shared (one pool per process), so a thousand breakers built and dropped, or many hung
# stores, never hold more threads than this (Lambda allows 1,024 per container).
MAX_PROCESS_WORKERS = 64

# Idle workers kept for reuse; a worker finishing a call past this many ends its thread.
MAX_IDLE_WORKERS = 4

# A worker idle this long (seconds) ends its thread; the next store call starts another. A
# breaker in use calls its store about once per cache_ttl, so a worker stays; a process whose
# breakers are all dropped does not keep threads behind.
WORKER_IDLE_SECONDS = 30.0


# A thread-local trace context (the X-Ray SDK's) does not follow a store call onto its
# worker thread the way contextvars do. A listener that needs it there sets this, on the
# caller's thread, to a function the worker calls with the job and that runs it.
store_call_wrapper: contextvars.ContextVar[Callable[[Callable[[], Any]], Any] | None] = (
    contextvars.ContextVar("fleetbreaker_store_call_wrapper", default=None)
)


def _in_caller_context(job: Callable[[], T]) -> T:
    wrapper = store_call_wrapper.get()
    if wrapper is None:
        return job()
    result: T = wrapper(job)
    return result


def _system_clock() -> int:
    return time.time_ns() // 1_000_000


def _ignore(*_: Any) -> None:
    return None


@mutable_value  # a dataclass without generated code (cold start)
class FallbackStats:
    """Counters of one fallback store (a breaker's ``stats``)."""

    store_errors: int = 0
    degradations: int = 0
    corrupt_records: int = 0
    # Shadow mode: calls an enforcing breaker would have rejected (counted by the breaker).
    would_rejects: int = 0


class _Worker:
    """A daemon thread that runs one store call at a time, handed over through a queue."""

    def __init__(self, pool: _WorkerPool) -> None:
        self._pool = pool
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], _Result]] = queue.SimpleQueue()
        # Daemon: a call stuck on a socket with no timeout must not keep the process alive.
        self._thread = threading.Thread(target=self._loop, name="fleetbreaker-store", daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], Any], result: _Result) -> None:
        self._jobs.put((job, result))

    def _loop(self) -> None:
        while True:
            try:
                job, result = self._jobs.get(timeout=WORKER_IDLE_SECONDS)
            except queue.Empty:
                if self._pool.retire(self):
                    return
                continue  # taken for a job just now: it is on its way
            try:
                result.value = job()
            except BaseException as exc:  # handed to the waiting caller, never lost
                result.error = exc
            result.finish()
            # Hold nothing of the caller's while idle: the job's closure reaches the store and
            # its breaker, which would then outlive every reference its owner dropped.
            job = result = None  # type: ignore[assignment]
            if not self._pool.release(self):
                return


class _Result:
    __slots__ = ("done", "error", "on_done", "value")

    def __init__(self, on_done: Callable[[], None]) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.on_done: Callable[[], None] | None = on_done

    def finish(self) -> None:
        on_done, self.on_done = self.on_done, None
        if on_done is not None:
            on_done()  # frees the call's slots before the caller can start another
        self.done.set()


class _Slots:
    """One FallbackStore's share of the pool: its calls running now, and how many are stuck."""

    def __init__(self) -> None:
        self.free = threading.BoundedSemaphore(MAX_STUCK_WORKERS)
        self.stuck = 0  # running past the deadline their caller gave up at
        self.lock = threading.Lock()


class _WorkerPool:
    """The process's store workers: a call waits at most its deadline, a stuck worker is not
    reused, and the threads are bounded per store (MAX_STUCK_WORKERS) and per process
    (MAX_PROCESS_WORKERS), however many callers arrive at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._running = threading.BoundedSemaphore(MAX_PROCESS_WORKERS)

    def run(self, job: Callable[[], T], deadline_s: float, what: str, slots: _Slots) -> T:
        if slots.stuck >= MAX_STUCK_WORKERS:
            raise StoreDeadlineError(
                f"{what}: {slots.stuck} earlier store calls are still running past their deadline"
            )
        give_up = time.monotonic() + deadline_s
        if not slots.free.acquire(timeout=deadline_s):
            raise StoreDeadlineError(
                f"{what}: {MAX_STUCK_WORKERS} store calls of this breaker still running after "
                f"its {deadline_s:g} s deadline"
            )
        if not self._running.acquire(timeout=max(0.0, give_up - time.monotonic())):
            slots.free.release()
            raise StoreDeadlineError(
                f"{what}: {MAX_PROCESS_WORKERS} store calls of this process still running "
                f"after its {deadline_s:g} s deadline"
            )

        def finished() -> None:
            with slots.lock:
                if late[0]:
                    slots.stuck -= 1
            self._running.release()
            slots.free.release()

        late = [False]
        result = _Result(finished)
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker(self)
        context = contextvars.copy_context()  # tracing and logging context travel along
        worker.submit(lambda: context.run(_in_caller_context, job), result)
        if not result.done.wait(max(0.0, give_up - time.monotonic())):
            with slots.lock:
                late[0] = result.on_done is not None  # it may have finished just now
                if late[0]:
                    slots.stuck += 1
            if late[0]:
                raise StoreDeadlineError(f"{what} took longer than its {deadline_s:g} s deadline")
            result.done.wait()  # finishing now: its answer is a moment away
        if result.error is not None:
            raise result.error
        value: T = result.value
        return value

    def release(self, worker: _Worker) -> bool:
        """A worker finished its call: True when it stays for reuse, False to end its thread."""
        with self._lock:
            if len(self._idle) >= MAX_IDLE_WORKERS:
                return False
            self._idle.append(worker)
            return True

    def retire(self, worker: _Worker) -> bool:
        """An idle worker's thread may end: True unless it was just handed a job."""
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
                return True
            return False


# One pool per process: every FallbackStore (every breaker) shares its threads.
_POOL = _WorkerPool()


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
        ``on_recovered``, ``on_corrupt_record``, ``on_transition``, ``on_state_change``).
    on_answer:
        ``on_answer(record, now_ms)`` receives every record the shared store returned
        (the breaker's cache).

    Example
    -------
    >>> from fleetbreaker.state import Policy
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
        on_answer: AnswerHook | None = None,
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
        self.local = local if local is not None else MemoryStore()
        self.clock: Clock = clock or _system_clock
        self.backoff_ms = round(backoff_seconds * 1000)
        # The package's own MemoryStore answers from this process's memory with nothing to
        # wait for: it skips the worker hand-off (about 70 us a call).
        self.deadline_seconds = None if type(shared) is MemoryStore else deadline_seconds
        self.stats = StoreStats()
        self.fallback_stats = FallbackStats()
        self._emit: Emit = emit or _ignore
        self._on_answer: AnswerHook = on_answer or _ignore
        self._slots = _Slots()
        self._lock = threading.Lock()
        self._degraded = False
        self._paused_until = 0
        self._last_seen: dict[str, Record | None] = {}
        self._local_names: set[str] = set()  # what the local twin may hold, dropped on recovery
        self._missing_table_logged = False
        self._prepared = False

    def __repr__(self) -> str:
        return f"FallbackStore({self.shared!r})"

    @property
    def degraded(self) -> bool:
        """True from a shared-store failure until the shared store answers again."""
        return self._degraded

    def paused(self, now_ms: int) -> bool:
        """Whether an operation at ``now_ms`` is answered locally without asking the store."""
        return self._degraded and now_ms < self._paused_until

    # -- the contract ----------------------------------------------------------------------

    def load(self, name: str, now_ms: int) -> Record | None:
        self.stats.count_read()
        if self.paused(now_ms):
            return self._local_load(name, now_ms)
        self._emit("on_store_call_start", name, "load")
        started = time.perf_counter()
        try:
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
            self._degrade(name, "load", exc)
            return self._local_load(name, now_ms)
        else:
            self._call_done(name, "load", started, None)
        self._answered(name, record, now_ms)
        return record

    def record_failure(
        self, name: str, policy: Policy, now_ms: int, observed: Record | None
    ) -> Outcome:
        def record_failure(store: Store) -> Outcome:
            used = policy if store is self.shared else rules.alone(policy)
            return store.record_failure(name, used, now_ms, observed)

        return self._operation(
            "record_failure", name, now_ms, record_failure, _reason_by_states(policy)
        )

    def claim_probe(
        self, name: str, policy: Policy, now_ms: int, nonce: str, observed: Record | None
    ) -> Outcome:
        def claim_probe(store: Store) -> Outcome:
            return store.claim_probe(name, policy, now_ms, nonce, observed)

        reason = _reason_by_states(policy)
        return self._operation("claim_probe", name, now_ms, claim_probe, reason)

    def settle_probe(
        self, name: str, policy: Policy, now_ms: int, report: ProbeReport, observed: Record | None
    ) -> Outcome:
        def settle_probe(store: Store) -> Outcome:
            return store.settle_probe(name, policy, now_ms, report, observed)

        return self._operation(
            "settle_probe", name, now_ms, settle_probe, _reason_by_states(policy)
        )

    def report(
        self, name: str, policy: Policy, now_ms: int, report: Report, observed: Record | None
    ) -> Outcome:
        def send(store: Store) -> Outcome:
            # Alone, the container is its own quorum (docs/architecture.md, "Store trouble").
            used = policy if store is self.shared else rules.alone(policy)
            return store.report(name, used, now_ms, report, observed)

        def reason(outcome: Outcome) -> TransitionReason:
            # The tripping write saw the window with this report in it: failures or slow calls.
            counts = window_counts(
                add_report(observed or Record(), policy, now_ms, report), policy, now_ms
            )
            before, after = outcome.transition or (State.CLOSED, State.OPEN)
            return transition_reason(before, after, policy, counts)

        return self._operation("report", name, now_ms, send, reason)

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

        outcome = self._call("force_state", name, force)
        self._answered(name, outcome.record, now_ms)
        return outcome

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
        return _POOL.run(
            job, self.deadline_seconds, f"store {operation} for breaker {name!r}", self._slots
        )

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
            return self._local_op(name, op)
        self._emit("on_store_call_start", name, operation)
        started = time.perf_counter()
        try:
            outcome = self._call(operation, name, lambda: op(self.shared))
        except Exception as exc:
            self._call_done(name, operation, started, exc)
            self._degrade(name, operation, exc)
            return self._local_op(name, op)
        self._call_done(name, operation, started, None)
        self._answered(name, outcome.record, now_ms)
        if outcome.transition is not None:
            self._emit("on_transition", name, *outcome.transition)
            gen = outcome.record.gen if outcome.record is not None else 0
            change = StateChange(*outcome.transition, gen, reason(outcome))
            self._emit("on_state_change", name, change)
        return outcome

    def _local_load(self, name: str, now_ms: int) -> Record | None:
        self._local_names.add(name)
        return self.local.load(name, now_ms)

    def _local_op(self, name: str, op: Callable[[Store], Outcome]) -> Outcome:
        self._local_names.add(name)
        return op(self.local)

    def _answered(self, name: str, record: Record | None, now_ms: int) -> None:
        self._last_seen[name] = record
        self._on_answer(record, now_ms)

    def _call_done(
        self, name: str, operation: str, started: float, error: BaseException | None
    ) -> None:
        elapsed_ms = (time.perf_counter() - started) * 1000
        ok = error is None
        if ok:
            outcome = STORE_ANSWERED
        elif isinstance(error, StoreDeadlineError):
            outcome = STORE_DEADLINE
        else:
            outcome = STORE_ERROR
        self._emit("on_store_result", name, operation, self.kind, outcome, error)
        self._emit("on_store_call", name, operation, elapsed_ms, ok)
        if ok and self._degraded:
            with self._lock:
                recovered, self._degraded = self._degraded, False
                if recovered:
                    # The fleet's record is authoritative again; local counts are dropped.
                    for local_name in list(self._local_names):
                        self.local.seed(local_name, None)
                    self._local_names.clear()
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
            if first:
                # Start from the fleet's last known state: a breaker last seen open keeps
                # rejecting until its open window ends.
                for seen_name, record in self._last_seen.items():
                    self.local.seed(seen_name, record)
                    self._local_names.add(seen_name)
            self.fallback_stats.store_errors += 1
            if first:
                self.fallback_stats.degradations += 1
            quiet = isinstance(exc, TableNotFoundError) and self._missing_table_logged
            if isinstance(exc, TableNotFoundError):
                self._missing_table_logged = True
        if not quiet:
            self._emit("on_store_error", name, operation, exc)
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


def _reason_by_states(policy: Policy) -> Reason:
    def reason(outcome: Outcome) -> TransitionReason:
        before, after = outcome.transition or (State.CLOSED, State.CLOSED)
        return transition_reason(before, after, policy)

    return reason
