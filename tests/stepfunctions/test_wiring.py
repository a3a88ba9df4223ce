"""template.yaml against statemachine/payment.asl.json and the functions it wires together.

The workflow tests deploy from the template (conftest.stack_factory); these tests check what
a deployment in moto cannot: that placeholders and substitutions match both ways, and that
the roles grant exactly what the definition and the functions use.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from devtools.functions import load_function
from devtools.sam_template import (
    attached_layers,
    condition_values,
    layer_id,
    load_template,
    runtimes,
    take_branches,
)
from devtools.servers import REPO_ROOT
from fleetbreaker import MemoryStore
from tests.stepfunctions.conftest import (
    CHARGE_FUNCTION,
    GATE_FUNCTION,
    STATE_MACHINE,
    functions_named_by,
)
from tests.stepfunctions.harness import environment, resolve
from tests.support import function_reads

PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
TRANSIENT_LAMBDA_ERRORS = {
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


@pytest.fixture(scope="module")
def machine(template: dict[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = template["Resources"][STATE_MACHINE]["Properties"]
    return properties


@pytest.fixture(scope="module")
def definition_text(machine: dict[str, Any]) -> str:
    return (REPO_ROOT / machine["DefinitionUri"]).read_text()


@pytest.fixture(scope="module")
def tasks(definition_text: str) -> dict[str, dict[str, Any]]:
    states = json.loads(definition_text)["States"]
    return {name: state for name, state in states.items() if state["Type"] == "Task"}


def task_function_placeholder(task: dict[str, Any]) -> str:
    """The placeholder naming the Lambda function a Task invokes."""
    if task["Resource"] == "arn:${Partition}:states:::lambda:invoke":
        target = task["Parameters"]["FunctionName"]
    else:  # a function ARN as the Resource itself
        target = task["Resource"]
    match = PLACEHOLDER.fullmatch(target)
    assert match, f"the Task's function is not a ${{Placeholder}}: {target!r}"
    return match.group(1)


# --------------------------------------------------------------------------- substitutions


def test_the_state_machine_is_the_definition_file(template: dict[str, Any]) -> None:
    resource = template["Resources"][STATE_MACHINE]
    assert resource["Type"] == "AWS::Serverless::StateMachine"
    assert resource["Properties"]["DefinitionUri"] == "statemachine/payment.asl.json"
    assert "Definition" not in resource["Properties"]


# The stacks the workflow is wired for: the gate is invoked as $LATEST, or with SnapStart as
# its live alias (a published, snapshotted version).
SNAPSTART = ["None", "PublishedVersions"]


def invoked(template: dict[str, Any], value: Any, snapstart: str) -> tuple[str, str]:
    """(function, "Arn" or "Alias"): what a substitution or policy resource names with
    SnapStart=``snapstart`` (a Ref to ``Function.Alias`` is SAM's name for its live alias)."""
    taken = take_branches(value, condition_values(template, {"SnapStart": snapstart}))
    if list(taken) == ["Fn::GetAtt"]:
        logical_id, attribute = taken["Fn::GetAtt"]
        return logical_id, attribute
    assert list(taken) == ["Ref"], f"{value!r} is neither a function's ARN nor its alias"
    logical_id, _, attribute = taken["Ref"].partition(".")
    return logical_id, attribute


@pytest.mark.parametrize("snapstart", SNAPSTART)
def test_every_task_names_its_function_through_a_substitution(
    template: dict[str, Any],
    machine: dict[str, Any],
    tasks: dict[str, dict[str, Any]],
    snapstart: str,
) -> None:
    substitutions = machine["DefinitionSubstitutions"]
    assert tasks
    for name, task in tasks.items():
        placeholder = task_function_placeholder(task)
        assert placeholder in substitutions, f"{name}: ${{{placeholder}}} has no substitution"
        logical_id, attribute = invoked(template, substitutions[placeholder], snapstart)
        assert logical_id in (GATE_FUNCTION, CHARGE_FUNCTION), name
        # Only the gate builds a breaker, and only SnapStart snapshots it (its live alias).
        snapshotted = logical_id == GATE_FUNCTION and snapstart == "PublishedVersions"
        assert attribute == ("Alias" if snapshotted else "Arn"), name


def test_placeholders_and_substitutions_match_both_ways(
    machine: dict[str, Any], definition_text: str
) -> None:
    placeholders = set(PLACEHOLDER.findall(definition_text))
    assert placeholders == set(machine["DefinitionSubstitutions"])


def test_substituted_values_resolve(template: dict[str, Any], machine: dict[str, Any]) -> None:
    # Every substitution is a function ARN, a parameter or a pseudo parameter: nothing a
    # deployment cannot fill.
    for snapstart in SNAPSTART:
        conditions = condition_values(template, {"SnapStart": snapstart})
        refs = {
            f"{logical_id}.{attribute}": "arn"
            for logical_id in functions_named_by(machine)
            for attribute in ("Arn", "Alias")
        }
        for value in machine["DefinitionSubstitutions"].values():
            assert resolve(take_branches(value, conditions), template, refs)


# --------------------------------------------------------------------------- IAM


@pytest.mark.parametrize("snapstart", SNAPSTART)
def test_the_workflow_may_invoke_exactly_its_functions(
    template: dict[str, Any],
    machine: dict[str, Any],
    tasks: dict[str, dict[str, Any]],
    snapstart: str,
) -> None:
    [policy] = machine["Policies"]
    [statement] = [s for s in policy["Statement"] if s["Sid"] == "InvokeWorkflowFunctions"]
    assert statement["Effect"] == "Allow"
    assert statement["Action"] == "lambda:InvokeFunction"
    # Exact ARNs (of the functions, or of the live aliases the tasks name): no
    # "function:<name>*" wildcard that could match another function.
    granted = {invoked(template, item, snapstart) for item in statement["Resource"]}
    named = {
        invoked(
            template, machine["DefinitionSubstitutions"][task_function_placeholder(t)], snapstart
        )
        for t in tasks.values()
    }
    assert granted == named
    assert {logical_id for logical_id, _ in granted} == {GATE_FUNCTION, CHARGE_FUNCTION}
    assert machine["Tracing"] == {"Enabled": True}


def test_the_workflow_may_only_deliver_its_logs_besides(machine: dict[str, Any]) -> None:
    # GIVEN the state machine's policy WHEN its statements are listed THEN the only other one
    # is what Step Functions' log delivery needs, and only log actions are in it
    [policy] = machine["Policies"]
    others = [s for s in policy["Statement"] if s["Sid"] != "InvokeWorkflowFunctions"]
    [logs] = others
    assert logs["Sid"] == "DeliverWorkflowLogs"
    assert all(action.startswith("logs:") for action in logs["Action"])
    assert "logs:CreateLogDelivery" in logs["Action"]


def test_the_workflow_logs_errors_without_execution_data(
    template: dict[str, Any], machine: dict[str, Any]
) -> None:
    logging = machine["Logging"]
    assert logging["Level"] == {"Ref": "WorkflowLogLevel"}
    assert template["Parameters"]["WorkflowLogLevel"]["Default"] == "ERROR"
    assert logging["IncludeExecutionData"] is False
    [destination] = logging["Destinations"]
    assert destination["CloudWatchLogsLogGroup"]["LogGroupArn"] == {
        "Fn::GetAtt": ["PaymentStateMachineLogGroup", "Arn"]
    }


def test_task_integrations_name_the_partition_through_a_substitution(
    machine: dict[str, Any], tasks: dict[str, dict[str, Any]]
) -> None:
    # A literal arn:aws: would not deploy in aws-cn or aws-us-gov.
    assert machine["DefinitionSubstitutions"]["Partition"] == {"Ref": "AWS::Partition"}
    for name, task in tasks.items():
        assert not task["Resource"].startswith("arn:aws:"), name


def test_the_gate_may_only_read_and_update_the_breaker_table(template: dict[str, Any]) -> None:
    properties = template["Resources"][GATE_FUNCTION]["Properties"]
    assert properties["Role"] == {"Fn::GetAtt": ["BreakerGateFunctionRole", "Arn"]}
    [inline] = template["Resources"]["BreakerGateFunctionRole"]["Properties"]["Policies"]
    policy = inline["PolicyDocument"]
    # (the cache statement, only with BreakerStore=redis: tests/sam/test_template_redis.py)
    # and nothing else: the second statement is the cache's or none at all.
    assert len(policy["Statement"]) == 2
    condition, _, otherwise = policy["Statement"][1]["Fn::If"]
    assert (condition, otherwise) == ("BreakerOnRedis", {"Ref": "AWS::NoValue"})
    assert policy["Statement"][:1] == [
        {
            "Sid": "BreakerState",
            "Effect": "Allow",
            "Action": ["dynamodb:GetItem", "dynamodb:UpdateItem"],
            "Resource": {"Fn::GetAtt": ["CircuitBreakersTable", "Arn"]},
            # Only the items of the breakers it serves (GATE_ALLOWED_BREAKERS): the key is
            # the breaker's name.
            "Condition": {
                "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [{"Ref": "BreakerName"}]}
            },
        }
    ]
    allowed = properties["Environment"]["Variables"]["GATE_ALLOWED_BREAKERS"]
    assert allowed == {"Ref": "BreakerName"}
    # The same two actions the SAM tests prove the breaker needs, for PaymentFunction.
    [payment] = template["Resources"]["PaymentFunctionRole"]["Properties"]["Policies"]
    statements = payment["PolicyDocument"]["Statement"]
    assert policy["Statement"][0]["Action"] == statements[0]["Action"]


def test_the_charge_function_has_no_aws_permissions(template: dict[str, Any]) -> None:
    assert "Policies" not in template["Resources"][CHARGE_FUNCTION]["Properties"]


# --------------------------------------------------------------------------- functions


@pytest.mark.parametrize(
    ("logical_id", "code"), [(GATE_FUNCTION, "breaker_gate"), (CHARGE_FUNCTION, "charge")]
)
def test_function_is_built_and_traced_like_the_others(
    template: dict[str, Any], logical_id: str, code: str
) -> None:
    resource = template["Resources"][logical_id]
    properties = resource["Properties"]
    assert properties["CodeUri"] == f"functions/{code}/"
    assert properties["Handler"] == "app.lambda_handler"
    assert resource["Metadata"]["BuildMethod"] == "makefile"
    makefile = (REPO_ROOT / "functions" / code / "Makefile").read_text()
    assert f"build-{logical_id}:" in makefile
    assert properties["Runtime"] == {"Ref": "Runtime"}
    assert properties["Architectures"] == [{"Ref": "Architecture"}]
    # The Runtime's fleetbreaker layer, and the ADOT layer only when AdotLayerArn is set.
    for runtime in runtimes(template):
        assert attached_layers(template, logical_id, {"Runtime": runtime}) == [
            {"Ref": layer_id(runtime)}
        ]
    adot = {"AdotLayerArn": "arn:aws:lambda:us-east-1:901920570463:layer:aws-otel-python:1"}
    traced = attached_layers(template, logical_id, adot)
    assert traced[1:] == ([{"Ref": "AdotLayerArn"}] if logical_id == GATE_FUNCTION else [])
    assert properties["Tracing"] == "Active"


@pytest.mark.parametrize(
    ("logical_id", "code"), [(GATE_FUNCTION, "breaker_gate"), (CHARGE_FUNCTION, "charge")]
)
def test_every_variable_the_template_sets_is_read_by_the_function(
    template: dict[str, Any], logical_id: str, code: str
) -> None:
    variables = template["Resources"][logical_id]["Properties"]["Environment"]["Variables"]
    source = (REPO_ROOT / "functions" / code / "app.py").read_text()
    for name in variables:
        assert function_reads(source, name), name


def test_the_gate_environment_is_valid_and_serves_the_workflow_breaker(
    template: dict[str, Any], machine: dict[str, Any]
) -> None:
    app = load_function("breaker_gate")
    properties = template["Resources"][GATE_FUNCTION]["Properties"]
    variables = properties["Environment"]["Variables"]
    env = environment(properties, template, {"CircuitBreakersTable": "CircuitBreakers"})
    settings = app.GateSettings.from_env(env)
    breaker = resolve(machine["DefinitionSubstitutions"]["BreakerName"], template, {})
    assert settings.allowed_breakers == {breaker}
    # One breaker, one configuration: the gate and PaymentFunction read the same parameters.
    payment = template["Resources"]["PaymentFunction"]["Properties"]["Environment"]["Variables"]
    for name in ("BREAKER_FAILURE_THRESHOLD", "BREAKER_WINDOW_SECONDS", "BREAKER_RECOVERY_TIMEOUT"):
        assert variables[name] == payment[name], name
    assert payment["BREAKER_NAME"] == machine["DefinitionSubstitutions"]["BreakerName"]


def test_the_gate_keeps_its_breakers_where_the_payment_function_does(
    template: dict[str, Any],
) -> None:
    # With BreakerStore=redis the payment function's breaker moves to the cache; the gate's
    # must follow, or the workflow and the API would trip two different breakers.
    gate = template["Resources"][GATE_FUNCTION]["Properties"]
    payment = template["Resources"]["PaymentFunction"]["Properties"]
    for name in ("CIRCUIT_BREAKER_TABLE", "CIRCUIT_BREAKER_REDIS_URL"):
        assert gate["Environment"]["Variables"][name] == payment["Environment"]["Variables"][name]
    assert gate["VpcConfig"] == payment["VpcConfig"]
    assert "VpcConfig" not in template["Resources"][CHARGE_FUNCTION]["Properties"]


def test_the_probe_lease_outlasts_the_charge_step(template: dict[str, Any]) -> None:
    # A probe's record must arrive while its lease holds, even after the Charge retries.
    app = load_function("breaker_gate")
    properties = template["Resources"][GATE_FUNCTION]["Properties"]
    env = environment(properties, template, {"CircuitBreakersTable": "CircuitBreakers"})
    lease = app.GateSettings.from_env(env).breaker_config.probe_lease_seconds
    charge_timeout = template["Resources"][CHARGE_FUNCTION]["Properties"]["Timeout"]
    definition = json.loads((REPO_ROOT / "statemachine" / "payment.asl.json").read_text())
    [retry] = definition["States"]["Charge"]["Retry"]
    assert set(retry["ErrorEquals"]) == TRANSIENT_LAMBDA_ERRORS
    backoff = sum(
        retry["IntervalSeconds"] * retry["BackoffRate"] ** n for n in range(retry["MaxAttempts"])
    )
    assert lease > charge_timeout + backoff


def test_the_probe_deadline_covers_the_charge_step(tasks: dict[str, dict[str, Any]]) -> None:
    # The workflow states how long Charge may take (circuit.probe_seconds): a probe's lease
    # lasts that long, so its record must arrive by then, after the Charge retries too.
    definition = json.loads((REPO_ROOT / "statemachine" / "payment.asl.json").read_text())
    probe_seconds = definition["States"]["Init"]["Parameters"]["circuit"]["probe_seconds"]
    charge = tasks["Charge"]
    [retry] = charge["Retry"]
    backoff = sum(
        retry["IntervalSeconds"] * retry["BackoffRate"] ** n for n in range(retry["MaxAttempts"])
    )
    assert probe_seconds > charge["TimeoutSeconds"] + backoff


def test_the_probe_deadline_is_not_cut_by_the_gates_lease(template: dict[str, Any]) -> None:
    # The gate caps probe_seconds at its lease: a longer one would be cut silently.
    app = load_function("breaker_gate")
    properties = template["Resources"][GATE_FUNCTION]["Properties"]
    env = environment(properties, template, {"CircuitBreakersTable": "CircuitBreakers"})
    lease = app.GateSettings.from_env(env).breaker_config.probe_lease_seconds
    definition = json.loads((REPO_ROOT / "statemachine" / "payment.asl.json").read_text())
    assert definition["States"]["Init"]["Parameters"]["circuit"]["probe_seconds"] <= lease


def test_the_charge_task_outlasts_the_charge_function(
    template: dict[str, Any], tasks: dict[str, dict[str, Any]]
) -> None:
    # A Task that times out first would record a failure for a charge still running.
    function_timeout = template["Resources"][CHARGE_FUNCTION]["Properties"]["Timeout"]
    assert tasks["Charge"]["TimeoutSeconds"] > function_timeout


def test_the_wait_loop_carries_the_whole_circuit_block(definition_text: str) -> None:
    states = json.loads(definition_text)["States"]
    circuit = states["Init"]["Parameters"]["circuit"]
    carried = states["CountWait"]["Parameters"]
    assert states["CountWait"]["ResultPath"] == "$.circuit"
    assert {key.removesuffix(".$") for key in carried} == set(circuit)


@pytest.mark.parametrize("mode", ["enforce", "shadow"])
def test_the_check_task_passes_on_every_field_of_the_gates_answer(
    tasks: dict[str, dict[str, Any]], mode: str
) -> None:
    # GIVEN the gate's answer to a check, in either mode
    app = load_function("breaker_gate")
    env = {"CIRCUIT_BREAKER_TABLE": "CircuitBreakers", "BREAKER_MODE": mode}
    gate = app.BreakerGate(app.GateSettings.from_env(env), MemoryStore())
    answer = gate.handle({"action": "check", "breaker": "payment-api"})
    # THEN CheckBreaker's ResultSelector selects each of its fields (and no other: a path
    # to a field the gate does not answer fails the execution)
    selector = tasks["CheckBreaker"]["ResultSelector"]
    assert selector == {f"{key}.$": f"$.Payload.{key}" for key in answer}


def test_the_gate_and_charge_outputs(template: dict[str, Any]) -> None:
    outputs = template["Outputs"]
    assert outputs["PaymentStateMachineArn"]["Value"] == {"Ref": STATE_MACHINE}
    assert outputs["BreakerGateFunctionArn"]["Value"] == {"Fn::GetAtt": [GATE_FUNCTION, "Arn"]}
    for name in ("PaymentStateMachineArn", "BreakerGateFunctionArn", "ChargeFunctionName"):
        assert outputs[name]["Description"].strip()
