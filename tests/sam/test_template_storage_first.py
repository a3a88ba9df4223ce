"""template.yaml's storage-first resources (OpenCircuitMode=defer) and the code they describe.

The deferred-payments consumer's wiring is checked against the consumer's own code and
Powertools' defaults, so the template and the function cannot drift apart silently.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from devtools.sam_template import load_template
from devtools.servers import REPO_ROOT
from tests.support import function_reads

FUNCTIONS = REPO_ROOT / "functions"


@pytest.fixture(scope="module")
def resources() -> dict[str, Any]:
    resources: dict[str, Any] = load_template()["Resources"]
    return resources


def test_the_consumer_reports_partial_failures_and_batches(resources: dict[str, Any]) -> None:
    # GIVEN the consumer's event source mapping
    mapping = resources["DeferredPaymentsMapping"]["Properties"]
    # THEN it reads the deferred-payments queue, reports failed records one by one, waits
    # for a batch, and bounds how many consumers charge at once
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": ["DeferredPaymentsQueue", "Arn"]}
    # (the function itself, or with SnapStart its live alias: tests/sam/test_snapstart.py)
    assert mapping["FunctionName"] == {
        "Fn::If": [
            "InvokesPublishedVersions",
            {"Ref": "DeferredPaymentsFunction.Alias"},
            {"Ref": "DeferredPaymentsFunction"},
        ]
    }
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["MaximumBatchingWindowInSeconds"] > 0
    assert mapping["ScalingConfig"]["MaximumConcurrency"] >= 2


def test_a_message_that_keeps_failing_is_kept_in_a_dead_letter_queue(
    resources: dict[str, Any],
) -> None:
    # GIVEN the deferred-payments queue and the consumer
    queue = resources["DeferredPaymentsQueue"]["Properties"]
    timeout = resources["DeferredPaymentsFunction"]["Properties"]["Timeout"]
    # THEN failing messages move to a retained dead-letter queue after a bounded number of
    # receives, and a batch in progress is not handed to a second consumer
    redrive = queue["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == {
        "Fn::GetAtt": ["DeferredPaymentsDeadLetterQueue", "Arn"]
    }
    assert 3 <= redrive["maxReceiveCount"] <= 20
    assert resources["DeferredPaymentsDeadLetterQueue"]["DeletionPolicy"] == "Retain"
    assert queue["VisibilityTimeout"] >= 6 * timeout


def test_the_idempotency_table_is_the_one_powertools_expects() -> None:
    # GIVEN Powertools' DynamoDB persistence layer with its defaults (what the consumer uses)
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

    layer = DynamoDBPersistenceLayer(table_name="unused")
    table = load_template()["Resources"]["DeferredPaymentsIdempotencyTable"]["Properties"]
    # THEN the table's key and TTL attribute are the layer's
    assert table["KeySchema"] == [{"AttributeName": layer.key_attr, "KeyType": "HASH"}]
    assert table["TimeToLiveSpecification"] == {
        "AttributeName": layer.expiry_attr,
        "Enabled": True,
    }


def test_every_consumer_variable_is_read_by_the_consumer(resources: dict[str, Any]) -> None:
    # GIVEN the consumer's source: its app.py and the charging module it shares with the API
    source = (FUNCTIONS / "deferred_payments" / "app.py").read_text()
    for shared in ("charging.py", "breaker_events.py"):
        source += (FUNCTIONS / "shared" / shared).read_text()
    variables = resources["DeferredPaymentsFunction"]["Properties"]["Environment"]["Variables"]
    # THEN every variable the template sets is read, and the breaker is the API's breaker
    for name in variables:
        assert function_reads(source, name), name
    api = resources["PaymentFunction"]["Properties"]["Environment"]["Variables"]
    for name in ("CIRCUIT_BREAKER_TABLE", "BREAKER_NAME", "PAYMENT_API_URL"):
        assert variables[name] == api[name], name


MAPPING_ARN = {
    "Fn::Sub": "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}"
    ":event-source-mapping:${DeferredPaymentsMapping}"
}
REGISTRY = {"Fn::Sub": '{"${BreakerName}": ["${DeferredPaymentsMapping}"]}'}


def statements(policy: dict[str, Any]) -> list[dict[str, Any]]:
    """A policy's statements, conditional ones resolved as with OpenCircuitMode=defer."""
    found = []
    for statement in policy["Statement"]:
        if "Fn::If" in statement:
            statement = statement["Fn::If"][1]
        found.append(statement)
    return found


def test_the_table_streams_every_state_change(resources: dict[str, Any]) -> None:
    # GIVEN the CircuitBreakers table and the events function's stream mapping
    table = resources["CircuitBreakersTable"]["Properties"]
    mapping = resources["BreakerEventsStreamMapping"]["Properties"]
    # THEN the stream carries old and new items (the state change is their difference), and
    # feeds the events function without waiting for a batch
    assert table["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": ["CircuitBreakersTable", "StreamArn"]}
    assert mapping["FunctionName"] == {"Ref": "BreakerEventsFunction"}
    assert mapping["MaximumBatchingWindowInSeconds"] == 0


