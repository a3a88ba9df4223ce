"""The read-only half of the rules, field by field: the verdict a call gets, and the snapshot
the CLI, the gate and ``CircuitBreaker.snapshot`` show (pure: no store, no clock)."""

from __future__ import annotations

from fleetbreaker import State, rules
from fleetbreaker.record import Decision, Lease, Record, Report
from fleetbreaker.snapshot import Snapshot, iso_utc, snapshot_of
from tests.support import make_policy

T0 = 1_700_000_000_000
POLICY = make_policy(failure_threshold=3, half_open_max_probes=2)
# Rate policy with slow calls and a quorum of 3: the record names the containers it saw.
QUORUM = make_policy(
    failure_rate_threshold=0.9,
    minimum_calls=1000,
    window_seconds=30,
    slow_call_duration=1.0,
    min_containers=3,
)


def fields(verdict: rules.Verdict) -> tuple[Decision, State, int]:
    return (verdict.decision, verdict.state, verdict.retry_after_ms)


def test_forced_open_rejects_for_the_base_open_window() -> None:
    verdict = rules.verdict(Record(state=State.FORCED_OPEN), POLICY, T0)

    assert fields(verdict) == (Decision.REJECT, State.FORCED_OPEN, POLICY.base_open_ms)


def test_open_past_its_window_is_a_probe_attempt_in_the_open_state() -> None:
    verdict = rules.verdict(Record(state=State.OPEN, open_until=T0), POLICY, T0)

    assert fields(verdict) == (Decision.PROBE, State.OPEN, 0)


def test_half_open_with_a_free_slot_is_a_probe_attempt_in_the_half_open_state() -> None:
    leases = {0: Lease("0-a", T0 + 700)}  # one of two slots leased

    verdict = rules.verdict(Record(state=State.HALF_OPEN, leases=leases), POLICY, T0)

    assert fields(verdict) == (Decision.PROBE, State.HALF_OPEN, 0)


def test_half_open_full_rejects_until_a_lease_ending_next_millisecond() -> None:
    leases = {0: Lease("0-a", T0 + 700), 1: Lease("1-b", T0 + 1)}

    verdict = rules.verdict(Record(state=State.HALF_OPEN, leases=leases), POLICY, T0)

    assert fields(verdict) == (Decision.REJECT, State.HALF_OPEN, 1)


def test_the_snapshot_of_a_breaker_with_no_record_is_closed_and_empty() -> None:
    snap = snapshot_of("svc", None, POLICY, T0)

    # THEN closed, no failures; a count policy reports no calls: none shown, not zero
    assert (
        snap.as_dict()
        == Snapshot(
            name="svc",
            state=State.CLOSED,
            generation=0,
            calls=None,
            failures=0,
            slow_calls=None,
            containers=0,
            failure_rate=None,
            slow_call_rate=None,
            retry_after=0.0,
            open_until=None,
            updated_at=None,
            mode="enforce",
        ).as_dict()
    )
    assert snap.mode == "enforce"


def test_the_snapshot_carries_the_record_s_last_write_and_the_mode_given() -> None:
    record = Record(state=State.OPEN, gen=2, open_until=T0 + 1_000, updated_at=T0 - 5)

    snap = snapshot_of("svc", record, POLICY, T0, mode="shadow")

    assert (snap.name, snap.updated_at, snap.mode) == ("svc", T0 - 5, "shadow")
    assert snap.retry_after == 1.0


def report_all(reports: list[Report]) -> Record | None:
    record: Record | None = None
    for report in reports:
        record = rules.apply_report(record, QUORUM, T0, report).record
    return record


def test_the_snapshot_counts_the_containers_whose_failures_fall_in_the_window() -> None:
    # GIVEN two containers' failures and no slow call
    record = report_all([Report("a", calls=10, failures=3), Report("b", calls=5, failures=2)])

    # THEN both containers are counted
    assert snapshot_of("svc", record, QUORUM, T0 + 1).containers == 2


def test_the_snapshot_counts_the_containers_whose_slow_calls_fall_in_the_window() -> None:
    # GIVEN two containers' slow calls and no failure
    record = report_all([Report("a", calls=10, slow=1), Report("b", calls=5, slow=1)])

    # THEN both containers are counted
    assert snapshot_of("svc", record, QUORUM, T0 + 1).containers == 2


def test_times_are_shown_as_iso_8601_utc_to_the_millisecond() -> None:
    assert iso_utc(0) == "1970-01-01T00:00:00.000Z"
    assert iso_utc(T0 + 123) == "2023-11-14T22:13:20.123Z"


def test_a_time_past_any_date_or_no_time_is_shown_as_none() -> None:
    assert iso_utc(10**17) is None  # year 3 million: a hand-edited record
    assert iso_utc(None) is None


def test_the_snapshot_s_dict_gives_its_times_as_iso_8601() -> None:
    record = Record(state=State.OPEN, gen=2, open_until=T0 + 1_000, updated_at=T0)

    shown = snapshot_of("svc", record, POLICY, T0).as_dict()

    assert (shown["open_until"], shown["updated_at"]) == (
        "2023-11-14T22:13:21.000Z",
        "2023-11-14T22:13:20.000Z",
    )


def test_the_snapshot_of_a_forced_open_breaker_asks_callers_to_wait_the_base_open_window() -> None:
    snap = snapshot_of("svc", Record(state=State.FORCED_OPEN), POLICY, T0)

    assert snap.retry_after == POLICY.base_open_ms / 1000
