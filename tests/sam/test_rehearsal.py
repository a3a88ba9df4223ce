"""A deploy rehearsal: template.yaml translated by SAM and created on moto's CloudFormation.

For each parameter set (the defaults, defer mode, the Redis store, the core alone) the
template is translated with samtranslator, as ``sam deploy`` does, and created as a stack
on moto's CloudFormation (in-process ``mock_aws``). The tests then read back, through the
AWS APIs, what moto created: the table's key, the functions' environment and layers, the
layers' SSM parameters, the managed policy, the roles' statements and the state machine's
definition with its substitutions applied.

What moto cannot model, and how the rehearsal handles it:

- ``AWS::ApiGatewayV2::Api`` and ``::Stage`` (the HTTP API), ``AWS::CloudWatch::Alarm``,
  ``AWS::ElastiCache::ServerlessCache``, ``::User`` and ``::UserGroup``,
  ``AWS::Lambda::Alias`` and ``AWS::Lambda::LayerVersionPermission`` have no moto
  CloudFormation support. They are taken
  out of the submitted template and references to them become placeholder strings
  (``<LogicalId>.<Attribute>``); their properties are asserted on SAM's translation instead.
  A reference to a function's alias (its callers' with ``SnapStart=PublishedVersions``)
  becomes the function's ARN, which moto can invoke and map; that the callers name the alias
  is asserted on the translation.
- ``SnapStart`` of a function is ignored (moto reports ``None``): asserted on what was
  submitted.
- ``TimeToLiveSpecification``, ``SSESpecification`` and ``PointInTimeRecoverySpecification`` of
  the table are ignored by moto's CloudFormation: the TTL attribute is asserted on the
  template submitted.
- ``DefinitionSubstitutions`` and ``DefinitionS3Location`` of the state machine are ignored:
  the definition is given inline (SAM's ``Definition``) and the substitutions are applied
  with ``Fn::Sub``, which moto resolves exactly as CloudFormation resolves substitutions; the
  resolved definition is then read back from Step Functions.
- ``AWS::NoValue`` inside a list (the conditional SQS statement) becomes null in a role's
  inline policy; the rehearsal drops nulls when it reads the policies back.
- An exported output is evaluated even when its ``Condition`` is false: the rehearsal
  submits only the outputs whose condition holds for the parameter set.
- A layer's ``LayerName`` and ``CompatibleArchitectures`` are ignored (moto names it after the
  logical id) and it has no physical id, so a ``Ref`` to it resolves to a Python object: the
  rehearsal gives moto's layer versions their ARN as physical id, as CloudFormation's ``Ref``
  returns, and finds the layers with ListLayers.
- A function's ``Layers``, ``Architectures``, ``LoggingConfig`` and ``TracingConfig`` are
  ignored: which layer each function gets is asserted on SAM's translation, resolved to the
  created layer versions.
- Environment values stay as the template typed them (numbers), where CloudFormation makes
  them strings: compared as strings.
- ``LoggingConfiguration`` and ``TracingConfiguration`` of the state machine, the functions'
  ``LoggingConfig`` and ``TracingConfig``, Rules (``BreakerStore=redis`` without a network
  is refused by CloudFormation, not here), IAM evaluation (moto stores policies, it does not
  enforce them) and the code itself (moto stores the zips; tests/sam/test_build.py runs the
  built code).
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import zipfile
from typing import Any

import pytest

# translate and condition_values live in devtools.sam_template (the checkov gate translates
# every parameter set too); imported here under their old names.
from devtools.sam_template import (
    BUCKET,
    condition_values,
    layer_id,
    load_template,
    runtimes,
    take_branches,
    translate,
)
from fleetbreaker.stores.dynamodb import KEY_ATTRIBUTE, TTL_ATTRIBUTE

STACK = "fleetbreaker"
REGION = "us-east-1"
UNMODELLED = {
    "AWS::ApiGatewayV2::Api",
    "AWS::ApiGatewayV2::Stage",
    "AWS::CloudWatch::Alarm",
    "AWS::ElastiCache::ServerlessCache",
    "AWS::ElastiCache::User",
    "AWS::ElastiCache::UserGroup",
    "AWS::Lambda::Alias",
    "AWS::Lambda::LayerVersionPermission",
}
SUBNETS = "subnet-0123456789abcdef0,subnet-0fedcba9876543210"
SECURITY_GROUPS = "sg-0123456789abcdef0"
PARAMETER_SETS = {
    "default": {},
    "defer": {
        "OpenCircuitMode": "defer",
        "AlarmTopicArn": "arn:aws:sns:us-east-1:123456789012:breaker-alarms",
    },
    "redis": {
        "BreakerStore": "redis",
        "BreakerCacheSubnetIds": SUBNETS,
        "BreakerCacheSecurityGroupIds": SECURITY_GROUPS,
    },
    "core": {
        "DeployExample": "false",
        "PolicyBreakerNames": "payment-api,inventory-api",
        "LayerSharingOrganizationId": "o-a1b2c3d4e5",
    },
    "snapstart": {"SnapStart": "PublishedVersions", "Runtime": "python3.12"},
}
EXAMPLE_FUNCTIONS = (
    "PaymentFunction",
    "BreakerGateFunction",
    "ChargeFunction",
    "BreakerEventsFunction",
)
# Only with OpenCircuitMode=defer: the consumer of the deferred payments.
DEFER_FUNCTIONS = ("DeferredPaymentsFunction",)


# --------------------------------------------------------------------------- translation


def _replace_references(
    value: Any, removed: set[str], aliases: dict[str, str] | None = None
) -> Any:
    """``value`` with every Ref, GetAtt and ${...} of a removed resource as a placeholder, and
    a Ref to a removed alias (``aliases``: alias -> its function) as its function's ARN."""
    aliases = aliases or {}
    if isinstance(value, list):
        return [_replace_references(item, removed, aliases) for item in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Ref"} and value["Ref"] in aliases:
        return {"Fn::GetAtt": [aliases[value["Ref"]], "Arn"]}
    if set(value) == {"Ref"} and value["Ref"] in removed:
        return f"{value['Ref']}.Ref"
    if set(value) == {"Fn::GetAtt"}:
        target = value["Fn::GetAtt"]
        parts = target if isinstance(target, list) else target.split(".", 1)
        if parts[0] in removed:
            return ".".join(parts)
    if set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):

        def placeholder(match: re.Match[str]) -> str:
            name = match.group(1)
            return name if name.split(".")[0] in removed else match.group(0)

        return {"Fn::Sub": re.sub(r"\$\{([A-Za-z0-9.:]+)\}", placeholder, value["Fn::Sub"])}
    return {key: _replace_references(item, removed, aliases) for key, item in value.items()}


