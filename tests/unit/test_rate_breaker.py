"""The rate policy through CircuitBreaker: batching, out-of-turn reports, hung calls, snapshot."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, ConfigError, State
from fleetbreaker.stores.memory import MemoryStore
from tests.support import Dependency, FakeClock

RATE = BreakerConfig(
    failure_rate_threshold=0.5,
    minimum_calls=10,
    window_seconds=10,
    recovery_timeout=5,
    recovery_jitter=0.0,
    cache_ttl=1.0,
)


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


def make(store: Any, clock: FakeClock, config: BreakerConfig = RATE, **kw: Any) -> CircuitBreaker:
    return CircuitBreaker("payment-api", store=store, config=config, clock=clock, **kw)


def spread(clock: FakeClock, breaker: CircuitBreaker, dep: Dependency, calls: int, seconds: float):
    step = seconds / calls
    for _ in range(calls):
        breaker.call(dep)
        clock.advance(step)


def test_healthy_container_costs_about_one_store_request_per_cache_ttl(store, clock) -> None:
    # GIVEN a healthy dependency under the rate policy
    breaker = make(store, clock)

    # WHEN one container makes 1,000 calls over 3 s
    spread(clock, breaker, Dependency(), 1000, 3.0)

    # THEN it made at most 5 store requests
    assert store.stats.requests <= 5
    # AND the next refresh hands the fleet every call it made
    clock.advance(RATE.cache_ttl)
    breaker.call(Dependency())
    assert breaker.snapshot().calls == 1000


def test_successes_alone_are_reported_in_batches_not_one_write_each(store, clock) -> None:
    breaker = make(store, clock)

    for _ in range(200):
        breaker.call(Dependency())

    assert store.stats.writes == 0  # nothing due yet: the first interval has not passed
    clock.advance(RATE.cache_ttl)
    breaker.call(Dependency())
    assert store.stats.writes == 1
    assert breaker.snapshot().calls == 200


def test_failures_that_would_open_the_breaker_are_reported_at_once(store, clock) -> None:
    # GIVEN the fleet's window holds 9 healthy calls, as this container last saw it
    breaker = make(store, clock)
    dep = Dependency()
    for _ in range(9):
        breaker.call(dep)
    clock.advance(RATE.cache_ttl)
    breaker.call(dep)  # the report: 10 calls, 0 failures
    # WHEN the dependency fails and the failures would reach the rate
    dep.failing = True
    for _ in range(10):
        with pytest.raises(ConnectionError):
            breaker.call(dep)

    # THEN they were reported without waiting out the interval, and the breaker opened
    assert breaker.state is State.OPEN
    assert dep.calls == 20


def test_a_sick_container_cannot_open_the_breaker_alone_under_a_quorum(store, clock) -> None:
    config = BreakerConfig(
        failure_rate_threshold=0.5, minimum_calls=10, min_containers=2, recovery_jitter=0.0
    )
    sick = make(store, clock, config, container_id="sick")
    healthy = make(store, clock, config, container_id="healthy")
    broken, fine = Dependency(), Dependency()
    broken.failing = True

    for _ in range(5):
        for _ in range(20):
            with pytest.raises(ConnectionError):
                sick.call(broken)
            healthy.call(fine)
        clock.advance(1.0)
    assert sick.state is State.CLOSED

    # WHEN a second container fails once
    other = make(store, clock, config, container_id="other")
    with pytest.raises(ConnectionError):
        other.call(broken)

    # THEN its failure is reported at once and opens the fleet's breaker
    assert other.state is State.OPEN
    clock.advance(config.cache_ttl)
    assert sick.state is State.OPEN


@contextlib.contextmanager
def hung_call(breaker: CircuitBreaker) -> Iterator[threading.Event]:
    """A call through ``breaker`` that runs, on a thread, until the test sets the event."""
    entered, release = threading.Event(), threading.Event()

    def hang() -> str:
        entered.set()
        release.wait(10)
        return "late"

    worker = threading.Thread(target=breaker.call, args=(hang,))
    worker.start()
    try:
        assert entered.wait(10)
        yield release
    finally:
        release.set()
        worker.join(10)


def test_a_hung_call_is_reported_slow_while_it_still_runs(store, clock) -> None:
    config = BreakerConfig(slow_call_duration=2.0, minimum_calls=1, slow_call_rate_threshold=1.0)
    breaker = make(store, clock, config, container_id="a")
    with hung_call(breaker):
        # WHEN the call runs past slow_call_duration on the breaker's clock
        clock.advance(2.5)
        reported = breaker.report_hung_calls()

        # THEN it is in the store as a call and a slow call, and the breaker opened on it
        assert reported == 1
        record = store.load("payment-api", clock())
        assert record is not None
        assert record.state is State.OPEN


def test_a_hung_call_that_ends_later_is_not_counted_twice(store, clock) -> None:
    config = BreakerConfig(slow_call_duration=2.0, minimum_calls=100)
    breaker = make(store, clock, config)
    with hung_call(breaker) as release:
        clock.advance(2.5)
        assert breaker.report_hung_calls() == 1
        release.set()
    clock.advance(1.0)
    breaker.call(Dependency())
    clock.advance(1.0)
    breaker.call(Dependency())  # reports the call before it

    snap = breaker.snapshot()
    assert (snap.calls, snap.slow_calls) == (2, 1)


def test_a_finished_slow_call_counts_slow(store, clock) -> None:
    config = BreakerConfig(slow_call_duration=1.0, minimum_calls=100)
    breaker = make(store, clock, config)

    breaker.call(lambda: clock.advance(1.5))
    clock.advance(1.0)
    breaker.call(Dependency())

    assert breaker.snapshot().slow_calls == 1


def test_rate_policy_keeps_the_probe_budget_and_closes_on_success(store, clock) -> None:
    breaker = make(store, clock)
    dep = Dependency()
    dep.failing = True
    for _ in range(10):
        with pytest.raises(ConnectionError):
            breaker.call(dep)
    assert breaker.state is State.OPEN
    with pytest.raises(CircuitOpenError):
        breaker.call(dep)

    clock.advance(RATE.recovery_timeout)
    dep.failing = False
    breaker.call(dep)  # the probe

    assert breaker.state is State.CLOSED
    assert breaker.snapshot().generation == 3


def test_container_id_is_validated() -> None:
    with pytest.raises(ConfigError, match="container_id"):
        CircuitBreaker("x", store=MemoryStore(), container_id="")
    with pytest.raises(ConfigError, match="container_id"):
        CircuitBreaker("x", store=MemoryStore(), container_id="a\nb")


def test_default_container_id_is_one_per_process() -> None:
    first = CircuitBreaker("x", store=MemoryStore())
    second = CircuitBreaker("y", store=MemoryStore())

    assert first.container_id == second.container_id


def test_threads_calling_while_reports_are_taken_count_every_call_once(store, clock) -> None:
    # GIVEN 8 threads making calls while the clock keeps making reports due
    config = BreakerConfig(failure_rate_threshold=0.9, minimum_calls=10**6, cache_ttl=0.001)
    breaker = make(store, clock, config)
    dep = Dependency()

    def worker() -> None:
        for i in range(2_000):
            breaker.call(dep)
            if i % 100 == 0:
                clock.advance(0.002)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    clock.advance(1.0)
    breaker.call(dep)  # reports the rest

    # THEN the fleet's window holds every call exactly once
    assert breaker.snapshot().calls == 16_000


@pytest.mark.parametrize("policy", ["rate", "count"])
def test_a_degraded_container_opens_on_its_own_failures_under_a_quorum(
    clock: FakeClock, policy: str
) -> None:
    # GIVEN min_containers=2 and a store that is down: this container is alone
    from tests.support import FlakyStore

    down = FlakyStore()
    down.down = True
    rules = (
        {"failure_rate_threshold": 0.5, "minimum_calls": 20}
        if policy == "rate"
        else {"failure_threshold": 20}
    )
    config = BreakerConfig(min_containers=2, window_seconds=10, cache_ttl=1.0, **rules)
    breaker = make(down, clock, config)
    dep = Dependency()
    dep.failing = True

    # WHEN 60 calls fail
    for _ in range(60):
        with contextlib.suppress(ConnectionError, CircuitOpenError):
            breaker.call(dep)

    # THEN its local breaker opened at its 20th failure: the quorum counts itself as met
    assert breaker.degraded
    assert dep.calls == 20
    assert breaker.state is State.OPEN


def test_the_watcher_reports_hung_calls_again_after_tuning_back_from_a_long_duration(
    store: MemoryStore, clock: FakeClock
) -> None:
    # GIVEN a breaker whose slow_call_duration an operator tuned to the longest accepted
    from fleetbreaker.policy import Policy

    config = BreakerConfig(slow_call_duration=2.0, minimum_calls=1, cache_ttl=1.0)
    policy = Policy.from_config(config)
    breaker = make(store, clock, config, container_id="a")
    store.tune("payment-api", policy, clock(), '{"slow_call_duration": 1000000000}', None)
    clock.advance(config.cache_ttl)
    breaker.call(Dependency())  # picks the tuning up and starts the watcher
    with hung_call(breaker):
        # WHEN the operator tunes back, and the call hangs past the old duration
        store.tune("payment-api", policy, clock(), "", None)
        clock.advance(config.cache_ttl)
        breaker.call(Dependency())
        clock.advance(2.5)

        # THEN the watcher (awake at least every second) reports it, without being asked
        reported = threading.Event()
        for _ in range(100):
            if breaker.snapshot().slow_calls:
                reported.set()
                break
            reported.wait(0.1)
        assert reported.is_set()
