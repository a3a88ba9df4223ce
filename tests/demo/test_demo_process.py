"""`python -m bench.demo` as a process: its options, and Ctrl-C stopping everything it started."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench.demo import __main__ as demo_main
from bench.demo import runner
from bench.demo.__main__ import BAD_OPTIONS, INTERRUPTED, main, options_from
from bench.demo.fleet import FleetError
from bench.demo.results import RESULTS
from bench.demo.runner import FAILED, DemoResult
from bench.demo.scenario import DEFAULT, SHORT
from devtools.servers import REPO_ROOT, untraced_env

pytestmark = pytest.mark.realtime  # the demo as a process: Ctrl-C, SIGKILL, real time


def children_of(pid: int) -> set[int]:
    """Every living descendant of ``pid``, from /proc (Linux)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def refuses(url: str) -> bool:
    host, port = re.sub(r"^http://", "", url).split("/")[0].split(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return True
    return False


def test_short_preset_and_explicit_options() -> None:
    # Options given on the command line override the preset; the rest is the preset's
    assert options_from([]) == DEFAULT
    assert options_from(["--short"]) == SHORT
    options = options_from(["--short", "--containers", "3", "--store", "memory"])
    assert (options.containers, options.store, options.outage) == (3, "memory", SHORT.outage)


@pytest.mark.parametrize(
    "argv",
    [
        ["--containers", "0"],
        ["--probes", "17"],
        ["--outage", "-1"],
        ["--noise", "0.5"],
        ["--failure-rate", "0"],
        ["--minimum-calls", "0"],
        ["--window", "0"],
    ],
)
def test_bad_options_exit_2_before_starting_anything(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == BAD_OPTIONS
    assert capsys.readouterr().err.startswith("demo: --")


@pytest.mark.parametrize(
    ("checks", "code"),
    [([(True, "held"), (None, "a finding")], 0), ([(True, "held"), (False, "broken")], FAILED)],
)
def test_the_exit_code_is_0_exactly_when_every_guarantee_held(
    checks: list[tuple[bool | None, str]], code: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a run whose guarantees held (a finding, None, is none) or one where one did not
    result = DemoResult(
        [], Path("chart.png"), Path("summary.md"), checks, 1.0, Path("fleet-demo.json")
    )
    monkeypatch.setattr(demo_main, "run_demo", lambda options: result)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # THEN `python -m bench.demo` exits with what they say (tests/demo/test_demo_busy.py
        # reads the shared run's guarantees_held as this exit code)
        assert main(["--short"]) == code
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def test_a_demo_that_fails_leaves_no_earlier_results_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an earlier demo's fleet-demo.json in the output directory, and a demo whose
    # local servers fail to start
    stale = tmp_path / RESULTS
    stale.write_text('{"benchmark": "demo"}')

    @contextlib.contextmanager
    def no_servers(options: Any, out: Any) -> Iterator[Any]:
        raise FleetError("moto did not start")
        yield

    monkeypatch.setattr(runner, "backends", no_servers)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # WHEN it runs into that directory
        code = main(["--short", "--store", "memory", "--output", str(tmp_path)])
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)

    # THEN it fails, and the earlier results are gone: none can be folded as this run's
    assert code == FAILED
    assert "demo failed: moto did not start" in capsys.readouterr().err
    assert not stale.exists()


def test_the_rate_policy_reaches_the_functions_environment() -> None:
    # GIVEN --policy rate and its settings on the command line
    options = options_from(
        ["--short", "--policy", "rate", "--failure-rate", "0.4", "--minimum-calls", "30"]
    )

    # THEN the function's environment carries them, as the template's parameters would
    env = options.function_env()
    assert env["BREAKER_FAILURE_RATE_THRESHOLD"] == "0.4"
    assert env["BREAKER_MINIMUM_CALLS"] == "30"
    assert env["BREAKER_WINDOW_SECONDS"] == str(SHORT.window)
    # AND the count run of the same demo gets the count policy, as today's demo does
    count = options.function_env("count")
    assert count == options_from(["--short"]).function_env()
    assert "BREAKER_FAILURE_RATE_THRESHOLD" not in count


# Ctrl-C stops each container as it stops any other: two show it as well as the short
# preset's eight, whose start (each container a fresh interpreter importing the payment
# function) was most of this test's CPU.
CTRL_C_CONTAINERS = 2


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="reads the process tree from /proc")
def test_ctrl_c_stops_every_server_and_container(tmp_path: Path) -> None:
    # GIVEN the demo running in a terminal of its own (its own process group), in its first run
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.demo",
            "--short",
            "--containers",
            str(CTRL_C_CONTAINERS),
            "--output",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        env=untraced_env(),  # the demo's processes, not the breaker's lines, are tested here
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert demo.stdout is not None
    printed: list[str] = []
    try:
        for line in demo.stdout:
            printed.append(line)
            if re.match(r"\s+1s  ", line):
                break
        else:
            pytest.fail(f"the demo ended before its first run:\n{''.join(printed)}")
        started = children_of(demo.pid)
        urls = re.findall(r"at (http://127\.0\.0\.1:\d+)", "".join(printed))

        # WHEN Ctrl-C reaches the whole foreground process group, as a terminal sends it
        os.killpg(demo.pid, signal.SIGINT)
        rest, _ = demo.communicate(timeout=30)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()

    # THEN the demo says so and exits 130, without a traceback
    assert demo.returncode == INTERRUPTED, rest
    assert "interrupted: every server and container has been stopped" in rest
    assert "Traceback" not in rest
    # AND the moto server, the container processes and the payment API are gone
    assert len(started) >= CTRL_C_CONTAINERS + 1, "containers and moto were running"
    deadline = time.monotonic() + 5  # multiprocessing's resource tracker exits on its own
    while (left := {pid for pid in started if alive(pid)}) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"still running after the demo ended: {sorted(left)}"
    assert len(urls) == 2, printed
    for url in urls:
        assert refuses(url), f"{url} still answers"


def test_the_ramp_option_reaches_the_function() -> None:
    # GIVEN --ramp on the command line, THEN the function gets the breaker's ramp variable,
    # and without it the ramp is off
    assert options_from(["--ramp", "3"]).function_env()["BREAKER_RECOVERY_RAMP_SECONDS"] == "3.0"
    assert options_from([]).function_env()["BREAKER_RECOVERY_RAMP_SECONDS"] == "0.0"
    assert main(["--ramp", "-1"]) == BAD_OPTIONS


def test_mode_shadow_runs_a_shadow_fleet_beside_the_enforcing_one() -> None:
    from bench.demo.runner import SHADOW, SHARED, Backends, function_env, plans
    from bench.demo.stores import StoreSpec

    # GIVEN --mode shadow on the command line
    options = options_from(["--short", "--mode", "shadow"])
    # THEN the demo runs the shared breaker, then the same shared breaker in shadow mode
    runs = plans(options)
    assert [(p.label, p.shared, p.mode) for p in runs] == [
        (SHARED, True, "enforce"),
        (SHADOW, True, "shadow"),
    ]
    # AND the shadow run's function gets BREAKER_MODE=shadow, on a record of its own
    api: Any = SimpleNamespace(url="http://127.0.0.1:9/charges")
    found = Backends(api=api, shared_store=StoreSpec("dynamodb"), endpoint_url=None, queues=None)
    envs = [function_env(options, found, plan) for plan in runs]
    assert [env["BREAKER_MODE"] for env in envs] == ["enforce", "shadow"]
    assert envs[0]["BREAKER_NAME"] != envs[1]["BREAKER_NAME"]
    # AND an unknown mode is refused (a usage error, exit 2) before anything starts
    with pytest.raises(SystemExit) as refused:
        main(["--mode", "observe"])
    assert refused.value.code == BAD_OPTIONS


@pytest.mark.parametrize(
    ("argv", "deadline", "why"),
    [
        ([], "10.0", "moto's server applies one write at a time"),
        (["--store", "memory"], "10.0", "one manager process answers every container"),
        (["--store", "redis"], "1.0", "the function's default"),
        (["--store-deadline", "3"], "3.0", "--store-deadline"),
    ],
)
def test_the_store_deadline_reaches_the_function_and_the_output(
    argv: list[str], deadline: str, why: str
) -> None:
    # GIVEN a store on the command line (or a deadline), THEN the function gets that
    # deadline, and the demo's opening line says what it is and why
    options = options_from(argv)
    assert options.function_env()["BREAKER_STORE_DEADLINE_SECONDS"] == deadline
    assert f"store deadline {float(deadline):g} s" in options.describe()
    assert why in options.describe()


def test_the_emulated_dynamodb_client_waits_as_long_as_the_deadline() -> None:
    # GIVEN the shared DynamoDB store of a demo with a raised deadline
    from bench.demo.stores import StoreSpec

    store = StoreSpec("dynamodb", "http://127.0.0.1:9", "CircuitBreakers", deadline=10.0).build()

    # THEN its client's two attempts fit in the deadline, well past the 0.3 s default
    client = store.client  # type: ignore[attr-defined]
    assert client.meta.config.read_timeout == 5.0
    assert main(["--store-deadline", "0"]) == BAD_OPTIONS
