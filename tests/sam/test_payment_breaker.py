"""The payment function and the fleet-wide breaker, end to end on local servers.

Real DynamoDB wire protocol (moto's server), a real HTTP provider (a threaded http.server),
several "containers" (handlers built by create_handler) sharing one table and one hand-moved
clock. Time moves only when the test says so.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import pytest

from devtools.payment_api import FakePaymentApi
from devtools.servers import dynamodb_client
from tests.sam.conftest import invoke, payment_event
from tests.support import FakeClock


def stored_state(endpoint: str, table: str, name: str) -> str | None:
    """The breaker's state as the table holds it (read with a client of the test's own)."""
    item = dynamodb_client(endpoint).get_item(
        TableName=table, Key={"name": {"S": name}}, ConsistentRead=True
    )
    state = item.get("Item", {}).get("state", {}).get("S")
    return state if isinstance(state, str) else None


def test_fails_opens_then_recovers_through_one_probe(
    payment_module: ModuleType,
    payment_env: dict[str, str],
    payment_api: FakePaymentApi,
    payment_table: str,
    moto_server: str,
) -> None:
    # GIVEN two containers sharing one breaker (3 failures open it for 30 s) and a failing API
    env = {**payment_env, "BREAKER_FAILURE_THRESHOLD": "3", "BREAKER_RECOVERY_TIMEOUT": "30"}
    clock = FakeClock()
    a = payment_module.create_handler(env, clock=clock, endpoint_url=moto_server)
    b = payment_module.create_handler(env, clock=clock, endpoint_url=moto_server)
    name = env["BREAKER_NAME"]
    payment_api.mode = "fail"

    # WHEN three payments fail, spread over both containers
    statuses = [invoke(handler, payment_event())[0] for handler in (a, b, a)]

    # THEN each is a 502 that reached the API, and the third opened the shared breaker
    assert statuses == [502, 502, 502]
    assert payment_api.calls == 3
    assert stored_state(moto_server, payment_table, name) == "open"

    # WHEN both containers take payments after their cached copy has aged (cache_ttl 1 s)
    clock.advance(2)
    rejected = [invoke(handler, payment_event()) for handler in (b, a)]

    # THEN both answer 503 with Retry-After, naming the breaker and its state, without the API
    for status, headers, body in rejected:
        assert status == 503
        assert headers["Retry-After"] == "28"
        assert body["breaker"] == name
        assert body["state"] == "open"
        assert body["retry_after"] == 28
    assert payment_api.calls == 3

    # WHEN the open window has passed, the API has recovered, and container A's payment is
    # held in flight at the API
    clock.advance(30)
    payment_api.mode = "hold"
    payment_api.arrived.clear()
    with ThreadPoolExecutor(1) as pool:
        probe = pool.submit(invoke, a, payment_event())
        assert payment_api.arrived.wait(5), "the probe never reached the API"

        # THEN that payment is the one probe: B and a fresh container C are turned away
        c = payment_module.create_handler(env, clock=clock, endpoint_url=moto_server)
        for handler in (b, c):
            status, headers, body = invoke(handler, payment_event())
            assert status == 503
            assert body["state"] == "half_open"
            assert int(headers["Retry-After"]) >= 1
        assert payment_api.calls == 4

        # WHEN the API answers the probe
        payment_api.release()
        probe_status, _, probe_body = probe.result(timeout=5)

    # THEN the probe's payment succeeds and the breaker is closed for the whole fleet
    assert probe_status == 200
    assert probe_body["result"]["status"] == "succeeded"
    assert stored_state(moto_server, payment_table, name) == "closed"
    clock.advance(2)
    assert [invoke(handler, payment_event())[0] for handler in (b, c, a)] == [200, 200, 200]
    assert payment_api.calls == 7
    for handler in (a, b, c):
        assert not handler.breaker.degraded, "every container used the table"


def test_provider_timeouts_count_as_failures(
    payment_module: ModuleType,
    payment_env: dict[str, str],
    payment_api: FakePaymentApi,
    moto_server: str,
) -> None:
    # GIVEN a provider that does not answer within the 0.2 s read timeout; 2 failures open
    env = {**payment_env, "BREAKER_FAILURE_THRESHOLD": "2", "PAYMENT_READ_TIMEOUT": "0.2"}
    handler = payment_module.create_handler(env, clock=FakeClock(), endpoint_url=moto_server)
    payment_api.mode = "hold"
    payment_api.hold_timeout = 1.0

    # WHEN three payments are taken
    first, second, third = (invoke(handler, payment_event()) for _ in range(3))

    # THEN two time out as 502s and open the circuit; the third is a 503 that never left
    assert (first[0], second[0]) == (502, 502)
    assert "timed out" in first[2]["message"]
    assert third[0] == 503
    assert payment_api.calls == 2


def test_a_payment_the_recovery_ramp_turns_away_says_the_circuit_is_recovering(
    payment_module: ModuleType,
    payment_env: dict[str, str],
    payment_api: FakePaymentApi,
    moto_server: str,
) -> None:
    # GIVEN a breaker with a 30 s recovery ramp, opened by one failure, whose probe then
    # succeeds: it has just closed
    env = {
        **payment_env,
        "BREAKER_FAILURE_THRESHOLD": "1",
        "BREAKER_RECOVERY_TIMEOUT": "5",
        "BREAKER_RECOVERY_RAMP_SECONDS": "30",
    }
    clock = FakeClock()
    handler = payment_module.create_handler(env, clock=clock, endpoint_url=moto_server)
    payment_api.mode = "fail"
    assert invoke(handler, payment_event())[0] == 502
    clock.advance(6)
    payment_api.mode = "ok"
    assert invoke(handler, payment_event())[0] == 200  # the probe closes it

    # WHEN payments arrive right after the close (the ramp admits about 10 % of them)
    answers = [invoke(handler, payment_event()) for _ in range(30)]

    # THEN those turned away are 503s that say the circuit is recovering, not "closed"
    turned_away = [(headers, body) for status, headers, body in answers if status == 503]
    assert turned_away, "the ramp admitted every payment right after the close"
    for headers, body in turned_away:
        assert "is recovering" in body["message"]
        assert body["recovering"] is True
        assert body["state"] == "closed"
        assert int(headers["Retry-After"]) >= 1


def test_declined_payment_is_not_a_provider_failure(
    payment_module: ModuleType,
    payment_env: dict[str, str],
    payment_api: FakePaymentApi,
    moto_server: str,
) -> None:
    # GIVEN a breaker that opens on the first failure, and a provider that declines
    env = {**payment_env, "BREAKER_FAILURE_THRESHOLD": "1"}
    handler = payment_module.create_handler(env, clock=FakeClock(), endpoint_url=moto_server)
    payment_api.mode = "decline"

    # WHEN a payment is declined, then another one is taken
    declined = invoke(handler, payment_event())
    payment_api.mode = "ok"
    following = invoke(handler, payment_event())

    # THEN the decline is a 422 with the provider's answer, and it did not open the circuit
    assert declined[0] == 422
    assert declined[2]["provider_status"] == 402
    assert declined[2]["provider_response"] == {"error": "card_declined"}
    assert following[0] == 200
    assert payment_api.calls == 2


def test_unreachable_table_does_not_block_payments(
    payment_module: ModuleType,
    payment_env: dict[str, str],
    payment_api: FakePaymentApi,
    refused_port: int,
) -> None:
    # GIVEN a DynamoDB endpoint that refuses connections
    handler = payment_module.create_handler(
        payment_env, clock=FakeClock(), endpoint_url=f"http://127.0.0.1:{refused_port}"
    )

    # WHEN a payment is taken
    status, _, body = invoke(handler, payment_event())

    # THEN it is charged: the breaker fell back to its per-container state
    assert status == 200, body
    assert handler.breaker.degraded
    assert payment_api.calls == 1


def test_a_store_given_to_create_handler_replaces_the_table(
    payment_module: ModuleType,
    payment_env: dict[str, str],
    payment_api: FakePaymentApi,
    payment_table: str,
    moto_server: str,
) -> None:
    # GIVEN two containers, each with a MemoryStore of its own (per-container breakers);
    # one failure opens a breaker
    from fleetbreaker import MemoryStore

    env = {**payment_env, "BREAKER_FAILURE_THRESHOLD": "1"}
    clock = FakeClock()
    a_store, b_store = MemoryStore(), MemoryStore()
    a = payment_module.create_handler(env, clock=clock, endpoint_url=moto_server, store=a_store)
    b = payment_module.create_handler(env, clock=clock, endpoint_url=moto_server, store=b_store)
    payment_api.mode = "fail"

    # WHEN container A's payment fails, then each container takes a payment
    assert invoke(a, payment_event())[0] == 502
    after = [invoke(handler, payment_event())[0] for handler in (a, b)]

    # THEN only A's breaker opened: B knows nothing of it and still calls the provider
    assert after == [503, 502]
    assert payment_api.calls == 2
    assert a.breaker.store is a_store
    assert b.breaker.store is b_store
    assert a_store.stats.writes >= 1
    # AND the table was never used
    assert stored_state(moto_server, payment_table, env["BREAKER_NAME"]) is None


# --------------------------------------------------------------------------- defer mode


@pytest.fixture
def deferred_queue(moto_server: str) -> str:
    import boto3

    sqs = boto3.client("sqs", endpoint_url=moto_server, region_name="us-east-1")
    url: str = sqs.create_queue(QueueName=f"deferred-{uuid.uuid4().hex[:12]}")["QueueUrl"]
    return url


def received(moto_server: str, queue_url: str) -> list[Any]:
    import boto3

    sqs = boto3.client("sqs", endpoint_url=moto_server, region_name="us-east-1")
    answer = sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    )
    return list(answer.get("Messages", []))


def test_defer_mode_queues_payments_while_open(
    payment_module: ModuleType,
    payment_env: dict[str, str],
    payment_api: FakePaymentApi,
    moto_server: str,
    deferred_queue: str,
) -> None:
    # GIVEN defer mode, a breaker that opens on the first failure, and a failing provider
    env = {
        **payment_env,
        "BREAKER_FAILURE_THRESHOLD": "1",
        "OPEN_CIRCUIT_MODE": "defer",
        "DEFERRED_PAYMENTS_QUEUE_URL": deferred_queue,
    }
    handler = payment_module.create_handler(env, clock=FakeClock(), endpoint_url=moto_server)
    payment_api.mode = "fail"
    assert invoke(handler, payment_event())[0] == 502

    # WHEN a payment arrives while the circuit is open
    status, headers, body = invoke(handler, payment_event(idempotency_key="deferred-1"))

    # THEN it is accepted for later (202), is in the queue, and never reached the provider
    assert status == 202
    assert body["state"] == "open"
    assert body["breaker"] == env["BREAKER_NAME"]
    assert "Retry-After" not in headers
    [message] = received(moto_server, deferred_queue)
    assert message["MessageId"] == body["message_id"]
    assert '"idempotency_key": "deferred-1"' in message["Body"]
    assert message["MessageAttributes"]["state"]["StringValue"] == "open"
    assert payment_api.calls == 1


def test_defer_mode_answers_503_when_the_queue_fails(
    payment_module: ModuleType,
    payment_env: dict[str, str],
    payment_api: FakePaymentApi,
    moto_server: str,
) -> None:
    # GIVEN defer mode with a queue that does not exist, and an open circuit
    env = {
        **payment_env,
        "BREAKER_FAILURE_THRESHOLD": "1",
        "OPEN_CIRCUIT_MODE": "defer",
        "DEFERRED_PAYMENTS_QUEUE_URL": f"{moto_server}/123456789012/no-such-queue",
    }
    handler = payment_module.create_handler(env, clock=FakeClock(), endpoint_url=moto_server)
    payment_api.mode = "fail"
    assert invoke(handler, payment_event())[0] == 502

    # WHEN a payment arrives
    status, headers, body = invoke(handler, payment_event())

    # THEN it is not claimed as accepted: 503 with Retry-After, as without defer mode
    assert status == 503
    assert int(headers["Retry-After"]) >= 1
    assert body["state"] == "open"
