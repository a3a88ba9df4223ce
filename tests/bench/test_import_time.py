"""bench/import_time.py's inputs and helpers, without timing anything.

The figures come from running the benchmark (docs/benchmarks.md, "Cold-start cost"); these
check that a revision given with ``--reference`` is the package as it was at that revision,
that a bad one is refused by name before anything is timed, and the interquartile summary.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import import_time

ROOT = Path(__file__).resolve().parents[2]


def test_reference_layer_imports_the_package_as_committed(tmp_path: Path) -> None:
    env = import_time.reference_layer("HEAD", tmp_path)
    layer = Path(env["PYTHONPATH"])
    assert layer.is_relative_to(tmp_path)
    assert layer.name == "layer"
    committed = subprocess.run(
        ["git", "-C", str(ROOT), "show", "HEAD:layer/fleetbreaker/breaker.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert (layer / "fleetbreaker" / "breaker.py").read_text() == committed
    where = subprocess.run(
        [sys.executable, "-c", "import fleetbreaker; print(fleetbreaker.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(layer)


def test_reference_that_is_not_a_commit_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="'no-such-rev': not a commit"):
        import_time.reference_layer("no-such-rev", tmp_path)


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return _run(sys.executable, "bench/import_time.py", *args)


def test_command_line_refuses_a_bad_reference_before_timing() -> None:
    result = _bench("--runs", "1", "--reference", "no-such-rev")
    assert result.returncode == 1
    assert "--reference 'no-such-rev': not a commit" in result.stderr
    assert "whole process" not in result.stdout


def test_command_line_refuses_zero_runs() -> None:
    result = _bench("--runs", "0")
    assert result.returncode == 2
    assert "--runs must be at least 1" in result.stderr


def test_quartiles_give_the_median_and_the_middle_half() -> None:
    assert import_time.quartiles([1.0, 2.0, 3.0, 4.0, 5.0], " ms") == (
        "3.0 ms (middle half 1.5 to 4.5)"
    )
    assert import_time.quartiles([7.0], " ms") == "7.0 ms (middle half 7.0 to 7.0)"


def test_make_bench_times_the_reference_the_docs_quote() -> None:
    planned = _run("make", "-n", "bench")
    assert planned.returncode == 0, planned.stderr
    assert "bench/import_time.py --reference 'a405ffb^'" in planned.stdout
    assert "--reference 'a405ffb^'" in (ROOT / "docs" / "benchmarks.md").read_text()
    without = _run("make", "-n", "bench", "IMPORT_REFERENCE=no-such-rev")
    assert without.returncode == 0, without.stderr
    assert "--reference" not in without.stdout


def test_instruction_figures_give_the_ratio_the_target_is_judged_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN valgrind counting 1,030 M instructions for A, 1,000 M for B, 1,010 M for a
    # reference's A (no process started: the counts are given)
    counts = {import_time.WHOLE_A: 1_030_000_000, import_time.WHOLE_B: 1_000_000_000}
    reference = {"PYTHONPATH": "ref"}

    def counted(statement: str, env: dict[str, str] | None = None) -> int:
        return 1_010_000_000 if env is reference else counts[statement]

    monkeypatch.setattr(import_time, "instructions", counted)
    monkeypatch.setattr(import_time, "run_whole", lambda *_a, **_k: (0.0, 0.0))
    # WHEN the figures are taken beside a 200 ms `import boto3`
    figures = import_time.instruction_figures(200.0, {"old": reference})
    # THEN A / B is the ratio, its ms at this run's speed and at 150 ms, each reference's A
    assert figures == {
        "a": 1_030_000_000,
        "b": 1_000_000_000,
        "ratio": 1.03,
        "extra_ms": 6.0,
        "ms_at_150ms_boto3": 4.5,
        "references": {"old": 1_010_000_000},
    }
    assert "A / B 1.030" in capsys.readouterr().out
