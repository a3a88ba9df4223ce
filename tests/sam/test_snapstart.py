"""SnapStart in template.yaml: the functions that build a breaker, their live alias, its callers.

With ``SnapStart=PublishedVersions`` Lambda snapshots each version SAM publishes of a function
that builds a breaker at init; its callers (the payment API, the workflow, the deferred
payments' queue) then invoke the ``live`` alias, and $LATEST otherwise. Both sides of the seam
are read here: the functions' code (what builds a ``CircuitBreaker``) and the template (what
is snapshotted), and SAM's translation for both settings (what each caller invokes). The
deploy rehearsal runs the functions of a SnapStart stack (its ``snapstart`` parameter set).
"""

from __future__ import annotations

import copy
import os
import re
from typing import Any

import pytest

from devtools.sam_template import (
    condition_values,
    layer_id,
    load_template,
    take_branches,
    translate,
)
from devtools.servers import REPO_ROOT
from tests.sam.test_template_redis import evaluate_rule

SNAPSHOTTED = {"PaymentFunction", "BreakerGateFunction", "DeferredPaymentsFunction"}
# A function builds a breaker when its code (app.py and the shared modules its Makefile
# copies beside it) constructs one.
BUILDS_A_BREAKER = re.compile(r"\bCircuitBreaker(?:\.from_env)?\(")


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def functions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: resource
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }


def built_source(resource: dict[str, Any]) -> str:
    """The Python a function's build puts in /var/task: its app.py and the shared modules
    its Makefile copies."""
    directory = REPO_ROOT / resource["Properties"]["CodeUri"]
    makefile = (directory / "Makefile").read_text()
    shared = re.findall(r"\$\(SHARED\)/(\w+\.py)", makefile)
    return "\n".join(
        path.read_text()
        for path in [
            directory / "app.py",
            *(REPO_ROOT / "functions" / "shared" / s for s in shared),
        ]
    )


def test_snapstart_is_off_by_default_and_takes_lambdas_values(template: dict[str, Any]) -> None:
    parameter = template["Parameters"]["SnapStart"]
    assert parameter["Default"] == "None"
    assert parameter["AllowedValues"] == ["None", "PublishedVersions"]


def test_every_function_that_builds_a_breaker_is_snapshotted_and_no_other(
    template: dict[str, Any],
) -> None:
    # GIVEN each function's code, and its properties in the template
    builders = {
        name
        for name, resource in functions(template).items()
        if BUILDS_A_BREAKER.search(built_source(resource))
    }
    snapshotted = {
        name
        for name, resource in functions(template).items()
        if "SnapStart" in resource["Properties"]
    }
    # THEN the functions that build a breaker are exactly those SnapStart applies to
    assert builders == snapshotted == SNAPSHOTTED


@pytest.mark.parametrize("function", sorted(SNAPSHOTTED))
def test_a_snapshotted_function_publishes_a_live_version_on_each_change(
    template: dict[str, Any], function: str
) -> None:
    properties = template["Resources"][function]["Properties"]
    assert properties["SnapStart"] == {"ApplyOn": {"Ref": "SnapStart"}}
    assert properties["AutoPublishAlias"] == "live"
    # Every property counts (layer versions included), not only the code's location.
    assert properties["AutoPublishAliasAllProperties"] is True
    # A replaced version goes, and its snapshot's cache charges with it.
    assert properties["VersionDeletionPolicy"] == "Delete"
    # A code sha256 would replace SAM's hash of the properties.
    assert "AutoPublishCodeSha256" not in properties


@pytest.mark.parametrize(("runtime", "refused"), [("python3.11", True), ("python3.12", False)])
def test_snapstart_before_python312_is_refused_by_a_rule(
    template: dict[str, Any], runtime: str, refused: bool
) -> None:
    # GIVEN SnapStart=PublishedVersions and a runtime WHEN the rule is evaluated
    rule = template["Rules"]["SnapStartNeedsPython312"]
    values = {"SnapStart": "PublishedVersions", "Runtime": runtime}
    assert evaluate_rule(rule["RuleCondition"], values)
    holds = all(evaluate_rule(a["Assert"], values) for a in rule["Assertions"])
    # THEN CloudFormation refuses the stack before any change exactly on python3.11
    assert holds is not refused


def test_the_rule_covers_every_runtime_lambda_cannot_snapshot(template: dict[str, Any]) -> None:
    # Lambda's SnapStart for Python starts at 3.12: every older allowed runtime is refused.
    rule = template["Rules"]["SnapStartNeedsPython312"]
    older = [
        runtime
        for runtime in template["Parameters"]["Runtime"]["AllowedValues"]
        if tuple(map(int, runtime.removeprefix("python").split("."))) < (3, 12)
    ]
    for runtime in older:
        values = {"SnapStart": "PublishedVersions", "Runtime": runtime}
        assert not all(evaluate_rule(a["Assert"], values) for a in rule["Assertions"]), runtime


# --------------------------------------------------------------------------- the callers


def callers(parameters: dict[str, str]) -> dict[str, Any]:
    """What each caller of a snapshotted function names, in SAM's translation resolved for
    ``parameters``."""
    translated = translate(parameters)
    resources = translated["Resources"]
    conditions = condition_values(translated, parameters)

    def resolved(value: Any) -> Any:
        return take_branches(value, conditions)

    integration = resources["PaymentsApi"]["Properties"]["Body"]["paths"]["/payments"]["post"][
        "x-amazon-apigateway-integration"
    ]
    uri = resolved(integration["uri"])
    machine = resources["PaymentStateMachine"]["Properties"]
    [invoke] = [
        statement
        for policy in resources["PaymentStateMachineRole"]["Properties"]["Policies"]
        for statement in policy["PolicyDocument"]["Statement"]
        if statement.get("Sid") == "InvokeWorkflowFunctions"
    ]
    return {
        # The Sub's variable when it names the alias, else the function named in its text.
        "api": uri["Fn::Sub"][1]["Alias"] if isinstance(uri["Fn::Sub"], list) else uri,
        "api permission": resolved(
            resources["PaymentsApiInvokesPaymentFunction"]["Properties"]["FunctionName"]
        ),
        "workflow": resolved(machine["DefinitionSubstitutions"]["BreakerGateFunctionArn"]),
        "workflow role": resolved(invoke["Resource"])[0],
        "queue": resolved(resources["DeferredPaymentsMapping"]["Properties"]["FunctionName"]),
    }


