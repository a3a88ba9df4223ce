"""The core stack's dashboard plots exactly what fleetbreaker.metrics writes.

Both sides of the seam: the EMF documents a MetricsListener writes when every one of its hooks
fires (each metric in the dimension set it is written with), and the dashboard's SEARCH
expressions read from template.yaml. A SEARCH schema matches a metric only with exactly its
dimension keys, so a renamed metric or dimension on either side, a dimension added or dropped,
or a new metric left off the dashboard fails here.
"""

from __future__ import annotations

import inspect
import json
import re
from typing import Any

import pytest

from devtools.sam_template import load_template
from fleetbreaker import metrics as metrics_module
from fleetbreaker.errors import StoreMisconfiguredError
from fleetbreaker.events import BreakerListener, StateChange
from fleetbreaker.metrics import DEFAULT_NAMESPACE, MetricsListener
from fleetbreaker.record import State, TransitionReason
from tests.sam.cloudwatch_queries import flushed_points, search_selection

NAMESPACE = "Payments/Breakers"
# What the dashboard's widget names for the alarms: every alarm of the core stack.
CORE_ALARMS = {"BreakerOpenedAlarm", "BreakerOpenTooLongAlarm", "StoreMisconfiguredAlarm"}

Written = set[tuple[str, frozenset[str]]]  # (metric, dimension keys)


def fire_every_hook(listener: MetricsListener) -> set[str]:
    """Call each hook MetricsListener implements once; the names of the hooks called."""
    misconfigured = StoreMisconfiguredError("no such table", problem="table_not_found")
    calls: dict[str, tuple[Any, ...]] = {
        "on_state_change": (
            StateChange(State.CLOSED, State.OPEN, 2, TransitionReason.FAILURE_THRESHOLD),
        ),
        "on_rejected": (State.OPEN, 30.0),
        "on_would_reject": (State.OPEN, 30.0),
        "on_fallback": (State.OPEN,),
        "on_failure_recorded": (State.CLOSED,),
        "on_probe": (False, True),
        "on_store_error": ("load", ConnectionError("refused")),
        "on_store_misconfigured": ("load", misconfigured),
        "on_degraded": ("store unreachable",),
        "on_window": (20, 0.5, 0.25),
        "on_store_call": ("load", 4.2, True),
    }
    for hook, arguments in calls.items():
        getattr(listener, hook)("payment-api", *arguments)
    listener.on_probe("payment-api", True, True)  # the other of ProbeSucceeded / ProbeFailed
    return set(calls)


@pytest.fixture
def written(capsys: pytest.CaptureFixture[str]) -> Written:
    """Every (metric, dimension keys) the layer writes, from its own EMF output."""
    listener = MetricsListener(namespace=NAMESPACE, service="orders")
    called = fire_every_hook(listener)
    capsys.readouterr()
    listener.flush()
    overridden = {
        name
        for name, member in inspect.getmembers(MetricsListener, inspect.isfunction)
        if name.startswith("on_") and member is not getattr(BreakerListener, name, None)
    }
    # A hook added to MetricsListener is fired here too (or this fixture is out of date).
    assert called == overridden
    points = flushed_points(capsys.readouterr().out)
    assert {point.namespace for point in points} == {NAMESPACE}
    return {(point.name, frozenset(key for key, _ in point.dimensions)) for point in points}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def dashboard(template: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The body (parsed, ``${...}`` left for the variables named) and the Sub's variables."""
    body, variables = template["Resources"]["BreakerDashboard"]["Properties"]["DashboardBody"][
        "Fn::Sub"
    ]
    values = {name: f"<{name}>" for name in variables} | {"AWS::Region": "eu-west-1"}
    rendered = re.sub(r"\$\{([^}!]+)\}", lambda m: values.get(m.group(1), m.group(0)), body)
    assert "${" not in rendered, "a variable the Sub does not define"
    parsed: dict[str, Any] = json.loads(rendered)
    return parsed, variables


def searches(body: dict[str, Any]) -> list[str]:
    return [
        item["expression"]
        for widget in body["widgets"]
        for row in widget["properties"].get("metrics", [])
        for item in row
    ]


def plotted(template: dict[str, Any]) -> Written:
    body, _ = dashboard(template)
    return {(s.metric, s.dimensions) for s in map(search_selection, searches(body))}


def test_the_dashboard_is_part_of_the_core(template: dict[str, Any]) -> None:
    # GIVEN DeployExample=false WHEN the dashboard is read THEN it exists unconditionally
    resource = template["Resources"]["BreakerDashboard"]
    assert resource["Type"] == "AWS::CloudWatch::Dashboard"
    assert "Condition" not in resource
    # AND none of its variables names an example resource
    _, variables = dashboard(template)
    example = {name for name, r in template["Resources"].items() if r.get("Condition") is not None}
    assert not set(re.findall(r"[A-Za-z]+", json.dumps(variables))) & example


def test_every_search_selects_a_metric_the_layer_writes(
    template: dict[str, Any], written: Written
) -> None:
    # GIVEN the dashboard's SEARCH expressions WHEN each is read as CloudWatch reads it
    # THEN it selects a metric in a dimension set the layer really writes
    assert plotted(template) - written == set()


def test_every_metric_the_layer_writes_is_plotted(
    template: dict[str, Any], written: Written
) -> None:
    assert written - plotted(template) == set()
    # AND every metric name metrics.py declares is among them
    declared = {
        value
        for name, value in vars(metrics_module).items()
        if name.isupper() and isinstance(value, str) and re.fullmatch(r"[A-Z][A-Za-z]+", value)
    } - {
        metrics_module.DEFAULT_NAMESPACE,
        metrics_module.MISCONFIGURATION,
        metrics_module.COUNT,
        metrics_module.MILLISECONDS,
        metrics_module.PERCENT,
    }
    assert declared == {metric for metric, _ in written}


def test_every_search_reads_the_namespace_parameter(template: dict[str, Any]) -> None:
    body, variables = dashboard(template)
    namespaces = {search_selection(e).namespace for e in searches(body)}
    assert namespaces == {"<Ns>"}
    assert variables["Ns"] == {"Ref": "MetricsNamespace"}
    assert template["Parameters"]["MetricsNamespace"]["Default"] == DEFAULT_NAMESPACE


def test_the_alarm_widget_shows_every_core_alarm(template: dict[str, Any]) -> None:
    body, variables = dashboard(template)
    [widget] = [w for w in body["widgets"] if w["type"] == "alarm"]
    shown = {
        variables[name.strip("<>")]["Fn::GetAtt"][0] for name in widget["properties"]["alarms"]
    }
    assert shown == CORE_ALARMS
    alarms = {n for n, r in template["Resources"].items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    assert alarms == CORE_ALARMS
