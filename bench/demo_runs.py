"""Fold several runs of `make demo` into bench/results/demo_runs.json: min and max per row.

    for n in 1 2 3; do make demo ARGS="--output demo-output/runs/run-$n"; done
    .venv/bin/python bench/demo_runs.py demo-output/runs/*/fleet-demo.json
    make figures

Each `make demo` writes its comparison to fleet-demo.json in its output directory
(bench/demo/results.py). This reads those files, checks that they are the demo's, of one
comparison (the shared breaker against per-container breakers) and one set of options, each
run once, and writes the range each row of the comparison took over the runs, with when,
where and how each run ran (date, commit, cores, load average, seconds, exit code).
docs/benchmarks.md quotes the result through bench/figures.py (`make figures`).

What it trusts: each file is what the demo wrote. A file that is not (another benchmark's,
another format, a row missing or of the wrong kind, the same run twice, other options than
the rest, another machine's core count) is refused by name, and nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from bench.demo.results import BENCHMARK, FORMAT
from bench.demo.scenario import Options

REPO_ROOT = Path(__file__).resolve().parent.parent
OUTPUT = REPO_ROOT / "bench" / "results" / "demo_runs.json"
# The two runs the docs' table compares: the demo's labels, and their keys in demo_runs.json.
SIDES = {"shared": "shared", "per-container": "per_container"}
# The rows the docs' table shows, in its order (keys of the demo's JSON table).
ROWS = (
    "failing_calls",
    "failed_probes",
    "probes_at_recovery",
    "probes_per_window",
    "recovery_to_closed",
    "store_requests",
)
# Rows whose value may be None in a run: the fleet never closed; breakers kept in process.
NOT_CLOSED, IN_PROCESS = "recovery_to_closed", "store_requests"


class DemoRunsError(ValueError):
    """A file is not a run of the demo that can be folded with the others."""


Run = dict[str, Any]


def load(path: Path) -> Run:
    """One demo's fleet-demo.json, checked to be the demo's and of the count comparison."""
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise DemoRunsError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
    except json.JSONDecodeError as exc:
        raise DemoRunsError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("benchmark") != BENCHMARK:
        raise DemoRunsError(f'{path}: not a demo\'s results (no "benchmark": "{BENCHMARK}")')
    if doc.get("format") != FORMAT:
        raise DemoRunsError(
            f"{path}: format {doc.get('format')!r}, this script reads format {FORMAT} "
            "(rerun the demo)"
        )
    labels = [run.get("label") for run in doc.get("runs", [])]
    if labels != list(SIDES):
        raise DemoRunsError(
            f"{path}: its runs are {labels}; demo_runs.json holds the comparison of "
            f"{' and '.join(SIDES)} (`make demo` with --policy count and --mode enforce)"
        )
    for key in ("date_utc", "cpu_count", "loadavg_at_start", "loadavg_at_end", "seconds"):
        if key not in doc:
            raise DemoRunsError(f"{path}: no {key!r}")
    if not isinstance(doc.get("exit_code"), int):
        raise DemoRunsError(f"{path}: no exit code")
    _check_options(path, doc.get("options"))
    table = {row.get("key"): row for row in doc.get("table", [])}
    for key in ROWS:
        if key not in table:
            raise DemoRunsError(f"{path}: no row {key!r} in its table")
        for label in SIDES:
            _check_value(path, key, table[key].get("values", {}).get(label, "absent"), label)
    return doc


def _check_options(path: Path, options: object) -> None:
    names = {field.name for field in fields(Options)} - {"output"}
    if not isinstance(options, dict) or set(options) != names:
        raise DemoRunsError(f"{path}: its options are not the demo's ({sorted(names)})")


def _check_value(path: Path, key: str, value: object, label: str) -> None:
    where = f"{path}: row {key!r} of the {label} run"
    if key == "probes_per_window":
        if not isinstance(value, list) or not all(_is_count(v) for v in value):
            raise DemoRunsError(f"{where} is {value!r}, not a list of probe counts")
    elif value is None:
        if key == NOT_CLOSED or (key == IN_PROCESS and label == "per-container"):
            return
        raise DemoRunsError(f"{where} is empty")
    elif key == NOT_CLOSED:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise DemoRunsError(f"{where} is {value!r}, not seconds")
    elif not _is_count(value):
        raise DemoRunsError(f"{where} is {value!r}, not a count")


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _span(values: Sequence[float]) -> list[float] | None:
    return [min(values), max(values)] if values else None


def fold(docs: Sequence[Run], names: Sequence[str] | None = None) -> dict[str, Any]:
    """demo_runs.json from the runs' documents (``names`` name them in errors)."""
    if not docs:
        raise DemoRunsError("no run to fold")
    names = list(names) if names is not None else [f"run {n + 1}" for n in range(len(docs))]
    first, first_name = docs[0], names[0]
    seen: dict[tuple[str, float], str] = {}
    for doc, name in zip(docs, names, strict=True):
        for option, value in doc["options"].items():
            if first["options"][option] != value:
                raise DemoRunsError(
                    f"{name}: --{option.replace('_', '-')} {value!r}, {first_name} ran with "
                    f"{first['options'][option]!r}: fold runs of one set of options"
                )
        if doc["cpu_count"] != first["cpu_count"]:
            raise DemoRunsError(
                f"{name}: {doc['cpu_count']} cores, {first_name} ran on {first['cpu_count']}: "
                "fold runs of one machine"
            )
        stamp = (doc["date_utc"], doc["seconds"])
        if stamp in seen:
            raise DemoRunsError(f"{name} and {seen[stamp]} are the same run (fold each once)")
        seen[stamp] = name
    ordered = sorted(docs, key=lambda doc: str(doc["date_utc"]))
    tables = [{row["key"]: row for row in doc["table"]} for doc in ordered]
    rows = [_fold_row(key, tables) for key in ROWS]
    options = Options(**first["options"])
    defaults = bool(first.get("defaults"))
    dates = sorted({str(doc["date_utc"])[:10] for doc in ordered})
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    return {
        "benchmark": "demo_runs",
        "note": (
            f"{_runs(len(ordered))} of `make demo` ("
            + ("its defaults" if defaults else "not its defaults")
            + f": {options.describe()}), {when} UTC. Each run wrote its comparison to "
            "fleet-demo.json; bench/demo_runs.py folded them into min and max per row."
        ),
        "defaults": defaults,
        "options": first["options"],
        "date_utc": [str(ordered[0]["date_utc"]), str(ordered[-1]["date_utc"])],
        "cpu_count": first["cpu_count"],
        "runs": [
            {
                "date_utc": doc["date_utc"],
                "commit": doc.get("commit"),
                "seconds": doc["seconds"],
                "exit_code": doc["exit_code"],
                "loadavg_at_start": doc["loadavg_at_start"],
                "loadavg_at_end": doc["loadavg_at_end"],
                "values": {
                    key: {
                        SIDES[label]: _run_value(key, table[key]["values"][label])
                        for label in SIDES
                    }
                    for key in ROWS
                },
            }
            for doc, table in zip(ordered, tables, strict=True)
        ],
        "rows": rows,
    }


