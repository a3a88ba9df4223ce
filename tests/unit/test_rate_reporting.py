"""The report control: when a container reports, and how far it stretches its interval."""

from __future__ import annotations

import math
import random

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker
from fleetbreaker.policy import Policy
from fleetbreaker.rate import (
    TARGET_REPORTS_PER_S,
    RateStrategy,
    fleet_size,
    max_interval_ms,
    next_interval_ms,
    recent_worse,
    wants_urgent_report,
    write_rate,
)
from fleetbreaker.record import WINDOW_BUCKETS, Bucket, Outcome, Record, Report
from fleetbreaker.rules import sliding_window
from fleetbreaker.stores.memory import MemoryStore
from fleetbreaker.tally import MAX_RECENT_SPANS, CallTally
from fleetbreaker.view import MAX_REFRESH_STRETCH, TARGET_REFRESHES_PER_S, refresh_ms
from fleetbreaker.window import WindowCounts
from tests.support import Dependency, FakeClock, breaker_on

RATE = Policy.from_config(
    BreakerConfig(failure_rate_threshold=0.5, minimum_calls=20, window_seconds=10)
)


def _counts_at(reports_per_s: float) -> WindowCounts:
    return WindowCounts(calls=100_000, reports=round(reports_per_s * RATE.window_ms / 1000))


def test_fleet_of_any_size_settles_at_the_target_write_rate() -> None:
    # GIVEN C containers all updating their interval from the rate it produces
    for containers in (1_000, 5_000):
        interval = 1000
        for _ in range(60):
            rate = containers * 1000 / interval
            interval = next_interval_ms(interval, 1000, _counts_at(rate), RATE)
        # THEN the record's write rate ends near TARGET (or at the cap's C / longest interval)
        settled = containers * 1000 / interval
        floor = containers * 1000 / max_interval_ms(RATE)
        assert settled <= max(TARGET_REPORTS_PER_S * 1.05, floor * 1.001)
        assert math.isclose(settled, max(TARGET_REPORTS_PER_S, floor), rel_tol=0.05)


def test_quiet_record_keeps_the_base_interval() -> None:
    # GIVEN a record under the target rate, THEN the interval shrinks back to the base
    assert next_interval_ms(8000, 1000, _counts_at(10), RATE) < 8000
    assert next_interval_ms(1000, 1000, _counts_at(10), RATE) == 1000


def test_stretched_container_failing_on_a_healthy_record_waits_for_its_report() -> None:
    # GIVEN a stretched container whose pending calls all failed, on a healthy-looking record
    tally = CallTally(RATE, 1000)
    tally.take("c1", 0, 8000)
    tally.bad(None, 10, failed=True)
    tally.bad(None, 20, failed=True)
    # THEN it does not report out of turn: a report sent because its own calls failed is a
    # sample chosen by its failures, and would bias the fleet's newest buckets upward
    assert not wants_urgent_report(None, tally, RATE, "c1", 30)


def test_a_failure_that_would_open_the_breaker_as_last_seen_is_reported_at_once() -> None:
    # GIVEN a stretched container that last saw 10 failures in 19 calls in the window
    tally = CallTally(RATE, 1000)
    tally.take("c1", 0, 8000)
    idx = sliding_window(RATE).index(0)
    bucket = Bucket(idx, calls=19, failures=10, slow=0, reports=3)
    record = Record(buckets={idx % WINDOW_BUCKETS: bucket}, expires_at=3600)
    # WHEN one more of its calls fails (20 calls, 11 failures: over 50 %)
    tally.bad(None, 10, failed=True)
    # THEN it reports at once
    assert wants_urgent_report(record, tally, RATE, "c1", 30)


