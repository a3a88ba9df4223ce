"""The pure transition rules: no store, no clock, no I/O."""

from __future__ import annotations

import pytest

from fleetbreaker import rules
from fleetbreaker.policy import OVERRIDE_TTL_S
from fleetbreaker.record import (
    MAX_RECORD_DIGITS,
    MAX_TOKEN_CHARS,
    WINDOW_BUCKETS,
    CensusBucket,
    Decision,
    Lease,
    ProbeReport,
    Record,
    State,
)
from tests.support import make_policy

T0 = 1_700_000_000_000
POLICY = make_policy(
    failure_threshold=3,
    window_seconds=10,
    half_open_max_probes=2,
    half_open_successes=2,
    probe_lease_seconds=5,
)


def test_absent_record_is_closed_and_admits() -> None:
    verdict = rules.verdict(None, POLICY, T0)

    assert verdict.decision is Decision.ALLOW
    assert verdict.state is State.CLOSED


def test_open_rejects_with_time_left_until_the_window_ends() -> None:
    record = Record(state=State.OPEN, open_until=T0 + 1_500)

    verdict = rules.verdict(record, POLICY, T0)

    assert verdict.decision is Decision.REJECT
    assert verdict.retry_after_ms == 1_500


def test_open_past_its_window_asks_for_a_probe() -> None:
    verdict = rules.verdict(Record(state=State.OPEN, open_until=T0), POLICY, T0)

    assert verdict.decision is Decision.PROBE


def test_half_open_with_all_slots_leased_rejects_until_the_first_lease_ends() -> None:
    leases = {0: Lease("0-a", T0 + 700), 1: Lease("1-b", T0 + 300)}

    verdict = rules.verdict(Record(state=State.HALF_OPEN, leases=leases), POLICY, T0)

    assert verdict.decision is Decision.REJECT
    assert verdict.retry_after_ms == 300


@pytest.mark.parametrize(
    ("state", "decision"),
    [(State.FORCED_OPEN, Decision.REJECT), (State.DISABLED, Decision.ALLOW)],
)
def test_overrides_decide_without_looking_at_counts(state: State, decision: Decision) -> None:
    assert rules.verdict(Record(state=state), POLICY, T0).decision is decision


def test_failure_counts_within_the_window_and_trips_at_the_threshold() -> None:
    record = None
    outcomes = []
    for _ in range(3):
        outcome = rules.apply_failure(record, POLICY, T0)
        outcomes.append(outcome)
        record = outcome.record

    assert [o.transition for o in outcomes] == [None, None, (State.CLOSED, State.OPEN)]
    assert record is not None
    assert record.state is State.OPEN
    assert record.open_until == T0 + POLICY.base_open_ms


def test_failure_after_the_window_starts_a_new_count() -> None:
    record = Record(failures=2, window_start=T0)

    outcome = rules.apply_failure(record, POLICY, T0 + POLICY.window_ms)

    assert outcome.record is not None
    assert outcome.record.failures == 1
    assert outcome.record.window_start == T0 + POLICY.window_ms


def test_claims_fill_the_probe_budget_then_stop() -> None:
    record = Record(state=State.OPEN, open_until=T0)

    first = rules.apply_claim(record, POLICY, T0, "a")
    second = rules.apply_claim(first.record, POLICY, T0, "b")
    third = rules.apply_claim(second.record, POLICY, T0, "c")

    assert (first.token, second.token, third.token) == ("0-a", "1-b", None)
    assert first.transition == (State.OPEN, State.HALF_OPEN)


def test_successes_close_only_when_enough_probes_succeeded() -> None:
    opened = rules.apply_claim(Record(state=State.OPEN, open_until=T0, reopens=3), POLICY, T0, "a")
    first = rules.apply_settle(opened.record, POLICY, T0, ProbeReport("0-a", True, 1.0))
    again = rules.apply_claim(first.record, POLICY, T0, "b")
    second = rules.apply_settle(again.record, POLICY, T0, ProbeReport("0-b", True, 1.0))

    assert first.record is not None
    assert first.record.state is State.HALF_OPEN
    assert second.transition == (State.HALF_OPEN, State.CLOSED)
    assert second.record is not None
    assert second.record.reopens == 0


