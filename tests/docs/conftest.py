"""What the docs' examples may assume when a test runs them as written.

A DynamoDB (moto in-process) holding the tables the examples name, `CIRCUIT_BREAKER_TABLE`
set as the stack sets it on a function, and the reader's own `myapp` package (stand-ins that
succeed until a test makes them fail). Nothing else: an example that needs more fails.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from tests.docs.blocks import READER, Block

# The tables the examples name: fleetbreaker's (key `name`), and Powertools' in the
# migration guide's "before" (key `id`).
TABLES = {"CircuitBreakers": "name", "CircuitBreakerState": "id"}


@pytest.fixture
def doc_world(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The world the examples are written for, fresh for each test."""
    import boto3
    from moto import mock_aws

    monkeypatch.setenv("CIRCUIT_BREAKER_TABLE", "CircuitBreakers")
    monkeypatch.delenv("CIRCUIT_BREAKER_REDIS_URL", raising=False)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.syspath_prepend(str(READER))
    for name in [m for m in sys.modules if m == "myapp" or m.startswith("myapp.")]:
        monkeypatch.delitem(sys.modules, name)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        for table, key in TABLES.items():
            client.create_table(
                TableName=table,
                AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
                KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
                BillingMode="PAY_PER_REQUEST",
            )
        yield
    for name in [m for m in sys.modules if m == "myapp" or m.startswith("myapp.")]:
        del sys.modules[name]


def run_block(block: Block) -> dict[str, Any]:
    """Run a block as written, as a module of its own; its globals afterwards."""
    module = ModuleType(f"doc_example_{block.path.stem.replace('-', '_')}_{block.line}")
    code = compile(block.code, block.where, "exec")
    exec(code, module.__dict__)
    return module.__dict__
