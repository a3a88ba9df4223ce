"""Guard on what a cold start imports: which modules, and how many dataclasses they build.

The cost itself is a benchmark (bench/import_time.py: at most 1.04 × `import boto3`, 6 ms
where that takes 150 ms). These tests pin down what keeps it there, without timing anything:
the modules that `import fleetbreaker` plus the DynamoDB store loads, and the dataclasses
defined on that path (each one compiles six generated methods at import; see
fleetbreaker/frozen.py). A change that adds to either list must add to it here too, and
rerun the benchmark.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

LAYER = Path(__file__).resolve().parents[2] / "layer"

# What a function's cold start needs: the breaker and the parts one call crosses (the
# admission pipeline, the view, the count policy's strategy and census, probes, the judge),
# its config, rules and live tuning's tracker, the fallback store, the default logging
# listener and DynamoDB. The rate policy (rate, tally, window, watcher) loads when a
# breaker's settings use it; the fallback's in-memory twin (stores.memory) on the first
# degradation; tuning's checks with the first tuned record; snapshot when asked.
COLD_START_MODULES = {
    "fleetbreaker",
    "fleetbreaker._version",
    "fleetbreaker.admission",
    "fleetbreaker.breaker",
    "fleetbreaker.calls",
    "fleetbreaker.census",
    "fleetbreaker.classify",
    "fleetbreaker.clock",
    "fleetbreaker.config",
    "fleetbreaker.core",
    "fleetbreaker.count",
    "fleetbreaker.counting",
    "fleetbreaker.environment",
    "fleetbreaker.errors",
    "fleetbreaker.events",
    "fleetbreaker.frozen",
    "fleetbreaker.live",
    "fleetbreaker.naming",
    "fleetbreaker.policy",
    "fleetbreaker.probes",
    "fleetbreaker.record",
    "fleetbreaker.results",
    "fleetbreaker.rules",
    "fleetbreaker.stores",
    "fleetbreaker.stores.base",
    "fleetbreaker.stores.deadline",
    "fleetbreaker.stores.dynamodb",
    "fleetbreaker.stores.dynamodb.codec",
    "fleetbreaker.stores.dynamodb.store",
    "fleetbreaker.stores.dynamodb.wire",
    "fleetbreaker.stores.fallback",
    "fleetbreaker.stores.variables",
    "fleetbreaker.switch",
    "fleetbreaker.sync_driver",
    "fleetbreaker.view",
}
# Public value classes users may pass to dataclasses.replace / asdict: they stay dataclasses
# frozen._Marked is a dataclass that
# generates no method: the field marks the public ones need.
COLD_START_DATACLASSES = {
    "fleetbreaker.config.BreakerConfig",
    "fleetbreaker.frozen._Marked",
    "fleetbreaker.results.Admission",
    "fleetbreaker.results.RecordResult",
    "fleetbreaker.results.StoreErrorStats",
    "fleetbreaker.stores.base.StoreStats",
}
# Third-party packages a breaker on DynamoDB must not pull in at import.
NEVER_AT_IMPORT = ("aws_xray_sdk", "aws_lambda_powertools", "redis", "opentelemetry")

PROBE = """
import dataclasses, json, sys
{statement}
modules = sorted(name for name in sys.modules if name.split(".")[0] == "fleetbreaker")
classes = sorted(
    f"{{module}}.{{name}}"
    for module in modules
    for name, value in vars(sys.modules[module]).items()
    if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == module
)
third = sorted({{name.split(".")[0] for name in sys.modules}} & set({never!r}))
boto3 = ["boto3"] if "boto3" in sys.modules else []
found = {{"modules": modules, "dataclasses": classes, "third_party": third, "boto3": boto3}}
print(json.dumps(found))
"""


def imported_by(statement: str) -> dict[str, list[str]]:
    """What a fresh interpreter has loaded after ``statement`` (only the layer on its path)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(statement=statement, never=NEVER_AT_IMPORT)],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(LAYER), "PATH": "/usr/bin:/bin"},
        timeout=120,
    ).stdout
    result: dict[str, list[str]] = json.loads(out)
    return result


@pytest.mark.parametrize(
    "statement",
    [
        "import fleetbreaker; import fleetbreaker.stores.dynamodb",
        # How a handler writes it: the lazy DynamoDBStore name loads the same modules.
        "from fleetbreaker import BreakerConfig, CircuitBreaker, DynamoDBStore",
    ],
)
def test_a_cold_start_loads_only_the_modules_the_healthy_path_needs(statement: str) -> None:
    # GIVEN a fresh interpreter WHEN a function imports the package and its DynamoDB store
    loaded = imported_by(statement)
    # THEN exactly these modules are loaded: no CLI, tuning, metrics, tracing or Redis
    assert set(loaded["modules"]) == COLD_START_MODULES
    assert loaded["third_party"] == []


def test_a_cold_start_builds_only_the_public_dataclasses() -> None:
    # GIVEN a fresh interpreter WHEN the package and its DynamoDB store are imported
    loaded = imported_by("import fleetbreaker; import fleetbreaker.stores.dynamodb")
    # THEN the only dataclasses defined on the way are the public value classes
    assert set(loaded["dataclasses"]) == COLD_START_DATACLASSES


def test_plain_import_fleetbreaker_leaves_the_stores_with_dependencies_out() -> None:
    # GIVEN a fresh interpreter WHEN only the package is imported
    loaded = imported_by("import fleetbreaker")
    # THEN neither the DynamoDB nor the Redis store module is loaded, nor boto3
    assert not {"fleetbreaker.stores.dynamodb", "fleetbreaker.stores.redis"} & set(
        loaded["modules"]
    )
    assert loaded["boto3"] == []


def test_a_store_that_degrades_loads_its_in_memory_twin_then() -> None:
    # GIVEN a fresh interpreter with a breaker's fallback over a shared store that fails
    statement = (
        "from fleetbreaker.stores.fallback import FallbackStore\n"
        "class Down:\n"
        "    def load(self, name, now_ms): raise OSError('down')\n"
        "store = FallbackStore(Down(), deadline_seconds=None, clock=lambda: 0)\n"
        "healthy = 'fleetbreaker.stores.memory' in sys.modules\n"
        "assert store.load('svc', 0) is None and store.degraded and not healthy"
    )
    # WHEN its first load fails
    loaded = imported_by(statement)
    # THEN the local twin answered, and only then was MemoryStore loaded
    assert "fleetbreaker.stores.memory" in loaded["modules"]
