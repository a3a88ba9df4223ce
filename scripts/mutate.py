"""`make mutate`: mutation testing of layer/fleetbreaker with mutmut, module by module.

Each module is mutated in a scratch copy of the repository (build/mutate/<module>/) against
the fast tests that cover it (unit, the store contract on MemoryStore, the breaker on it):
mutmut records which of those tests reach each function and runs only them per mutant.

mutmut names a mutant after its file's path, minus a leading ``src/``; the package lives in
``layer/``, so the scratch copy reaches it as ``src`` (a symlink) and the names match the
modules the tests import. Not part of CI: a whole run takes tens of minutes.

    .venv/bin/python scripts/mutate.py [MODULE ...] [--children N]

prints, per module, the mutants killed, survived, timed out and untested, and the score
(killed and timed out over all), and lists the survivors (`mutmut show NAME` in the module's
scratch directory shows one); then the total time and the load average. Modules that share
a test selection are mutated in one mutmut run (one stats pass instead of one each); their
line gives that run's time. Results go to build/mutate/summary.json too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / "build" / "mutate"
MUTMUT = Path(sys.executable).with_name("mutmut")

BREAKER = ["tests/unit/test_breaker.py", "tests/unit/test_rate_breaker.py"]

# The rules, the two counting strategies and the admission pipeline, with the modules they
# are built from: the store contract on MemoryStore only (the servers, and moto in-process at
# half a second a test, are too slow to run once per mutant; MemoryStore reaches the same
# rules, and the stores' own parsing is tested apart), the rules', the window's, the census',
# the view's, the pipeline's stages' (probes, classify), the strategies' and their tally's,
# live tuning's, the core's and the breaker's unit tests. Not the fleet scenarios
# (1,000 seeded trials each) nor the Hypothesis machines: minutes a run, once per mutant.
# (-k filters every selected test: it keeps the unit tests, whose names do not say "memory",
# through their directory's name only if it matches; hence the second clause, which names
# them.) About 8 s of plain pytest on the idle machine.
CORE = [
    "tests/contract",
    "tests/unit/test_rules.py",
    "tests/unit/test_rate_rules.py",
    "tests/unit/test_rules_records.py",
    "tests/unit/test_transition_reason.py",
    "tests/unit/test_verdict_and_snapshot.py",
    "tests/unit/test_window.py",
    "tests/unit/test_clock_skew.py",
    "tests/unit/test_census.py",
    "tests/unit/test_admission.py",
    "tests/unit/test_frozen.py",  # the rules' Verdict writes its own __init__
    "tests/unit/test_rate_strategy.py",
    "tests/unit/test_restart.py",
    "tests/unit/test_snapshot_hooks.py",
    "tests/unit/test_ramp.py",
    "tests/unit/test_shadow_mode.py",
    "tests/unit/test_rate_reporting.py",
    "tests/unit/test_view.py",
    "tests/unit/test_switch.py",
    "tests/unit/test_tuning.py",
    "tests/unit/test_tally.py",
    "tests/unit/test_count.py",
    "tests/unit/test_counting.py",
    "tests/unit/test_probes.py",
    "tests/unit/test_classify.py",
    "tests/unit/test_live.py",
    "tests/unit/test_core.py",
    *BREAKER,
    "-k",
    "memory and not degraded or not contract",
]

# The call path (issue 43): the core that decides and accounts, the sync and asyncio drivers
# that perform its answers, and their shared types. Their own unit tests and the breaker's,
# sync and async, and the tests that take a call through a mode the core swaps or a stage it
# wires: shadow mode, the ramp, a restore, the strategy switch, live tuning, the hooks and
# events, the pipeline, a skewed clock, the shared strategy, the rate policy's reports and
# the census.
# Not the stores' own tests (test_fallback_store: threads on a hung store, seconds a run).
# About 15 s of plain pytest on the idle machine.
CALL_PATH = [
    "tests/unit/test_core.py",
    "tests/unit/test_sync_driver.py",
    "tests/unit/test_async_driver.py",
    "tests/unit/test_calls.py",
    *BREAKER,
    "tests/unit/test_shadow_mode.py",
    "tests/unit/test_ramp.py",
    "tests/unit/test_restart.py",
    "tests/unit/test_snapshot_hooks.py",
    "tests/unit/test_switch.py",
    "tests/unit/test_tuning.py",
    "tests/unit/test_events.py",
    "tests/unit/test_admission.py",
    "tests/unit/test_clock_skew.py",
    "tests/unit/test_counting.py",
    "tests/unit/test_rate_reporting.py",
    "tests/unit/test_shared_refresh.py",
    # How long a store answer stays fresh (the census' stretch for a large fleet), which the
    # core asks the strategy for on each answer.
    "tests/unit/test_census.py",
]

# The CLI's commands, parser and views: cli.main(argv) in-process on a MemoryStore (the
# `memory` backend of tests/cli/conftest.py), plus the in-process tests that need a DynamoDB
# (a corrupt record, create-table, the DynamoDB-only cases) on moto in-process. The console
# script's own tests run it as a child process, where mutmut cannot see which test reached
# which function.
CLI_COMMANDS = [
    "tests/cli/test_cli.py",
    "tests/cli/test_cli_polish.py",
    "tests/cli/test_main_exits.py",
    "tests/cli/test_help.py",
    "tests/cli/test_common.py",
    "tests/cli/test_parser.py",
    "tests/cli/test_view.py",
    "tests/cli/test_watch_in_process.py",
    "tests/cli/test_create_table.py",
    "-k",
    "memory or not (moto_server or dynalite or redis or in_process or region or documented"
    " or without_ttl) or test_watch_in_process or in_process and (test_create_table or corrupt)"
    " or test_parser",
]
# Where the CLI meets AWS (cli/aws: the store's options, the client, STS, a stack's outputs):
# the in-process tests on moto, narrowed to those that open a store a different way.
CLI_AWS = [
    "tests/cli/test_aws_in_process.py",
    "tests/cli/test_store_environ.py",
    "tests/cli/test_stack_in_process.py",
    "tests/cli/test_create_table.py",
    "tests/cli/test_cli.py",
    "-k",
    "test_store_environ or test_stack_in_process or test_aws_in_process"
    " or in_process and (test_create_table or open_forces or status_of_an)",
]

# Module (under layer/fleetbreaker) -> the tests that cover it.
MODULES: dict[str, list[str]] = {
    # The rules, the window and quorum, the strategies (count.py, rate.py, and counting.py
    # they share), the census estimator, the pipeline (admission.py) and its parts (probes,
    # classify), the record view, live tuning and the strategy switch: one selection, so one
    # mutmut run and one stats pass for all of them.
    **dict.fromkeys(
        (
            "rules",
            "window",
            "admission",
            "count",
            "rate",
            "census",
            "counting",
            "view",
            "probes",
            "classify",
            "live",
            "switch",
            "tuning",
        ),
        CORE,
    ),
    # The call path: the core, both drivers and their shared types (one mutmut run).
    **dict.fromkeys(("core", "sync_driver", "async_driver", "calls"), CALL_PATH),
    # The store contract, and the memory store's own tests.
    "stores/memory": [
        "tests/contract",
        "tests/unit/test_memory_store.py",
        "-k",
        "memory and not degraded or test_memory_store",
    ],
    "config": [
        "tests/unit/test_from_env.py",
        "tests/unit/test_config_checks.py",
        "tests/unit/test_config_input.py",
        "tests/unit/test_docstrings.py",
        "tests/unit/test_tuning.py",
        *BREAKER,
    ],
    # The CLI package (cli/: main, parser, store options, views, commands).
    **{
        f"cli/{name}": CLI_COMMANDS for name in ("__init__", "common", "parser", "view", "commands")
    },
    "cli/aws": CLI_AWS,
    # The record's types and schema, the policy, the snapshot: what the rules are built on.
    # Not in the default run (ARGS names them).
    **dict.fromkeys(("record", "policy", "snapshot"), CORE),
}
# What `make mutate` runs without ARGS: the rules, the strategies, the pipeline and the
# operator's tools (issues 25 and 31 set the 85 % target for them), and the call path (issue 43).
DEFAULT = [m for m in MODULES if m not in ("record", "policy", "snapshot")]

# mutmut 3.7 reads a test's id from Node._nodeid, which pytest 9 no longer has.
PYTEST_SHIM = """

