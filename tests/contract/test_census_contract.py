"""The census ring on every store: counted apart, in any state, carried across transitions,
never judged.

A census write is the count policy's fleet-size signal (fleetbreaker.census). These tests
hold every store to the rule ``rules.apply_census``: it counts one write in the current
slice, never trips a breaker whatever the record holds, never hides a close, keeps an
override's TTL, and every state change keeps the ring.
"""

from __future__ import annotations

from typing import Any

from fleetbreaker.frozen import replace
from fleetbreaker.policy import OVERRIDE_TTL_S
from fleetbreaker.record import ProbeReport, Report, State
from tests.contract.test_store_contract import half_open, open_breaker
from tests.support import STORE_POLICY, T0

RATE = replace(STORE_POLICY, failure_rate=0.5, minimum_calls=4, reporting=True)


def census_counts(record: Any) -> dict[int, int]:
    return {bucket.idx: bucket.count for bucket in record.census.values()}


def test_a_census_write_on_no_record_leaves_a_closed_one_that_counts_it(
    store: Any, name: str
) -> None:
    # WHEN a census write finds no record
    outcome = store.census(name, STORE_POLICY, T0, None)

    # THEN a closed record holds one census write in the current slice, and nothing else
    record = store.load(name, T0)
    assert outcome.changed
    assert outcome.transition is None
    assert record.state is State.CLOSED
    assert census_counts(record) == {T0 // STORE_POLICY.bucket_ms: 1}
    assert (record.failures, record.buckets) == (0, {})
    assert outcome.record == record


def test_census_writes_in_one_slice_add_up_and_a_new_slice_starts_over(
    store: Any, name: str
) -> None:
    # GIVEN three census writes in one slice of the ring
    for step in range(3):
        store.census(name, STORE_POLICY, T0 + step, store.load(name, T0 + step))

    # WHEN the next lands one slice later
    later = T0 + STORE_POLICY.bucket_ms
    store.census(name, STORE_POLICY, later, store.load(name, later))

    # THEN each slice holds its own count
    first, second = T0 // STORE_POLICY.bucket_ms, later // STORE_POLICY.bucket_ms
    assert census_counts(store.load(name, later)) == {first: 3, second: 1}


def test_census_writes_are_no_calls(store: Any, name: str) -> None:
    # GIVEN census writes, and a container's report of calls in the same slice
    store.census(name, RATE, T0, None)
    store.census(name, RATE, T0 + 1, store.load(name, T0 + 1))
    store.report(name, RATE, T0 + 2, Report("c1", calls=2), store.load(name, T0 + 2))

    # THEN the window counts the report's calls and reports only; the census is apart
    record = store.load(name, T0 + 3)
    [bucket] = record.buckets.values()
    assert (bucket.calls, bucket.reports) == (2, 1)
    assert census_counts(record) == {T0 // STORE_POLICY.bucket_ms: 2}


def test_a_census_write_never_trips_whatever_the_window_holds(store: Any, name: str) -> None:
    # GIVEN a window full of the rate policy's failures (a fleet just tuned back from it),
    # far more than the count policy's threshold
    store.report(name, RATE, T0, Report("c1", calls=3, failures=2), None)
    assert store.load(name, T0).state is State.CLOSED

    # WHEN census writes land under the count policy
    for step in range(1, 6):
        outcome = store.census(name, STORE_POLICY, T0 + step, store.load(name, T0 + step))
        assert outcome.transition is None

    # THEN the breaker is still closed
    assert store.load(name, T0 + 10).state is State.CLOSED


def test_census_writes_count_while_open_and_half_open(store: Any, name: str) -> None:
    # GIVEN an open breaker
    opened = open_breaker(store, name)

    # WHEN a census write lands while open, and another once it is half-open
    assert store.census(name, STORE_POLICY, T0 + 1, opened).transition is None
    now, token = half_open(store, f"{name}-h")
    assert store.census(
        f"{name}-h", STORE_POLICY, now + 1, store.load(f"{name}-h", now + 1)
    ).changed

    # THEN each counts, and neither state moved
    record = store.load(name, T0 + 2)
    assert (record.state, sum(census_counts(record).values())) == (State.OPEN, 1)
    probing = store.load(f"{name}-h", now + 2)
    assert probing.state is State.HALF_OPEN
    assert probing.leases[0].token == token
    assert sum(census_counts(probing).values()) == 1


def test_every_transition_keeps_the_census(store: Any, name: str) -> None:
    # GIVEN a census write, then a trip, a claim, a failed probe, a claim and a good probe
    store.census(name, STORE_POLICY, T0 - 1, None)
    expected = census_counts(store.load(name, T0 - 1))
    opened = open_breaker(store, name)
    claim = store.claim_probe(name, STORE_POLICY, opened.open_until, "a", opened)
    failed = store.settle_probe(
        name, STORE_POLICY, opened.open_until + 1, ProbeReport(claim.token, False), None
    )
    reopened = failed.record
    again = store.claim_probe(name, STORE_POLICY, reopened.open_until, "b", reopened)
    closed = store.settle_probe(
        name, STORE_POLICY, reopened.open_until + 1, ProbeReport(again.token, True), None
    )

    # THEN the closed record still holds the census (read within the window)
    assert closed.transition == (State.HALF_OPEN, State.CLOSED)
    assert census_counts(closed.record) == expected


def test_an_operator_override_keeps_the_census(shared_store: Any, name: str) -> None:
    # GIVEN a census write
    shared_store.census(name, STORE_POLICY, T0, None)

    # WHEN an operator forces the breaker open, then resets it
    shared_store.force_state(name, STORE_POLICY, T0 + 1, State.FORCED_OPEN)
    shared_store.force_state(name, STORE_POLICY, T0 + 2, State.CLOSED)

    # THEN the census is still there
    assert census_counts(shared_store.load(name, T0 + 3)) == {T0 // STORE_POLICY.bucket_ms: 1}


def test_a_census_write_keeps_an_override_held(shared_store: Any, name: str) -> None:
    # GIVEN a forced open breaker (its record outlives any idle TTL)
    shared_store.force_state(name, STORE_POLICY, T0, State.FORCED_OPEN)

    # WHEN a census write lands on it
    shared_store.census(name, STORE_POLICY, T0 + 1, shared_store.load(name, T0 + 1))

    # THEN the override and its long TTL are untouched
    record = shared_store.load(name, T0 + 2)
    assert record.state is State.FORCED_OPEN
    assert record.expires_at - (T0 + 1) // 1000 >= OVERRIDE_TTL_S


def test_a_breaker_write_says_its_window_and_an_operator_keeps_it(
    shared_store: Any, name: str
) -> None:
    # GIVEN a failure counted under a 10 s window
    shared_store.record_failure(name, STORE_POLICY, T0, None)
    assert shared_store.load(name, T0).window_ms == STORE_POLICY.window_ms

    # WHEN an operator's tool, whose policy guesses another window, forces and resets it
    guess = replace(STORE_POLICY, window_ms=60_000)
    shared_store.force_state(name, guess, T0 + 1, State.FORCED_OPEN)
    shared_store.force_state(name, guess, T0 + 2, State.CLOSED)

    # THEN the record still says the fleet's window
    assert shared_store.load(name, T0 + 3).window_ms == STORE_POLICY.window_ms
