"""`make mutate`'s map of modules to tests (scripts/mutate.py's MODULES) against the tree.

A module renamed or a test file removed leaves the map naming something that is gone: mutmut
then mutates nothing for that module, or the stats pass fails minutes into a run. These tests
fail first, and the script refuses such a map before it starts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from devtools.servers import untraced_env
from tests.support import load_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mutate() -> ModuleType:
    return load_file(ROOT / "scripts" / "mutate.py", "mutate_script")


def test_every_module_and_test_path_in_the_map_exists(mutate: ModuleType) -> None:
    # GIVEN the map as committed
    # WHEN each module's file and each selection's test paths are looked up
    problems = mutate.missing(mutate.MODULES)
    # THEN none is missing
    assert problems == []


def test_a_module_or_test_file_that_is_gone_is_named(mutate: ModuleType) -> None:
    # GIVEN a map naming the old layout's state.py and a removed test file
    stale = {
        "state": ["tests/unit/test_rules.py"],
        "rules": ["tests/unit/test_reporting.py", "-k", "not_a_path"],
    }
    # WHEN it is checked
    problems = mutate.missing(stale)
    # THEN both are named, and the -k expression is not taken for a path
    assert problems == [
        "module state: no layer/fleetbreaker/state.py",
        "module rules: no test path tests/unit/test_reporting.py",
    ]


def test_the_script_refuses_a_stale_map_before_it_mutates_anything(
    mutate: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a map whose only module's test file is gone
    monkeypatch.setattr(mutate, "MODULES", {"rules": ["tests/unit/test_gone.py"]})
    monkeypatch.setattr(mutate, "run", lambda *_: pytest.fail("mutmut started"))
    # WHEN the script is asked for that module
    with pytest.raises(SystemExit) as exit_info:
        mutate.main(["rules"])
    # THEN it exits with a usage error naming the path
    assert exit_info.value.code == 2
    assert "no test path tests/unit/test_gone.py" in capsys.readouterr().err


def test_the_rules_strategies_and_pipeline_are_in_the_default_run(mutate: ModuleType) -> None:
    # GIVEN issue 31's 85 % target: the rules, both counting strategies and the pipeline
    # THEN `make mutate` without ARGS mutates each of them
    assert {"rules", "window", "count", "rate", "census", "admission"} <= set(mutate.DEFAULT)


def test_the_core_and_both_drivers_are_in_the_default_run(mutate: ModuleType) -> None:
    # GIVEN issue 43's 85 % target: the call path's core, both drivers and their types
    # THEN `make mutate` without ARGS mutates each of them, against one selection (one run)
    call_path = ("core", "sync_driver", "async_driver", "calls")
    assert set(call_path) <= set(mutate.DEFAULT)
    assert all(mutate.MODULES[module] is mutate.CALL_PATH for module in call_path)


def test_the_call_path_runs_the_tests_named_after_each_of_its_modules(mutate: ModuleType) -> None:
    # GIVEN the call path's modules, each with a unit test file named after it
    # WHEN their selection's paths are read
    paths = mutate.selection_paths(mutate.CALL_PATH)
    # THEN each module's own tests are there, and the breaker's that drive both drivers
    for module in ("core", "sync_driver", "async_driver", "calls", "breaker", "rate_breaker"):
        assert f"tests/unit/test_{module}.py" in paths


# Collects each selection given (a JSON list of pytest arguments each) in this one process,
# with pytest.main as mutmut's stats pass runs it, and prints each one's exit code and test ids.
COLLECT_EACH = """
import json
import sys

import pytest


class Collected:
    def __init__(self):
        self.ids = []

    def pytest_collection_finish(self, session):
        self.ids = [item.nodeid for item in session.items]


answers = []
for selection in json.loads(sys.argv[1]):
    collected = Collected()
    options = ["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:cov"]
    code = pytest.main([*options, *selection], plugins=[collected])
    answers.append({"code": int(code), "ids": collected.ids})
print("COLLECTED " + json.dumps(answers))
"""


def test_each_test_path_of_each_selection_keeps_tests_under_its_filter(
    mutate: ModuleType,
) -> None:
    # GIVEN each distinct selection (its paths and its -k filter)
    selections = sorted({tuple(tests) for tests in mutate.MODULES.values()})
    # WHEN pytest collects each (one process for all: its start-up was most of the time),
    # unmeasured by coverage: what collecting runs of the package, importing it, every
    # worker's own collection runs too (traced, it cost 2.4 s of CPU more)
    done = subprocess.run(
        [sys.executable, "-c", COLLECT_EACH, json.dumps(selections)],
        cwd=ROOT,
        env=untraced_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    last = done.stdout.splitlines()[-1]
    assert last.startswith("COLLECTED "), done.stdout[-2000:] + done.stderr[-2000:]
    answers = json.loads(last.removeprefix("COLLECTED "))
    assert len(answers) == len(selections)
    for tests, answer in zip(selections, answers, strict=True):
        assert answer["code"] == 0, (tests, done.stdout[-2000:])
        # THEN every path it names contributes tests: a filter that drops a whole file
        # would leave that file's mutants to the others' tests without saying so
        for path in mutate.selection_paths(list(tests)):
            assert any(test_id.startswith(path) for test_id in answer["ids"]), (path, tests)


# Unit tests that read the package's source or measure its imports: they scan files that
# mutmut rewrites (test_record_schema fails mutmut's stats pass; test_environment parses every
# module for the variable names it reads, and mutmut's mutants rename them), or kill nothing.
NOT_BEHAVIOUR = {
    "test_import_cost.py",
    "test_module_seams.py",
    "test_record_schema.py",
    "test_one_config_path.py",
    "test_environment.py",
}
# Hypothesis state machines: minutes a run, once per mutant (scripts/mutate.py's CORE).
TOO_SLOW = {"test_stateful.py", "test_stateful_rate.py"}


def test_each_unit_test_file_of_a_mutated_module_is_in_its_selection(mutate: ModuleType) -> None:
    # GIVEN the unit test files that import one of the modules the core selection, the call
    # path's or the config's mutates (the stores, the record and the policy are every test's tools:
    # importing them says nothing of what a file tests)
    left_out = []
    for module, tests in mutate.MODULES.items():
        if module not in mutate.DEFAULT or (
            tests is not mutate.CORE and tests is not mutate.CALL_PATH and module != "config"
        ):
            continue
        dotted = "fleetbreaker." + module.replace("/", ".")
        paths = mutate.selection_paths(tests)
        for test_file in sorted((ROOT / "tests" / "unit").glob("test_*.py")):
            source = test_file.read_text()
            if test_file.name in NOT_BEHAVIOUR | TOO_SLOW or f"from {dotted} import" not in source:
                continue
            relative = str(test_file.relative_to(ROOT))
            if relative not in paths and "tests/unit" not in paths:
                left_out.append((module, relative))
    # THEN each module's selection runs them: a test written against a module's survivors
    # but left out of the map kills none of them
    assert left_out == []
