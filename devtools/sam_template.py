"""template.yaml per parameter set: SAM's translation, its conditions, a function's environment.

Shared by the deploy rehearsal (tests/sam/test_rehearsal.py), the checkov gate (every
parameter set is translated and scanned: ``python -m devtools.sam_template translations DIR``),
the tests that run a function with exactly the environment its stack gives it, and
``events/env.json``, generated from the template (``python -m devtools.sam_template env-json``,
``make env-json``) so that ``sam local invoke`` gets what a stack would set.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devtools.servers import REPO_ROOT

TEMPLATE = REPO_ROOT / "template.yaml"
BUCKET = "artifacts"
REGION = "us-east-1"
ACCOUNT = "123456789012"
STACK_NAME = "fleetbreaker"
PSEUDO_PARAMETERS = {
    "AWS::Region": REGION,
    "AWS::AccountId": ACCOUNT,
    "AWS::Partition": "aws",
    "AWS::StackName": STACK_NAME,
    "AWS::URLSuffix": "amazonaws.com",
}
SUBNETS = "subnet-0123456789abcdef0,subnet-0fedcba9876543210"
SECURITY_GROUPS = "sg-0123456789abcdef0"
REDIS = {
    "BreakerStore": "redis",
    "BreakerCacheSubnetIds": SUBNETS,
    "BreakerCacheSecurityGroupIds": SECURITY_GROUPS,
}
RATE = {
    "FailureRateThreshold": "0.5",
    "MinimumCalls": "10",
    "SlowCallDurationSeconds": "2",
    "SlowCallRateThreshold": "0.8",
    "MinContainers": "2",
}
# Every parameter set a stack is deployed with in the docs and the tests: the checkov gate
# scans each one's translation (a resource whose condition is false is not in the others).
PARAMETER_SETS: dict[str, dict[str, str]] = {
    "default": {},
    "defer": {"OpenCircuitMode": "defer"},
    "redis": dict(REDIS),
    "redis-defer": {**REDIS, "OpenCircuitMode": "defer"},
    "rate": dict(RATE),
    "core": {"DeployExample": "false"},
    "snapstart": {"SnapStart": "PublishedVersions"},
    "shared-layers": {"DeployExample": "false", "LayerSharingOrganizationId": "o-a1b2c3d4e5"},
}


def layer_id(runtime: str, *, slim: bool = False) -> str:
    """The logical id of a runtime's layer: ``FleetbreakerLayerPython313`` for python3.13,
    ``FleetbreakerSlimLayerPython313`` for its slim twin (layer/Makefile builds
    ``build-<logical id>``)."""
    digits = runtime.removeprefix("python").replace(".", "")
    return f"Fleetbreaker{'Slim' if slim else ''}LayerPython{digits}"


def runtimes(template: dict[str, Any]) -> list[str]:
    """The Python runtimes the template allows (its Runtime parameter): one layer pair each."""
    allowed: list[str] = template["Parameters"]["Runtime"]["AllowedValues"]
    return allowed


def take_branches(value: Any, conditions: Mapping[str, bool]) -> Any:
    """``value`` with every ``Fn::If`` replaced by the branch ``conditions`` take, and
    ``AWS::NoValue`` left out of lists and mappings, as CloudFormation resolves them."""
    no_value = {"Ref": "AWS::NoValue"}
    if isinstance(value, list):
        taken = [take_branches(item, conditions) for item in value]
        return [item for item in taken if item != no_value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Fn::If"}:
        condition, when_true, when_false = value["Fn::If"]
        return take_branches(when_true if conditions[condition] else when_false, conditions)
    taken_items = {key: take_branches(item, conditions) for key, item in value.items()}
    return {key: item for key, item in taken_items.items() if item != no_value}


def attached_layers(
    template: dict[str, Any], function: str, parameters: Mapping[str, str]
) -> list[Any]:
    """The layers ``function`` attaches in a stack deployed with ``parameters``."""
    conditions = condition_values(template, parameters)
    layers: list[Any] = take_branches(
        template["Resources"][function]["Properties"].get("Layers", []), conditions
    )
    return layers


# The last parse of each template's text, pickled: SAM's YAML parser is pure Python, and
# traced by coverage under `make test`. The rehearsal and the tests beside it read
# template.yaml about ninety times a process; each parse took 0.3 s of CPU traced, an
# unpickling takes a millisecond.
_PARSED: dict[Path, tuple[str, bytes]] = {}


def load_template(path: Path = TEMPLATE) -> dict[str, Any]:
    """``path`` parsed as SAM parses it: a fresh copy each call (callers edit theirs), parsed
    again whenever the file's text changed."""
    from samcli.yamlhelper import yaml_parse

    text = path.read_text()
    key = path.resolve()
    cached = _PARSED.get(key)
    if cached is None or cached[0] != text:
        cached = (text, pickle.dumps(yaml_parse(text)))
        _PARSED[key] = cached
    template: dict[str, Any] = pickle.loads(cached[1])
    return template


