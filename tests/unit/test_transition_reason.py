"""Why a breaker changed state: the reason a log line, a metric or a trace shows beside a
transition (``transition_reason``; the degraded mode's local twin asks it after each write).
"""

from __future__ import annotations

import pytest

from fleetbreaker import State
from fleetbreaker.record import TransitionReason
from fleetbreaker.rules import transition_reason
from fleetbreaker.window import WindowCounts
from tests.support import make_policy

COUNT = make_policy(failure_threshold=3)
RATE = make_policy(failure_rate_threshold=0.5, minimum_calls=10)
# Slow calls beside each policy: a trip's reason depends on what the window held.
COUNT_SLOW = make_policy(failure_threshold=3, slow_call_duration=1.0, slow_call_rate_threshold=0.5)
RATE_SLOW = make_policy(
    failure_rate_threshold=0.5,
    minimum_calls=10,
    slow_call_duration=1.0,
    slow_call_rate_threshold=0.5,
)


@pytest.mark.parametrize(
    ("before", "after", "reason"),
    [
        (State.OPEN, State.HALF_OPEN, TransitionReason.OPEN_WINDOW_ELAPSED),
        (State.HALF_OPEN, State.CLOSED, TransitionReason.PROBE_SUCCEEDED),
        (State.HALF_OPEN, State.OPEN, TransitionReason.PROBE_FAILED),
    ],
)
def test_the_probe_cycle_says_which_step_it_took(
    before: State, after: State, reason: TransitionReason
) -> None:
    assert transition_reason(before, after, COUNT) is reason


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (State.CLOSED, State.FORCED_OPEN),
        (State.CLOSED, State.DISABLED),
        (State.OPEN, State.CLOSED),
        (State.HALF_OPEN, State.DISABLED),
        (State.FORCED_OPEN, State.CLOSED),
        (State.DISABLED, State.OPEN),
        (State.OPEN, State.FORCED_OPEN),
    ],
)
def test_any_other_change_is_an_operator_s(before: State, after: State) -> None:
    assert transition_reason(before, after, COUNT) is TransitionReason.OPERATOR


def test_a_trip_under_the_count_policy_is_the_failure_threshold() -> None:
    assert transition_reason(State.CLOSED, State.OPEN, COUNT) is TransitionReason.FAILURE_THRESHOLD


def test_a_trip_under_the_rate_policy_is_the_failure_rate() -> None:
    assert transition_reason(State.CLOSED, State.OPEN, RATE) is TransitionReason.FAILURE_RATE


def test_a_trip_with_slow_calls_but_no_window_is_put_down_to_failures() -> None:
    # WHEN the tripping write's window is not known (counts=None)
    assert transition_reason(State.CLOSED, State.OPEN, RATE_SLOW) is TransitionReason.FAILURE_RATE
    assert (
        transition_reason(State.CLOSED, State.OPEN, COUNT_SLOW)
        is TransitionReason.FAILURE_THRESHOLD
    )


@pytest.mark.parametrize(
    ("failures", "reason"),
    [
        (3, TransitionReason.FAILURE_THRESHOLD),  # exactly the threshold: failures tripped it
        (2, TransitionReason.SLOW_CALL_RATE),  # one short: the slow calls did
    ],
)
def test_a_count_policy_trip_beside_slow_calls_names_what_reached_its_threshold(
    failures: int, reason: TransitionReason
) -> None:
    counts = WindowCounts(calls=10, failures=failures, slow=8)
    assert transition_reason(State.CLOSED, State.OPEN, COUNT_SLOW, counts) is reason


@pytest.mark.parametrize(
    ("calls", "failures", "reason"),
    [
        (10, 5, TransitionReason.FAILURE_RATE),  # minimum_calls and exactly half: failures
        (10, 4, TransitionReason.SLOW_CALL_RATE),  # under half failed: the slow calls
        (9, 9, TransitionReason.SLOW_CALL_RATE),  # under minimum_calls: failures cannot trip
        (12, 6, TransitionReason.FAILURE_RATE),  # the rate, not the count: 6 of 12
        (12, 5, TransitionReason.SLOW_CALL_RATE),  # 5 of 12 is under half
    ],
)
def test_a_rate_policy_trip_beside_slow_calls_names_what_reached_its_threshold(
    calls: int, failures: int, reason: TransitionReason
) -> None:
    counts = WindowCounts(calls=calls, failures=failures, slow=calls)
    assert transition_reason(State.CLOSED, State.OPEN, RATE_SLOW, counts) is reason
