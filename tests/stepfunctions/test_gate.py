"""The breaker gate (functions/breaker_gate/app.py): its requests, answers and errors.

Most tests run the gate on a MemoryStore with a hand-moved clock; the environment-driven
cold start runs against moto's server, and store trouble against a refused port.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from devtools import servers
from devtools.functions import load_function
from devtools.lambda_context import FakeLambdaContext
from fleetbreaker import DynamoDBStore, MemoryStore
from tests.stepfunctions.harness import EVENTS_DIR, read_event
from tests.support import FakeClock

app = load_function("breaker_gate")

ENV = {
    "CIRCUIT_BREAKER_TABLE": "CircuitBreakers",
    "BREAKER_FAILURE_THRESHOLD": "2",
    "BREAKER_RECOVERY_TIMEOUT": "30",
    "BREAKER_PROBE_LEASE_SECONDS": "20",
}
CONTEXT = FakeLambdaContext(
    function_name="breaker-gate",
    invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:gate",
)


def make_gate(clock: FakeClock, store: Any = None, **env: str) -> Any:
    settings = app.GateSettings.from_env({**ENV, **env})
    return app.BreakerGate(settings, store if store is not None else MemoryStore(), clock=clock)


@pytest.fixture
def gate(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The container's gate, as lambda_handler uses it."""
    built = make_gate(clock)
    monkeypatch.setattr(app, "gate", built)
    return built


def invoke(event: Any) -> Any:
    return app.lambda_handler(event, CONTEXT)


def check(name: str = "payment-api", **extra: Any) -> Any:
    return invoke({"action": "check", "breaker": name, **extra})


def record(outcome: str, token: str | None = None, name: str = "payment-api") -> Any:
    return invoke({"action": "record", "breaker": name, "outcome": outcome, "token": token})


def open_breaker() -> None:
    for _ in range(2):
        record("failure")


# --------------------------------------------------------------------------- event files

GATE_EVENTS = sorted(path.name for path in EVENTS_DIR.glob("gate-*.json"))
# What each sample event does on a fresh breaker. A new event file needs a line here.
EXPECTED = {
    "gate-check.json": {"decision": "allow", "state": "closed", "token": None},
    "gate-record-success.json": {"applied": True, "stale_token": False, "state": "closed"},
    "gate-record-failure.json": {"applied": True, "detail": "failure counted"},
    "gate-record-stale-token.json": {"applied": False, "stale_token": True, "state": "closed"},
    "gate-bad-request.json": app.InvalidGateRequest,
    "gate-bad-outcome.json": app.InvalidGateRequest,
    "gate-status.json": {"state": "closed", "generation": 0, "calls": None, "open_until": None},
}


def test_every_gate_event_file_has_an_expectation() -> None:
    assert sorted(EXPECTED) == GATE_EVENTS


@pytest.mark.parametrize("name", GATE_EVENTS)
def test_gate_event_file(name: str, gate: Any) -> None:
    event = read_event(name)
    expected = EXPECTED[name]
    if isinstance(expected, type):
        with pytest.raises(expected):
            invoke(event)
        return
    answer = invoke(event)
    assert answer["breaker"] == event["breaker"]
    assert answer.items() >= expected.items()


# --------------------------------------------------------------------------- check


def test_check_on_a_closed_breaker_allows(gate: Any) -> None:
    assert check() == {
        "breaker": "payment-api",
        "state": "closed",
        "decision": "allow",
        "retry_after": 0.0,
        "wait_seconds": 0,
        "token": None,
        "degraded": False,
        "mode": "enforce",
        "would": None,  # always there, so the workflow's ResultSelector can select it
    }


def test_check_on_an_open_breaker_rejects_with_a_whole_number_of_seconds(
    gate: Any, clock: FakeClock
) -> None:
    open_breaker()
    clock.advance(12.3)
    answer = check()
    assert (answer["decision"], answer["state"]) == ("reject", "open")
    assert answer["retry_after"] == pytest.approx(17.7)
    assert answer["wait_seconds"] == 18  # rounded up: never back before the window ends
    assert answer["token"] is None


def test_wait_seconds_is_capped_by_the_request(gate: Any) -> None:
    open_breaker()
    assert check(max_wait_seconds=5)["wait_seconds"] == 5
    assert check(max_wait_seconds=5.0)["wait_seconds"] == 5


