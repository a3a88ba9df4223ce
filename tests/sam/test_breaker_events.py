"""Pause and resume: a breaker's transitions disable and enable its consumers' mappings.

Everything runs against moto in-process: a CircuitBreakers table with a NEW_AND_OLD_IMAGES
stream, written by a real ``DynamoDBStore`` through a real ``CircuitBreaker``; the records the
breaker-events function gets are read from that stream; the consumer's event source mapping
is a real mapping of moto's Lambda API, read back after the handler toggled it; the
EventBridge events are routed by a rule to an SQS queue and read from there. The Redis path
runs on a real redis-server. Time is a FakeClock shared by the breaker and the handler.
"""

from __future__ import annotations

import functools
import importlib
import io
import json
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

from devtools.functions import load_function
from fleetbreaker import BreakerConfig, State
from fleetbreaker.record import Lease, Record
from fleetbreaker.stores.dynamodb import DynamoDBStore
from fleetbreaker.stores.redis import RedisStore
from tests import support
from tests.support import T0, FakeClock

BREAKER = "payment-api"
SCHEDULED = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}


@pytest.fixture(scope="module")
def events_module() -> ModuleType:
    """functions/breaker_events/app.py (its import-time handler has nothing registered)."""
    with pytest.MonkeyPatch.context() as env:
        env.delenv("BREAKER_MAPPINGS", raising=False)
        return load_function("breaker_events")


@pytest.fixture(scope="module")
def shared(events_module: ModuleType) -> ModuleType:
    """functions/shared/breaker_events.py, as the function imported it."""
    return importlib.import_module("breaker_events")


