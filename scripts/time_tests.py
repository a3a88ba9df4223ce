"""`make time-tests`: time `make test`'s pytest run, as docs/testing.md ("Speed") records it.

Runs the pytest command of `make test` (its workers, coverage and markers; not its install
and lint steps) once or more, and prints for each run the wall time, the CPU time it used (its
processes and those they waited for), the load average seen while it ran (sampled every
5 s) and pytest's closing line; then the slowest tests of the
last run. With ``--busy`` a loop spinning one core (`while :; do :; done`) runs beside each
run, as the issue's "busy machine" figure asks; it is stopped by its PID when the run ends.

    .venv/bin/python scripts/time_tests.py [--runs N] [--busy] [--slowest N] [-- PYTEST_ARGS]

Every run's full output is kept in build/time-tests/run-N.log. Exit status: 0 when every
run passed, else 1.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "build" / "time-tests"
# make's set-up targets and its lint are taken as done: the run times pytest alone.
MAKE = [
    "make",
    "-o",
    "deps",
    "-o",
    "venv",
    "-o",
    "node",
    "-o",
    "redis",
    "-o",
    "tools",
    "-o",
    "lint",
]
CLOSING = re.compile(r"^=+ (.*\b(?:passed|failed|error)\b.*) in ([\d.]+)s", re.M)


class LoadSampler:
    """The 1-minute load average, read every ``every`` seconds until stopped."""

    def __init__(self, every: float = 5.0) -> None:
        self.every = every
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(self.every)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> str:
        if not self.samples:
            return "load n/a"
        return (
            f"load {min(self.samples):.1f} to {max(self.samples):.1f}, "
            f"mean {statistics.fmean(self.samples):.1f}"
        )


def in_the_foreground() -> None:
    """preexec_fn: SIGINT at its default, as in a terminal's foreground job, also when this
    script was started in the background (where the shell left SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# Looked up here, not in the forked child, where loading a library is unsafe.
_prctl: Any = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
_PR_SET_PDEATHSIG = 1


def _loop_dies_with_this_script() -> None:
    """preexec_fn: the kernel kills the loop when this script ends, however it ends (Linux)."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def busy_loop() -> subprocess.Popen[bytes]:
    """`while :; do :; done &`, as a shell runs it: a process group of its own (a background
    job's), in the session of the run it sits beside.

    The session matters on Linux: with autogroup scheduling on (the default, and this
    machine's), the scheduler shares the cores between sessions first, so a loop started in
    a session of its own (another terminal) holds a whole core of two however many processes
    the suite runs; in the same session it is one runnable process among the suite's.
    """
    return subprocess.Popen(
        ["bash", "-c", "while :; do :; done"],
        process_group=0,
        preexec_fn=_loop_dies_with_this_script,
    )


def run_once(number: int, pytest_args: list[str], slowest: int, busy: bool) -> tuple[bool, str]:
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"run-{number}.log"
    args = [*pytest_args, f"--durations={slowest}", "--durations-min=0"]
    command = [*MAKE, "test", f"PYTEST_ARGS={shlex.join(args)}"]
    spinner = busy_loop() if busy else None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    try:
        with LoadSampler() as load, log.open("w") as out:
            done = subprocess.run(
                command,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=in_the_foreground,
            )
        seconds = time.monotonic() - began
        # CPU time of make, pytest and every process they waited for (servers, children):
        # what the run costs whatever else the machine does (read before the busy loop is
        # reaped, which would add its own).
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        if spinner is not None:
            os.killpg(spinner.pid, signal.SIGKILL)
            spinner.wait()
    cpu = sum(getattr(after, f) - getattr(before, f) for f in ("ru_utime", "ru_stime"))
    text = log.read_text(errors="replace")
    closing = CLOSING.findall(text)
    outcome, pytest_seconds = closing[-1] if closing else ("no closing line", "nan")
    line = (
        f"run {number}: pytest {as_minutes(float(pytest_seconds))} ({outcome}), "
        f"make {seconds:.0f} s, CPU {cpu:.0f} s, {load.summary()}"
        f"{', beside a busy loop' if busy else ''}, "
        f"exit {done.returncode}; log {log.relative_to(ROOT)}"
    )
    return done.returncode == 0, line


def as_minutes(seconds: float) -> str:
    """419.6 -> "7 min 0 s": rounded to the second before it is split, never "6 min 60 s"."""
    if seconds != seconds:  # no closing line: pytest_seconds was "nan"
        return "? min ? s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


def slowest_of(log: Path) -> list[str]:
    text = log.read_text(errors="replace")
    block = text.split("slowest ", 1)[-1].split("\n=", 1)[0]
    return [line for line in block.splitlines()[1:] if re.match(r"^\d+\.\d+s ", line)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--busy", action="store_true", help="a loop spinning one core beside")
    parser.add_argument("--slowest", type=int, default=25, help="durations listed (0: all)")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    print(f"cores: {os.cpu_count()}, load before: {os.getloadavg()[0]:.1f}", flush=True)
    ok = True
    for number in range(1, args.runs + 1):
        passed, line = run_once(number, args.pytest_args, args.slowest, args.busy)
        ok = ok and passed
        print(line, flush=True)
    print(f"\nslowest of run {args.runs}:")
    for line in slowest_of(LOGS / f"run-{args.runs}.log"):
        print(f"  {line}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
