"""Metrics are gathered per invocation and written once, at the flush."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleetbreaker import CircuitOpenError
from fleetbreaker.metrics import MetricsListener

from .emf import data, emf_documents
from .support import Boom, BreakerFactory, FakeClock, fail, succeed


def document_keys(output: str) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """(namespace, dimension values) of every document, in output order."""
    keys = []
    for doc in emf_documents(output):
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            for dimension_set in directive["Dimensions"]:
                dims = tuple(sorted((key, doc[key]) for key in dimension_set))
                keys.append((directive["Namespace"], dims))
    return keys


def test_a_thousand_healthy_calls_write_nothing_until_the_flush(
    make_breaker: BreakerFactory, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a breaker with the metrics listener
    metrics = MetricsListener()
    breaker = make_breaker(listeners=[metrics])
    # WHEN a thousand healthy calls run, a few milliseconds apart (the cache expires twice)
    for _ in range(1000):
        assert breaker.call(succeed) == "ok"
        clock.advance(0.002)
    # THEN nothing was written
    assert capsys.readouterr().out == ""
    # WHEN the invocation ends
    written = metrics.flush()
    # THEN one document holds the breaker's store latencies, and nothing else was counted
    out = capsys.readouterr().out
    docs = emf_documents(out)
    assert written == len(docs) == len(out.splitlines()) == 1
    (latency,) = data(docs)
    assert latency.name == "StoreLatency"
    assert 1 <= len(latency.values) <= 3


def test_one_flush_writes_one_document_per_namespace_and_dimension_set(
    make_breaker: BreakerFactory, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN two breakers sharing one listener: one healthy, one that trips and rejects
    metrics = MetricsListener()
    healthy = make_breaker("inventory", listeners=[metrics])
    tripping = make_breaker("payment-api", listeners=[metrics])
    for _ in range(1000):
        healthy.call(succeed)
    for _ in range(3):
        with pytest.raises(Boom):
            tripping.call(fail)
    for _ in range(500):
        with pytest.raises(CircuitOpenError):
            tripping.call(succeed)
    assert capsys.readouterr().out == ""
    # WHEN flushed once
    written = metrics.flush()
    keys = document_keys(capsys.readouterr().out)
    # THEN each (namespace, dimension set) has exactly one document
    assert len(keys) == len(set(keys)) == written
    assert set(keys) == {
        ("FleetBreaker", (("Breaker", "inventory"), ("service", "service_undefined"))),
        ("FleetBreaker", (("Breaker", "payment-api"), ("service", "service_undefined"))),
        (
            "FleetBreaker",
            (("Breaker", "payment-api"), ("To", "open"), ("service", "service_undefined")),
        ),
        (
            "FleetBreaker",
            (
                ("Breaker", "payment-api"),
                ("Reason", "failure_threshold"),
                ("service", "service_undefined"),
            ),
        ),
    }


def test_rejections_are_summed_into_one_value(
    make_breaker: BreakerFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = MetricsListener()
    breaker = make_breaker(listeners=[metrics])
    breaker.force_open()
    for _ in range(500):
        with pytest.raises(CircuitOpenError):
            breaker.call(succeed)
    metrics.flush()
    (rejected,) = [p for p in data(emf_documents(capsys.readouterr().out)) if p.name == "Rejected"]
    assert rejected.values == (500,)


def test_a_second_flush_writes_nothing_new(
    make_breaker: BreakerFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = MetricsListener()
    breaker = make_breaker(listeners=[metrics])
    breaker.call(succeed)
    assert metrics.flush() == 1
    capsys.readouterr()
    assert metrics.flush() == 0
    assert capsys.readouterr().out == ""


def test_a_hundred_store_latencies_are_written_without_waiting_for_the_flush(
    make_breaker: BreakerFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN no cache, so every call reads the store
    metrics = MetricsListener()
    breaker = make_breaker(listeners=[metrics], cache_ttl=0)
    # WHEN 99 calls run, nothing is written; the 100th sample fills an EMF value array
    for _ in range(99):
        breaker.call(succeed)
    assert capsys.readouterr().out == ""
    breaker.call(succeed)
    # THEN exactly one valid document with 100 samples is written, and memory is bounded
    (latency,) = data(emf_documents(capsys.readouterr().out))
    assert len(latency.values) == 100
    assert metrics.pending_documents == 0


def test_log_metrics_flushes_when_the_handler_returns_or_raises(
    make_breaker: BreakerFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = MetricsListener()
    breaker = make_breaker(listeners=[metrics], failure_threshold=1)

    @metrics.log_metrics
    def handler(event: dict[str, Any], context: object) -> str:
        return breaker.call(fail if event.get("fail") else succeed)

    assert handler({}, None) == "ok"
    assert len(emf_documents(capsys.readouterr().out)) == 1
    with pytest.raises(Boom):
        handler({"fail": True}, None)
    names = {p.name for p in data(emf_documents(capsys.readouterr().out))}
    assert {"FailureRecorded", "Transition"} <= names


def test_log_metrics_with_parentheses(capsys: pytest.CaptureFixture[str]) -> None:
    metrics = MetricsListener()

    @metrics.log_metrics()
    def handler() -> int:
        metrics.on_degraded("payment-api", "test")
        return 1

    assert handler() == 1
    assert len(emf_documents(capsys.readouterr().out)) == 1


@pytest.mark.parametrize("ours_outside", [True, False])
def test_works_beside_the_users_powertools_metrics(
    make_breaker: BreakerFactory, capsys: pytest.CaptureFixture[str], ours_outside: bool
) -> None:
    # GIVEN a handler that also uses Powertools Metrics, with its own dimension
    from aws_lambda_powertools import Metrics

    user_metrics = Metrics(namespace="Shop", service="payment")
    ours = MetricsListener()
    breaker = make_breaker(listeners=[ours], failure_threshold=1)

    def handler(event: dict[str, Any], context: object) -> str:
        user_metrics.add_dimension(name="tenant", value="acme")
        user_metrics.add_metric(name="Orders", unit="Count", value=1)
        with pytest.raises(Boom):
            breaker.call(fail)
        return "done"

    if ours_outside:
        decorated = ours.log_metrics(user_metrics.log_metrics(handler))
    else:
        decorated = user_metrics.log_metrics(ours.log_metrics(handler))
    try:
        # WHEN the handler runs
        assert decorated({}, None) == "done"
    finally:
        user_metrics.clear_metrics()
        user_metrics.clear_default_dimensions()
    # THEN the user's document has only the user's metrics and dimensions, ours only ours
    docs = emf_documents(capsys.readouterr().out)
    users = [d for d in docs if "Orders" in d]
    breakers = [d for d in docs if "Breaker" in d]
    assert len(users) == 1
    assert "Breaker" not in users[0]
    assert "FailureRecorded" not in users[0]
    assert users[0]["tenant"] == "acme"
    assert breakers
    assert all("tenant" not in d and "Orders" not in d for d in breakers)


def test_powertools_metrics_disabled_writes_nothing_and_keeps_nothing(
    make_breaker: BreakerFactory,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    metrics = MetricsListener()
    breaker = make_breaker(listeners=[metrics])
    breaker.call(succeed)
    metrics.flush()
    assert capsys.readouterr().out == ""
    assert metrics.pending_documents == 0


def test_a_failing_flush_does_not_raise(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN pending metrics and a serializer that breaks
    metrics = MetricsListener()
    metrics.on_rejected("payment-api", None, 1.0)  # type: ignore[arg-type]

    def broken(**kwargs: object) -> object:
        raise RuntimeError("serializer broke")

    metrics._provider_class = broken  # type: ignore[assignment]
    # WHEN flushed THEN nothing raises and nothing half-written appears
    assert metrics.flush() == 0
    assert capsys.readouterr().out == ""


def test_emf_lines_are_compact_single_line_json(
    make_breaker: BreakerFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = MetricsListener()
    make_breaker(listeners=[metrics]).call(succeed)
    metrics.flush()
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["Breaker"] == "payment-api"
