"""Fixtures for the SAM application: the payment function's module, its table, a fake provider,
and cfn-lint's findings on every template the tests lint."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from devtools.functions import load_function
from devtools.lambda_context import FakeLambdaContext
from devtools.payment_api import FakePaymentApi
from devtools.servers import REPO_ROOT, make_table, untraced_env

EVENTS = REPO_ROOT / "events"


def load_event(path: Path) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(path.read_text())
    return event


def payment_event(body: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """events/payment-ok.json with its body replaced (a fresh idempotency key by default)."""
    event = load_event(EVENTS / "payment-ok.json")
    payment = body or {
        "amount": 1250,
        "currency": "EUR",
        "idempotency_key": f"test-{uuid.uuid4().hex[:12]}",
    }
    event["body"] = json.dumps({**payment, **fields})
    return event


Response = tuple[int, dict[str, str], dict[str, Any]]


def invoke(
    handler: Callable[[dict[str, Any], Any], dict[str, Any]], event: dict[str, Any]
) -> Response:
    """Run one event through a handler: (status, headers, parsed JSON body)."""
    result = handler(event, FakeLambdaContext())
    return result["statusCode"], result.get("headers", {}), json.loads(result["body"])


@pytest.fixture(scope="session")
def payment_table(moto_server: str) -> str:
    """A CircuitBreakers table on the moto server, shared by the session (breaker names differ)."""
    return make_table(moto_server)


@pytest.fixture(scope="session")
def healthy_payment_api() -> Iterator[FakePaymentApi]:
    """A provider that always charges; shared by the session."""
    with FakePaymentApi("ok") as api:
        yield api


@pytest.fixture
def payment_api() -> Iterator[FakePaymentApi]:
    """A provider of this test's own, to fail and recover at will."""
    with FakePaymentApi("ok", hold_timeout=5.0) as api:
        yield api


@pytest.fixture(scope="session")
def payment_module(payment_table: str, healthy_payment_api: FakePaymentApi) -> ModuleType:
    """functions/payment/app.py, imported the way Lambda does: its handler built from env.

    Only the variables the import reads are set, and only during the import.
    """
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CIRCUIT_BREAKER_TABLE", payment_table)
        env.setenv("PAYMENT_API_URL", healthy_payment_api.url)
        env.setenv("BREAKER_NAME", f"payment-events-{uuid.uuid4().hex[:8]}")
        return load_function("payment")


@pytest.fixture
def payment_env(payment_table: str, payment_api: FakePaymentApi) -> dict[str, str]:
    """Environment for a handler built by create_handler: this test's API and breaker name,
    and a store deadline a busy machine cannot miss (the store is a local server sharing two
    cores with the other test workers; tests/faults covers the 1 s default)."""
    return {
        "CIRCUIT_BREAKER_TABLE": payment_table,
        "PAYMENT_API_URL": payment_api.url,
        "BREAKER_NAME": f"payment-{uuid.uuid4().hex[:12]}",
        "BREAKER_STORE_DEADLINE_SECONDS": "30",
    }


@pytest.fixture(scope="session")
def consumer_module() -> ModuleType:
    """functions/deferred_payments/app.py; its import-time consumer reads a throwaway env.

    Session-wide, as the module is imported once per process: tests build their own
    consumers with create_consumer.
    """
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CIRCUIT_BREAKER_TABLE", "unused-at-import")
        env.setenv("PAYMENT_API_URL", "http://127.0.0.1:9/charges")
        env.setenv("IDEMPOTENCY_TABLE", "unused-at-import")
        env.delenv("BREAKER_MAPPINGS", raising=False)
        return load_function("deferred_payments")


def shipped_templates() -> dict[str, str]:
    """Every template the repository gives users: template.yaml, and each YAML block of
    README.md and docs/*.md that is a whole template ("AWSTemplateFormatVersion"), by where
    it is ("README.md#2": the second YAML block)."""
    templates = {"template.yaml": (REPO_ROOT / "template.yaml").read_text()}
    for page in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]:
        blocks = re.findall(r"```yaml\n(.*?)```", page.read_text(), re.DOTALL)
        for number, block in enumerate(blocks, start=1):
            if "AWSTemplateFormatVersion" in block:
                templates[f"{page.relative_to(REPO_ROOT)}#{number}"] = block
    return templates


