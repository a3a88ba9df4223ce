"""The deferred-payments consumer on a real queue and real tables (moto's server).

Payments are deferred by the payment function itself (defer mode, open circuit), received from
an SQS queue with a dead-letter queue, and settled the way Lambda's event source mapping
settles a batch with ``ReportBatchItemFailures`` (devtools.sqs_event_source). The provider is
the fake HTTP payment API, which counts the requests it receives, per idempotency key.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from types import ModuleType
from typing import Any

import pytest

from devtools.lambda_context import FakeLambdaContext
from devtools.payment_api import FakePaymentApi
from devtools.servers import dynamodb_client
from devtools.sqs_event_source import SqsEventSource
from tests.sam.conftest import invoke, payment_event
from tests.support import FakeClock

MAX_RECEIVES = 3


def sqs_client(endpoint: str) -> Any:
    import boto3

    return boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1")


def make_idempotency_table(endpoint: str) -> str:
    """The consumer's idempotency table, as the template declares it (partition key ``id``)."""
    name = f"idempotency-{uuid.uuid4().hex[:12]}"
    dynamodb_client(endpoint).create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


@pytest.fixture
def queues(moto_server: str) -> tuple[str, str]:
    """A deferred-payments queue whose messages move to a dead-letter queue after 3 receives."""
    sqs = sqs_client(moto_server)
    suffix = uuid.uuid4().hex[:12]
    dlq = sqs.create_queue(QueueName=f"deferred-dlq-{suffix}")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVES)}
    queue = sqs.create_queue(
        QueueName=f"deferred-{suffix}",
        Attributes={"RedrivePolicy": json.dumps(redrive), "VisibilityTimeout": "180"},
    )["QueueUrl"]
    return queue, dlq


@pytest.fixture
def env(payment_env: dict[str, str], queues: tuple[str, str], moto_server: str) -> dict[str, str]:
    """One breaker (opens on the first failure, 30 s), defer mode, an idempotency table."""
    return {
        **payment_env,
        "BREAKER_FAILURE_THRESHOLD": "1",
        "BREAKER_RECOVERY_TIMEOUT": "30",
        "OPEN_CIRCUIT_MODE": "defer",
        "DEFERRED_PAYMENTS_QUEUE_URL": queues[0],
        "IDEMPOTENCY_TABLE": make_idempotency_table(moto_server),
    }


@pytest.fixture
def source(moto_server: str, queues: tuple[str, str]) -> SqsEventSource:
    return SqsEventSource(sqs_client(moto_server), queues[0])


def charges(api: FakePaymentApi) -> Counter[str | None]:
    """Requests the provider received, per idempotency key."""
    return Counter(call.idempotency_key for call in api.requests)


def send(moto_server: str, queue: str, body: dict[str, Any] | str) -> None:
    text = body if isinstance(body, str) else json.dumps(body)
    sqs_client(moto_server).send_message(QueueUrl=queue, MessageBody=text)


def payment(key: str, amount: int = 1250) -> dict[str, Any]:
    return {"amount": amount, "currency": "EUR", "idempotency_key": key}


def test_payments_deferred_while_open_are_charged_once_after_recovery(
    consumer_module: ModuleType,
    payment_module: ModuleType,
    env: dict[str, str],
    payment_api: FakePaymentApi,
    source: SqsEventSource,
    moto_server: str,
) -> None:
    # GIVEN the payment API opened the shared breaker on a failure, then deferred two payments
    clock = FakeClock()
    api = payment_module.create_handler(env, clock=clock, endpoint_url=moto_server)
    consumer = consumer_module.create_consumer(env, clock=clock, endpoint_url=moto_server)
    payment_api.mode = "fail"
    assert invoke(api, payment_event())[0] == 502
    for key in ("later-1", "later-2"):
        assert invoke(api, payment_event(payment(key)))[0] == 202
    before = payment_api.calls

    # WHEN the consumer polls while the circuit is still open
    batch = source.poll(consumer, FakeLambdaContext())

    # THEN both messages are reported as failures (the whole batch, without raising), they
    # stay queued, and the provider was not called
    assert batch is not None
    assert sorted(batch.failed) == sorted(r["messageId"] for r in batch.event["Records"])
    assert batch.deleted == []
    assert source.messages_left() == 2
    assert payment_api.calls == before

    # WHEN the open window has passed, the provider has recovered, and they come back
    clock.advance(31)
    payment_api.mode = "ok"
    source.expire_visibility()
    batch = source.poll(consumer, FakeLambdaContext())

    # THEN each is charged exactly once (the first as the breaker's probe), and deleted
    assert batch is not None
    assert batch.failed == []
    assert len(batch.deleted) == 2
    assert charges(payment_api)["later-1"] == 1
    assert charges(payment_api)["later-2"] == 1
    assert source.messages_left() == 0
    assert consumer.breaker.state.value == "closed"


