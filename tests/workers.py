"""`make test`'s workers (pytest-xdist, ``--dist loadgroup``): which tests share a worker.

Each worker is a pytest session of its own, so a session or module fixture is built once per
worker that runs a test using it. The fixtures in SHARED_FIXTURES cost seconds each (a stack
created per parameter set, ``sam build``, a demo run): the tests that use one form a group,
and a group runs on one worker, so each is still built once per run.

The groups are found from what each test requests (its fixture closure), which only a
worker sees: the controller sees test ids. So each worker writes the groups it found to a
directory the controller names (``pytest_configure_node``), and the controller's scheduler,
xdist's own for ``loadgroup`` with the group of a test read from there, reads them once every
worker has collected. (xdist's own ``xdist_group`` marker renames a test's id, which pytest 9
no longer allows: ``Node.nodeid`` is derived, and xdist's write goes nowhere.)

The scheduler hands out the largest groups first (xdist's default), then the tests one by
one in collection order, where a worker puts the tests marked ``slow`` first: the long ones
start early, and the short ones fill the gaps at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

# Keyed by the fixture's module and name; "{}" takes the test's parameter for the fixture
# (each deployed parameter set is a group of its own, so the sets spread over the workers).
SHARED_FIXTURES = {
    "tests.rehearsal.conftest.rehearsal": "rehearsal-{}",
    "tests.rehearsal.conftest.defer_rehearsal": "rehearsal-{}",
    "tests.rehearsal.conftest.core_rehearsal": "rehearsal-core",
    "tests.rehearsal.test_as_deployed.count_rehearsal": "rehearsal-{}",
    "tests.rehearsal.conftest.default_set": "rehearsal-default",
    "tests.sam.test_rehearsal.deployment": "sam-deploy-{}",
    "tests.sam.test_rehearsal.example_deployment": "sam-deploy-{}",
    "tests.sam.test_build.build_dir": "sam-build",
    "tests.sam.test_build.runtime_boto3": "sam-build",
    "tests.sam.test_template.checkov_scan": "checkov",
    "tests.sam.conftest.cfn_lint_findings": "cfn-lint",
    "tests.infra.test_wall_clock_bounds.suite_scan": "test-modules-scan",
    "tests.demo.conftest.short_demo": "demo-short",
    "tests.demo.conftest.noisy_demo": "demo-noisy",
    "tests.bench.test_scale.rate": "scale-rate",
    "tests.bench.test_scale.count": "scale-count",
    "tests.fleet.test_partial_outage.trials": "partial-outage",
    "tests.restore.test_restored_fleet.identity_lives": "restore-identity",
    "tests.redis.conftest.cluster_redis": "redis-cluster",
    "tests.conftest.iam_moto": "iam-moto",
    "tests.cli.test_doctor.stack_cache": "doctor-cache",
}
# workerinput key: the directory where workers leave the groups they found.
GROUPS_DIR = "fleetbreaker_groups_dir"


def shared_fixture_group(item: pytest.Item) -> str | None:
    """The group of a test using one of SHARED_FIXTURES (the first it requests), or None."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:  # a doctest
        return None
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    for name in info.names_closure:
        for definition in info.name2fixturedefs.get(name, ()):
            group = SHARED_FIXTURES.get(f"{definition.func.__module__}.{name}")
            if group is not None:
                return group.format(params.get(name))
    return None


def groups_of(items: list[pytest.Item]) -> dict[str, str]:
    return {item.nodeid: group for item in items if (group := shared_fixture_group(item))}


# --------------------------------------------------------------------------- worker side


def on_worker_collected(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests first; the groups found, written where the controller reads them."""
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is None or GROUPS_DIR not in workerinput:
        return
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    directory = Path(workerinput[GROUPS_DIR])
    written = directory / f".{workerinput['workerid']}.json"
    written.write_text(json.dumps(groups_of(items)))
    written.replace(directory / f"{workerinput['workerid']}.json")  # whole, or not at all


# --------------------------------------------------------------------------- controller side


def make_groups_dir(config: pytest.Config) -> str:
    directory = tempfile.mkdtemp(prefix="fleetbreaker-groups-")
    config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))
    return directory


def make_scheduler(config: pytest.Config, log: Any, directory: str) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """xdist's loadgroup with each test's group read from the workers' files."""

        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # first called once every worker has collected
                self.groups = {}
                for path in sorted(Path(directory).glob("*.json")):
                    self.groups.update(json.loads(path.read_text()))
            return self.groups.get(nodeid, nodeid)

    return SharedFixtureScheduling(config, log)


def distributed_by_group(config: pytest.Config) -> bool:
    return bool(config.getoption("dist", "no") == "loadgroup") and not os.environ.get(
        "PYTEST_XDIST_WORKER"
    )