def test_wait_seconds_is_capped_by_the_gate(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(app, "gate", make_gate(clock, GATE_MAX_WAIT_SECONDS="10"))
    open_breaker()
    assert check()["wait_seconds"] == 10
    assert check(max_wait_seconds=60)["wait_seconds"] == 10


def test_a_short_retry_after_still_waits_one_second(gate: Any, clock: FakeClock) -> None:
    open_breaker()
    clock.advance(29.9)
    answer = check()
    assert answer["retry_after"] == pytest.approx(0.1)
    assert answer["wait_seconds"] == 1  # a Wait of 0 s would spin on the gate


def test_after_the_open_window_one_check_probes_and_the_next_waits_for_its_lease(
    gate: Any, clock: FakeClock
) -> None:
    open_breaker()
    clock.advance(30)
    probe = check()
    assert (probe["decision"], probe["state"]) == ("probe", "half_open")
    assert probe["token"]
    other = check()
    assert (other["decision"], other["state"]) == ("reject", "half_open")
    assert other["wait_seconds"] == 20  # the lease (BREAKER_PROBE_LEASE_SECONDS)


def test_a_probe_that_states_its_deadline_holds_its_slot_only_until_then(
    gate: Any, clock: FakeClock
) -> None:
    # GIVEN a probe whose step may take 4 s (BREAKER_PROBE_LEASE_SECONDS is 20)
    open_breaker()
    clock.advance(30)
    probe = check(probe_seconds=4)
    assert probe["decision"] == "probe"
    clock.advance(0.25)
    # WHEN another execution checks while it runs THEN it waits for the probe's deadline
    other = check(probe_seconds=4)
    assert (other["decision"], other["retry_after"], other["wait_seconds"]) == (
        "reject",
        3.75,
        4,
    )
    # AND past that deadline the slot is the next caller's
    clock.advance(3.75)
    assert check()["decision"] == "probe"


def test_a_deadline_beyond_the_lease_waits_for_the_lease(gate: Any, clock: FakeClock) -> None:
    open_breaker()
    clock.advance(30)
    assert check(probe_seconds=600)["decision"] == "probe"
    assert check()["wait_seconds"] == 20


# --------------------------------------------------------------------------- record


def test_failures_without_a_token_are_counted_until_the_breaker_opens(gate: Any) -> None:
    assert record("failure") == {
        "breaker": "payment-api",
        "outcome": "failure",
        "applied": True,
        "stale_token": False,
        "state": "closed",
        "detail": "failure counted",
    }
    assert record("failure")["state"] == "open"
    late = record("failure")
    assert (late["applied"], late["state"]) == (False, "open")


def test_the_probe_token_settles_the_probe(gate: Any, clock: FakeClock) -> None:
    open_breaker()
    clock.advance(30)
    token = check()["token"]
    answer = record("success", token)
    assert (answer["applied"], answer["stale_token"], answer["state"]) == (True, False, "closed")
    assert answer["detail"] == "probe succeeded"
    assert check()["decision"] == "allow"


def test_a_failed_probe_reopens(gate: Any, clock: FakeClock) -> None:
    open_breaker()
    clock.advance(30)
    answer = record("failure", check()["token"])
    assert (answer["applied"], answer["state"]) == (True, "open")


def test_a_stale_token_is_a_no_op_that_says_so(gate: Any, clock: FakeClock) -> None:
    # GIVEN a probe whose lease ran out, and a second probe holding the slot now
    open_breaker()
    clock.advance(30)
    stale = check()["token"]
    clock.advance(21)
    fresh = check()["token"]
    assert fresh
    assert fresh != stale
    # WHEN the first prober reports late THEN nothing changes, and the answer says why
    answer = record("success", stale)
    assert answer["applied"] is False
    assert answer["stale_token"] is True
    assert answer["state"] == "half_open"
    assert "stale probe token" in answer["detail"]
    # THEN the fresh token still settles the probe
    assert record("success", fresh)["state"] == "closed"


def test_a_token_used_twice_applies_once(gate: Any, clock: FakeClock) -> None:
    open_breaker()
    clock.advance(30)
    token = check()["token"]
    assert record("success", token)["applied"] is True
    assert record("success", token)["stale_token"] is True


# --------------------------------------------------------------------------- bad requests


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (["check"], "must be a JSON object, got list"),
        ({"breaker": "payment-api"}, "action: required"),
        ({"action": "open", "breaker": "payment-api"}, "action: must be one of check, record"),
        ({"action": "check"}, "breaker: required"),
        ({"action": "check", "breaker": ""}, "breaker: breaker name must not be empty"),
        ({"action": "check", "breaker": 7}, "breaker: breaker name must be a string"),
        ({"action": "check", "breaker": "a\nb"}, "control characters"),
        (
            {"action": "check", "breaker": "payment-api", "outcome": "success"},
            "unknown field(s) for check: 'outcome'",
        ),
        ({"action": "check", "breaker": "payment-api", "max_wait_seconds": 0}, "max_wait_seconds"),
        ({"action": "check", "breaker": "payment-api", "max_wait_seconds": 1.5}, "whole number"),
        ({"action": "check", "breaker": "payment-api", "max_wait_seconds": True}, "whole number"),
        (
            {"action": "check", "breaker": "payment-api", "probe_seconds": 0},
            "probe_seconds: must be a positive number of seconds",
        ),
        ({"action": "check", "breaker": "payment-api", "probe_seconds": "40"}, "got '40'"),
        ({"action": "check", "breaker": "payment-api", "probe_seconds": True}, "probe_seconds"),
        ({"action": "check", "breaker": "payment-api", "probe_seconds": None}, "got None"),
        ({"action": "check", "breaker": "payment-api", "probe_seconds": 10**400}, "at most"),
        ({"action": "record", "breaker": "payment-api"}, "outcome: required"),
        (
            {"action": "record", "breaker": "payment-api", "outcome": "ok"},
            "outcome: must be one of success, failure, got 'ok'",
        ),
        (
            {"action": "record", "breaker": "payment-api", "outcome": "success", "token": 5},
            "token: must be the check's token (a string) or null, got int",
        ),
        (
            {"action": "record", "breaker": "payment-api", "outcome": "success", "token": "x"},
            "token: 'x' is not a probe token issued by a check",
        ),
        (
            {"action": "record", "breaker": "payment-api", "outcome": "success", "tokn": None},
            "unknown field(s) for record: 'tokn'",
        ),
    ],
)
def test_a_bad_request_raises_invalid_gate_request(gate: Any, event: Any, message: str) -> None:
    with pytest.raises(app.InvalidGateRequest) as raised:
        invoke(event)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (None, "the request must be a JSON object, got null"),
        ([], "the request must be a JSON object, got list"),
        ("check", "the request must be a JSON object, got str"),
        (7, "the request must be a JSON object, got int"),
        ({}, "action: required"),
        (read_event("payment-ok.json"), "action: required"),
        ({"action": ["check"], "breaker": "payment-api"}, "action: must be one of"),
    ],
    ids=["null", "list", "string", "int", "empty", "api-gateway-event", "action-list"],
)
def test_an_event_that_is_no_gate_request_raises_invalid_gate_request(
    gate: Any, event: Any, message: str
) -> None:
    # GIVEN an event of another shape (a direct invoke, an HTTP API event sent by mistake)
    # WHEN the gate handles it, THEN it refuses it by name, without touching the store
    with pytest.raises(app.InvalidGateRequest, match=re.escape(message)):
        invoke(event)
    assert gate.store.load("payment-api", gate.clock()) is None


