"""Structured logs: transitions, degraded mode and store errors; nothing per healthy call."""

from __future__ import annotations

import io
import json
import logging
import uuid
from typing import Any

import pytest

from fleetbreaker import LoggingListener

from .support import Boom, BreakerFactory, FlakyStore, fail, succeed


def fleetbreaker_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "fleetbreaker"]


def test_healthy_calls_log_nothing_at_info(
    make_breaker: BreakerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fleetbreaker")
    breaker = make_breaker(listeners=[LoggingListener()])
    for _ in range(1000):
        breaker.call(succeed)
    assert fleetbreaker_records(caplog) == []


def trip_logged(
    make_breaker: BreakerFactory, caplog: pytest.LogCaptureFixture
) -> logging.LogRecord:
    """The one log record of a logging breaker whose failures reach the threshold."""
    caplog.set_level(logging.INFO, logger="fleetbreaker")
    breaker = make_breaker(listeners=[LoggingListener()])
    for _ in range(3):
        with pytest.raises(Boom):
            breaker.call(fail)
    (record,) = fleetbreaker_records(caplog)
    return record


def test_transition_record_has_structured_fields(
    make_breaker: BreakerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    record = trip_logged(make_breaker, caplog)
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "circuit payment-api: closed -> open"
    fields: dict[str, Any] = record.__dict__
    assert fields["breaker"] == "payment-api"
    assert fields["breaker_event"] == "transition"
    assert (fields["from_state"], fields["to_state"]) == ("closed", "open")


def test_transition_record_says_why_and_which_generation(
    make_breaker: BreakerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a breaker that logs, WHEN its failures reach the threshold
    record = trip_logged(make_breaker, caplog)

    # THEN the transition's log record carries the trip reason and the new generation
    fields: dict[str, Any] = record.__dict__
    assert (fields["reason"], fields["generation"]) == ("failure_threshold", 1)


def test_store_error_and_degraded_mode_are_warnings_with_fields(
    make_breaker: BreakerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fleetbreaker")
    store = FlakyStore()
    store.down = True
    breaker = make_breaker(listeners=[LoggingListener()], store=store)
    breaker.call(succeed)
    error, degraded = fleetbreaker_records(caplog)
    assert (error.levelno, degraded.levelno) == (logging.WARNING, logging.WARNING)
    assert error.__dict__["breaker_event"] == "store_error"
    assert error.__dict__["operation"] == "load"
    assert error.__dict__["error_type"] == "StoreError"
    assert degraded.__dict__["breaker_event"] == "degraded"


def test_powertools_logger_writes_the_fields_as_top_level_json(
    make_breaker: BreakerFactory,
) -> None:
    # GIVEN the user's Powertools Logger (a fresh service name: Powertools configures a
    # logging.Logger per service once per process)
    from aws_lambda_powertools import Logger

    stream = io.StringIO()
    service = f"payment-{uuid.uuid4().hex[:8]}"
    logger = Logger(service=service, stream=stream)
    breaker = make_breaker(listeners=[LoggingListener(logger)])
    # WHEN the breaker opens
    for _ in range(3):
        with pytest.raises(Boom):
            breaker.call(fail)
    # THEN each line is JSON with Powertools' keys and ours side by side
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    (transition,) = lines
    assert transition["service"] == service
    assert transition["level"] == "WARNING"
    assert transition["message"] == "circuit payment-api: closed -> open"
    assert transition["breaker"] == "payment-api"
    assert transition["breaker_event"] == "transition"
    assert transition["to_state"] == "open"