import _pytest.nodes

if not hasattr(_pytest.nodes.Node, "_nodeid"):
    _pytest.nodes.Node._nodeid = property(lambda node: node.nodeid)
"""

# A mutant whose tests run past this many times their measured time (plus 1 s) is stopped
# and counted a timeout (killed). mutmut's default, 15, let each mutant that loops `watch`
# forever (it sleeps, so no CPU limit stops it) hold the run for minutes; the tests are
# deterministic, and the stats pass measures them under the same load.
TIMEOUT_MULTIPLIER = 5

STATUSES = ("killed", "survived", "timeout", "no tests", "suspicious", "skipped", "segfault")


def selection_paths(tests: list[str]) -> list[str]:
    """The test paths of a selection: its arguments up to the first option."""
    paths = []
    for argument in tests:
        if argument.startswith("-"):
            break
        paths.append(argument)
    return paths


def missing(modules: dict[str, list[str]]) -> list[str]:
    """What ``modules`` names that is not in the working tree: a module with no file under
    layer/fleetbreaker, a test path that is gone. A moved module or test file would otherwise
    leave mutmut mutating nothing, or pytest failing the stats pass, minutes into a run."""
    problems = []
    for module, tests in modules.items():
        if not (ROOT / "layer" / "fleetbreaker" / f"{module}.py").is_file():
            problems.append(f"module {module}: no layer/fleetbreaker/{module}.py")
        for path in selection_paths(tests):
            if not (ROOT / path).exists():
                problems.append(f"module {module}: no test path {path}")
    return problems


def scratch_copy(name: str) -> Path:
    """The tracked files of the working tree, in build/mutate/<name>/, with src -> layer."""
    target = SCRATCH / name.replace("/", "-")
    shutil.rmtree(target, ignore_errors=True)
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for file in filter(None, files):
        source = ROOT / os.fsdecode(file)
        if source.is_file():
            (target / os.fsdecode(file)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / os.fsdecode(file))
    (target / "src").symlink_to("layer")
    with (target / "tests" / "conftest.py").open("a") as conftest:
        conftest.write(PYTEST_SHIM)
    return target


def configure(target: Path, modules: list[str]) -> None:
    tests = MODULES[modules[0]]
    options = ["-p", "no:cacheprovider", "-p", "no:cov", "-x", "-q"]
    paths = [f"src/fleetbreaker/{module}.py" for module in modules]
    config = (
        "\n[tool.mutmut]\n"
        'source_paths = ["src"]\n'
        f"only_mutate = {json.dumps(paths)}\n"
        f"pytest_add_cli_args = {json.dumps(options)}\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
        f"timeout_multiplier = {TIMEOUT_MULTIPLIER}\n"
    )
    with (target / "pyproject.toml").open("a") as file:
        file.write(config)


def module_of(mutant: str) -> str:
    """The module a mutant's name places it in: fleetbreaker.cli.x_main__mutmut_1 is
    cli/__init__, fleetbreaker.cli.view.x_... is cli/view."""
    dotted = mutant.split(".x_")[0].split(".xǁ")[0].removeprefix("fleetbreaker.")
    path = dotted.replace(".", "/")
    return f"{path}/__init__" if (ROOT / "layer" / "fleetbreaker" / path).is_dir() else path


def results(target: Path) -> dict[str, str]:
    shown = subprocess.run(
        [str(MUTMUT), "results", "--all", "true"],
        cwd=target,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    found = {}
    for line in shown.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if name and status in STATUSES:
            found[name] = status
    return found


def outcome_of(
    module: str, statuses: dict[str, str], seconds: float, target: Path
) -> dict[str, Any]:
    mine = {name: status for name, status in statuses.items() if module_of(name) == module}
    counts = {status: sum(1 for s in mine.values() if s == status) for status in STATUSES}
    total = len(mine)
    score = (counts["killed"] + counts["timeout"]) / total if total else 0.0
    return {
        "module": module,
        "mutants": total,
        **counts,
        "score": round(score, 3),
        "seconds": round(seconds),
        "survivors": {n: s for n, s in sorted(mine.items()) if s not in ("killed", "timeout")},
        "scratch": str(target.relative_to(ROOT)),
    }


def run(modules: list[str], children: int) -> list[dict[str, Any]]:
    """One mutmut run over ``modules`` (which share a test selection: one stats pass)."""
    target = scratch_copy("+".join(modules))
    configure(target, modules)
    began = time.monotonic()
    log = target / "mutmut.log"
    with log.open("w") as out:
        subprocess.run(
            [str(MUTMUT), "run", "--max-children", str(children)],
            cwd=target,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    seconds = time.monotonic() - began
    statuses = results(target)
    if not statuses:
        # mutmut stops before mutating when a selected test fails unmutated (its stats
        # pass): say so, rather than printing a 0 % that reads like a result.
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"mutmut produced no mutants for {'+'.join(modules)}; {log}:\n{tail}")
    return [outcome_of(module, statuses, seconds, target) for module in modules]


def groups(modules: list[str]) -> list[list[str]]:
    """``modules`` gathered by test selection, in order: each group is one mutmut run."""
    by_tests: dict[tuple[str, ...], list[str]] = {}
    for module in modules:
        by_tests.setdefault(tuple(MODULES[module]), []).append(module)
    return list(by_tests.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help=f"default: {', '.join(DEFAULT)}")
    parser.add_argument("--children", type=int, default=1, help="mutants run in parallel")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown modules {unknown}: choose from {', '.join(MODULES)}")
    problems = missing({m: MODULES[m] for m in args.modules or DEFAULT})
    if problems:
        parser.error("MODULES is out of date: " + "; ".join(problems))
    SCRATCH.mkdir(parents=True, exist_ok=True)
    summary_path = SCRATCH / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    began = time.monotonic()
    for group in groups(args.modules or DEFAULT):
        for outcome in run(group, args.children):
            summary[outcome["module"]] = outcome
            summary_path.write_text(json.dumps(summary, indent=2) + "\n")
            print(
                f"{outcome['module']:14} {outcome['mutants']:4} mutants  killed "
                f"{outcome['killed']:4}  survived {outcome['survived']:3}  timeout "
                f"{outcome['timeout']:3}  untested {outcome['no tests']:3}  score "
                f"{outcome['score']:.1%}  ({outcome['seconds']} s for {'+'.join(group)})",
                flush=True,
            )
            for name, status in outcome["survivors"].items():
                print(f"    {status:9} {name}")
    load = os.getloadavg()
    print(
        f"total {time.monotonic() - began:.0f} s, load average now"
        f" {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (1, 5, 15 min)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
