"""DynamoDB trouble: every fault gives the right decision, cut short, with no exception.

The store runs with its production defaults (0.2 s connect, 0.3 s read, one retry). No test
here times the machine: a call is shown cut short by what the code itself did (the SDK gave up
on a server that still holds the answer, or the breaker's deadline fired: StoreDeadlineError)
and by how many requests reached the server, never by how long a busy machine took.
"""

from __future__ import annotations

import functools
import http.server
import json
import logging
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from devtools import servers
from fleetbreaker import BreakerConfig, CircuitOpenError, DynamoDBStore, State
from fleetbreaker.errors import StoreDeadlineError
from fleetbreaker.events import LoggingListener
from fleetbreaker.stores.dynamodb import TTL_ATTRIBUTE
from tests import support
from tests.faults.trickle import TrickleProxy
from tests.support import Dependency, FakeClock, RecordingListener, wait_for

pytestmark = pytest.mark.realtime  # store deadlines and budgets, on the wall clock

CONFIG = BreakerConfig(failure_threshold=3, recovery_timeout=10)
# For the tests of what a record does, not of the deadline: one of moto's answers can take
# longer than the default 1 s on a loaded machine, and a breaker that waited runs degraded.
PATIENT = {"store_deadline_seconds": 30}
# The store's own retry budget: one request and one retry (wire.DEFAULT_RETRIES).
MAX_ATTEMPTS = 2


breaker_on = functools.partial(support.breaker_on, config=CONFIG)


def cut_short(error: BaseException) -> bool:
    """The store operation ended by the code's own doing: the breaker's deadline, or the
    SDK giving up (a read or connect timeout, a refused connection, its retries spent)."""
    return isinstance(error, StoreDeadlineError) or error.__cause__ is not None


class _Throttling(http.server.BaseHTTPRequestHandler):
    code = "ThrottlingException"
    requests: list[str]  # one entry per request received, set per server

    def do_POST(self) -> None:
        self.requests.append(self.path)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps(
            {"__type": f"com.amazonaws.dynamodb.v20120810#{self.code}", "message": "Rate exceeded"}
        ).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class ThrottlingEndpoint:
    def __init__(self, url: str, requests: list[str]) -> None:
        self.url = url
        self.requests = requests


@pytest.fixture(params=["ThrottlingException", "ProvisionedThroughputExceededException"])
def throttling_endpoint(request: pytest.FixtureRequest) -> Iterator[ThrottlingEndpoint]:
    requests: list[str] = []
    handler = type("Handler", (_Throttling,), {"code": request.param, "requests": requests})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ThrottlingEndpoint(f"http://127.0.0.1:{server.server_address[1]}", requests)
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def moto_table(moto_server: str) -> tuple[str, str]:
    return moto_server, servers.make_table(moto_server)


# -- unreachable, silent, throttling ------------------------------------------------------------


def _assert_degrades_cut_short(endpoint: str) -> RecordingListener:
    clock = FakeClock()
    dep = Dependency()
    store = DynamoDBStore("CircuitBreakers", endpoint_url=endpoint)
    assert store.client is not None  # built up front: boto3's setup is cold start, not budget
    calls = RecordingListener()
    breaker = breaker_on(store, clock, listeners=[calls])

    result = breaker.call(dep)
    attempts = calls.count("on_store_call_start")
    second = breaker.call(dep)

    assert (result, second) == ("ok", "ok")
    assert breaker.degraded
    assert attempts == 1
    (error,) = calls.values("on_store_error", "error")
    assert cut_short(error), repr(error)
    # inside the back-off the store is not called at all
    assert calls.count("on_store_call_start") == attempts
    return calls


def test_refused_connections_degrade_cut_short(refused_port: int) -> None:
    _assert_degrades_cut_short(f"http://127.0.0.1:{refused_port}")


def test_an_endpoint_that_never_answers_degrades_cut_short(blackhole: Any) -> None:
    # GIVEN a server that holds every answer: only the code's own timeouts can end the call
    _assert_degrades_cut_short(blackhole.endpoint_url)
    # THEN the SDK's retry budget was not exceeded (each attempt is one connection held; the
    # server's accept loop may take its turn after the client gave up)
    wait_for(lambda: blackhole.accepted >= 1, "the blackhole accepting the store's connection")
    assert blackhole.accepted <= MAX_ATTEMPTS


