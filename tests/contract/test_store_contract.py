"""The store contract: every store, the same tests, the same answers.

Times are explicit epoch milliseconds; nothing here sleeps.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from fleetbreaker.frozen import replace
from fleetbreaker.policy import Policy
from fleetbreaker.record import ProbeReport, Report, State
from fleetbreaker.rules import lease_slot
from tests.support import STORE_POLICY

T0 = 1_700_000_000_000  # an arbitrary "now", in epoch ms


def fail_n(
    store: Any, name: str, n: int, now: int = T0, policy: Policy = STORE_POLICY
) -> list[Any]:
    outcomes = []
    for _ in range(n):
        outcomes.append(store.record_failure(name, policy, now, store.load(name, now)))
    return outcomes


def open_breaker(store: Any, name: str, policy: Policy = STORE_POLICY, now: int = T0) -> Any:
    outcomes = fail_n(store, name, policy.failure_threshold, now, policy)
    assert outcomes[-1].transition == (State.CLOSED, State.OPEN)
    return outcomes[-1].record


def half_open(store: Any, name: str, policy: Policy = STORE_POLICY) -> tuple[int, str]:
    opened = open_breaker(store, name, policy)
    now = opened.open_until
    claim = store.claim_probe(name, policy, now, "first", opened)
    assert claim.token is not None
    return now, claim.token


# -- load and counting -------------------------------------------------------------------


def test_missing_record_loads_as_none(store: Any, name: str) -> None:
    assert store.load(name, T0) is None


def test_failures_below_threshold_are_counted_and_stay_closed(store: Any, name: str) -> None:
    outcomes = fail_n(store, name, 2)

    record = store.load(name, T0)
    assert [o.transition for o in outcomes] == [None, None]
    assert record.state is State.CLOSED
    assert record.failures == 2
    assert record.window_start == T0


def test_reaching_threshold_trips_once_with_one_generation_bump(store: Any, name: str) -> None:
    opened = open_breaker(store, name)

    assert opened.state is State.OPEN
    assert opened.gen == 1
    assert opened.open_until == T0 + STORE_POLICY.base_open_ms
    assert store.load(name, T0) == opened


def test_failures_while_open_change_nothing(store: Any, name: str) -> None:
    opened = open_breaker(store, name)

    outcome = store.record_failure(name, STORE_POLICY, T0 + 1, opened)

    assert not outcome.changed
    assert outcome.transition is None
    assert store.load(name, T0 + 1) == opened


def test_failures_in_a_new_window_restart_the_count(store: Any, name: str) -> None:
    fail_n(store, name, 2, now=T0)

    fail_n(store, name, 1, now=T0 + STORE_POLICY.window_ms)

    record = store.load(name, T0 + STORE_POLICY.window_ms)
    assert record.state is State.CLOSED
    assert record.failures == 1
    assert record.window_start == T0 + STORE_POLICY.window_ms


def test_a_stale_observed_record_does_not_lose_counts(store: Any, name: str) -> None:
    fail_n(store, name, 2)

    # GIVEN a caller whose view predates both failures
    outcome = store.record_failure(name, STORE_POLICY, T0, None)

    assert outcome.transition == (State.CLOSED, State.OPEN)


def test_stale_closed_view_of_an_open_breaker_learns_it_is_open(store: Any, name: str) -> None:
    closed_view = fail_n(store, name, 1)[0].record
    fail_n(store, name, 2)

    outcome = store.record_failure(name, STORE_POLICY, T0, closed_view)

    assert outcome.transition is None
    assert outcome.record.state is State.OPEN


def test_threshold_of_one_trips_on_the_first_failure(store: Any, name: str) -> None:
    policy = replace(STORE_POLICY, failure_threshold=1)

    outcome = store.record_failure(name, policy, T0, None)

    assert outcome.transition == (State.CLOSED, State.OPEN)
    assert store.load(name, T0).state is State.OPEN


def test_racing_failures_trip_exactly_once(atomic_store: Any, name: str) -> None:
    store = atomic_store
    results: list[Any] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(3):
            outcome = store.record_failure(name, STORE_POLICY, T0, store.load(name, T0))
            with lock:
                results.append(outcome)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    trips = [o for o in results if o.transition == (State.CLOSED, State.OPEN)]
    assert len(trips) == 1
    assert store.load(name, T0).gen == 1


# -- probes --------------------------------------------------------------------------------


def test_no_probe_before_the_open_window_ends(store: Any, name: str) -> None:
    opened = open_breaker(store, name)

    outcome = store.claim_probe(name, STORE_POLICY, opened.open_until - 1, "early", opened)

    assert outcome.token is None
    assert store.load(name, T0).state is State.OPEN


def test_first_claim_after_the_window_moves_to_half_open(store: Any, name: str) -> None:
    opened = open_breaker(store, name)

    outcome = store.claim_probe(name, STORE_POLICY, opened.open_until, "abc", opened)

    assert outcome.transition == (State.OPEN, State.HALF_OPEN)
    assert outcome.token == "0-abc"
    assert lease_slot(outcome.token) == 0
    assert outcome.record.state is State.HALF_OPEN
    assert outcome.record.gen == opened.gen + 1


def test_a_held_lease_blocks_other_claims_until_it_expires(store: Any, name: str) -> None:
    now, _ = half_open(store, name)
    current = store.load(name, now)

    blocked = store.claim_probe(
        name, STORE_POLICY, now + STORE_POLICY.lease_ms - 1, "second", current
    )
    after_expiry = store.claim_probe(
        name, STORE_POLICY, now + STORE_POLICY.lease_ms, "third", current
    )

    assert blocked.token is None
    assert after_expiry.token == "0-third"


def test_claims_with_a_stale_open_view_lose_to_the_first(store: Any, name: str) -> None:
    opened = open_breaker(store, name)
    now = opened.open_until

    first = store.claim_probe(name, STORE_POLICY, now, "a", opened)
    second = store.claim_probe(name, STORE_POLICY, now, "b", opened)

    assert first.token == "0-a"
    assert second.token is None
    assert second.record.state is State.HALF_OPEN


def test_exactly_max_probes_leases_are_granted(store: Any, name: str) -> None:
    policy = replace(STORE_POLICY, max_probes=3)
    opened = open_breaker(store, name, policy)
    now = opened.open_until

    tokens = [store.claim_probe(name, policy, now, f"n{i}", opened).token for i in range(6)]

    granted = [t for t in tokens if t is not None]
    assert len(granted) == 3
    assert sorted(lease_slot(t) for t in granted) == [0, 1, 2]


def test_probe_success_closes_and_resets(store: Any, name: str) -> None:
    now, token = half_open(store, name)

    outcome = store.settle_probe(
        name, STORE_POLICY, now + 1, ProbeReport(token, True, 1.0), store.load(name, now)
    )

    assert outcome.transition == (State.HALF_OPEN, State.CLOSED)
    record = store.load(name, now + 1)
    assert record.state is State.CLOSED
    assert record.failures == 0
    assert record.reopens == 0
    assert record.gen == 3


def test_several_successes_needed_keep_it_half_open(store: Any, name: str) -> None:
    policy = replace(STORE_POLICY, successes_needed=2)
    now, token = half_open(store, name, policy)

    first = store.settle_probe(
        name, policy, now + 1, ProbeReport(token, True, 1.0), store.load(name, now)
    )
    second_claim = store.claim_probe(name, policy, now + 2, "next", first.record)
    second = store.settle_probe(
        name, policy, now + 3, ProbeReport(second_claim.token, True, 1.0), second_claim.record
    )

    assert first.changed
    assert first.transition is None
    assert first.record.state is State.HALF_OPEN
    assert first.record.successes == 1
    assert second_claim.token is not None
    assert second.transition == (State.HALF_OPEN, State.CLOSED)


def test_probe_failure_reopens_with_a_longer_jittered_window(store: Any, name: str) -> None:
    now, token = half_open(store, name)

    outcome = store.settle_probe(
        name, STORE_POLICY, now + 1, ProbeReport(token, False, 0.9), store.load(name, now)
    )

    assert outcome.transition == (State.HALF_OPEN, State.OPEN)
    record = store.load(name, now + 1)
    assert record.state is State.OPEN
    assert record.reopens == 1
    assert record.open_until == now + 1 + int(
        STORE_POLICY.base_open_ms * STORE_POLICY.backoff * 0.9
    )


def test_open_window_growth_is_capped(store: Any, name: str) -> None:
    now, token = half_open(store, name)
    for i in range(8):
        record = store.settle_probe(
            name, STORE_POLICY, now, ProbeReport(token, False, 1.0), None
        ).record
        now = record.open_until
        token = store.claim_probe(name, STORE_POLICY, now, f"r{i}", record).token

    assert record.open_until - record.opened_at == STORE_POLICY.max_open_ms


def test_a_late_result_from_an_expired_lease_changes_nothing(store: Any, name: str) -> None:
    now, stale = half_open(store, name)
    later = now + STORE_POLICY.lease_ms
    fresh = store.claim_probe(name, STORE_POLICY, later, "fresh", store.load(name, later)).token

    late = store.settle_probe(name, STORE_POLICY, later + 1, ProbeReport(stale, False, 1.0), None)
    settled = store.settle_probe(name, STORE_POLICY, later + 2, ProbeReport(fresh, True, 1.0), None)

    assert not late.changed
    assert late.record.state is State.HALF_OPEN
    assert settled.transition == (State.HALF_OPEN, State.CLOSED)


def test_a_lease_past_its_expiry_cannot_settle_even_unclaimed(store: Any, name: str) -> None:
    now, token = half_open(store, name)

    outcome = store.settle_probe(
        name, STORE_POLICY, now + STORE_POLICY.lease_ms, ProbeReport(token, True, 1.0), None
    )

    assert not outcome.changed
    assert store.load(name, now).state is State.HALF_OPEN


def test_unknown_token_is_a_no_op(store: Any, name: str) -> None:
    now, _ = half_open(store, name)

    outcome = store.settle_probe(name, STORE_POLICY, now, ProbeReport("0-forged", True, 1.0), None)

    assert not outcome.changed


# -- operator overrides ----------------------------------------------------------------------


@pytest.mark.parametrize("target", [State.FORCED_OPEN, State.DISABLED])
def test_overrides_hold_until_reset(shared_store: Any, name: str, target: State) -> None:
    store = shared_store
    forced = store.force_state(name, STORE_POLICY, T0, target)
    failures = fail_n(store, name, 5)
    claim = store.claim_probe(name, STORE_POLICY, T0 + 10**9, "x", store.load(name, T0))
    reset = store.force_state(name, STORE_POLICY, T0, State.CLOSED)

    assert forced.transition == (State.CLOSED, target)
    assert not any(o.changed for o in failures)
    assert claim.token is None
    assert reset.transition == (target, State.CLOSED)
    assert store.load(name, T0).state is State.CLOSED


def test_reset_of_an_open_breaker_closes_it_and_forgets_backoff(
    shared_store: Any, name: str
) -> None:
    store = shared_store
    open_breaker(store, name)

    outcome = store.force_state(name, STORE_POLICY, T0 + 1, State.CLOSED)

    assert outcome.transition == (State.OPEN, State.CLOSED)
    record = store.load(name, T0 + 1)
    assert record.state is State.CLOSED
    assert record.reopens == 0
    assert record.gen == 2


# -- weighted failures and census writes (a large count-policy fleet) ---------------------
# A fleet too large for every container to write its failures writes each with probability
# 1 / weight and counts it weight times; its containers' census writes (a report of one call)
# tell them its size. Every shared store applies the same rule (state.apply_failure); a
# degraded container's local twin counts its own failures once each (test_fallback_store).


def test_a_weighted_failure_counts_its_weight(shared_store: Any, name: str) -> None:
    outcome = shared_store.record_failure(name, STORE_POLICY, T0, None, 2)

    assert outcome.changed
    assert outcome.transition is None
    record = shared_store.load(name, T0)
    assert (record.state, record.failures, record.window_start) == (State.CLOSED, 2, T0)


def test_a_weighted_failure_that_reaches_the_threshold_trips_once(
    shared_store: Any, name: str
) -> None:
    # GIVEN one failure of a threshold of 3
    first = shared_store.record_failure(name, STORE_POLICY, T0, None).record

    # WHEN a failure counting 2 is written on that view
    outcome = shared_store.record_failure(name, STORE_POLICY, T0 + 1, first, 2)

    # THEN it trips, with one generation bump
    assert outcome.transition == (State.CLOSED, State.OPEN)
    assert shared_store.load(name, T0 + 1).gen == first.gen + 1


def test_a_weighted_failure_in_a_new_window_starts_the_count_at_its_weight(
    shared_store: Any, name: str
) -> None:
    fail_n(shared_store, name, 2, now=T0)
    later = T0 + STORE_POLICY.window_ms

    shared_store.record_failure(name, STORE_POLICY, later, shared_store.load(name, later), 2)

    record = shared_store.load(name, later)
    assert (record.state, record.failures, record.window_start) == (State.CLOSED, 2, later)


def test_a_weight_below_one_is_refused(shared_store: Any, name: str) -> None:
    with pytest.raises(ValueError, match="weight"):
        shared_store.record_failure(name, STORE_POLICY, T0, None, 0)


def test_census_writes_never_trip_and_leave_the_failures_counted(store: Any, name: str) -> None:
    # GIVEN two failures of a threshold of 3, and more census writes than the threshold
    fail_n(store, name, 2)
    for i in range(STORE_POLICY.failure_threshold + 1):
        outcome = store.report(
            name, STORE_POLICY, T0 + i, Report(f"c{i}", calls=1), store.load(name, T0 + i)
        )
        assert outcome.transition is None

    # THEN the record is closed with its two failures and the census in its buckets
    record = store.load(name, T0 + 10)
    assert (record.state, record.failures) == (State.CLOSED, 2)
    assert (
        sum(bucket.reports for bucket in record.buckets.values())
        == STORE_POLICY.failure_threshold + 1
    )

    # AND the next failure still trips it, and the trip clears the census
    outcome = store.record_failure(name, STORE_POLICY, T0 + 10, record)
    assert outcome.transition == (State.CLOSED, State.OPEN)
    assert store.load(name, T0 + 10).buckets == {}


# -- TTL -------------------------------------------------------------------------------------


def test_every_write_sets_the_ttl(store: Any, name: str) -> None:
    fail_n(store, name, 1)

    assert store.load(name, T0).expires_at == T0 // 1000 + STORE_POLICY.ttl_s


def test_a_record_past_its_ttl_reads_as_absent(store: Any, name: str) -> None:
    open_breaker(store, name)

    assert store.load(name, T0 + STORE_POLICY.ttl_s * 1000) is None


def test_writes_over_an_expired_record_start_fresh(store: Any, name: str) -> None:
    opened = open_breaker(store, name)
    later = T0 + STORE_POLICY.ttl_s * 1000

    outcome = store.record_failure(name, STORE_POLICY, later, opened)

    assert outcome.record.state is State.CLOSED
    assert outcome.record.failures == 1
    assert store.load(name, later).failures == 1
