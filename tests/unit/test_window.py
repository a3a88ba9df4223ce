"""The sliding window on its own (pure: no store, no clock): which trip reason the counts
give, when a slow burst in the newest buckets alone trips, and how adding a report keeps the
quorum's maps of failing and slow containers (noted once a bucket, never for calls they did
not make)."""

from __future__ import annotations

from fleetbreaker import BreakerConfig, rules
from fleetbreaker.frozen import replace
from fleetbreaker.policy import Policy
from fleetbreaker.record import Bucket, Record, Report, TransitionReason
from fleetbreaker.window import SlidingWindow, WindowCounts

T0 = 1_700_000_000_000
# A 10 s window: ten buckets of 1 s. Two containers make the quorum.
QUORUM = Policy.from_config(
    BreakerConfig(
        failure_rate_threshold=0.5,
        minimum_calls=2,
        window_seconds=10,
        slow_call_duration=1.0,
        slow_call_rate_threshold=0.5,
        min_containers=2,
    )
)
BUCKET_MS = QUORUM.bucket_ms


def ring(*buckets: Bucket) -> Record:
    return Record(buckets={bucket.idx % 10: bucket for bucket in buckets})


def test_the_counts_sum_the_window_and_its_two_newest_buckets_apart() -> None:
    # GIVEN buckets now, one before, and five before (still in the 10-bucket window)
    window = SlidingWindow(QUORUM)
    current = T0 // BUCKET_MS
    now = current * BUCKET_MS + 300
    record = ring(
        Bucket(current, calls=1, failures=1, slow=1, reports=1),
        Bucket(current - 1, calls=20, failures=2, slow=3, reports=4),
        Bucket(current - 5, calls=300, failures=30, slow=50, reports=70),
    )

    # WHEN the window counts at 300 ms into the current bucket
    counts = window.counts(record, now)

    # THEN the whole window, the newest two buckets, and the current one each add up
    assert counts == WindowCounts(
        calls=321,
        failures=33,
        slow=54,
        reports=75,
        recent_calls=21,
        recent_failures=3,
        recent_slow=4,
        recent_reports=5,
        recent_ms=BUCKET_MS + 300,
        current_reports=1,
        current_ms=300,
    )


def test_no_report_yet_in_the_current_bucket_counts_none_there() -> None:
    window = SlidingWindow(QUORUM)
    current = T0 // BUCKET_MS

    counts = window.counts(ring(Bucket(current - 1, calls=2, reports=2)), current * BUCKET_MS)

    assert counts.current_reports == 0


def test_the_count_policy_trips_on_its_failure_threshold() -> None:
    window = SlidingWindow(Policy.from_config(BreakerConfig(failure_threshold=3)))

    reason = window.trip_reason(WindowCounts(calls=3, failures=3))

    assert reason is TransitionReason.FAILURE_THRESHOLD


def test_the_rate_policy_trips_on_its_failure_rate() -> None:
    window = SlidingWindow(
        Policy.from_config(BreakerConfig(failure_rate_threshold=0.5, minimum_calls=2))
    )

    reason = window.trip_reason(WindowCounts(calls=2, failures=1))

    assert reason is TransitionReason.FAILURE_RATE


def test_one_slow_call_in_the_newest_buckets_trips_when_it_reaches_the_rate_there() -> None:
    # GIVEN a window of 12 calls with 1 slow (8 %), 2 of them in the newest buckets (50 %)
    window = SlidingWindow(replace(QUORUM, min_containers=1))
    counts = WindowCounts(calls=12, slow=1, recent_calls=2, recent_slow=1)

    # WHEN the window judges them
    reason = window.trip_reason(counts)

    # THEN the newest buckets' rate alone opens the breaker
    assert reason is TransitionReason.SLOW_CALL_RATE


def test_one_slow_call_over_the_whole_window_trips_when_it_reaches_the_rate() -> None:
    # GIVEN 2 calls, 1 slow (50 %), none of them in the newest buckets
    window = SlidingWindow(replace(QUORUM, min_containers=1))

    reason = window.trip_reason(WindowCounts(calls=2, slow=1))

    # THEN the whole window's rate alone opens the breaker
    assert reason is TransitionReason.SLOW_CALL_RATE


