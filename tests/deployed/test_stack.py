"""Opt-in: checks a deployed stack. Run with `make test-deployed FLEETBREAKER_STACK=<name>`
and AWS credentials for the stack's account and region.

`make test` deselects these (`-m "not deployed"`); they never run without a stack name.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, DynamoDBStore, State

pytestmark = pytest.mark.deployed

STACK = os.environ.get("FLEETBREAKER_STACK", "")
EVENTS = Path(__file__).resolve().parents[2] / "events"


@pytest.fixture(scope="module")
def outputs() -> dict[str, str]:
    if not STACK:
        pytest.skip("set FLEETBREAKER_STACK to the deployed stack's name")
    import boto3

    stack = boto3.client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def test_table_has_ttl_on_the_package_attribute(outputs: dict[str, str]) -> None:
    import boto3

    ttl = boto3.client("dynamodb").describe_time_to_live(
        TableName=outputs["CircuitBreakersTableName"]
    )["TimeToLiveDescription"]

    assert ttl["TimeToLiveStatus"] in {"ENABLED", "ENABLING"}
    assert ttl["AttributeName"] == "expires_at"


def test_a_breaker_on_the_real_table_trips_probes_and_closes(outputs: dict[str, str]) -> None:
    now = [1_700_000_000_000]
    breaker = CircuitBreaker(
        f"deployed-check-{uuid.uuid4().hex[:8]}",
        store=DynamoDBStore(outputs["CircuitBreakersTableName"]),
        config=BreakerConfig(failure_threshold=2, recovery_timeout=1, cache_ttl=0),
        clock=lambda: now[0],
    )
    try:
        breaker.record(False)
        breaker.record(False)
        assert breaker.state is State.OPEN
        now[0] += 1_000
        admission = breaker.check()
        assert admission.token is not None
        assert breaker.record(True, admission.token).state is State.CLOSED
    finally:
        breaker.reset()


def test_payment_function_answers_a_malformed_body_with_400(outputs: dict[str, str]) -> None:
    import boto3

    event: dict[str, Any] = json.loads((EVENTS / "payment-bad-body.json").read_text())
    response = boto3.client("lambda").invoke(
        FunctionName=outputs["PaymentFunctionName"], Payload=json.dumps(event).encode()
    )
    answer = json.loads(response["Payload"].read())

    assert answer["statusCode"] == 400
