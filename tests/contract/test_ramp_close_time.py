"""Every store keeps a recovery's close time: the recovery ramp starts from it.

A probe's success, or an operator's reset of an open, half-open or forced open breaker, is a
recovery: the closed record it writes says when (``closed_at``), and every write of that
generation keeps it (failures, reports, census writes), so a container that first sees the
record long after the close still ramps from the close. A reset of a closed or disabled
breaker is no recovery: nothing was being turned away.
"""

from __future__ import annotations

from typing import Any

from fleetbreaker.record import ProbeReport, Report, State
from tests.contract.test_store_contract import half_open
from tests.support import STORE_POLICY, T0


def test_a_probe_that_closes_leaves_the_close_time(store: Any, name: str) -> None:
    # GIVEN a half-open breaker whose probe holds the lease
    now, token = half_open(store, name)

    # WHEN the probe succeeds 1 s later
    store.settle_probe(
        name, STORE_POLICY, now + 1000, ProbeReport(token, True), store.load(name, now + 1000)
    )

    # THEN the record is closed and says when: the moment of the settle
    record = store.load(name, now + 1001)
    assert record.state is State.CLOSED
    assert record.closed_at == now + 1000


def test_every_write_after_the_close_keeps_its_time(store: Any, name: str) -> None:
    # GIVEN a breaker that just closed
    now, token = half_open(store, name)
    store.settle_probe(
        name, STORE_POLICY, now + 1, ProbeReport(token, True), store.load(name, now + 1)
    )
    closed = store.load(name, now + 1)

    # WHEN a failure is counted, a census write and a report land
    store.record_failure(name, STORE_POLICY, now + 5, closed)
    store.census(name, STORE_POLICY, now + 6, store.load(name, now + 6))
    store.report(name, STORE_POLICY, now + 7, Report("c1", calls=3), store.load(name, now + 7))

    # THEN the record still says when it closed, in the close's generation
    counted = store.load(name, now + 8)
    assert counted.closed_at == now + 1
    assert counted.gen == closed.gen
    assert counted.failures == 1
    assert now > T0


def test_a_trip_ends_the_close_time(store: Any, name: str) -> None:
    # GIVEN a breaker that closed, then failed again up to its threshold
    now, token = half_open(store, name)
    store.settle_probe(
        name, STORE_POLICY, now + 1, ProbeReport(token, True), store.load(name, now + 1)
    )
    for step in range(STORE_POLICY.failure_threshold):
        store.record_failure(name, STORE_POLICY, now + 10 + step, store.load(name, now + 10 + step))

    # THEN the open record has no close time (its own close will)
    opened = store.load(name, now + 20)
    assert opened.state is State.OPEN
    assert opened.closed_at == 0


def test_a_reset_of_a_closed_or_disabled_breaker_is_no_recovery(
    shared_store: Any, name: str
) -> None:
    # GIVEN a closed breaker, and a disabled one (operator overrides need the shared store)
    store = shared_store
    store.record_failure(name, STORE_POLICY, T0, None)
    store.force_state(f"{name}-d", STORE_POLICY, T0, State.DISABLED)

    # WHEN an operator resets both
    for breaker in (name, f"{name}-d"):
        store.force_state(breaker, STORE_POLICY, T0 + 10, State.CLOSED)

    # THEN neither record has a close time: no recovery ramp starts
    for breaker in (name, f"{name}-d"):
        record = store.load(breaker, T0 + 11)
        assert record.state is State.CLOSED
        assert record.closed_at == 0


def test_a_reset_of_an_open_or_forced_open_breaker_is_a_recovery(
    shared_store: Any, name: str
) -> None:
    # GIVEN an open breaker, and a forced open one
    store = shared_store
    now, _ = half_open(store, name)
    store.force_state(f"{name}-f", STORE_POLICY, now, State.FORCED_OPEN)

    # WHEN an operator resets both
    for breaker in (name, f"{name}-f"):
        store.force_state(breaker, STORE_POLICY, now + 10, State.CLOSED)

    # THEN both records say when they closed: the ramp starts from the reset
    for breaker in (name, f"{name}-f"):
        assert store.load(breaker, now + 11).closed_at == now + 10
