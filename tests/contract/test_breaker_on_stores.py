"""The breaker on every store: the cache and the healthy path cost what DESIGN.md promises."""

from __future__ import annotations

from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, State
from tests.support import Dependency, FakeClock

CONFIG = BreakerConfig(failure_threshold=3, recovery_timeout=10, cache_ttl=1.0)


def make(store: Any, clock: FakeClock, name: str) -> CircuitBreaker:
    return CircuitBreaker(name, store=store, config=CONFIG, clock=clock)


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
