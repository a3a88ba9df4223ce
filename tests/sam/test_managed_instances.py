"""Lambda Managed Instances: why template.yaml does not offer them, and the documented snippet.

SAM's translator and cfn-lint, as pinned, know capacity providers; SAM refuses one on a
function that also declares a ``VpcConfig``, even when ``Fn::If`` leaves only one of the two,
and the functions that build a breaker declare one for ``BreakerStore=redis``. The refusal is
pinned here: when SAM lifts it, the test fails and the template can take a parameter. Until
then docs/deploying.md shows what to add for a function of your own; that snippet is linted
and translated here as a user would deploy it, against what the core stack publishes.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

from devtools.sam_template import layer_id, load_template
from tests.sam.conftest import managed_instances_snippet

STACK = "fleetbreaker"  # the core stack's name the snippet assumes


class NoManagedPolicies:
    def load(self) -> dict[str, str]:
        return {}


def transform(template: dict[str, Any]) -> dict[str, Any]:
    from samtranslator.translator.transform import transform as sam_transform

    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    translated: dict[str, Any] = sam_transform(template, {}, NoManagedPolicies())
    return translated


@pytest.fixture(scope="module")
def snippet() -> dict[str, Any]:
    from samcli.yamlhelper import yaml_parse

    parsed: dict[str, Any] = yaml_parse(managed_instances_snippet())
    return parsed


def test_sam_refuses_a_capacity_provider_beside_the_breaker_functions_vpc_config() -> None:
    # GIVEN template.yaml with the payment function put on a capacity provider behind a
    # condition, as a ManagedInstances parameter would (its VpcConfig is an Fn::If too)
    from samtranslator.model.exceptions import InvalidDocumentException

    template = copy.deepcopy(load_template())
    for name, resource in template["Resources"].items():
        for key in ("CodeUri", "ContentUri", "DefinitionUri"):
            if key in resource.get("Properties", {}):
                resource["Properties"][key] = f"s3://artifacts/{name}.zip"
    template["Resources"]["Instances"] = {
        "Type": "AWS::Serverless::CapacityProvider",
        "Condition": "ExampleEnabled",
        "Properties": {
            "VpcConfig": {
                "SubnetIds": {"Ref": "BreakerCacheSubnetIds"},
                "SecurityGroupIds": {"Ref": "BreakerCacheSecurityGroupIds"},
            }
        },
    }
    function = template["Resources"]["PaymentFunction"]["Properties"]
    assert "Fn::If" in function["VpcConfig"]
    function["CapacityProviderConfig"] = {
        "Fn::If": [
            "ExampleEnabled",
            {"Arn": {"Fn::GetAtt": ["Instances", "Arn"]}},
            {"Ref": "AWS::NoValue"},
        ]
    }

    # WHEN SAM translates it THEN it refuses the pair, whatever the conditions leave
    with pytest.raises(InvalidDocumentException) as refused:
        transform(template)
    assert "Cannot specify 'CapacityProviderConfig' and 'VpcConfig' together" in str(refused.value)


def test_the_snippet_is_lint_clean(cfn_lint_findings: dict[str, list[str]]) -> None:
    # GIVEN the docs' snippet as a template WHEN cfn-lint checks it THEN it reports nothing
    assert cfn_lint_findings["managed-instances.yaml"] == []


def test_the_snippet_translates_to_a_published_function_on_a_capacity_provider(
    snippet: dict[str, Any],
) -> None:
    # GIVEN the snippet WHEN SAM translates it (as `sam deploy` would)
    template = copy.deepcopy(snippet)
    template["Resources"]["MyFunction"]["Properties"]["CodeUri"] = "s3://artifacts/code.zip"
    resources = transform(template)["Resources"]

    # THEN a capacity provider in the given network, with the operator role SAM makes, runs
    # the function, which Lambda runs as a published version behind an alias
    provider = resources["Instances"]
    assert provider["Type"] == "AWS::Lambda::CapacityProvider"
    assert provider["Properties"]["VpcConfig"] == {
        "SubnetIds": {"Ref": "SubnetIds"},
        "SecurityGroupIds": {"Ref": "SecurityGroupIds"},
    }
    operator = provider["Properties"]["PermissionsConfig"]["CapacityProviderOperatorRoleArn"]
    assert resources[operator["Fn::GetAtt"][0]]["Type"] == "AWS::IAM::Role"
    function = resources["MyFunction"]["Properties"]
    config = function["CapacityProviderConfig"]["LambdaManagedInstancesCapacityProviderConfig"]
    assert config["CapacityProviderArn"] == {
        "Fn::Sub": "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}"
        ":capacity-provider:${Instances}"
    }
    assert "VpcConfig" not in function
    kinds = {resource["Type"] for resource in resources.values()}
    assert {"AWS::Lambda::Version", "AWS::Lambda::Alias"} <= kinds
    # AND it has the layer, the table and the managed policy, as the attach snippet does
    assert function["Layers"] == [{"Ref": "FleetbreakerLayerArn"}]
    assert "CIRCUIT_BREAKER_TABLE" in function["Environment"]["Variables"]
    role = resources["MyFunctionRole"]["Properties"]
    assert {"Fn::ImportValue": f"{STACK}-CircuitBreakersAccessPolicyArn"} in role[
        "ManagedPolicyArns"
    ]


def test_the_snippet_meets_what_managed_instances_require(snippet: dict[str, Any]) -> None:
    # Python 3.13 or later, at least 2 GB, and its layer is that runtime's.
    function = snippet["Resources"]["MyFunction"]["Properties"]
    version = tuple(int(part) for part in function["Runtime"].removeprefix("python").split("."))
    assert version >= (3, 13)
    assert function["MemorySize"] >= 2048
    assert function["AutoPublishAlias"]
    core = load_template()["Resources"][f"{layer_id(function['Runtime'])}ArnParameter"]
    name = core["Properties"]["Name"]["Fn::Sub"].replace("${AWS::StackName}", STACK)
    assert snippet["Parameters"]["FleetbreakerLayerArn"]["Default"] == name
