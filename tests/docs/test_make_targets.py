"""Every `make` target the docs show exists, and runs with the outcome the docs give it.

How each is run here (all from the repository root, `-o` marking the set-up targets as done
so a test never reinstalls the venv under the suite that runs it):

- run for real, exit 0: `help`, `demo ARGS='--help'` (the demo itself: tests/demo, and
  `test_demo_busy.py` runs its short version), `invoke-local` with each documented form;
- run for real, documented refusal (exit 2 with the message): `test-deployed` without
  FLEETBREAKER_STACK, `invoke` without Docker (before it builds anything);
- printed with `make -n` (exit 0, the recipe runs the documented command): `deploy` and
  `deploy-guided` (need an AWS account), `build`, `validate` and `checkov` (their commands
  run in tests/sam), `bench` and `scale` (benchmarks: tests/bench runs scale.py's model),
  `test` (this suite is its recipe; CI runs `make test` itself), `test-quick` (a part of
  it; tests/infra/test_workers.py collects its selection) and `time-tests` (the suite,
  timed), `dist` (tests/install builds the wheel as it does).

`make help` quotes no duration: how long a target takes is measured, and lives in the docs
that render or record it (docs/testing.md, docs/demo.md), where it cannot drift from a
one-line description. `make build` ends by printing the sizes of the layers it made.

`venv` (and `deps`) are not run here: they are the set-up every `make` target above depends
on, which CI's `make test` runs on a fresh clone before this suite.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from bench import layer_sizes
from devtools.sam_template import layer_id, load_template, runtimes
from devtools.servers import REPO_ROOT
from tests.docs.blocks import DOCS
from tests.docs.test_readme import QUANTITY

SET_UP = ["-o", "deps", "-o", "venv", "-o", "node", "-o", "redis", "-o", "tools"]
# `make <target>` in inline code and at the start of a code block's line, with the
# variables shown after it.
SHOWN = re.compile(r"(?:^|`)make ((?:[a-z][a-z-]*)(?: [A-Z_]+=(?:'[^']*'|\S+))*)", re.M)
# The targets that need what this machine lacks (an AWS account, Docker) or are the suite.
PRINTED = {
    *("deploy", "deploy-guided", "build", "validate", "checkov", "bench", "scale", "test"),
    *("test-quick", "time-tests", "dist"),
}


def shown_commands() -> set[str]:
    found = set()
    for path in DOCS:
        for match in SHOWN.finditer(path.read_text()):
            found.add(match.group(1).rstrip("`.,;:)"))
    return found


# What a `make` above the suite passes down to every make below it (`make time-tests
# ARGS='--runs 3 --busy'` would hand its ARGS to `make invoke-local`): each target is run here
# as a user runs it, from a shell.
INHERITED_FROM_MAKE = ("ARGS", "MAKEFLAGS", "MAKEOVERRIDES", "MFLAGS", "MAKELEVEL")


def make(*args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    shell = {k: v for k, v in os.environ.items() if k not in INHERITED_FROM_MAKE}
    return subprocess.run(
        ["make", *SET_UP, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**shell, **env},
        check=False,
    )


def targets() -> set[str]:
    listed = make("help").stdout
    return set(re.findall(r"^  ([a-z][a-z-]*) ", listed, re.M))


def test_every_target_the_docs_show_is_one_make_help_lists() -> None:
    shown = {command.split()[0] for command in shown_commands()}
    assert shown >= {"demo", "test", "help", "deploy", "invoke", "invoke-local"}
    assert shown <= targets(), shown - targets()


@pytest.mark.parametrize("target", sorted(PRINTED))
def test_a_target_that_cannot_run_here_prints_its_documented_command(target: str) -> None:
    command = {
        "deploy": "sam deploy",
        "deploy-guided": "sam deploy --guided",
        "build": "sam build",
        "validate": "sam validate --lint",
        "checkov": "checkov -f template.yaml",
        "bench": "bench/fleet_vs_powertools.py",
        "scale": "bench/scale.py",
        "test": 'pytest -m "not deployed"',
        "test-quick": "pytest -n 2 tests/unit tests/contract",
        "time-tests": "scripts/time_tests.py",
        "dist": "-m build --outdir dist .",
    }[target]
    done = make("-n", target)
    assert done.returncode == 0, done.stderr
    assert command in done.stdout


def test_make_help_and_the_demos_help_exit_0() -> None:
    assert make("help").returncode == 0
    done = make("demo", "ARGS=--help")
    assert done.returncode == 0, done.stderr
    assert "--store-deadline" in done.stdout


def test_make_test_deployed_refuses_without_a_stack() -> None:
    env = {key: value for key, value in os.environ.items() if key != "FLEETBREAKER_STACK"}
    done = subprocess.run(
        ["make", *SET_UP, "test-deployed"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 2
    assert "set FLEETBREAKER_STACK" in done.stderr


NO_DOCKER = "unix:///nonexistent/docker.sock"  # a socket nobody serves


def test_make_invoke_refuses_without_docker_and_names_invoke_local() -> None:
    # GIVEN no Docker daemon, WHEN `make invoke` runs
    done = make("-o", "build", "invoke", DOCKER_HOST=NO_DOCKER)

    # THEN it refuses with exit 2 and points at invoke-local, before starting anything
    assert done.returncode == 2
    assert "Use: make invoke-local" in done.stderr


@pytest.mark.parametrize("jobs", [[], ["-j", "4"]], ids=["serial", "parallel"])
def test_make_invoke_checks_for_docker_before_it_builds(jobs: list[str]) -> None:
    # GIVEN no Docker daemon, WHEN `make invoke` runs with its build still to do
    done = make(*jobs, "invoke", DOCKER_HOST=NO_DOCKER)

    # THEN it refuses at once: no `sam build` started, for nothing
    assert done.returncode == 2, done.stdout[-2000:]
    assert "Use: make invoke-local" in done.stderr
    assert "sam build" not in done.stdout + done.stderr


def test_make_help_quotes_no_duration() -> None:
    # GIVEN what `make help` says of each target
    listed = make("help").stdout
    # THEN no line says how long it takes ("a minute" for a 18 s target drifted): the docs
    # that measure it say so
    durations = QUANTITY.findall(listed) + re.findall(r"\ba (?:minute|second|few)\b", listed)
    assert durations == []


def test_make_build_prints_the_sizes_of_the_layers_it_built() -> None:
    # GIVEN `make build`'s recipe THEN after `sam build` it prints the sizes of what it built,
    # without touching the results the docs quote
    recipe = make("-n", "-o", "venv", "build").stdout
    build, sizes = recipe.index("sam build"), recipe.index("bench/layer_sizes.py")
    assert build < sizes
    assert "--build-dir .aws-sam/build --print-only" in recipe[sizes:]


def fake_build(root: Path) -> Path:
    """A `sam build` directory holding every layer pair: one small module each."""
    for runtime in runtimes(load_template()):
        for slim in (False, True):
            package = root / layer_id(runtime, slim=slim) / "python" / "fleetbreaker"
            package.mkdir(parents=True)
            (package / "__init__.py").write_text("x = 1\n" * (100 if slim else 1000))
    return root


def test_layer_sizes_print_only_prints_each_layer_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a build directory and a results file that must stay as it is
    build = fake_build(tmp_path / "build")
    results = tmp_path / "layer_sizes.json"
    results.write_text(json.dumps({"layers": "as measured"}))

    # WHEN the sizes are printed, as `make build` prints them
    assert (
        layer_sizes.main(["--build-dir", str(build), "--output", str(results), "--print-only"]) == 0
    )

    # THEN each runtime's pair is printed in MB, and the results file is untouched
    printed = capsys.readouterr().out
    for runtime in runtimes(load_template()):
        assert re.search(
            rf"^{runtime}: full 0\.01 MB \(0\.00 zipped\), slim 0\.00 MB", printed, re.M
        )
    assert json.loads(results.read_text()) == {"layers": "as measured"}


@pytest.mark.slow
def test_each_invoke_local_command_shown_exits_0() -> None:
    shown = sorted(c for c in shown_commands() if c.startswith("invoke-local "))
    assert len(shown) == 3, shown
    for command in shown:
        done = make(*shlex.split(command))
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        responses = re.findall(r"^--- \S+ -> (\d+)$", done.stdout, re.M)
        assert responses, command
        if "--repeat 7" in command:
            # The breaker sees the first five failures (threshold 5) and never lets the
            # provider's 503 through as a 500. Whether calls six and seven are 503s depends
            # on moto answering the trip within the store's 0.3 s read timeout.
            assert len(responses) == 7
            assert responses[:5] == ["502"] * 5
            assert set(responses) <= {"502", "503"}
