"""Opt-in: the deployed payment workflow and breaker gate (`make test-deployed`).

Only requests that cannot disturb the live breaker: a check could claim the probe of a
half-open breaker and an execution could charge, so neither is made here (the workflow's
behaviour is covered in moto by tests/stepfunctions).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

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


def invoke_gate(outputs: dict[str, str], event: Any) -> tuple[str | None, Any]:
    import boto3

    response = boto3.client("lambda").invoke(
        FunctionName=outputs["BreakerGateFunctionArn"], Payload=json.dumps(event).encode()
    )
    return response.get("FunctionError"), json.loads(response["Payload"].read())


def test_the_gate_rejects_a_bad_request_by_name(outputs: dict[str, str]) -> None:
    event = json.loads((EVENTS / "gate-bad-request.json").read_text())
    error, answer = invoke_gate(outputs, event)
    assert error is not None
    assert answer["errorType"] == "InvalidGateRequest"
    assert "action" in answer["errorMessage"]


def test_a_stale_token_is_a_no_op_on_the_deployed_gate(outputs: dict[str, str]) -> None:
    # A token no check issued never matches a lease: nothing changes, whatever the state.
    import boto3

    machine = boto3.client("stepfunctions").describe_state_machine(
        stateMachineArn=outputs["PaymentStateMachineArn"]
    )
    circuit = json.loads(machine["definition"])["States"]["Init"]["Parameters"]["circuit"]
    event = json.loads((EVENTS / "gate-record-stale-token.json").read_text())
    event["breaker"] = circuit["breaker"]  # the one breaker the deployed gate serves
    error, answer = invoke_gate(outputs, event)
    assert error is None, answer
    assert (answer["applied"], answer["stale_token"]) == (False, True)


def test_the_deployed_definition_has_every_placeholder_filled(outputs: dict[str, str]) -> None:
    import boto3

    machine = boto3.client("stepfunctions").describe_state_machine(
        stateMachineArn=outputs["PaymentStateMachineArn"]
    )
    assert "${" not in machine["definition"]
    assert machine["tracingConfiguration"]["enabled"] is True
