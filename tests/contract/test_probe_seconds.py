"""``CircuitBreaker.check(probe_seconds=...)`` on every store: a probe states its deadline.

A caller turned away while a probe runs is told to come back when the probe's lease ends. A
probe that says how long its call may take (a workflow step's timeout) takes its lease for
that long, capped by ``probe_lease_seconds``, so the others wait for its deadline instead of
a whole lease. The Step Functions gate passes a workflow's ``probe_seconds`` here
(tests/stepfunctions/test_probe_deadline.py executes it).
"""

from __future__ import annotations

from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, Decision, MemoryStore, State
from tests.support import FakeClock, quiet_rng

LEASE_S = 20.0
CONFIG = BreakerConfig(
    failure_threshold=1,
    recovery_timeout=10,
    probe_lease_seconds=LEASE_S,
    cache_ttl=0,
    store_deadline_seconds=30,  # a loaded machine's emulator; the deadline has its own tests
)


def container(store: Any, clock: FakeClock, name: str) -> CircuitBreaker:
    # cache_ttl=0: every check reads the store, as a container whose cache has aged would.
    return CircuitBreaker(name, store=store, config=CONFIG, clock=clock, rng=quiet_rng())


@pytest.fixture
def due(atomic_store: Any, clock: FakeClock, name: str) -> tuple[CircuitBreaker, CircuitBreaker]:
    """Two containers of an open breaker whose open window has just ended."""
    first, second = container(atomic_store, clock, name), container(atomic_store, clock, name)
    first.record(False)
    assert first.state is State.OPEN
    clock.advance(CONFIG.recovery_timeout)
    return first, second


def test_a_caller_turned_away_waits_for_the_probes_deadline_not_the_lease(
    due: tuple[CircuitBreaker, CircuitBreaker], clock: FakeClock
) -> None:
    prober, other = due
    # GIVEN a probe whose call may take 3 s (a lease of 20 s)
    probe = prober.check(probe_seconds=3)
    assert probe.decision is Decision.PROBE
    clock.advance(0.25)
    # WHEN another container checks while it runs
    turned_away = other.check()
    # THEN it is told to come back at the probe's deadline
    assert (turned_away.decision, turned_away.state) == (Decision.REJECT, State.HALF_OPEN)
    assert turned_away.retry_after_s == pytest.approx(2.75)


def test_the_probe_settles_within_its_deadline(
    due: tuple[CircuitBreaker, CircuitBreaker], clock: FakeClock
) -> None:
    prober, _ = due
    probe = prober.check(probe_seconds=3)
    clock.advance(2.9)
    assert prober.record(True, probe.token).applied is True
    assert prober.state is State.CLOSED


def test_past_its_deadline_the_slot_goes_to_the_next_caller_and_the_probe_is_stale(
    due: tuple[CircuitBreaker, CircuitBreaker], clock: FakeClock
) -> None:
    prober, other = due
    probe = prober.check(probe_seconds=3)
    # WHEN the probe's deadline passes without a report (well inside the 20 s lease)
    clock.advance(3)
    # THEN the next caller probes, and the first probe's late report changes nothing
    assert other.check().decision is Decision.PROBE
    late = prober.record(True, probe.token)
    assert (late.applied, late.state) == (False, State.HALF_OPEN)


def test_a_deadline_longer_than_the_lease_is_capped_by_it(
    due: tuple[CircuitBreaker, CircuitBreaker], clock: FakeClock
) -> None:
    prober, other = due
    assert prober.check(probe_seconds=LEASE_S * 10).decision is Decision.PROBE
    assert other.check().retry_after_s == pytest.approx(LEASE_S)


def test_without_a_deadline_the_probe_holds_the_whole_lease(
    due: tuple[CircuitBreaker, CircuitBreaker], clock: FakeClock
) -> None:
    prober, other = due
    assert prober.check().decision is Decision.PROBE
    assert other.check().retry_after_s == pytest.approx(LEASE_S)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "3"])
def test_a_deadline_that_is_not_a_positive_number_is_refused(bad: Any, name: str) -> None:
    breaker = CircuitBreaker(name, store=MemoryStore(), config=CONFIG, clock=FakeClock())
    with pytest.raises(ValueError, match="probe_seconds must be a positive number"):
        breaker.check(probe_seconds=bad)
