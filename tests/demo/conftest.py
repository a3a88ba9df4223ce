"""One short run of `make demo`'s demo, shared by the tests that read its results."""

from __future__ import annotations

import io
from dataclasses import dataclass, replace

import pytest

from bench.demo.report import Run
from bench.demo.runner import DemoResult, run_demo
from bench.demo.scenario import SHORT, Options


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


@pytest.fixture(scope="package")
def short_demo(tmp_path_factory: pytest.TempPathFactory) -> ShortDemo:
    """The demo's short mode (8 containers, 2.5 s outage), run once: about 15 s."""
    options = replace(SHORT, output=tmp_path_factory.mktemp("demo-output"))
    out = io.StringIO()
    result = run_demo(options, out=out)
    return ShortDemo(options, result, out.getvalue())
