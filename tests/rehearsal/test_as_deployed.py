"""The deploy rehearsal: every function run exactly as its stack configures it.

For each parameter set (tests/rehearsal/conftest.py) the stack is created on a moto server;
each function is read back through moto's Lambda, IAM and event-source-mapping APIs and run
in a fresh process with that environment, signed as an IAM user holding exactly its role's
statements (moto enforcing them), against a cache that admits only its IAM user. What moto's
authoriser does not evaluate (resources, condition keys) is checked here statically.

A store error or a switch to the local breaker in a function's log, an error it raises, a
variable it lacks or a permission it misses fails the test with a message naming the
function and the cause (tests/rehearsal/test_bites.py shows each of those failing).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from devtools.rehearsal import RehearsalError, breaker_problems
from devtools.sam_template import condition_values
from devtools.sqs_event_source import SqsEventSource
from tests.rehearsal.conftest import BREAKER, DEFER_SETS, PARAMETER_SETS, Rehearsal, unique_key
from tests.rehearsal.support import (
    cache_login_problems,
    http,
    on_fleet_breaker,
    payment,
    run,
    scheduled_event,
)
from tests.sam.conftest import EVENTS, load_event, payment_event
from tests.sam.test_payment_events import EXPECTED_STATUS

pytestmark = pytest.mark.rehearsal

# The sets whose trip is driven by a count (the rate set needs calls spread over report
# intervals, a matter of time the rehearsal does not wait for).
COUNT_SETS = [name for name in PARAMETER_SETS if name not in ("core", "rate")]
# What each gate event answers, in this order, on a fresh breaker. A new events/gate-*.json
# needs a line here (test_every_sample_event_is_rehearsed).
GATE_EVENTS: dict[str, dict[str, Any] | str] = {
    # (calls: None under the count policy, which counts none; the rate set's gate: 0)
    "gate-status.json": {"state": "closed", "generation": 0, "open_until": None},
    "gate-check.json": {"decision": "allow", "state": "closed", "token": None, "degraded": False},
    "gate-record-success.json": {"applied": True, "stale_token": False, "state": "closed"},
    "gate-record-stale-token.json": {"applied": False, "stale_token": True, "state": "closed"},
    "gate-bad-request.json": "InvalidGateRequest",
    "gate-bad-outcome.json": "InvalidGateRequest",
    "gate-record-failure.json": {"applied": True, "state": "closed"},
}
# The workflow's input and the charge step's sample: run through gate, charge and gate.
WORKFLOW_EVENTS = ("statemachine-payment.json", "charge-payment.json")


def test_every_sample_event_is_rehearsed() -> None:
    on_disk = {path.name for path in EVENTS.glob("*.json")} - {"env.json"}
    assert on_disk == set(EXPECTED_STATUS) | set(GATE_EVENTS) | set(WORKFLOW_EVENTS)


# --------------------------------------------------------------------------- read back


def declared_variables(rehearsal: Rehearsal, logical_id: str) -> set[str]:
    """The variables SAM's translation gives the function for the set's parameters."""
    conditions = condition_values(rehearsal.translated, rehearsal.parameters)
    variables = rehearsal.translated["Resources"][logical_id]["Properties"]["Environment"][
        "Variables"
    ]
    declared = set()
    for name, value in variables.items():
        if isinstance(value, dict) and "Fn::If" in value:
            condition, when_true, when_false = value["Fn::If"]
            value = when_true if conditions[condition] else when_false
        if value != {"Ref": "AWS::NoValue"}:
            declared.add(name)
    return declared


def test_each_function_has_the_variables_its_template_declares(rehearsal: Rehearsal) -> None:
    for logical_id, function in rehearsal.functions.items():
        assert set(function.environment) == declared_variables(rehearsal, logical_id), logical_id


def test_the_handlers_and_runtimes_are_the_templates(rehearsal: Rehearsal) -> None:
    runtime = rehearsal.parameters.get(
        "Runtime", rehearsal.translated["Parameters"]["Runtime"]["Default"]
    )
    for logical_id, function in rehearsal.functions.items():
        properties = rehearsal.translated["Resources"][logical_id]["Properties"]
        assert function.handler == properties["Handler"], logical_id
        assert function.runtime == runtime, logical_id


def test_functions_on_the_cache_may_log_in_as_its_user(rehearsal: Rehearsal) -> None:
    # moto does not model ElastiCache: the login's variables and elasticache:Connect (on the
    # cache and its user) are checked statically for every function the stack points at it
    assert cache_login_problems(rehearsal.functions) == []


def test_table_statements_are_scoped_to_the_functions_breakers(rehearsal: Rehearsal) -> None:
    # moto's authoriser ignores conditions: dynamodb:LeadingKeys is checked here.
    table_arn = rehearsal.client("dynamodb").describe_table(
        TableName=rehearsal.resources["CircuitBreakersTable"]
    )["Table"]["TableArn"]
    for logical_id, function in rehearsal.functions.items():
        for statement in function.statements:
            if statement.get("Sid") != "BreakerState":
                continue
            assert statement["Resource"] == table_arn, logical_id
            keys = statement["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"]
            assert keys == [BREAKER], logical_id


def stack_arns(rehearsal: Rehearsal) -> set[str]:
    """The ARNs of what the stack created that a function's role may name."""
    dynamodb, sqs = rehearsal.client("dynamodb"), rehearsal.client("sqs")
    arns = {
        "arn:aws:events:us-east-1:123456789012:event-bus/default",
        # moto does not model the cache: its ARNs are placeholders
        "BreakerCache.ARN",
        "BreakerCacheUser.Arn",
    }
    for logical_id, physical_id in rehearsal.resources.items():
        kind = rehearsal.translated["Resources"][logical_id]["Type"]
        if kind == "AWS::DynamoDB::Table":
            table = dynamodb.describe_table(TableName=physical_id)["Table"]
            arns |= {table["TableArn"], f"{table['TableArn']}/stream/*"}
            arns |= {table["LatestStreamArn"]} if "LatestStreamArn" in table else set()
        elif kind == "AWS::SQS::Queue":
            arns.add(
                sqs.get_queue_attributes(QueueUrl=physical_id, AttributeNames=["QueueArn"])[
                    "Attributes"
                ]["QueueArn"]
            )
        elif kind == "AWS::Lambda::EventSourceMapping":
            arns.add(f"arn:aws:lambda:us-east-1:123456789012:event-source-mapping:{physical_id}")
    return arns


