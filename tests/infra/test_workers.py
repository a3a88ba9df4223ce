"""`make test` on pytest-xdist's workers, and the tiers around it (docs/testing.md, "Speed").

The mechanisms tests/conftest.py adds for the workers, each seen from both sides: the shared
fixtures it groups are fixtures that exist; the CI rule that a skip fails the run still sees
a skip made on any worker; the store clients get patient timeouts except in the tests about
them; and `make test-quick` selects the unit tests and the contract on MemoryStore only.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _pytest.fixtures import FixtureFunctionDefinition

from devtools import servers
from fleetbreaker import DynamoDBStore, RedisStore
from tests.workers import SHARED_FIXTURES

ROOT = Path(__file__).resolve().parents[2]


def child_environment(**values: str) -> dict[str, str]:
    """The environment of a pytest run inside this one: not a worker of this run, and not
    measured by its coverage (what it runs is the suite's machinery, not the package)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COVERAGE_", "PYTEST_"))}
    return {**env, **values}


@pytest.mark.parametrize("key", sorted(SHARED_FIXTURES))
def test_each_shared_fixture_names_a_fixture_that_exists(key: str) -> None:
    # A renamed fixture would silently leave its tests ungrouped: each worker would build it.
    module, _, name = key.rpartition(".")
    assert isinstance(getattr(importlib.import_module(module), name), FixtureFunctionDefinition)


def test_a_test_skipped_on_a_worker_fails_the_run_in_ci(tmp_path: Path) -> None:
    # GIVEN two tests that skip, one per worker, and tests/conftest.py's rule, under CI=true
    for index in (1, 2):
        (tmp_path / f"test_skips_{index}.py").write_text(
            textwrap.dedent(f"""
                import pytest

                def test_runs():
                    pass

                def test_skips():
                    pytest.skip("backend {index} missing")
            """)
        )
    env = child_environment(CI="true")

    # WHEN pytest runs them on two workers
    plugins = ["-p", "tests.conftest", "-p", "no:cov", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", *plugins, "-q", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    # THEN the run fails and names both skips (the controller saw every worker's reports)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 passed, 2 skipped" in done.stdout
    assert "backend 1 missing" in done.stdout.split("skipped tests fail the run in CI")[1]
    assert "backend 2 missing" in done.stdout.split("skipped tests fail the run in CI")[1]


RECORDER = """
import os
from tests.workers import shared_fixture_group

def pytest_runtest_setup(item):
    with open(os.environ["RECORD_TO"], "a") as record:
        worker = os.environ["PYTEST_XDIST_WORKER"]
        record.write(f"{worker} {shared_fixture_group(item)} {item.nodeid}\\n")
"""


def test_the_tests_of_a_shared_fixture_run_on_one_worker(tmp_path: Path) -> None:
    # GIVEN a module whose cluster tests share a cluster-mode redis-server (redis-cluster)
    (tmp_path / "recorder.py").write_text(RECORDER)
    record = tmp_path / "record.txt"
    env = child_environment(RECORD_TO=str(record), PYTHONPATH=str(tmp_path))

    # WHEN it runs on two workers as `make test` runs the suite
    options = ["-n", "2", "--dist", "loadgroup", "-p", "recorder", "-p", "no:cov", "-q"]
    options += ["-p", "no:cacheprovider"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *options, "tests/redis/test_redis_hash_slots.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    # THEN every test of the group ran on one worker, and the others were spread
    ran = [line.split(" ", 2) for line in record.read_text().splitlines()]
    grouped = {worker for worker, group, _ in ran if group == "redis-cluster"}
    assert len([1 for _, group, _ in ran if group == "redis-cluster"]) > 5
    assert len(grouped) == 1
    assert {worker for worker, _, _ in ran} == {"gw0", "gw1"}


def client_timeouts() -> tuple[float, float, float]:
    dynamodb = DynamoDBStore("t-patient", endpoint_url="http://127.0.0.1:9").client.meta.config
    redis = RedisStore(url="redis://127.0.0.1:9/0")  # connects on first use only
    pool = redis.client.connection_pool.connection_kwargs
    redis.close()
    return dynamodb.connect_timeout, dynamodb.read_timeout, pool["socket_timeout"]


def test_a_test_not_about_timeouts_gets_patient_store_clients() -> None:
    assert client_timeouts() == (
        servers.PATIENT_DYNAMODB["connect_timeout"],
        servers.PATIENT_DYNAMODB["read_timeout"],
        servers.PATIENT_REDIS["socket_timeout"],
    )


@pytest.mark.store_timeouts
def test_a_test_marked_store_timeouts_gets_the_stores_own() -> None:
    assert client_timeouts() == (0.2, 0.3, 0.2)


@pytest.mark.realtime
def test_a_realtime_test_gets_the_stores_own_timeouts() -> None:
    assert client_timeouts() == (0.2, 0.3, 0.2)


def test_the_quick_tier_runs_the_unit_tests_and_the_contract_on_memory_store_only() -> None:
    # GIVEN the command `make test-quick` runs
    printed = subprocess.run(
        ["make", "-n", "-o", "venv", "test-quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (command,) = [line for line in printed.splitlines() if " -m pytest " in line]
    args = shlex.split(command)
    args = args[args.index("pytest") + 1 :]
    workers = args.index("-n")
    del args[workers : workers + 2]

    # WHEN it only collects
    plugins = ["-p", "no:cacheprovider", "-p", "no:cov"]
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *plugins, *args],
        cwd=ROOT,
        env=child_environment(),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    ids = [line for line in collected.splitlines() if "::" in line]

    # THEN it holds every unit test module, and contract tests on MemoryStore only
    unit = {i.split("::")[0] for i in ids if i.startswith("tests/unit/")}
    assert unit == {str(p.relative_to(ROOT)) for p in (ROOT / "tests/unit").glob("test_*.py")}
    contract = [i for i in ids if i.startswith("tests/contract/")]
    assert len(contract) > 50
    for test in contract:
        assert re.search(r"\[memory\b", test), test
    assert {i.split("::")[0].split("/")[1] for i in ids} == {"unit", "contract"}
    # and the Hypothesis machines only on MemoryStore (the others need servers)
    machines = [i for i in ids if "fleet_invariants" in i or "rate_fleet" in i]
    assert machines
    assert all("memory" in i for i in machines), machines
