"""The figures the docs quote, rendered from bench/results/*.json: one source for each number.

    make figures                          # re-render every marked region from the JSON
    .venv/bin/python bench/figures.py --check    # exit 1 naming each region that disagrees

A doc (README.md, docs/*.md, bench/README.md) marks each measured figure it quotes:

    <!-- figure: overhead.ratio.count -->0.142–0.150 ×<!-- /figure -->

and the text between the markers is exactly what ``FIGURES[key]`` renders from its results
file(s) in bench/results/, which the benchmarks write (bench/README.md says which command
writes which file). Rerun a benchmark, then `make figures`: every page that quotes it follows,
and tests/docs/test_figures.py fails while any page and the JSON disagree.

A figure whose results file is not committed yet (``PENDING``: bench/scale.py's 5,000-container
runs) keeps its text; the test fails as soon as that file arrives, so its renderer gets
written then rather than the text going stale.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "bench" / "results"

# <!-- figure: KEY -->TEXT<!-- /figure -->; TEXT may span lines (a whole table).
MARKER = re.compile(r"<!-- figure: ([a-z0-9_.-]+) -->(.*?)<!-- /figure -->", re.DOTALL)

Results = Mapping[str, Any]


def doc_paths(root: Path = REPO_ROOT) -> list[Path]:
    """Every page that may quote a figure."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), root / "bench" / "README.md"]


@dataclass(frozen=True)
class Figure:
    sources: tuple[str, ...]  # file names in bench/results
    render: Callable[..., str] | None  # one argument per source; None: PENDING

    def text(self, results: Path) -> str:
        assert self.render is not None
        return self.render(*(load(results / name) for name in self.sources))


FIGURES: dict[str, Figure] = {}


def figure(key: str, *sources: str) -> Callable[[Callable[..., str]], Callable[..., str]]:
    def register(render: Callable[..., str]) -> Callable[..., str]:
        if key in FIGURES:
            raise ValueError(f"figure {key!r} registered twice")
        FIGURES[key] = Figure(sources, render)
        return render

    return register


# Figures from bench/scale.py's 5,000-container runs, measured on another branch: their text
# stays as written until bench/results/scale.json is committed, and then gets a renderer.
PENDING = {
    "scale.noise": "scale.json",
    "scale.units": "scale.json",
    "scale.cost": "scale.json",
}
for _key, _source in PENDING.items():
    FIGURES[_key] = Figure((_source,), None)


def load(path: Path) -> Results:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no results file (run the benchmark that writes it)")
    data: Results = json.loads(path.read_text())
    return data


# --------------------------------------------------------------------------- formatting


def span(values: Iterable[float], digits: int, unit: str = "") -> str:
    """min–max of the runs (one value when they agree at this precision)."""
    ordered = sorted(values)
    low, high = f"{ordered[0]:.{digits}f}", f"{ordered[-1]:.{digits}f}"
    text = low if low == high else f"{low}–{high}"
    return f"{text}{unit}"


def verdict(ratios: list[float], target: float) -> str:
    met = sum(r <= target for r in ratios)
    if met == len(ratios):
        return "yes"
    return "no" if met == 0 else f"in {met} of {len(ratios)} runs"


def date(stamp: str) -> str:
    return stamp[:10]


def load_span(loads: Iterable[Iterable[float]]) -> str:
    """The 1-minute load averages seen, low to high."""
    ones = [float(next(iter(x))) for x in loads]
    return span(ones, 1).replace("–", " to ")


# --------------------------------------------------------------------------- overhead (a)

OVERHEAD = "overhead.json"
FULL = "fleet_vs_powertools.json"
FLEET, RATE, OTEL, POWERTOOLS = (
    "fleetbreaker",
    "fleetbreaker (rate + slow calls)",
    "fleetbreaker (OpenTelemetry listener)",
    "powertools",
)
RATIO_OF = {"count": ("ratio", FLEET), "rate": ("ratio_rate", RATE), "otel": ("ratio_otel", OTEL)}


