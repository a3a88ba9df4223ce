"""The rate policy's strategy, one behaviour at a time: outcomes recorded through
``record()``, calls with arguments and failing results under slow-call detection, calls
interrupted or failing after the watcher reported them, and the arithmetic that thins
out-of-turn reports and sizes the fleet.

MemoryStore, a hand-moved clock; the pure functions of fleetbreaker.rate directly.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, MemoryStore, State
from fleetbreaker.frozen import replace
from fleetbreaker.policy import Policy
from fleetbreaker.rate import (
    URGENT_REPORTS_PER_S,
    RateStrategy,
    fleet_interval_ms,
    fleet_size,
    next_interval_ms,
    recent_worse,
    urgent_allowed,
    wants_urgent_report,
    write_rate,
)
from fleetbreaker.record import WINDOW_BUCKETS, Bucket, Outcome, Record, Report
from fleetbreaker.tally import CallTally
from fleetbreaker.window import WindowCounts
from tests.support import Dependency, FakeClock, RecordingListener, make_policy

RATE = BreakerConfig(
    failure_rate_threshold=0.5,
    minimum_calls=4,
    window_seconds=10,
    recovery_timeout=5,
    recovery_jitter=0.0,
    cache_ttl=1.0,
)
SLOW = BreakerConfig(slow_call_duration=1.0, minimum_calls=100, window_seconds=10)
POLICY = make_policy(RATE)  # a 10 s window
BUSY = replace(SLOW, failure_result=lambda result: result == "busy")


def make(store: Any, clock: FakeClock, config: BreakerConfig = RATE, **kw: Any) -> CircuitBreaker:
    return CircuitBreaker("payment-api", store=store, config=config, clock=clock, **kw)


def reported(breaker: CircuitBreaker, clock: FakeClock) -> tuple[int, int, int]:
    """The fleet's (calls, failures, slow calls) once this container's tally is reported
    (by one more call, itself still pending)."""
    clock.advance(RATE.cache_ttl)
    breaker.call(Dependency())
    snap = breaker.snapshot()
    return snap.calls, snap.failures, snap.slow_calls


# -- outcomes recorded through record() -------------------------------------------------------


def test_a_recorded_outcome_is_tallied_and_says_so() -> None:
    # GIVEN a closed rate-policy breaker
    clock, store = FakeClock(), MemoryStore()
    breaker = make(store, clock)
    # WHEN a success is recorded for a call that ran elsewhere
    result = breaker.record(True)
    # THEN it is tallied (no write yet), the breaker closed
    assert (result.applied, result.state, result.detail) == (True, State.CLOSED, "call tallied")
    assert store.stats.requests == 0


def test_recorded_failures_that_would_open_the_breaker_open_it_at_once() -> None:
    # GIVEN a rate-policy breaker that opens at 50 % of at least 4 calls
    clock, store = FakeClock(), MemoryStore()
    breaker = make(store, clock)
    # WHEN four failures are recorded (check() then record(False), as a workflow's gate does)
    for _ in range(4):
        assert breaker.check().decision.value == "allow"
        breaker.record(False)
    # THEN the fleet's record is open without waiting for the report interval
    record = store.load("payment-api", clock())
    assert record is not None
    assert record.state is State.OPEN
    assert breaker.record(True).state is State.OPEN


def test_recorded_outcomes_reach_the_fleet_when_the_report_is_due() -> None:
    # GIVEN a rate-policy breaker with outcomes recorded, none of them alarming
    clock, store = FakeClock(), MemoryStore()
    breaker = make(store, clock)
    for success in (True, True, True, False):
        breaker.record(success)
    # WHEN the report interval has passed and another outcome is recorded
    clock.advance(RATE.effective_report_interval)
    breaker.record(True)
    # THEN the fleet's window holds the four earlier outcomes
    snap = breaker.snapshot()
    assert (snap.calls, snap.failures) == (4, 1)


# -- calls under slow-call detection ---------------------------------------------------------


def test_a_timed_call_gets_its_positional_and_keyword_arguments() -> None:
    clock = FakeClock()
    breaker = make(MemoryStore(), clock, SLOW)
    assert breaker.call(lambda a, b: (a, b), 1, b=2) == (1, 2)


def test_a_timed_call_that_raises_gets_its_arguments_and_counts_one_failure() -> None:
    # GIVEN slow-call detection
    clock = FakeClock()
    breaker = make(MemoryStore(), clock, SLOW)

    def fails(a: int, *, b: int) -> None:
        raise ConnectionError(f"{a} {b}")

    # WHEN a call fails fast
    with pytest.raises(ConnectionError, match="1 2"):
        breaker.call(fails, 1, b=2)
    # THEN it counts as one failed call, not a slow one
    assert reported(breaker, clock) == (1, 1, 0)


def test_a_timed_call_whose_result_fails_counts_a_failure() -> None:
    # GIVEN slow-call detection and a result that counts as a failure
    clock = FakeClock()
    breaker = make(MemoryStore(), clock, BUSY)
    # WHEN a call returns it, fast
    assert breaker.call(lambda: "busy") == "busy"
    # THEN it is a failure, not a slow call
    assert reported(breaker, clock) == (1, 1, 0)


def test_a_timed_call_with_a_good_result_is_not_a_failure() -> None:
    clock = FakeClock()
    breaker = make(MemoryStore(), clock, BUSY)
    assert breaker.call(lambda: "fine") == "fine"
    assert reported(breaker, clock) == (1, 0, 0)


def test_a_call_lasting_exactly_the_slow_duration_counts_slow() -> None:
    clock = FakeClock()
    breaker = make(MemoryStore(), clock, SLOW)
    breaker.call(lambda: clock.advance(SLOW.slow_call_duration or 0))
    assert reported(breaker, clock) == (1, 0, 1)


def test_an_interrupted_call_is_never_reported_hung() -> None:
    # GIVEN slow-call detection, and a call interrupted (KeyboardInterrupt) while it ran
    clock = FakeClock()
    breaker = make(MemoryStore(), clock, SLOW)

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        breaker.call(interrupted)
    # WHEN the watcher looks for hung calls past the slow duration
    clock.advance(5)
    # THEN it finds none: an interruption says nothing of the dependency
    assert breaker.report_hung_calls() == 0


def test_a_hung_call_that_then_fails_counts_its_failure_once_reported_slow() -> None:
    # GIVEN a call the watcher reported slow while it ran
    clock = FakeClock()
    breaker = make(MemoryStore(), clock, SLOW)

    def hangs_then_fails() -> None:
        clock.advance(1.5)
        assert breaker.report_hung_calls() == 1
        raise ConnectionError("gave up")

    # WHEN it ends by failing
    with pytest.raises(ConnectionError):
        breaker.call(hangs_then_fails)
    # THEN the fleet sees one call, slow and failed, not two calls
    assert reported(breaker, clock) == (1, 1, 1)


def test_a_hung_call_that_then_returns_a_failing_result_counts_its_failure() -> None:
    clock = FakeClock()
    breaker = make(MemoryStore(), clock, BUSY)

    def hangs_then_busy() -> str:
        clock.advance(1.5)
        assert breaker.report_hung_calls() == 1
        return "busy"

    breaker.call(hangs_then_busy)
    assert reported(breaker, clock) == (1, 1, 1)


def test_hung_calls_that_then_fail_open_the_breaker_at_once() -> None:
    # GIVEN a breaker that opens at 50 % failures of 4 calls, timing calls (1 s), and 4 calls
    # the watcher reported slow while they ran, each of which then fails
    clock, store = FakeClock(), MemoryStore()
    config = BreakerConfig(
        failure_rate_threshold=0.5, minimum_calls=4, slow_call_duration=1.0, window_seconds=10
    )
    breaker = make(store, clock, config)

    def hangs_then_fails() -> None:
        clock.advance(1.5)
        breaker.report_hung_calls()
        raise ConnectionError("gave up")

    # WHEN the fourth one fails
    for _ in range(4):
        with pytest.raises((ConnectionError, CircuitOpenError)):
            breaker.call(hangs_then_fails)
        clock.advance(1.0)
    # THEN the fleet's record is open: the late failures were reported out of turn
    record = store.load("payment-api", clock())
    assert record is not None
    assert record.state is State.OPEN


# -- the arithmetic -------------------------------------------------------------------------------


class Draw(random.Random):
    def __init__(self, draw: float) -> None:
        super().__init__(0)
        self.draw = draw

    def random(self) -> float:
        return self.draw


def hot(reports_per_s: float) -> WindowCounts:
    """A window whose reports arrive at ``reports_per_s`` on average (10 s window)."""
    return WindowCounts(calls=1000, reports=round(reports_per_s * 10))


def test_out_of_turn_reports_are_thinned_to_the_fleets_share() -> None:
    # GIVEN a record taking 100 reports/s at a 1 s interval (about 100 containers), and a
    # 100 ms cache: each container may go ahead with chance 200 * 0.1 / 100 = 0.2
    counts, chance = hot(100), URGENT_REPORTS_PER_S * 0.1 / 100
    # WHEN containers draw just under, at and just over that chance
    # THEN only the draws under it report
    assert urgent_allowed(counts, POLICY, 1000, 100, Draw(chance - 1e-9)) is True
    assert urgent_allowed(counts, POLICY, 1000, 100, Draw(chance)) is False
    assert urgent_allowed(counts, POLICY, 1000, 100, Draw(chance + 1e-9)) is False


def test_out_of_turn_reports_scale_with_the_interval_the_fleet_reports_at() -> None:
    # GIVEN the same write rate at a 2 s interval: twice the containers, half the chance
    counts, chance = hot(100), URGENT_REPORTS_PER_S * 0.1 / 200
    assert urgent_allowed(counts, POLICY, 2000, 100, Draw(chance - 1e-9)) is True
    assert urgent_allowed(counts, POLICY, 2000, 100, Draw(chance + 1e-9)) is False


def test_a_cache_ttl_of_zero_thins_as_one_millisecond() -> None:
    counts, chance = hot(100), URGENT_REPORTS_PER_S * 0.001 / 100
    assert urgent_allowed(counts, POLICY, 1000, 0, Draw(chance - 1e-12)) is True
    assert urgent_allowed(counts, POLICY, 1000, 0, Draw(chance + 1e-12)) is False


def test_a_container_alone_always_reports_out_of_turn() -> None:
    # GIVEN a record whose write rate shows one container (1 report/s at a 1 s interval)
    # and a cache so short that the fleet's share would be under one
    assert urgent_allowed(hot(1), POLICY, 1000, 1, Draw(0.999)) is True


def test_a_fleet_of_a_container_and_a_half_is_thinned() -> None:
    # GIVEN 1.5 reports/s at a 1 s interval and a 1 ms cache: chance 0.2 / 1.5
    chance = URGENT_REPORTS_PER_S * 0.001 / 1.5
    assert urgent_allowed(hot(1.5), POLICY, 1000, 1, Draw(chance + 1e-9)) is False


@pytest.mark.parametrize(
    ("fleet_calls", "own_calls", "own_ms"), [(0, 10, 1000), (100, 0, 1000), (100, 10, 0)]
)
def test_the_fleet_has_no_size_without_calls_on_both_sides(
    fleet_calls: int, own_calls: int, own_ms: int
) -> None:
    assert fleet_size(WindowCounts(calls=fleet_calls), POLICY, own_calls, own_ms) is None


def test_the_fleet_size_is_its_call_rate_over_this_containers() -> None:
    # GIVEN 1 call in the 10 s window, and this container's 1 call in 1 ms
    # THEN the fleet is 0.1 calls/s over 1,000 calls/s: a ten-thousandth of a container
    assert fleet_size(WindowCounts(calls=1), POLICY, 1, 1) == pytest.approx(1e-4)
    # AND 1,000 calls in the window over 10 calls in 1 s: 10 containers' worth
    assert fleet_size(WindowCounts(calls=1000), POLICY, 10, 1000) == pytest.approx(10.0)


def test_the_write_rate_is_the_windows_average_when_nothing_is_recent() -> None:
    # GIVEN 100 reports in the 10 s window, no recent span
    assert write_rate(WindowCounts(reports=100), POLICY) == 10.0


def test_the_write_rate_is_the_largest_of_average_recent_and_current() -> None:
    # GIVEN 100 reports in the window (10/s), 1 in the newest 1 s (1/s), none now
    counts = WindowCounts(reports=100, recent_reports=1, recent_ms=1000, current_ms=500)
    # THEN the average shows
    assert write_rate(counts, POLICY) == 10.0
    # AND a recent span of 1 ms holding one report shows 1,000/s
    assert write_rate(WindowCounts(reports=1, recent_reports=1, recent_ms=1), POLICY) == 1000.0


def test_the_current_buckets_rate_is_read_over_at_least_a_tenth_of_a_bucket() -> None:
    # GIVEN 10 reports in the current bucket, 0 ms into it
    counts = WindowCounts(reports=10, recent_reports=10, recent_ms=60_000, current_reports=10)
    # THEN they are spread over a tenth of a bucket, not over nothing
    assert write_rate(counts, POLICY) == 10 * 1000 / (POLICY.bucket_ms / 10)


# -- reports the store did not apply, and hung calls on a hot record ----------------------------


class LosesFirstReport(MemoryStore):
    """Answers the first report as a store whose every conditional write lost a race: not
    applied, the record unchanged (closed, this generation)."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0

    def report(self, name: str, policy: Any, now_ms: int, report: Any, observed: Any) -> Any:
        if not self.lost:
            self.lost += 1
            return Outcome(self.load(name, now_ms))
        return super().report(name, policy, now_ms, report, observed)


