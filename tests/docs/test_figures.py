"""Every measured figure the docs quote agrees with bench/results/*.json, its one source.

Pages mark each figure (`<!-- figure: KEY -->...<!-- /figure -->`); bench/figures.py renders
KEY from the results file a benchmark wrote, and `make figures` writes it into the pages.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from bench import figures, scale
from devtools.servers import REPO_ROOT
from tests.support import load_file

RESULTS = REPO_ROOT / "bench" / "results"


def _bench_module(name: str) -> ModuleType:
    return load_file(REPO_ROOT / "bench" / f"{name}.py", name)


def _quoted_keys(root: Path = REPO_ROOT) -> set[str]:
    return {key for path in figures.doc_paths(root) for key, _ in figures.regions(path.read_text())}


@pytest.fixture
def docs_copy(tmp_path: Path) -> Path:
    """The pages and the results, copied: a test may plant a disagreement in them."""
    for path in figures.doc_paths():
        target = tmp_path / path.relative_to(REPO_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    shutil.copytree(RESULTS, tmp_path / "bench" / "results")
    return tmp_path


def test_every_quoted_figure_agrees_with_its_results_file() -> None:
    # GIVEN the pages and bench/results as committed
    # WHEN each marked figure is rendered from its JSON
    mismatches = figures.check(figures.doc_paths())

    # THEN every page says exactly what the JSON measured (`make figures` re-renders them)
    assert not mismatches, "\n".join(map(str, mismatches))


def test_every_registered_figure_is_quoted_somewhere() -> None:
    # A renderer no page uses is a figure measured and shown nowhere: dead weight that drifts.
    assert set(figures.FIGURES) - _quoted_keys() == set()


def test_every_results_file_a_figure_reads_is_committed() -> None:
    # GIVEN the results files the rendered figures read
    sources = {
        source
        for key, fig in figures.FIGURES.items()
        if fig.render is not None
        for source in fig.sources
    }

    # THEN each is in bench/results and parses
    for source in sorted(sources):
        assert json.loads((RESULTS / source).read_text()), source


def test_a_planted_disagreement_fails_the_check(docs_copy: Path) -> None:
    # GIVEN a copy of the pages where one quoted ratio is changed by hand
    readme = docs_copy / "README.md"
    text = readme.read_text()
    marker = "<!-- figure: overhead.ratio.count -->"
    start = text.index(marker) + len(marker)
    end = text.index("<!-- /figure -->", start)
    planted = text[:start] + "0.999 ×" + text[end:]
    readme.write_text(planted)
    results = docs_copy / "bench" / "results"

    # WHEN the copy is checked against the JSON
    mismatches = figures.check(figures.doc_paths(docs_copy), results)

    # THEN exactly that figure is named, with what the page says and what the JSON says
    assert [(m.path, m.key, m.quoted) for m in mismatches] == [
        (readme, "overhead.ratio.count", "0.999 ×")
    ]
    assert figures.main(["--check", "--root", str(docs_copy), "--results", str(results)]) == 1


def test_a_changed_results_file_fails_the_check_until_rendered(docs_copy: Path) -> None:
    # GIVEN a rerun of the overhead benchmark that measured a different ratio
    results = docs_copy / "bench" / "results"
    overhead = json.loads((results / "overhead.json").read_text())
    overhead["runs"][0]["ratio"] = 0.5
    (results / "overhead.json").write_text(json.dumps(overhead))
    paths = figures.doc_paths(docs_copy)
    assert figures.check(paths, results), "the pages still quote the old figure"

    # WHEN `make figures` renders the pages from it
    assert figures.main(["--root", str(docs_copy), "--results", str(results)]) == 0

    # THEN they agree again, and quote the new measurement
    assert figures.check(paths, results) == []
    assert "0.500 ×" in (docs_copy / "README.md").read_text()


def test_an_unknown_figure_key_is_named(docs_copy: Path) -> None:
    # GIVEN a page that marks a figure no renderer knows
    page = docs_copy / "docs" / "benchmarks.md"
    page.write_text(page.read_text() + "\n<!-- figure: overhead.typo -->1<!-- /figure -->\n")

    # THEN the check names it rather than passing over it
    with pytest.raises(KeyError, match=r"overhead\.typo"):
        figures.check([page], docs_copy / "bench" / "results")


def test_the_measured_overhead_targets_are_the_benchmarks_standing_ones() -> None:
    # GIVEN the targets the results were judged against, and the benchmark's constants now
    bench = _bench_module("fleet_vs_powertools")
    for name in ("overhead.json", "fleet_vs_powertools.json"):
        recorded = json.loads((RESULTS / name).read_text())["targets"]

        # THEN they are the same: a changed target needs a rerun before the docs quote it
        assert recorded == bench.TARGETS, name


SCALE_FILES = ("scale.json", "scale_seeds.json", "scale_rate60.json", "scale_lmi.json")


@pytest.mark.parametrize("name", SCALE_FILES)
def test_the_scale_runs_were_judged_and_priced_as_bench_scale_judges_and_prices_now(
    name: str,
) -> None:
    recorded = json.loads((RESULTS / name).read_text())

    # THEN a changed target or price needs a rerun (or `bench/scale.py --merge`) first
    assert recorded["targets"] == scale.targets()
    assert recorded["prices_assumed"] == scale.prices_assumed()


@pytest.mark.parametrize("name", SCALE_FILES)
def test_a_scale_results_file_says_when_where_and_how_it_was_run(name: str) -> None:
    env = json.loads((RESULTS / name).read_text())["environment"]
    assert env["date_utc"]
    assert len(env["loadavg_1min"]) == 2
    assert env["command"].startswith("bench/scale.py")


def _scale_results(name: str) -> list[scale.Result]:
    return [scale.Result(**row) for row in json.loads((RESULTS / name).read_text())["results"]]


def test_the_rendered_scale_table_is_the_one_bench_scale_prints() -> None:
    # GIVEN the default run, as bench/scale.py prints its table and as the docs quote it
    printed = scale.markdown_table(scale.table_rows(_scale_results("scale.json"), 10.0))

    # THEN they are the same, row for row (the two sides of the one format)
    assert figures.FIGURES["scale.full.table"].text(RESULTS) == printed


def test_the_rendered_cost_table_is_the_one_bench_scale_derives_from_the_runs() -> None:
    # GIVEN the cost bench/scale.py derives from the default run's units now
    derived = scale.markdown_table(
        scale.cost_rows(_scale_results("scale.json")), scale.COST_COLUMNS
    )

    # THEN the JSON's cost, as the docs quote it, is that one
    assert figures.FIGURES["scale.cost.table"].text(RESULTS) == derived


def test_a_scale_run_over_its_target_is_quoted_as_a_miss(docs_copy: Path) -> None:
    # GIVEN seeded 5,000-container runs in which one rate-policy run read 2,500 units/s
    results = docs_copy / "bench" / "results"
    seeds = json.loads((results / "scale_seeds.json").read_text())
    (run,) = [
        r
        for r in seeds["results"]
        if (r["policy"], r["arrival"], r["seed"]) == ("rate", "ramp100", 3)
    ]
    run["peak_read_units_per_s"] = 2_500.0
    (results / "scale_seeds.json").write_text(json.dumps(seeds))

    # WHEN the pages are checked against it
    mismatches = figures.check(figures.doc_paths(docs_copy), results)

    # THEN README's headline, the tables and the verdicts all disagree until re-rendered,
    # and the render names the miss rather than the target
    assert {"scale.units", "scale.seeds.table", "scale.seeds.rate", "scale.benchmarks.table"} <= {
        m.key for m in mismatches
    }
    units = figures.FIGURES["scale.units"].text(results)
    assert "the rate policy read 2,500 in 1 of 10 seeded runs" in units
    assert figures.FIGURES["scale.seeds.rate"].text(results).startswith("met in 9 of 10 runs")


def test_the_measured_import_target_is_the_benchmarks_standing_one() -> None:
    bench = _bench_module("import_time")
    recorded = json.loads((RESULTS / "import_time.json").read_text())["target"]
    assert recorded == {"ratio": bench.TARGET_RATIO, "extra_ms_at_150ms": bench.TARGET_EXTRA_MS}


# A measured latency (µs) or a ratio to the peer, typed into a page rather than rendered.
UNMARKED = re.compile(r"\d ?µs|\d\.\d+ ?× ?Powertools|\d\.\d+ ?× `import boto3`")


def _outside_figures(path: Path) -> str:
    return figures.MARKER.sub("", path.read_text())


def test_no_page_types_a_latency_or_a_ratio_outside_a_figure() -> None:
    # GIVEN every page, without its rendered figures
    for path in figures.doc_paths():
        # THEN no µs figure or ratio to Powertools or to `import boto3` is left in it by hand
        typed = UNMARKED.findall(_outside_figures(path))
        assert not typed, f"{path.relative_to(REPO_ROOT)}: {typed}: render it from bench/results"


def _import_doc(wall_ratio: float, counted_ratio: float | None) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((RESULTS / "import_time.json").read_text())
    doc["whole_process"] = {**doc["whole_process"], "ratio": wall_ratio}
    if counted_ratio is None:
        doc["instructions"] = None
    else:
        doc["instructions"] = {
            "a": 1_030_000_000,
            "b": 1_000_000_000,
            "ratio": counted_ratio,
            "extra_ms": 6.6,
            "ms_at_150ms_boto3": 4.5,
            "references": {},
        }
    return doc


def test_the_import_verdict_is_the_instruction_counts_where_valgrind_counted() -> None:
    # GIVEN a run whose wall clock (moved by the load) is over the target, counted under it
    doc = _import_doc(wall_ratio=1.06, counted_ratio=1.03)
    # THEN the summary leads with the instructions, and the verdict is theirs
    summary = figures.FIGURES["import.summary"].render(doc)
    assert summary.startswith("1.030 × in instructions (valgrind: 1,030.0 M against 1,000.0 M")
    assert "in wall clock 1.060 ×" in summary
    assert figures.FIGURES["import.met"].render(doc) == "yes"
    # AND counted over the target, it is missed whatever the wall clock says
    assert figures.FIGURES["import.met"].render(_import_doc(1.01, 1.05)) == "**no**"


def test_an_import_run_without_instruction_counts_says_wall_clock() -> None:
    doc = _import_doc(wall_ratio=1.06, counted_ratio=None)
    summary = figures.FIGURES["import.summary"].render(doc)
    assert "in wall clock" in summary
    assert "instructions" not in summary
    assert figures.FIGURES["import.met"].render(doc) == "**no**"
