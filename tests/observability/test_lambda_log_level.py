"""What a breaker's logs look like under the Lambda Python runtime's own logging set-up.

The runtime (awslambdaric, the bootstrap every managed Python runtime runs) puts one handler on
the root logger and sets the root's level only from ``AWS_LAMBDA_LOG_LEVEL``, which Lambda sets
when a function chooses a log level (JSON log format, or "advanced logging controls"). A
function with the default text format and no level keeps Python's default: WARNING. So a
transition to open, forced_open or disabled must log at WARNING to be seen at all, and a close
at INFO stays out of the way.

Each test runs a fresh interpreter that calls the runtime's own ``init_logging()`` (what
``bootstrap.run`` does before importing the handler), then drives a breaker through every
transition on a MemoryStore with a hand-moved clock, and reads what the runtime wrote to stdout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

LAYER = Path(__file__).resolve().parents[2] / "layer"

LIFECYCLE = """
from awslambdaric import bootstrap

bootstrap.init_logging()

from fleetbreaker import BreakerConfig, CircuitBreaker, MemoryStore

now = [1_800_000_000_000]
breaker = CircuitBreaker(
    "payment-api",
    store=MemoryStore(),
    config=BreakerConfig(failure_threshold=2, recovery_timeout=10, recovery_jitter=0.0),
    clock=lambda: now[0],
)


def fail():
    raise RuntimeError("dependency down")


for _ in range(2):  # closed -> open
    try:
        breaker.call(fail)
    except RuntimeError:
        pass
now[0] += 11_000
breaker.call(lambda: "ok")  # open -> half_open (the probe's claim), half_open -> closed
breaker.force_open()  # closed -> forced_open
breaker.disable()  # forced_open -> disabled
breaker.reset()  # disabled -> closed
"""

TRANSITIONS = [
    ("closed", "open"),
    ("open", "half_open"),
    ("half_open", "closed"),
    ("closed", "forced_open"),
    ("forced_open", "disabled"),
    ("disabled", "closed"),
]


def run_lifecycle(**lambda_env: str) -> str:
    """stdout of a fresh interpreter logging through the runtime's set-up, with ``lambda_env``."""
    env = {"PYTHONPATH": str(LAYER), "PATH": "/usr/bin:/bin", **lambda_env}
    done = subprocess.run(
        [sys.executable, "-c", LIFECYCLE],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def transition_lines(output: str) -> dict[tuple[str, str], str]:
    """Each logged transition (from, to) -> the line the runtime wrote for it."""
    found: dict[tuple[str, str], str] = {}
    for line in output.splitlines():
        for before, after in TRANSITIONS:
            if f"circuit payment-api: {before} -> {after}" in line:
                found[(before, after)] = line
    return found


def test_default_text_format_shows_open_forced_open_and_disabled_only() -> None:
    # GIVEN the runtime's default: text format, no AWS_LAMBDA_LOG_LEVEL (root stays WARNING)
    # WHEN a breaker opens, recovers, is forced open, disabled and reset
    lines = transition_lines(run_lifecycle())
    # THEN the transitions that turn calls away or stop protecting them are there, as WARNING
    assert set(lines) == {
        ("closed", "open"),
        ("closed", "forced_open"),
        ("forced_open", "disabled"),
    }
    for line in lines.values():
        assert line.startswith("[WARNING]\t")


def test_a_function_at_info_level_sees_the_closes_too_at_info() -> None:
    # GIVEN a function that chose JSON logs at INFO (advanced logging controls)
    output = run_lifecycle(AWS_LAMBDA_LOG_FORMAT="JSON", AWS_LAMBDA_LOG_LEVEL="INFO")
    # WHEN every transition happens THEN each is one JSON line, at its level
    levels = {
        transition: json.loads(line)["level"]
        for transition, line in transition_lines(output).items()
    }
    assert levels == {
        ("closed", "open"): "WARNING",
        ("open", "half_open"): "INFO",
        ("half_open", "closed"): "INFO",
        ("closed", "forced_open"): "WARNING",
        ("forced_open", "disabled"): "WARNING",
        ("disabled", "closed"): "INFO",
    }


DEGRADED = """
from awslambdaric import bootstrap

bootstrap.init_logging()

from fleetbreaker import CircuitBreaker, MemoryStore, StoreError


class UnreachableStore(MemoryStore):
    def load(self, name, now_ms):
        raise StoreError("connect timeout")


CircuitBreaker("payment-api", store=UnreachableStore()).call(lambda: "ok")
"""


def test_default_text_format_shows_degraded_mode() -> None:
    # GIVEN the runtime's default logging WHEN the store cannot be reached
    env = {"PYTHONPATH": str(LAYER), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", DEGRADED], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # THEN the switch to local state is in the function's log, as WARNING
    (line,) = [line for line in done.stdout.splitlines() if "running on local state" in line]
    assert line.startswith("[WARNING]\t")
