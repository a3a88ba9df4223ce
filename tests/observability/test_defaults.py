"""default_listeners(): one call wires logs, metrics and tracing."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from fleetbreaker import CircuitBreaker, LoggingListener, MemoryStore
from fleetbreaker.metrics import MetricsListener
from fleetbreaker.observability import default_listeners, default_metrics, log_metrics
from fleetbreaker.tracing import TracingListener

from .emf import data, emf_documents


def test_default_listeners_log_count_and_trace() -> None:
    listeners = default_listeners()
    kinds = [type(listener) for listener in listeners]
    assert kinds == [LoggingListener, MetricsListener, TracingListener]
    # every breaker shares the one process-wide metrics listener that log_metrics flushes
    assert listeners[1] is default_metrics()
    assert default_listeners()[1] is listeners[1]


def test_the_users_logger_is_used() -> None:
    mine = logging.getLogger("mine")
    (logging_listener, *_) = default_listeners(mine)
    assert isinstance(logging_listener, LoggingListener)
    assert logging_listener.log is mine


def test_metrics_and_tracing_can_be_left_out() -> None:
    listeners = default_listeners(metrics=False, tracing=False)
    assert [type(listener) for listener in listeners] == [LoggingListener]


def test_module_level_log_metrics_flushes_every_breaker(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN two breakers built with the defaults
    first = CircuitBreaker("payment-api", store=MemoryStore(), listeners=default_listeners())
    second = CircuitBreaker("ledger", store=MemoryStore(), listeners=default_listeners())
    default_metrics().flush()
    capsys.readouterr()

    @log_metrics
    def handler(event: dict[str, Any], context: object) -> str:
        first.force_open()
        second.force_open()
        return "done"

    # WHEN the decorated handler runs
    assert handler({}, None) == "done"
    # THEN both breakers' transitions were written at its end
    points = data(emf_documents(capsys.readouterr().out))
    assert {dict(p.dimensions)["Breaker"] for p in points if p.name == "Transition"} == {
        "payment-api",
        "ledger",
    }
