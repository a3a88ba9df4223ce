"""flush() sends every pending call, on every kind of store (a SnapStart snapshot's hook).

A report may carry a container's recent calls alone (rate.recent_worse): flush must send the
older ones too, in as many reports as it takes, nothing lost and nothing counted twice.
"""

from __future__ import annotations

from typing import Any

import pytest

from fleetbreaker import BreakerConfig
from tests.contract.conftest import make_store
from tests.support import Dependency, FakeClock, breaker_on

FLUSH_BACKENDS = ["memory", "moto", "redis"]

# The rate policy with short spans (a 3 s window) and a 2 s report interval: calls pend
# across two spans, so the failures at the end are "recent" and the good calls "older".
RATE = BreakerConfig(
    failure_rate_threshold=0.5,
    window_seconds=3,
    report_interval=2.0,
    recovery_jitter=0.0,
)


@pytest.fixture(params=FLUSH_BACKENDS)
def flush_store(request: pytest.FixtureRequest) -> Any:
    return make_store(request, request.param)


def test_flush_sends_every_pending_call(flush_store: Any, clock: FakeClock, name: str) -> None:
    # GIVEN a rate-policy breaker that made 30 good calls over 0.9 s, then 3 failing ones
    breaker = breaker_on(flush_store, clock, RATE, name=name, listeners=[])
    dep = Dependency()
    for _ in range(30):
        breaker.call(dep)
        clock.advance(0.03)
    dep.failing = True
    for _ in range(3):
        with pytest.raises(ConnectionError):
            breaker.call(dep)
    # WHEN it flushes (before a snapshot)
    breaker.flush()
    # THEN the fleet's window holds all 33 calls and the 3 failures
    reader = breaker_on(flush_store, clock, RATE, name=name, listeners=[])
    snapshot = reader.snapshot()
    assert (snapshot.calls, snapshot.failures) == (33, 3)
    # AND a second flush has nothing left to send: nothing is counted twice
    breaker.flush()
    clock.advance(reader.config.cache_ttl)
    snapshot = reader.snapshot()
    assert (snapshot.calls, snapshot.failures) == (33, 3)
