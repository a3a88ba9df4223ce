"""The listener hooks as a user sees them: every listener hears every event, a listener's
exception never reaches the call, and LoggingListener's lines (levels, fields, a
misconfiguration said once per process, a shadow breaker's paced would-reject lines)."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Mapping
from typing import Any

import pytest

from fleetbreaker import CircuitBreaker, CircuitOpenError, MemoryStore, State
from fleetbreaker.errors import TABLE_NOT_FOUND, StoreError, StoreMisconfiguredError
from fleetbreaker.events import (
    WOULD_REJECT_LOG_INTERVAL_MS,
    BreakerListener,
    LoggingListener,
    StateChange,
)
from fleetbreaker.record import TransitionReason
from tests.support import Dependency, FakeClock, RecordingListener, breaker_on, trip

NAME = "payment-api"


class Line:
    """One line a LoggingListener wrote: its level, its text and its fields."""

    def __init__(self, level: int, msg: object, args: tuple[object, ...], extra: Any) -> None:
        self.level = level
        self.text = str(msg) % args if args else str(msg)
        self.fields: Mapping[str, object] = extra or {}


class Log:
    """A logger as LoggingListener takes one (stdlib or Powertools): keeps what it is told."""

    def __init__(self) -> None:
        self.lines: list[Line] = []

    def info(self, msg: object, *args: object, extra: Any = None) -> None:
        self.lines.append(Line(logging.INFO, msg, args, extra))

    def warning(self, msg: object, *args: object, extra: Any = None) -> None:
        self.lines.append(Line(logging.WARNING, msg, args, extra))

    def error(self, msg: object, *args: object, extra: Any = None) -> None:
        self.lines.append(Line(logging.ERROR, msg, args, extra))


class Raising(BreakerListener):
    """A listener with a bug in every hook a call goes through."""

    def on_decision(self, *args: Any) -> None:
        raise RuntimeError("listener bug in on_decision")

    def on_failure_recorded(self, *args: Any) -> None:
        raise RuntimeError("listener bug in on_failure_recorded")

    def on_state_change(self, *args: Any) -> None:
        raise RuntimeError("listener bug in on_state_change")

    def on_rejected(self, *args: Any) -> None:
        raise RuntimeError("listener bug in on_rejected")


def misconfigured(variable: str = "CIRCUIT_BREAKER_TABLE") -> StoreMisconfiguredError:
    """A missing table named by ``variable``, its message naming a table of its own."""
    return StoreMisconfiguredError(
        f"table NoSuchBreakers-{uuid.uuid4().hex[:8]} not found",
        problem=TABLE_NOT_FOUND,
        variable=variable,
    )


def change(after: State, before: State = State.CLOSED) -> StateChange:
    return StateChange(before, after, 7, TransitionReason.OPERATOR)


# -- hooks: every listener, and never into the call -----------------------------------------


def test_a_listeners_exception_never_reaches_the_call(caplog: pytest.LogCaptureFixture) -> None:
    # GIVEN a breaker whose listener raises in every hook a call goes through
    clock = FakeClock()
    breaker = breaker_on(MemoryStore(), clock, failure_threshold=2, listeners=[Raising()])
    dep = Dependency()
    # WHEN calls succeed, fail, trip the breaker and are rejected
    with caplog.at_level(logging.ERROR, logger="fleetbreaker"):
        assert breaker.call(dep) == "ok"
        trip(breaker, dep)  # each failing call raises the dependency's own ConnectionError
        with pytest.raises(CircuitOpenError):
            breaker.call(dep)
    # THEN each call got its own outcome, and the breaker still opened
    assert breaker.state is State.OPEN
    # AND each listener failure was logged, naming the listener and the hook
    logged = caplog.text
    for hook in ("on_decision", "on_failure_recorded", "on_state_change", "on_rejected"):
        assert hook in logged
    assert "Raising" in logged


def test_hooks_reach_every_listener_even_past_one_that_raises() -> None:
    # GIVEN two recording listeners with a raising one between them
    clock = FakeClock()
    first, last = RecordingListener(), RecordingListener()
    breaker = breaker_on(
        MemoryStore(), clock, failure_threshold=2, listeners=[first, Raising(), last]
    )
    # WHEN the breaker trips
    trip(breaker, Dependency())
    # THEN both heard every event, in the same order
    trip_events = ("on_failure_recorded", "on_state_change")
    assert [h.hook for h in first.of(*trip_events)] == [
        "on_failure_recorded",
        "on_state_change",
        "on_failure_recorded",
    ]
    assert first.of() == last.of()
    [change] = first.values("on_state_change", "change")
    assert (change.before, change.after) == (State.CLOSED, State.OPEN)


def test_a_listener_that_overrides_nothing_hears_nothing_and_costs_the_call_nothing() -> None:
    breaker = CircuitBreaker(
        NAME, store=MemoryStore(), clock=FakeClock(), listeners=[BreakerListener()]
    )
    assert breaker.call(Dependency()) == "ok"


# -- StateChange --------------------------------------------------------------------------------


def test_a_state_change_is_a_value() -> None:
    opened = StateChange(State.CLOSED, State.OPEN, 3, TransitionReason.FAILURE_THRESHOLD)
    assert opened == StateChange(State.CLOSED, State.OPEN, 3, TransitionReason.FAILURE_THRESHOLD)
    assert opened != StateChange(State.CLOSED, State.OPEN, 4, TransitionReason.FAILURE_THRESHOLD)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opened.generation = 4  # type: ignore[misc]


# -- LoggingListener: transitions ---------------------------------------------------------------


@pytest.mark.parametrize("after", [State.OPEN, State.FORCED_OPEN, State.DISABLED])
def test_a_breaker_that_stops_protecting_or_starts_rejecting_logs_a_warning(
    after: State,
) -> None:
    # (Lambda's Python runtime shows WARNING and above unless the function sets a level)
    log = Log()
    LoggingListener(log).on_state_change(NAME, change(after))
    [line] = log.lines
    assert line.level == logging.WARNING
    assert line.text == f"circuit payment-api: closed -> {after.value}"


@pytest.mark.parametrize("after", [State.HALF_OPEN, State.CLOSED])
def test_a_recovery_logs_at_info(after: State) -> None:
    log = Log()
    LoggingListener(log).on_state_change(NAME, change(after, before=State.OPEN))
    [line] = log.lines
    assert line.level == logging.INFO


def test_a_transition_line_carries_its_fields() -> None:
    log = Log()
    LoggingListener(log).on_state_change(NAME, change(State.FORCED_OPEN))
    assert dict(log.lines[0].fields) == {
        "breaker": NAME,
        "breaker_event": "transition",
        "from_state": "closed",
        "to_state": "forced_open",
        "reason": "operator",
        "generation": 7,
    }


def test_healthy_events_log_nothing() -> None:
    log = Log()
    listener = LoggingListener(log)
    listener.on_failure_recorded(NAME, State.CLOSED)
    listener.on_probe(NAME, True, True)
    listener.on_store_call(NAME, "load", 1.5, True)
    assert log.lines == []


# -- LoggingListener: store trouble ---------------------------------------------------------------


def test_a_store_error_is_a_warning_with_its_secrets_redacted() -> None:
    log = Log()
    error = StoreError("cannot reach redis://app:hunter2@cache:6379/0")
    LoggingListener(log).on_store_error(NAME, "load", error)
    [line] = log.lines
    assert line.level == logging.WARNING
    assert "hunter2" not in line.text
    assert "hunter2" not in str(line.fields["error"])
    assert "cache:6379" in line.text
    assert (line.fields["breaker_event"], line.fields["operation"]) == ("store_error", "load")
    assert line.fields["error_type"] == "StoreError"


def test_a_misconfigured_store_is_left_to_its_own_error_line() -> None:
    # on_store_error precedes on_store_misconfigured for the same failure: no WARNING twice
    log = Log()
    LoggingListener(log).on_store_error(NAME, "load", misconfigured())
    assert log.lines == []


def test_a_misconfiguration_is_logged_once_per_process_at_error() -> None:
    # GIVEN two breakers' listeners meeting the same misconfiguration on every call
    error = misconfigured()
    log = Log()
    listeners = [LoggingListener(log), LoggingListener(log)]
    # WHEN each meets it three times
    for listener in listeners:
        for _ in range(3):
            listener.on_store_misconfigured(NAME, "load", error)
    # THEN one ERROR line names the setting to change
    [line] = log.lines
    assert line.level == logging.ERROR
    assert "a setting must change" in line.text
    assert (line.fields["problem"], line.fields["variable"]) == (
        TABLE_NOT_FOUND,
        "CIRCUIT_BREAKER_TABLE",
    )
    assert line.fields["breaker_event"] == "store_misconfigured"


def test_the_same_kind_in_other_words_is_not_logged_again() -> None:
    # GIVEN two refusals of one kind whose texts differ (access denied names each action)
    log = Log()
    listener = LoggingListener(log)

    # WHEN both are met
    listener.on_store_misconfigured(NAME, "load", misconfigured())
    listener.on_store_misconfigured(NAME, "record_failure", misconfigured())

    # THEN one line: the key is the kind (class, problem, setting), never the text
    assert len(log.lines) == 1


def test_another_misconfiguration_gets_its_own_line() -> None:
    log = Log()
    listener = LoggingListener(log)
    listener.on_store_misconfigured(NAME, "load", misconfigured("CIRCUIT_BREAKER_TABLE"))
    listener.on_store_misconfigured(NAME, "load", misconfigured("CIRCUIT_BREAKER_REDIS_URL"))
    assert [line.fields["variable"] for line in log.lines] == [
        "CIRCUIT_BREAKER_TABLE",
        "CIRCUIT_BREAKER_REDIS_URL",
    ]


def test_degraded_recovered_and_corrupt_records_log_at_their_levels() -> None:
    log = Log()
    listener = LoggingListener(log)
    listener.on_degraded(NAME, "store load failed")
    listener.on_recovered(NAME)
    listener.on_corrupt_record(NAME, "state 'opne' is not a state")
    levels = [(line.level, line.fields["breaker_event"]) for line in log.lines]
    assert levels == [
        (logging.WARNING, "degraded"),
        (logging.INFO, "recovered"),
        (logging.ERROR, "corrupt_record"),
    ]
    degraded, _, corrupt = log.lines
    assert degraded.fields["reason"] == "store load failed"
    assert "store load failed" in degraded.text
    assert corrupt.fields["detail"] == "state 'opne' is not a state"


def test_the_default_log_is_the_fleetbreaker_logger(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="fleetbreaker"):
        LoggingListener().on_recovered(NAME)
    [record] = [r for r in caplog.records if r.name == "fleetbreaker"]
    assert record.getMessage() == "circuit payment-api: store reachable again"
    assert record.__dict__["breaker_event"] == "recovered"


# -- LoggingListener: a shadow breaker's would-reject lines ----------------------------------------


def test_would_reject_lines_come_at_most_once_a_second_counting_the_calls_between() -> None:
    # GIVEN a shadow breaker's listener on a clock moved by hand
    clock, log = FakeClock(), Log()
    listener = LoggingListener(log, clock=clock)
    # WHEN 1 call, then 3 more within the second, then one a second later would be rejected
    listener.on_would_reject(NAME, State.OPEN, 5.0)
    for _ in range(3):
        clock.advance(0.2)
        listener.on_would_reject(NAME, State.OPEN, 5.0)
    clock.advance(WOULD_REJECT_LOG_INTERVAL_MS / 1000 - 0.6)
    listener.on_would_reject(NAME, State.OPEN, 5.0)
    # THEN two lines: the first call, then the four since
    assert [line.fields["count"] for line in log.lines] == [1, 4]
    assert all(line.level == logging.WARNING for line in log.lines)
    assert log.lines[1].text == (
        "circuit payment-api (shadow): would have rejected 4 call(s); breaker is open"
    )


def test_would_reject_lines_are_paced_per_breaker() -> None:
    clock, log = FakeClock(), Log()
    listener = LoggingListener(log, clock=clock)
    listener.on_would_reject(NAME, State.OPEN, 5.0)
    listener.on_would_reject("fx-rates", State.HALF_OPEN, 1.0)
    assert [line.fields["breaker"] for line in log.lines] == [NAME, "fx-rates"]