def for_moto(translated: dict[str, Any], parameters: dict[str, str]) -> dict[str, Any]:
    """The translation as submitted to moto: unmodelled resources out, substitutions in."""
    template = json.loads(json.dumps(translated))
    conditions = condition_values(template, parameters)
    template["Outputs"] = {
        name: output
        for name, output in template["Outputs"].items()
        if conditions.get(output.get("Condition", ""), True)
    }
    resources = template["Resources"]
    removed = {name for name, r in resources.items() if r["Type"] in UNMODELLED}
    aliases = {
        name: r["Properties"]["FunctionName"]["Ref"]
        for name, r in resources.items()
        if r["Type"] == "AWS::Lambda::Alias"
    }
    for name in removed:
        del resources[name]
    for resource in resources.values():
        depends = resource.get("DependsOn")
        if isinstance(depends, list):
            resource["DependsOn"] = [d for d in depends if d not in removed]
        if resource["Type"] == "AWS::StepFunctions::StateMachine":
            properties = resource["Properties"]
            definition = properties["DefinitionString"]
            if isinstance(definition, dict) and "Fn::Join" in definition:
                separator, lines = definition["Fn::Join"]
                definition = separator.join(lines)
            substitutions = properties.pop("DefinitionSubstitutions", {})
            properties["DefinitionString"] = {"Fn::Sub": [definition, substitutions]}
    return {key: _replace_references(value, removed, aliases) for key, value in template.items()}


def _code_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", "def lambda_handler(event, context):\n    return event\n")
    return buffer.getvalue()


# --------------------------------------------------------------------------- deployment