def test_every_statement_names_the_stacks_own_resources(rehearsal: Rehearsal) -> None:
    # moto authorises against "*": which resource each statement grants is checked here
    allowed = stack_arns(rehearsal)
    for logical_id, function in rehearsal.functions.items():
        for statement in function.statements:
            resources = statement["Resource"]
            for resource in [resources] if isinstance(resources, str) else resources:
                assert resource in allowed, (
                    f"{logical_id}: statement {statement.get('Sid')} grants {resource}, "
                    "not a resource of the stack"
                )


def test_the_consumer_and_breaker_events_are_mapped_to_their_sources(
    rehearsal: Rehearsal,
) -> None:
    events_mappings = rehearsal.functions["BreakerEventsFunction"].mappings
    assert [m["EventSourceArn"].split("/stream/")[0] for m in events_mappings] == [
        rehearsal.client("dynamodb").describe_table(
            TableName=rehearsal.resources["CircuitBreakersTable"]
        )["Table"]["TableArn"]
    ]
    if rehearsal.name not in DEFER_SETS:
        assert "DeferredPaymentsFunction" not in rehearsal.functions
        return
    [mapping] = rehearsal.functions["DeferredPaymentsFunction"].mappings
    queue_url = rehearsal.resources["DeferredPaymentsQueue"]
    queue_arn = rehearsal.client("sqs").get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    assert mapping["EventSourceArn"] == queue_arn
    assert mapping["UUID"] == rehearsal.resources["DeferredPaymentsMapping"]


def test_snapstart_functions_restore_their_breakers_before_they_serve(
    snapstart_rehearsal: Rehearsal,
) -> None:
    # GIVEN the stack with SnapStart: its functions that build a breaker run the runtime's
    # SnapStart hooks after init (devtools/lambda_runtime.py), as restored environments
    rehearsal = snapstart_rehearsal
    snapshotted = sorted(lid for lid in rehearsal.functions if rehearsal.snapstart(lid))
    assert snapshotted == ["BreakerGateFunction", "PaymentFunction"]
    # WHEN a fresh environment of the payment function serves a payment
    container = rehearsal.container("PaymentFunction")
    invocation = container.invoke(payment_event())
    # THEN the breaker's hooks ran, before the first invocation, and the payment went through
    # the fleet's breaker
    report = [line for line in invocation.log if line.startswith("RESTORE_REPORT")]
    assert report == [
        "RESTORE_REPORT before-snapshot hooks: ['fleetbreaker.restore.before_snapshot'] "
        "after-restore hooks: ['fleetbreaker.restore.after_restore']"
    ]
    assert invocation.error is None
    assert invocation.result["statusCode"] == 200
    assert breaker_problems(invocation.records()) == []


