"""The demo's results as JSON (``fleet-demo.json``): the comparison it printed, machine-readable.

One file per demo, beside the chart and the markdown summary: the table's rows (each value as
measured, with the text the table printed for it), each run's whole summary, the guarantees
checked, and the conditions it ran in (date, cores, load average, duration, exit code).
``bench/demo_runs.py`` folds several of them into ``bench/results/demo_runs.json``, which the
docs quote (``make figures``).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.demo.report import rows
from bench.demo.scenario import DEFAULT

if TYPE_CHECKING:
    from bench.demo.report import Run
    from bench.demo.scenario import Options

RESULTS = "fleet-demo.json"
BENCHMARK = "demo"
# Bumped when a key a reader relies on changes: bench/demo_runs.py refuses other formats.
FORMAT = 1


@dataclass(frozen=True)
class Conditions:
    """When and where a demo ran: taken at its start, completed at its end."""

    date_utc: str
    commit: str | None  # the checkout's HEAD; None outside a git checkout
    cpu_count: int | None
    loadavg_at_start: tuple[float, float, float]
    loadavg_at_end: tuple[float, float, float] = (0.0, 0.0, 0.0)
    seconds: float = 0.0

    @classmethod
    def now(cls) -> Conditions:
        return cls(
            datetime.now(timezone.utc).isoformat(timespec="seconds"),
            _commit(),
            os.cpu_count(),
            _load(),
        )

    def ended(self, seconds: float) -> Conditions:
        return replace(self, loadavg_at_end=_load(), seconds=round(seconds, 1))


def _commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def _load() -> tuple[float, float, float]:
    one, five, fifteen = (round(x, 2) for x in os.getloadavg())
    return one, five, fifteen


def options_dict(options: Options) -> dict[str, Any]:
    """The options, as JSON: every field but where the output went."""
    return {
        field.name: getattr(options, field.name)
        for field in fields(options)
        if field.name != "output"
    }


def document(
    options: Options,
    runs: list[Run],
    checks: list[tuple[bool | None, str]],
    conditions: Conditions,
    exit_code: int,
) -> dict[str, Any]:
    """What ``fleet-demo.json`` holds."""
    labels = [run.record.label for run in runs]
    chosen = options_dict(options)
    return {
        "benchmark": BENCHMARK,
        "format": FORMAT,
        "date_utc": conditions.date_utc,
        "commit": conditions.commit,
        "cpu_count": conditions.cpu_count,
        "loadavg_at_start": list(conditions.loadavg_at_start),
        "loadavg_at_end": list(conditions.loadavg_at_end),
        "seconds": conditions.seconds,
        "exit_code": exit_code,
        "options": chosen,
        "defaults": chosen == options_dict(DEFAULT),
        "runs": [
            {
                "label": run.record.label,
                "title": run.record.title,
                "store": run.record.store,
                "shared": run.record.shared,
                "policy": run.record.policy,
                "seconds": run.record.duration,
                "summary": asdict(run.summary),
            }
            for run in runs
        ],
        "table": [
            {
                "figure": row.figure,
                "key": row.key,
                "values": dict(zip(labels, row.values, strict=True)),
                "printed": dict(zip(labels, row.cells, strict=True)),
            }
            for row in rows(runs)
        ],
        "guarantees": [{"held": held, "sentence": sentence} for held, sentence in checks],
    }


def write(document: dict[str, Any], output: Path) -> Path:
    """``fleet-demo.json`` in ``output``; returns its path."""
    path = output / RESULTS
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    return path
