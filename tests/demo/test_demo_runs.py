"""bench/demo_runs.py folds runs' fleet-demo.json into bench/results/demo_runs.json.

The runs here are built as the demo builds them (bench/demo/results.py's document, from
report.Run values), written and read back as files: the fold reads what the demo writes.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench import demo_runs, figures
from bench.demo.report import Run
from bench.demo.results import Conditions, document, options_dict
from bench.demo.results import write as write_results
from bench.demo.scenario import DEFAULT
from bench.demo.summary import RunRecord, RunSummary

TITLES = {"shared": "shared breaker (DynamoDB)", "per-container": "per-container breakers"}


def measured(
    label: str,
    failing: int,
    windows: tuple[int, ...],
    closed: float | None,
    store_requests: int = 0,
    failed_probes: int = 0,
    at_recovery: int = 1,
) -> Run:
    shared = label == "shared"
    record = RunRecord(label, TITLES[label], "a store", shared, 16, (3.0, 8.0), duration=20.0)
    summary = RunSummary(
        calls=0,
        charged=0,
        provider_failed=failing,
        rejected=0,
        deferred=0,
        failing_calls=failing,
        noise_failures=0,
        failed_probes=failed_probes,
        trip_failures=failing - failed_probes,
        spurious_trips=0,
        seconds_to_reject=0.5,
        probes_at_recovery=at_recovery,
        probes_per_window=windows,
        recovery_to_closed=closed,
        store_requests=store_requests,
        store_errors=0,
        degradations=0,
    )
    return Run(record, summary)


def demo_json(
    tmp_path: Path, n: int, shared: Run, per_container: Run, exit_code: int = 0, **options: Any
) -> Path:
    """Run ``n``'s fleet-demo.json, as the demo writes it, in a directory of its own."""
    conditions = Conditions(
        date_utc=f"2026-12-07T03:{n:02d}:00+00:00",
        commit="0123abc",
        cpu_count=2,
        loadavg_at_start=(1.0 + n, 2.0, 3.0),
        loadavg_at_end=(4.0 + n, 2.0, 3.0),
        seconds=140.0 + n,
    )
    doc = document(replace(DEFAULT, **options), [shared, per_container], [], conditions, exit_code)
    output = tmp_path / f"run-{n}"
    output.mkdir()
    return write_results(doc, output)


@pytest.fixture
def three_runs(tmp_path: Path) -> list[Path]:
    """Three runs: failing calls 17, 21, 19 shared and 96, 87, 90 per container, one of them
    with a per-container fleet that never closed."""
    return [
        demo_json(
            tmp_path,
            1,
            measured("shared", 17, (1,), 1.4, store_requests=404),
            measured("per-container", 96, (1,) * 32, 2.1, failed_probes=16, at_recovery=16),
        ),
        demo_json(
            tmp_path,
            2,
            measured("shared", 21, (1, 1), 6.0, store_requests=238, failed_probes=1),
            measured("per-container", 87, (1,) * 31, None, failed_probes=15, at_recovery=16),
            exit_code=1,
        ),
        demo_json(
            tmp_path,
            3,
            measured("shared", 19, (1, 1), 3.25, store_requests=300, failed_probes=1),
            measured("per-container", 90, (1,) * 32, 3.8, failed_probes=16, at_recovery=16),
        ),
    ]


def folded(paths: list[Path]) -> dict[str, Any]:
    return demo_runs.fold([demo_runs.load(path) for path in paths], [str(p) for p in paths])


def test_each_row_is_the_min_and_max_over_the_runs(three_runs: list[Path]) -> None:
    # WHEN three runs are folded
    rows = {row["key"]: row for row in folded(three_runs)["rows"]}

    # THEN each row holds the lowest and highest value of each side
    assert (rows["failing_calls"]["shared"], rows["failing_calls"]["per_container"]) == (
        [17, 21],
        [87, 96],
    )
    assert rows["failed_probes"]["shared"] == [0, 1]
    assert rows["probes_at_recovery"]["per_container"] == [16, 16]
    # AND half-open windows are counted per run, probes per window over every window
    windows = rows["probes_per_window"]
    assert (windows["shared"], windows["per_container"]) == ([1, 2], [31, 32])
    assert windows["probes_each"] == {"shared": [1, 1], "per_container": [1, 1]}
    assert rows["recovery_to_closed"]["shared"] == [1.4, 6.0]
    assert rows["store_requests"]["shared"] == [238, 404]
    # AND the rows keep the demo's order and its printed names
    assert [row["figure"] for row in rows.values()][:2] == [
        "failing calls sent to the API during the outage",
        "… of them failed probes",
    ]


