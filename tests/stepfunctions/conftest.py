"""Fixtures for the breaker gate, the charge function and the payment workflow.

``stack_factory`` deploys PaymentStateMachine as template.yaml declares it (functions,
environments, DefinitionSubstitutions) into moto, with the functions running in-process.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devtools import servers
from devtools.functions import load_function
from devtools.payment_api import FakePaymentApi
from devtools.sam_template import load_template, take_branches
from devtools.servers import REPO_ROOT
from fleetbreaker import DynamoDBStore
from tests import coverage_scope
from tests.stepfunctions.harness import (
    DEFAULT_CONDITIONS,
    InProcessLambdas,
    Workflow,
    environment,
    install_execution_hooks,
    read_definition,
    resolve,
)
from tests.support import FakeClock

REGION = servers.REGION
BREAKER = "payment-api"  # the template's BreakerName default
STATE_MACHINE = "PaymentStateMachine"
GATE_FUNCTION = "BreakerGateFunction"
CHARGE_FUNCTION = "ChargeFunction"
# On top of the gate's environment from the template: the tests' own numbers (a threshold of
# 3 keeps the lifecycle short), so they do not change when the template's defaults do; and a
# store deadline a busy machine cannot miss (the table is on moto's server, which shares two
# cores with the other test workers; tests/faults covers the 1 s default).
GATE_OVERRIDES = {
    "BREAKER_FAILURE_THRESHOLD": "3",
    "BREAKER_WINDOW_SECONDS": "60",
    "BREAKER_RECOVERY_TIMEOUT": "30",
    "BREAKER_PROBE_LEASE_SECONDS": "60",
    "BREAKER_STORE_DEADLINE_SECONDS": "30",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
}


def functions_named_by(machine: dict[str, Any]) -> list[str]:
    """Logical ids of the functions a state machine's DefinitionSubstitutions point at, in the
    default stack (the harness's conditions)."""
    values = take_branches(machine["DefinitionSubstitutions"], DEFAULT_CONDITIONS).values()
    return sorted(
        value["Fn::GetAtt"][0]
        for value in values
        if isinstance(value, dict) and "Fn::GetAtt" in value
    )


@pytest.fixture
def breaker_table(moto_server: str) -> tuple[str, str]:
    """(endpoint, table): a new, empty breaker table for each test."""
    return moto_server, servers.make_table(moto_server)


@pytest.fixture
def payment_api() -> Iterator[FakePaymentApi]:
    with FakePaymentApi() as api:
        yield api


@dataclass
class Waits:
    """Every Wait and Retry interval the interpreter asked for, in seconds.

    While ``clock_moves`` is True a Wait state moves the breakers' clock by its duration, as
    real time would; set it False to keep the breaker's time frozen across a wait loop.
    ``during`` runs inside each Wait, before the clock moves: what happens elsewhere while
    an execution waits (another execution finishing, say).
    """

    clock: FakeClock
    seconds: list[int]
    retry_intervals: list[float]
    clock_moves: bool = True
    during: Callable[[int], None] | None = None


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
        if recorded.during is not None:
            recorded.during(wait_seconds)
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
    substitutions: dict[str, str]

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
    """Deploys PaymentStateMachine from template.yaml into moto; call it once per test.

    Everything the workflow's wiring says comes from the template: which functions the
    DefinitionSubstitutions name (created in moto under their logical ids, with their
    Handler, Runtime and resolved Environment), the substitutions applied to the definition
    file, and the parameter defaults. The test supplies the table, the payment API's URL, and
    ``gate_overrides`` on top of the gate's environment.

    The functions' modules hold one gate and one API client each, like one warm container,
    built from the function's environment as the first invocation would build them; only
    the clock and the DynamoDB client (test timeouts) are the test's.
    """
    import boto3
    from moto import mock_aws

    coverage_scope.install_stepfunctions()
    install_execution_hooks()
    endpoint, table = breaker_table
    template = load_template()
    machine = template["Resources"][STATE_MACHINE]["Properties"]
    lambdas = InProcessLambdas()

    def start_gate(env: dict[str, str]) -> Any:
        app = load_function("breaker_gate")
        store = DynamoDBStore(table, boto3_client=servers.dynamodb_client(endpoint))
        gate = app.create_gate(env, clock=clock, store=store)
        monkeypatch.setattr(app, "gate", gate)
        return app

    def start_charge(env: dict[str, str]) -> Any:
        app = load_function("charge")
        monkeypatch.setattr(app, "api", app.PaymentApi(app.ChargeSettings.from_env(env)))
        return app

    containers = {"breaker_gate": start_gate, "charge": start_charge}

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
            created = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))
            return str(created["Role"]["Arn"])

        function_role = role("functions", "lambda.amazonaws.com")
        workflow_role = role("workflow", "states.amazonaws.com")

        def deploy(**gate_overrides: str) -> PaymentStack:
            assert not lambdas.handlers, "one stack per test: the modules hold one container"
            refs = {"CircuitBreakersTable": table, "PaymentApiUrl": payment_api.url}
            overrides = {"breaker_gate": {**GATE_OVERRIDES, **gate_overrides}}
            modules = {}
            for logical_id in functions_named_by(machine):
                properties = template["Resources"][logical_id]["Properties"]
                code = Path(properties["CodeUri"]).name
                env = {**environment(properties, template, refs), **overrides.get(code, {})}
                created = lambda_client.create_function(
                    FunctionName=logical_id,
                    Runtime=str(resolve(properties["Runtime"], template, refs)),
                    Role=function_role,
                    Handler=properties["Handler"],
                    Code={"ZipFile": _code_zip(code)},
                    Timeout=properties["Timeout"],
                    MemorySize=properties["MemorySize"],
                    Environment={"Variables": env},
                )
                refs[f"{logical_id}.Arn"] = created["FunctionArn"]
                module_name, handler = properties["Handler"].split(".")
                assert module_name == "app", properties["Handler"]
                modules[code] = containers[code](env)
                lambdas.register(logical_id, getattr(modules[code], handler))

            substitutions = {
                name: str(resolve(value, template, refs))
                for name, value in machine["DefinitionSubstitutions"].items()
            }
            definition = read_definition(REPO_ROOT / machine["DefinitionUri"], substitutions)
            arn = sfn.create_state_machine(
                name=STATE_MACHINE,
                definition=definition,
                roleArn=workflow_role,
                type=machine["Type"],
                tracingConfiguration={"enabled": machine["Tracing"]["Enabled"]},
            )["stateMachineArn"]
            return PaymentStack(
                workflow=Workflow(sfn, arn),
                lambdas=lambdas,
                gate_function=GATE_FUNCTION,
                charge_function=CHARGE_FUNCTION,
                gate=modules["breaker_gate"].gate,
                definition=definition,
                substitutions=substitutions,
            )

        yield deploy


@pytest.fixture
def stack(stack_factory: Any) -> Any:
    return stack_factory()
