"""One `store` fixture, parametrised over every backend the contract must hold on.

Which backend covers what (each row is exercised by every contract test):

| backend            | what it proves                                                     |
|--------------------|--------------------------------------------------------------------|
| memory             | the reference: the pure rules applied under a lock                 |
| moto (in-process)  | our UpdateItem/ConditionExpression/ALL_OLD use, as moto models it  |
| moto server        | the same over real HTTP on loopback (wire protocol, timeouts)      |
| dynalite           | an independent DynamoDB implementation; it ignores                 |
|                    | ReturnValuesOnConditionCheckFailure, so the store's GetItem        |
|                    | fallback after a lost race is what runs there                      |
| redis              | RedisStore's Lua scripts on a real redis-server                    |
| fallback           | FallbackStore passing every operation to a healthy shared store    |
|                    | (through its deadline worker)                                      |
| degraded           | FallbackStore whose shared store always fails: every answer comes  |
|                    | from its local twin (operator overrides excepted: they must reach  |
|                    | the shared store, so `shared_store` leaves this backend out)       |

Neither moto nor dynalite deletes items on TTL; the TTL tests pass because the store treats
an item past `expires_at` as absent on read and as replaceable on write, which is exactly
what real DynamoDB (which deletes lazily, up to days late) requires too.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devtools import servers
from fleetbreaker import DynamoDBStore, MemoryStore, RedisStore
from fleetbreaker.stores.fallback import FallbackStore
from tests.support import FlakyStore

StoreFactory = Callable[[], Any]
T0 = 1_700_000_000_000  # the contract's "now" (test_store_contract.T0)


@pytest.fixture(scope="session")
def moto_server_table(moto_server: str) -> tuple[str, str]:
    return moto_server, servers.make_table(moto_server)


@pytest.fixture(scope="session")
def dynalite_table(dynalite_server: str) -> tuple[str, str]:
    return dynalite_server, servers.make_table(dynalite_server)


@pytest.fixture
def moto_inprocess_store() -> Iterator[DynamoDBStore]:
    from moto import mock_aws

    with mock_aws():
        client = servers.dynamodb_client(None)
        client.create_table(
            TableName="CircuitBreakers",
            KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield DynamoDBStore("CircuitBreakers", boto3_client=client)


@pytest.fixture
def redis_contract_store(redis_server: str) -> Iterator[RedisStore]:
    # The contract passes explicit epoch-ms times (T0 is in 2023), so the scripts must use
    # the caller's clock; tests/redis/ covers the default, the server's TIME.
    store = RedisStore(url=redis_server, use_server_time=False, socket_timeout=5.0)
    yield store
    store.close()


STORE_BACKENDS = ["memory", "moto", "moto_server", "dynalite", "redis", "fallback", "degraded"]
# moto's in-process backend does not serialise UpdateItem calls from several threads (two
# conditional writes can both pass their check), so it cannot stand in for DynamoDB's
# per-item atomicity. Race tests use every other backend; the moto server is launched behind
# a lock for the same reason (devtools/servers.py).
ATOMIC_BACKENDS = [b for b in STORE_BACKENDS if b != "moto"]


@pytest.fixture(params=STORE_BACKENDS)
def store(request: pytest.FixtureRequest) -> Any:
    return make_store(request, request.param)


@pytest.fixture(params=ATOMIC_BACKENDS)
def atomic_store(request: pytest.FixtureRequest) -> Any:
    return make_store(request, request.param)


# Operator tools (the CLI, listing, tuning) talk to the shared store itself, never through a
# breaker's FallbackStore: they run the operator contract on the real stores only.
ADMIN_BACKENDS = [b for b in STORE_BACKENDS if b not in ("fallback", "degraded")]


@pytest.fixture(params=ADMIN_BACKENDS)
def admin_store(request: pytest.FixtureRequest) -> Any:
    return make_store(request, request.param)


@pytest.fixture(params=[b for b in STORE_BACKENDS if b != "degraded"])
def shared_store(request: pytest.FixtureRequest) -> Any:
    """Every backend that can take an operator override (a degraded one refuses it)."""
    return make_store(request, request.param)


def make_store(request: pytest.FixtureRequest, backend: str) -> Any:
    if backend == "memory":
        return MemoryStore()
    if backend == "moto":
        return request.getfixturevalue("moto_inprocess_store")
    if backend == "moto_server":
        endpoint, table = request.getfixturevalue("moto_server_table")
        return DynamoDBStore(table, boto3_client=servers.dynamodb_client(endpoint))
    if backend == "dynalite":
        endpoint, table = request.getfixturevalue("dynalite_table")
        return DynamoDBStore(table, boto3_client=servers.dynamodb_client(endpoint))
    if backend == "redis":
        return request.getfixturevalue("redis_contract_store")
    if backend == "fallback":
        # A MemoryStore subclass: a plain MemoryStore would skip the deadline worker.
        return FallbackStore(FlakyStore(), clock=lambda: T0)
    if backend == "degraded":
        down = FlakyStore()
        down.down = True
        return FallbackStore(down, clock=lambda: T0)
    raise AssertionError(backend)


@pytest.fixture
def name() -> str:
    """A breaker name no other test uses (servers are shared by the session)."""
    return f"contract-{uuid.uuid4().hex[:12]}"