def test_a_fleet_that_never_closed_is_counted_not_dropped(three_runs: list[Path]) -> None:
    # GIVEN three runs, in one of which the per-container fleet never closed
    row = next(r for r in folded(three_runs)["rows"] if r["key"] == "recovery_to_closed")

    # THEN the range is over the runs that closed, and the one that did not is counted
    assert row["per_container"] == [2.1, 3.8]
    assert row["not_closed"] == {"shared": 0, "per_container": 1}


def test_per_container_breakers_make_no_store_request(three_runs: list[Path]) -> None:
    row = next(r for r in folded(three_runs)["rows"] if r["key"] == "store_requests")
    assert row["per_container"] is None
    assert row["per_container_note"] == "in-process"


def test_each_run_is_recorded_with_its_conditions_oldest_first(three_runs: list[Path]) -> None:
    # GIVEN the runs given newest first
    doc = folded(list(reversed(three_runs)))

    # THEN each is listed oldest first, with its load, seconds, exit code and commit
    runs = doc["runs"]
    assert [run["date_utc"][11:16] for run in runs] == ["03:01", "03:02", "03:03"]
    assert [run["exit_code"] for run in runs] == [0, 1, 0]
    assert runs[0]["loadavg_at_start"] == [2.0, 2.0, 3.0]
    assert runs[0]["seconds"] == 141.0
    assert runs[0]["values"]["failing_calls"] == {"shared": 17, "per_container": 96}
    assert runs[0]["values"]["probes_per_window"] == {
        "shared": {"windows": 1, "probes_each": [1, 1]},
        "per_container": {"windows": 32, "probes_each": [1, 1]},
    }
    # AND the note says how many runs, with which options, and when
    assert doc["note"].startswith("3 runs of `make demo` (its defaults: 16 containers")
    assert "2026-12-07 UTC" in doc["note"]
    assert doc["defaults"] is True
    assert doc["options"] == options_dict(DEFAULT)


def test_the_docs_render_the_folded_runs(three_runs: list[Path], tmp_path: Path) -> None:
    # GIVEN the runs folded by the script, into a results file
    output = tmp_path / "demo_runs.json"
    assert demo_runs.main([*map(str, three_runs), "--output", str(output)]) == 0
    doc = json.loads(output.read_text())

    # THEN bench/figures.py renders the table the docs quote from it
    assert figures.demo_runs_table(doc).splitlines()[2:] == [
        "| failing calls sent to the API during the outage | 17 – 21 | 87 – 96 |",
        "| … of them failed probes | 0 – 1 | 15 – 16 |",
        "| probes at recovery | 1 | 16 |",
        "| half-open windows × probes admitted in each | 1 – 2 × 1 | 31 – 32 × 1 |",
        "| seconds from provider recovery to the fleet closing | 1.4 – 6.0 | "
        "2.1 – 3.8 (not closed in 1 of 3 runs) |",
        "| store requests made | 238 – 404 | 0 (in-process) |",
    ]
    # AND the conditions: how many runs, when, the load, the seconds and the exit codes
    assert figures.demo_runs_conditions(doc) == (
        "3 runs of `make demo` with its defaults, 2026-12-07, 2 cores at load 2.0 to 7.0 "
        "(1-minute average at each run's start and end), 141 to 143 s "
        "each; 2 of 3 exited 0"
    )


def edit(path: Path, change: Any) -> Path:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))
    return path


def _row(doc: dict[str, Any], key: str) -> dict[str, Any]:
    return next(row for row in doc["table"] if row["key"] == key)


