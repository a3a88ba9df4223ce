"""A breaker after a restored snapshot: ``restart`` and ``flush``, and their parts.

``CircuitBreaker.restart`` is what :func:`fleetbreaker.after_restore` does to each live
breaker, ``flush`` what :func:`fleetbreaker.before_snapshot` does; each is tested here on one
breaker, in this process. tests/unit/test_snapshot_hooks.py runs the hooks in processes of
their own; tests/restore runs whole restored fleets on the three stores.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, MemoryStore
from fleetbreaker.metrics import MetricsListener, restart_every_listener
from fleetbreaker.naming import container_key, process_container_id, renew_process_container_id
from fleetbreaker.policy import Policy
from fleetbreaker.rules import sliding_window
from fleetbreaker.stores import deadline
from fleetbreaker.stores.fallback import FallbackStore
from tests.support import Dependency, FakeClock, FlakyStore, breaker_on, quiet_rng

RATE = BreakerConfig(failure_rate_threshold=0.5, minimum_calls=1000, report_interval=1.0)


class ConnectionsKept(MemoryStore):
    """A MemoryStore that says when it was asked to drop its connections."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def drop_connections(self) -> None:
        self.dropped += 1


def calls_in_window(store: Any, name: str, config: BreakerConfig, now: int) -> int:
    return sliding_window(Policy.from_config(config)).counts(store.load(name, now), now).calls


# -- the container's identity ----------------------------------------------------------------


def test_a_restarted_breaker_takes_the_processs_new_id(clock: FakeClock) -> None:
    # GIVEN a breaker with the process's id, and the process given a new one
    breaker = breaker_on(MemoryStore(), clock)
    before = breaker.container_id
    renewed = renew_process_container_id()
    # WHEN the breaker restarts
    breaker.restart()
    # THEN its id is the process's new one
    assert breaker.container_id == renewed != before


def test_a_restarted_breaker_drops_an_id_it_was_given(clock: FakeClock) -> None:
    # GIVEN a breaker built with an id of its own (the snapshot's, in every environment)
    breaker = CircuitBreaker("svc", store=MemoryStore(), clock=clock, container_id="given")
    # WHEN it restarts THEN it counts under the process's id
    breaker.restart()
    assert breaker.container_id == process_container_id()


def test_a_restarted_breaker_reports_under_its_new_id(clock: FakeClock) -> None:
    # GIVEN a rate-policy breaker with min_containers (its failures note its container key)
    store = MemoryStore()
    config = BreakerConfig(
        failure_rate_threshold=0.5, minimum_calls=1000, min_containers=3, report_interval=1.0
    )
    breaker = breaker_on(store, clock, config)
    renew_process_container_id()
    breaker.restart()
    # WHEN a failure is reported after the restart
    with pytest.raises(ConnectionError):
        breaker.call(_failing())
    clock.advance(2)
    breaker.call(lambda: None)
    # THEN the record notes the new container's key
    record = store.load("payment-api", clock())
    assert record is not None
    assert set(record.failing) == {container_key(breaker.container_id)}


def _failing() -> Dependency:
    dependency = Dependency()
    dependency.failing = True
    return dependency


# -- its random source -----------------------------------------------------------------------


def test_a_restarted_breaker_draws_from_a_new_random_stream(clock: FakeClock) -> None:
    # GIVEN a breaker whose random source is at some state (yours, when you pass one)
    rng = random.Random(42)
    breaker = CircuitBreaker("svc", store=MemoryStore(), clock=clock, rng=rng)
    snapshot = random.Random()
    snapshot.setstate(rng.getstate())
    # WHEN it restarts
    breaker.restart()
    # THEN the same object draws numbers other than the snapshot's next ones
    assert breaker.rng is rng
    assert [rng.random() for _ in range(5)] != [snapshot.random() for _ in range(5)]


# -- its view and schedules ------------------------------------------------------------------


def test_a_restarted_breaker_reads_the_record_afresh(clock: FakeClock) -> None:
    # GIVEN a breaker whose view of its record is fresh
    store = MemoryStore()
    breaker = CircuitBreaker("payment-api", store=store, clock=clock, rng=quiet_rng())
    breaker.call(lambda: None)
    reads = store.stats.reads
    # WHEN it restarts and makes a call within cache_ttl
    breaker.restart()
    breaker.call(lambda: None)
    # THEN that call read the record again
    assert store.stats.reads == reads + 1


def test_a_restarted_breaker_drops_the_calls_it_had_not_reported(clock: FakeClock) -> None:
    # GIVEN a rate-policy breaker with 5 calls tallied, not reported
    store = MemoryStore()
    breaker = breaker_on(store, clock, RATE)
    for _ in range(5):
        breaker.call(lambda: None)
    # WHEN it restarts (the snapshot's process counted those, not this container), then
    # makes one call, and one more once a report is due
    breaker.restart()
    breaker.call(lambda: None)
    clock.advance(2)
    breaker.call(lambda: None)
    # THEN only its own call reached the window
    assert calls_in_window(store, "payment-api", RATE, clock()) == 1