def test_the_refusal_of_a_huge_request_is_bounded(gate: Any) -> None:
    # GIVEN a check carrying 190,000 unknown fields (about 4.6 MB of JSON)
    event = {"action": "check", "breaker": "payment-api"}
    event.update({f"field-{n:07d}": n for n in range(190_000)})
    # WHEN the gate refuses it
    with pytest.raises(app.InvalidGateRequest) as raised:
        invoke(event)
    # THEN the error lists a few fields and says how many it left out
    message = str(raised.value)
    assert len(message) < 1000, len(message)
    assert "'field-0000000'" in message
    assert f"and {190_000 - app.MAX_LISTED_FIELDS} more" in message


def test_a_huge_value_is_quoted_in_part(gate: Any) -> None:
    # GIVEN an action of a million characters, WHEN refused, THEN the error quotes its start
    with pytest.raises(app.InvalidGateRequest) as raised:
        invoke({"action": "x" * 1_000_000, "breaker": "payment-api"})
    assert len(str(raised.value)) < 300
    assert "(1000002 characters)" in str(raised.value)


def test_a_bad_request_changes_nothing(gate: Any) -> None:
    with pytest.raises(app.InvalidGateRequest):
        invoke({"action": "record", "breaker": "payment-api", "outcome": "failed"})
    assert gate.store.load("payment-api", gate.clock()) is None


