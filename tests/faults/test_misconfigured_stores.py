"""A store that is misconfigured, not out of reach: told apart, said once, counted, and (opted
in) refused at init.

Configuration is a table that does not exist, a table keyed otherwise, access denied and a
login refused: retrying cannot help, someone must change a setting. Each backend says so in
its own words (moto's server, dynalite, a fake front door answering as DynamoDB does, a
redis-server with ACL users), and each becomes a StoreMisconfiguredError naming the variable
that set the store. Weather (a refused connection, a silent server) stays a plain StoreError.
"""

from __future__ import annotations

import http.server
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from devtools import servers
from devtools.rehearsal import client as signed_client
from devtools.servers import RedisServer
from fleetbreaker import BreakerConfig, CircuitBreaker, ConfigError, DynamoDBStore, RedisStore
from fleetbreaker import events as events_module
from fleetbreaker.errors import (
    ACCESS_DENIED,
    AUTHENTICATION_REFUSED,
    TABLE_NOT_FOUND,
    WRONG_KEY_SCHEMA,
    StoreError,
    StoreMisconfiguredError,
)
from fleetbreaker.record import State
from fleetbreaker.stores import from_env
from tests.conftest import IamMoto
from tests.support import Dependency, FakeClock, RecordingListener, make_policy

T0 = 1_767_225_600_000


@pytest.fixture(autouse=True)
def fresh_process_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a fresh container: no misconfiguration logged yet."""
    monkeypatch.setattr(events_module, "reported_misconfigurations", set())


def misconfiguration(operation: Callable[[], Any]) -> StoreMisconfiguredError:
    with pytest.raises(StoreMisconfiguredError) as raised:
        operation()
    return raised.value


# -- DynamoDB: what each backend says, told apart ---------------------------------------------


@pytest.fixture(params=["moto_server", "dynalite_server"])
def endpoint(request: pytest.FixtureRequest) -> str:
    found: str = request.getfixturevalue(request.param)
    return found


def test_a_missing_table_is_table_not_found_naming_its_variable(endpoint: str) -> None:
    # GIVEN a store named by CIRCUIT_BREAKER_TABLE, as functions name it, for a table that
    # does not exist
    store = from_env({"CIRCUIT_BREAKER_TABLE": "NoSuchBreakers"}, endpoint_url=endpoint)

    # WHEN it reads THEN it is told apart from weather, naming the variable
    error = misconfiguration(lambda: store.load("payment-api", T0))
    assert (error.problem, error.variable) == (TABLE_NOT_FOUND, "CIRCUIT_BREAKER_TABLE")
    assert "'NoSuchBreakers' does not exist in region us-east-1" in str(error)


def test_a_table_keyed_otherwise_is_the_wrong_key_schema(endpoint: str) -> None:
    # GIVEN a table whose partition key is "id", not "name"
    table = f"keyed-by-id-{servers.free_port()}"
    client = servers.dynamodb_client(endpoint)
    client.create_table(
        TableName=table,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 0.2})
    store = DynamoDBStore(table, boto3_client=client)

    # WHEN a breaker's record is read THEN the table is wrong, not the weather
    error = misconfiguration(lambda: store.load("payment-api", T0))
    assert (error.problem, error.variable) == (WRONG_KEY_SCHEMA, "table_name")


def test_a_denied_request_is_access_denied(iam_moto: IamMoto) -> None:
    # GIVEN credentials allowed to read breakers, not to update them (moto enforcing IAM)
    table = iam_moto.breaker_table()
    reader = iam_moto.principal("dynamodb:GetItem")
    store = DynamoDBStore(
        table, boto3_client=signed_client(iam_moto.endpoint_url, "dynamodb", reader)
    )
    assert store.load("payment-api", T0) is None

    # WHEN the store writes THEN it is access denied, with AWS's words about the action
    error = misconfiguration(
        lambda: store.force_state("payment-api", make_policy(), T0, State.CLOSED)
    )
    assert error.problem == ACCESS_DENIED
    assert "dynamodb:UpdateItem" in str(error)


def test_refused_credentials_are_authentication_refused(iam_moto: IamMoto) -> None:
    # GIVEN a key whose secret is wrong
    table = iam_moto.breaker_table()
    keys = type(iam_moto.admin)(iam_moto.admin.access_key_id, "not-the-secret")
    store = DynamoDBStore(
        table, boto3_client=signed_client(iam_moto.endpoint_url, "dynamodb", keys)
    )

    # WHEN it reads THEN the credentials are refused (configuration), not the store unreachable
    error = misconfiguration(lambda: store.load("payment-api", T0))
    assert error.problem == AUTHENTICATION_REFUSED


class _AwsFrontDoor(http.server.BaseHTTPRequestHandler):
    """Answers every request as DynamoDB answers a caller its policy does not allow: HTTP 400
    with a JSON AccessDeniedException (moto's IAM check answers in XML instead)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps(
            {
                "__type": "com.amazon.coral.service#AccessDeniedException",
                "Message": "User: arn:aws:sts::123456789012:assumed-role/fn/x is not authorized "
                "to perform: dynamodb:GetItem on resource: arn:aws:dynamodb:us-east-1:"
                "123456789012:table/CircuitBreakers",
            }
        ).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def denying_endpoint() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AwsFrontDoor)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_dynamodbs_own_access_denied_answer_is_access_denied(denying_endpoint: str) -> None:
    store = from_env({"CIRCUIT_BREAKER_TABLE": "CircuitBreakers"}, endpoint_url=denying_endpoint)

    error = misconfiguration(lambda: store.load("payment-api", T0))

    assert (error.problem, error.variable) == (ACCESS_DENIED, "CIRCUIT_BREAKER_TABLE")
    assert "not authorized to perform: dynamodb:GetItem" in str(error)