@dataclass
class Aws:
    """The moto account of one test: table and stream, consumer mapping, event inbox."""

    table: str
    stream_arn: str
    mapping: str
    inbox: str
    clients: dict[str, Any]
    iterator: str | None = None

    def mapping_state(self) -> str:
        state: str = self.clients["lambda"].get_event_source_mapping(UUID=self.mapping)["State"]
        return state

    def stream_event(self) -> dict[str, Any]:
        """The stream records written since the last call, as Lambda delivers them."""
        streams = self.clients["dynamodbstreams"]
        if self.iterator is None:
            shard = streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"][
                "Shards"
            ][0]["ShardId"]
            self.iterator = streams.get_shard_iterator(
                StreamArn=self.stream_arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
        answer = streams.get_records(ShardIterator=self.iterator)
        self.iterator = answer["NextShardIterator"]
        records = []
        for record in answer["Records"]:
            created = record["dynamodb"]["ApproximateCreationDateTime"]
            record["dynamodb"]["ApproximateCreationDateTime"] = created.timestamp()
            records.append({**record, "eventSourceARN": self.stream_arn})
        return {"Records": records}

    def published(self) -> list[dict[str, Any]]:
        """Details of the "Circuit Breaker State Changed" events EventBridge delivered."""
        answer = self.clients["sqs"].receive_message(QueueUrl=self.inbox, MaxNumberOfMessages=10)
        events = [json.loads(m["Body"]) for m in answer.get("Messages", [])]
        assert all(e["detail-type"] == "Circuit Breaker State Changed" for e in events)
        assert all(e["source"] == "fleetbreaker" for e in events)
        return [e["detail"] for e in events]


def consumer_function_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", "def lambda_handler(event, context):\n    return {}\n")
    return buffer.getvalue()


@pytest.fixture
def aws() -> Iterator[Aws]:
    import boto3
    from moto import mock_aws

    with mock_aws():
        region = "us-east-1"
        clients: dict[str, Any] = {
            name: boto3.client(name, region_name=region)
            for name in ("dynamodb", "dynamodbstreams", "lambda", "sqs", "events", "iam")
        }
        table = f"breakers-{uuid.uuid4().hex[:8]}"
        stream_arn = clients["dynamodb"].create_table(
            TableName=table,
            AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )["TableDescription"]["LatestStreamArn"]
        role = clients["iam"].create_role(RoleName="consumer", AssumeRolePolicyDocument="{}")
        clients["lambda"].create_function(
            FunctionName="deferred-payments",
            Runtime="python3.13",
            Role=role["Role"]["Arn"],
            Handler="app.lambda_handler",
            Code={"ZipFile": consumer_function_zip()},
        )
        sqs = clients["sqs"]
        queue = sqs.create_queue(QueueName="deferred")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        mapping = clients["lambda"].create_event_source_mapping(
            EventSourceArn=queue_arn,
            FunctionName="deferred-payments",
            FunctionResponseTypes=["ReportBatchItemFailures"],
        )["UUID"]
        inbox = sqs.create_queue(QueueName="breaker-events")["QueueUrl"]
        inbox_arn = sqs.get_queue_attributes(QueueUrl=inbox, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        clients["events"].put_rule(
            Name="breaker-alerts",
            EventPattern=json.dumps({"detail-type": ["Circuit Breaker State Changed"]}),
        )
        clients["events"].put_targets(
            Rule="breaker-alerts", Targets=[{"Id": "inbox", "Arn": inbox_arn}]
        )
        yield Aws(table, stream_arn, mapping, inbox, clients)


def events_handler(events_module: ModuleType, aws: Aws, clock: FakeClock) -> Any:
    env = {
        "CIRCUIT_BREAKER_TABLE": aws.table,
        "BREAKER_MAPPINGS": json.dumps({BREAKER: [aws.mapping]}),
    }
    return events_module.create_handler(env, clock=clock)


# A breaker whose writes all reach the store: these tests read them back. The store deadline
# is generous: the deadline has its own tests (tests/faults), and a call that misses it on a
# loaded machine would be answered locally, leaving nothing to stream.
STREAMED = BreakerConfig(
    failure_threshold=1, recovery_timeout=30, cache_ttl=0, store_deadline_seconds=30
)
breaker_on = functools.partial(support.breaker_on, config=STREAMED, name=BREAKER, listeners=())


def test_opening_disables_and_closing_enables_the_consumer_mapping(
    events_module: ModuleType, aws: Aws
) -> None:
    # GIVEN a breaker on the streamed table, and the events function registering the
    # consumer's mapping for it
    clock = FakeClock()
    breaker = breaker_on(DynamoDBStore(aws.table), clock)
    handler = events_handler(events_module, aws, clock)
    assert aws.mapping_state() == "Enabled"

    # WHEN a failure opens the breaker and the stream delivers the store's write
    breaker.record(success=False)
    result = handler(aws.stream_event(), None)

    # THEN the consumer's mapping is disabled and the change is announced on EventBridge
    assert result["state_changes"] == 1
    assert aws.mapping_state() == "Disabled"
    [opened] = aws.published()
    assert (opened["breaker"], opened["from_state"], opened["state"]) == (BREAKER, None, "open")
    assert opened["open_until_ms"] == T0 + 30_000

    # WHEN the open window ends, a probe succeeds, and the stream delivers both writes
    clock.advance(31)
    probe = breaker.check()
    assert probe.token is not None
    breaker.record(success=True, token=probe.token)
    result = handler(aws.stream_event(), None)

    # THEN the mapping is enabled again; both transitions were announced, in order
    assert result["state_changes"] == 2
    assert aws.mapping_state() == "Enabled"
    assert [(e["from_state"], e["state"]) for e in aws.published()] == [
        ("open", "half_open"),
        ("half_open", "closed"),
    ]


def test_counted_failures_that_do_not_open_change_nothing(
    events_module: ModuleType, aws: Aws
) -> None:
    # GIVEN a breaker that needs three failures to open
    clock = FakeClock()
    breaker = breaker_on(DynamoDBStore(aws.table), clock, failure_threshold=3)
    handler = events_handler(events_module, aws, clock)

    # WHEN two failures are counted (two writes on the stream)
    breaker.record(success=False)
    breaker.record(success=False)
    assert breaker.stats.store_errors == 0
    event = aws.stream_event()
    result = handler(event, None)

    # THEN no state changed: the mapping is untouched and nothing is published
    last = event["Records"][-1]["dynamodb"]["NewImage"]
    assert last["failures"] == {"N": "2"}
    assert result["state_changes"] == 0
    assert aws.mapping_state() == "Enabled"
    assert aws.published() == []


def test_the_schedule_resumes_consumers_when_nobody_else_calls_the_breaker(
    events_module: ModuleType, aws: Aws
) -> None:
    # GIVEN an open breaker whose consumers were paused by the stream
    clock = FakeClock()
    breaker = breaker_on(DynamoDBStore(aws.table), clock)
    handler = events_handler(events_module, aws, clock)
    breaker.record(success=False)
    handler(aws.stream_event(), None)
    assert aws.mapping_state() == "Disabled"

    # WHEN the scheduled check runs inside the open window
    clock.advance(10)
    handler(SCHEDULED, None)
    # THEN the consumers stay paused
    assert aws.mapping_state() == "Disabled"

    # WHEN it runs after the window ended, with no caller having moved the breaker on
    clock.advance(25)
    result = handler(SCHEDULED, None)

    # THEN the consumers are resumed (their own breaker will claim the probe)
    assert result["changed"] == {BREAKER: [aws.mapping]}
    assert aws.mapping_state() == "Enabled"
    assert breaker.state is State.OPEN


def test_the_schedule_goes_on_past_a_corrupt_record(events_module: ModuleType, aws: Aws) -> None:
    # GIVEN a corrupt record registered before an open breaker whose window has ended
    clock = FakeClock()
    breaker = breaker_on(DynamoDBStore(aws.table), clock)
    registry: dict[str, list[str]] = {"mangled": [], BREAKER: [aws.mapping]}
    handler = events_module.create_handler(
        {"CIRCUIT_BREAKER_TABLE": aws.table, "BREAKER_MAPPINGS": json.dumps(registry)},
        clock=clock,
    )
    aws.clients["dynamodb"].put_item(
        TableName=aws.table, Item={"name": {"S": "mangled"}, "state": {"S": "sideways"}}
    )
    breaker.record(success=False)
    handler.switch.set(BREAKER, False)
    clock.advance(31)

    # WHEN the scheduled check runs
    result = handler(SCHEDULED, None)

    # THEN it read the corrupt one as closed and went on to resume the later breaker's consumers
    assert result["corrupt"] == ["mangled"]
    assert result["changed"][BREAKER] == [aws.mapping]
    assert aws.mapping_state() == "Enabled"


def test_a_breaker_whose_check_fails_does_not_stop_the_others(
    events_module: ModuleType, aws: Aws
) -> None:
    # GIVEN a registered breaker whose mapping cannot be toggled (it does not exist)
    clock = FakeClock()
    breaker = breaker_on(DynamoDBStore(aws.table), clock)
    registry = {"gone": ["00000000-0000-0000-0000-000000000000"], BREAKER: [aws.mapping]}
    handler = events_module.create_handler(
        {"CIRCUIT_BREAKER_TABLE": aws.table, "BREAKER_MAPPINGS": json.dumps(registry)},
        clock=clock,
    )
    breaker.record(success=False)
    handler.switch.set(BREAKER, False)
    clock.advance(31)

    # WHEN the scheduled check runs, THEN the run fails naming the broken breaker only
    with pytest.raises(RuntimeError, match="'gone'"):
        handler(SCHEDULED, None)
    # AND the later breaker's consumers were resumed all the same
    assert aws.mapping_state() == "Enabled"


def test_with_redis_the_container_that_trips_the_breaker_pauses_the_consumers(
    events_module: ModuleType, shared: ModuleType, aws: Aws, redis_server: str
) -> None:
    # GIVEN a breaker on Redis (no stream) carrying the transition listener, as the example
    # functions build it when BREAKER_MAPPINGS is set
    clock = FakeClock()
    handler = events_handler(events_module, aws, clock)
    listener = shared.TransitionListener(handler.switch, handler.publisher)
    breaker = breaker_on(
        RedisStore(url=redis_server, use_server_time=False),
        clock,
        name=f"{BREAKER}-{uuid.uuid4().hex[:8]}",
        listeners=[listener],
    )
    handler.switch.registry[breaker.name] = (aws.mapping,)

    # WHEN this container's failure opens it
    breaker.record(success=False)

    # THEN the consumer's mapping is disabled and the change is published
    assert aws.mapping_state() == "Disabled"
    assert [e["state"] for e in aws.published()] == ["open"]

    # WHEN a probe closes it again
    clock.advance(31)
    probe = breaker.check()
    breaker.record(success=True, token=probe.token)

    # THEN the mapping is enabled again
    assert aws.mapping_state() == "Enabled"


# --------------------------------------------------------------------------- pure rules


@pytest.mark.parametrize(
    ("record", "wanted"),
    [
        (None, True),
        (Record(State.CLOSED), True),
        (Record(State.DISABLED), True),
        (Record(State.FORCED_OPEN), False),
        (Record(State.OPEN, open_until=T0 + 1), False),
        (Record(State.OPEN, open_until=T0), True),
        (Record(State.HALF_OPEN, leases={0: Lease("t", T0 + 1)}), None),
        (Record(State.HALF_OPEN, leases={0: Lease("t", T0)}), True),
    ],
    ids=["absent", "closed", "disabled", "forced", "open", "window-over", "probing", "stranded"],
)
def test_consumers_wanted(shared: ModuleType, record: Record | None, wanted: bool | None) -> None:
    # GIVEN a breaker record at T0, THEN the consumers are wanted (or left alone) as listed
    assert shared.consumers_wanted(record, T0) is wanted


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not valid JSON"),
        ('["payment-api"]', "must be a JSON object"),
        ('{"payment-api": "uuid"}', "'payment-api' must map to a list"),
    ],
)
def test_a_bad_registry_is_named(shared: ModuleType, text: str, message: str) -> None:
    # GIVEN a malformed BREAKER_MAPPINGS, WHEN it is read, THEN the error says what is wrong
    with pytest.raises(shared.RegistryError, match=message):
        shared.parse_registry(text)


