"""What a container counts between its reports (CallTally): its calls, failures and slow
calls, the calls still running, and when its next report is due. Pure: the tests pass the
time in."""

from __future__ import annotations

from fleetbreaker.record import Report
from fleetbreaker.tally import MAX_RECENT_SPANS, CallTally
from fleetbreaker.window import WindowCounts
from tests.support import make_policy

RATE = make_policy(failure_rate_threshold=0.5, minimum_calls=20, window_seconds=10)
# The same, timing calls: 1 s or more is slow.
TIMED = make_policy(
    failure_rate_threshold=0.5, minimum_calls=20, window_seconds=10, slow_call_duration=1.0
)


def good(tally: CallTally, calls: int = 1) -> None:
    """``calls`` calls that succeeded in time, counted as the hot path counts them."""
    for _ in range(calls):
        next(tally.good)


# -- counting calls ---------------------------------------------------------------------------


def test_a_failed_call_counts_as_a_call_and_a_failure() -> None:
    tally = CallTally(RATE, 1000)
    assert tally.bad(None, 10, failed=True)
    report = tally.take("c", 20, 1000)
    assert (report.calls, report.failures, report.slow) == (1, 1, 0)


def test_a_call_lasting_exactly_the_slow_duration_is_slow() -> None:
    tally = CallTally(TIMED, 1000)
    assert tally.bad(started=0, now_ms=1_000, failed=False)
    assert not tally.bad(started=0, now_ms=999, failed=False)
    report = tally.take("c", 1_000, 1000)
    assert (report.calls, report.failures, report.slow) == (2, 0, 1)


def test_an_untimed_call_or_a_policy_without_slow_calls_is_never_slow() -> None:
    timed, untimed = CallTally(TIMED, 1000), CallTally(RATE, 1000)
    assert not timed.bad(started=None, now_ms=60_000, failed=False)
    assert not untimed.bad(started=0, now_ms=60_000, failed=False)
    assert timed.take("c", 0, 1000).slow == untimed.take("c", 0, 1000).slow == 0


def test_a_call_already_reported_slow_adds_only_its_failure_when_it_ends() -> None:
    # GIVEN a call the watcher counted as a call and a slow call
    tally = CallTally(TIMED, 1000)
    tally.running[0] = 0
    assert tally.sweep(1_000) == 1
    # WHEN it ends, failed, and another such call ends well
    assert tally.late(failed=True)
    assert not tally.late(failed=False)
    # THEN it is still one call, one slow call, and now one failure
    report = tally.take("c", 1_000, 1000)
    assert (report.calls, report.failures, report.slow) == (1, 1, 1)


def test_the_watcher_counts_only_the_calls_running_past_the_slow_duration() -> None:
    # GIVEN two calls running, started at 0 and at 500
    tally = CallTally(TIMED, 1000)
    tally.running.update({0: 0, 1: 500})
    # WHEN the watcher sweeps at 1,000 THEN the first is slow, taken out of the running calls
    assert tally.sweep(1_000) == 1
    assert tally.running == {1: 500}
    # AND a second sweep counts nothing twice
    assert tally.sweep(1_000) == 0
    report = tally.take("c", 1_000, 1000)
    assert (report.calls, report.slow) == (1, 1)


def test_a_policy_without_slow_calls_sweeps_nothing() -> None:
    tally = CallTally(RATE, 1000)
    tally.running[0] = 0
    assert tally.sweep(60_000) == 0
    assert tally.running == {0: 0}


# -- taking a report -----------------------------------------------------------------------


def test_a_report_takes_every_pending_call_once() -> None:
    # GIVEN 3 good calls and a failure, peeked at twice (each peek advances the counter)
    tally = CallTally(RATE, 1000)
    good(tally, 3)
    tally.bad(None, 0, failed=True)
    assert tally.pending_calls() == tally.pending_calls() == 4
    # WHEN a report is taken THEN it carries 4 calls, and the next one starts from zero
    assert tally.take("c", 0, 1000) == Report("c", 4, 1, 0, None)
    good(tally)
    assert tally.take("c", 1_000, 1000) == Report("c", 1, 0, 0, None)
    assert tally.taken == 5


def test_a_report_at_the_base_interval_is_due_exactly_an_interval_on() -> None:
    tally = CallTally(RATE, 1000)
    tally.start(0)
    assert tally.report_due_ms == 1_000
    tally.take("c", 1_000, 1000)
    assert tally.report_due_ms == 2_000
    assert not tally.stretched


def test_refresh_carries_the_counts_while_the_interval_is_the_base() -> None:
    # GIVEN a tally with counts, at its base interval, THEN a cache refresh reports them
    tally = CallTally(RATE, 1000)
    next(tally.good)
    assert not tally.stretched
    assert tally.pending_calls() == 1


