"""FallbackStore's degraded mode on its own: back-off, local twin, recovery, events.

The fake clock drives the back-off; the shared store is a MemoryStore that can be switched
off (and, for one test, one whose failures take fake time).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, StoreError
from fleetbreaker.errors import CorruptRecordError
from fleetbreaker.record import State
from fleetbreaker.stores import deadline
from fleetbreaker.stores.fallback import FallbackStore
from tests.support import FakeClock, FlakyStore, make_policy, objects_reachable_from, trip_store

POLICY = make_policy(failure_threshold=2, recovery_timeout=10)
NAME = "payment-api"
BACKOFF_S = 5.0


class Events:
    """Collects what the wrapper emits, as (hook, args) pairs."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, tuple[Any, ...]]] = []

    def __call__(self, hook: str, *args: Any) -> None:
        self.seen.append((hook, args))

    def hooks(self, *wanted: str) -> list[str]:
        return [hook for hook, _ in self.seen if hook in wanted]


@pytest.fixture
def shared() -> FlakyStore:
    return FlakyStore()


@pytest.fixture
def events() -> Events:
    return Events()


@pytest.fixture
def store(shared: FlakyStore, clock: FakeClock, events: Events) -> FallbackStore:
    return FallbackStore(shared, clock=clock, backoff_seconds=BACKOFF_S, emit=events)


def test_a_healthy_shared_store_answers_everything(store: FallbackStore, clock: FakeClock) -> None:
    trip_store(store, NAME, POLICY, clock())

    assert store.load(NAME, clock()).state is State.OPEN
    assert store.shared.load(NAME, clock()).state is State.OPEN
    assert not store.degraded


def test_the_backoff_starts_when_the_failure_was_seen(clock: FakeClock, events: Events) -> None:
    # GIVEN a shared store whose failure takes 25 s to surface (an SDK retrying a refused
    # connection), and a 5 s back-off
    class SlowToFail(FlakyStore):
        def load(self, name: str, now_ms: int) -> Any:
            clock.advance(25)
            return super().load(name, now_ms)

    shared = SlowToFail()
    shared.down = True
    store = FallbackStore(shared, clock=clock, backoff_seconds=BACKOFF_S, emit=events)

    # WHEN a read fails, and more reads come right after it returned
    store.load(NAME, clock())
    for _ in range(10):
        store.load(NAME, clock())
    clock.advance(BACKOFF_S - 0.001)
    store.load(NAME, clock())

    # THEN the store is not asked again inside the back-off that began at the failure
    assert shared.calls == 1
    clock.advance(0.001)
    store.load(NAME, clock())
    assert shared.calls == 2


def test_the_local_twin_starts_from_the_last_record_seen(
    store: FallbackStore, shared: FlakyStore, clock: FakeClock
) -> None:
    trip_store(store, NAME, POLICY, clock())
    shared.down = True

    seen = store.load(NAME, clock())
    claim = store.claim_probe(NAME, POLICY, clock(), "n", seen)

    assert store.degraded
    assert seen is not None
    assert seen.state is State.OPEN
    assert claim.token is None  # still inside the open window: the local twin rejects too


def test_recovery_drops_local_state_and_is_reported_once(
    store: FallbackStore, shared: FlakyStore, clock: FakeClock, events: Events
) -> None:
    shared.down = True
    trip_store(store, NAME, POLICY, clock())  # counted locally only
    assert store.load(NAME, clock()).state is State.OPEN
    shared.down = False
    clock.advance(BACKOFF_S)

    record = store.load(NAME, clock())

    assert record is None  # the fleet's record: nothing was ever written there
    assert not store.degraded
    assert events.hooks("on_degraded", "on_recovered") == ["on_degraded", "on_recovered"]
    assert store.local.load(NAME, clock()) is None


def test_every_failure_is_counted_and_reported_but_degrades_once(
    store: FallbackStore, shared: FlakyStore, clock: FakeClock, events: Events
) -> None:
    shared.down = True

    for _ in range(3):
        store.load(NAME, clock())
        clock.advance(BACKOFF_S)

    assert store.fallback_stats.store_errors == 3
    assert store.fallback_stats.degradations == 1
    assert events.hooks("on_store_error", "on_degraded") == [
        "on_store_error",
        "on_degraded",
        "on_store_error",
        "on_store_error",
    ]