def test_a_restarted_breaker_leaves_degraded_mode(clock: FakeClock) -> None:
    # GIVEN a breaker degraded by a store failure, within its back-off
    store = FlakyStore()
    breaker = breaker_on(store, clock)
    store.down = True
    breaker.call(lambda: None)
    assert breaker.degraded
    store.down = False
    # WHEN it restarts and makes a call
    breaker.restart()
    breaker.call(lambda: None)
    # THEN the call asked the store (no back-off carried over), and it is not degraded
    assert not breaker.degraded


def test_a_restarted_breaker_drops_its_stores_connections(clock: FakeClock) -> None:
    # GIVEN a breaker on a store with connections
    store = ConnectionsKept()
    breaker = breaker_on(store, clock)
    # WHEN it restarts THEN the store was told to drop them
    breaker.restart()
    assert store.dropped == 1


# -- flush -----------------------------------------------------------------------------------


def test_flush_sends_the_calls_not_reported(clock: FakeClock) -> None:
    # GIVEN a rate-policy breaker with 5 calls tallied, not due yet
    store = MemoryStore()
    breaker = breaker_on(store, clock, RATE)
    for _ in range(5):
        breaker.call(lambda: None)
    # WHEN it is flushed THEN the 5 are in the fleet's window
    breaker.flush()
    assert calls_in_window(store, "payment-api", RATE, clock()) == 5


def test_flush_of_a_count_policy_breaker_writes_nothing(clock: FakeClock) -> None:
    # GIVEN a count-policy breaker that made calls (its failures were written as they came)
    store = MemoryStore()
    breaker = CircuitBreaker("payment-api", store=store, clock=clock, rng=quiet_rng())
    breaker.call(lambda: None)
    writes = store.stats.writes
    # WHEN it is flushed THEN nothing is written
    breaker.flush()
    assert store.stats.writes == writes


def test_flush_of_a_switched_off_breaker_asks_no_store(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a rate-policy breaker switched off by FLEETBREAKER_DISABLED
    monkeypatch.setenv("FLEETBREAKER_DISABLED", "true")
    store = MemoryStore()
    breaker = breaker_on(store, clock, RATE)
    breaker.call(lambda: None)
    # WHEN it is flushed THEN its store was never asked
    breaker.flush()
    assert store.stats.requests == 0


# -- the process's parts ---------------------------------------------------------------------


def test_a_restarted_store_wrapper_runs_on_a_new_worker_pool() -> None:
    # GIVEN a store wrapper whose calls run on worker threads, one call made (its worker
    # now idle, kept for the next call)
    shared = ConnectionsKept()
    workers: list[threading.Thread] = []
    shared.load = lambda name, now_ms: workers.append(threading.current_thread())  # type: ignore[method-assign]
    store = FallbackStore(shared, deadline_seconds=5.0, clock=lambda: 0)
    store.load("svc", 0)
    # WHEN it restarts and makes another call
    store.restart()
    store.load("svc", 0)
    # THEN that call ran on a new worker, not on the snapshot's
    assert workers[0] is not workers[1]
    assert workers[1].name == "fleetbreaker-store"


def test_renewing_the_process_id_changes_it_for_every_breaker_built_after() -> None:
    # GIVEN the process's id WHEN it is renewed THEN the process's id is the new one
    before = process_container_id()
    renewed = renew_process_container_id()
    assert process_container_id() == renewed != before


def test_a_restarted_metrics_listener_holds_nothing_to_write(clock: FakeClock) -> None:
    # GIVEN a MetricsListener holding an event gathered before the snapshot
    metrics = MetricsListener(namespace="Restart")
    breaker = breaker_on(MemoryStore(), clock, listeners=[metrics], failure_threshold=1)
    with pytest.raises(ConnectionError):
        breaker.call(_failing())
    assert metrics.pending_documents > 0
    # WHEN every listener of the process restarts THEN it has nothing to write
    restart_every_listener()
    assert metrics.pending_documents == 0


def test_a_restarted_pool_still_runs_calls() -> None:
    # GIVEN the process's worker pool restarted WHEN a store call runs on it THEN it answers
    deadline.restart_workers()
    slots = deadline.CallSlots()
    assert deadline.run_within(lambda: "answer", 5.0, "test call", slots) == "answer"


def test_a_replaced_pool_ends_its_idle_workers() -> None:
    # GIVEN a worker left idle by a store call, kept for the next one
    seen: list[threading.Thread] = []
    slots = deadline.CallSlots()
    deadline.run_within(lambda: seen.append(threading.current_thread()), 5.0, "call", slots)
    # WHEN the process's pool is replaced (after a restored snapshot)
    deadline.restart_workers()
    # THEN the idle worker's thread ends (not left waiting out its idle time)
    seen[0].join(timeout=5.0)
    assert not seen[0].is_alive()