def aliases(parameters: dict[str, str]) -> dict[str, str]:
    """{function: its alias's logical id} in SAM's translation."""
    return {
        resource["Properties"]["FunctionName"]["Ref"]: name
        for name, resource in translate(parameters)["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Alias"
    }


def test_with_snapstart_every_caller_invokes_the_live_alias() -> None:
    # GIVEN a SnapStart stack with the deferred-payments consumer
    parameters = {"SnapStart": "PublishedVersions", "OpenCircuitMode": "defer"}
    alias = aliases(parameters)
    # WHEN SAM translates it THEN each caller names the snapshotted alias, not $LATEST
    assert callers(parameters) == {
        "api": {"Ref": alias["PaymentFunction"]},
        "api permission": {"Ref": alias["PaymentFunction"]},
        "workflow": {"Ref": alias["BreakerGateFunction"]},
        "workflow role": {"Ref": alias["BreakerGateFunction"]},
        "queue": {"Ref": alias["DeferredPaymentsFunction"]},
    }


def test_without_snapstart_every_caller_invokes_the_function() -> None:
    # GIVEN the default (SnapStart=None), where a parameter change alone publishes no version
    parameters = {"OpenCircuitMode": "defer"}
    # WHEN SAM translates it THEN each caller names the function itself ($LATEST)
    api_uri = (
        "arn:${AWS::Partition}:apigateway:${AWS::Region}:lambda:path/2015-03-31/functions/"
        "${PaymentFunction.Arn}/invocations"
    )
    assert callers(parameters) == {
        "api": {"Fn::Sub": api_uri},
        "api permission": {"Ref": "PaymentFunction"},
        "workflow": {"Fn::GetAtt": ["BreakerGateFunction", "Arn"]},
        "workflow role": {"Fn::GetAtt": ["BreakerGateFunction", "Arn"]},
        "queue": {"Ref": "DeferredPaymentsFunction"},
    }


def test_the_payment_api_keeps_its_iam_authorizer() -> None:
    # The route lives in the API's definition (not a function event): SAM still secures it.
    translated = translate({})
    post = translated["Resources"]["PaymentsApi"]["Properties"]["Body"]["paths"]["/payments"][
        "post"
    ]
    assert post["security"] == [{"AWS_IAM": []}]
    permission = translated["Resources"]["PaymentsApiInvokesPaymentFunction"]["Properties"]
    assert permission["Principal"] == "apigateway.amazonaws.com"
    assert permission["SourceArn"]["Fn::Sub"].endswith(":${PaymentsApi}/*/POST/payments")


# --------------------------------------------------------------------------- publishing


def versions(template: dict[str, Any], parameters: dict[str, str]) -> dict[str, str]:
    """{function: the logical id of the version SAM publishes} for ``template``."""
    from samtranslator.translator.transform import transform

    template = copy.deepcopy(template)
    for name, resource in template["Resources"].items():
        properties = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if key in properties and not str(properties[key]).startswith("s3://"):
                properties[key] = f"s3://artifacts/{name}.zip"
        if "DefinitionUri" in properties:
            properties["DefinitionUri"] = "s3://artifacts/payment.asl.json"

    class NoManagedPolicies:
        def load(self) -> dict[str, str]:
            return {}

    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    translated = transform(template, parameters, NoManagedPolicies())
    return {
        resource["Properties"]["FunctionName"]["Ref"]: name
        for name, resource in translated["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Version"
    }


def test_new_code_publishes_a_new_version(template: dict[str, Any]) -> None:
    # GIVEN the payment function's code uploaded anew (sam package: a new S3 key)
    changed = copy.deepcopy(template)
    changed["Resources"]["PaymentFunction"]["Properties"]["CodeUri"] = "s3://artifacts/v2.zip"
    # THEN SAM publishes a new version of it (a new logical id), and of no other function
    before, after = versions(template, {}), versions(changed, {})
    assert {name for name in before if before[name] != after[name]} == {"PaymentFunction"}


def test_a_new_layer_version_alone_publishes_no_version(template: dict[str, Any]) -> None:
    # What docs/deploying.md warns about: SAM hashes a function's layers as the template
    # names them, and these name the Runtime parameter's layer through Fn::If. A new
    # fleetbreaker (a new layer version) updates $LATEST, not the live version.
    changed = copy.deepcopy(template)
    layer = layer_id(template["Parameters"]["Runtime"]["Default"])
    changed["Resources"][layer]["Properties"]["ContentUri"] = "s3://artifacts/layer-v2.zip"
    assert versions(template, {}) == versions(changed, {})


def test_a_parameter_change_alone_publishes_no_version(template: dict[str, Any]) -> None:
    # What docs/deploying.md warns about (aws/serverless-application-model#3820): SAM hashes
    # the properties before resolving parameters. When SAM resolves them, this test fails and
    # the docs' SnapStart section can drop its "publish after a parameter change".
    assert versions(template, {}) == versions(
        template, {"FailureThreshold": "7", "SnapStart": "PublishedVersions"}
    )