def test_a_report_that_lost_every_race_goes_with_the_next_one() -> None:
    # GIVEN a rate-policy breaker on a closed record, whose first report the store did not
    # apply
    clock, store = FakeClock(), LosesFirstReport()
    store.seed("payment-api", Record(expires_at=clock() // 1000 + 3600))
    breaker = make(store, clock)
    for _ in range(3):
        breaker.call(Dependency())
    clock.advance(RATE.effective_report_interval)
    breaker.call(Dependency())  # its first report: lost
    assert store.lost == 1
    # WHEN the next report goes out
    clock.advance(RATE.effective_report_interval)
    breaker.call(Dependency())
    # THEN it carries the lost calls too: none is missing from the fleet's window
    assert breaker.snapshot().calls == 4


def test_a_hung_call_on_a_hot_record_is_reported_at_once_by_a_newcomer() -> None:
    # GIVEN a newcomer (no report yet) on a record taking 1,000 reports/s, timing calls
    clock = FakeClock()
    store = MemoryStore()
    idx = clock() // POLICY.bucket_ms
    hot_bucket = Bucket(idx, calls=50_000, failures=0, slow=0, reports=10_000)
    store.seed(
        "payment-api",
        Record(buckets={idx % WINDOW_BUCKETS: hot_bucket}, expires_at=clock() // 1000 + 3600),
    )
    breaker = make(store, clock, SLOW)
    breaker.call(Dependency())
    writes = store.stats.writes

    # WHEN a call hangs past the slow duration and the watcher finds it
    def hangs() -> None:
        clock.advance(1.5)
        assert breaker.report_hung_calls() == 1
        # THEN it was written out of turn, not held for the fleet's interval
        assert store.stats.writes == writes + 1

    breaker.call(hangs)


# -- the interval a newcomer adopts ---------------------------------------------------------


def busy(reports: int, calls_per_report: int = 10) -> WindowCounts:
    """The 10 s window of a record that took ``reports`` reports of that many calls each."""
    return WindowCounts(calls=reports * calls_per_report, reports=reports)


def test_a_newcomer_adopts_the_interval_its_call_rate_gathers_a_fleet_report_in() -> None:
    # GIVEN reports of 10 calls at 125 reports/s (half the target: just hot), and a
    # newcomer that made 10 calls in 1 s
    # THEN the fleet's interval is the 1 s it takes to gather 10 calls
    assert fleet_interval_ms(busy(1250), POLICY, 10, 1000) == 1000
    # AND at 300 reports/s, with reports of 20 calls, 2 s
    assert fleet_interval_ms(busy(3000, 20), POLICY, 10, 1000) == 2000


def test_a_record_under_half_the_target_write_rate_gives_no_interval() -> None:
    assert fleet_interval_ms(busy(1000), POLICY, 10, 1000) is None


@pytest.mark.parametrize(
    ("counts", "own_calls", "own_ms"),
    [
        (WindowCounts(calls=0, reports=1250), 10, 1000),
        (busy(1250), 0, 1000),
        (busy(1250), 10, 0),
    ],
)
def test_without_calls_on_both_sides_there_is_no_fleet_interval(
    counts: WindowCounts, own_calls: int, own_ms: int
) -> None:
    assert fleet_interval_ms(counts, POLICY, own_calls, own_ms) is None


def test_single_calls_and_milliseconds_are_enough_to_go_on() -> None:
    # One report just now (1,000 reports/s over the last millisecond) of 10 calls
    one_report = WindowCounts(calls=10, reports=1, recent_reports=1, recent_ms=1)
    assert fleet_interval_ms(one_report, POLICY, 10, 1000) == 1000
    # One call of the newcomer's in 1 s; 10 in 1 ms; a fleet report of 1 call
    assert fleet_interval_ms(busy(1250), POLICY, 1, 1000) == 10_000
    assert fleet_interval_ms(busy(1250), POLICY, 10, 1) == 1
    assert fleet_interval_ms(WindowCounts(calls=1, reports=1250), POLICY, 1, 1000) == 1


# -- what the mutation run found unasserted (issue 31) ------------------------------------------


class SetDraw(random.Random):
    """Every draw returns ``draw``, which a test may change between calls."""

    def __init__(self, draw: float) -> None:
        super().__init__(0)
        self.draw = draw

    def random(self) -> float:
        return self.draw


def down() -> Dependency:
    dependency = Dependency()
    dependency.failing = True
    return dependency


def strategy_of(breaker: CircuitBreaker) -> RateStrategy:
    strategy = breaker._core.mode.counting
    assert isinstance(strategy, RateStrategy)
    return strategy


def near_threshold(now_ms: int, reports: int = 10_000) -> Record:
    """A closed record whose calls fail half the time, in a bucket that took ``reports``
    reports (a hot record: a large fleet): a container's pending good call keeps it under
    the 50 % threshold, a failure added to that puts it over."""
    idx = now_ms // POLICY.bucket_ms
    bucket = Bucket(idx, calls=50_000, failures=25_000, slow=0, reports=reports)
    return Record(buckets={idx % WINDOW_BUCKETS: bucket}, expires_at=now_ms // 1000 + 3600)


def steady(now_ms: int, reports_per_s: int, calls_per_report: int) -> Record:
    """A closed record whose last nine buckets took ``reports_per_s`` reports a second, each
    of ``calls_per_report`` calls; the current bucket is empty."""
    now_idx = now_ms // POLICY.bucket_ms
    per_bucket = reports_per_s * POLICY.bucket_ms // 1000
    buckets = {
        idx % WINDOW_BUCKETS: Bucket(idx, calls=per_bucket * calls_per_report, reports=per_bucket)
        for idx in range(now_idx - WINDOW_BUCKETS + 1, now_idx)
    }
    return Record(buckets=buckets, expires_at=now_ms // 1000 + 3600)


def settled_report(seconds: int) -> RateStrategy:
    """A container that called 10 times a second for ``seconds`` on a quiet record (reporting
    every second, the base interval), whose next report meets a record taking 250 reports
    a second of 50 calls each over nine of its buckets: 1,125 containers like it."""
    clock, store = FakeClock(), MemoryStore()
    breaker = make(store, clock)
    for _ in range(10 * seconds):
        breaker.call(Dependency())
        clock.advance(0.1)
    strategy = strategy_of(breaker)
    assert strategy.interval_ms == 1000
    store.seed("payment-api", steady(clock(), 250, 50))
    breaker.call(Dependency())  # its report, due now
    return strategy


def test_a_container_that_has_run_a_window_reports_at_its_fair_share() -> None:
    # GIVEN a container that has reported every second for a window while the record was
    # quiet (the write rate, about TARGET_REPORTS_PER_S, alone would leave the interval at
    # about 1 s)
    # WHEN its report shows 1,125 containers calling as often as it does
    strategy = settled_report(seconds=10)
    # THEN it reports at its share of TARGET_REPORTS_PER_S: 1,125 / 250 a second = 4.5 s
    assert strategy.interval_ms == pytest.approx(4500, abs=10)


def test_a_container_younger_than_a_window_keeps_the_write_rates_interval() -> None:
    # GIVEN the same container two seconds old (its own call rate still a guess, and a crowd
    # arriving together would all take an interval from one busy second)
    # WHEN its report shows the same fleet
    strategy = settled_report(seconds=2)
    # THEN the write rate alone sets its interval (about the target: about the base one)
    assert strategy.interval_ms == pytest.approx(1000, abs=10)


def test_a_report_tells_on_window_the_fleets_calls_and_rates() -> None:
    # GIVEN a rate-policy breaker timing calls (1 s), with a listener, that made 4 calls:
    # one failed, one ran slow
    clock, store, windows = FakeClock(), MemoryStore(), RecordingListener()
    config = replace(RATE, slow_call_duration=1.0, slow_call_rate_threshold=0.9)
    breaker = make(store, clock, config, listeners=[windows])
    breaker.call(Dependency())
    with pytest.raises(ConnectionError):
        breaker.call(down())
    breaker.call(Dependency())
    breaker.call(lambda: clock.advance(1.0))  # its report is due when it ends
    # WHEN its report goes out (with the next call)
    breaker.call(Dependency())
    # THEN the listener hears the breaker's name and the fleet's window as the answer shows
    assert windows.args("on_window") == [("payment-api", 4, 0.25, 0.25)]


def test_an_untimed_call_gets_its_positional_and_keyword_arguments() -> None:
    breaker = make(MemoryStore(), FakeClock())
    assert breaker.call(lambda a, b: (a, b), 1, b=2) == (1, 2)


def test_an_untimed_call_whose_result_fails_counts_a_failure() -> None:
    # GIVEN no slow-call detection and a result that counts as a failure
    clock = FakeClock()
    breaker = make(MemoryStore(), clock, replace(RATE, failure_result=lambda r: r == "busy"))
    # WHEN a call returns it
    assert breaker.call(lambda: "busy") == "busy"
    # THEN the fleet counts one failed call
    assert reported(breaker, clock) == (1, 1, 0)


def test_a_timed_call_that_runs_slow_then_raises_counts_slow_and_failed() -> None:
    # GIVEN slow-call detection (1 s) and a call that takes 1.5 s, then raises, unwatched
    clock = FakeClock()
    breaker = make(MemoryStore(), clock, SLOW)

    def slow_then_fails() -> None:
        clock.advance(1.5)
        raise ConnectionError("gave up")

    with pytest.raises(ConnectionError):
        breaker.call(slow_then_fails)
    # THEN the fleet sees one call, both slow and failed
    assert reported(breaker, clock) == (1, 1, 1)


def test_a_hung_call_then_interrupted_raises_the_interruption() -> None:
    # GIVEN a call the watcher reported slow while it ran
    clock = FakeClock()
    breaker = make(MemoryStore(), clock, SLOW)

    def hangs_then_interrupted() -> None:
        clock.advance(1.5)
        assert breaker.report_hung_calls() == 1
        raise KeyboardInterrupt

    # WHEN it is interrupted THEN the interruption propagates, nothing else
    with pytest.raises(KeyboardInterrupt):
        breaker.call(hangs_then_interrupted)


def test_a_timed_call_fast_long_after_the_epoch_is_not_slow() -> None:
    # GIVEN slow-call detection, a clock well past its start
    clock = FakeClock()
    clock.advance(3600)
    breaker = make(MemoryStore(), clock, SLOW)
    # WHEN a call ends at once THEN it is a good call
    breaker.call(Dependency())
    assert reported(breaker, clock) == (1, 0, 0)


def test_the_report_goes_out_with_the_call_made_exactly_when_it_is_due() -> None:
    # GIVEN a breaker reporting every 0.5 s (its 1 s cache refresh would carry the counts
    # otherwise), with one call tallied, its report due one interval on
    clock, store = FakeClock(), MemoryStore()
    config = replace(RATE, report_interval=0.5)
    breaker = make(store, clock, config)
    breaker.call(Dependency())
    writes = store.stats.writes
    # WHEN a call comes exactly one interval later
    clock.advance(config.effective_report_interval)
    breaker.call(Dependency())
    # THEN the report was written with it
    assert store.stats.writes == writes + 1


def test_one_failing_call_among_healthy_older_ones_is_worse_down_to_one_call() -> None:
    # GIVEN a single recent call that failed, after healthy older calls (even just one)
    # THEN the recent call is worse
    assert recent_worse((1, 1, 0), (40, 0, 0), POLICY)
    assert recent_worse((3, 1, 0), (1, 0, 0), POLICY)


def test_recent_calls_running_slow_as_often_as_older_ones_are_not_worse() -> None:
    slow = make_policy(SLOW, failure_rate_threshold=0.5)
    # 1 slow in 2 recent calls, 2 in 4 older: the same rate
    assert not recent_worse((2, 0, 1), (4, 0, 2), slow)
    # 1 slow in 4 recent calls, 1 in 4 older
    assert not recent_worse((4, 0, 1), (4, 0, 1), slow)


def test_a_chance_of_exactly_one_always_reports_out_of_turn() -> None:
    # GIVEN 100 reports/s at a 1 s interval and a 500 ms cache: chance 200 * 0.5 / 100 = 1
    # THEN even the highest draw goes ahead
    assert urgent_allowed(hot(100), POLICY, 1000, 500, Draw(1.0)) is True


def test_one_report_a_second_shrinks_a_stretched_interval() -> None:
    # GIVEN a record taking 1 report/s and a container at the longest interval (20 s)
    counts = WindowCounts(calls=10, reports=10)
    # THEN its next interval shrinks by sqrt(1 / 250), to about 1.26 s
    assert next_interval_ms(20_000, 1000, counts, POLICY) == round(20_000 * math.sqrt(1 / 250))


def test_a_failure_that_would_trip_is_reported_at_once_even_by_a_newcomer() -> None:
    # GIVEN a newcomer on a hot record one failure short of the threshold, its draws
    # always under the thinning chance
    clock, store = FakeClock(), MemoryStore()
    store.seed("payment-api", near_threshold(clock()))
    breaker = make(store, clock, rng=SetDraw(0.0))
    breaker.call(Dependency())
    # WHEN a call fails
    with pytest.raises(ConnectionError):
        breaker.call(down())
    # THEN the fleet's record opened at once: the newcomer did not wait to join the fleet
    record = store.load("payment-api", clock())
    assert record is not None
    assert record.state is State.OPEN


def test_a_container_decides_on_an_out_of_turn_report_once_per_cache_ttl() -> None:
    # GIVEN a container reporting every 5 s (1 s cache) on a hot record a failure short of
    # the threshold, whose first out-of-turn decision draws over the thinning chance
    clock, store = FakeClock(), MemoryStore()
    store.seed("payment-api", near_threshold(clock()))
    rng = SetDraw(0.999)
    breaker = make(store, clock, replace(RATE, report_interval=5.0), rng=rng)
    breaker.call(Dependency())
    with pytest.raises(ConnectionError):
        breaker.call(down())
    writes = store.stats.writes
    # WHEN later draws would pass, and another failure comes in the same millisecond
    rng.draw = 0.0
    with pytest.raises(ConnectionError):
        breaker.call(down())
    # THEN it is not reported: one decision per cache_ttl
    assert store.stats.writes == writes
    # AND a failure exactly one cache_ttl after the first decision is
    clock.advance(RATE.cache_ttl)
    with pytest.raises((ConnectionError, CircuitOpenError)):
        breaker.call(down())
    assert store.stats.writes == writes + 1


def test_flush_writes_the_pending_counts_at_once_even_for_a_newcomer() -> None:
    # GIVEN a newcomer on a hot record (one that would wait to join the fleet's interval)
    # with 3 calls pending
    clock, store = FakeClock(), MemoryStore()
    store.seed("payment-api", near_threshold(clock()))
    breaker = make(store, clock)
    for _ in range(3):
        breaker.call(Dependency())
    clock.advance(0.1)
    before = store.load("payment-api", clock())
    assert before is not None
    # WHEN the strategy is flushed (before a snapshot)
    strategy_of(breaker).flush(clock())
    # THEN the 3 calls are in the fleet's record now
    after = store.load("payment-api", clock())
    assert after is not None
    assert sum(b.calls for b in after.buckets.values()) == 50_003
    assert strategy_of(breaker).tally.pending_calls() == 0


class FencedStore(MemoryStore):
    """A MemoryStore that keeps the record each report was fenced on, and what it answered."""

    def __init__(self) -> None:
        super().__init__()
        self.fences: list[Record | None] = []
        self.answers: list[Record | None] = []

    def report(
        self, name: str, policy: Policy, now_ms: int, report: Report, observed: Record | None
    ) -> Outcome:
        outcome = super().report(name, policy, now_ms, report, observed)
        self.fences.append(observed)
        self.answers.append(outcome.record)
        return outcome


def test_a_flush_in_two_reports_fences_the_second_on_the_first_ones_answer() -> None:
    # GIVEN a breaker whose recent calls fail more often than its older ones (a flush then
    # sends the recent ones alone first, the older ones in a second report)
    clock, store = FakeClock(), FencedStore()
    breaker = make(store, clock)
    breaker.call(Dependency())
    strategy = strategy_of(breaker)
    for _ in range(3):
        for _ in range(20):
            strategy.end(None, False)
        clock.advance(strategy.tally.span_ms / 1000)
        strategy.tally.rotate(clock())
    for call in range(20):
        strategy.end(None, call % 2 == 0)
    assert recent_worse(strategy.tally.recent(), strategy.tally.older(), POLICY)
    # WHEN it is flushed
    breaker.flush()
    # THEN two reports went, the second fenced on the record the first was answered with
    # (its answer is not cached until the flush returns to the core: the flush carries it)
    assert len(store.fences) == 2
    assert store.fences[1] is store.answers[0]
    assert strategy.tally.pending_calls() == 0


def test_flush_with_nothing_pending_neither_writes_nor_reads() -> None:
    # GIVEN a breaker whose calls were all reported
    clock, store = FakeClock(), MemoryStore()
    breaker = make(store, clock)
    breaker.call(Dependency())
    strategy_of(breaker).flush(clock())
    requests = (store.stats.reads, store.stats.writes)
    # WHEN it is flushed again THEN the store is not asked anything
    strategy_of(breaker).flush(clock())
    assert (store.stats.reads, store.stats.writes) == requests


def test_a_restart_forgets_the_counts_and_is_due_one_base_interval_on() -> None:
    # GIVEN a breaker with calls pending
    clock = FakeClock()
    breaker = make(MemoryStore(), clock)
    breaker.call(Dependency())
    clock.advance(0.3)
    strategy = strategy_of(breaker)
    # WHEN it restarts (restored from a snapshot)
    strategy.restart(clock())
    # THEN nothing is pending and the first report is due one base interval from now
    assert strategy.tally.pending_calls() == 0
    assert strategy.tally.report_due_ms == clock() + 1000


def test_a_newcomers_first_report_out_of_turn_adopts_the_fleets_interval() -> None:
    # GIVEN a newcomer on a record taking 250 reports/s of 50 calls each (the interval
    # stretch alone keeps 1 s), that made 10 calls in 1 s
    clock, store = FakeClock(), MemoryStore()
    store.seed("payment-api", steady(clock(), 250, 50))
    breaker = make(store, clock)
    for _ in range(10):
        breaker.call(Dependency())
        clock.advance(0.1)
    strategy = strategy_of(breaker)
    assert strategy.interval_ms == 1000
    # WHEN its first report goes out of turn (a flush)
    strategy.flush(clock())
    # THEN it reports from then on at the 5 s a fleet report's 50 calls take it
    assert strategy.interval_ms == pytest.approx(5000, abs=10)


# -- a newcomer joining a busy record ------------------------------------------------------------


def newcomer_due(reports_per_s: int, calls_per_report: int, draw: float = 0.5) -> Any:
    """A newcomer (quiet clock, draws fixed at ``draw``) on a record that took
    ``reports_per_s`` reports a second of ``calls_per_report`` calls each up to now, having
    made 10 calls in its first second; its first report then falls due."""
    clock, store = FakeClock(), MemoryStore()
    store.seed("payment-api", steady(clock() + 1000, reports_per_s, calls_per_report))
    breaker = make(store, clock, rng=SetDraw(draw))
    for _ in range(10):
        breaker.call(Dependency())
        clock.advance(0.1)
    assert clock() == FakeClock()() + 1000
    breaker.call(Dependency())  # the report due now
    return clock, store, strategy_of(breaker)


def test_a_newcomer_defers_its_first_report_to_the_fleets_interval_jittered() -> None:
    # GIVEN a record taking 250 reports/s of 50 calls each, and a newcomer that gathers 10
    # calls a second: the fleet's interval is 5 s
    # WHEN its first report falls due
    clock, store, strategy = newcomer_due(250, 50, draw=0.5)
    # THEN it writes nothing, takes the 5 s interval, and its first report is due at a draw
    # over 1 s to twice the interval: 1 s + 0.5 * (10 s - 1 s)
    assert store.stats.writes == 0
    assert strategy.interval_ms == 5000
    assert strategy.tally.report_due_ms == clock() + 1000 + 4500


@pytest.mark.parametrize(
    ("reports_per_s", "calls_per_report", "writes"),
    [
        (125, 50, 0),  # half the target write rate: hot enough to join
        (100, 50, 1),  # under half: a quiet record, the newcomer reports at once
        (250, 10, 1),  # the fleet's interval is its own: nothing to join
        (500, 10, 0),  # the same reports at twice the rate: twice its interval, by the rate
    ],
)
def test_a_newcomer_joins_only_a_hot_record_with_a_longer_interval(
    reports_per_s: int, calls_per_report: int, writes: int
) -> None:
    _, store, _ = newcomer_due(reports_per_s, calls_per_report)
    assert store.stats.writes == writes


def test_a_newcomer_that_started_with_a_crowd_spreads_its_first_report_over_two_windows() -> None:
    # GIVEN a newcomer that first read an empty record (one of a crowd starting together),
    # its draws fixed at 0.5
    clock, store = FakeClock(), MemoryStore()
    breaker = make(store, clock, rng=SetDraw(0.5))
    breaker.call(Dependency())
    # AND a second later the record is hot
    clock.advance(1.0)
    hot_record = near_threshold(clock() - 300, reports=600)
    store.seed("payment-api", hot_record)
    # WHEN its first report falls due
    breaker.call(Dependency())
    strategy = strategy_of(breaker)
    # THEN it takes the longest interval, its first report due at the draw over 1 s to 20 s
    assert store.stats.writes == 0
    assert strategy.tally.stretched
    assert strategy.tally.report_due_ms == clock() + 1000 + round(0.5 * (20_000 - 1000))
    # AND until it reports, its cache lasts as for a fleet large enough for the longest wait
    # (2 x 1 s; the draw 0.5 is the jitter's middle)
    assert strategy.fresh_ms(hot_record, clock()) == 2000


def test_a_fleets_size_stretches_the_cache_by_all_this_containers_calls() -> None:
    # GIVEN a container that reported 4 calls and has 6 pending, 10 in its first second,
    # its draws fixed at 0.5 (the jitter's middle)
    clock, store = FakeClock(), MemoryStore()
    breaker = make(store, clock, rng=SetDraw(0.5))
    for _ in range(4):
        breaker.call(Dependency())
        clock.advance(0.25)
    for _ in range(6):
        breaker.call(Dependency())
    strategy = strategy_of(breaker)
    assert strategy.tally.pending_calls() == 6
    # WHEN a record shows 500,000 calls in the 10 s window: 5,000 containers like it
    idx = clock() // POLICY.bucket_ms
    record = Record(
        buckets={idx % WINDOW_BUCKETS: Bucket(idx, calls=500_000, reports=1)},
        expires_at=clock() // 1000 + 3600,
    )
    # THEN its cache lasts for 5,000 containers' refreshes at 3,000/s: 1.67 s
    assert strategy.fresh_ms(record, clock()) == round(5000 * 1000 / 3000)


def test_a_failure_from_a_container_the_quorum_already_counts_adds_no_container() -> None:
    # GIVEN a quorum of 2 failing containers, and a record over the failure rate whose
    # one failing container is this one (c1)
    quorum = make_policy(RATE, min_containers=2)
    idx = 0 // quorum.bucket_ms
    bucket = Bucket(idx, calls=20, failures=15, slow=0, reports=3)
    record = Record(buckets={idx % WINDOW_BUCKETS: bucket}, failing={"c1": 10}, expires_at=3600)
    tally = CallTally(quorum, 1000)
    # WHEN another of c1's calls fails
    tally.bad(None, 20, failed=True)
    # THEN it does not report out of turn: the fleet still shows one failing container
    assert not wants_urgent_report(record, tally, quorum, "c1", 30)
    # AND the same failure from another container would make the quorum
    assert wants_urgent_report(record, tally, quorum, "c2", 30)


def test_a_report_sends_recent_failures_alone_when_older_calls_were_healthy() -> None:
    # GIVEN a container reporting every 5 s (5 s cache), with 10 good calls in its first
    # second and 5 in its second, then 3 failures (under the 50 % threshold: no out-of-turn
    # report)
    clock, store = FakeClock(), MemoryStore()
    breaker = make(store, clock, replace(RATE, report_interval=5.0, cache_ttl=5.0))
    for _ in range(10):
        breaker.call(Dependency())
    clock.advance(1.0)
    for _ in range(5):
        breaker.call(Dependency())
    clock.advance(1.0)
    for _ in range(3):
        with pytest.raises(ConnectionError):
            breaker.call(down())
    assert store.stats.writes == 0
    # WHEN its report falls due
    clock.advance(3.0)
    breaker.call(Dependency())
    # THEN the fleet sees the recent calls alone (the failures and the second's 5 calls
    # before them: fewer than MIN_RECENT_CALLS came after those); the first second's 10
    # good calls go with the next report
    snap = breaker.snapshot()
    assert (snap.calls, snap.failures) == (8, 3)
    clock.advance(5.0)
    breaker.call(Dependency())
    snap = breaker.snapshot()
    assert (snap.calls, snap.failures) == (19, 3)
