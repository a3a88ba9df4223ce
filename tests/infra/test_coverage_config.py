"""`make test`'s coverage: branches, a floor, and code run in child processes measured too.

The CLI's console script and `create-table` are mostly tested as child processes; coverage.py
measures them through its ``patch = ["subprocess"]`` setting (pyproject.toml) and the .pth
file its wheel installs, which starts it in every Python child that inherits the variable it
sets. These tests check that configuration from both sides: the settings as written, and a
real child process under ``coverage run`` with them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["coverage"]


def test_coverage_measures_branches_of_the_layer_and_the_functions_with_a_floor() -> None:
    assert CONFIG["run"]["branch"] is True
    assert set(CONFIG["run"]["source"]) == {"layer/fleetbreaker", "functions"}
    assert CONFIG["report"]["fail_under"] >= 95


def test_make_test_prints_the_table_by_default() -> None:
    makefile = (ROOT / "Makefile").read_text()
    (default,) = re.findall(r"^COVERAGE \?= (.*)$", makefile, re.M)
    assert default.split() == ["--cov", "--cov-report=term"]
    assert re.search(r"^\t\$\(PYTEST\) .*\$\(COVERAGE\)", makefile, re.M)


def covered_cli_lines(tmp_path: Path, parent_code: str) -> int:
    """The CLI's lines covered when ``parent_code``, a parent that never imports the package,
    runs under `coverage run` with the repository's settings (and none of an enclosing run's
    variables) and starts children."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    env["PYTHONPATH"] = str(ROOT)  # the parent's devtools
    data = tmp_path / ".coverage"
    parent = tmp_path / "parent.py"
    parent.write_text(parent_code)
    coverage = [sys.executable, "-m", "coverage"]
    options = [f"--rcfile={ROOT / 'pyproject.toml'}", f"--data-file={data}"]
    subprocess.run(
        [*coverage, "run", *options, str(parent)],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=120,
        capture_output=True,
    )
    subprocess.run([*coverage, "combine", *options], cwd=ROOT, env=env, check=False, timeout=60)
    report = tmp_path / "coverage.json"
    subprocess.run(
        [*coverage, "json", *options, "--fail-under=0", "-o", str(report)],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
    )
    files = json.loads(report.read_text())["files"]
    cli = [summary for path, summary in files.items() if "fleetbreaker/cli" in path]
    return sum(summary["summary"]["covered_lines"] for summary in cli)


def test_code_run_in_a_child_python_process_is_measured(tmp_path: Path) -> None:
    # GIVEN a parent that runs the CLI in a child process with its own environment
    parent = (
        "import subprocess, sys\n"
        "subprocess.run([sys.executable, '-m', 'fleetbreaker', '--help'], check=True)\n"
    )
    # WHEN it runs under coverage THEN the CLI's lines the child ran are counted
    assert covered_cli_lines(tmp_path, parent) > 0


def test_a_child_given_the_untraced_environment_is_not_measured(tmp_path: Path) -> None:
    # GIVEN a parent that runs the same child with devtools' untraced_env, as the tests run
    # servers and tools (sam, cfn-lint, pip): programs that run none of the measured code
    parent = (
        "import subprocess, sys\n"
        "from devtools.servers import untraced_env\n"
        "subprocess.run([sys.executable, '-m', 'fleetbreaker', '--help'], check=True,\n"
        "               env=untraced_env())\n"
    )
    # WHEN it runs under coverage THEN coverage never started in the child
    assert covered_cli_lines(tmp_path, parent) == 0


def test_a_child_started_inside_children_unmeasured_is_not_measured(tmp_path: Path) -> None:
    # GIVEN a parent that runs the CLI in a child inside tests/coverage_scope's
    # children_unmeasured (as the demo's fixtures start its containers), and checks that
    # coverage's variables are back afterwards
    parent = (
        "import os, subprocess, sys\n"
        "from tests.coverage_scope import children_unmeasured\n"
        "before = {k for k in os.environ if k.startswith('COVERAGE_PROCESS_')}\n"
        "assert before\n"
        "with children_unmeasured():\n"
        "    subprocess.run([sys.executable, '-m', 'fleetbreaker', '--help'], check=True)\n"
        "assert {k for k in os.environ if k.startswith('COVERAGE_PROCESS_')} == before\n"
    )
    # WHEN it runs under coverage THEN coverage never started in the child
    assert covered_cli_lines(tmp_path, parent) == 0
