"""Fixtures for the breaker gate, the charge function and the payment workflow.

The breakers live in a fresh table on moto's standalone server (``moto_server``): it
serialises writes to an item as DynamoDB does, so executions running side by side race for
the probe exactly as deployed ones would. Step Functions, Lambda and IAM are moto's
in-process backends (``mock_aws``); moto intercepts only AWS host names, so the gate's
DynamoDB client, pointed at the loopback server, passes straight through.
"""

from __future__ import annotations

import io
import json
import types
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from fleetbreaker import DynamoDBStore
from tests import servers
from tests.stepfunctions.harness import (
    STATEMACHINE_DIR,
    FakePaymentApi,
    InProcessLambdas,
    Workflow,
    load_function,
    read_definition,
)
from tests.support import FakeClock

REGION = servers.REGION
BREAKER = "payment-api"
# The workflow's settings for the breaker: small numbers keep the lifecycle short.
GATE_ENV = {
    "BREAKER_FAILURE_THRESHOLD": "3",
    "BREAKER_WINDOW_SECONDS": "60",
    "BREAKER_RECOVERY_TIMEOUT": "30",
    "BREAKER_PROBE_LEASE_SECONDS": "60",
    "GATE_MAX_WAIT_SECONDS": "300",
    "GATE_ALLOWED_BREAKERS": BREAKER,
    "POWERTOOLS_LOG_LEVEL": "WARNING",
}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def breaker_table(moto_server: str) -> tuple[str, str]:
    """(endpoint, table): a new, empty breaker table for each test."""
    return moto_server, servers.make_table(moto_server)


@pytest.fixture
def payment_api() -> Iterator[FakePaymentApi]:
    api = FakePaymentApi()
    try:
        yield api
    finally:
        api.close()


@dataclass
class Waits:
    """Every Wait and Retry interval the interpreter asked for, in seconds.

    While ``clock_moves`` is True a Wait state moves the breakers' clock by its duration, as
    real time would; set it False to keep the breaker's time frozen across a wait loop.
    """

    clock: FakeClock
    seconds: list[int]
    retry_intervals: list[float]
    clock_moves: bool = True


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> Waits:
    """Wait states and Retry back-offs return at once (moto would really sleep)."""
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import (
        WaitFunction,
    )

    recorded = Waits(clock, [], [])

    # WaitFunction._wait_interval is where every Wait state (Seconds, SecondsPath, Timestamp)
    # blocks; the retrier calls time.sleep(interval) through its own module's `time`.
    def wait_interval(self: Any, env: Any, wait_seconds: int) -> None:
        recorded.seconds.append(wait_seconds)
        if recorded.clock_moves:
            clock.advance(wait_seconds)

    monkeypatch.setattr(WaitFunction, "_wait_interval", wait_interval)
    monkeypatch.setattr(
        retrier_decl,
        "time",
        types.SimpleNamespace(sleep=recorded.retry_intervals.append),
    )
    return recorded


def _code_zip(function: str) -> bytes:
    """The function's folder as a deployment package (moto stores it; nothing runs it)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.write(servers.REPO_ROOT / "functions" / function / "app.py", "app.py")
    return buffer.getvalue()


@dataclass
class PaymentStack:
    """The payment workflow deployed in moto, its functions running in this process."""

    workflow: Workflow
    lambdas: InProcessLambdas
    gate_function: str
    charge_function: str
    gate: Any
    definition: str

    @property
    def gate_calls(self) -> int:
        return self.lambdas.count(self.gate_function)

    @property
    def charge_calls(self) -> int:
        return self.lambdas.count(self.charge_function)

    def breaker_state(self) -> str:
        """The breaker as a fresh container would read it from the table (no cache)."""
        record = self.gate.store.load(BREAKER, self.gate.clock())
        return "closed" if record is None else str(record.state.value)


@pytest.fixture
def stack_factory(
    monkeypatch: pytest.MonkeyPatch,
    breaker_table: tuple[str, str],
    payment_api: FakePaymentApi,
    clock: FakeClock,
    waits: Waits,
) -> Iterator[Any]:
    """Deploys the payment workflow into moto: call it once, with gate environment overrides.

    The functions' modules hold one gate and one API client each, like one warm container.
    """
    import boto3
    from moto import mock_aws

    endpoint, table = breaker_table
    gate_app = load_function("breaker_gate")
    charge_app = load_function("charge")
    lambdas = InProcessLambdas()

    with (
        mock_aws(config={"stepfunctions": {"execute_state_machine": True}}),
        lambdas.patch(),
    ):
        iam = boto3.client("iam", region_name=REGION)
        lambda_client = boto3.client("lambda", region_name=REGION)
        sfn = boto3.client("stepfunctions", region_name=REGION)

        def role(name: str, service: str) -> str:
            trust = {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": service},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
            return str(
                iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"][
                    "Arn"
                ]
            )

        function_role = role("functions", "lambda.amazonaws.com")
        workflow_role = role("workflow", "states.amazonaws.com")

        def function(name: str, code: str, env: dict[str, str]) -> str:
            return str(
                lambda_client.create_function(
                    FunctionName=name,
                    Runtime="python3.13",
                    Role=function_role,
                    Handler="app.lambda_handler",
                    Code={"ZipFile": _code_zip(code)},
                    Environment={"Variables": env},
                )["FunctionArn"]
            )

        def deploy(**gate_overrides: str) -> PaymentStack:
            gate_env = {"CIRCUIT_BREAKER_TABLE": table, **GATE_ENV, **gate_overrides}
            charge_env = {"PAYMENT_API_URL": payment_api.url, "PAYMENT_READ_TIMEOUT": "10"}
            assert not lambdas.handlers, "one stack per test: the modules hold one container"
            gate_name, charge_name = "BreakerGate", "Charge"
            gate_arn = function(gate_name, "breaker_gate", gate_env)
            charge_arn = function(charge_name, "charge", charge_env)

            # The container's objects, as the first invocation builds them from the function's
            # environment; only the clock and the DynamoDB client (test timeouts) are the test's.
            store = DynamoDBStore(table, boto3_client=servers.dynamodb_client(endpoint))
            gate = gate_app.create_gate(gate_env, clock=clock, store=store)
            monkeypatch.setattr(gate_app, "gate", gate)
            monkeypatch.setattr(
                charge_app,
                "api",
                charge_app.PaymentApi(charge_app.ChargeSettings.from_env(charge_env)),
            )
            lambdas.register(gate_name, gate_app.lambda_handler)
            lambdas.register(charge_name, charge_app.lambda_handler)

            definition = read_definition(
                STATEMACHINE_DIR / "payment.asl.json",
                {
                    "BreakerGateFunctionArn": gate_arn,
                    "ChargeFunctionArn": charge_arn,
                    "BreakerName": BREAKER,
                },
            )
            arn = sfn.create_state_machine(
                name="payment", definition=definition, roleArn=workflow_role
            )["stateMachineArn"]
            return PaymentStack(
                Workflow(sfn, arn), lambdas, gate_name, charge_name, gate, definition
            )

        yield deploy


@pytest.fixture
def stack(stack_factory: Any) -> Any:
    return stack_factory()