def _ratios(doc: Results, policy: str) -> list[float]:
    return [run[RATIO_OF[policy][0]] for run in doc["runs"]]


def _us(doc: Results, contender: str) -> str:
    return span((run["overhead_ns"][contender] / 1000 for run in doc["runs"]), 1, " µs")


def _target(doc: Results, policy: str) -> float:
    return float(doc["targets"][RATIO_OF[policy][0]])


@figure("overhead.conditions", OVERHEAD)
def overhead_conditions(doc: Results) -> str:
    env, runs = doc["environment"], doc["runs"]
    loads = [load for run in runs for load in run["loadavg"]]
    return (
        f"{date(env['date_utc'])}, {env['cpu_count']} cores at load {load_span(loads)}, "
        f"{len(runs)} runs of `--overhead-only`, min–max"
    )


for _policy in RATIO_OF:

    def _ratio_text(doc: Results, policy: str = _policy) -> str:
        return span(_ratios(doc, policy), 3, " ×")

    def _target_text(doc: Results, policy: str = _policy) -> str:
        return f"≤ {_target(doc, policy):g} ×"

    def _met_text(doc: Results, policy: str = _policy) -> str:
        return verdict(_ratios(doc, policy), _target(doc, policy))

    figure(f"overhead.ratio.{_policy}", OVERHEAD)(_ratio_text)
    figure(f"overhead.target.{_policy}", OVERHEAD)(_target_text)
    figure(f"overhead.met.{_policy}", OVERHEAD)(_met_text)


@figure("overhead.us.count", OVERHEAD)
def overhead_count(doc: Results) -> str:
    return _us(doc, FLEET)


@figure("overhead.us.powertools", OVERHEAD)
def overhead_powertools(doc: Results) -> str:
    return _us(doc, POWERTOOLS)


@figure("overhead.otel", OVERHEAD)
def overhead_otel(doc: Results) -> str:
    ratios, target = _ratios(doc, "otel"), _target(doc, "otel")
    return (
        f"{span(ratios, 3, ' ×')} Powertools' overhead ({_us(doc, OTEL)} against "
        f"{_us(doc, POWERTOOLS)}; {span(_ratios(doc, 'count'), 3, ' ×')} without the listener), "
        f"{'within' if max(ratios) <= target else 'above'} its {target:g} × target "
        f"({overhead_conditions(doc)})"
    )


# --------------------------------------------------------------------------- (b) (c) (d)


def _row(doc: Results, row_id: str) -> Results:
    for row in doc["table"]:
        if row["id"] == row_id:
            return dict(row)
    raise KeyError(f"{FULL}: no row {row_id!r} (rerun bench/fleet_vs_powertools.py)")


@figure("fvp.conditions", FULL)
def fvp_conditions(doc: Results) -> str:
    env = doc["environment"]
    loads = [env["loadavg_at_start"], env["loadavg_at_end"]]
    return f"{date(env['date_utc'])}, {env['cpu_count']} cores at load {load_span(loads)}"


@figure("fvp.powertools.version", FULL)
def fvp_powertools_version(doc: Results) -> str:
    return str(doc["environment"]["versions"]["aws-lambda-powertools"])


for _kind in ("fleetbreaker", "powertools"):

    def _trip(doc: Results, kind: str = _kind) -> str:
        return f"{_row(doc, 'b8x1')[kind]} / {_row(doc, 'b16x1')[kind]}"

    def _trip_threads(doc: Results, kind: str = _kind) -> str:
        return str(_row(doc, "b16x4")[kind])

    def _race(doc: Results, kind: str = _kind) -> str:
        return str(_row(doc, "c")[kind])

    def _healthy(doc: Results, kind: str = _kind) -> str:
        return ", ".join(
            f"{_row(doc, f'd_reads_{t}')[kind]} / {_row(doc, f'd_writes_{t}')[kind]}"
            for t in (1, 4)
        )

    figure(f"fvp.trip.{_kind}", FULL)(_trip)
    figure(f"fvp.trip_threads.{_kind}", FULL)(_trip_threads)
    figure(f"fvp.race.{_kind}", FULL)(_race)
    figure(f"fvp.healthy.{_kind}", FULL)(_healthy)


