"""The rate policy's pure rules: the bucketed window, the trip rule, the quorum, snapshots."""

from __future__ import annotations

import pytest

from fleetbreaker import BreakerConfig, ConfigError, State, rules
from fleetbreaker.policy import Policy
from fleetbreaker.record import Outcome, Record, Report
from fleetbreaker.snapshot import snapshot_of
from tests.support import make_policy

T0 = 1_700_000_000_000
RATE = make_policy(failure_rate_threshold=0.5, minimum_calls=10, window_seconds=10)


def report_all(policy: Policy, reports: list[tuple[int, Report]]) -> Outcome:
    record: Record | None = None
    outcome = Outcome(None)
    for at, report in reports:
        outcome = rules.apply_report(record, policy, at, report)
        record = outcome.record
    return outcome


def test_rate_below_the_minimum_of_calls_never_trips() -> None:
    # GIVEN 9 calls, all failed (rate 100 %) but under minimum_calls
    outcome = report_all(RATE, [(T0, Report("a", calls=9, failures=9))])

    # THEN the breaker stays closed and the window holds them
    assert outcome.record is not None
    assert outcome.record.state is State.CLOSED
    assert rules.sliding_window(RATE).counts(outcome.record, T0).failures == 9


def test_rate_at_the_threshold_with_enough_calls_trips_once() -> None:
    outcome = report_all(
        RATE,
        [(T0, Report("a", calls=6, failures=1)), (T0 + 1, Report("b", calls=4, failures=4))],
    )

    assert outcome.transition == (State.CLOSED, State.OPEN)
    assert outcome.record is not None
    assert outcome.record.gen == 1
    assert outcome.record.buckets == {}  # the open record starts a fresh window


def test_background_errors_below_the_rate_never_trip_however_many() -> None:
    # 2 % failures at any volume stay 2 %.
    reports = [(T0 + i * 100, Report(f"c{i % 7}", calls=100, failures=2)) for i in range(50)]

    outcome = report_all(RATE, reports)

    assert outcome.record is not None
    assert outcome.record.state is State.CLOSED


def test_counts_older_than_the_window_slide_out() -> None:
    old = report_all(RATE, [(T0, Report("a", calls=10, failures=4))]).record

    later = T0 + RATE.window_ms
    counts = rules.sliding_window(RATE).counts(old, later)

    assert counts.calls == 0
    # AND a new report there does not add the expired failures to reach the rate
    outcome = rules.apply_report(old, RATE, later, Report("a", calls=10, failures=4))
    assert outcome.transition is None


def test_the_window_slides_by_buckets_not_all_at_once() -> None:
    record = report_all(
        RATE,
        [
            (T0, Report("a", calls=5)),
            (T0 + RATE.bucket_ms, Report("a", calls=7)),
        ],
    ).record

    # One bucket after the first one's window ended, only the second bucket remains.
    assert rules.sliding_window(RATE).counts(record, T0 + RATE.window_ms).calls == 7


def test_a_report_on_an_open_breaker_is_dropped() -> None:
    opened = Record(state=State.OPEN, gen=1, open_until=T0 + 5_000)

    outcome = rules.apply_report(opened, RATE, T0, Report("a", calls=3, failures=3))

    assert not outcome.changed
    assert outcome.record is opened


def test_slow_calls_trip_on_their_own_rate() -> None:
    policy = make_policy(slow_call_duration=2.0, slow_call_rate_threshold=0.5, minimum_calls=4)

    outcome = report_all(policy, [(T0, Report("a", calls=4, failures=0, slow=2))])

    assert outcome.transition == (State.CLOSED, State.OPEN)


def test_slow_calls_alongside_the_count_policy_keep_its_threshold() -> None:
    policy = make_policy(failure_threshold=3, slow_call_duration=2.0, minimum_calls=100)

    outcome = report_all(policy, [(T0, Report("a", calls=5, failures=3))])

    assert outcome.transition == (State.CLOSED, State.OPEN)


def test_quorum_holds_the_trip_until_enough_containers_failed() -> None:
    policy = make_policy(failure_rate_threshold=0.5, minimum_calls=10, min_containers=3)
    # GIVEN one sick container failing everything
    sick = report_all(policy, [(T0 + i, Report("sick", calls=10, failures=10)) for i in range(5)])
    assert sick.record is not None
    assert sick.record.state is State.CLOSED
    assert rules.sliding_window(policy).counts(sick.record, T0 + 5).failing_containers == 1

    # WHEN two more containers fail too
    second = rules.apply_report(sick.record, policy, T0 + 10, Report("b", calls=1, failures=1))
    third = rules.apply_report(second.record, policy, T0 + 11, Report("c", calls=1, failures=1))

    # THEN the third distinct container opens it
    assert second.transition is None
    assert third.transition == (State.CLOSED, State.OPEN)


