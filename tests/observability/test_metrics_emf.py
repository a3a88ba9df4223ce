"""EMF written by a real breaker lifecycle, checked against the specification's rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fleetbreaker import CircuitOpenError
from fleetbreaker.metrics import MetricsListener

from .emf import Datum, EMFViolation, data, emf_documents, validate_emf
from .support import Boom, BreakerFactory, FakeClock, FlakyStore, fail, succeed

# The contract users and alarms depend on: exact names and units.
UNITS = {
    "Transition": "Count",
    "Trip": "Count",
    "Rejected": "Count",
    "Fallback": "Count",
    "FailureRecorded": "Count",
    "ProbeSucceeded": "Count",
    "ProbeFailed": "Count",
    "StoreError": "Count",
    "Degraded": "Count",
    "StoreLatency": "Milliseconds",
}
SERVICE = "service_undefined"


def attempt(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except (Boom, CircuitOpenError) as exc:
        return exc


def run_lifecycle(make_breaker: BreakerFactory, clock: FakeClock, metrics: MetricsListener) -> None:
    """closed -> open (3 failures) -> rejections -> failed probe -> successful probe -> closed,
    plus a second breaker whose store is down."""
    breaker = make_breaker("payment-api", listeners=[metrics])
    for _ in range(3):
        attempt(lambda: breaker.call(fail))
    attempt(lambda: breaker.call(succeed))  # rejected, raises
    breaker(fallback=lambda circuit: "cached")(succeed)()  # rejected, fallback answers
    clock.advance(11)
    attempt(lambda: breaker.call(fail))  # probe fails: reopens for 20 s (backoff 2)
    clock.advance(21)
    assert breaker.call(succeed) == "ok"  # probe succeeds: closed
    assert breaker.call(succeed) == "ok"

    store = FlakyStore()
    store.down = True
    ledger = make_breaker("ledger", listeners=[metrics], store=store)
    assert ledger.call(succeed) == "ok"  # store error, degraded, still allowed


def metric(points: list[Datum], name: str, **dimensions: str) -> Datum:
    wanted = tuple(sorted({"service": SERVICE, **dimensions}.items()))
    matches = [p for p in points if p.name == name and p.dimensions == wanted]
    assert len(matches) == 1, f"{name} {wanted}: {matches}"
    return matches[0]


@pytest.fixture
def lifecycle_output(
    make_breaker: BreakerFactory, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> str:
    metrics = MetricsListener()
    run_lifecycle(make_breaker, clock, metrics)
    assert capsys.readouterr().out == "", "nothing is written before the flush"
    metrics.flush()
    return capsys.readouterr().out


def test_every_line_is_a_valid_emf_document(lifecycle_output: str) -> None:
    # GIVEN the output of a flush after a full lifecycle
    lines = [line for line in lifecycle_output.splitlines() if line.strip()]
    # THEN every line is an EMF document that passes every rule of the specification
    assert lines
    docs = emf_documents(lifecycle_output)
    assert len(docs) == len(lines)
    for doc in docs:
        assert isinstance(doc["_aws"]["Timestamp"], int)
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            for dimension_set in directive["Dimensions"]:
                assert len(dimension_set) <= 30
                assert all(key in doc for key in dimension_set)
            assert all(m["Name"] in doc for m in directive["Metrics"])


def test_metric_names_units_and_dimensions_are_exact(lifecycle_output: str) -> None:
    points = data(emf_documents(lifecycle_output))
    # THEN only the documented names appear, each with its documented unit
    assert {p.name for p in points} == set(UNITS)
    for point in points:
        assert point.unit == UNITS[point.name], point
        assert point.namespace == "FleetBreaker"
    # AND every metric has exactly the dimensions Breaker and service (+ To for Transition,
    # + Reason for Trip)
    extra = {"Transition": {"To"}, "Trip": {"Reason"}}
    for point in points:
        keys = {key for key, _ in point.dimensions}
        assert keys == {"Breaker", "service"} | extra.get(point.name, set()), point


def test_counts_match_the_lifecycle(lifecycle_output: str) -> None:
    points = data(emf_documents(lifecycle_output))
    assert metric(points, "FailureRecorded", Breaker="payment-api").total == 3
    assert metric(points, "Rejected", Breaker="payment-api").total == 2
    assert metric(points, "Fallback", Breaker="payment-api").total == 1
    assert metric(points, "ProbeFailed", Breaker="payment-api").total == 1
    assert metric(points, "ProbeSucceeded", Breaker="payment-api").total == 1
    # closed->open, half_open->open; open->half_open twice; half_open->closed
    assert metric(points, "Transition", Breaker="payment-api", To="open").total == 2
    assert metric(points, "Transition", Breaker="payment-api", To="half_open").total == 2
    assert metric(points, "Transition", Breaker="payment-api", To="closed").total == 1
    # AND each trip says why: the threshold first, then the failed probe
    assert metric(points, "Trip", Breaker="payment-api", Reason="failure_threshold").total == 1
    assert metric(points, "Trip", Breaker="payment-api", Reason="probe_failed").total == 1
    assert metric(points, "StoreError", Breaker="ledger").total == 1
    assert metric(points, "Degraded", Breaker="ledger").total == 1


def test_store_latency_keeps_one_sample_per_store_call(lifecycle_output: str) -> None:
    points = data(emf_documents(lifecycle_output))
    latency = metric(points, "StoreLatency", Breaker="payment-api")
    # load, 3x record_failure, then per probe: load, claim_probe, settle_probe
    assert len(latency.values) == 1 + 3 + 3 + 3
    assert all(v >= 0 for v in latency.values)
    assert len(metric(points, "StoreLatency", Breaker="ledger").values) == 1


def test_namespace_and_service_come_from_powertools_environment(
    make_breaker: BreakerFactory,
    clock: FakeClock,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN the Powertools variables a SAM template sets
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Shop")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "payment")
    metrics = MetricsListener()
    # WHEN a breaker opens and the metrics are flushed
    breaker = make_breaker(listeners=[metrics])
    for _ in range(3):
        attempt(lambda: breaker.call(fail))
    metrics.flush()
    # THEN the documents use that namespace and service
    points = data(emf_documents(capsys.readouterr().out))
    assert {p.namespace for p in points} == {"Shop"}
    assert {dict(p.dimensions)["service"] for p in points} == {"payment"}


def test_explicit_namespace_and_service_win_over_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Shop")
    metrics = MetricsListener(namespace="Other", service="checkout")
    assert (metrics.namespace, metrics.service) == ("Other", "checkout")


@pytest.mark.parametrize(
    ("doc", "rule"),
    [
        ({"_aws": {"CloudWatchMetrics": []}}, "Timestamp"),
        ({"_aws": {"Timestamp": 1.7e12, "CloudWatchMetrics": []}}, "integer"),
        (
            {
                "_aws": {
                    "Timestamp": 1_700_000_000_000,
                    "CloudWatchMetrics": [
                        {"Namespace": "N", "Dimensions": [["Breaker"]], "Metrics": [{"Name": "X"}]}
                    ],
                },
                "X": 1,
            },
            "root node",
        ),
        (
            {
                "_aws": {
                    "Timestamp": 1_700_000_000_000,
                    "CloudWatchMetrics": [
                        {
                            "Namespace": "N",
                            "Dimensions": [[f"d{i}" for i in range(31)]],
                            "Metrics": [{"Name": "X"}],
                        }
                    ],
                },
                "X": 1,
                **{f"d{i}": "v" for i in range(31)},
            },
            "30 dimension keys",
        ),
        (
            {
                "_aws": {
                    "Timestamp": 1_700_000_000_000,
                    "CloudWatchMetrics": [
                        {"Namespace": "N", "Dimensions": [[]], "Metrics": [{"Name": "X"}]}
                    ],
                },
                "X": "1",
            },
            "number",
        ),
    ],
)
def test_the_validator_rejects_documents_that_break_the_rules(
    doc: dict[str, Any], rule: str
) -> None:
    # The checks above are only as good as the validator: it must catch each broken rule.
    with pytest.raises(EMFViolation, match=rule):
        validate_emf(doc)


def test_rate_policy_reports_the_fleet_window_as_percent_rates(
    make_breaker: BreakerFactory, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a rate-policy breaker whose window holds 3 failures in 10 calls, one of them slow
    metrics = MetricsListener()
    breaker = make_breaker(
        listeners=[metrics],
        failure_rate_threshold=0.9,
        minimum_calls=100,
        slow_call_duration=1.0,
    )
    for _ in range(6):
        breaker.call(succeed)
    breaker.call(lambda: clock.advance(1.5))
    for _ in range(3):
        attempt(lambda: breaker.call(fail))
    clock.advance(1.0)
    breaker.call(succeed)  # the report of the 10 calls before it
    # WHEN the invocation's metrics are flushed
    metrics.flush()
    points = data(emf_documents(capsys.readouterr().out))
    # THEN the window's rates are there, in percent, with the usual dimensions
    assert metric(points, "FailureRate", Breaker="payment-api").values == (30.0,)
    assert metric(points, "SlowCallRate", Breaker="payment-api").values == (10.0,)
    assert metric(points, "FailureRate", Breaker="payment-api").unit == "Percent"