def _busy_record(now_ms: int, reports: int) -> Record:
    """A closed record whose current bucket took ``reports`` reports (a hot key)."""
    idx = sliding_window(RATE).index(now_ms)
    bucket = Bucket(idx, calls=reports * 5, failures=0, slow=0, reports=reports)
    return Record(buckets={idx % WINDOW_BUCKETS: bucket}, expires_at=now_ms // 1000 + 3600)


def _breaker_on(
    record: Record,
    clock: FakeClock,
    container_id: str | None = None,
    rng: random.Random | None = None,
) -> tuple[CircuitBreaker, MemoryStore]:
    """A rate-policy breaker (10 s window, 1 s cache) whose store already holds ``record``.

    ``container_id`` fixes the stretched interval's jitter (seeded by the container), ``rng``
    a newcomer's first report.
    """
    store = MemoryStore()
    store.seed("payment-api", record)
    breaker = CircuitBreaker(
        "payment-api",
        store=store,
        config=BreakerConfig(failure_rate_threshold=0.5, window_seconds=10, cache_ttl=1.0),
        clock=clock,
        container_id=container_id,
        rng=rng,
    )
    return breaker, store


def test_breaker_on_a_hot_record_refreshes_by_reading_not_writing() -> None:
    # GIVEN a breaker whose record takes 1,000 reports/s (over TARGET_REPORTS_PER_S)
    clock = FakeClock()
    # (a newcomer's first report falls at random within twice the fleet's interval: a seeded
    # source keeps it past this test's calls)
    breaker, store = _breaker_on(_busy_record(clock(), 10_000), clock, rng=random.Random(5))
    strategy = breaker._core.mode.counting
    assert isinstance(strategy, RateStrategy)
    dependency = Dependency()
    # AND two cache refreshes with calls pending: the reports' answers stretch its interval
    for _ in range(3):
        breaker.call(dependency)
        clock.advance(1.0)
    writes = store.stats.writes
    reads = store.stats.reads
    assert strategy.tally.report_due_ms > clock() + 1000

    # WHEN its cache goes stale again with calls pending (a fleet this large keeps its view
    # for up to view.MAX_REFRESH_STRETCH cache_ttl: 2 s)
    clock.advance(1.0)
    breaker.call(dependency)

    # THEN the refresh is a read: the pending counts wait for the stretched interval
    assert store.stats.writes == writes
    assert store.stats.reads == reads + 1


def test_a_newcomer_joins_at_the_interval_the_fleet_already_uses_before_writing() -> None:
    # GIVEN a record whose reports each carry 40 calls (a fleet stretched to about 20 s at
    # 2 calls/s per container), at the target write rate
    clock = FakeClock()
    idx = sliding_window(RATE).index(clock())
    reports = round(TARGET_REPORTS_PER_S * RATE.window_ms / 1000)
    busy = Bucket(idx, calls=reports * 40, failures=0, slow=0, reports=reports)
    record = Record(buckets={idx % WINDOW_BUCKETS: busy}, expires_at=clock() // 1000 + 3600)
    # AND a new container that reads it at its first call (0 s) and again before its first
    # report is due (1 s): a newcomer reads before it reports
    breaker, store = _breaker_on(record, clock, "newcomer", random.Random(5))
    strategy = breaker._core.mode.counting
    assert isinstance(strategy, RateStrategy)
    dependency = Dependency()

    # WHEN a new container makes 2 calls a second, past its base interval (1 s)
    for _ in range(3):
        breaker.call(dependency)
        clock.advance(0.5)

    # THEN its first report did not go out at the base interval: it joined the fleet's
    # interval (20 s: the longest) without a write, so a hundred containers joining a second
    # add no hundred writes a second
    assert store.stats.writes == 0
    assert strategy.interval_ms == max_interval_ms(RATE)
    # AND its first report falls anywhere in twice that interval (capped at the longest)
    # after the base one: a crowd joining together spreads its first reports
    joined_at = clock() - 500
    due = strategy.tally.report_due_ms
    assert joined_at + 1000 <= due <= joined_at + max_interval_ms(RATE)
    while clock() + 500 < due:
        breaker.call(dependency)
        clock.advance(0.5)
    assert store.stats.writes == 0

    # AND its counts go out in one report at its first call past that time, carrying every
    # call made before it: none lost
    calls = dependency.calls
    clock.advance(0.5)
    breaker.call(dependency)
    assert store.stats.writes == 1
    fleet = store.load("payment-api", clock())
    assert fleet is not None
    assert sum(b.calls for b in fleet.buckets.values()) == reports * 40 + calls


def test_a_newcomer_to_a_quiet_record_reports_at_its_own_interval() -> None:
    # GIVEN a record that takes a few reports a second (not a hot key)
    clock = FakeClock()
    breaker, store = _breaker_on(_busy_record(clock(), 5), clock)
    dependency = Dependency()

    # WHEN a new container's base interval (1 s) passes with calls pending
    for _ in range(3):
        breaker.call(dependency)
        clock.advance(0.5)

    # THEN it reports then, as always
    assert store.stats.writes == 1


def test_recent_calls_failing_more_often_than_older_ones_are_held_apart() -> None:
    # GIVEN older calls that failed 1 in 40 times, THEN one failure in 5 recent calls is worse
    assert recent_worse((5, 1, 0), (40, 1, 0), RATE)
    # AND recent calls that fail as often as (or less than) the older ones are not
    assert not recent_worse((4, 1, 0), (40, 10, 0), RATE)
    assert not recent_worse((5, 0, 0), (40, 1, 0), RATE)
    # AND with nothing recent, or nothing older to hold back, there is nothing to split
    assert not recent_worse((0, 0, 0), (40, 0, 0), RATE)
    assert not recent_worse((5, 5, 0), (0, 0, 0), RATE)


def test_recent_calls_running_slow_more_often_are_held_apart() -> None:
    slow = Policy.from_config(
        BreakerConfig(failure_rate_threshold=0.5, slow_call_duration=1.0, window_seconds=10)
    )
    assert recent_worse((5, 0, 2), (40, 0, 1), slow)
    # the slow counts matter only when the policy times calls
    assert not recent_worse((5, 0, 2), (40, 0, 1), RATE)


def test_a_report_holds_healthy_older_calls_back_once_recent_ones_fail() -> None:
    # GIVEN a container that made 40 healthy calls, then (MAX_RECENT_SPANS quiet spans later:
    # they are no longer recent) 2 of 5 failed: a 60 % outage's unlucky draw, under the
    # policy's 50 %
    tally = CallTally(RATE, 1000)
    tally.start(0)
    for _ in range(40):
        next(tally.good)
    now = MAX_RECENT_SPANS * RATE.bucket_ms
    for span in range(1, MAX_RECENT_SPANS + 1):
        tally.rotate(span * RATE.bucket_ms)
    for failed in (True, False, True, False, False):
        if failed:
            tally.bad(None, now, True)
        else:
            next(tally.good)
    # THEN its recent calls fail more often than its older ones: a report carries them
    # alone, and the 40 healthy calls stay pending
    assert recent_worse(tally.recent(), tally.older(), RATE)
    report = tally.take_recent("c", now, 1000)
    assert (report.calls, report.failures) == (5, 2)
    assert tally.pending_calls() == 40


def test_refreshes_stretch_with_the_fleet_up_to_twice_cache_ttl() -> None:
    rng = random.Random(7)
    # GIVEN fleets whose refreshes at cache_ttl stay under the target: cache_ttl
    assert refresh_ms(100, 1000, rng) == 1000
    assert refresh_ms(TARGET_REFRESHES_PER_S, 1000, rng) == 1000
    # WHEN 5,000 containers share the record, THEN each refresh waits longer, jittered, so
    # the fleet's refreshes average the target; never past MAX_REFRESH_STRETCH cache_ttl
    waits = [refresh_ms(5_000, 1000, rng) for _ in range(2_000)]
    assert min(waits) >= 1000
    assert max(waits) <= MAX_REFRESH_STRETCH * 1000
    mean_s = sum(waits) / len(waits) / 1000
    assert 5_000 / mean_s == pytest.approx(TARGET_REFRESHES_PER_S, rel=0.05)
    assert refresh_ms(1_000_000, 1000, rng) == MAX_REFRESH_STRETCH * 1000
    # AND a disabled cache stays disabled
    assert refresh_ms(5_000, 0, rng) == 0


def test_fleet_size_is_the_fleets_call_rate_over_the_containers_own() -> None:
    # GIVEN a window of 10 s holding 100,000 calls (10,000/s), and a container making 2/s
    counts = WindowCounts(calls=100_000, reports=2_500)
    # THEN the fleet is about 5,000 containers, whatever interval they report at
    assert fleet_size(counts, RATE, own_calls=20, own_ms=10_000) == pytest.approx(5_000)
    assert fleet_size(counts, RATE, own_calls=0, own_ms=10_000) is None


def test_write_rate_sees_a_crowd_in_the_current_bucket_at_once() -> None:
    # GIVEN a quiet window whose current bucket took 200 reports in its first 200 ms
    counts = WindowCounts(reports=200, recent_reports=200, recent_ms=1_200)
    crowd = WindowCounts(
        reports=200, recent_reports=200, recent_ms=1_200, current_reports=200, current_ms=200
    )
    # THEN the rate counts the current bucket's 1,000 reports/s, not the window's 20/s
    assert write_rate(counts, RATE) == pytest.approx(200 * 1000 / 1_200)
    assert write_rate(crowd, RATE) == pytest.approx(1_000)


def test_a_crowd_that_started_together_spreads_its_first_reports() -> None:
    # GIVEN a breaker that first read an empty record (one of a crowd starting together)
    clock = FakeClock()
    breaker, store = _breaker_on(Record(expires_at=clock() // 1000 + 3600), clock)
    store.seed("payment-api", None)
    dependency = Dependency()
    breaker.call(dependency)
    # AND a second later the record is hot: 600 reports in the current bucket's first 300 ms
    clock.advance(1.0)
    store.seed("payment-api", _busy_record(clock() - 300, 600))
    # WHEN its first report falls due
    breaker.call(dependency)
    # THEN it does not write: it read (a newcomer reads before it reports), took the longest
    # interval, and put its first report anywhere in it
    assert store.stats.writes == 0
    strategy = breaker._core.mode.counting
    assert isinstance(strategy, RateStrategy)
    assert strategy.interval_ms == max_interval_ms(RATE)
    tally = strategy.tally
    assert clock() + 1000 <= tally.report_due_ms <= clock() + max_interval_ms(RATE)


class Reports(MemoryStore):
    """A MemoryStore that keeps every report it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[Report] = []

    def report(
        self, name: str, policy: Policy, now_ms: int, report: Report, observed: Record | None
    ) -> Outcome:
        self.sent.append(report)
        return super().report(name, policy, now_ms, report, observed)


def test_calls_a_frozen_container_held_past_the_window_are_never_reported_as_calls_of_now() -> None:
    # GIVEN a rate-policy container (10 s window) whose last calls failed, too few and too
    # recent to have been reported, when Lambda froze it
    clock = FakeClock()
    store = Reports()
    breaker = breaker_on(
        store, clock, BreakerConfig(failure_rate_threshold=0.5, window_seconds=10, cache_ttl=1.0)
    )
    dependency = Dependency()
    breaker.call(dependency)
    store.sent.clear()
    dependency.failing = True
    for _ in range(3):
        clock.advance(0.01)
        with pytest.raises(ConnectionError):
            breaker.call(dependency)
    # WHEN it thaws two minutes later and its next call succeeds
    clock.advance(120)
    dependency.failing = False
    breaker.call(dependency)
    breaker.flush()
    # THEN no report carries the old failures: the window they were in is long gone, and the
    # store would count them as failures of now
    assert sum(report.failures for report in store.sent) == 0, store.sent
    assert sum(report.calls for report in store.sent) == 1, store.sent


def test_a_tally_keeps_its_pending_calls_while_one_of_them_is_inside_the_window() -> None:
    # GIVEN a tally with calls pending, the last bad one counted 9.9 s after its span ended
    tally = CallTally(RATE, 1000)
    tally.start(0)
    tally.bad(None, 50, failed=False)
    tally.bad(None, RATE.bucket_ms + 9_900, failed=True)
    # WHEN the span rotates within a window of that call, THEN nothing pending is dropped
    tally.rotate(RATE.bucket_ms + 10_000)
    assert tally.pending_calls() == 2
    # AND a window after the span that rotation began ends, everything pending is: no call
    # came since (a frozen container's calls)
    tally.rotate(tally.span_end_ms + RATE.window_ms - 1)
    assert tally.pending_calls() == 2
    tally.rotate(tally.span_end_ms + RATE.window_ms)
    assert tally.pending_calls() == 0