FORGED = {
    "another benchmark's": (lambda d: d.update(benchmark="scale"), "not a demo's results"),
    "another format": (lambda d: d.update(format=0), "format 0, this script reads format 1"),
    "no exit code": (lambda d: d.pop("exit_code"), "no exit code"),
    "a row missing": (
        lambda d: d.update(table=[r for r in d["table"] if r["key"] != "failed_probes"]),
        "no row 'failed_probes'",
    ),
    "a count as text": (
        lambda d: _row(d, "failing_calls")["values"].update(shared="17"),
        "row 'failing_calls' of the shared run is '17', not a count",
    ),
    "a negative count": (
        lambda d: _row(d, "failing_calls")["values"].update(shared=-1),
        "is -1, not a count",
    ),
    "a shared run with no store requests": (
        lambda d: _row(d, "store_requests")["values"].update(shared=None),
        "row 'store_requests' of the shared run is empty",
    ),
    "windows as a number": (
        lambda d: _row(d, "probes_per_window")["values"].update(shared=2),
        "is 2, not a list of probe counts",
    ),
    "an option unknown to the demo": (
        lambda d: d["options"].update(colour="red"),
        "its options are not the demo's",
    ),
}


@pytest.mark.parametrize("forgery", FORGED.values(), ids=list(FORGED))
def test_a_file_the_demo_did_not_write_is_refused_by_name(
    forgery: tuple[Any, str], three_runs: list[Path]
) -> None:
    # GIVEN one file altered as the demo would never write it
    change, message = forgery
    bad = edit(three_runs[1], change)

    # THEN it is refused, naming the file and what is wrong with it
    with pytest.raises(demo_runs.DemoRunsError, match="run-2") as refused:
        demo_runs.load(bad)
    assert message in str(refused.value)


def test_the_rate_comparison_is_not_folded_into_the_count_one(tmp_path: Path) -> None:
    # GIVEN a `--policy rate` run (shared rate breaker against the shared count breaker)
    shared = measured("shared", 17, (1,), 1.4)
    count = replace(shared, record=replace(shared.record, label="shared-count"))
    path = demo_json(tmp_path, 1, shared, count, policy="rate")

    # THEN it is refused: demo_runs.json compares shared with per-container breakers
    with pytest.raises(
        demo_runs.DemoRunsError, match="its runs are \\['shared', 'shared-count'\\]"
    ):
        demo_runs.load(path)


def test_runs_of_other_options_are_not_folded_together(three_runs: list[Path]) -> None:
    edit(three_runs[2], lambda d: d["options"].update(containers=8))
    with pytest.raises(demo_runs.DemoRunsError, match=r"--containers 8, .* ran with 16"):
        folded(three_runs)


def test_runs_of_another_machine_are_not_folded_together(three_runs: list[Path]) -> None:
    edit(three_runs[2], lambda d: d.update(cpu_count=8))
    with pytest.raises(demo_runs.DemoRunsError, match=r"8 cores, .* ran on 2"):
        folded(three_runs)


def test_the_same_run_given_twice_is_refused(three_runs: list[Path]) -> None:
    with pytest.raises(demo_runs.DemoRunsError, match="are the same run"):
        folded([*three_runs, three_runs[0]])


def test_a_refused_fold_writes_nothing_and_exits_2(
    three_runs: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an existing results file, and a fold of a run that is not JSON
    output = tmp_path / "demo_runs.json"
    output.write_text("{}")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")

    # THEN the script exits 2 naming the file, and the results file is left as it was
    assert demo_runs.main([str(three_runs[0]), str(broken), "--output", str(output)]) == 2
    assert "broken.json: not JSON" in capsys.readouterr().err
    assert output.read_text() == "{}"


def test_the_committed_ranges_are_those_of_the_runs_it_records() -> None:
    # GIVEN bench/results/demo_runs.json as committed (the docs' table renders its rows)
    doc = json.loads(demo_runs.OUTPUT.read_text())
    runs = doc["runs"]

    # THEN it was folded from recorded runs, not typed: each row is the range of the values
    # its runs hold, and the note counts them
    assert doc["note"].startswith(f"{len(runs)} runs of `make demo`")
    assert len(runs) >= 3
    for row in doc["rows"]:
        for side in ("shared", "per_container"):
            values = [run["values"][row["key"]][side] for run in runs]
            if row["key"] == "probes_per_window":
                each = [v["probes_each"] for v in values if v["probes_each"] is not None]
                assert row["probes_each"][side] == [
                    min(low for low, _ in each),
                    max(high for _, high in each),
                ]
                values = [v["windows"] for v in values]
            measured_values = [v for v in values if v is not None]
            expected = [min(measured_values), max(measured_values)] if measured_values else None
            assert row[side] == expected, (row["key"], side)
