"""The breaker on every store: the cache and the healthy path cost what DESIGN.md promises."""

from __future__ import annotations

from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, State
from tests.support import Dependency, FakeClock, quiet_rng

CONFIG = BreakerConfig(
    failure_threshold=3,
    recovery_timeout=10,
    cache_ttl=1.0,
    # Generous, as RATE's below: a write past a 1 s deadline on a loaded machine (moto
    # in-process beside a busy loop) is answered locally and the trip is not seen.
    store_deadline_seconds=30,
)


def make(store: Any, clock: FakeClock, name: str) -> CircuitBreaker:
    # quiet_rng: no census write inside a test that counts requests.
    return CircuitBreaker(name, store=store, config=CONFIG, clock=clock, rng=quiet_rng())


def test_healthy_calls_cost_one_read_per_cache_ttl_and_no_writes(store: Any, name: str) -> None:
    clock = FakeClock()
    breaker = make(store, clock, name)
    dep = Dependency()

    for _ in range(5):
        for _ in range(200):
            breaker.call(dep)
        clock.advance(CONFIG.cache_ttl)

    assert dep.calls == 1000
    assert store.stats.reads == 5
    assert store.stats.writes == 0


def test_a_container_that_loses_a_race_learns_the_trip_at_once(store: Any, name: str) -> None:
    clock = FakeClock()
    late, tripper = make(store, clock, name), make(store, clock, name)
    dep = Dependency()
    assert late.state is State.CLOSED  # cached as closed for a whole cache_ttl
    dep.failing = True
    for _ in range(3):
        with pytest.raises(ConnectionError):
            tripper.call(dep)

    # WHEN the late container's failure meets the tripped record (the store hands it back)
    with pytest.raises(ConnectionError):
        late.call(dep)

    # THEN its very next call is rejected, without waiting for its cache to age
    with pytest.raises(CircuitOpenError):
        late.call(dep)
    assert dep.calls == 4


RATE = BreakerConfig(
    failure_rate_threshold=0.5,
    minimum_calls=20,
    window_seconds=60,
    recovery_timeout=5,
    cache_ttl=1.0,
    report_interval=2,
    # Generous: a store call missing the deadline on a loaded machine would be answered
    # locally and the fleet would not see it (the deadline has its own tests).
    store_deadline_seconds=30,
)


def fail(breaker: CircuitBreaker, dep: Dependency, times: int) -> None:
    dep.failing = True
    for _ in range(times):
        with pytest.raises((ConnectionError, CircuitOpenError)):
            breaker.call(dep)
    dep.failing = False


def test_failures_held_from_before_a_trip_do_not_reopen_a_recovered_breaker(
    store: Any, name: str
) -> None:
    # GIVEN a container holding 15 unreported failures (below minimum_calls, so not urgent)
    clock = FakeClock()
    paused = CircuitBreaker(name, store=store, config=RATE, clock=clock, container_id="paused")
    other = CircuitBreaker(name, store=store, config=RATE, clock=clock, container_id="other")
    dep = Dependency()
    fail(paused, dep, 15)
    # AND the fleet trips without it, then recovers through a probe
    fail(other, dep, 20)
    assert other.snapshot().state is State.OPEN
    clock.advance(RATE.recovery_timeout)
    other.call(dep)
    assert other.snapshot().state is State.CLOSED

    # WHEN the held container calls again (healthy calls only) and reports
    clock.advance(RATE.cache_ttl)
    for _ in range(10):
        paused.call(dep)
    clock.advance(RATE.report_interval)
    paused.call(dep)

    # THEN its old failures never reach the new window, and the breaker stays closed
    clock.advance(RATE.cache_ttl)
    seen = paused.snapshot()
    assert (seen.state, seen.failures) == (State.CLOSED, 0)


def test_the_longest_accepted_durations_round_trip_through_the_store(store: Any, name: str) -> None:
    # GIVEN every duration at (or near) the largest the config accepts
    from fleetbreaker.config import MAX_DEADLINE_SECONDS, MAX_SECONDS

    half = MAX_SECONDS / 2
    config = BreakerConfig(
        failure_threshold=1,
        window_seconds=MAX_SECONDS,
        recovery_timeout=half,
        max_recovery_timeout=half,
        probe_lease_seconds=half,
        record_ttl_seconds=int(MAX_SECONDS),
        store_deadline_seconds=MAX_DEADLINE_SECONDS,
        store_backoff_seconds=MAX_SECONDS,
        slow_call_duration=MAX_SECONDS,
    )
    clock = FakeClock()
    breaker = CircuitBreaker(name, store=store, config=config, clock=clock)
    dep = Dependency()

    # WHEN a failure trips it
    fail(breaker, dep, 1)

    # THEN a fresh container reads it back open for the whole window, not as corrupt
    fresh = CircuitBreaker(name, store=store, config=config, clock=clock)
    seen = fresh.snapshot()
    assert (seen.state, seen.retry_after) == (State.OPEN, half)
    assert fresh.stats.corrupt_records == 0