def deploy(parameters: dict[str, str]) -> dict[str, Any]:
    """Create the stack on moto and read back what was created, as plain data."""
    import boto3
    from moto import mock_aws
    from moto.awslambda.models import LayerVersion

    translated = translate(parameters)
    submitted = for_moto(translated, parameters)
    # moto's LayerVersion has no physical id, so a Ref to it would resolve to the Python
    # object; CloudFormation resolves it to the version's ARN (module docstring).
    with pytest.MonkeyPatch.context() as patch, mock_aws():
        patch.setattr(
            LayerVersion, "physical_resource_id", property(lambda self: self.arn), raising=False
        )
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=BUCKET)
        for name in load_template()["Resources"]:
            s3.put_object(Bucket=BUCKET, Key=f"{name}.zip", Body=_code_zip())
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        cloudformation.create_stack(
            StackName=STACK,
            TemplateBody=json.dumps(submitted),
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
            Capabilities=["CAPABILITY_IAM"],
        )
        stack = cloudformation.describe_stacks(StackName=STACK)["Stacks"][0]
        summaries = cloudformation.list_stack_resources(StackName=STACK)["StackResourceSummaries"]
        # moto lists the resources a false condition skipped as empty entries.
        summaries = [r for r in summaries if r["LogicalResourceId"]]
        physical = {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in summaries}
        types = {r["LogicalResourceId"]: r["ResourceType"] for r in summaries}
        exports = {e["Name"]: e["Value"] for e in cloudformation.list_exports()["Exports"]}
        return {
            "translated": translated,
            "submitted": submitted,
            "status": stack["StackStatus"],
            "outputs": {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])},
            "exports": exports,
            "physical": physical,
            "types": types,
            **_read_back(physical, types),
        }


def _read_back(physical: dict[str, str], types: dict[str, str]) -> dict[str, Any]:
    import boto3

    dynamodb: Any = boto3.client("dynamodb", region_name=REGION)
    lambda_: Any = boto3.client("lambda", region_name=REGION)
    ssm: Any = boto3.client("ssm", region_name=REGION)
    iam: Any = boto3.client("iam", region_name=REGION)
    sfn: Any = boto3.client("stepfunctions", region_name=REGION)
    sqs: Any = boto3.client("sqs", region_name=REGION)

    def of_type(kind: str) -> dict[str, str]:
        return {name: physical[name] for name, t in types.items() if t == kind}

    table = dynamodb.describe_table(TableName=physical["CircuitBreakersTable"])["Table"]
    functions = {
        name: lambda_.get_function_configuration(FunctionName=function)
        for name, function in of_type("AWS::Lambda::Function").items()
    }
    versions = {
        name: [
            v["Version"]
            for v in lambda_.list_versions_by_function(FunctionName=function)["Versions"]
        ]
        for name, function in of_type("AWS::Lambda::Function").items()
    }
    # moto leaves a layer version's physical id empty and names the layer
    # <stack>-<logical id>-<suffix> (SAM's logical id: the resource's plus a hash).
    layers = {}
    for layer in lambda_.list_layers()["Layers"]:
        match = re.fullmatch(rf"{STACK}-([A-Za-z0-9]+?)[0-9a-f]{{10}}-\w+", layer["LayerName"])
        assert match, layer["LayerName"]
        version = layer["LatestMatchingVersion"]["Version"]
        layers[match.group(1)] = lambda_.get_layer_version(
            LayerName=layer["LayerName"], VersionNumber=version
        )
    parameters = {
        name: ssm.get_parameter(Name=parameter)["Parameter"]
        for name, parameter in of_type("AWS::SSM::Parameter").items()
    }
    managed = {}
    for name, arn in of_type("AWS::IAM::ManagedPolicy").items():
        version = iam.get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"]
        document = iam.get_policy_version(PolicyArn=arn, VersionId=version)
        managed[name] = {"arn": arn, "document": _document(document["PolicyVersion"]["Document"])}
    roles = {}
    for name, role in of_type("AWS::IAM::Role").items():
        statements = []
        for policy in iam.list_role_policies(RoleName=role)["PolicyNames"]:
            document = iam.get_role_policy(RoleName=role, PolicyName=policy)["PolicyDocument"]
            statements.extend(_document(document)["Statement"])
        attached = iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"]
        roles[name] = {
            "arn": iam.get_role(RoleName=role)["Role"]["Arn"],
            "statements": statements,
            "managed": sorted(p["PolicyArn"] for p in attached),
        }
    machines = {
        name: json.loads(sfn.describe_state_machine(stateMachineArn=arn)["definition"])
        for name, arn in of_type("AWS::StepFunctions::StateMachine").items()
    }
    queues = {
        name: {
            "url": url,
            "arn": sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
                "Attributes"
            ]["QueueArn"],
        }
        for name, url in of_type("AWS::SQS::Queue").items()
    }
    return {
        "table": table,
        "functions": functions,
        "versions": versions,
        "layers": layers,
        "parameters": parameters,
        "managed": managed,
        "roles": roles,
        "machines": machines,
        "queues": queues,
    }