def test_an_allow_list_refuses_other_names(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    allowed = "payment-api, orders-api"
    monkeypatch.setattr(app, "gate", make_gate(clock, GATE_ALLOWED_BREAKERS=allowed))
    assert check("orders-api")["decision"] == "allow"
    with pytest.raises(app.InvalidGateRequest, match="'paymnet-api' is not served by this gate"):
        check("paymnet-api")


# --------------------------------------------------------------------------- container


def test_one_breaker_per_name_per_container(gate: Any) -> None:
    check("payment-api")
    check("orders-api")
    first = gate.breaker("payment-api")
    check("payment-api")
    assert gate.breaker("payment-api") is first
    assert gate.breaker("orders-api") is not first
    assert first.config.failure_threshold == 2


def test_breakers_are_shared_with_other_containers(clock: FakeClock) -> None:
    # Two gates (two containers) on one store see one breaker.
    store = MemoryStore()
    one, two = make_gate(clock, store), make_gate(clock, store, BREAKER_CACHE_TTL="0")
    one.handle({"action": "record", "breaker": "payment-api", "outcome": "failure"})
    two.handle({"action": "record", "breaker": "payment-api", "outcome": "failure"})
    assert two.handle({"action": "check", "breaker": "payment-api"})["decision"] == "reject"


def test_the_first_invocation_builds_the_gate_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, moto_server: str
) -> None:
    # GIVEN a container whose environment names a table on a local DynamoDB
    table = servers.make_table(moto_server)
    monkeypatch.setenv("CIRCUIT_BREAKER_TABLE", table)
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", moto_server)
    monkeypatch.setenv("BREAKER_FAILURE_THRESHOLD", "1")
    monkeypatch.setattr(app, "gate", None)
    # WHEN it is invoked THEN it builds one gate and the breaker lives in that table
    assert record("failure")["state"] == "open"
    built = app.gate
    assert check()["decision"] == "reject"
    assert app.gate is built
    item = servers.dynamodb_client(moto_server).get_item(
        TableName=table, Key={"name": {"S": "payment-api"}}
    )["Item"]
    assert item["state"] == {"S": "open"}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CIRCUIT_BREAKER_TABLE": ""}, "CIRCUIT_BREAKER_TABLE (or CIRCUIT_BREAKER_REDIS_URL)"),
        ({"CIRCUIT_BREAKER_REDIS_URL": "http://cache:6379"}, "a redis:// or rediss:// URL"),
        ({"BREAKER_FAILURE_THRESHOLD": "five"}, "BREAKER_FAILURE_THRESHOLD must be a whole number"),
        ({"BREAKER_RECOVERY_TIMEOUT": "0"}, "BREAKER_RECOVERY_TIMEOUT: recovery_timeout must be"),
        ({"BREAKER_RECOVERY_TIMEOUT": "nan"}, "BREAKER_RECOVERY_TIMEOUT: recovery_timeout must be"),
        ({"BREAKER_HALF_OPEN_MAX_PROBES": "17"}, "half_open_max_probes must be at most 16"),
        ({"GATE_MAX_WAIT_SECONDS": "7200"}, "GATE_MAX_WAIT_SECONDS must be at most 3600"),
    ],
)
def test_a_bad_environment_raises_gate_config_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(app.GateConfigError) as raised:
        app.GateSettings.from_env({**ENV, **env})
    assert message in str(raised.value)


def test_a_missing_table_variable_fails_the_invocation_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CIRCUIT_BREAKER_TABLE", raising=False)
    monkeypatch.setattr(app, "gate", None)
    with pytest.raises(app.GateConfigError, match="CIRCUIT_BREAKER_TABLE"):
        check()


