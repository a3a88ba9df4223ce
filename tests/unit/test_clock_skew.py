"""A fleet whose clocks disagree within the stated tolerance keeps its guarantees to that margin.

Three breakers share one MemoryStore. Their clocks run D/2 behind, on time and D/2 ahead of a
true clock, so any two differ by at most D = CLOCK_TOLERANCE_MS, the skew the package states
it tolerates. True time moves by hand in 50 ms steps and every container asks once a step.
The open window is 6 s and the probe lease 3 s (the hardening report's numbers).
"""

from __future__ import annotations

import itertools
import random

from fleetbreaker import BreakerConfig, CircuitBreaker, Decision, MemoryStore
from fleetbreaker.record import Lease
from fleetbreaker.rules import CLOCK_TOLERANCE_MS, lease_ended
from tests.support import T0, FakeClock

D = CLOCK_TOLERANCE_MS
OPEN_MS = 6_000
LEASE_MS = 3_000
STEP_MS = 50


class SkewedClock:
    """A container's clock: the true clock plus a fixed skew."""

    def __init__(self, true: FakeClock, skew_ms: int) -> None:
        self.true = true
        self.skew_ms = skew_ms

    def __call__(self) -> int:
        return self.true() + self.skew_ms


def fleet(true: FakeClock, skews: tuple[int, ...]) -> list[CircuitBreaker]:
    store = MemoryStore()
    config = BreakerConfig(
        failure_threshold=1,
        recovery_timeout=OPEN_MS / 1000,
        recovery_jitter=0.0,
        probe_lease_seconds=LEASE_MS / 1000,
        cache_ttl=0,
    )
    return [
        CircuitBreaker(
            "payment-api",
            store=store,
            config=config,
            clock=SkewedClock(true, skew),
            listeners=[],
            rng=random.Random(1),
        )
        for skew in skews
    ]


def probes_until(true: FakeClock, breakers: list[CircuitBreaker], end_ms: int) -> list[int]:
    """Step true time to end_ms; the true times at which a probe was admitted (never settled)."""
    admitted = []
    while true() < end_ms:
        true.advance(STEP_MS / 1000)
        for breaker in breakers:
            if breaker.check().decision is Decision.PROBE:
                admitted.append(true() - T0)
    return admitted


def test_a_trip_by_the_slowest_clock_opens_the_fleet_for_its_window_less_the_tolerance() -> None:
    # GIVEN containers D/2 behind, on time and D/2 ahead; the one behind trips the breaker
    true = FakeClock(T0)
    slow, on_time, fast = fleet(true, (-D // 2, 0, D // 2))
    slow.record(success=False)
    assert fast.check().decision is Decision.REJECT

    # WHEN true time passes and everyone keeps asking (the first prober never reports)
    admitted = probes_until(true, [slow, on_time, fast], T0 + 3 * OPEN_MS)

    # THEN the first probe comes no earlier than the window less D, and no later than it plus D
    assert OPEN_MS - D <= admitted[0] <= OPEN_MS + D
    # AND while the first probe's lease runs, nobody else probes: the next probe comes no
    # earlier than the lease less D after it, and no later than the lease plus D
    assert LEASE_MS - D <= admitted[1] - admitted[0] <= LEASE_MS + D
    # AND one probe at a time, all along
    gaps = [b - a for a, b in itertools.pairwise(admitted)]
    assert all(LEASE_MS - D <= gap <= LEASE_MS + D for gap in gaps)


def test_a_frozen_prober_on_the_fastest_clock_blocks_the_others_at_most_lease_plus_tolerance() -> (
    None
):
    # GIVEN the container D/2 ahead is the first to probe and then freezes (never reports)
    true = FakeClock(T0)
    slow, on_time, fast = fleet(true, (-D // 2, 0, D // 2))
    on_time.record(success=False)
    admitted = probes_until(true, [fast], T0 + OPEN_MS)
    assert admitted == [OPEN_MS - D // 2]

    # WHEN the others keep asking
    later = probes_until(true, [slow, on_time], T0 + OPEN_MS + 2 * LEASE_MS)

    # THEN the next probe comes within the lease plus the tolerance of the frozen one
    assert later[0] - admitted[0] <= LEASE_MS + D


def test_a_frozen_prober_whose_clock_runs_far_ahead_blocks_nobody() -> None:
    # GIVEN a container 30 s ahead (far outside the tolerance) probes and freezes
    true = FakeClock(T0)
    on_time, far_ahead = fleet(true, (0, 30_000))
    on_time.record(success=False)
    assert far_ahead.check().decision is Decision.PROBE

    # WHEN the container on time asks after the window has ended on its clock
    admitted = probes_until(true, [on_time], T0 + OPEN_MS + LEASE_MS)

    # THEN it probes: the far-ahead lease did not hold the slot for 33 s
    assert admitted
    assert admitted[0] <= OPEN_MS


def test_a_lease_with_no_grant_time_lasts_until_its_expiry() -> None:
    # Records written before grant times were kept have none: such a lease is judged by its
    # expiry alone, as it was then.
    lease = Lease("0-old", T0 + LEASE_MS)

    assert not lease_ended(lease, T0)
    assert lease_ended(lease, T0 + LEASE_MS)


def test_a_lease_granted_past_the_tolerance_ahead_of_the_caller_has_ended() -> None:
    assert not lease_ended(Lease("0-a", T0 + 60_000, T0 + D), T0)
    assert lease_ended(Lease("0-a", T0 + 60_000, T0 + D + 1), T0)