def test_the_core_alone_deploys_no_function(core_rehearsal: Rehearsal) -> None:
    assert core_rehearsal.functions == {}
    assert "CircuitBreakersTable" in core_rehearsal.resources


# --------------------------------------------------------------------------- sample events


def test_every_payment_event_gets_its_answer(rehearsal: Rehearsal) -> None:
    # GIVEN the payment function as deployed, on a fresh breaker
    container = rehearsal.fleet()["PaymentFunction"]
    calls = rehearsal.api.calls
    for name, expected in EXPECTED_STATUS.items():
        # WHEN each sample is sent THEN it gets its status, on the fleet's breaker
        status, body = http(container, load_event(EVENTS / name))
        assert status == expected, (name, body)
    # AND the two valid ones were charged by the provider the stack names
    assert rehearsal.api.calls == calls + 2


def test_every_gate_event_gets_its_answer(rehearsal: Rehearsal) -> None:
    # GIVEN the gate as deployed, on a fresh breaker
    container = rehearsal.fleet()["BreakerGateFunction"]
    for name, expected in GATE_EVENTS.items():
        event = load_event(EVENTS / name)
        # WHEN each sample is sent in turn
        invocation = on_fleet_breaker(container.invoke(event))
        # THEN it gets its answer (a refused request raises the named error)
        if isinstance(expected, str):
            assert invocation.error is not None, name
            assert invocation.error["type"] == expected, name
            continue
        answer = invocation.answer()
        assert answer["breaker"] == event["breaker"], name
        assert answer.items() >= expected.items(), (name, answer)
        if name == "gate-status.json":
            assert answer["calls"] == (0 if rehearsal.name == "rate" else None)


def test_the_workflow_samples_run_through_gate_charge_and_gate(rehearsal: Rehearsal) -> None:
    # GIVEN the gate and the charge step as deployed (the workflow's two functions)
    gate, charge = (rehearsal.fleet()[name] for name in ("BreakerGateFunction", "ChargeFunction"))
    for name in WORKFLOW_EVENTS:
        # WHEN a sample goes through the workflow's steps
        check = run(gate, {"action": "check", "breaker": BREAKER, "max_wait_seconds": 60})
        assert check["decision"] == "allow", check
        charged = run(charge, load_event(EVENTS / name))
        recorded = run(
            gate, {"action": "record", "breaker": BREAKER, "outcome": "success", "token": None}
        )
        # THEN the payment is charged and the outcome recorded
        assert charged["status"] == "charged", (name, charged)
        assert recorded["applied"] is True


def test_the_schedule_reconciles_the_consumers(rehearsal: Rehearsal) -> None:
    # GIVEN breaker-events as deployed and a closed breaker
    container = rehearsal.fleet()["BreakerEventsFunction"]
    # WHEN its schedule fires
    answer = run(container, scheduled_event("arn:aws:events:us-east-1:123456789012:rule/x"))
    # THEN the registered consumers stay (or are brought) enabled
    if rehearsal.name in DEFER_SETS:
        assert answer["changed"] == {BREAKER: []}, answer
    else:
        assert answer == {"changed": {}}


def test_the_consumer_charges_a_deferred_payment_once(defer_rehearsal: Rehearsal) -> None:
    rehearsal = defer_rehearsal
    # GIVEN a payment waiting in the stack's queue
    source = SqsEventSource(rehearsal.client("sqs"), rehearsal.resources["DeferredPaymentsQueue"])
    container = rehearsal.fleet()["DeferredPaymentsFunction"]
    key = unique_key()
    body = json.dumps({"amount": 990, "currency": "EUR", "idempotency_key": key})
    for _ in range(2):  # delivered twice, as a retried 202 may defer it twice
        rehearsal.client("sqs").send_message(
            QueueUrl=rehearsal.resources["DeferredPaymentsQueue"], MessageBody=body
        )
    calls = rehearsal.api.calls
    # WHEN the mapping hands the messages to the consumer
    result = source.poll(lambda event, _: run(container, event), None)
    # THEN both are settled and the provider charged the payment once
    assert result is not None
    assert result.failed == []
    assert len(result.deleted) == 2
    assert rehearsal.api.calls == calls + 1


# --------------------------------------------------------------------------- one breaker


