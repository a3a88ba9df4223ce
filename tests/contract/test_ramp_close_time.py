"""Every store writes, on closing, the fresh record the recovery ramp reads its close time from.

fleetbreaker.ramp.closed_at relies on it: a probe's success leaves a closed record with a
new generation, no failures, no failure window, and ``updated_at`` at the close.
"""

from __future__ import annotations

from typing import Any

from fleetbreaker.ramp import closed_at
from fleetbreaker.state import ProbeReport, State
from tests.contract.test_store_contract import POLICY, half_open
from tests.support import T0


def test_a_probe_that_closes_leaves_the_close_time(store: Any, name: str) -> None:
    # GIVEN a half-open breaker whose probe holds the lease
    now, token = half_open(store, name)

    # WHEN the probe succeeds 1 s later
    store.settle_probe(
        name, POLICY, now + 1000, ProbeReport(token, True), store.load(name, now + 1000)
    )

    # THEN the record is closed and says when: the moment of the settle
    record = store.load(name, now + 1001)
    assert record.state is State.CLOSED
    assert closed_at(record) == now + 1000


def test_a_failure_after_the_close_hides_it_but_keeps_the_generation(store: Any, name: str) -> None:
    # GIVEN a breaker that just closed
    now, token = half_open(store, name)
    store.settle_probe(name, POLICY, now + 1, ProbeReport(token, True), store.load(name, now + 1))
    closed = store.load(name, now + 1)

    # WHEN a failure is counted
    store.record_failure(name, POLICY, now + 5, closed)

    # THEN the record no longer says when it closed, but its generation is the close's
    counted = store.load(name, now + 6)
    assert closed_at(counted) is None
    assert counted.gen == closed.gen
    assert now > T0


def test_a_reset_of_a_closed_or_disabled_breaker_is_no_recovery(
    shared_store: Any, name: str
) -> None:
    # GIVEN a closed breaker, and a disabled one (operator overrides need the shared store)
    store = shared_store
    store.record_failure(name, POLICY, T0, None)
    store.force_state(f"{name}-d", POLICY, T0, State.DISABLED)

    # WHEN an operator resets both
    for breaker in (name, f"{name}-d"):
        store.force_state(breaker, POLICY, T0 + 10, State.CLOSED)

    # THEN neither record has a close time: no recovery ramp starts
    for breaker in (name, f"{name}-d"):
        record = store.load(breaker, T0 + 11)
        assert record.state is State.CLOSED
        assert closed_at(record) is None


def test_a_reset_of_an_open_or_forced_open_breaker_is_a_recovery(
    shared_store: Any, name: str
) -> None:
    # GIVEN an open breaker, and a forced open one
    store = shared_store
    now, _ = half_open(store, name)
    store.force_state(f"{name}-f", POLICY, now, State.FORCED_OPEN)

    # WHEN an operator resets both
    for breaker in (name, f"{name}-f"):
        store.force_state(breaker, POLICY, now + 10, State.CLOSED)

    # THEN both records say when they closed: the ramp starts from the reset
    for breaker in (name, f"{name}-f"):
        assert closed_at(store.load(breaker, now + 11)) == now + 10
