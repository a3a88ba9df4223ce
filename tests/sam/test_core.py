"""The core stack (DeployExample=false) and attaching its layer to a function of your own.

The core is what a user needs to put fleetbreaker in their own functions: the table, both
layers, their ARNs in SSM and a managed policy on the table. Everything else is the example
and exists only with DeployExample=true. The README's attach snippet is a template of its
own; it is linted and translated here as a user would deploy it.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest

from devtools.sam_template import layer_id, load_template, runtimes
from devtools.servers import REPO_ROOT
from tests.sam.conftest import attach_snippet

# The layers of every runtime, full and slim, their SSM parameters, and their permissions
# (only with LayerSharingOrganizationId).
LAYERS = {
    layer_id(runtime, slim=slim) for runtime in runtimes(load_template()) for slim in (False, True)
}
LAYER_PERMISSIONS = {f"{layer}Permission" for layer in LAYERS}
# Conditional parts of the core: each exists only when a parameter asks for it.
OPTIONAL_CORE = {
    # The optional Redis store: with BreakerStore=redis, functions of your own use it too.
    "BreakerCache",
    "BreakerCacheUser",
    "BreakerCacheUserGroup",
    *LAYER_PERMISSIONS,
}
CORE = {
    "CircuitBreakersTable",
    *LAYERS,
    *(f"{layer}ArnParameter" for layer in LAYERS),
    # The deprecated names of the Runtime parameter's layers.
    "FleetbreakerLayerArnParameter",
    "FleetbreakerSlimLayerArnParameter",
    "CircuitBreakersAccessPolicy",
    # The view of every breaker in MetricsNamespace, from functions of any stack: the
    # dashboard, and alarms when a breaker opens, stays open, or its store is misconfigured
    # (no table, access denied, ...).
    "BreakerDashboard",
    "BreakerOpenedAlarm",
    "BreakerOpenTooLongAlarm",
    "StoreMisconfiguredAlarm",
    *OPTIONAL_CORE,
}
# Conditions that hold only when the example is deployed.
# PauseFromContainers is BreakerOnRedis and DeferWhenOpen: it implies the example too.
EXAMPLE_CONDITIONS = {"ExampleEnabled", "DeferWhenOpen", "PauseFromContainers"}
STACK = "fleetbreaker"  # the stack name the README's snippet assumes


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def render(value: Any, stack: str = STACK) -> str:
    """A ``!Sub`` of ``${AWS::StackName}`` alone, as CloudFormation renders it."""
    text = value["Fn::Sub"]
    assert isinstance(text, str)
    return text.replace("${AWS::StackName}", stack)


def test_the_example_is_deployed_by_default(template: dict[str, Any]) -> None:
    parameter = template["Parameters"]["DeployExample"]
    assert (parameter["Default"], parameter["AllowedValues"]) == ("true", ["true", "false"])
    assert template["Conditions"]["ExampleEnabled"] == {
        "Fn::Equals": [{"Ref": "DeployExample"}, "true"]
    }
    defer = template["Conditions"]["DeferWhenOpen"]["Fn::And"]
    assert {"Condition": "ExampleEnabled"} in defer


def test_every_resource_outside_the_core_belongs_to_the_example(
    template: dict[str, Any],
) -> None:
    # GIVEN every resource WHEN its condition is read THEN only the core's are unconditional
    # on the example, so DeployExample=false leaves the core alone
    outside = {
        name: resource.get("Condition")
        for name, resource in template["Resources"].items()
        if name not in CORE
    }
    assert outside
    assert {name: c for name, c in outside.items() if c not in EXAMPLE_CONDITIONS} == {}
    assert set(CORE) <= set(template["Resources"])
    for name in CORE - OPTIONAL_CORE:
        assert "Condition" not in template["Resources"][name], name


def test_outputs_of_example_resources_exist_only_with_the_example(
    template: dict[str, Any],
) -> None:
    conditional = {
        name
        for name, r in template["Resources"].items()
        if r.get("Condition") in EXAMPLE_CONDITIONS
    }
    for name, output in template["Outputs"].items():
        named = set(re.findall(r"[A-Za-z]+", json.dumps(output["Value"]))) & conditional
        if named:
            assert output.get("Condition") in EXAMPLE_CONDITIONS, name


def policy_statement(template: dict[str, Any]) -> dict[str, Any]:
    policy = template["Resources"]["CircuitBreakersAccessPolicy"]
    assert policy["Type"] == "AWS::IAM::ManagedPolicy"
    [statement] = policy["Properties"]["PolicyDocument"]["Statement"]
    assert isinstance(statement, dict)
    return statement


def test_the_managed_policy_grants_the_two_actions_on_the_table(
    template: dict[str, Any],
) -> None:
    statement = policy_statement(template)
    assert statement["Effect"] == "Allow"
    assert statement["Action"] == ["dynamodb:GetItem", "dynamodb:UpdateItem"]
    assert statement["Resource"] == {"Fn::GetAtt": ["CircuitBreakersTable", "Arn"]}
    # The same actions the SAM tests prove the breaker sends (PaymentFunction's policy).
    role = template["Resources"]["PaymentFunctionRole"]["Properties"]
    payment = role["Policies"][0]["PolicyDocument"]
    assert statement["Action"] == payment["Statement"][0]["Action"]


def test_the_managed_policy_can_be_scoped_to_breaker_names(template: dict[str, Any]) -> None:
    # GIVEN PolicyBreakerNames WHEN set THEN the statement allows only those partition keys
    # (the items' key is the breaker's name), and without it the whole table
    assert template["Parameters"]["PolicyBreakerNames"]["Default"] == ""
    assert policy_statement(template)["Condition"] == {
        "Fn::If": [
            "PolicyScopedToBreakerNames",
            {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": {"Ref": "PolicyBreakerNames"}}},
            {"Ref": "AWS::NoValue"},
        ]
    }


def test_the_alarms_notify_the_optional_topic(template: dict[str, Any]) -> None:
    alarms = [r for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    assert alarms
    expected = {
        "Fn::If": ["AlarmNotifiesTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]
    }
    for alarm in alarms:
        assert alarm["Properties"]["AlarmActions"] == expected
        assert alarm["Properties"]["OKActions"] == expected
    assert template["Parameters"]["AlarmTopicArn"]["Default"] == ""


def test_the_template_names_no_partition(template: dict[str, Any]) -> None:
    # arn:aws: would not deploy in aws-cn or aws-us-gov; ${AWS::Partition} does
    text = (REPO_ROOT / "template.yaml").read_text()
    code = "\n".join(line.split("#")[0] for line in text.splitlines())
    assert "arn:aws:" not in code
    assert "arn:aws:" not in (REPO_ROOT / "statemachine" / "payment.asl.json").read_text()


# --------------------------------------------------------------------------- attach snippet
# The README's block after its attach-snippet marker, which names this module.


@pytest.fixture(scope="module")
def snippet() -> dict[str, Any]:
    from samcli.yamlhelper import yaml_parse

    parsed: dict[str, Any] = yaml_parse(attach_snippet())
    return parsed


def test_the_attach_snippet_is_lint_clean(cfn_lint_findings: dict[str, list[str]]) -> None:
    # GIVEN the README's snippet as a template WHEN cfn-lint checks it THEN it reports nothing
    assert cfn_lint_findings["attach.yaml"] == []


def test_the_attach_snippet_names_what_the_core_publishes(
    snippet: dict[str, Any], template: dict[str, Any]
) -> None:
    # GIVEN the snippet and the core deployed as STACK WHEN their names are compared THEN the
    # SSM parameter (of the function's runtime's layer) and both imports are ones the core
    # stack creates
    layer_parameter = snippet["Parameters"]["FleetbreakerLayerArn"]
    assert layer_parameter["Type"] == "AWS::SSM::Parameter::Value<String>"
    resources = template["Resources"]
    runtime = snippet["Resources"]["MyFunction"]["Properties"]["Runtime"]
    assert layer_parameter["Default"] == render(
        resources[f"{layer_id(runtime)}ArnParameter"]["Properties"]["Name"]
    )
    exports = {
        render(output["Export"]["Name"])
        for output in template["Outputs"].values()
        if "Export" in output
    }
    function = snippet["Resources"]["MyFunction"]["Properties"]
    imported = {
        function["Environment"]["Variables"]["CIRCUIT_BREAKER_TABLE"]["Fn::ImportValue"],
        function["Policies"][0]["Fn::ImportValue"],
    }
    assert imported <= exports
    assert f"{STACK}-CircuitBreakersAccessPolicyArn" in imported


def test_the_attach_snippet_translates_to_a_function_with_layer_table_and_policy(
    snippet: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the snippet WHEN SAM translates it (as `sam deploy` would)
    from samtranslator.translator.transform import transform

    monkeypatch.setenv("AWS_DEFAULT_REGION", os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    snippet["Resources"]["MyFunction"]["Properties"]["CodeUri"] = "s3://artifacts/code.zip"

    class NoManagedPolicies:
        def load(self) -> dict[str, str]:
            return {}

    resources = transform(snippet, {}, NoManagedPolicies())["Resources"]

    # THEN the function has the layer and the table, and its role the managed policy
    function = resources["MyFunction"]["Properties"]
    assert function["Layers"] == [{"Ref": "FleetbreakerLayerArn"}]
    assert "CIRCUIT_BREAKER_TABLE" in function["Environment"]["Variables"]
    role = resources["MyFunctionRole"]["Properties"]
    assert {"Fn::ImportValue": f"{STACK}-CircuitBreakersAccessPolicyArn"} in role[
        "ManagedPolicyArns"
    ]