def _document(document: Any) -> dict[str, Any]:
    """A policy document as moto returns it: JSON, a dict, or, for a role's inline policy
    created through CloudFormation, the dict's Python repr with AWS::NoValue left as None."""
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except ValueError:
            document = ast.literal_eval(document)
    statements = document["Statement"]
    statements = [statements] if isinstance(statements, dict) else statements
    return {**document, "Statement": [s for s in statements if s is not None]}


_DEPLOYED: dict[str, dict[str, Any]] = {}


def deployed(name: str) -> dict[str, Any]:
    """The deployment of one parameter set, made once per test session."""
    if name not in _DEPLOYED:
        os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
        _DEPLOYED[name] = {**deploy(PARAMETER_SETS[name]), "name": name}
    return _DEPLOYED[name]


@pytest.fixture(params=list(PARAMETER_SETS))
def deployment(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Every parameter set."""
    return deployed(request.param)


@pytest.fixture(params=[name for name in PARAMETER_SETS if name != "core"])
def example_deployment(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The parameter sets that deploy the example."""
    return deployed(request.param)


# --------------------------------------------------------------------------- every set


def test_the_stack_is_created(deployment: dict[str, Any]) -> None:
    assert deployment["status"] == "CREATE_COMPLETE"


def test_the_table_has_the_stores_key_and_ttl(deployment: dict[str, Any]) -> None:
    table = deployment["table"]
    assert table["KeySchema"] == [{"AttributeName": KEY_ATTRIBUTE, "KeyType": "HASH"}]
    assert table["AttributeDefinitions"] == [{"AttributeName": KEY_ATTRIBUTE, "AttributeType": "S"}]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    # moto ignores the TTL specification: asserted on what was submitted (module docstring)
    submitted = deployment["submitted"]["Resources"]["CircuitBreakersTable"]["Properties"]
    assert submitted["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}


def layer_arns(deployment: dict[str, Any]) -> dict[str, str]:
    """{layer's logical id ("FleetbreakerLayerPython313"...): version ARN}."""
    return {name: layer["LayerVersionArn"] for name, layer in deployment["layers"].items()}


def stack_runtime(deployment: dict[str, Any]) -> str:
    """The Runtime parameter the set deploys with."""
    default: str = load_template()["Parameters"]["Runtime"]["Default"]
    return PARAMETER_SETS[deployment["name"]].get("Runtime", default)


def test_there_is_a_full_and_a_slim_layer_per_runtime(deployment: dict[str, Any]) -> None:
    # GIVEN the stack WHEN its layers are listed THEN one full and one slim per runtime
    expected = {
        layer_id(runtime, slim=slim)
        for runtime in runtimes(load_template())
        for slim in (False, True)
    }
    assert set(layer_arns(deployment)) == expected


def test_the_ssm_parameters_hold_each_runtimes_layer_arns(deployment: dict[str, Any]) -> None:
    # GIVEN the stack WHEN the per-runtime SSM parameters are read THEN each names its layer
    layers = layer_arns(deployment)
    parameters = deployment["parameters"]
    for runtime in runtimes(load_template()):
        for slim, kind in ((False, "layer-arn"), (True, "slim-layer-arn")):
            parameter = parameters[f"{layer_id(runtime, slim=slim)}ArnParameter"]
            assert parameter["Name"] == f"/{STACK}/fleetbreaker/{runtime}/{kind}"
            assert parameter["Value"] == layers[layer_id(runtime, slim=slim)]


def test_the_deprecated_ssm_parameters_name_the_stack_runtimes_layers(
    deployment: dict[str, Any],
) -> None:
    # GIVEN the names every stack had before the layers were split by runtime
    layers = layer_arns(deployment)
    parameters = deployment["parameters"]
    runtime = stack_runtime(deployment)
    # WHEN they are read THEN they still exist and name the Runtime parameter's layers
    full = parameters["FleetbreakerLayerArnParameter"]
    assert full["Name"] == f"/{STACK}/fleetbreaker/layer-arn"
    assert full["Value"] == layers[layer_id(runtime)]
    slim = parameters["FleetbreakerSlimLayerArnParameter"]
    assert slim["Name"] == f"/{STACK}/fleetbreaker/slim-layer-arn"
    assert slim["Value"] == layers[layer_id(runtime, slim=True)]


def test_each_layer_declares_its_runtime_and_both_architectures(
    deployment: dict[str, Any],
) -> None:
    for name, layer in deployment["layers"].items():
        [runtime] = [
            r for r in runtimes(load_template()) if name in (layer_id(r), layer_id(r, slim=True))
        ]
        assert layer["CompatibleRuntimes"] == [runtime], name
        assert layer["LicenseInfo"] == "MIT-0"
    # moto drops the architectures: asserted on what was submitted
    for resource in deployment["submitted"]["Resources"].values():
        if resource["Type"] == "AWS::Lambda::LayerVersion":
            assert resource["Properties"]["CompatibleArchitectures"] == ["arm64", "x86_64"]


def test_no_export_holds_a_layer_arn(deployment: dict[str, Any]) -> None:
    # An imported export cannot change; a layer ARN changes with every version.
    exported = set(deployment["exports"].values())
    assert not exported & set(layer_arns(deployment).values())
    assert (
        deployment["exports"][f"{STACK}-CircuitBreakersAccessPolicyArn"]
        == (deployment["managed"]["CircuitBreakersAccessPolicy"]["arn"])
    )
    assert (
        deployment["exports"][f"{STACK}-CircuitBreakersTableName"]
        == (deployment["physical"]["CircuitBreakersTable"])
    )


def test_the_managed_policy_grants_the_table_and_nothing_else(
    deployment: dict[str, Any],
) -> None:
    [statement] = deployment["managed"]["CircuitBreakersAccessPolicy"]["document"]["Statement"]
    assert statement["Effect"] == "Allow"
    assert statement["Action"] == ["dynamodb:GetItem", "dynamodb:UpdateItem"]
    assert statement["Resource"] == deployment["table"]["TableArn"]
    names = PARAMETER_SETS[deployment["name"]].get("PolicyBreakerNames")
    if names:
        assert statement["Condition"] == {
            "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": names.split(",")}
        }
    else:
        assert "Condition" not in statement


# --------------------------------------------------------------------------- core only


def test_the_core_alone_creates_no_example_resource() -> None:
    deployment = deployed("core")
    # GIVEN DeployExample=false WHEN the stack's resources are listed THEN only the core's
    assert set(deployment["types"].values()) == {
        "AWS::DynamoDB::Table",
        "AWS::Lambda::LayerVersion",
        "AWS::SSM::Parameter",
        "AWS::IAM::ManagedPolicy",
        "AWS::CloudWatch::Dashboard",
    }
    assert len(deployment["layers"]) == 2 * len(runtimes(load_template()))
    assert deployment["functions"] == {}
    assert set(deployment["outputs"]) == {
        *(f"{layer}Arn" for layer in deployment["layers"]),
        "FleetbreakerLayerArn",
        "FleetbreakerSlimLayerArn",
        "FleetbreakerLayerArnParameterName",
        "FleetbreakerSlimLayerArnParameterName",
        "CircuitBreakersTableName",
        "CircuitBreakersTableArn",
        "CircuitBreakersAccessPolicyArn",
        "BreakerDashboardName",
        "BreakerOpenedAlarmName",
        "BreakerOpenTooLongAlarmName",
        "StoreMisconfiguredAlarmName",
    }


def test_a_shared_core_lets_the_organization_get_every_layer_version() -> None:
    # GIVEN the core deployed with LayerSharingOrganizationId (moto has no layer permissions
    # in CloudFormation: SAM's translation, resolved for the set's parameters)
    deployment = deployed("core")
    organization = PARAMETER_SETS["core"]["LayerSharingOrganizationId"]
    translated = deployment["translated"]
    conditions = condition_values(translated, PARAMETER_SETS["core"])
    # WHEN the layer version permissions are read
    permissions = {
        take_branches(r["Properties"]["LayerVersionArn"], conditions)["Ref"]: take_branches(
            r["Properties"], conditions
        )
        for r in translated["Resources"].values()
        if r["Type"] == "AWS::Lambda::LayerVersionPermission" and conditions[r.get("Condition", "")]
    }
    # THEN each layer version, full and slim, may be got by the organization's accounts only
    layers = {
        name
        for name, r in translated["Resources"].items()
        if r["Type"] == "AWS::Lambda::LayerVersion"
    }
    assert set(permissions) == layers
    for permission in permissions.values():
        assert permission["Action"] == "lambda:GetLayerVersion"
        assert permission["Principal"] == "*"
        assert permission["OrganizationId"] == {"Ref": "LayerSharingOrganizationId"}
    assert organization.startswith("o-")


def test_layers_are_shared_with_one_account_by_its_id() -> None:
    # GIVEN an account ID instead of an organization, WHEN the conditions are evaluated
    translated = deployed("core")["translated"]
    conditions = condition_values(translated, {"LayerSharingOrganizationId": "123456789012"})
    [permission] = [
        take_branches(r["Properties"], conditions)
        for name, r in translated["Resources"].items()
        if r["Type"] == "AWS::Lambda::LayerVersionPermission" and "SlimLayerPython313" in name
    ]
    # THEN the account is the principal, and no organization is named
    assert conditions["LayersShared"]
    assert not conditions["LayersSharedWithOrganization"]
    assert permission["Principal"] == {"Ref": "LayerSharingOrganizationId"}
    assert "OrganizationId" not in permission


def test_layers_stay_private_by_default(deployment: dict[str, Any]) -> None:
    conditions = condition_values(deployment["translated"], PARAMETER_SETS[deployment["name"]])
    shared = "LayerSharingOrganizationId" in PARAMETER_SETS[deployment["name"]]
    assert conditions["LayersShared"] is shared


# --------------------------------------------------------------------------- the example


def test_the_functions_run_on_their_runtimes_full_layer(
    example_deployment: dict[str, Any],
) -> None:
    # moto drops a function's layers: SAM's translation, resolved for the set's parameters
    # (the ADOT layer is conditional: AdotLayerArn is empty here) to the created versions
    runtime = stack_runtime(example_deployment)
    full = layer_arns(example_deployment)[layer_id(runtime)]
    by_logical_id = {
        name: layer_arns(example_deployment)[re.sub(r"[0-9a-f]{10}$", "", name)]
        for name, resource in example_deployment["submitted"]["Resources"].items()
        if resource["Type"] == "AWS::Lambda::LayerVersion"
    }
    conditions = condition_values(
        example_deployment["translated"], PARAMETER_SETS[example_deployment["name"]]
    )
    expected = set(EXAMPLE_FUNCTIONS)
    if example_deployment["name"] == "defer":
        expected |= set(DEFER_FUNCTIONS)
    assert set(example_deployment["functions"]) == expected
    for name, function in example_deployment["functions"].items():
        submitted = example_deployment["submitted"]["Resources"][name]["Properties"]
        layers = take_branches(submitted["Layers"], conditions)
        assert [by_logical_id[layer["Ref"]] for layer in layers] == [full], name
        assert submitted["Architectures"] == [{"Ref": "Architecture"}]
        assert function["Runtime"] == runtime


def test_the_stack_publishes_a_version_of_each_function_that_builds_a_breaker(
    example_deployment: dict[str, Any],
) -> None:
    # GIVEN the stack WHEN each function's versions are listed THEN the ones SnapStart applies
    # to have a published version besides $LATEST (the live alias's, snapshotted with
    # SnapStart), whatever the set, and the others none
    snapshotted = {
        name
        for name, resource in example_deployment["translated"]["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Function" and "SnapStart" in resource["Properties"]
    }
    assert snapshotted >= {"PaymentFunction", "BreakerGateFunction"}
    for name, versions in example_deployment["versions"].items():
        assert (len(versions) > 1) is (name in snapshotted), (name, versions)
    # moto reports no SnapStart: what was submitted follows the stack's parameter
    for name in snapshotted & set(example_deployment["functions"]):
        submitted = example_deployment["submitted"]["Resources"][name]["Properties"]
        assert submitted["SnapStart"] == {"ApplyOn": {"Ref": "SnapStart"}}


def test_the_breaker_functions_name_the_table_and_the_store(
    example_deployment: dict[str, Any],
) -> None:
    table = example_deployment["physical"]["CircuitBreakersTable"]
    on_redis = example_deployment["name"] == "redis"
    for name in ("PaymentFunction", "BreakerGateFunction"):
        variables = example_deployment["functions"][name]["Environment"]["Variables"]
        assert variables["CIRCUIT_BREAKER_TABLE"] == table
        assert "AWS_ENDPOINT_URL" not in variables, "sam local only"
        assert str(variables["BREAKER_FAILURE_THRESHOLD"]) == "5"
        if on_redis:
            # the cache's endpoint is a placeholder: moto does not model the cache
            assert variables["CIRCUIT_BREAKER_REDIS_URL"].startswith("rediss://")
            assert variables["CIRCUIT_BREAKER_REDIS_IAM_USER"] == "BreakerCacheUser.Ref"
            assert variables["CIRCUIT_BREAKER_REDIS_IAM_CACHE"] == "BreakerCache.Ref"
            vpc = example_deployment["functions"][name]["VpcConfig"]
            assert sorted(vpc["SubnetIds"]) == sorted(SUBNETS.split(","))
            assert vpc["SecurityGroupIds"] == [SECURITY_GROUPS]
        else:
            assert "CIRCUIT_BREAKER_REDIS_URL" not in variables
            assert "CIRCUIT_BREAKER_REDIS_IAM_USER" not in variables


def test_the_payment_functions_call_the_payment_api(example_deployment: dict[str, Any]) -> None:
    url = load_template()["Parameters"]["PaymentApiUrl"]["Default"]
    for name in ("PaymentFunction", "ChargeFunction"):
        assert (
            example_deployment["functions"][name]["Environment"]["Variables"]["PAYMENT_API_URL"]
            == url
        )


def test_defer_mode_wires_the_queue(example_deployment: dict[str, Any]) -> None:
    variables = example_deployment["functions"]["PaymentFunction"]["Environment"]["Variables"]
    statements = example_deployment["roles"]["PaymentFunctionRole"]["statements"]
    sends = [s for s in statements if s.get("Action") == "sqs:SendMessage"]
    if example_deployment["name"] != "defer":
        assert example_deployment["queues"] == {}
        assert "DEFERRED_PAYMENTS_QUEUE_URL" not in variables
        assert sends == []
        return
    queue = example_deployment["queues"]["DeferredPaymentsQueue"]
    assert variables["OPEN_CIRCUIT_MODE"] == "defer"
    assert variables["DEFERRED_PAYMENTS_QUEUE_URL"] == queue["url"]
    assert [s["Resource"] for s in sends] == [queue["arn"]]


def test_the_breaker_functions_may_only_get_and_update_the_table(
    example_deployment: dict[str, Any],
) -> None:
    table_arn = example_deployment["table"]["TableArn"]
    for role in ("PaymentFunctionRole", "BreakerGateFunctionRole"):
        statements = example_deployment["roles"][role]["statements"]
        tables = [s for s in statements if "dynamodb:" in json.dumps(s["Action"])]
        assert [(s["Action"], s["Resource"]) for s in tables] == [
            (["dynamodb:GetItem", "dynamodb:UpdateItem"], table_arn)
        ], role
        breaker = load_template()["Parameters"]["BreakerName"]["Default"]
        assert tables[0]["Condition"] == {
            "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [breaker]}
        }, role
    assert example_deployment["roles"]["ChargeFunctionRole"]["statements"] == []


def resolved_managed_policies(deployment: dict[str, Any], role: str) -> list[Any]:
    """A role's ManagedPolicyArns in SAM's translation, each Fn::If resolved for the
    deployment's parameters (moto's CloudFormation does not attach AWS managed policies, so
    they cannot be read back)."""
    translated = deployment["translated"]
    conditions = condition_values(translated, PARAMETER_SETS[deployment["name"]])
    resolved = []
    for arn in translated["Resources"][role]["Properties"]["ManagedPolicyArns"]:
        if isinstance(arn, dict) and "Fn::If" in arn:
            condition, when_true, when_false = arn["Fn::If"]
            arn = when_true if conditions[condition] else when_false
        if arn != {"Ref": "AWS::NoValue"}:
            resolved.append(arn)
    return resolved


def test_only_the_redis_store_attaches_the_vpc_access_policy(
    example_deployment: dict[str, Any],
) -> None:
    on_redis = example_deployment["name"] == "redis"
    for role in ("PaymentFunctionRole", "BreakerGateFunctionRole", "ChargeFunctionRole"):
        managed = json.dumps(resolved_managed_policies(example_deployment, role))
        assert ("AWSLambdaVPCAccessExecutionRole" in managed) is (
            on_redis and role != "ChargeFunctionRole"
        ), role
        assert "AWSLambdaBasicExecutionRole" in managed, role
        assert "AWSXrayWriteOnlyAccess" in managed, role


def test_only_the_redis_store_may_connect_to_the_cache(
    example_deployment: dict[str, Any],
) -> None:
    on_redis = example_deployment["name"] == "redis"
    for role in ("PaymentFunctionRole", "BreakerGateFunctionRole"):
        statements = example_deployment["roles"][role]["statements"]
        connects = [s for s in statements if s.get("Action") == "elasticache:Connect"]
        if not on_redis:
            assert connects == [], role
            continue
        # the cache and its user are placeholders: moto does not model them
        assert [s["Resource"] for s in connects] == [
            ["BreakerCache.ARN", "BreakerCacheUser.Arn"]
        ], role


def test_the_workflow_invokes_the_deployed_functions(example_deployment: dict[str, Any]) -> None:
    # GIVEN the state machine as created WHEN its definition is read back THEN every Task
    # names a deployed function by its ARN, through the partition-qualified integration
    arns = {name: f["FunctionArn"] for name, f in example_deployment["functions"].items()}
    definition = example_deployment["machines"]["PaymentStateMachine"]
    tasks = [s for s in definition["States"].values() if s["Type"] == "Task"]
    assert tasks
    named = set()
    for task in tasks:
        assert task["Resource"] == "arn:aws:states:::lambda:invoke"
        named.add(task["Parameters"]["FunctionName"])
    assert named == {arns["BreakerGateFunction"], arns["ChargeFunction"]}
    text = json.dumps(definition)
    assert "${" not in text, "an unsubstituted placeholder"
    breaker = load_template()["Parameters"]["BreakerName"]["Default"]
    assert f'"{breaker}"' in text


def test_the_workflow_role_invokes_exactly_its_functions(
    example_deployment: dict[str, Any],
) -> None:
    arns = {name: f["FunctionArn"] for name, f in example_deployment["functions"].items()}
    statements = example_deployment["roles"]["PaymentStateMachineRole"]["statements"]
    [invoke] = [s for s in statements if s.get("Sid") == "InvokeWorkflowFunctions"]
    assert sorted(invoke["Resource"]) == sorted(
        [arns["BreakerGateFunction"], arns["ChargeFunction"]]
    )


def test_the_alarms_notify_the_topic_only_when_given(deployment: dict[str, Any]) -> None:
    # moto does not model alarms: asserted on SAM's translation, resolved by the parameters
    resources = deployment["translated"]["Resources"]
    alarms = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    topic = PARAMETER_SETS[deployment["name"]].get("AlarmTopicArn")
    expected = {
        "Fn::If": ["AlarmNotifiesTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]
    }
    assert len(alarms) == 3
    for alarm in alarms:
        assert alarm["AlarmActions"] == alarm["OKActions"] == expected
    conditions = deployment["translated"]["Conditions"]["AlarmNotifiesTopic"]
    assert conditions == {"Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]}]}
    parameters = PARAMETER_SETS[deployment["name"]]
    notifies = condition_values(deployment["translated"], parameters)["AlarmNotifiesTopic"]
    assert notifies == bool(topic)
