"""The core stack's StoreMisconfiguredAlarm fires on what a misconfigured breaker emits.

Both sides of the seam: the alarm's Metrics Insights query is read from template.yaml and
evaluated here over the EMF documents a real breaker writes (fleetbreaker.metrics) on moto's
server, as CloudWatch would: a table that does not exist breaches it, an unreachable store
(weather) does not. A rename on either side (the metric, the dimension, the namespace
parameter) fails these tests.
"""

from __future__ import annotations

from typing import Any

import pytest

from devtools.sam_template import load_template
from fleetbreaker import BreakerConfig, CircuitBreaker, DynamoDBStore
from fleetbreaker.metrics import MetricsListener
from fleetbreaker.stores import from_env
from tests.observability.emf import data, emf_documents
from tests.sam.cloudwatch_queries import alarm_selection, datapoint, flushed_points
from tests.sam.cloudwatch_queries import breaches as alarm_breaches
from tests.support import Dependency, FakeClock

NAMESPACE = "Payments/Breakers"  # any value of the MetricsNamespace parameter


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


@pytest.fixture(scope="module")
def alarm(template: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = template["Resources"]["StoreMisconfiguredAlarm"]
    return found


def evaluate(alarm: dict[str, Any], output: str, namespace: str) -> float:
    """The query's value over the EMF documents in ``output``: SCHEMA selects the metrics of
    exactly those dimensions in that namespace, SUM adds their values."""
    return datapoint(alarm_selection(alarm["Properties"]), flushed_points(output), namespace)


def breaches(alarm: dict[str, Any], value: float) -> bool:
    return alarm_breaches(alarm["Properties"], [value])


def run_calls(store: Any, capsys: pytest.CaptureFixture[str]) -> str:
    """Three calls through a breaker on ``store`` with the metrics listener, then a flush (as
    @log_metrics does at the end of an invocation); what it printed."""
    metrics = MetricsListener(namespace=NAMESPACE, service="orders")
    clock = FakeClock()
    breaker = CircuitBreaker(
        "payment-api",
        store=store,
        config=BreakerConfig(store_backoff_seconds=0),
        clock=clock,
        listeners=[metrics],
    )
    for _ in range(3):
        assert breaker.call(Dependency()) == "ok"
        clock.advance(breaker.config.cache_ttl)
    capsys.readouterr()
    metrics.flush()
    return capsys.readouterr().out


def test_the_alarm_is_part_of_the_core(alarm: dict[str, Any]) -> None:
    # Functions of any stack attach the layer: the alarm exists without the example.
    assert "Condition" not in alarm
    properties = alarm["Properties"]
    assert (properties["EvaluationPeriods"], properties["DatapointsToAlarm"]) == (1, 1)
    assert properties["TreatMissingData"] == "notBreaching"
    expected = {
        "Fn::If": ["AlarmNotifiesTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]
    }
    assert properties["AlarmActions"] == properties["OKActions"] == expected


def test_the_query_reads_the_namespace_the_functions_write(
    template: dict[str, Any], alarm: dict[str, Any]
) -> None:
    parameter = alarm_selection(alarm["Properties"]).namespace
    environment = template["Resources"]["PaymentFunction"]["Properties"]["Environment"]
    assert environment["Variables"]["POWERTOOLS_METRICS_NAMESPACE"] == {"Ref": parameter}


def test_a_missing_table_breaches_the_alarm(
    alarm: dict[str, Any], moto_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a function's breaker whose CIRCUIT_BREAKER_TABLE names no table
    store = from_env({"CIRCUIT_BREAKER_TABLE": "NoSuchBreakers"}, endpoint_url=moto_server)

    # WHEN it takes three calls and its metrics are flushed
    output = run_calls(store, capsys)

    # THEN the alarm's query, over what it wrote, counts the three and breaches
    value = evaluate(alarm, output, NAMESPACE)
    assert value == 3
    assert breaches(alarm, value)


def test_an_unreachable_store_does_not(
    alarm: dict[str, Any], refused_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a breaker whose store refuses connections (weather: counted as StoreError only)
    store = DynamoDBStore("CircuitBreakers", endpoint_url=f"http://127.0.0.1:{refused_port}")

    output = run_calls(store, capsys)

    # THEN it wrote store errors, and the alarm's query sees none of them
    assert any(point.name == "StoreError" for point in data(emf_documents(output)))
    assert not breaches(alarm, evaluate(alarm, output, NAMESPACE))
