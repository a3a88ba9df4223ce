"""`make demo` writes its comparison to fleet-demo.json: what it printed, as measured.

bench/demo_runs.py folds these files into bench/results/demo_runs.json, which the docs quote:
the JSON must hold the table the demo printed, row for row, and how the demo ran.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from typing import Any

import pytest

from bench.demo.results import RESULTS, options_dict
from tests.demo.conftest import ShortDemo

pytestmark = pytest.mark.realtime  # the demo runs on the wall clock


def printed_table(output: str) -> list[list[str]]:
    """The comparison the demo printed: its lines' cells, the header first."""
    lines = [line for line in output.splitlines() if line.startswith("| ")]
    rows = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]
    assert rows, output[-2000:]
    return rows


def written(short_demo: ShortDemo) -> dict[str, Any]:
    path = short_demo.result.results
    assert path == short_demo.options.output / RESULTS
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def test_the_json_holds_the_rows_the_demo_printed(short_demo: ShortDemo) -> None:
    # GIVEN the short demo's printed comparison and the fleet-demo.json it wrote
    header, *printed = printed_table(short_demo.output)
    doc = written(short_demo)
    runs, table = doc["runs"], doc["table"]
    labels = [run["label"] for run in runs]

    # THEN its runs are the printed columns, and its rows the printed rows, cell for cell
    assert [run["title"] for run in runs] == header[1:]
    assert [[row["figure"], *(row["printed"][label] for label in labels)] for row in table] == (
        printed
    )
    # AND each value is the measurement the cell shows
    values = {row["key"]: row["values"] for row in table}
    for label in labels:
        summary = short_demo.run(label).summary
        assert values["failing_calls"][label] == summary.failing_calls
        assert values["failed_probes"][label] == summary.failed_probes
        assert values["probes_at_recovery"][label] == summary.probes_at_recovery
        assert values["probes_per_window"][label] == list(summary.probes_per_window)
        assert values["recovery_to_closed"][label] == summary.recovery_to_closed
    cells = {row[0]: dict(zip(labels, row[1:], strict=True)) for row in printed}
    rows = {row["key"]: row["figure"] for row in table}
    for label in labels:
        windows = values["probes_per_window"][label]
        assert cells[rows["probes_per_window"]][label] == f"{len(windows)} × {windows[0]}"
        closed = values["recovery_to_closed"][label]
        assert cells[rows["recovery_to_closed"]][label] == f"{closed:.1f} s"
        assert cells[rows["failing_calls"]][label] == str(values["failing_calls"][label])
    # AND the shared run's store requests are counted; the per-container run made none
    assert values["store_requests"] == {
        "shared": short_demo.shared.summary.store_requests,
        "per-container": None,
    }
    assert cells[rows["store_requests"]]["per-container"] == "0 (in-process)"


def test_the_json_says_when_where_and_how_the_demo_ran(short_demo: ShortDemo) -> None:
    # GIVEN the fleet-demo.json of the short demo, which held its guarantees
    doc = written(short_demo)

    # THEN it records its exit code, duration, options, cores and load average
    assert doc["exit_code"] == short_demo.result.exit_code == 0
    assert doc["seconds"] == round(short_demo.result.seconds, 1)
    assert doc["options"] == options_dict(short_demo.options)
    assert doc["defaults"] is False  # --short is not `make demo`'s defaults
    assert doc["cpu_count"] == os.cpu_count()
    for key in ("loadavg_at_start", "loadavg_at_end"):
        load = doc[key]
        assert len(load) == 3
        assert min(load) >= 0
    started = datetime.fromisoformat(str(doc["date_utc"]))
    assert started <= datetime.now(timezone.utc)
    # AND the guarantees it printed, with whether each held
    assert [(g["held"], g["sentence"]) for g in doc["guarantees"]] == short_demo.result.checks
    # AND the demo said where it wrote it, with the load and the exit code
    assert f"results: {short_demo.result.results}" in short_demo.output
    assert "; exit 0)" in short_demo.output