def test_slow_calls_from_fewer_containers_than_the_quorum_do_not_trip() -> None:
    # GIVEN a quorum of 2 and a slow rate reached by one container's calls
    window = SlidingWindow(QUORUM)

    reason = window.trip_reason(WindowCounts(calls=2, slow=1, slow_containers=1))

    assert reason is None


def test_slow_calls_from_exactly_the_quorum_trip() -> None:
    window = SlidingWindow(QUORUM)

    reason = window.trip_reason(WindowCounts(calls=2, slow=1, slow_containers=2))

    assert reason is TransitionReason.SLOW_CALL_RATE


def test_a_report_lands_in_its_second_s_bucket_in_that_bucket_s_slot_of_the_ring() -> None:
    # GIVEN a 10 s window (ten 1 s buckets) and a report 1.5 s past T0
    window = SlidingWindow(QUORUM)
    now = T0 + 1_500

    added = window.add(Record(), now, Report("a", calls=1))

    # THEN it is counted in bucket number now // 1 s, kept in slot number % 10
    number = now // BUCKET_MS
    assert added.buckets == {number % 10: Bucket(number, calls=1, reports=1)}


def test_a_container_failing_again_within_a_bucket_keeps_its_first_stamp() -> None:
    # GIVEN a container the failing map noted at T0
    window = SlidingWindow(QUORUM)
    record = Record(failing={"a": T0})

    # WHEN it reports another failure less than a bucket later
    added = window.add(record, T0 + BUCKET_MS - 1, Report("a", calls=1, failures=1))

    # THEN the map is not rewritten: the stamp is exact to within a bucket
    assert added.failing == {"a": T0}


def test_a_container_failing_again_a_bucket_later_is_stamped_anew() -> None:
    window = SlidingWindow(QUORUM)
    record = Record(failing={"a": T0})

    added = window.add(record, T0 + BUCKET_MS, Report("a", calls=1, failures=1))

    assert added.failing == {"a": T0 + BUCKET_MS}


def test_a_full_map_noted_within_a_bucket_is_not_rewritten_for_a_newcomer() -> None:
    # GIVEN the quorum's two containers, both noted within the last bucket
    window = SlidingWindow(QUORUM)
    record = Record(failing={"a": T0, "b": T0 + 1})

    # WHEN a third container fails
    added = window.add(record, T0 + BUCKET_MS - 1, Report("c", calls=1, failures=1))

    # THEN the map is left as it is: the quorum is met whoever else fails
    assert added.failing == {"a": T0, "b": T0 + 1}


def test_a_full_map_with_a_stamp_a_bucket_old_takes_the_newcomer_in_its_place() -> None:
    window = SlidingWindow(QUORUM)
    record = Record(failing={"a": T0, "b": T0 + 1})

    added = window.add(record, T0 + BUCKET_MS, Report("c", calls=1, failures=1))

    assert added.failing == {"b": T0 + 1, "c": T0 + BUCKET_MS}


def test_a_slow_container_slow_again_within_a_bucket_keeps_its_first_stamp() -> None:
    window = SlidingWindow(QUORUM)
    record = Record(slowing={"a": T0})

    added = window.add(record, T0 + BUCKET_MS - 1, Report("a", calls=1, slow=1))

    assert added.slowing == {"a": T0}


def test_a_report_without_slow_calls_leaves_the_slow_map_alone() -> None:
    # GIVEN an empty slow map
    window = SlidingWindow(QUORUM)

    # WHEN a container reports failures but no slow call
    added = window.add(Record(), T0, Report("a", calls=2, failures=2))

    # THEN only the failing map notes it
    assert (added.failing, added.slowing) == ({"a": T0}, {})


def test_the_rules_count_the_containers_whose_last_bad_call_is_inside_the_window() -> None:
    seen = {"old": T0 - QUORUM.window_ms, "new": T0 - QUORUM.window_ms + 1}

    assert rules.sliding_window(QUORUM).live(seen, T0) == 1


def test_the_rules_skip_noting_a_container_noted_within_the_bucket() -> None:
    assert rules.sliding_window(QUORUM).unchanged({"a": T0}, "a", T0 + 1)
    assert not rules.sliding_window(QUORUM).unchanged({"a": T0}, "b", T0 + 1)