def test_operator_overrides_are_never_answered_locally(
    store: FallbackStore, shared: FlakyStore, clock: FakeClock
) -> None:
    shared.down = True
    store.load(NAME, clock())

    with pytest.raises(StoreError, match="store is down"):
        store.force_state(NAME, POLICY, clock(), State.FORCED_OPEN)
    assert store.local.load(NAME, clock()) is None


def test_a_corrupt_record_reads_as_closed_without_degrading(
    shared: FlakyStore, clock: FakeClock, events: Events
) -> None:
    class Corrupt(FlakyStore):
        def load(self, name: str, now_ms: int) -> Any:
            raise CorruptRecordError("gen is not a number")

    store = FallbackStore(Corrupt(), clock=clock, emit=events)

    assert store.load(NAME, clock()) is None
    assert not store.degraded
    assert store.fallback_stats.corrupt_records == 1
    assert ("on_corrupt_record", (NAME, "gen is not a number")) in events.seen


def test_a_shared_answer_comes_back_as_a_value_not_marked_local(
    store: FallbackStore, clock: FakeClock
) -> None:
    # GIVEN a healthy shared store
    # WHEN a failure is written and the record read back
    written = store.record_failure(NAME, POLICY, clock(), None)
    read = store.read(NAME, clock())
    # THEN both answers are the shared store's, returned to the caller as values
    assert (written.local, read.local) == (False, False)
    assert read.record == written.record


def test_the_local_twins_answers_say_they_are_local(
    shared: FlakyStore, store: FallbackStore, clock: FakeClock
) -> None:
    # GIVEN a breaker tripped on the shared store, which then goes away
    trip_store(store, NAME, POLICY, clock())
    shared.down = True
    clock.advance(1)
    # WHEN it is read and written while degraded
    read = store.read(NAME, clock())
    written = store.record_failure(NAME, POLICY, clock(), read.record)
    # THEN the local twin answers (seeded with the open record), and each answer says so:
    # the caller must not cache it as the fleet's record
    assert store.degraded
    assert (read.local, written.local) == (True, True)
    assert read.record is not None
    assert read.record.state is State.OPEN


def test_the_wrapper_takes_no_answer_hook(shared: FlakyStore, clock: FakeClock) -> None:
    # GIVEN a hook that would call back into a breaker
    # WHEN a wrapper is built with it
    # THEN it is refused: answers go back to whoever asked, as values
    with pytest.raises(TypeError, match="on_answer"):
        FallbackStore(shared, clock=clock, on_answer=lambda record, now: None)  # type: ignore[call-arg]


