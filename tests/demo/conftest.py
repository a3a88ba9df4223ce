"""One short run of `make demo`'s demo, shared by the tests that read its results."""

from __future__ import annotations

import io
import subprocess
import sys
from dataclasses import dataclass, replace

import pytest

from bench.demo.report import Run
from bench.demo.runner import DemoResult, run_demo
from bench.demo.scenario import SHORT, Options
from devtools.servers import untraced_env
from tests.coverage_scope import children_unmeasured, untraced

# The rate-policy demo's runs: the shared rate breaker and the shared count breaker.
RATE, COUNT = "shared", "shared-count"
# Spins one core until killed.
BUSY_LOOP = "while True: pass"


@dataclass(frozen=True)
class ShortDemo:
    options: Options
    result: DemoResult
    output: str  # what the demo printed (not a terminal: plain lines)

    def run(self, label: str) -> Run:
        return next(run for run in self.result.runs if run.record.label == label)

    @property
    def shared(self) -> Run:
        return self.run("shared")

    @property
    def per_container(self) -> Run:
        return self.run("per-container")


def demo(options: Options, out: io.StringIO) -> DemoResult:
    """``run_demo(options)``, unmeasured by coverage: the demo (bench/, not measured) with its
    tracer off, and its containers, consumer and store processes started without coverage.
    The breaker code they run is what the other suites cover; measured, the short demo took
    65 s of CPU instead of 53 s (busy loop included)."""
    with children_unmeasured():
        result: DemoResult = untraced(run_demo)(options, out=out)
    return result


@pytest.fixture(scope="package")
def short_demo(tmp_path_factory: pytest.TempPathFactory) -> ShortDemo:
    """The demo's short mode (8 containers, 3 s healthy, 2.5 s outage), run once: 32 s idle,
    up to a few minutes on a loaded 2-core machine.

    It runs beside a process keeping one core busy (tests/demo/test_demo_busy.py): what the
    tests read from it are fleet-wide counts, which hold on a loaded machine too. The busy
    loop is stopped by its PID. Unmeasured by coverage (:func:`demo`).
    """
    options = replace(SHORT, output=tmp_path_factory.mktemp("demo-output"))
    out = io.StringIO()
    busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP], env=untraced_env())
    try:
        result = demo(options, out)
        assert busy.poll() is None, "the busy loop stopped before the demo ended"
    finally:
        busy.kill()
        busy.wait()
    return ShortDemo(options, result, out.getvalue())


@pytest.fixture(scope="package")
def noisy_demo(tmp_path_factory: pytest.TempPathFactory) -> ShortDemo:
    """`--short --policy rate --noise 0.02`, run once (about as long as the short demo).

    On the shared MemoryStore and rejecting while open: neither moto nor SQS to start, and no
    store timeout on a busy machine can put the fleet on local state (a container's local
    rate breaker never sees minimum_calls of its own) and void what is asserted.
    """
    options = replace(
        SHORT,
        policy="rate",
        noise=0.02,
        store="memory",
        fallback="reject",
        output=tmp_path_factory.mktemp("noisy-demo-output"),
    )
    out = io.StringIO()
    result = demo(options, out)
    return ShortDemo(options, result, out.getvalue())
