"""The template's CloudWatch queries, read as CloudWatch reads them, over EMF a breaker wrote.

One side of the seam between template.yaml (its alarms' Metrics Insights queries and its
dashboard's SEARCH expressions) and fleetbreaker.metrics (the EMF documents it writes). A query
here selects what CloudWatch would: the metric's name in the namespace, with exactly the
dimension set ``SCHEMA(...)`` or ``{namespace,dimension,...}`` names (SCHEMA and SEARCH's
schema both match a metric only when its dimension keys are exactly those). Only the shapes
the template uses are parsed; any other shape fails the parse, by name, rather than being
read loosely.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.observability.emf import Datum, data, emf_documents

# SELECT <stat>(<metric>) FROM SCHEMA("<namespace>", <dimension>, ...), the namespace as
# template.yaml writes it (${<parameter>}) or as the stack resolved it
INSIGHTS_QUERY = re.compile(
    r"SELECT (?P<stat>[A-Z]+)\((?P<metric>\w+)\) FROM SCHEMA\("
    r'"(?:\$\{(?P<parameter>\w+)\}|(?P<namespace>[^"$]+))", (?P<dimensions>[\w, ]+)\)'
)
# SEARCH('{<namespace>,<dimension>,...} MetricName="<metric>"', '<stat>', <period>)
SEARCH_EXPRESSION = re.compile(
    r"SEARCH\('\{(?P<namespace>[^,}]+),(?P<dimensions>[\w,]+)\} "
    r"MetricName=\"(?P<metric>\w+)\"', '(?P<stat>\w+)', (?P<period>\d+)\)"
)


@dataclass(frozen=True)
class Selection:
    """What one query selects: a metric, in a namespace, with exactly these dimension keys."""

    namespace: str  # the namespace as written: a parameter's name, or its value
    metric: str
    dimensions: frozenset[str]
    stat: str
    period: int

    def matches(self, point: Datum, namespace: str) -> bool:
        return (
            point.namespace == namespace
            and point.name == self.metric
            and {key for key, _ in point.dimensions} == self.dimensions
        )


def _keys(text: str) -> frozenset[str]:
    return frozenset(key.strip() for key in text.split(","))


def alarm_selection(alarm: Mapping[str, Any]) -> Selection:
    """The one Metrics Insights query of an ``AWS::CloudWatch::Alarm`` (its Properties), as
    template.yaml writes it (``!Sub`` of the namespace parameter: ``namespace`` is the
    parameter's name) or as deployed (``namespace`` is the namespace)."""
    (query,) = alarm["Metrics"]
    assert query["ReturnData"] is True, query
    expression = query["Expression"]
    text = expression["Fn::Sub"] if isinstance(expression, dict) else expression
    matched = INSIGHTS_QUERY.fullmatch(text.strip())
    assert matched is not None, f"not a query these tests can read: {text!r}"
    return Selection(
        matched["parameter"] or matched["namespace"],
        matched["metric"],
        _keys(matched["dimensions"]),
        matched["stat"],
        int(query["Period"]),
    )


def search_selection(expression: str) -> Selection:
    """The selection of one dashboard SEARCH expression."""
    matched = SEARCH_EXPRESSION.fullmatch(expression)
    assert matched is not None, f"not a SEARCH these tests can read: {expression!r}"
    return Selection(
        matched["namespace"],
        matched["metric"],
        _keys(matched["dimensions"]),
        matched["stat"],
        int(matched["period"]),
    )


def datapoint(selection: Selection, points: Iterable[Datum], namespace: str) -> float:
    """SUM of the selected metric over ``points`` (one period's data), as the alarm reads it."""
    assert selection.stat == "SUM", selection
    return sum(point.total for point in points if selection.matches(point, namespace))


def flushed_points(output: str) -> list[Datum]:
    """Every metric of every EMF document in captured stdout (each document validated)."""
    return data(emf_documents(output))


def breaches(alarm: Mapping[str, Any], datapoints: Sequence[float]) -> bool:
    """Whether the alarm goes to ALARM on these datapoints (one per period, oldest first):
    DatapointsToAlarm of the last EvaluationPeriods breach the threshold. Periods with no data
    count as not breaching (the template's TreatMissingData)."""
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["TreatMissingData"] == "notBreaching"
    periods, needed = int(alarm["EvaluationPeriods"]), int(alarm["DatapointsToAlarm"])
    window = list(datapoints)[-periods:]
    return sum(value > float(alarm["Threshold"]) for value in window) >= needed
