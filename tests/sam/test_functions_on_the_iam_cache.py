"""Every function that keeps a breaker, run with the environment its stack gives it, on a cache
that admits only the cache's IAM user (the template's ``BreakerStore=redis``).

The environment is the template's, resolved for the Redis + defer parameter set
(devtools.sam_template.function_environment) with local stand-ins for the stack's resources:
the stack's ``rediss://`` endpoint becomes the local redis-server's ``redis://`` URL, and the
table, queue and mapping live on moto's server. To that the tests add only what the Lambda
runtime sets (``AWS_REGION``) and a generous store deadline (a loaded machine must not turn a
slow answer into a local breaker; tests/faults covers the deadline).

The redis-server follows the cache's rules: its ``default`` user is off and the only user the
functions may log in as is the cache's IAM user, with the template's access string. A
redis-server cannot check a SigV4 token, so that user's passwords are exactly the tokens
ElastiCacheIAMAuth signs, with the test's credentials, for that user, cache and region, for
each second of the test's few minutes: a function that does not log in as that user, for
that cache, with IAM, is refused, and its breaker runs on local state.
"""

from __future__ import annotations

import io
import json
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
import redis

from devtools.lambda_context import FakeLambdaContext
from devtools.payment_api import FakePaymentApi
from devtools.sam_template import REDIS, REGION, function_environment, load_template
from devtools.servers import RedisServer, dynamodb_client
from devtools.sqs_event_source import SqsEventSource
from fleetbreaker import RedisStore
from fleetbreaker.stores.elasticache_iam import ElastiCacheIAMAuth
from tests.sam.conftest import invoke, payment_event
from tests.support import FakeClock

CACHE = "fleetbreaker-1a2b3c4d"
USER = "fleetbreaker-1a2b3c4d"
# Tokens are signed per second: the IAM user accepts those of this many seconds from the
# fixture's start (a test builds its functions well within it).
TOKEN_WINDOW_S = 600
# Not a template variable: see the module docstring.
TEST_ONLY = {"AWS_REGION": REGION, "BREAKER_STORE_DEADLINE_SECONDS": "30"}


@dataclass
class IamCache:
    server: RedisServer
    admin: Any  # redis.Redis: its execute_command is untyped

    def state(self, store_key: str) -> str | None:
        value = self.admin.hget(store_key, "state")
        return value.decode() if isinstance(value, bytes) else value


def at(second: int) -> Callable[[], float]:
    """A clock stopped at ``second``."""
    return lambda: float(second)


@pytest.fixture
def iam_cache(redis_factory: Callable[[], RedisServer]) -> Iterator[IamCache]:
    """A redis-server admitting, as the functions' user, only the cache's IAM user."""
    import botocore.session

    access = load_template()["Resources"]["BreakerCacheUser"]["Properties"]["AccessString"]
    credentials = botocore.session.get_session().get_credentials()
    start = int(time.time()) - 5
    tokens = [
        ElastiCacheIAMAuth(USER, CACHE, REGION, credentials=credentials, clock=at(t)).token()
        for t in range(start, start + TOKEN_WINDOW_S)
    ]
    server = redis_factory()
    admin: Any = redis.Redis(host="127.0.0.1", port=server.port)
    admin.execute_command("ACL", "SETUSER", "admin", "on", ">admin-secret", "~*", "&*", "+@all")
    admin.execute_command("AUTH", "admin", "admin-secret")
    admin.execute_command("ACL", "SETUSER", "default", "off")
    admin.execute_command(
        "ACL", "SETUSER", USER, "reset", *access.split(), *(f">{t}" for t in tokens)
    )
    try:
        yield IamCache(server, admin)
    finally:
        admin.close()


def _function_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", "def lambda_handler(event, context):\n    return {}\n")
    return buffer.getvalue()


@dataclass
class Stack:
    """Local stand-ins for the resources the functions' environments name."""

    parameters: dict[str, str]
    resources: dict[str, str]
    mapping: str
    queue_url: str
    breaker: str

    def environment(self, function: str) -> dict[str, str]:
        env = function_environment(load_template(), function, self.parameters, self.resources)
        return {**env, **TEST_ONLY}