def _run_value(key: str, value: Any) -> Any:
    """One run's value of a row, as demo_runs.json records it: half-open windows as their
    count and the range of probes admitted in each (a per-container fleet has 32)."""
    if key == "probes_per_window":
        return {"windows": len(value), "probes_each": _span(value)}
    return value


def _runs(count: int) -> str:
    return "1 run" if count == 1 else f"{count} runs"


def _fold_row(key: str, tables: Sequence[dict[str, Any]]) -> dict[str, Any]:
    figures = {table[key]["figure"] for table in tables}
    if len(figures) != 1:
        raise DemoRunsError(f"row {key!r} is named differently across the runs: {figures}")
    row: dict[str, Any] = {"figure": figures.pop(), "key": key}
    for label, side in SIDES.items():
        values = [table[key]["values"][label] for table in tables]
        if key == "probes_per_window":
            row[side] = _span([len(windows) for windows in values])
            row.setdefault("probes_each", {})[side] = _span(
                [probes for windows in values for probes in windows]
            )
        elif key == NOT_CLOSED:
            row[side] = _span([v for v in values if v is not None])
            row.setdefault("not_closed", {})[side] = sum(v is None for v in values)
        elif key == IN_PROCESS and all(v is None for v in values):
            row[side] = None
            row[f"{side}_note"] = "in-process"
        elif any(v is None for v in values):
            raise DemoRunsError(f"row {key!r} of the {label} run is empty in some runs only")
        else:
            row[side] = _span(values)
    return row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/demo_runs.py",
        description="Fold several runs' fleet-demo.json (`make demo`) into min and max per row.",
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FLEET_DEMO_JSON")
    parser.add_argument(
        "--output",
        type=Path,
        default=OUTPUT,
        help="where to write (default bench/results/demo_runs.json)",
    )
    args = parser.parse_args(argv)
    try:
        doc = fold([load(path) for path in args.files], [str(path) for path in args.files])
    except DemoRunsError as exc:
        print(f"demo_runs: {exc}", file=sys.stderr)
        return 2
    args.output.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    passed = sum(run["exit_code"] == 0 for run in doc["runs"])
    print(
        f"{len(doc['runs'])} runs folded into {args.output} ({passed} exited 0); now `make figures`"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
