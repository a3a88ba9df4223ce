"""Shadow mode's acceptance test on every kind of store: MemoryStore, DynamoDB (moto in-process
and moto's server) and Redis (a real redis-server).

In shadow mode 6 failing calls against a threshold of 2 all reach the dependency while
``snapshot().state`` reads open and ``WouldReject`` counts 4; after ``fleetbreaker tune NAME
--mode enforce`` (the CLI's store operation) the next call is rejected within ``cache_ttl``.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, State
from fleetbreaker.cli import POLICY
from fleetbreaker.metrics import MetricsListener
from fleetbreaker.tuning import Action, encode_tuned
from tests.contract.conftest import make_store
from tests.observability.emf import data, emf_documents
from tests.support import Dependency, FakeClock

SHADOW_BACKENDS = ["memory", "moto", "moto_server", "redis"]
CACHE_TTL = 1.0


@pytest.fixture(params=SHADOW_BACKENDS)
def shadow_store(request: pytest.FixtureRequest) -> Any:
    return make_store(request, request.param)


def test_shadow_counts_would_rejects_and_tune_enforce_switches_it_within_cache_ttl(
    shadow_store: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a shadow breaker with a threshold of 2 on the store, counting EMF metrics
    clock = FakeClock()
    name = f"shadow-{uuid.uuid4().hex[:8]}"
    metrics = MetricsListener(service="contract")
    # A generous store deadline: on a loaded machine moto's first write can take over the
    # default second, and a degraded breaker would count locally (not what this test is about).
    config = BreakerConfig(
        failure_threshold=2,
        recovery_timeout=30,
        cache_ttl=CACHE_TTL,
        mode="shadow",
        store_deadline_seconds=30,
    )
    breaker = CircuitBreaker(
        name, store=shadow_store, config=config, clock=clock, listeners=[metrics]
    )
    dependency = Dependency()
    dependency.failing = True

    # WHEN 6 calls fail
    for _ in range(6):
        with pytest.raises(ConnectionError):
            breaker.call(dependency)

    # THEN all 6 reached the dependency, the fleet's breaker reads open, WouldReject counts 4
    assert dependency.calls == 6
    assert breaker.snapshot().state is State.OPEN
    assert breaker.snapshot().mode == "shadow"
    capsys.readouterr()
    metrics.flush()
    points = data(emf_documents(capsys.readouterr().out))
    would = [p for p in points if p.name == "WouldReject"]
    assert [(p.total, dict(p.dimensions)) for p in would] == [
        (4, {"Breaker": name, "service": "contract"})
    ]
    assert not [p for p in points if p.name == "Rejected"]

    # WHEN an operator switches the fleet to enforce (what `fleetbreaker tune NAME --mode
    # enforce` writes), and cache_ttl passes
    clock.advance(0.5)
    action = Action("tune", "operator", "shadow run looked right", clock())
    shadow_store.tune(name, POLICY, clock(), encode_tuned({"mode": "enforce"}), action)
    clock.advance(CACHE_TTL)

    # THEN the next call is rejected without reaching the dependency
    with pytest.raises(CircuitOpenError):
        breaker.call(dependency)
    assert dependency.calls == 6
    assert breaker.snapshot().mode == "enforce"
    assert not breaker.degraded, "every answer came from the shared store"