def test_the_events_function_may_toggle_exactly_the_consumer_mapping(
    resources: dict[str, Any],
) -> None:
    # GIVEN the events function, with the consumer registered for the stack's breaker
    function = resources["BreakerEventsFunction"]["Properties"]
    variables = function["Environment"]["Variables"]
    assert variables["BREAKER_MAPPINGS"] == {"Fn::If": ["DeferWhenOpen", REGISTRY, "{}"]}
    # THEN the only Lambda actions it is granted are on that one mapping
    assert function["Role"] == {"Fn::GetAtt": ["BreakerEventsFunctionRole", "Arn"]}
    [inline] = resources["BreakerEventsFunctionRole"]["Properties"]["Policies"]
    policy = inline["PolicyDocument"]
    granted = [s for s in statements(policy) if any("lambda:" in a for a in s["Action"])]
    assert granted == [
        {
            "Sid": "PauseConsumers",
            "Effect": "Allow",
            "Action": ["lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping"],
            "Resource": MAPPING_ARN,
        }
    ]


def test_with_redis_the_transitioning_functions_may_toggle_only_that_mapping(
    resources: dict[str, Any],
) -> None:
    # GIVEN the policy the payment function and the gate get with the Redis store
    policy = resources["PauseFromContainersPolicy"]
    assert policy["Condition"] == "PauseFromContainers"
    assert policy["Properties"]["Roles"] == [
        {"Ref": "PaymentFunctionRole"},
        {"Ref": "BreakerGateFunctionRole"},
    ]
    # THEN it names that one mapping, and both functions are told which it is
    [toggle] = [
        s
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if s["Sid"] == "PauseConsumers"
    ]
    assert toggle["Resource"] == MAPPING_ARN
    for name in ("PaymentFunction", "BreakerGateFunction"):
        variables = resources[name]["Properties"]["Environment"]["Variables"]
        assert variables["BREAKER_MAPPINGS"] == {
            "Fn::If": ["PauseFromContainers", REGISTRY, {"Ref": "AWS::NoValue"}]
        }


def test_the_consumer_does_not_name_its_own_mapping(resources: dict[str, Any]) -> None:
    # GIVEN the consumer's environment and the mapping that invokes it
    variables = resources["DeferredPaymentsFunction"]["Properties"]["Environment"]["Variables"]
    mapping = resources["DeferredPaymentsMapping"]["Properties"]
    # THEN the mapping names the function, so the function cannot name the mapping: that
    # would be a dependency cycle, which CloudFormation refuses
    # (the function itself, or with SnapStart its live alias: tests/sam/test_snapstart.py)
    assert mapping["FunctionName"] == {
        "Fn::If": [
            "InvokesPublishedVersions",
            {"Ref": "DeferredPaymentsFunction.Alias"},
            {"Ref": "DeferredPaymentsFunction"},
        ]
    }
    assert "DeferredPaymentsMapping" not in json.dumps(variables)
    # AND the schedule that pauses it on its own trips is there
    events = resources["BreakerEventsFunction"]["Properties"]["Events"]
    assert any(e["Type"] == "Schedule" for e in events.values())


def test_every_events_function_variable_is_read(resources: dict[str, Any]) -> None:
    # GIVEN the events function's source: its app.py and the shared breaker_events.py
    source = (FUNCTIONS / "breaker_events" / "app.py").read_text()
    source += (FUNCTIONS / "shared" / "breaker_events.py").read_text()
    variables = resources["BreakerEventsFunction"]["Properties"]["Environment"]["Variables"]
    # THEN every variable the template sets is read
    for name in variables:
        assert function_reads(source, name), name


def test_the_redis_pause_policy_exists_only_with_the_example() -> None:
    # GIVEN the condition of the Redis-only pause policy, THEN it implies defer mode, which
    # implies the example: DeployExample=false leaves the core without it
    conditions = load_template()["Conditions"]
    assert {"Condition": "DeferWhenOpen"} in conditions["PauseFromContainers"]["Fn::And"]
    assert {"Condition": "ExampleEnabled"} in conditions["DeferWhenOpen"]["Fn::And"]


def powertools_idempotency_actions() -> set[str]:
    """The DynamoDB operations Powertools' DynamoDBPersistenceLayer sends, from its source."""
    import ast
    import inspect

    from aws_lambda_powertools.utilities.idempotency.persistence import dynamodb

    tree = ast.parse(inspect.getsource(dynamodb))
    calls = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr == "client"
    }
    return {"dynamodb:" + "".join(part.title() for part in call.split("_")) for call in calls}


def test_the_consumer_may_make_every_idempotency_call_powertools_makes(
    resources: dict[str, Any],
) -> None:
    # GIVEN the calls the installed Powertools makes on the idempotency table
    sent = powertools_idempotency_actions()
    assert {"dynamodb:GetItem", "dynamodb:PutItem"} <= sent  # the scan found its client calls
    # WHEN the consumer's role is read
    function = resources["DeferredPaymentsFunction"]["Properties"]
    assert function["Role"] == {"Fn::GetAtt": ["DeferredPaymentsFunctionRole", "Arn"]}
    [inline] = resources["DeferredPaymentsFunctionRole"]["Properties"]["Policies"]
    [granted] = [
        s for s in statements(inline["PolicyDocument"]) if s.get("Sid") == "IdempotencyRecords"
    ]
    # THEN it grants exactly those calls, on the idempotency table only
    assert set(granted["Action"]) == sent
    assert granted["Resource"] == {"Fn::GetAtt": ["DeferredPaymentsIdempotencyTable", "Arn"]}