@figure("fvp.trip_seconds", FULL)
def fvp_trip_seconds(doc: Results) -> str:
    """How long the 16-container fleet took from the first failure to all rejecting."""
    (b16,) = [
        b
        for b in doc["results"]["b_trip"]
        if (b["fleetbreaker"]["workers"], b["fleetbreaker"]["threads"]) == (16, 1)
    ]
    fb, pt = (b16[kind]["seconds_until_fleet_rejecting"] for kind in ("fleetbreaker", "powertools"))
    return f"{fb:.2f} s against {pt:.2f} s"


@figure("benchmarks.table", OVERHEAD, FULL)
def benchmarks_table(overhead: Results, full: Results) -> str:
    def met(row: Results) -> str:
        return "yes" if row["met"] else "**no**"

    lines = [
        "| | fleetbreaker | Powertools | target | met? |",
        "|---|---|---|---|---|",
    ]
    labels = {
        "count": "overhead of a closed breaker around a no-op, median",
        "rate": "the same, rate policy with slow-call detection on",
        "otel": "the same, count policy, `OpenTelemetryListener` attached, no span recording",
    }
    for policy, label in labels.items():
        ratios = _ratios(overhead, policy)
        lines.append(
            f"| {label} | {_us(overhead, RATIO_OF[policy][1])} | {_us(overhead, POWERTOOLS)} "
            f"| ≤ {_target(overhead, policy):g} × Powertools ({span(ratios, 3, ' ×')}) "
            f"| {verdict(ratios, _target(overhead, policy))} |"
        )
    b8, b16, b16x4, c = (_row(full, i) for i in ("b8x1", "b16x1", "b16x4", "c"))
    lines += [
        f"| failing calls before 8 / 16 containers all reject | {b8['fleetbreaker']} / "
        f"{b16['fleetbreaker']} | {b8['powertools']} / {b16['powertools']} | "
        f"{b8['target'].split(' ')[1]} / {b16['target'].split(' ')[1]} (threshold + N) "
        f"| {'yes' if b8['met'] and b16['met'] else '**no**'} |",
        f"| the same, 16 containers × 4 threads | {b16x4['fleetbreaker']} | "
        f"{b16x4['powertools']} | {b16x4['target']} | {met(b16x4)} |",
        f"| calls admitted in the first 300 ms of half-open, 64 racing | {c['fleetbreaker']} | "
        f"{c['powertools']} | {c['target']} | {met(c)} |",
    ]
    for threads, label in ((1, "per container over 3 s"), (4, "the same with 4 threads")):
        reads, writes = _row(full, f"d_reads_{threads}"), _row(full, f"d_writes_{threads}")
        lines.append(
            f"| store reads / writes per 1,000 healthy calls, {label} | {reads['fleetbreaker']} /"
            f" {writes['fleetbreaker']} | {reads['powertools']} / {writes['powertools']} | "
            f"reads {reads['target']}, writes {writes['target']} "
            f"| {'yes' if reads['met'] and writes['met'] else '**no**'} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- import time

IMPORT = "import_time.json"


@figure("import.target", IMPORT)
def import_target(doc: Results) -> str:
    target = doc["target"]
    return (
        f"at most {target['ratio']:.2f} × `import boto3`, which is "
        f"{target['extra_ms_at_150ms']:g} ms where `import boto3` takes 150 ms"
    )


def import_ratio(doc: Results) -> str:
    whole = doc["whole_process"]
    low, high = whole["ratio_middle_half"]
    return f"{whole['ratio']:.3f} × (middle half {low:.3f} to {high:.3f})"


@figure("import.summary", IMPORT)
def import_summary(doc: Results) -> str:
    env, whole = doc["environment"], doc["whole_process"]
    low, high = whole["extra_ms_middle_half"]
    return (
        f"{import_ratio(doc)}: +{whole['extra_ms']:.1f} ms (middle half {low:.1f} to "
        f"{high:.1f}) beside a {whole['boto3_ms']:.0f} ms `import boto3`, "
        f"{doc['ms_at_150ms_boto3']:.1f} ms where it takes 150 ms; median of {doc['runs']} "
        f"pairs, {date(env['date_utc'])}, {env['cpu_count']} cores at load "
        f"{load_span(env['loadavg'])}, Python {env['python']}"
    )


@figure("import.met", IMPORT)
def import_met(doc: Results) -> str:
    return "yes" if doc["whole_process"]["ratio"] <= doc["target"]["ratio"] else "**no**"


@figure("import.saved", IMPORT)
def import_saved(doc: Results) -> str:
    layer = doc["read_only_layer"]
    low, high = layer["saved_ms_middle_half"]
    return (
        f"{layer['saved_ms']:.1f} ms (middle half {low:.1f} to {high:.1f}; "
        f"{layer['source_ms']:.0f} ms from source against {layer['bytecode_ms']:.0f} ms "
        f"from the layer's bytecode)"
    )


# --------------------------------------------------------------------------- Redis vs DynamoDB

REDIS = "redis_vs_dynamodb.json"


def _latency(row: Results) -> str:
    """A latency in µs below 1 ms, in ms above, with its p90 for the spread."""

    def one(us: float) -> str:
        return f"{us:.0f} µs" if us < 1000 else f"{us / 1000:.1f} ms"

    return f"{one(row['median_us'])} (p90 {one(row['p90_us'])})"


@figure("redis.conditions", REDIS)
def redis_conditions(doc: Results) -> str:
    return (
        f"one run, {date(doc['when'])}, {doc['machine']['cpus']} cores at load "
        f"{load_span(doc['loadavg'])}; median (p90)"
    )


@figure("redis.stores", REDIS)
def redis_stores(doc: Results) -> str:
    miss = doc["cache_miss"]
    server = miss["redis_server_us_per_script"]
    return "\n".join(
        [
            "| | RedisStore | DynamoDBStore on moto's server |",
            "|---|---|---|",
            "| a decision that misses the cache (one round trip) | "
            f"{_latency(miss['decision']['redis'])} | {_latency(miss['decision']['dynamodb'])} |",
            "| a counted failure (one write) | "
            f"{_latency(miss['failure_write']['redis'])} | "
            f"{_latency(miss['failure_write']['dynamodb'])} |",
            "| redis-server CPU per script (`INFO commandstats`) | "
            f"load {server['load']} µs, failure {server['record_failure']} µs | |",
            f"| a bare redis `PING` | {_latency(miss['decision']['redis PING'])} | |",
        ]
    )


@figure("redis.pybreaker", REDIS)
def redis_pybreaker(doc: Results) -> str:
    over = doc["overhead"]["overhead_ns"]

    def admitted(row: Results) -> str:
        # A degradation (the store missed its deadline: local state) is part of the figure.
        n = row.get("degradations", 0)
        return f"{row['admitted_in_window']}{f' ({n} degraded to local state)' if n else ''}"

    herd = {(row["contender"], row["layout"]): admitted(row) for row in doc["herd"]}
    # bench/redis_vs_dynamodb.py's contender and layout names.
    fleet, pybreaker = "fleetbreaker", "pybreaker"
    per_thread, per_process = "one breaker per thread", "one breaker per process"
    return "\n".join(
        [
            "| | fleetbreaker (RedisStore) | pybreaker |",
            "|---|---|---|",
            "| per-call overhead of a closed, healthy breaker around a no-op, median | "
            f"{over[fleet] / 1000:.1f} µs | {over[pybreaker] / 1000:.0f} µs |",
            "| calls reaching a recovering dependency in the first 300 ms, 16 processes × 8 "
            "threads, one breaker per thread (every thread a single-request container, as on "
            f"Lambda) | {herd[fleet, per_thread]} | {herd[pybreaker, per_thread]} |",
            "| the same, one breaker per process shared by its 8 threads | "
            f"{herd[fleet, per_process]} | {herd[pybreaker, per_process]} |",
        ]
    )


# --------------------------------------------------------------------------- layer sizes

LAYERS = "layer_sizes.json"


def _mb(size: int) -> str:
    return f"{size / 1e6:.2f} MB"


@figure("layers.table", LAYERS)
def layers_table(doc: Results) -> str:
    lines = [
        "| runtime | full, unzipped | full, zipped | slim, unzipped | slim, zipped |",
        "|---|---:|---:|---:|---:|",
    ]
    for runtime, row in doc["layers"].items():
        name = runtime if row["bytecode"] else f"{runtime} (no bytecode here)"
        lines.append(
            f"| {name} | {_mb(row['full'])} | {_mb(row['full_zipped'])} | "
            f"{_mb(row['slim'])} | {_mb(row['slim_zipped'])} |"
        )
    return "\n".join(lines)


@figure("layers.summary", LAYERS)
def layers_summary(doc: Results) -> str:
    """The sizes of the layers built with bytecode, as a function loads them."""
    compiled = [row for row in doc["layers"].values() if row["bytecode"]]
    full = span((row["full"] / 1e6 for row in compiled), 1)
    slim = span((row["slim"] / 1e6 for row in compiled), 1)
    return f"{full} MB and {slim} MB unzipped"


@figure("layers.python3.13", LAYERS)
def layers_python313(doc: Results) -> str:
    return _mb(doc["layers"]["python3.13"]["full"])


# --------------------------------------------------------------------------- render / check


@dataclass(frozen=True)
class Mismatch:
    path: Path
    key: str
    quoted: str
    measured: str

    def __str__(self) -> str:
        return f"{self.path}: figure {self.key!r} says {self.quoted!r}; the JSON: {self.measured!r}"


def regions(text: str) -> list[tuple[str, str]]:
    """(key, quoted text) of each figure a page marks."""
    return [(m.group(1), m.group(2)) for m in MARKER.finditer(text)]


def expected(key: str, results: Path) -> str | None:
    """What the page must say for ``key``; None for a PENDING figure (its text stays)."""
    try:
        fig = FIGURES[key]
    except KeyError:
        raise KeyError(f"unknown figure {key!r}: register it in bench/figures.py") from None
    if fig.render is None:
        return None
    return fig.text(results)


def render_text(text: str, results: Path) -> str:
    def replace(match: re.Match[str]) -> str:
        key, quoted = match.group(1), match.group(2)
        wanted = expected(key, results)
        if wanted is None:
            return match.group(0)
        # A table region keeps its own lines: the markers sit on lines of their own.
        if quoted.startswith("\n"):
            wanted = f"\n{wanted}\n"
        return f"<!-- figure: {key} -->{wanted}<!-- /figure -->"

    return MARKER.sub(replace, text)


def check(paths: Iterable[Path], results: Path = RESULTS) -> list[Mismatch]:
    out = []
    for path in paths:
        for key, quoted in regions(path.read_text()):
            wanted = expected(key, results)
            if wanted is not None and quoted.strip("\n") != wanted:
                out.append(Mismatch(path, key, quoted.strip("\n"), wanted))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page disagrees")
    parser.add_argument("--results", type=Path, default=RESULTS, help="bench/results")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help="the repository")
    args = parser.parse_args(argv)
    paths = doc_paths(args.root)
    if args.check:
        mismatches = check(paths, args.results)
        for mismatch in mismatches:
            print(mismatch, file=sys.stderr)
        return 1 if mismatches else 0
    for path in paths:
        text = path.read_text()
        rendered = render_text(text, args.results)
        if rendered != text:
            path.write_text(rendered)
            print(f"rendered {path.relative_to(args.root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
