"""Configuration the stores must honour as written: a record TTL derived from the settings."""

from __future__ import annotations

from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, State
from tests.contract.conftest import make_store
from tests.support import Dependency, FakeClock


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Any:
    """The reference store and one real backend."""
    return make_store(request, request.param)


def test_a_long_open_window_from_the_environment_keeps_its_record(store: Any, name: str) -> None:
    # GIVEN an open window of 100,000 s (a day and more), set by the environment only: the
    # record TTL, left at its default of a day, grows to the window plus a probe lease
    env = {"BREAKER_RECOVERY_TIMEOUT": "100000", "BREAKER_MAX_RECOVERY_TIMEOUT": "100000"}
    config = BreakerConfig.from_env(env, failure_threshold=1)
    clock = FakeClock()
    breaker = CircuitBreaker(name, store=store, config=config, clock=clock)

    # WHEN one failure opens the breaker
    dep = Dependency()
    dep.failing = True
    with pytest.raises(ConnectionError):
        breaker.call(dep)

    # THEN the store keeps the record past the whole window and a probe lease
    record = store.load(name, clock())
    assert record.expires_at >= clock() // 1000 + 100_010

    # AND a fresh container one second before the window ends still sees it open
    clock.advance(100_000 - 1)
    fresh = CircuitBreaker(name, store=store, config=config, clock=clock)
    assert fresh.snapshot().state is State.OPEN
    with pytest.raises(CircuitOpenError):
        fresh.call(Dependency())
