"""The payment function in shadow mode (BreakerMode=shadow sets BREAKER_MODE), end to end.

Containers built by create_handler from the environment the template gives the function, a
real HTTP provider, the breaker on moto's server (DynamoDB), a real redis-server, or a
MemoryStore; the operator's switch is the real console script (`fleetbreaker tune NAME --mode
enforce`) where a server holds the breaker.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from devtools import servers
from devtools.payment_api import FakePaymentApi
from devtools.sam_template import load_template
from fleetbreaker import DynamoDBStore, MemoryStore
from fleetbreaker.cli import POLICY
from fleetbreaker.clock import system_clock
from fleetbreaker.metrics import flush_metrics
from fleetbreaker.tuning import encode_tuned
from tests.sam.conftest import invoke, payment_event
from tests.support import FakeClock

CLI = Path(sys.executable).with_name("fleetbreaker")


def tune_enforce(store_options: list[str], name: str) -> None:
    """What the operator types to end the shadow run."""
    done = subprocess.run(
        [str(CLI), *store_options, "tune", name, "--mode", "enforce", "--reason", "go live"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(params=["memory", "moto_server", "redis"])
def backend(
    request: pytest.FixtureRequest, payment_env: dict[str, str], payment_table: str
) -> dict[str, Any]:
    """How the containers reach the breaker (env, store) and how the operator's CLI does."""
    if request.param == "memory":
        store = MemoryStore()
        return {"env": {}, "store": store, "endpoint": None, "tune": store}
    if request.param == "moto_server":
        endpoint = request.getfixturevalue("moto_server")
        options = ["--table", payment_table, "--endpoint-url", endpoint]
        # The table the environment names, through a client with the test servers' patient
        # timeouts: on a loaded machine the function's 0.3 s read timeout would degrade the
        # breaker to local state, which is not what this test is about (test_payment_breaker
        # runs the function's own client).
        table = DynamoDBStore(payment_table, boto3_client=servers.dynamodb_client(endpoint))
        return {"env": {}, "store": table, "endpoint": endpoint, "tune": options}
    url = request.getfixturevalue("redis_server")
    return {
        "env": {"CIRCUIT_BREAKER_REDIS_URL": url},
        "store": None,
        "endpoint": None,
        "tune": ["--redis-url", url],
    }


def test_the_template_passes_breaker_mode_to_the_function() -> None:
    function = load_template()["Resources"]["PaymentFunction"]
    assert function["Properties"]["Environment"]["Variables"]["BREAKER_MODE"] == {
        "Ref": "BreakerMode"
    }


def test_shadow_payments_reach_the_provider_until_the_operator_enforces(
    payment_module: ModuleType,
    payment_env: dict[str, str],
    payment_api: FakePaymentApi,
    backend: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN a payment container in shadow mode (threshold 2) and a failing provider
    env = {
        **payment_env,
        **backend["env"],
        "BREAKER_MODE": "shadow",
        "BREAKER_FAILURE_THRESHOLD": "2",
        "BREAKER_STORE_DEADLINE_SECONDS": "30",  # a loaded machine is not a store outage
    }
    # Starting now: the operator's CLI stamps its write with the real clock, and a record from
    # FakeClock's 2023 would be long past its TTL to it.
    clock = FakeClock(system_clock())

    def container() -> Any:
        return payment_module.create_handler(
            env, clock=clock, endpoint_url=backend["endpoint"], store=backend["store"]
        )

    a = container()
    name = env["BREAKER_NAME"]
    payment_api.mode = "fail"
    capsys.readouterr()

    # WHEN six payments fail
    statuses = [invoke(a, payment_event())[0] for _ in range(6)]

    # THEN every one reached the provider (502, never 503), while the shared breaker is open
    assert statuses == [502] * 6
    assert payment_api.calls == 6
    assert a.breaker.snapshot().state.value == "open"
    assert a.breaker.snapshot().mode == "shadow"
    # AND the function's EMF output (flushed as @log_metrics does at the end of an invocation)
    # counts the 4 payments that enforce mode would have turned away
    flush_metrics()
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    counted = [doc.get("WouldReject", 0) for doc in emf if doc.get("Breaker") == name]
    assert sum(sum(v) if isinstance(v, list) else v for v in counted) == 4

    # WHEN the operator switches the fleet to enforce and cache_ttl (1 s) passes
    if isinstance(backend["tune"], list):
        tune_enforce(backend["tune"], name)
    else:
        backend["tune"].tune(name, POLICY, clock(), encode_tuned({"mode": "enforce"}), None)
    clock.advance(1)

    # THEN this container and a new one turn payments away with 503, without the provider
    b = container()
    for handler in (a, b):
        status, headers, body = invoke(handler, payment_event())
        assert (status, body.get("state")) == (503, "open"), body
        assert int(headers["Retry-After"]) >= 1
    assert payment_api.calls == 6
    for handler in (a, b):
        assert not handler.breaker.degraded