def test_the_wrapper_of_a_breaker_holds_no_way_back_into_it() -> None:
    # GIVEN a breaker, with its listeners and shared reads, and the store wrapper it built
    from fleetbreaker import CircuitBreaker, MemoryStore

    breaker = CircuitBreaker(NAME, store=MemoryStore(), shared_refresh_dir=None)
    wrappers = [v for v in vars(breaker).values() if isinstance(v, FallbackStore)]
    assert len(wrappers) == 1
    # WHEN every object the wrapper holds is followed (modules and classes are shared by
    # everything, so the walk stops there)
    reached = objects_reachable_from(wrappers[0])
    # THEN neither the breaker nor its core (fleetbreaker.core.CallCore, named rather than
    # imported: this file is the stores' tests, not the call path's) is among them: no cycle
    # through a callback
    assert not any(
        obj is breaker or isinstance(obj, CircuitBreaker) or type(obj).__name__ == "CallCore"
        for obj in reached
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backoff_seconds": -1}, "backoff_seconds must be >= 0"),
        ({"backoff_seconds": "5"}, "backoff_seconds must be a number"),
        ({"deadline_seconds": 0}, "deadline_seconds must be a positive number or None"),
        ({"deadline_seconds": float("inf")}, "deadline_seconds must be a positive number"),
        ({"deadline_seconds": True}, "deadline_seconds must be a positive number"),
        (
            {"deadline_seconds": 1e10},
            r"deadline_seconds must be a positive number or None \(at most 900\)",
        ),
        ({"backoff_seconds": 1e300}, "backoff_seconds must be >= 0 and at most"),
    ],
)
def test_bad_settings_are_refused_by_name(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FallbackStore(FlakyStore(), **kwargs)


def test_a_stores_one_off_setup_runs_once_on_the_callers_thread(clock: FakeClock) -> None:
    # GIVEN a store with a prepare() step (DynamoDBStore builds its boto3 client there)
    class Prepared(FlakyStore):
        def __init__(self) -> None:
            super().__init__()
            self.prepared_on: list[int] = []
            self.loaded_on: list[int] = []

        def prepare(self) -> None:
            self.prepared_on.append(threading.get_ident())

        def load(self, name: str, now_ms: int) -> Any:
            self.loaded_on.append(threading.get_ident())
            return super().load(name, now_ms)

    shared = Prepared()
    store = FallbackStore(shared, clock=clock)

    # WHEN two operations run
    store.load(NAME, clock())
    store.load(NAME, clock())

    # THEN the setup ran once, before them, on the caller's thread (outside the deadline),
    # and the operations on the deadline's worker
    assert shared.prepared_on == [threading.get_ident()]
    assert len(shared.loaded_on) == 2
    assert threading.get_ident() not in shared.loaded_on


# -- worker threads ------------------------------------------------------------------------


def test_a_dropped_breaker_is_collected_though_its_worker_ran_its_calls() -> None:
    # GIVEN a breaker whose store calls ran on a worker thread, with a slow-call watcher
    # (a thread of its own that ends when the breaker is gone)
    import gc
    import weakref

    from fleetbreaker import CircuitBreaker

    breaker = CircuitBreaker(
        NAME,
        store=FlakyStore(),
        config=BreakerConfig(failure_threshold=2, cache_ttl=0, slow_call_duration=5.0),
        listeners=[],
    )
    assert breaker.call(lambda: "ok") == "ok"
    breaker.record(success=False)
    gone = weakref.ref(breaker)

    # WHEN its owner drops it
    del breaker
    gc.collect()

    # THEN nothing keeps it alive: not the idle worker holding its last job
    assert gone() is None


def test_an_idle_worker_ends_its_thread_and_the_next_call_starts_one(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN workers that end after 10 ms idle, and a call that ran on one (each worker is
    # noted as it starts: its thread may be gone before the test could look for it)
    from fleetbreaker.stores import deadline

    started: list[deadline._Worker] = []

    class NotedWorker(deadline._Worker):
        def __init__(self, pool: deadline._WorkerPool) -> None:
            super().__init__(pool)
            started.append(self)

    monkeypatch.setattr(deadline, "_Worker", NotedWorker)
    monkeypatch.setattr(deadline, "WORKER_IDLE_SECONDS", 0.01)
    monkeypatch.setattr(deadline, "_POOL", deadline._WorkerPool())  # no idle worker to reuse
    store = FallbackStore(FlakyStore(), clock=clock)
    store.record_failure(NAME, POLICY, clock(), None)
    [worker] = started

    # WHEN it has nothing to do, THEN its thread ends
    worker._thread.join(timeout=10)
    assert not worker._thread.is_alive()

    # AND the next store call is served by a new worker
    outcome = store.record_failure(NAME, POLICY, clock(), None)
    assert outcome.transition == (State.CLOSED, State.OPEN)
    assert not store.degraded
    assert len(started) == 2


def store_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "fleetbreaker-store"}


class HungStore(FlakyStore):
    """A store whose loads hang until the test lets them go."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def load(self, name: str, now_ms: int) -> Any:
        self.release.wait()
        return super().load(name, now_ms)


def test_callers_arriving_together_on_a_hung_store_hold_at_most_the_cap_of_threads(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a store that hangs, and 64 callers that reach it at the same moment
    from fleetbreaker.stores import deadline

    monkeypatch.setattr(deadline, "_POOL", deadline._WorkerPool())
    hung = HungStore()
    store = FallbackStore(hung, clock=clock, deadline_seconds=1.0)
    before = store_threads()
    start = threading.Barrier(64)
    peak: list[int] = []

    def caller() -> None:
        start.wait()
        store.load(NAME, clock())  # answered locally once the deadline passes
        peak.append(len(store_threads() - before))

    callers = [threading.Thread(target=caller) for _ in range(64)]
    try:
        # WHEN they all call
        for thread in callers:
            thread.start()
        for thread in callers:
            thread.join()

        # THEN at most MAX_STUCK_WORKERS store threads were ever started for them
        assert len(store_threads() - before) <= deadline.MAX_STUCK_WORKERS
        assert max(peak) <= deadline.MAX_STUCK_WORKERS
        assert store.degraded
    finally:
        hung.release.set()


def test_a_thousand_breakers_built_and_dropped_keep_the_threads_bounded() -> None:
    # GIVEN breakers that each run store calls on a worker and watch for slow calls
    from fleetbreaker import CircuitBreaker

    config = BreakerConfig(failure_threshold=2, cache_ttl=0, slow_call_duration=5.0)
    baseline = threading.active_count()
    peak = baseline

    # WHEN a thousand are built, used and dropped, one after another
    for number in range(1_000):
        breaker = CircuitBreaker(f"b{number}", store=FlakyStore(), config=config, listeners=[])
        breaker.call(lambda: "ok")
        breaker.record(success=False)
        peak = max(peak, threading.active_count())
        del breaker

    # THEN the process never held more than the shared pool's idle workers, a call's
    # worker and the one slow-call watcher on top of what it had
    assert peak - baseline <= deadline.MAX_IDLE_WORKERS + 2


def test_a_weighted_failure_counts_its_weight_on_the_shared_store(
    store: FallbackStore, shared: FlakyStore, clock: FakeClock
) -> None:
    # GIVEN a threshold of 2, WHEN one failure counting 2 is written
    outcome = store.record_failure(NAME, POLICY, clock(), None, 2)

    # THEN the shared store opened on it
    assert outcome.transition is not None
    assert shared.load(NAME, clock()).state is State.OPEN


def test_a_degraded_container_counts_its_own_failures_once_each(
    store: FallbackStore, shared: FlakyStore, clock: FakeClock
) -> None:
    # GIVEN an unreachable shared store: the local twin is this container alone
    shared.down = True

    # WHEN a failure weighted for the fleet reaches it
    outcome = store.record_failure(NAME, POLICY, clock(), None, 2)

    # THEN it counts one failure (a threshold of 2 is not reached)
    assert store.degraded
    assert outcome.record is not None
    assert (outcome.record.state, outcome.record.failures) == (State.CLOSED, 1)


STORE_CALL_HOOKS = ("on_store_call_start", "on_store_result", "on_store_call")


@pytest.mark.parametrize("watch_calls", [True, False])
def test_the_store_call_hooks_are_told_only_when_watched_the_others_always(
    shared: FlakyStore, clock: FakeClock, events: Events, watch_calls: bool
) -> None:
    # GIVEN a wrapper that is told whether anyone watches its store calls
    store = FallbackStore(
        shared, clock=clock, backoff_seconds=BACKOFF_S, emit=events, watch_calls=watch_calls
    )
    # WHEN it reads, writes, fails, recovers and reads a corrupt record
    store.load(NAME, clock())
    trip_store(store, NAME, POLICY, clock())
    shared.down = True
    store.load(NAME, clock())
    shared.down = False
    clock.advance(BACKOFF_S)
    store.load(NAME, clock())
    # THEN the store-call hooks are told of each round trip only when watched
    calls = events.hooks(*STORE_CALL_HOOKS)
    round_trips = len(calls) // 3
    assert calls == list(STORE_CALL_HOOKS) * round_trips
    assert round_trips >= 5 if watch_calls else round_trips == 0
    # AND every other event is told either way: the trip, the failure, the recovery
    assert events.hooks("on_state_change", "on_store_error", "on_degraded", "on_recovered") == [
        "on_state_change",
        "on_store_error",
        "on_degraded",
        "on_recovered",
    ]
    assert not store.degraded


def test_a_breaker_watches_its_store_calls_only_for_a_listener_that_has_their_hooks(
    clock: FakeClock,
) -> None:
    from fleetbreaker import BreakerListener, CircuitBreaker, LoggingListener, MemoryStore

    class Timing(BreakerListener):
        def on_store_call(self, name: str, operation: str, elapsed_ms: float, ok: bool) -> None:
            """Having the hook is what counts here."""

    def wrapper_of(listeners: list[BreakerListener]) -> FallbackStore:
        breaker = CircuitBreaker(NAME, store=MemoryStore(), listeners=listeners, clock=clock)
        return breaker._store

    # GIVEN breakers with the default listener, none, and one that times store calls
    # THEN only the last has its store wrapper tell the store-call hooks
    assert not wrapper_of([LoggingListener()]).watch_calls
    assert not wrapper_of([]).watch_calls
    assert wrapper_of([LoggingListener(), Timing()]).watch_calls