def test_mappings_without_a_store_are_refused(events_module: ModuleType) -> None:
    # GIVEN mappings to toggle but no store to read the breakers from
    env = {"BREAKER_MAPPINGS": json.dumps({BREAKER: ["u"]})}
    # WHEN the handler is built THEN the error names the variables to set
    with pytest.raises(ValueError, match="CIRCUIT_BREAKER_TABLE"):
        events_module.create_handler(env)


@pytest.mark.parametrize("function", ["payment", "deferred_payments", "breaker_gate"])
def test_the_example_functions_add_the_listener_when_mappings_are_registered(
    function: str,
    shared: ModuleType,
    aws: Aws,
    payment_module: ModuleType,
    consumer_module: ModuleType,
) -> None:
    # GIVEN a function's environment with BREAKER_MAPPINGS (the template sets it with Redis)
    env = {
        "CIRCUIT_BREAKER_TABLE": aws.table,
        "PAYMENT_API_URL": "http://127.0.0.1:9/charges",
        "IDEMPOTENCY_TABLE": "idempotency",
        "BREAKER_MAPPINGS": json.dumps({BREAKER: [aws.mapping]}),
    }
    if function == "payment":
        build = payment_module.create_handler
    elif function == "deferred_payments":
        build = consumer_module.create_consumer
    else:
        gate_app = load_function("breaker_gate")

        def build(variables: dict[str, str]) -> Any:
            class Built:  # the gate builds a breaker per name: one stands for them all
                breaker = gate_app.create_gate(variables).breaker(BREAKER)

            return Built

    # WHEN it builds its handler, THEN its breaker carries the transition listener, and
    # without the variable it does not
    with_listener = build(env).breaker.listeners
    without = build({k: v for k, v in env.items() if k != "BREAKER_MAPPINGS"}).breaker.listeners
    assert [type(x).__name__ for x in with_listener if isinstance(x, shared.TransitionListener)]
    assert not [x for x in without if isinstance(x, shared.TransitionListener)]
