"""template.yaml and samconfig.toml: linters, checkov (offline), and the promises they make.

The promises are checked against the code they describe: the TTL attribute and key are the
DynamoDB store's own constants, and the IAM policy is compared with the DynamoDB operations
the breaker really sends (recorded on a real client talking to moto's server).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import tomllib

from devtools.payment_api import FakePaymentApi
from devtools.sam_template import (
    PARAMETER_SETS,
    attached_layers,
    layer_id,
    load_template,
    runtimes,
    write_translations,
)
from devtools.servers import REPO_ROOT, make_table, refused_port, untraced_env
from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError
from fleetbreaker.stores.dynamodb import KEY_ATTRIBUTE, TTL_ATTRIBUTE, DynamoDBStore
from tests.conftest import backend_unavailable
from tests.coverage_scope import untraced
from tests.sam.conftest import invoke, payment_event
from tests.support import FakeClock, function_reads

TEMPLATE = REPO_ROOT / "template.yaml"
SAMCONFIG = REPO_ROOT / "samconfig.toml"
BIN = Path(sys.executable).parent
CHECKOV = REPO_ROOT / ".venv-tools" / "bin" / "checkov"


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def run(
    *command: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A tool (sam, cfn-lint, checkov) run on the repository, untraced by coverage."""
    return subprocess.run(
        [str(part) for part in command],
        cwd=REPO_ROOT,
        env=untraced_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


# --------------------------------------------------------------------------- linters


def test_sam_validate_lint_is_clean() -> None:
    result = run(BIN / "sam", "validate", "--lint", "--template-file", TEMPLATE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is a valid SAM Template" in result.stdout + result.stderr
    # --lint prints cfn-lint's findings (errors and warnings) and fails on them.
    assert not re.search(r"^\[?[EW]\d{4}", result.stdout + result.stderr, re.MULTILINE)


def test_cfn_lint_reports_nothing_even_informational(
    cfn_lint_findings: dict[str, list[str]],
) -> None:
    # No error, warning or, with I included, informational finding.
    assert cfn_lint_findings["template.yaml"] == []


def run_checkov(paths: list[Path]) -> dict[str, Any]:
    """checkov's JSON report on ``paths``, scanned offline in one run."""
    if not CHECKOV.exists():
        backend_unavailable(f"{CHECKOV} is missing (run `make tools`)")
    # Offline: no platform download, no package scan; any request that slipped through would
    # go to a proxy that refuses connections and show up as a warning below.
    proxy = f"http://127.0.0.1:{refused_port()}"
    offline = {
        "BC_SKIP_MAPPING": "TRUE",
        "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false",
        "HTTP_PROXY": proxy,
        "HTTPS_PROXY": proxy,
        "ALL_PROXY": proxy,
        "NO_PROXY": "",
        # One process: its pool of parsers cost 0.8 s of CPU more for the same findings, on
        # a machine whose cores the other test workers keep busy.
        "CHECKOV_PARALLELIZATION_TYPE": "none",
    }
    files = [part for path in paths for part in ("--file", path)]
    # --compact leaves each check's code block out of the report (a third of its size).
    options = ["--framework", "cloudformation", "--skip-download", "--compact"]
    result = run(CHECKOV, *files, *options, "--output", "json", env=offline)
    assert not re.search(r"Traceback|Failed to|Max retries|WARNING", result.stderr), result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


@pytest.fixture(scope="module")
def checkov_scan(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[Any]]]:
    """checkov's findings on the template as written ("template") and on SAM's expansion of
    it for every parameter set ("translated"): one checkov run over all of them, since its
    start-up and its graph are most of its time; each file's findings are its own."""
    # SAM expands the template (IAM roles, API stage, layer) for every parameter set, with
    # the set's values as defaults: checkov leaves out resources whose condition is false, so
    # each set's own resources are scanned in its translation. SAM's translator runs none of
    # the measured code: untraced by coverage, as the tools above.
    translated = tmp_path_factory.mktemp("translated")
    untraced(write_translations)(translated)
    report = run_checkov([TEMPLATE, *sorted(translated.glob("*.json"))])
    results = report["results"]

    def form(path: str) -> str:
        return "template" if Path(path).name == TEMPLATE.name else "translated"

    scan: dict[str, dict[str, list[Any]]] = {
        name: {kind: [] for kind in results} for name in ("template", "translated")
    }
    for kind, entries in results.items():
        for entry in entries:
            path = entry if kind == "parsing_errors" else entry["file_path"]
            scan[form(path)][kind].append(entry)
    return scan


@pytest.mark.parametrize("form", ["template", "translated"])
def test_checkov_offline_finds_nothing_unexplained(
    form: str, checkov_scan: dict[str, dict[str, list[Any]]]
) -> None:
    # GIVEN the template as written, and as SAM expands it for every parameter set
    # WHEN checkov scans it offline
    results = checkov_scan[form]

    # THEN no check fails, checks really ran, and every skip carries its reason
    failed = [(c["check_id"], c["resource"]) for c in results["failed_checks"]]
    assert failed == []
    assert results["parsing_errors"] == []
    assert len(results["passed_checks"]) >= 6
    if form == "translated":
        # every parameter set was scanned, defer mode's resources included
        scanned = {Path(c["file_path"]).stem for c in results["passed_checks"]}
        assert scanned == set(PARAMETER_SETS)
        resources = {
            (Path(c["file_path"]).stem, c["resource"])
            for kind in ("passed_checks", "skipped_checks")
            for c in results[kind]
        }
        for name in ("defer", "redis-defer"):
            for queue in ("DeferredPaymentsQueue", "DeferredPaymentsDeadLetterQueue"):
                assert (name, f"AWS::SQS::Queue.{queue}") in resources
            assert (name, "AWS::IAM::Role.DeferredPaymentsFunctionRole") in resources
    for skipped in results["skipped_checks"]:
        reason = skipped["check_result"].get("suppress_comment") or ""
        assert len(reason) > 30, f"{skipped['check_id']} on {skipped['resource']}: no reason"


# --------------------------------------------------------------------------- the table


def test_table_matches_the_dynamodb_store(template: dict[str, Any]) -> None:
    table = template["Resources"]["CircuitBreakersTable"]
    properties = table["Properties"]
    assert properties["KeySchema"] == [{"AttributeName": KEY_ATTRIBUTE, "KeyType": "HASH"}]
    assert properties["AttributeDefinitions"] == [
        {"AttributeName": KEY_ATTRIBUTE, "AttributeType": "S"}
    ]
    assert properties["BillingMode"] == "PAY_PER_REQUEST"
    assert properties["TimeToLiveSpecification"] == {
        "AttributeName": TTL_ATTRIBUTE,
        "Enabled": True,
    }
    assert properties["SSESpecification"] == {"SSEEnabled": True}
    assert properties["PointInTimeRecoverySpecification"] == {
        "PointInTimeRecoveryEnabled": {"Fn::If": ["PointInTimeRecoveryEnabled", True, False]}
    }
    assert template["Conditions"]["PointInTimeRecoveryEnabled"] == {
        "Fn::Equals": [{"Ref": "PointInTimeRecovery"}, "true"]
    }
    assert (table["DeletionPolicy"], table["UpdateReplacePolicy"]) == ("Retain", "Retain")


# --------------------------------------------------------------------------- IAM


def role_statements(template: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """The statements of a function role's one inline policy."""
    [policy] = template["Resources"][role]["Properties"]["Policies"]
    statements: list[dict[str, Any]] = policy["PolicyDocument"]["Statement"]
    return statements


def table_actions(template: dict[str, Any]) -> set[str]:
    """DynamoDB actions the payment function's policy grants, each checked to be on the table."""
    actions: set[str] = set()
    assert template["Resources"]["PaymentFunction"]["Properties"]["Role"] == {
        "Fn::GetAtt": ["PaymentFunctionRole", "Arn"]
    }
    for statement in role_statements(template, "PaymentFunctionRole"):
        if "Fn::If" not in statement:
            granted = statement["Action"]
            granted = [granted] if isinstance(granted, str) else granted
            if any(action.startswith("dynamodb:") for action in granted):
                assert statement["Effect"] == "Allow"
                assert statement["Resource"] == {"Fn::GetAtt": ["CircuitBreakersTable", "Arn"]}
                actions.update(granted)
        # (the conditional cache and SQS statements are checked below)
    return actions


def test_function_policy_is_least_privilege(template: dict[str, Any]) -> None:
    function = template["Resources"]["PaymentFunction"]["Properties"]
    assert table_actions(template) == {"dynamodb:GetItem", "dynamodb:UpdateItem"}
    # Only the item of its own breaker: the table's key is the breaker's name.
    statements = role_statements(template, "PaymentFunctionRole")
    [table] = [s for s in statements if s.get("Sid") == "BreakerState"]
    assert table["Condition"] == {
        "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [{"Ref": "BreakerName"}]}
    }
    assert function["Environment"]["Variables"]["BREAKER_NAME"] == {"Ref": "BreakerName"}
    # Nothing else but the SQS send, and that only when defer mode created the queue.
    others = [s for s in statements if "Fn::If" in s]
    assert others[0]["Fn::If"][0] == "BreakerOnRedis"  # tests/sam/test_template_redis.py
    assert others[1:] == [
        {
            "Fn::If": [
                "DeferWhenOpen",
                {
                    "Sid": "DeferPayments",
                    "Effect": "Allow",
                    "Action": "sqs:SendMessage",
                    "Resource": {"Fn::GetAtt": ["DeferredPaymentsQueue", "Arn"]},
                },
                {"Ref": "AWS::NoValue"},
            ]
        }
    ]


def test_policy_covers_every_dynamodb_call_the_breaker_makes(
    template: dict[str, Any],
    moto_server: str,
    payment_module: ModuleType,
    payment_env: dict[str, str],
    payment_api: FakePaymentApi,
) -> None:
    # GIVEN a breaker and the payment handler whose DynamoDB clients record every operation
    sent: set[str] = set()

    def record(model: Any, **_: Any) -> None:
        sent.add(f"dynamodb:{model.name}")

    clock = FakeClock()
    table = make_table(moto_server)
    store = DynamoDBStore(table, endpoint_url=moto_server)
    store.client.meta.events.register("before-call.dynamodb", record)
    config = BreakerConfig(failure_threshold=2, store_deadline_seconds=30)  # a busy machine
    breaker = CircuitBreaker("iam-check", store=store, config=config, clock=clock)
    handler = payment_module.create_handler(payment_env, clock=clock, endpoint_url=moto_server)
    handler.breaker.store.client.meta.events.register("before-call.dynamodb", record)

    def fail() -> None:
        raise ConnectionError("down")

    # WHEN it goes through every path: count, trip, reject, probe, close, overrides
    for _ in range(2):
        with pytest.raises(ConnectionError):
            breaker.call(fail)
    clock.advance(2)
    with pytest.raises(CircuitOpenError):
        breaker.call(lambda: None)
    clock.advance(60)
    admission = breaker.check()
    breaker.record(True, admission.token)
    breaker.force_open()
    breaker.disable()
    breaker.reset()
    payment_api.mode = "fail"
    invoke(handler, payment_event())

    # THEN every operation it sent is one the policy grants, and the policy grants no more
    assert sent
    assert sent == table_actions(template)


# --------------------------------------------------------------------------- layer, function


@pytest.mark.parametrize("slim", [False, True], ids=["full", "slim"])
def test_each_runtime_has_its_layer_for_both_architectures(
    template: dict[str, Any], slim: bool
) -> None:
    # GIVEN the runtimes the functions may run on WHEN each one's layer is read THEN it
    # declares that runtime alone, both architectures, and is built by layer/Makefile
    assert "python3.14" in runtimes(template)
    assert template["Parameters"]["Runtime"]["Default"] == "python3.13"
    assert template["Parameters"]["Architecture"]["Default"] == "arm64"
    for runtime in runtimes(template):
        layer = template["Resources"][layer_id(runtime, slim=slim)]
        assert layer["Metadata"]["BuildMethod"] == "makefile"
        assert layer["Properties"]["CompatibleRuntimes"] == [runtime]
        assert set(layer["Properties"]["CompatibleArchitectures"]) == set(
            template["Parameters"]["Architecture"]["AllowedValues"]
        )


def test_function_wiring(template: dict[str, Any], payment_module: ModuleType) -> None:
    function = template["Resources"]["PaymentFunction"]
    properties = function["Properties"]
    assert function["Metadata"]["BuildMethod"] == "makefile"
    assert properties["Runtime"] == {"Ref": "Runtime"}
    assert properties["Architectures"] == [{"Ref": "Architecture"}]
    assert properties["Tracing"] == "Active"
    for runtime in runtimes(template):
        assert attached_layers(template, "PaymentFunction", {"Runtime": runtime}) == [
            {"Ref": layer_id(runtime)}
        ]
    assert properties["Layers"][1] == {
        "Fn::If": ["TracesWithAdot", {"Ref": "AdotLayerArn"}, {"Ref": "AWS::NoValue"}]
    }
    # The API's one route reaches it (tests/sam/test_snapstart.py: $LATEST or its live alias).
    assert "Events" not in properties
    route = template["Resources"]["PaymentsApi"]["Properties"]["DefinitionBody"]["paths"]
    assert list(route) == ["/payments"]
    assert list(route["/payments"]) == ["post"]
    variables = properties["Environment"]["Variables"]
    assert variables["CIRCUIT_BREAKER_TABLE"] == {"Ref": "CircuitBreakersTable"}
    assert variables["PAYMENT_API_URL"] == {"Ref": "PaymentApiUrl"}
    # Every variable the template sets is one the function (or Powertools) reads, in its
    # app.py or in the modules it shares with the deferred-payments consumer.
    assert payment_module.__file__ is not None
    source = Path(payment_module.__file__).read_text()
    for shared in ("charging.py", "breaker_events.py"):
        source += (REPO_ROOT / "functions" / "shared" / shared).read_text()
    for name in variables:
        assert function_reads(source, name), name
    # The function must finish before API Gateway's 30 s limit, after its own timeouts.
    read = template["Parameters"]["PaymentReadTimeout"]["MaxValue"]
    connect = template["Parameters"]["PaymentConnectTimeout"]["MaxValue"]
    assert connect + read < properties["Timeout"] < 30


@pytest.mark.parametrize("function", ["PaymentFunction", "BreakerGateFunction"])
def test_breaker_mode_and_the_adot_layer_reach_the_function(
    template: dict[str, Any], function: str
) -> None:
    # The parameter BreakerMode (default enforce) is each function's BREAKER_MODE, and the
    # optional ADOT layer comes with the wrapper that sets up OpenTelemetry.
    mode = template["Parameters"]["BreakerMode"]
    assert (mode["Default"], mode["AllowedValues"]) == ("enforce", ["enforce", "shadow"])
    assert template["Parameters"]["AdotLayerArn"]["Default"] == ""
    properties = template["Resources"][function]["Properties"]
    variables = properties["Environment"]["Variables"]
    assert variables["BREAKER_MODE"] == {"Ref": "BreakerMode"}
    assert variables["AWS_LAMBDA_EXEC_WRAPPER"] == {
        "Fn::If": ["TracesWithAdot", "/opt/otel-instrument", {"Ref": "AWS::NoValue"}]
    }
    assert {"Fn::If": ["TracesWithAdot", {"Ref": "AdotLayerArn"}, {"Ref": "AWS::NoValue"}]} in (
        properties["Layers"]
    )
    if function == "PaymentFunction":  # its Powertools Tracer steps aside under ADOT
        assert variables["POWERTOOLS_TRACE_DISABLED"] == {
            "Fn::If": ["TracesWithAdot", "true", "false"]
        }


def test_outputs_export_the_table_and_the_api(template: dict[str, Any]) -> None:
    outputs = template["Outputs"]
    for output in outputs.values():
        assert output["Description"].strip()
    for name, value in [
        ("CircuitBreakersTableName", {"Ref": "CircuitBreakersTable"}),
        ("CircuitBreakersAccessPolicyArn", {"Ref": "CircuitBreakersAccessPolicy"}),
    ]:
        assert outputs[name]["Value"] == value
        assert outputs[name]["Export"]["Name"] == {"Fn::Sub": f"${{AWS::StackName}}-{name}"}
    api = outputs["PaymentsApiUrl"]
    assert "${PaymentsApi}.execute-api" in api["Value"]["Fn::Sub"]
    assert api["Value"]["Fn::Sub"].endswith("/payments")
    assert "Export" in api


@pytest.mark.parametrize("slim", [False, True], ids=["full", "slim"])
def test_layer_arns_are_published_in_ssm_and_never_exported(
    template: dict[str, Any], slim: bool
) -> None:
    # An imported export cannot change, and a layer's ARN changes with every version: an
    # export would make the next layer change fail. SSM parameters are the interface.
    resources = template["Resources"]
    outputs = template["Outputs"]
    kind = "slim-layer-arn" if slim else "layer-arn"
    for runtime in runtimes(template):
        layer = layer_id(runtime, slim=slim)
        assert outputs[f"{layer}Arn"]["Value"] == {"Ref": layer}
        assert "Export" not in outputs[f"{layer}Arn"]
        parameter = resources[f"{layer}ArnParameter"]
        assert parameter["Type"] == "AWS::SSM::Parameter"
        assert parameter["Properties"]["Value"] == {"Ref": layer}
        assert parameter["Properties"]["Name"] == {
            "Fn::Sub": f"/${{AWS::StackName}}/fleetbreaker/{runtime}/{kind}"
        }
    exported = json.dumps([o["Value"] for o in outputs.values() if "Export" in o])
    assert "LayerPython" not in exported


# --------------------------------------------------------------------------- pins, samconfig


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            found[re.sub(r"[-_.]+", "-", name).lower()] = version
    return found


@pytest.mark.parametrize(
    "requirements",
    ["layer/requirements.txt", "functions/payment/requirements.txt"],
)
def test_bundled_pins_match_the_tested_ones(requirements: str) -> None:
    # What goes to Lambda is what the tests ran with.
    tested = pins(REPO_ROOT / "constraints.txt")
    bundled = pins(REPO_ROOT / requirements)
    assert bundled
    assert {name: tested.get(name) for name in bundled} == bundled


def test_layer_bundles_nothing_the_runtime_has() -> None:
    bundled = pins(REPO_ROOT / "layer" / "requirements.txt")
    runtime = {"boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "six", "urllib3"}
    assert not runtime & set(bundled)


def test_samconfig_has_the_defaults_and_nothing_account_specific() -> None:
    config = tomllib.loads(SAMCONFIG.read_text())["default"]
    assert config["build"]["parameters"] == {"cached": True, "parallel": True}
    assert config["validate"]["parameters"]["lint"] is True
    deploy = config["deploy"]["parameters"]
    assert deploy["capabilities"] == "CAPABILITY_IAM"
    assert deploy["confirm_changeset"] is True
    assert deploy["resolve_s3"] is True
    overrides = dict(item.split("=", 1) for item in deploy["parameter_overrides"])
    assert set(overrides) <= set(load_template()["Parameters"])
    text = SAMCONFIG.read_text()
    assert not re.search(r"\b\d{12}\b", text), "an account id"
    assert not re.search(r"^\s*(region|s3_bucket|profile)\s*=", text, re.MULTILINE)
    assert not re.search(r"\b[a-z]{2}-[a-z]+-\d\b", text), "a region name"