def yaml_after_marker(page: Path, marker: str) -> str:
    """The YAML block that follows ``<!-- marker`` on a page."""
    text = page.read_text()
    start = text.index(f"<!-- {marker}")
    match = re.search(r"```yaml\n(.*?)```", text[start:], re.DOTALL)
    assert match, f"no yaml block after the {marker} marker in {page.name}"
    return match.group(1)


# --------------------------------------------------------------------------- cfn-lint

CFN_LINT = Path(sys.executable).parent / "cfn-lint"
TEMPLATE = REPO_ROOT / "template.yaml"
# Real-looking IDs for the breaker cache's network (tests/sam/test_template_redis.py).
SUBNETS = "subnet-0123456789abcdef0,subnet-0fedcba9876543210"
SECURITY_GROUPS = "sg-0123456789abcdef0"


def template_with_the_cache_on() -> str:
    """template.yaml with the breaker cache switched on: defaults set to redis and
    real-looking IDs, and the condition reduced to the parameter test, which cfn-lint can
    evaluate (it then checks the Fn::If branches that only exist with the cache)."""
    text = TEMPLATE.read_text()
    text = text.replace("    Default: dynamodb\n", "    Default: redis\n", 1)
    for parameter, value in [
        ("BreakerCacheSubnetIds", SUBNETS),
        ("BreakerCacheSecurityGroupIds", SECURITY_GROUPS),
    ]:
        empty = f'  {parameter}:\n    Type: CommaDelimitedList\n    Default: ""\n'
        assert text.count(empty) == 1, f"expected {parameter} with an empty default"
        text = text.replace(empty, empty.replace('""', f'"{value}"'))
    condition_start = text.index("  BreakerOnRedis: !And\n")
    condition_end = text.index("\n  DeferWhenOpen:")
    return (
        text[:condition_start]
        + "  BreakerOnRedis: !Equals [!Ref BreakerStore, redis]"
        + text[condition_end:]
    )


def attach_snippet() -> str:
    """The YAML block that follows the README's attach-snippet marker."""
    return yaml_after_marker(REPO_ROOT / "README.md", "attach-snippet")


def managed_instances_snippet() -> str:
    """docs/deploying.md's Lambda Managed Instances snippet."""
    return yaml_after_marker(REPO_ROOT / "docs" / "deploying.md", "managed-instances-snippet")


@pytest.fixture(scope="session")
def cfn_lint_findings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """cfn-lint's findings, informational ones included, on each template the tests lint:
    template.yaml as written and with the breaker cache on, and the docs' two snippets, by
    name. One cfn-lint run lints all four, each on its own (loading its specifications was
    half of each of four runs); a finding names its file."""
    directory = tmp_path_factory.mktemp("cfn-lint")
    paths = {"template.yaml": TEMPLATE}
    for name, text in [
        ("template-redis.yaml", template_with_the_cache_on()),
        ("attach.yaml", attach_snippet()),
        ("managed-instances.yaml", managed_instances_snippet()),
    ]:
        paths[name] = directory / name
        paths[name].write_text(text)
    result = subprocess.run(
        [str(CFN_LINT), "--format", "parseable", "--include-checks", "I", "--"]
        + [str(path) for path in paths.values()],
        cwd=REPO_ROOT,
        env=untraced_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # Exit 0: no error, warning or informational finding anywhere. Anything else with no
    # finding printed is cfn-lint itself failing.
    assert result.returncode == 0 or result.stdout.strip(), result.stdout + result.stderr
    by_path = {str(path): name for name, path in paths.items()}
    findings: dict[str, list[str]] = {name: [] for name in paths}
    for line in result.stdout.splitlines():
        findings[by_path[line.split(":", 1)[0]]].append(line)
    return findings