def table_stack(table: str) -> dict[str, Any]:
    """A CloudFormation template holding only a breakers table named ``table``, with the
    output name template.yaml gives it: the stack the CLI's ``--stack`` reads."""
    return {
        "Resources": {
            "Table": {
                "Type": "AWS::DynamoDB::Table",
                "Properties": {
                    "TableName": table,
                    "AttributeDefinitions": [{"AttributeName": "name", "AttributeType": "S"}],
                    "KeySchema": [{"AttributeName": "name", "KeyType": "HASH"}],
                    "BillingMode": "PAY_PER_REQUEST",
                },
            }
        },
        "Outputs": {"CircuitBreakersTableName": {"Value": {"Ref": "Table"}}},
    }


def translate(parameters: Mapping[str, str]) -> dict[str, Any]:
    """SAM's translation of template.yaml, code pointing at S3 as `sam package` leaves it."""
    from samtranslator.translator.transform import transform

    template = load_template()
    for name, resource in template["Resources"].items():
        properties = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri"):
            if key in properties:
                properties[key] = f"s3://{BUCKET}/{name}.zip"
        if "DefinitionUri" in properties:
            # Inline, so that the definition reaches moto (see tests/sam/test_rehearsal.py).
            path = REPO_ROOT / properties.pop("DefinitionUri")
            properties["Definition"] = json.loads(path.read_text())

    class NoManagedPolicies:
        def load(self) -> dict[str, str]:
            return {}

    translated: dict[str, Any] = transform(template, dict(parameters), NoManagedPolicies())
    return translated


def condition_values(template: dict[str, Any], parameters: Mapping[str, str]) -> dict[str, bool]:
    """The template's conditions for ``parameters`` (the intrinsics its conditions use)."""
    values = {
        name: parameters.get(name, spec.get("Default", ""))
        for name, spec in template["Parameters"].items()
    }

    def evaluate(node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        ((function, argument),) = node.items()
        if function == "Ref":
            return values[argument]
        if function == "Condition":
            return evaluate(template["Conditions"][argument])
        if function == "Fn::Join":
            separator, items = argument
            joined = evaluate(items)
            return separator.join(joined if isinstance(joined, list) else [joined])
        if function == "Fn::Split":
            separator, text = argument
            return str(evaluate(text)).split(separator)
        if function == "Fn::Select":
            index, items = argument
            return evaluate(items)[int(index)]
        arguments = [evaluate(item) for item in argument]
        if function == "Fn::Equals":
            return arguments[0] == arguments[1]
        if function == "Fn::Not":
            return not arguments[0]
        if function == "Fn::And":
            return all(arguments)
        if function == "Fn::Or":
            return any(arguments)
        raise AssertionError(f"no evaluation for {function} in a condition")

    return {name: bool(evaluate(body)) for name, body in template["Conditions"].items()}


def function_environment(
    template: dict[str, Any],
    function: str,
    parameters: Mapping[str, str],
    resources: Mapping[str, str],
    *,
    unset: str | None = None,
) -> dict[str, str]:
    """The environment variables a function of ``template`` gets, as CloudFormation sets them.

    ``resources`` gives what the stack's resources resolve to: ``Ref`` by logical id, and
    ``Fn::GetAtt`` by ``"LogicalId.Attribute"``. Parameters not in ``parameters`` take their
    Default; ``Fn::If`` follows the conditions ``parameters`` give; a variable whose value is
    ``AWS::NoValue`` is not set (or, with ``unset``, set to it: ``sam local`` needs every
    declared variable). A reference ``resources`` lacks is an error naming it.
    """
    conditions = condition_values(template, parameters)

    def parameter(name: str) -> str:
        spec = template["Parameters"][name]
        return str(parameters.get(name, spec.get("Default", "")))

    def ref(name: str) -> str:
        if name in PSEUDO_PARAMETERS:
            return PSEUDO_PARAMETERS[name]
        if name in template["Parameters"]:
            return parameter(name)
        if name not in resources:
            raise KeyError(f"{function}'s environment needs {name}: pass it in resources")
        return resources[name]

    def resolve(value: Any) -> str | None:
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, (str, int, float)):
            return str(value)
        ((intrinsic, argument),) = value.items()
        if intrinsic == "Ref":
            return None if argument == "AWS::NoValue" else ref(argument)
        if intrinsic == "Fn::GetAtt":
            return ref(".".join(argument) if isinstance(argument, list) else argument)
        if intrinsic == "Fn::If":
            condition, when_true, when_false = argument
            return resolve(when_true if conditions[condition] else when_false)
        if intrinsic == "Fn::Sub" and isinstance(argument, str):
            return re.sub(r"\$\{([A-Za-z0-9.:]+)\}", lambda m: ref(m.group(1)), argument)
        raise AssertionError(f"{function}: no resolution for {intrinsic} in its environment")

    resource = template["Resources"][function]
    if unset is None and not conditions.get(resource.get("Condition", ""), True):
        raise KeyError(f"{function} is not deployed with {dict(parameters)}")
    variables = resource["Properties"].get("Environment", {}).get("Variables", {})
    resolved = {name: resolve(value) for name, value in variables.items()}
    if unset is not None:
        return {name: unset if value is None else value for name, value in resolved.items()}
    return {name: value for name, value in resolved.items() if value is not None}


