"""The breaker gate in shadow mode (BREAKER_MODE=shadow), on MemoryStore, moto's server and Redis.

A shadow gate answers every check as if the breaker were closed, and says beside it what an
enforcing gate would have answered; its record steps keep the fleet's breaker counting,
tripping and recovering. ``fleetbreaker tune NAME --mode enforce`` switches it within
``cache_ttl``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devtools import servers
from devtools.functions import load_function
from fleetbreaker import DynamoDBStore, MemoryStore, RedisStore
from fleetbreaker.cli import POLICY
from fleetbreaker.tuning import encode_tuned
from tests.support import FakeClock

app = load_function("breaker_gate")

ENV = {
    "CIRCUIT_BREAKER_TABLE": "CircuitBreakers",
    "BREAKER_FAILURE_THRESHOLD": "2",
    "BREAKER_RECOVERY_TIMEOUT": "30",
    "BREAKER_PROBE_LEASE_SECONDS": "20",
    "BREAKER_MODE": "shadow",
    # A loaded machine must not turn a slow local server into a degraded (local) breaker.
    "BREAKER_STORE_DEADLINE_SECONDS": "30",
}


@pytest.fixture(params=["memory", "moto_server", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "moto_server":
        endpoint = request.getfixturevalue("moto_server")
        table = servers.make_table(endpoint)
        yield DynamoDBStore(table, boto3_client=servers.dynamodb_client(endpoint))
    else:
        url = request.getfixturevalue("redis_server")
        redis = RedisStore(url=url, use_server_time=False, socket_timeout=5.0)
        yield redis
        redis.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def name() -> str:
    return f"gate-{uuid.uuid4().hex[:8]}"


def make_gate(clock: FakeClock, store: Any, **env: str) -> Any:
    settings = app.GateSettings.from_env({**ENV, **env})
    return app.BreakerGate(settings, store, clock=clock)


def test_a_shadow_gate_answers_allow_while_open_and_says_it_would_reject(
    store: Any, clock: FakeClock, name: str
) -> None:
    # GIVEN a shadow gate whose protected step failed twice (threshold 2)
    gate = make_gate(clock, store)
    for _ in range(2):
        assert gate.handle({"action": "check", "breaker": name})["decision"] == "allow"
        gate.handle({"action": "record", "breaker": name, "outcome": "failure"})
    clock.advance(12)
    # WHEN the workflow checks again
    answer = gate.handle({"action": "check", "breaker": name})
    # THEN it is let through as if closed, and told what an enforcing gate would have said
    assert answer == {
        "breaker": name,
        "state": "closed",
        "decision": "allow",
        "retry_after": 0.0,
        "wait_seconds": 0,
        "token": None,
        "degraded": False,
        "mode": "shadow",
        "would": {"decision": "reject", "state": "open", "retry_after": 18.0, "wait_seconds": 18},
    }
    # AND the status action shows the real state and the mode
    status = gate.handle({"action": "status", "breaker": name})
    assert (status["state"], status["mode"]) == ("open", "shadow")


def test_a_closed_shadow_gate_would_have_allowed(store: Any, clock: FakeClock, name: str) -> None:
    answer = make_gate(clock, store).handle({"action": "check", "breaker": name})
    assert answer["would"] == {
        "decision": "allow",
        "state": "closed",
        "retry_after": 0.0,
        "wait_seconds": 0,
    }


def test_a_shadow_gate_recovers_the_breaker_through_its_record_step(
    store: Any, clock: FakeClock, name: str
) -> None:
    # GIVEN an open breaker, past its open window, behind a shadow gate
    gate = make_gate(clock, store)
    for _ in range(2):
        gate.handle({"action": "record", "breaker": name, "outcome": "failure"})
    clock.advance(30)
    # WHEN a check (an enforcing gate would probe) is followed by a successful step
    answer = gate.handle({"action": "check", "breaker": name})
    assert (answer["decision"], answer["token"], answer["would"]["decision"]) == (
        "allow",
        None,
        "probe",
    )
    recorded = gate.handle({"action": "record", "breaker": name, "outcome": "success"})
    # THEN that outcome settled the probe: the fleet's breaker is closed
    assert (recorded["applied"], recorded["state"]) == (True, "closed")


def test_tune_mode_enforce_makes_the_gate_reject_within_cache_ttl(
    store: Any, clock: FakeClock, name: str
) -> None:
    # GIVEN an open breaker behind a shadow gate
    gate = make_gate(clock, store)
    for _ in range(2):
        gate.handle({"action": "record", "breaker": name, "outcome": "failure"})
    assert gate.handle({"action": "check", "breaker": name})["decision"] == "allow"
    # WHEN an operator runs `fleetbreaker tune NAME --mode enforce` and cache_ttl (1 s) passes
    store.tune(name, POLICY, clock(), encode_tuned({"mode": "enforce"}), None)
    clock.advance(1)
    # THEN the gate rejects, without redeploying it
    answer = gate.handle({"action": "check", "breaker": name})
    assert (answer["decision"], answer["state"], answer["mode"]) == ("reject", "open", "enforce")
    assert answer["would"] is None