def test_a_refused_connection_is_weather(refused_port: int) -> None:
    store = DynamoDBStore("CircuitBreakers", endpoint_url=f"http://127.0.0.1:{refused_port}")

    with pytest.raises(StoreError) as raised:
        store.load("payment-api", T0)

    assert not isinstance(raised.value, StoreMisconfiguredError)


# -- Redis: a login refused, a command not allowed ------------------------------------------


@pytest.fixture
def acl_redis(redis_factory: Callable[[], RedisServer]) -> RedisServer:
    """A private redis-server whose default user is off: only named users with passwords."""
    server = redis_factory()
    admin = redis.Redis(host="127.0.0.1", port=server.port)
    admin.execute_command("ACL", "SETUSER", "admin", "on", ">admin-secret", "~*", "&*", "+@all")
    admin.execute_command(
        "ACL", "SETUSER", "reader", "on", ">reader-secret", "~fleetbreaker:*", "+ping", "+time"
    )
    admin.execute_command("AUTH", "admin", "admin-secret")
    admin.execute_command("ACL", "SETUSER", "default", "off")
    admin.close()
    return server


def test_a_cache_that_requires_a_login_refuses_one_not_sent(acl_redis: RedisServer) -> None:
    store = from_env({"CIRCUIT_BREAKER_REDIS_URL": f"redis://127.0.0.1:{acl_redis.port}/0"})

    error = misconfiguration(lambda: store.load("payment-api", T0))

    assert (error.problem, error.variable) == (AUTHENTICATION_REFUSED, "CIRCUIT_BREAKER_REDIS_URL")


def test_a_wrong_iam_user_names_the_iam_variable(acl_redis: RedisServer) -> None:
    # GIVEN the cache's IAM login for a user the cache does not have
    store = from_env(
        {
            "CIRCUIT_BREAKER_REDIS_URL": f"redis://127.0.0.1:{acl_redis.port}/0",
            "CIRCUIT_BREAKER_REDIS_IAM_USER": "no-such-user",
            "CIRCUIT_BREAKER_REDIS_IAM_CACHE": "fleetbreaker-1a2b3c4d",
            "AWS_REGION": "eu-west-1",
        }
    )

    error = misconfiguration(lambda: store.load("payment-api", T0))

    assert (error.problem, error.variable) == (
        AUTHENTICATION_REFUSED,
        "CIRCUIT_BREAKER_REDIS_IAM_USER",
    )


def test_a_user_that_may_not_run_the_scripts_is_access_denied(acl_redis: RedisServer) -> None:
    # GIVEN a user allowed PING and TIME only, logged in with its password
    store = RedisStore(url=f"redis://reader:reader-secret@127.0.0.1:{acl_redis.port}/0")

    error = misconfiguration(lambda: store.load("payment-api", T0))

    assert (error.problem, error.variable) == (ACCESS_DENIED, "url")
    assert "evalsha" in str(error).lower()


# -- the breaker: said once per container, counted every time ------------------------------