def test_refresh_is_a_read_while_the_interval_is_stretched() -> None:
    # GIVEN a tally whose last report stretched its interval to 5 s
    tally = CallTally(RATE, 1000)
    tally.take("c1", 0, 5000)
    next(tally.good)
    # THEN a cache refresh does not write them early, but they are still due at the interval
    assert tally.stretched
    assert tally.report_due_ms > 100
    assert tally.pending_calls() == 1


def test_stretched_interval_is_jittered_around_the_interval() -> None:
    # GIVEN stretched reports, THEN each next report is due within ±25 % of the interval
    tally = CallTally(RATE, 1000)
    gaps = set()
    for _ in range(50):
        tally.take("c1", 0, 4000)
        gaps.add(tally.report_due_ms)
    assert min(gaps) >= 3000
    assert max(gaps) <= 5000
    assert len(gaps) > 10


def test_the_jitter_is_the_containers_own_and_replays() -> None:
    # GIVEN two tallies of one container and one of another, stretched alike
    def dues(container: str) -> list[int]:
        tally = CallTally(RATE, 1000)
        found = []
        for _ in range(5):
            tally.take(container, 0, 4000)
            found.append(tally.report_due_ms)
        return found

    # THEN one container's dues replay; another's differ (containers that stretched at once
    # spread out)
    assert dues("c1") == dues("c1")
    assert dues("c1") != dues("c2")


def test_a_deferred_report_is_due_when_asked_at_the_new_interval() -> None:
    tally = CallTally(RATE, 1000)
    tally.start(0)
    tally.defer(now_ms=100, interval_ms=8_000, delay_ms=3_000)
    assert (tally.interval_ms, tally.report_due_ms) == (8_000, 3_100)
    assert tally.stretched


def test_a_rescheduled_report_is_due_an_interval_from_now() -> None:
    tally = CallTally(RATE, 1000)
    tally.start(0)
    tally.reschedule("c", 500, 1000)
    assert tally.report_due_ms == 1_500


# -- spans: recent and older calls --------------------------------------------------------------


# The span end after which 10 calls, then none, stop being recent (MAX_RECENT_SPANS).
OLD_AT_MS = MAX_RECENT_SPANS * RATE.bucket_ms


def _ten_goods_then_three_failures() -> CallTally:
    """A tally with 10 good calls, then span ends until they are older, then 3 failures."""
    tally = CallTally(RATE, 1000)
    tally.start(0)
    for _ in range(10):
        next(tally.good)
    for span in range(1, MAX_RECENT_SPANS + 1):
        tally.rotate(span * RATE.bucket_ms)
    for _ in range(3):
        tally.bad(None, OLD_AT_MS, True)
    return tally


def test_the_hot_path_checks_the_earlier_of_the_report_and_the_span_end() -> None:
    # GIVEN a tally started at 0: spans of a bucket, reports every three buckets
    span = RATE.bucket_ms
    tally = CallTally(RATE, 3 * span)
    tally.start(0)
    assert (tally.span_end_ms, tally.report_due_ms, tally.due_ms) == (span, 3 * span, span)
    # WHEN a call comes before the span ends THEN nothing moves
    tally.rotate(span - 1)
    assert tally.due_ms == span
    # WHEN the span ends THEN the next one ends a span on, still before the report
    tally.rotate(span)
    assert (tally.span_end_ms, tally.due_ms) == (2 * span, 2 * span)


def test_calls_within_the_last_span_are_recent() -> None:
    tally = CallTally(RATE, 1000)
    tally.start(0)
    good(tally, 4)
    tally.rotate(RATE.bucket_ms)
    # one span end: the calls are still recent (one to two spans)
    assert tally.recent() == (4, 0, 0)
    assert tally.older() == (0, 0, 0)


def test_recent_counts_cover_the_last_one_to_two_spans() -> None:
    # GIVEN busy spans: 5 calls in each of four (MIN_RECENT_CALLS or more), span ends between
    tally = CallTally(RATE, 1000)
    tally.start(0)
    for span in range(1, 4):
        good(tally, 5)
        tally.rotate(span * RATE.bucket_ms)
    good(tally, 5)
    # THEN the calls of the current span and the one before it are recent, the rest older
    assert tally.recent() == (10, 0, 0)
    assert tally.older() == (10, 0, 0)


def test_sparse_calls_stay_recent_until_enough_follow() -> None:
    # GIVEN one call a span: a failure, then goods, span ends between them
    tally = CallTally(RATE, 1000)
    tally.start(0)
    tally.bad(None, 0, True)
    for span in range(1, MAX_RECENT_SPANS):
        tally.rotate(span * RATE.bucket_ms)
        good(tally, 1)
    # THEN fewer than MIN_RECENT_CALLS followed it: every call is still recent, the failure
    # too, though it is more than two span ends old
    assert tally.recent() == (MAX_RECENT_SPANS, 1, 0)
    assert tally.older() == (0, 0, 0)


