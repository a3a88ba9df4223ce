"""Clock skew on every store: what a caller whose clock is off can and cannot do to the fleet.

The stores compare times on the caller's clock (Redis here too: the contract runs its scripts
on the caller's clock). The package assumes two clocks of the fleet differ by at most
``CLOCK_TOLERANCE_MS``; within it the guarantees below hold to that margin, and one holds
whatever the skew: a probe lease blocks the others no longer than its length plus the
tolerance. The numbers are the hardening report's: a 6 s open window and a 3 s lease.
"""

from __future__ import annotations

from typing import Any

import pytest

from fleetbreaker.record import ProbeReport, State
from fleetbreaker.rules import CLOCK_TOLERANCE_MS
from tests.contract.test_store_contract import T0, fail_n
from tests.support import STORE_CONFIG, make_policy

D = CLOCK_TOLERANCE_MS
POLICY = make_policy(STORE_CONFIG, failure_threshold=1, recovery_timeout=6, probe_lease_seconds=3)


def open_at(store: Any, name: str, now: int) -> Any:
    [outcome] = fail_n(store, name, 1, now, POLICY)
    assert outcome.transition == (State.CLOSED, State.OPEN)
    return outcome.record


def test_a_prober_whose_clock_runs_far_ahead_cannot_hold_its_slot(store: Any, name: str) -> None:
    # GIVEN an open breaker, and a prober whose clock runs 30 s ahead: it claims the probe
    # (its clock says the window ended long ago) and then freezes
    opened = open_at(store, name, T0)
    ahead = store.claim_probe(name, POLICY, opened.open_until + 30_000, "ahead", opened)
    assert ahead.token is not None
    assert ahead.record.state is State.HALF_OPEN

    # WHEN a container on the true clock asks as soon as the window has ended
    claim = store.claim_probe(name, POLICY, opened.open_until, "true", ahead.record)

    # THEN it gets the slot at once, not 33 s later
    assert claim.token is not None
    # AND the frozen prober's late result, when it comes, changes nothing
    late = store.settle_probe(
        name, POLICY, opened.open_until + 31_000, ProbeReport(ahead.token, False, 1.0), None
    )
    assert not late.changed
    assert store.load(name, opened.open_until).state is State.HALF_OPEN


@pytest.mark.parametrize(
    ("ahead_ms", "blocked_ms"),
    [
        (0, POLICY.lease_ms),  # same clocks: the lease's length
        (D, POLICY.lease_ms + D),  # at the tolerance: length plus tolerance, the bound
        (D + 1, 0),  # past it: not trusted, free at once
        (-D, POLICY.lease_ms - D),  # behind: it ends early on the others' clock
    ],
)
def test_a_lease_blocks_others_at_most_its_length_plus_the_tolerance(
    store: Any, name: str, ahead_ms: int, blocked_ms: int
) -> None:
    # GIVEN a probe claimed at true time t by a container whose clock is ahead_ms ahead
    opened = open_at(store, name, T0)
    t = opened.open_until + D
    first = store.claim_probe(name, POLICY, t + ahead_ms, "first", opened)
    assert first.token is not None

    # WHEN a container on the true clock asks for the slot, just before and at blocked_ms
    if blocked_ms > 0:
        early = store.claim_probe(name, POLICY, t + blocked_ms - 1, "early", first.record)
        assert early.token is None
    claim = store.claim_probe(name, POLICY, t + blocked_ms, "second", first.record)

    # THEN it is kept out exactly that long, and never longer than lease + tolerance
    assert claim.token is not None
    assert blocked_ms <= POLICY.lease_ms + D


def test_a_trip_by_a_slow_clock_shortens_the_window_by_at_most_its_skew(
    store: Any, name: str
) -> None:
    # GIVEN a container whose clock is D behind trips the breaker at true time t
    t = T0
    opened = open_at(store, name, t - D)

    # WHEN a container on the true clock asks before the window ends on the true clock,
    # less the skew
    early = store.claim_probe(name, POLICY, t + POLICY.base_open_ms - D - 1, "early", opened)
    on_time = store.claim_probe(name, POLICY, t + POLICY.base_open_ms - D, "on-time", opened)

    # THEN the window lasted its length less the skew, never less
    assert early.token is None
    assert on_time.token is not None