def test_a_missing_table_is_logged_at_error_once_per_container_and_counted_each_time(
    moto_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN two breakers on a table that does not exist, named by CIRCUIT_BREAKER_TABLE, with
    # no back-off: every call goes to the store
    clock, counted = FakeClock(), RecordingListener()
    config = BreakerConfig(store_backoff_seconds=0)
    environ = {"CIRCUIT_BREAKER_TABLE": "NoSuchBreakers"}
    breakers = [
        CircuitBreaker(
            name,
            store=from_env(environ, endpoint_url=moto_server),
            config=config,
            clock=clock,
            listeners=[events_module.LoggingListener(), counted],
        )
        for name in ("payment-api", "fx-rates")
    ]

    # WHEN each makes three calls
    with caplog.at_level(logging.INFO, logger="fleetbreaker"):
        for breaker in breakers:
            for _ in range(3):
                assert breaker.call(Dependency()) == "ok"
                clock.advance(breaker.config.cache_ttl)

    # THEN one ERROR line in the process names the variable, no store-error WARNING repeats
    # it, and every one of the six failed reads is counted as a misconfiguration
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert "CIRCUIT_BREAKER_TABLE" in errors[0].getMessage()
    assert errors[0].__dict__["breaker_event"] == "store_misconfigured"
    assert errors[0].__dict__["variable"] == "CIRCUIT_BREAKER_TABLE"
    assert errors[0].__dict__["problem"] == TABLE_NOT_FOUND
    assert not [r for r in caplog.records if r.__dict__.get("breaker_event") == "store_error"]
    misconfigured = counted.values("on_store_misconfigured", "error")
    assert [error.problem for error in misconfigured] == [TABLE_NOT_FOUND] * 6
    assert counted.count("on_store_error") == 2  # one per breaker: the rest is the same news
    assert all(breaker.degraded for breaker in breakers)


def test_access_denied_is_logged_once_whatever_action_each_message_names(
    iam_moto: IamMoto, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a breaker whose credentials may neither read (GetItem) nor write (UpdateItem) its
    # table: each denial's message names its own action
    table = iam_moto.breaker_table()
    nobody = iam_moto.principal("dynamodb:DescribeTable")
    store = DynamoDBStore(
        table, boto3_client=signed_client(iam_moto.endpoint_url, "dynamodb", nobody)
    )
    clock, heard, dependency = FakeClock(), RecordingListener(), Dependency()
    breaker = CircuitBreaker(
        "payment-api",
        store=store,
        config=BreakerConfig(store_backoff_seconds=0),
        clock=clock,
        listeners=[events_module.LoggingListener(), heard],
    )

    # WHEN calls read the record and a failure writes it
    dependency.failing = True
    with caplog.at_level(logging.INFO, logger="fleetbreaker"):
        for _ in range(3):
            with pytest.raises(ConnectionError):
                breaker.call(dependency)
            clock.advance(breaker.config.cache_ttl)

    # THEN the denials had different texts, and one ERROR line said the kind once
    texts = [str(error) for error in heard.values("on_store_misconfigured", "error")]
    assert len({text.split("not authorized to perform: ")[-1][:20] for text in texts}) > 1
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert errors[0].__dict__["problem"] == ACCESS_DENIED


# -- verify_store: refused at init, weather let through ------------------------------------

VERIFY_STORE = BreakerConfig(verify_store=True)


def test_verify_store_refuses_a_missing_table_at_init(moto_server: str) -> None:
    store = from_env({"CIRCUIT_BREAKER_TABLE": "NoSuchBreakers"}, endpoint_url=moto_server)

    with pytest.raises(ConfigError, match="CIRCUIT_BREAKER_TABLE"):
        CircuitBreaker("payment-api", store=store, config=VERIFY_STORE)


def test_verify_store_refuses_denied_access_at_init(iam_moto: IamMoto) -> None:
    table = iam_moto.breaker_table()
    nobody = iam_moto.principal("dynamodb:DescribeTable")
    client = signed_client(iam_moto.endpoint_url, "dynamodb", nobody)

    with pytest.raises(ConfigError, match="dynamodb:GetItem"):
        CircuitBreaker(
            "payment-api", store=DynamoDBStore(table, boto3_client=client), config=VERIFY_STORE
        )


def test_verify_store_lets_an_unreachable_store_through(refused_port: int) -> None:
    # GIVEN a store nothing answers for (weather, not configuration)
    store = DynamoDBStore("CircuitBreakers", endpoint_url=f"http://127.0.0.1:{refused_port}")

    # WHEN a breaker verifying its store is built THEN it is, on local state, and its calls run
    breaker = CircuitBreaker("payment-api", store=store, config=VERIFY_STORE)
    assert breaker.degraded
    assert breaker.call(Dependency()) == "ok"


def test_verify_store_reads_the_record_once_and_keeps_it(moto_server: str) -> None:
    # GIVEN a breaker table
    store = DynamoDBStore(
        servers.make_table(moto_server), boto3_client=servers.dynamodb_client(moto_server)
    )

    # WHEN a breaker verifying its store is built and then called
    breaker = CircuitBreaker("payment-api", store=store, config=VERIFY_STORE, clock=FakeClock())
    reads = store.stats.reads
    assert breaker.call(Dependency()) == "ok"

    # THEN the init made one read, and the call used what it read (no second read)
    assert (reads, store.stats.reads) == (1, 1)


def test_breaker_verify_store_true_in_the_environment_turns_it_on(
    moto_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", moto_server)
    environ = {"CIRCUIT_BREAKER_TABLE": "NoSuchBreakers", "BREAKER_VERIFY_STORE": "true"}

    with pytest.raises(ConfigError, match="does not exist"):
        CircuitBreaker.from_env("payment-api", environ=environ, store_deadline_seconds=10)