def test_a_redelivered_payment_is_not_charged_twice(
    consumer_module: ModuleType,
    env: dict[str, str],
    payment_api: FakePaymentApi,
    source: SqsEventSource,
    queues: tuple[str, str],
    moto_server: str,
) -> None:
    # GIVEN a deferred payment the consumer has charged
    consumer = consumer_module.create_consumer(env, clock=FakeClock(), endpoint_url=moto_server)
    send(moto_server, queues[0], payment("once-1"))
    first = source.poll(consumer, FakeLambdaContext())
    assert first is not None
    assert len(first.deleted) == 1
    assert charges(payment_api)["once-1"] == 1

    # WHEN the same payment arrives again (the same message redelivered after an invocation
    # that charged it but timed out, and the payment deferred twice by a retrying client)
    consumer(first.event, FakeLambdaContext())
    send(moto_server, queues[0], payment("once-1"))
    again = source.poll(consumer, FakeLambdaContext())

    # THEN both deliveries succeed from the stored outcome, without a second charge
    assert again is not None
    assert again.failed == []
    assert len(again.deleted) == 1
    assert charges(payment_api)["once-1"] == 1


def test_a_provider_failure_fails_only_that_message(
    consumer_module: ModuleType,
    env: dict[str, str],
    payment_api: FakePaymentApi,
    source: SqsEventSource,
    queues: tuple[str, str],
    moto_server: str,
) -> None:
    # GIVEN three deferred payments; the provider fails the one keyed "flaky-2" (and the
    # breaker needs five failures to open)
    consumer = consumer_module.create_consumer(
        {**env, "BREAKER_FAILURE_THRESHOLD": "5"}, clock=FakeClock(), endpoint_url=moto_server
    )

    def fail_flaky() -> None:
        if payment_api.requests[-1].idempotency_key == "flaky-2":
            payment_api.answer(503)
        else:
            payment_api.mode = "ok"

    payment_api.on_call = fail_flaky
    for key in ("flaky-1", "flaky-2", "flaky-3"):
        send(moto_server, queues[0], payment(key))

    # WHEN the consumer gets them in one batch
    batch = source.poll(consumer, FakeLambdaContext())

    # THEN only the failed one is reported back (a partial batch failure), the others are
    # charged and deleted
    assert batch is not None
    by_key = {
        json.loads(r["body"])["idempotency_key"]: r["messageId"] for r in batch.event["Records"]
    }
    assert batch.failed == [by_key["flaky-2"]]
    assert sorted(batch.deleted) == sorted([by_key["flaky-1"], by_key["flaky-3"]])
    assert source.messages_left() == 1

    # WHEN it comes back and the provider is healthy
    payment_api.on_call = None
    payment_api.mode = "ok"
    source.expire_visibility()
    retry = source.poll(consumer, FakeLambdaContext())

    # THEN it is charged: the failed attempt left no idempotency record in the way
    assert retry is not None
    assert retry.failed == []
    assert charges(payment_api)["flaky-2"] == 2  # the failed attempt, and the charge
    assert charges(payment_api)["flaky-1"] == 1
    assert source.messages_left() == 0


def test_the_same_key_with_another_amount_is_refused(
    consumer_module: ModuleType,
    env: dict[str, str],
    payment_api: FakePaymentApi,
    source: SqsEventSource,
    queues: tuple[str, str],
    moto_server: str,
) -> None:
    # GIVEN a charged payment
    consumer = consumer_module.create_consumer(env, clock=FakeClock(), endpoint_url=moto_server)
    send(moto_server, queues[0], payment("same-key", amount=1250))
    assert source.poll(consumer, FakeLambdaContext()) is not None

    # WHEN a message carries its idempotency key with another amount
    send(moto_server, queues[0], payment("same-key", amount=9999))
    batch = source.poll(consumer, FakeLambdaContext())

    # THEN it fails (it goes back, then to the dead-letter queue) and nothing is charged
    assert batch is not None
    assert len(batch.failed) == 1
    assert charges(payment_api)["same-key"] == 1


def test_a_message_that_is_not_a_payment_ends_in_the_dead_letter_queue(
    consumer_module: ModuleType,
    env: dict[str, str],
    payment_api: FakePaymentApi,
    source: SqsEventSource,
    queues: tuple[str, str],
    moto_server: str,
) -> None:
    # GIVEN a valid payment and a message that is not one, in the same batch
    consumer = consumer_module.create_consumer(env, clock=FakeClock(), endpoint_url=moto_server)
    send(moto_server, queues[0], payment("good-1"))
    send(moto_server, queues[0], '{"amount": "lots"}')

    # WHEN the consumer receives them as often as the queue's maxReceiveCount allows
    failed: list[str] = []
    for _ in range(MAX_RECEIVES):
        batch = source.poll(consumer, FakeLambdaContext())
        assert batch is not None
        failed += batch.failed
        source.expire_visibility()

    # THEN the valid one was charged once; the invalid one failed each time, was never sent
    # to the provider, and the next receive moves it to the dead-letter queue
    assert charges(payment_api) == Counter({"good-1": 1})
    assert len(failed) == MAX_RECEIVES
    assert len(set(failed)) == 1
    assert source.poll(consumer, FakeLambdaContext()) is None
    dead = sqs_client(moto_server).receive_message(QueueUrl=queues[1])["Messages"]
    assert [m["Body"] for m in dead] == ['{"amount": "lots"}']


def test_the_consumer_needs_its_idempotency_table(consumer_module: ModuleType) -> None:
    # GIVEN the payment settings without IDEMPOTENCY_TABLE
    env = {"CIRCUIT_BREAKER_TABLE": "t", "PAYMENT_API_URL": "https://pay.test/charges"}

    # WHEN the consumer is built THEN the error names the missing variable
    with pytest.raises(consumer_module.SettingsError, match="IDEMPOTENCY_TABLE is required"):
        consumer_module.create_consumer(env)
