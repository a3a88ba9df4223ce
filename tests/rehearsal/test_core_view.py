"""The core stack's own view, as deployed: DeployExample=false on moto's CloudFormation.

The stack creates the dashboard; its alarms are made as CloudFormation makes them
(devtools.rehearsal.put_alarms: moto's CloudFormation has no alarms) and read back with
DescribeAlarms. Then a function of your own, the core's managed policy as its only permission
(moto enforcing it) and fleetbreaker's default metrics namespace, runs a breaker on the stack's
table that opens: the EMF it writes is what the deployed BreakerOpenedAlarm's query counts. And
with the example, the payment function as deployed (its own environment, namespace included)
trips its breaker: the EMF in its log breaches the same alarm.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from devtools.rehearsal import client, create_user, policy_document
from fleetbreaker import CircuitBreaker, DynamoDBStore
from fleetbreaker.metrics import DEFAULT_NAMESPACE, NAMESPACE_ENV, MetricsListener
from tests.rehearsal.conftest import STACK, Rehearsal, unique_key
from tests.rehearsal.support import on_fleet_breaker, payment
from tests.sam.cloudwatch_queries import (
    alarm_selection,
    breaches,
    datapoint,
    flushed_points,
    search_selection,
)
from tests.support import Dependency, trip

pytestmark = pytest.mark.rehearsal

CORE_ALARMS = {"BreakerOpenedAlarm", "BreakerOpenTooLongAlarm", "StoreMisconfiguredAlarm"}


def described_alarms(rehearsal: Rehearsal) -> dict[str, dict[str, Any]]:
    """{logical id: the alarm as DescribeAlarms returns it}."""
    cloudwatch = rehearsal.client("cloudwatch")
    names = list(rehearsal.alarms.values())
    found = cloudwatch.describe_alarms(AlarmNames=names)["MetricAlarms"]
    by_name = {alarm["AlarmName"]: alarm for alarm in found}
    return {logical_id: by_name[name] for logical_id, name in rehearsal.alarms.items()}


def own_function_credentials(rehearsal: Rehearsal) -> Any:
    """An IAM user holding the core's managed policy, as a role of your own would (Resource
    widened to "*": moto authorises actions against it, devtools.rehearsal says why)."""
    iam = rehearsal.client("iam")
    arn = rehearsal.resources["CircuitBreakersAccessPolicy"]
    version = iam.get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"]
    document = iam.get_policy_version(PolicyArn=arn, VersionId=version)["PolicyVersion"]
    statements = [
        {"Effect": s["Effect"], "Action": s["Action"], "Resource": "*"}
        for s in policy_document(document["Document"])["Statement"]
    ]
    return create_user(
        rehearsal.endpoint, f"own-{uuid.uuid4().hex[:8]}", statements, rehearsal.admin
    )


def test_the_core_alone_creates_the_dashboard(core_rehearsal: Rehearsal) -> None:
    # GIVEN the core stack WHEN its dashboard is read back from CloudWatch
    name = core_rehearsal.resources["BreakerDashboard"]
    answer = core_rehearsal.client("cloudwatch").get_dashboard(DashboardName=name)
    body = json.loads(answer["DashboardBody"])

    # THEN it is the stack's, and every graph searches the namespace the layer writes to
    assert name == f"{STACK}-circuit-breakers"
    expressions = [
        item["expression"]
        for widget in body["widgets"]
        for row in widget["properties"].get("metrics", [])
        for item in row
    ]
    assert expressions
    assert {search_selection(e).namespace for e in expressions} == {DEFAULT_NAMESPACE}


def test_the_core_alone_has_the_alarms(core_rehearsal: Rehearsal) -> None:
    # GIVEN the core stack WHEN its alarms are read back
    alarms = described_alarms(core_rehearsal)

    # THEN all three exist, query the default namespace, and notify no topic (none given)
    assert set(alarms) == CORE_ALARMS
    for alarm in alarms.values():
        assert alarm_selection(alarm).namespace == DEFAULT_NAMESPACE
        assert alarm.get("AlarmActions", []) == []
    assert alarms["BreakerOpenTooLongAlarm"]["EvaluationPeriods"] == 5


def test_a_breaker_that_opens_breaches_the_deployed_opened_alarm(
    core_rehearsal: Rehearsal,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a function of your own: the stack's table, the core's managed policy, and no
    # POWERTOOLS_METRICS_NAMESPACE (fleetbreaker's default)
    monkeypatch.delenv(NAMESPACE_ENV, raising=False)
    credentials = own_function_credentials(core_rehearsal)
    store = DynamoDBStore(
        core_rehearsal.resources["CircuitBreakersTable"],
        boto3_client=client(core_rehearsal.endpoint, "dynamodb", credentials),
    )
    metrics = MetricsListener()
    breaker = CircuitBreaker(f"orders-{uuid.uuid4().hex[:8]}", store=store, listeners=[metrics])

    # WHEN its dependency fails until the breaker opens, and the invocation flushes metrics
    trip(breaker, Dependency())
    assert breaker.state.value == "open"
    assert metrics.pending_documents > 0
    capsys.readouterr()
    metrics.flush()
    points = flushed_points(capsys.readouterr().out)

    # THEN the deployed alarm's query counts the trip in that minute, and breaches
    alarm = described_alarms(core_rehearsal)["BreakerOpenedAlarm"]
    selection = alarm_selection(alarm)
    value = datapoint(selection, points, selection.namespace)
    assert value == 1
    assert breaches(alarm, [value])


def test_the_payment_functions_trip_breaches_the_deployed_opened_alarm(
    default_set: Rehearsal,
) -> None:
    # GIVEN the example's payment function as deployed, and a payment API that fails
    container = default_set.fleet()["PaymentFunction"]
    environment = default_set.functions["PaymentFunction"].environment
    threshold = int(environment["BREAKER_FAILURE_THRESHOLD"])
    default_set.api.mode = "fail"

    # WHEN it sees threshold failures, each invocation flushing its metrics to its log
    log: list[str] = []
    for _ in range(threshold):
        invocation = on_fleet_breaker(container.invoke(payment(unique_key())))
        assert invocation.answer()["statusCode"] == 502
        log.extend(invocation.log)

    # THEN the EMF in its log, read as CloudWatch reads it, holds one trip that the deployed
    # alarm's query counts: the function's namespace is the alarm's
    alarm = described_alarms(default_set)["BreakerOpenedAlarm"]
    selection = alarm_selection(alarm)
    assert environment[NAMESPACE_ENV] == selection.namespace
    value = datapoint(selection, flushed_points("\n".join(log)), selection.namespace)
    assert value == 1
    assert breaches(alarm, [value])