def test_quorum_map_keeps_only_the_newest_min_containers() -> None:
    policy = make_policy(min_containers=2, failure_threshold=100)
    seen: dict[str, int] = {}
    for i, container in enumerate(["a", "b", "c"]):
        seen = dict(rules.sliding_window(policy).note(seen, container, T0 + i))

    assert seen == {"b": T0 + 1, "c": T0 + 2}


def test_containers_whose_failures_left_the_window_do_not_count() -> None:
    policy = make_policy(failure_threshold=2, min_containers=2, window_seconds=10)
    first = rules.apply_report(None, policy, T0, Report("a", calls=1, failures=1))

    later = rules.apply_report(
        first.record, policy, T0 + policy.window_ms, Report("b", calls=1, failures=1)
    )

    assert later.transition is None
    assert (
        rules.sliding_window(policy).counts(later.record, T0 + policy.window_ms).failing_containers
        == 1
    )


def test_snapshot_of_a_rate_window() -> None:
    record = report_all(RATE, [(T0, Report("a", calls=8, failures=2, slow=1))]).record

    snap = snapshot_of("svc", record, RATE, T0 + 1)

    assert (snap.state, snap.calls, snap.failures, snap.slow_calls) == (State.CLOSED, 8, 2, 1)
    assert snap.failure_rate == 0.25
    assert snap.slow_call_rate == 0.125
    assert snap.retry_after == 0.0
    assert snap.open_until is None


def test_snapshot_of_an_open_breaker_says_when_it_may_admit() -> None:
    record = Record(state=State.OPEN, gen=4, open_until=T0 + 2_500)

    snap = snapshot_of("svc", record, RATE, T0)

    assert (snap.generation, snap.retry_after, snap.open_until) == (4, 2.5, T0 + 2_500)
    assert snap.failure_rate is None


def test_snapshot_under_the_count_policy_reports_the_current_window() -> None:
    policy = make_policy(failure_threshold=5, window_seconds=60)
    record = Record(failures=3, window_start=T0)

    assert snapshot_of("svc", record, policy, T0 + 1).failures == 3
    assert snapshot_of("svc", record, policy, T0 + 60_000).failures == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("failure_rate_threshold", 0),
        ("failure_rate_threshold", 1.5),
        ("failure_rate_threshold", float("nan")),
        ("failure_rate_threshold", True),
        ("slow_call_rate_threshold", 0),
        ("minimum_calls", 0),
        ("slow_call_duration", -1),
        ("min_containers", 0),
        ("min_containers", 11),
        ("report_interval", 0),
        ("report_interval", 2.5),
    ],
)
def test_bad_rate_settings_fail_at_construction_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        BreakerConfig(**{field: value})  # type: ignore[arg-type]


def test_report_interval_defaults_to_cache_ttl_capped_at_two_seconds() -> None:
    assert BreakerConfig(cache_ttl=1.5).effective_report_interval == 1.5
    assert BreakerConfig(cache_ttl=5).effective_report_interval == 2.0
    assert BreakerConfig(report_interval=0.5).effective_report_interval == 0.5


def test_rate_settings_come_from_the_environment() -> None:
    config = BreakerConfig.from_env(
        {
            "BREAKER_FAILURE_RATE_THRESHOLD": "0.25",
            "BREAKER_MINIMUM_CALLS": "50",
            "BREAKER_SLOW_CALL_DURATION": "1.5",
            "BREAKER_SLOW_CALL_RATE_THRESHOLD": "0.8",
            "BREAKER_MIN_CONTAINERS": "3",
            "BREAKER_REPORT_INTERVAL": "0.5",
        }
    )

    assert (
        config.failure_rate_threshold,
        config.minimum_calls,
        config.slow_call_duration,
        config.slow_call_rate_threshold,
        config.min_containers,
        config.report_interval,
    ) == (0.25, 50, 1.5, 0.8, 3, 0.5)
    with pytest.raises(ConfigError, match="BREAKER_FAILURE_RATE_THRESHOLD"):
        BreakerConfig.from_env({"BREAKER_FAILURE_RATE_THRESHOLD": "2"})


def test_a_token_that_is_not_short_ascii_names_no_slot() -> None:
    assert rules.lease_slot("0-\udcff") is None
    assert rules.lease_slot("0-" + "a" * 100) is None
    assert rules.lease_slot("0-abcdef0123456789") == 0
