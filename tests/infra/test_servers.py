"""The test backends themselves: each fixture serves the real thing, and fault helpers fault."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

import pytest
import redis
from botocore.exceptions import ClientError

from devtools.servers import BlackholeServer, RedisServer, dynamodb_client, make_table


def test_aws_environment_is_sanitised() -> None:
    assert not [k for k in os.environ if k.startswith("AWS_ENDPOINT_URL")]
    assert os.environ["AWS_DEFAULT_REGION"]
    assert os.environ["AWS_ACCESS_KEY_ID"]


def test_moto_server_answers_list_tables(moto_server: str) -> None:
    client = dynamodb_client(moto_server)
    table = make_table(moto_server)
    # the server is shared by every test of the worker: past 100 tables ListTables pages
    pages = client.get_paginator("list_tables").paginate()
    assert table in [name for page in pages for name in page["TableNames"]]


@pytest.fixture(params=["moto_server", "dynalite_server"])
def dynamodb_endpoint(request: pytest.FixtureRequest) -> str:
    endpoint: str = request.getfixturevalue(request.param)
    return endpoint


def test_make_table_schema(dynamodb_endpoint: str) -> None:
    client = dynamodb_client(dynamodb_endpoint)
    desc = client.describe_table(TableName=make_table(dynamodb_endpoint))["Table"]
    assert desc["TableStatus"] == "ACTIVE"
    assert desc["KeySchema"] == [{"AttributeName": "name", "KeyType": "HASH"}]
    assert desc["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"


def test_make_table_accepts_a_name(dynamodb_endpoint: str) -> None:
    assert make_table(dynamodb_endpoint, "named-table-for-test") == "named-table-for-test"


def test_conditional_update_item(dynamodb_endpoint: str) -> None:
    client = dynamodb_client(dynamodb_endpoint)
    table = make_table(dynamodb_endpoint)
    key = {"name": {"S": "payment-api"}}

    def bump(expected: int) -> None:
        client.update_item(
            TableName=table,
            Key=key,
            UpdateExpression="SET generation = :next",
            ConditionExpression="attribute_not_exists(generation) OR generation = :expected",
            ExpressionAttributeValues={
                ":expected": {"N": str(expected)},
                ":next": {"N": str(expected + 1)},
            },
        )

    bump(0)  # item absent: creates it
    bump(1)
    with pytest.raises(ClientError) as excinfo:
        bump(1)  # stale generation: fenced out
    assert excinfo.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    item = client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    assert item["generation"] == {"N": "2"}


def test_redis_ping(redis_server: str) -> None:
    client = redis.Redis.from_url(redis_server, socket_timeout=2)
    try:
        assert client.ping() is True
    finally:
        client.close()


def test_redis_server_stop_and_restart(redis_factory: Callable[[], RedisServer]) -> None:
    server = redis_factory()
    client = redis.Redis.from_url(server.url, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.set("k", "v")
        server.kill()
        with pytest.raises(redis.ConnectionError):
            client.ping()
        port = server.port
        server.restart()
        assert server.port == port
        assert client.ping() is True
        assert client.get("k") is None  # nothing persisted across the restart
    finally:
        client.close()


def test_blackhole_never_answers(blackhole: BlackholeServer) -> None:
    with socket.create_connection(blackhole.address, timeout=2) as sock:
        sock.sendall(b"PING\r\n")
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(1)


def test_refused_port_refuses(refused_port: int) -> None:
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", refused_port), timeout=2).close()