@pytest.fixture
def stack(
    moto_server: str, payment_table: str, payment_api: FakePaymentApi, iam_cache: IamCache
) -> Stack:
    import boto3

    def client(service: Any) -> Any:
        return boto3.client(service, endpoint_url=moto_server, region_name=REGION)

    suffix = uuid.uuid4().hex[:12]
    sqs = client("sqs")
    queue_url = sqs.create_queue(QueueName=f"deferred-{suffix}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    role = client("iam").create_role(RoleName=f"consumer-{suffix}", AssumeRolePolicyDocument="{}")
    lambdas = client("lambda")
    lambdas.create_function(
        FunctionName=f"deferred-payments-{suffix}",
        Runtime="python3.13",
        Role=role["Role"]["Arn"],
        Handler="app.lambda_handler",
        Code={"ZipFile": _function_zip()},
    )
    mapping = lambdas.create_event_source_mapping(
        EventSourceArn=queue_arn,
        FunctionName=f"deferred-payments-{suffix}",
        FunctionResponseTypes=["ReportBatchItemFailures"],
    )["UUID"]
    idempotency = f"idempotency-{suffix}"
    dynamodb_client(moto_server).create_table(
        TableName=idempotency,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    breaker = f"payment-{suffix}"
    parameters = {
        **REDIS,
        "OpenCircuitMode": "defer",
        "PaymentApiUrl": payment_api.url,
        "BreakerName": breaker,
        "FailureThreshold": "2",
    }
    resources = {
        "CircuitBreakersTable": payment_table,
        "BreakerCache": CACHE,
        "BreakerCacheUser": USER,
        # The stack's rediss:// endpoint is the local (plain) redis-server: see the docstring.
        "BreakerCache.Endpoint.Address": "127.0.0.1",
        "BreakerCache.Endpoint.Port": str(iam_cache.server.port),
        "DeferredPaymentsQueue": queue_url,
        "DeferredPaymentsIdempotencyTable": idempotency,
        "DeferredPaymentsMapping": mapping,
    }
    return Stack(parameters, resources, mapping, queue_url, breaker)


def local(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the stack's TLS URL pointing at the local plain redis-server."""
    url = env["CIRCUIT_BREAKER_REDIS_URL"]
    assert url.startswith("rediss://"), url
    return {**env, "CIRCUIT_BREAKER_REDIS_URL": "redis://" + url.removeprefix("rediss://")}


def payment_function(payment_module: ModuleType, stack: Stack, moto: str) -> Any:
    env = local(stack.environment("PaymentFunction"))
    return payment_module.create_handler(env, clock=FakeClock(), endpoint_url=moto)


def trip_through_the_payment_function(
    payment_module: ModuleType, stack: Stack, payment_api: FakePaymentApi, moto: str
) -> Any:
    handler = payment_function(payment_module, stack, moto)
    payment_api.mode = "fail"
    assert [invoke(handler, payment_event())[0] for _ in range(2)] == [502, 502]
    return handler


def test_the_cache_refuses_a_function_that_does_not_log_in_as_its_iam_user(
    payment_module: ModuleType,
    stack: Stack,
    iam_cache: IamCache,
    payment_api: FakePaymentApi,
    moto_server: str,
) -> None:
    # GIVEN the payment function's environment without the IAM login (the consumer's before)
    env = local(stack.environment("PaymentFunction"))
    for variable in ("CIRCUIT_BREAKER_REDIS_IAM_USER", "CIRCUIT_BREAKER_REDIS_IAM_CACHE"):
        del env[variable]
    handler = payment_module.create_handler(env, clock=FakeClock(), endpoint_url=moto_server)
    payment_api.mode = "fail"

    # WHEN two payments fail
    assert [invoke(handler, payment_event())[0] for _ in range(2)] == [502, 502]

    # THEN the breaker ran on local state and the fleet's record was never written
    assert handler.breaker.degraded
    assert iam_cache.state(handler.breaker.store.key(stack.breaker)) is None


def test_the_payment_function_trips_the_breaker_in_the_cache(
    payment_module: ModuleType,
    stack: Stack,
    iam_cache: IamCache,
    payment_api: FakePaymentApi,
    moto_server: str,
) -> None:
    # GIVEN the payment function as the Redis stack configures it, and a failing provider
    # WHEN FailureThreshold payments fail
    handler = trip_through_the_payment_function(payment_module, stack, payment_api, moto_server)

    # THEN it logged in as the IAM user and the fleet's record in the cache is open
    assert isinstance(handler.breaker.store, RedisStore)
    assert not handler.breaker.degraded
    assert iam_cache.state(handler.breaker.store.key(stack.breaker)) == "open"


def test_the_consumer_trips_the_breaker_in_the_cache(
    consumer_module: ModuleType,
    stack: Stack,
    iam_cache: IamCache,
    payment_api: FakePaymentApi,
    moto_server: str,
) -> None:
    # GIVEN the consumer as the Redis + defer stack configures it, and a failing provider
    consumer = consumer_module.create_consumer(
        local(stack.environment("DeferredPaymentsFunction")),
        clock=FakeClock(),
        endpoint_url=moto_server,
    )
    source = SqsEventSource(_sqs(moto_server), stack.queue_url)
    payment_api.mode = "fail"
    for key in ("deferred-1", "deferred-2"):
        _send(moto_server, stack.queue_url, key)

    # WHEN it charges the deferred payments and the provider fails them
    batch = source.poll(consumer, FakeLambdaContext())

    # THEN both failures counted in the fleet's record, which opened
    assert batch is not None
    assert len(batch.failed) == 2
    assert payment_api.calls == 2
    assert not consumer.breaker.degraded
    assert iam_cache.state(consumer.breaker.store.key(stack.breaker)) == "open"


def test_a_trip_by_the_payment_function_stops_the_consumer(
    payment_module: ModuleType,
    consumer_module: ModuleType,
    stack: Stack,
    payment_api: FakePaymentApi,
    moto_server: str,
) -> None:
    # GIVEN the payment function opened the fleet's breaker in the cache
    trip_through_the_payment_function(payment_module, stack, payment_api, moto_server)
    consumer = consumer_module.create_consumer(
        local(stack.environment("DeferredPaymentsFunction")),
        clock=FakeClock(),
        endpoint_url=moto_server,
    )
    _send(moto_server, stack.queue_url, "deferred-while-open")
    before = payment_api.calls

    # WHEN the consumer receives a deferred payment
    batch = SqsEventSource(_sqs(moto_server), stack.queue_url).poll(consumer, FakeLambdaContext())

    # THEN it leaves it queued without calling the provider: it sees the fleet's open breaker
    assert batch is not None
    assert len(batch.failed) == 1
    assert payment_api.calls == before
    assert not consumer.breaker.degraded


def test_the_gate_trips_the_breaker_in_the_cache(
    stack: Stack, iam_cache: IamCache, moto_server: str
) -> None:
    from devtools.functions import load_function

    # GIVEN the gate as the Redis stack configures it (the workflow's breaker only)
    gate_module = load_function("breaker_gate")
    env = local(stack.environment("BreakerGateFunction"))
    gate = gate_module.create_gate(env, clock=FakeClock(), endpoint_url=moto_server)
    name = env["GATE_ALLOWED_BREAKERS"]
    record = {"action": "record", "breaker": name, "outcome": "failure", "token": None}

    # WHEN the workflow records FailureThreshold failures
    answers = [gate.handle(record) for _ in range(2)]

    # THEN the fleet's record in the cache is open
    assert answers[-1]["state"] == "open"
    breaker = gate.breaker(name)
    assert not breaker.degraded
    assert iam_cache.state(breaker.store.key(name)) == "open"


def test_breaker_events_reads_the_trip_from_the_cache(
    payment_module: ModuleType,
    stack: Stack,
    payment_api: FakePaymentApi,
    moto_server: str,
) -> None:
    import boto3

    from devtools.functions import load_function

    # GIVEN the payment function opened the breaker (and paused the consumer itself), and the
    # consumer's mapping was enabled again behind its back (a toggle that failed)
    trip_through_the_payment_function(payment_module, stack, payment_api, moto_server)
    lambdas = boto3.client("lambda", endpoint_url=moto_server, region_name=REGION)
    lambdas.update_event_source_mapping(UUID=stack.mapping, Enabled=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("BREAKER_MAPPINGS", raising=False)  # its import-time handler
        events_module = load_function("breaker_events")
    handler = events_module.create_handler(
        local(stack.environment("BreakerEventsFunction")), endpoint_url=moto_server
    )

    # WHEN its scheduled check runs
    answer = handler({"source": "aws.events"}, FakeLambdaContext())

    # THEN it read the open record from the cache and paused the consumer again
    assert answer == {"changed": {stack.breaker: [stack.mapping]}, "corrupt": []}
    assert lambdas.get_event_source_mapping(UUID=stack.mapping)["State"] == "Disabled"


def _sqs(moto_server: str) -> Any:
    import boto3

    return boto3.client("sqs", endpoint_url=moto_server, region_name=REGION)


def _send(moto_server: str, queue_url: str, key: str) -> None:
    body = {"amount": 1250, "currency": "EUR", "idempotency_key": key}
    _sqs(moto_server).send_message(QueueUrl=queue_url, MessageBody=json.dumps(body))
