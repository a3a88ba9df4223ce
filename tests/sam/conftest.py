"""Fixtures for the SAM application: the payment function's module, its table, a fake provider."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from devtools.functions import load_function
from devtools.lambda_context import FakeLambdaContext
from devtools.payment_api import FakePaymentApi
from devtools.servers import REPO_ROOT, make_table

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
