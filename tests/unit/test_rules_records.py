"""What the write rules put in the record, field by field: the generation and outage start a
settled probe or an operator's action writes, whose lease counts, and which containers the
quorum's map keeps (pure: no store, no clock)."""

from __future__ import annotations

from fleetbreaker import State, rules
from fleetbreaker.frozen import replace
from fleetbreaker.policy import Policy, ttl_seconds
from fleetbreaker.record import Lease, ProbeReport, Record
from tests.support import make_policy

T0 = 1_700_000_000_000
POLICY = make_policy(failure_threshold=3, half_open_max_probes=1)
TOKEN = rules.make_token(0, "probe")


def half_open(**fields: int) -> Record:
    """A half-open record whose one slot TOKEN holds until T0 + 5 s."""
    return Record(state=State.HALF_OPEN, gen=7, leases={0: Lease(TOKEN, T0 + 5_000)}, **fields)


def test_a_successful_probe_closes_with_the_next_generation_and_the_outage_s_start() -> None:
    outcome = rules.apply_settle(
        half_open(opened_at=T0 - 9_000), POLICY, T0, ProbeReport(TOKEN, True)
    )

    assert outcome.record is not None
    assert (outcome.record.state, outcome.record.gen) == (State.CLOSED, 8)
    assert outcome.record.opened_at == T0 - 9_000


def test_a_successful_probe_of_a_record_with_no_outage_start_dates_it_now() -> None:
    outcome = rules.apply_settle(half_open(), POLICY, T0, ProbeReport(TOKEN, True))

    assert outcome.record is not None
    assert outcome.record.opened_at == T0


def test_a_failed_probe_reopens_with_the_next_generation() -> None:
    outcome = rules.apply_settle(half_open(), POLICY, T0, ProbeReport(TOKEN, False))

    assert outcome.record is not None
    assert (outcome.record.state, outcome.record.gen, outcome.record.reopens) == (State.OPEN, 8, 1)


def test_a_lease_kept_in_a_record_that_is_not_half_open_is_no_lease() -> None:
    # GIVEN an open record that still lists the lease (hand-written, or left by another writer)
    record = replace(half_open(), state=State.OPEN)

    # THEN the token holds nothing, and settling with it changes nothing
    assert not rules.holds_lease(record, TOKEN, T0)
    assert not rules.apply_settle(record, POLICY, T0, ProbeReport(TOKEN, False)).changed


def test_forcing_a_breaker_with_no_record_writes_generation_1() -> None:
    outcome = rules.apply_force(None, POLICY, T0, State.FORCED_OPEN)

    assert outcome.record is not None
    assert outcome.record.gen == 1


def test_a_reset_of_an_outage_keeps_when_it_opened() -> None:
    record = Record(state=State.OPEN, gen=3, opened_at=T0 - 9_000, updated_at=T0 - 50)

    outcome = rules.apply_force(record, POLICY, T0, State.CLOSED)

    assert outcome.record is not None
    assert outcome.record.opened_at == T0 - 9_000


def test_a_reset_of_an_outage_with_no_start_dates_it_from_its_last_write() -> None:
    record = Record(state=State.FORCED_OPEN, gen=3, updated_at=T0 - 50)

    outcome = rules.apply_force(record, POLICY, T0, State.CLOSED)

    assert outcome.record is not None
    assert outcome.record.opened_at == T0 - 50


def quorum(containers: int) -> Policy:
    return replace(POLICY, min_containers=containers)


def test_without_a_quorum_no_container_is_noted() -> None:
    assert rules.sliding_window(quorum(1)).note({}, "a", T0) == {}


def test_the_quorum_map_keeps_the_newest_containers() -> None:
    # GIVEN "z" noted before "a" WHEN "b" is noted THEN the two newest stay, whatever their names
    seen = {"z": T0 - 10, "a": T0}

    assert rules.sliding_window(quorum(2)).note(seen, "b", T0 + 1) == {"a": T0, "b": T0 + 1}


def test_the_quorum_map_breaks_a_tie_by_name_so_every_store_keeps_the_same() -> None:
    seen = {"a": T0, "b": T0}

    assert rules.sliding_window(quorum(2)).note(seen, "c", T0) == {"b": T0, "c": T0}


def test_a_probe_period_starts_with_no_successes_whatever_the_open_record_held() -> None:
    # GIVEN an open record carrying a success count (another version's, or a hand edit)
    record = Record(state=State.OPEN, gen=3, open_until=T0, successes=1)

    # WHEN the first probe claims its lease
    outcome = rules.apply_claim(record, POLICY, T0, "probe")

    # THEN the half-open period counts its successes from 0
    assert outcome.record is not None
    assert (outcome.record.state, outcome.record.successes) == (State.HALF_OPEN, 0)


def test_a_second_probe_s_lease_records_when_it_was_granted() -> None:
    # GIVEN a half-open record whose slot 0 is held, under a policy of two probes at once
    two = make_policy(failure_threshold=3, half_open_max_probes=2)

    # WHEN a second caller claims
    outcome = rules.apply_claim(half_open(), two, T0, "second")

    # THEN its lease, in slot 1, says it was granted now (what a clock-skew check reads)
    assert outcome.record is not None
    assert outcome.record.leases[1] == Lease(rules.make_token(1, "second"), T0 + two.lease_ms, T0)


def test_a_claim_before_the_open_window_ends_answers_the_record_unchanged() -> None:
    record = Record(state=State.OPEN, gen=3, open_until=T0 + 1)

    outcome = rules.apply_claim(record, POLICY, T0, "early")

    assert (outcome.record, outcome.changed, outcome.token) == (record, False, None)


def test_a_trip_records_when_the_outage_began() -> None:
    # GIVEN a closed record one failure short of the threshold
    record = Record(failures=POLICY.failure_threshold - 1, window_start=T0 - 1)

    # WHEN the next failure trips it
    outcome = rules.apply_failure(record, POLICY, T0)

    # THEN the open record says the outage began now (a later close ramps from it)
    assert outcome.record is not None
    assert (outcome.record.state, outcome.record.opened_at) == (State.OPEN, T0)


def test_a_record_expires_on_a_whole_second() -> None:
    # GIVEN a write half-way through a second
    now = T0 + 500

    outcome = rules.apply_failure(None, POLICY, now)

    # THEN its expiry (DynamoDB's TTL attribute: epoch seconds) is a whole number of seconds
    assert outcome.record is not None
    expires_at = outcome.record.expires_at
    assert type(expires_at) is int
    assert expires_at == now // 1000 + ttl_seconds(POLICY, State.CLOSED)
