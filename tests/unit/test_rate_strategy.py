"""The rate policy's strategy, one behaviour at a time: outcomes recorded through
``record()``, calls with arguments and failing results under slow-call detection, calls
interrupted or failing after the watcher reported them, and the arithmetic that thins
out-of-turn reports and sizes the fleet.

MemoryStore, a hand-moved clock; the pure functions of fleetbreaker.rate directly.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, MemoryStore, State
from fleetbreaker.frozen import replace
from fleetbreaker.policy import Policy
from fleetbreaker.rate import (
    URGENT_REPORTS_PER_S,
    fleet_interval_ms,
    fleet_size,
    urgent_allowed,
    write_rate,
)
from fleetbreaker.record import WINDOW_BUCKETS, Bucket, Outcome, Record
from fleetbreaker.window import WindowCounts
from tests.support import Dependency, FakeClock

RATE = BreakerConfig(
    failure_rate_threshold=0.5,
    minimum_calls=4,
    window_seconds=10,
    recovery_timeout=5,
    recovery_jitter=0.0,
    cache_ttl=1.0,
)
SLOW = BreakerConfig(slow_call_duration=1.0, minimum_calls=100, window_seconds=10)
POLICY = Policy.from_config(RATE)  # a 10 s window
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
