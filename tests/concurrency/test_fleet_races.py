"""8 processes × 8 threads on one breaker, against real shared stores.

GIVEN a fleet of containers sharing a store, WHEN the dependency fails, THEN the fleet trips
once after about `failure_threshold` failures; WHEN the open window ends and every thread
races, THEN exactly the probe budget is admitted.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from devtools import servers
from tests.concurrency.fleet import Fleet, StoreSpec
from tests.support import T0

pytestmark = pytest.mark.slow

PROCESSES, THREADS = 8, 8
# 64 threads against one local server on a busy test machine: a store call can take seconds
# (the clients get 10 s timeouts for the same reason). These tests are about atomicity, so
# the store deadline is as generous; tests/faults and tests/redis cover the deadline itself.
CONFIG = {
    "failure_threshold": 5,
    "recovery_timeout": 30.0,
    "half_open_max_probes": 1,
    "store_deadline_seconds": 30.0,
}
FLEET_BACKENDS = ["moto_server", "dynalite", "redis"]


@pytest.fixture(params=FLEET_BACKENDS)
def spec(request: pytest.FixtureRequest) -> StoreSpec:
    if request.param == "moto_server":
        endpoint = request.getfixturevalue("moto_server")
        return StoreSpec("dynamodb", endpoint, servers.make_table(endpoint))
    if request.param == "dynalite":
        endpoint = request.getfixturevalue("dynalite_server")
        return StoreSpec("dynamodb", endpoint, servers.make_table(endpoint))
    if request.param == "redis":
        return StoreSpec("redis", request.getfixturevalue("redis_server"))
    raise AssertionError(request.param)


def _fleet(spec: StoreSpec, **overrides: Any) -> Fleet:
    return Fleet(spec, f"race-{uuid.uuid4().hex[:8]}", {**CONFIG, **overrides}, T0)


def test_a_failing_dependency_trips_the_fleet_exactly_once(spec: StoreSpec) -> None:
    fleet = _fleet(spec)

    result = fleet.run("trip", PROCESSES, THREADS)

    assert result.transitions == [("closed", "open")]
    assert result.dependency_calls <= CONFIG["failure_threshold"] + PROCESSES * THREADS
    assert spec.build().load(fleet.name, T0).gen == 1


@pytest.mark.parametrize("budget", [1, 3])
def test_racing_callers_after_the_open_window_get_exactly_the_budget(
    spec: StoreSpec, budget: int
) -> None:
    fleet = _fleet(spec, half_open_max_probes=budget)
    fleet.run("trip", 2, 4)
    fleet.advance(CONFIG["recovery_timeout"])

    result = fleet.run("race", PROCESSES, THREADS)

    assert result.dependency_calls == budget
    assert result.decisions.count("probe") == budget
    assert result.decisions.count("reject") == PROCESSES * THREADS - budget
    assert ("open", "half_open") in result.transitions


def test_a_prober_whose_lease_expired_cannot_overwrite_the_next_probe(spec: StoreSpec) -> None:
    from fleetbreaker import BreakerConfig, CircuitBreaker, State
    from tests.support import FakeClock

    clock = FakeClock()
    config = BreakerConfig(failure_threshold=1, recovery_timeout=1, probe_lease_seconds=5)
    name = f"lease-{uuid.uuid4().hex[:8]}"
    frozen, next_one = (
        CircuitBreaker(name, store=spec.build(), config=config, clock=clock) for _ in range(2)
    )
    frozen.record(False)  # one failure trips (threshold 1)
    clock.advance(1)
    stale = frozen.check()  # GIVEN a container that takes the probe and freezes
    clock.advance(5)
    fresh = next_one.check()  # WHEN its lease runs out and another container probes

    closed = next_one.record(True, fresh.token)
    late = frozen.record(False, stale.token)

    assert stale.token is not None
    assert fresh.token is not None
    assert closed.state is State.CLOSED
    assert not late.applied  # THEN the late failure changes nothing
    assert spec.build().load(name, clock()).state is State.CLOSED