def test_sparse_calls_stop_being_recent_after_the_longest_recent_span() -> None:
    # GIVEN 10 good calls, then no call for MAX_RECENT_SPANS span ends, then 3 failures
    tally = _ten_goods_then_three_failures()
    # THEN only the 3 failures are recent: the goods are that many span ends old
    assert tally.recent() == (3, 3, 0)
    assert tally.older() == (10, 0, 0)
    assert tally.pending_calls() == 13


def test_a_report_of_the_recent_calls_keeps_the_older_ones_pending() -> None:
    # GIVEN 10 older good calls and 3 recent failures
    tally = _ten_goods_then_three_failures()
    # WHEN it reports the recent calls alone
    report = tally.take_recent("c", OLD_AT_MS, 1000)
    # THEN they go out, and the 10 older calls go with the next full report: none lost
    assert (report.calls, report.failures) == (3, 3)
    assert tally.recent() == (0, 0, 0)
    later = tally.take("c", OLD_AT_MS + RATE.bucket_ms, 1000)
    assert (later.calls, later.failures) == (10, 0)
    assert tally.taken == 13


# -- generations ----------------------------------------------------------------------------------


def test_the_first_generation_seen_keeps_the_counts_pending() -> None:
    # GIVEN calls counted before the breaker first read its record
    tally = CallTally(RATE, 1000)
    good(tally, 2)
    # WHEN it reads generation 4 THEN the calls stay, tagged with it
    tally.observe(4)
    assert tally.take("c", 0, 1000) == Report("c", 2, 0, 0, 4)


def test_a_tally_drops_its_counts_when_the_generation_moves_on() -> None:
    # GIVEN counts taken under generation 4
    tally = CallTally(RATE, 1000)
    tally.observe(4)
    next(tally.good)
    tally.bad(None, 0, True)

    # WHEN the breaker sees generation 5 (a trip, a reset)
    tally.observe(5)

    # THEN nothing is pending, and the next report is tagged with generation 5
    report = tally.take("c", 0, 1000)
    assert (report.calls, report.failures, report.gen) == (0, 0, 5)


def test_a_report_the_store_could_not_apply_goes_with_the_next_one() -> None:
    tally = CallTally(RATE, 1000)
    tally.observe(2)
    for _ in range(3):
        next(tally.good)
    tally.bad(None, 0, True)
    lost = tally.take("c", 0, 1000)

    tally.carry(lost)
    next(tally.good)

    report = tally.take("c", 0, 1000)
    assert (report.calls, report.failures, report.gen) == (5, 1, 2)


def test_carried_counts_are_older_than_any_call_since() -> None:
    # GIVEN a lost report of 2 failures put back, then one good call
    tally = CallTally(RATE, 1000)
    tally.observe(2)
    tally.bad(None, 0, True)
    tally.bad(None, 0, True)
    tally.carry(tally.take("c", 0, 1000))
    good(tally)
    # THEN only the good call is recent: a report of the recent calls leaves them pending
    assert tally.recent() == (1, 0, 0)
    assert tally.older() == (2, 2, 0)


def test_a_report_of_an_older_generation_is_not_carried() -> None:
    tally = CallTally(RATE, 1000)
    tally.observe(2)
    tally.bad(None, 0, True)
    lost = tally.take("c", 0, 1000)
    tally.observe(3)

    tally.carry(lost)

    assert tally.take("c", 0, 1000).calls == 0


# -- the fleet's window, as this container sees it ------------------------------------------


def test_the_projected_window_adds_what_this_container_has_not_reported() -> None:
    # GIVEN a window of 100 calls, 10 failures, 1 failing container
    seen = WindowCounts(calls=100, failures=10, reports=5, failing_containers=1)
    tally = CallTally(TIMED, 1000)
    good(tally, 3)
    tally.bad(None, 0, failed=True)
    tally.bad(started=0, now_ms=1_000, failed=False)
    # WHEN this container is not yet among the failing ones THEN it counts as one more
    projected = tally.projected(seen, container_noted=False)
    assert (projected.calls, projected.failures, projected.slow) == (105, 11, 1)
    assert (projected.failing_containers, projected.slow_containers) == (2, 1)
    assert projected.reports == 5
    # AND once the window notes it, it is not counted twice
    noted = tally.projected(seen, container_noted=True)
    assert (noted.failing_containers, noted.slow_containers) == (1, 0)


def test_a_container_with_no_failures_adds_no_failing_container() -> None:
    seen = WindowCounts(calls=100, failing_containers=1)
    tally = CallTally(RATE, 1000)
    good(tally, 3)
    projected = tally.projected(seen, container_noted=False)
    assert (projected.calls, projected.failing_containers, projected.slow_containers) == (
        103,
        1,
        0,
    )