def stream_event(rehearsal: Rehearsal) -> dict[str, Any]:
    """The table stream's records so far, as the stream mapping delivers them (its filter
    applied)."""
    [mapping] = rehearsal.functions["BreakerEventsFunction"].mappings
    stream_arn = mapping["EventSourceArn"]
    streams = rehearsal.client("dynamodbstreams")
    shard = streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"][0]
    iterator = streams.get_shard_iterator(
        StreamArn=stream_arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    patterns = [json.loads(f["Pattern"]) for f in mapping["FilterCriteria"]["Filters"]]
    records = []
    for record in streams.get_records(ShardIterator=iterator)["Records"]:
        if not any(record["eventName"] in p["eventName"] for p in patterns):
            continue
        created = record["dynamodb"]["ApproximateCreationDateTime"]
        record["dynamodb"]["ApproximateCreationDateTime"] = created.timestamp()
        records.append({**record, "eventSourceARN": stream_arn})
    return {"Records": records}


def mapping_state(rehearsal: Rehearsal) -> str:
    state: str = rehearsal.client("lambda").get_event_source_mapping(
        UUID=rehearsal.resources["DeferredPaymentsMapping"]
    )["State"]
    return state


@pytest.fixture(params=COUNT_SETS)
def count_rehearsal(request: pytest.FixtureRequest, rehearsals: Any, tmp_path_factory: Any) -> Any:
    from tests.rehearsal.conftest import _rehearsal

    deployed = _rehearsal(request.param, rehearsals, tmp_path_factory)
    deployed.reset_breaker()
    deployed.api.mode = "ok"
    return deployed


def test_a_trip_by_the_payment_function_is_the_fleets(count_rehearsal: Rehearsal) -> None:
    rehearsal = count_rehearsal
    defers = rehearsal.name in DEFER_SETS
    containers = rehearsal.fleet()
    threshold = int(rehearsal.functions["PaymentFunction"].environment["BREAKER_FAILURE_THRESHOLD"])

    # GIVEN a payment API that fails
    rehearsal.api.mode = "fail"
    # WHEN the payment function sees threshold failures
    for _ in range(threshold):
        status, body = http(containers["PaymentFunction"], payment(unique_key()))
        assert status == 502, body
    calls = rehearsal.api.calls
    # THEN its next payment is turned away without calling the provider
    status, body = http(containers["PaymentFunction"], payment(unique_key()))
    assert status == (202 if defers else 503), body
    assert rehearsal.api.calls == calls
    # AND the fleet's record, in the stack's store, is open
    record = rehearsal.record()
    assert record is not None, "PaymentFunction left no breaker record in the stack's store"
    assert record.state.value == "open"

    # AND the gate's check sees the trip
    check = run(containers["BreakerGateFunction"], load_event(EVENTS / "gate-check.json"))
    assert (check["decision"], check["state"], check["degraded"]) == ("reject", "open", False)

    # AND breaker-events pauses the consumer: from the table's stream, or (Redis, no stream)
    # the payment function's container paused it on its own transition
    if rehearsal.cache is None:
        answer = run(containers["BreakerEventsFunction"], stream_event(rehearsal))
        assert answer["state_changes"] == 1, answer
    if defers:
        assert mapping_state(rehearsal) == "Disabled"
    # AND its schedule keeps the consumer paused while the breaker is open
    answer = run(
        containers["BreakerEventsFunction"],
        scheduled_event("arn:aws:events:us-east-1:123456789012:rule/x"),
    )
    assert answer["changed"] == ({BREAKER: []} if defers else {}), answer
    if not defers:
        return

    # AND the consumer, handed the deferred payment, does not call the provider
    source = SqsEventSource(rehearsal.client("sqs"), rehearsal.resources["DeferredPaymentsQueue"])
    rehearsal.api.mode = "ok"
    result = source.poll(lambda event, _: run(containers["DeferredPaymentsFunction"], event), None)
    assert result is not None
    assert len(result.failed) == 1, "the open circuit sends the payment back to the queue"
    assert rehearsal.api.calls == calls, (
        "DeferredPaymentsFunction called the provider while the fleet's breaker was open"
    )
    # (the message waits for recovery: drop it so the next test starts with an empty queue)
    rehearsal.client("sqs").purge_queue(QueueUrl=rehearsal.resources["DeferredPaymentsQueue"])


def test_a_function_on_a_local_breaker_fails_the_rehearsal(rehearsal: Rehearsal) -> None:
    # The check the tests above rely on, seen failing: a payment function whose store is
    # unreachable runs on its local breaker, and the rehearsal says so.
    environment = rehearsal.environment("PaymentFunction")
    environment["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9"
    if "CIRCUIT_BREAKER_REDIS_URL" in environment:
        environment["CIRCUIT_BREAKER_REDIS_URL"] = "rediss://127.0.0.1:9"
    container = rehearsal.container("PaymentFunction", environment)
    with pytest.raises(RehearsalError, match=r"PaymentFunction ran on a local breaker"):
        http(container, payment(unique_key()))