def test_settle_with_an_expired_lease_is_ignored() -> None:
    opened = rules.apply_claim(Record(state=State.OPEN, open_until=T0), POLICY, T0, "a")

    outcome = rules.apply_settle(
        opened.record, POLICY, T0 + POLICY.lease_ms, ProbeReport("0-a", False, 1.0)
    )

    assert not outcome.changed


@pytest.mark.parametrize("token", ["", "abc", "-x", "0-", "100-x", "x-1", "²-x", "٣-x"])
def test_malformed_tokens_name_no_slot(token: str) -> None:
    assert rules.lease_slot(token) is None


def test_a_token_of_the_longest_length_names_its_slot() -> None:
    token = rules.make_token(3, "n" * (MAX_TOKEN_CHARS - 2))

    assert len(token) == MAX_TOKEN_CHARS
    assert rules.lease_slot(token) == 3


def test_a_nonce_holding_dashes_still_names_the_slot_before_the_first() -> None:
    assert rules.lease_slot(rules.make_token(1, "a-b-c")) == 1


def test_a_two_digit_slot_is_read_whole() -> None:
    # GIVEN the last slot of 16 probes at once (half_open_max_probes allows up to 16)
    assert rules.lease_slot(rules.make_token(15, "x")) == 15


def test_overrides_outlive_the_idle_ttl() -> None:
    forced = rules.apply_force(None, POLICY, T0, State.FORCED_OPEN).record

    assert forced is not None
    assert forced.expires_at - T0 // 1000 >= OVERRIDE_TTL_S


def test_force_refuses_states_that_are_not_overrides() -> None:
    with pytest.raises(ValueError, match="half_open"):
        rules.apply_force(None, POLICY, T0, State.HALF_OPEN)


def test_every_write_stamps_the_record_with_its_time() -> None:
    # GIVEN a record last written a minute ago
    earlier = rules.apply_failure(None, POLICY, T0 - 60_000).record
    assert earlier is not None
    # WHEN a failure is counted now
    record = rules.apply_failure(earlier, POLICY, T0).record
    # THEN the record says it was written now (what snapshots and `fleetbreaker status` show)
    assert record is not None
    assert record.updated_at == T0


def test_forcing_a_breaker_that_has_no_record_leaves_it_no_window() -> None:
    # GIVEN no record: no fleet has written one, so no window is known
    # WHEN an operator forces the breaker open
    record = rules.apply_force(None, POLICY, T0, State.FORCED_OPEN).record
    # THEN the record keeps no window of its own (the fleet's first write sets it)
    assert record is not None
    assert record.window_ms == 0


def test_a_census_slice_has_a_whole_slot_in_the_ring() -> None:
    # GIVEN times across several turns of the census ring
    for now in range(T0, T0 + 3 * WINDOW_BUCKETS * POLICY.bucket_ms, POLICY.bucket_ms // 2):
        idx, slot = rules.census_slot(POLICY, now)
        # THEN each falls in its slice, at a whole slot of the ring
        assert idx == now // POLICY.bucket_ms
        assert isinstance(slot, int)
        assert 0 <= slot < WINDOW_BUCKETS


def test_a_full_census_slice_stays_full_and_the_state_stays() -> None:
    # GIVEN an open record whose current census slice holds the largest count a record may
    idx, slot = rules.census_slot(POLICY, T0)
    full = 10**MAX_RECORD_DIGITS - 1
    record = Record(
        state=State.OPEN,
        gen=3,
        open_until=T0 + 30_000,
        census={slot: CensusBucket(idx, full)},
    )

    # WHEN a census write is counted
    outcome = rules.apply_census(record, POLICY, T0)

    # THEN the count stays within the record's digits, and nothing else moves
    assert outcome.record is not None
    assert outcome.record.census[slot] == CensusBucket(idx, full)
    assert (outcome.record.state, outcome.record.gen, outcome.transition) == (State.OPEN, 3, None)