def test_throttling_degrades_cut_short(throttling_endpoint: ThrottlingEndpoint) -> None:
    _assert_degrades_cut_short(throttling_endpoint.url)
    # THEN the store spent at most its retry budget on the throttled table
    assert 1 <= len(throttling_endpoint.requests) <= MAX_ATTEMPTS


def test_a_degraded_breaker_still_trips_locally(blackhole: Any) -> None:
    clock = FakeClock()
    dep = Dependency()
    dep.failing = True
    store = DynamoDBStore("CircuitBreakers", endpoint_url=blackhole.endpoint_url)
    breaker = breaker_on(store, clock)

    for _ in range(3):
        with pytest.raises(ConnectionError):
            breaker.call(dep)
    with pytest.raises(CircuitOpenError):
        breaker.call(dep)

    assert dep.calls == 3


# -- missing table ---------------------------------------------------------------------------


def test_a_missing_table_is_logged_once_by_name_and_calls_still_run(
    moto_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    dep = Dependency()
    store = DynamoDBStore("NoSuchBreakerTable", boto3_client=servers.dynamodb_client(moto_server))
    breaker = breaker_on(store, clock)

    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        for _ in range(5):
            assert breaker.call(dep) == "ok"
            clock.advance(CONFIG.store_backoff_seconds)  # each round tries the store again

    missing = [r for r in caplog.records if "NoSuchBreakerTable" in r.getMessage()]
    assert len(missing) == 1
    assert "does not exist" in missing[0].getMessage()
    assert breaker.degraded


# -- corrupt and expired items ----------------------------------------------------------------


@pytest.mark.parametrize(
    "corruption",
    [
        {"state": {"S": "sideways"}},
        {"gen": {"S": "one"}},
        {"gen": None},
        {"open_until": {"BOOL": True}},
    ],
    ids=["unknown-state", "gen-as-string", "missing-attribute", "wrong-type"],
)
def test_a_corrupt_item_is_logged_treated_as_closed_and_repaired(
    moto_table: tuple[str, str], corruption: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    endpoint, table = moto_table
    client = servers.dynamodb_client(endpoint)
    clock = FakeClock()
    item = {
        "name": {"S": "payment-api"},
        "state": {"S": "open"},
        "gen": {"N": "4"},
        "failures": {"N": "0"},
        "window_start": {"N": "0"},
        "opened_at": {"N": str(clock())},
        "open_until": {"N": str(clock() + 10_000)},
        "reopens": {"N": "0"},
        "successes": {"N": "0"},
        "updated_at": {"N": str(clock())},
        TTL_ATTRIBUTE: {"N": str(clock() // 1000 + 3600)},
    }
    corrupt = {k: v for k, v in {**item, **corruption}.items() if v is not None}
    client.put_item(TableName=table, Item=corrupt)
    dep = Dependency()
    # (a deadline moto's server meets on a loaded machine: degraded is what is asserted)
    breaker = breaker_on(DynamoDBStore(table, boto3_client=client), clock, **PATIENT)

    with caplog.at_level(logging.ERROR, logger="fleetbreaker"):
        assert breaker.call(dep) == "ok"
    dep.failing = True
    for _ in range(3):
        with pytest.raises(ConnectionError):
            breaker.call(dep)

    assert "unreadable record treated as closed" in caplog.text
    assert breaker.stats.corrupt_records == 1
    assert not breaker.degraded
    assert breaker.state is State.OPEN  # the failures overwrote the corrupt item


def test_an_item_past_its_ttl_is_closed_though_dynamodb_still_returns_it(
    moto_table: tuple[str, str],
) -> None:
    endpoint, table = moto_table
    clock = FakeClock()
    store = DynamoDBStore(table, boto3_client=servers.dynamodb_client(endpoint))
    first = breaker_on(store, clock, **PATIENT)
    dep = Dependency()
    dep.failing = True
    for _ in range(3):
        with pytest.raises(ConnectionError):
            first.call(dep)
    clock.advance(CONFIG.record_ttl_seconds)

    raw = servers.dynamodb_client(endpoint).get_item(
        TableName=table, Key={"name": {"S": "payment-api"}}
    )
    dep.failing = False
    later = breaker_on(store, clock, **PATIENT)

    assert raw["Item"]["state"]["S"] == "open"  # moto, like DynamoDB for a while, keeps it
    assert later.state is State.CLOSED
    assert later.call(dep) == "ok"


# -- the deadline: whatever client, however slow the answer (issue 16, issue 12 item 2) ------


def default_boto3_client(endpoint_url: str) -> Any:
    """A client as a new user builds it: botocore's defaults (60 s timeouts, legacy retries)."""
    import boto3

    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint_url,
        region_name=servers.REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def test_a_default_boto3_client_on_a_refused_endpoint_costs_one_deadline_per_backoff(
    refused_port: int,
) -> None:
    # GIVEN a breaker on the user's own default-configured client, DynamoDB refusing
    clock = FakeClock()
    dep = Dependency()
    calls = RecordingListener()
    client = default_boto3_client(f"http://127.0.0.1:{refused_port}")
    store = DynamoDBStore("CircuitBreakers", boto3_client=client)
    breaker = breaker_on(store, clock, listeners=[LoggingListener(), calls])

    # WHEN the first call meets it (botocore alone would retry for about 25 s)
    first = breaker.call(dep)
    # and calls keep coming until just before the back-off ends
    rest = [breaker.call(dep) for _ in range(50)]
    clock.advance(CONFIG.store_backoff_seconds - 0.001)
    rest.append(breaker.call(dep))

    # THEN the first was cut by the breaker's deadline (the SDK was still retrying), the rest
    # are answered from local state, and the store saw one attempt in the back-off
    assert first == "ok"
    assert isinstance(calls.values("on_store_error", "error")[0], StoreDeadlineError)
    assert rest == ["ok"] * 51
    assert calls.count("on_store_call_start") == 1
    assert breaker.degraded

    # WHEN the back-off ends THEN one more attempt, cut the same way
    clock.advance(0.001)
    assert breaker.call(dep) == "ok"
    assert calls.count("on_store_call_start") == 2
    assert calls.count("on_store_error") == 2
    assert isinstance(calls.values("on_store_error", "error")[1], StoreDeadlineError)


def test_a_passed_client_looser_than_the_budget_gets_one_log_line(
    refused_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    client = default_boto3_client(f"http://127.0.0.1:{refused_port}")

    with caplog.at_level(logging.INFO, logger="fleetbreaker"):
        store = DynamoDBStore("CircuitBreakers", boto3_client=client)

    (line,) = [r.getMessage() for r in caplog.records]
    assert "connect_timeout=60" in line
    assert "read_timeout=60" in line
    assert "store_deadline_seconds bounds each store operation" in line
    assert store.client is client  # used as it is


def test_a_passed_client_within_the_budget_is_used_silently(
    refused_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    client = servers.dynamodb_client(
        f"http://127.0.0.1:{refused_port}",
        connect_timeout=0.2,
        read_timeout=0.3,
        retries={"mode": "legacy", "total_max_attempts": 2},
    )

    with caplog.at_level(logging.INFO, logger="fleetbreaker"):
        DynamoDBStore("CircuitBreakers", boto3_client=client)

    assert caplog.records == []


def test_a_reply_trickling_in_from_moto_is_cut_at_the_deadline(
    moto_table: tuple[str, str],
) -> None:
    # GIVEN DynamoDB (moto's server) behind a proxy that sends its reply one byte per 100 ms:
    # every socket read gets a byte well inside the store's 0.3 s read timeout
    endpoint, table = moto_table
    upstream = urllib.parse.urlsplit(endpoint)
    clock = FakeClock()
    dep = Dependency()
    calls = RecordingListener()
    with TrickleProxy((upstream.hostname or "127.0.0.1", upstream.port or 80)) as proxy:
        store = DynamoDBStore(table, endpoint_url=proxy.endpoint_url)
        assert store.client is not None  # boto3's setup is cold start, not the budget
        breaker = breaker_on(store, clock, listeners=[LoggingListener(), calls])

        # WHEN a call needs the store
        result = breaker.call(dep)

    # THEN the store operation ends at the deadline, as a store error, and the call runs
    assert result == "ok"
    assert isinstance(calls.values("on_store_error", "error")[0], StoreDeadlineError)
    assert breaker.stats.store_errors == 1
    assert breaker.degraded
