"""The dashboard and the alarm watch the metrics the package really emits."""

from __future__ import annotations

import json
import re
from typing import Any

from devtools.sam_template import load_template

EMITTED = {
    "Transition",
    "Rejected",
    "Fallback",
    "FailureRecorded",
    "ProbeSucceeded",
    "ProbeFailed",
    "StoreError",
    "Degraded",
    "StoreLatency",
    "FailureRate",
    "SlowCallRate",
}


def _dashboard_body(template: dict[str, Any]) -> dict[str, Any]:
    body, variables = template["Resources"]["BreakerDashboard"]["Properties"]["DashboardBody"][
        "Fn::Sub"
    ]
    values = {**dict.fromkeys(variables, "NS"), "AlarmArn": "arn:alarm", "AWS::Region": "eu-west-1"}
    rendered = re.sub(r"\$\{([^}!]+)\}", lambda m: values.get(m.group(1), m.group(0)), body)
    parsed: dict[str, Any] = json.loads(rendered)
    return parsed


def test_dashboard_body_is_json_and_plots_every_emitted_metric() -> None:
    body = _dashboard_body(load_template())

    expressions = [
        item["expression"]
        for widget in body["widgets"]
        for row in widget["properties"].get("metrics", [])
        for item in row
    ]
    plotted = {m for e in expressions for m in re.findall(r'MetricName="(\w+)"', e)}
    assert plotted == EMITTED
    assert any(w["type"] == "alarm" for w in body["widgets"])


def test_alarm_watches_rejections_of_the_configured_breaker_and_service() -> None:
    template = load_template()
    alarm = template["Resources"]["BreakerOpenAlarm"]["Properties"]
    env = template["Resources"]["PaymentFunction"]["Properties"]["Environment"]["Variables"]

    dimensions = {d["Name"]: d["Value"] for d in alarm["Dimensions"]}
    assert alarm["MetricName"] == "Rejected"
    assert alarm["Namespace"] == env["POWERTOOLS_METRICS_NAMESPACE"]
    assert dimensions == {
        "Breaker": env["BREAKER_NAME"],
        "service": env["POWERTOOLS_SERVICE_NAME"],
    }
    assert alarm["EvaluationPeriods"] == {"Ref": "BreakerOpenAlarmMinutes"}
    assert template["Parameters"]["BreakerOpenAlarmMinutes"]["Default"] == 5