# events/env.json: the default stack with its AWS resources on loopback services
# (scripts/local_services.py starts them where these say).
LOCAL_PARAMETERS = {
    "LocalEndpointUrl": "http://127.0.0.1:5000",
    "PaymentApiUrl": "http://127.0.0.1:8081/charges",
}
LOCAL_RESOURCES = {
    "CircuitBreakersTable": "CircuitBreakers",
    "DeferredPaymentsIdempotencyTable": "DeferredPaymentsIdempotency",
}
ENV_JSON = REPO_ROOT / "events" / "env.json"


def local_env_vars() -> dict[str, dict[str, str]]:
    """What events/env.json holds: every function's variables as the default stack sets them.

    Every declared variable is present (``sam local`` passes a function only those the
    template declares, and one left out would get the template's unresolved value); one the
    stack leaves unset is "" (unset for the functions). A function deployed only in another
    mode (the consumer) gets the variables its template declares, resolved the same way.
    """
    template = load_template()
    return {
        name: function_environment(template, name, LOCAL_PARAMETERS, LOCAL_RESOURCES, unset="")
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
        and "Environment" in resource["Properties"]
    }


def env_json_text() -> str:
    return json.dumps(local_env_vars(), indent=2) + "\n"


def translate_for_scan(parameters: Mapping[str, str]) -> dict[str, Any]:
    """SAM's translation for ``parameters``, with them as the parameters' defaults.

    A scanner (checkov) evaluates the conditions from the defaults and leaves out every
    resource whose condition is false: with the set's values as defaults it scans what a
    stack deployed with that set creates.
    """
    translated = translate(parameters)
    for name, value in parameters.items():
        translated["Parameters"][name]["Default"] = value
    return translated


def write_translations(directory: Path) -> list[Path]:
    """Each parameter set's translation as ``<directory>/<set>.json`` (what checkov scans)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, parameters in PARAMETER_SETS.items():
        path = directory / f"{name}.json"
        path.write_text(json.dumps(translate_for_scan(parameters), indent=1))
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    # SAM fills in pseudo parameters from a region: any will do for a translation.
    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    if argv[:1] == ["translations"] and len(argv) == 2:
        for written in write_translations(Path(argv[1])):
            print(written)
        return 0
    if argv == ["env-json"]:
        ENV_JSON.write_text(env_json_text())
        print(ENV_JSON.relative_to(REPO_ROOT))
        return 0
    print("usage: python -m devtools.sam_template translations DIR | env-json", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