def test_with_a_redis_url_the_breakers_live_in_redis(
    redis_server: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN two containers configured as the template does with BreakerStore=redis
    from fleetbreaker import RedisStore

    name = f"gate-redis-{uuid.uuid4().hex[:8]}"
    env = {**ENV, "CIRCUIT_BREAKER_REDIS_URL": redis_server, "BREAKER_CACHE_TTL": "0"}
    one, two = app.create_gate(env, clock=clock), app.create_gate(env, clock=clock)
    assert isinstance(one.store, RedisStore)
    # WHEN one counts the failures THEN the other sees the breaker open
    for _ in range(2):
        one.handle({"action": "record", "breaker": name, "outcome": "failure"})
    assert two.handle({"action": "check", "breaker": name})["decision"] == "reject"


# --------------------------------------------------------------------------- store trouble


@pytest.fixture
def unreachable_gate(clock: FakeClock, refused_port: int, monkeypatch: pytest.MonkeyPatch) -> Any:
    store = DynamoDBStore("CircuitBreakers", endpoint_url=f"http://127.0.0.1:{refused_port}")
    built = make_gate(clock, store)
    monkeypatch.setattr(app, "gate", built)
    return built


def test_an_unreachable_store_degrades_instead_of_failing(
    unreachable_gate: Any, clock: FakeClock
) -> None:
    # WHEN the store refuses every connection
    answer = check()
    # THEN the gate still answers, from the container's own breaker, and says so: the refused
    # connection reached the breaker as a store error instead of an exception in the workflow
    assert (answer["decision"], answer["degraded"]) == ("allow", True)
    assert unreachable_gate.breaker("payment-api").stats.store_errors == 1
    # THEN failures are counted locally: the container stops calling a dead dependency too
    record("failure")
    assert record("failure")["state"] == "open"
    assert check()["decision"] == "reject"


def test_status_shows_the_fleet_window_without_deciding(clock: FakeClock) -> None:
    # GIVEN a gate on the rate policy whose breaker has seen 4 calls, 1 failed
    gate = make_gate(clock, BREAKER_FAILURE_RATE_THRESHOLD="0.5", BREAKER_MINIMUM_CALLS="100")
    for outcome in ("success", "success", "success", "failure"):
        gate.handle({"action": "check", "breaker": "svc"})
        gate.handle({"action": "record", "breaker": "svc", "outcome": outcome, "token": None})
    clock.advance(1.0)
    gate.handle({"action": "check", "breaker": "svc"})  # the report of those 4 calls

    # WHEN a workflow asks for the status
    answer = gate.handle({"action": "status", "breaker": "svc"})

    # THEN it gets the window and the state, with stable keys
    assert answer == {
        "breaker": "svc",
        "state": "closed",
        "generation": 0,
        "calls": 4,
        "failures": 1,
        "slow_calls": 0,
        "containers": 1,  # min_containers=1 keeps no ids: at least the one that failed
        "failure_rate": 0.25,
        "slow_call_rate": 0.0,
        "retry_after": 0.0,
        "open_until": None,
        "updated_at": "2023-11-14T22:13:21.000Z",
        "mode": "enforce",
        "census_writes": 0,
    }


def test_status_of_an_open_breaker_says_until_when(gate: Any, clock: FakeClock) -> None:
    for _ in range(2):
        gate.handle({"action": "record", "breaker": "svc", "outcome": "failure", "token": None})

    answer = invoke({"action": "status", "breaker": "svc"})

    assert (answer["state"], answer["generation"], answer["retry_after"]) == ("open", 1, 30.0)
    assert answer["open_until"] == "2023-11-14T22:13:50.000Z"
    assert answer["failure_rate"] is None


def test_status_refuses_fields_it_does_not_take(gate: Any) -> None:
    with pytest.raises(app.InvalidGateRequest, match="outcome"):
        invoke({"action": "status", "breaker": "svc", "outcome": "success"})


@pytest.mark.parametrize(
    "event",
    [
        {"action": "check", "breaker": "pay\udcffment"},
        {"action": "record", "breaker": "svc", "outcome": "success", "token": "0-\udcff"},
    ],
    ids=["name", "token"],
)
def test_text_that_is_not_valid_unicode_is_an_invalid_request(gate: Any, event: Any) -> None:
    with pytest.raises(app.InvalidGateRequest):
        invoke(event)
