"""The figures the docs quote, rendered from bench/results/*.json: one source for each number.

    make figures                          # re-render every marked region from the JSON
    .venv/bin/python bench/figures.py --check    # exit 1 naming each region that disagrees

A doc (README.md, docs/*.md, bench/README.md) marks each measured figure it quotes:

    <!-- figure: overhead.ratio.count -->0.142–0.150 ×<!-- /figure -->

and the text between the markers is exactly what ``FIGURES[key]`` renders from its results
file(s) in bench/results/, which the benchmarks write (bench/README.md says which command
writes which file). Rerun a benchmark, then `make figures`: every page that quotes it follows,
and tests/docs/test_figures.py fails while any page and the JSON disagree.

Every figure has a renderer: a figure measured elsewhere is committed as a results file
first (bench/scale.py --merge joins a run made in parts), then rendered.
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
    render: Callable[..., str]  # one argument per source

    def text(self, results: Path) -> str:
        return self.render(*(load(results / name) for name in self.sources))


FIGURES: dict[str, Figure] = {}


def figure(key: str, *sources: str) -> Callable[[Callable[..., str]], Callable[..., str]]:
    def register(render: Callable[..., str]) -> Callable[..., str]:
        if key in FIGURES:
            raise ValueError(f"figure {key!r} registered twice")
        FIGURES[key] = Figure(sources, render)
        return render

    return register


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
FLOOR = "floor (clock read, cached deadline)"
RATIO_OF = {
    "count": ("ratio", FLEET),
    "rate": ("ratio_rate", RATE),
    "otel": ("ratio_otel", OTEL),
    "floor": ("ratio_floor", FLEET),
    "async": ("ratio_async", FLEET),
}


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


@figure("overhead.us.floor", OVERHEAD)
def overhead_floor(doc: Results) -> str:
    return _us(doc, FLOOR)


@figure("overhead.us.async", OVERHEAD)
def overhead_async(doc: Results) -> str:
    return span((run["async_overhead_ns"] / 1000 for run in doc["runs"]), 1, " µs")


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


def import_counted_ratio(doc: Results) -> float:
    """The ratio the target is judged on: instructions where valgrind counted them (the load
    does not move them), else the wall-clock median."""
    counted = doc.get("instructions")
    return float(counted["ratio"] if counted else doc["whole_process"]["ratio"])


@figure("import.summary", IMPORT)
def import_summary(doc: Results) -> str:
    env, whole = doc["environment"], doc["whole_process"]
    low, high = whole["extra_ms_middle_half"]
    wall = (
        f"+{whole['extra_ms']:.1f} ms (middle half {low:.1f} to "
        f"{high:.1f}) beside a {whole['boto3_ms']:.0f} ms `import boto3`"
    )
    run = (
        f"median of {doc['runs']} pairs, {date(env['date_utc'])}, {env['cpu_count']} cores at "
        f"load {load_span(env['loadavg'])}, Python {env['python']}"
    )
    counted = doc.get("instructions")
    if not counted:
        return (
            f"{import_ratio(doc)} in wall clock: {wall}, {doc['ms_at_150ms_boto3']:.1f} ms "
            f"where it takes 150 ms; {run}"
        )
    return (
        f"{counted['ratio']:.3f} × in instructions (valgrind: {counted['a'] / 1e6:,.1f} M "
        f"against {counted['b'] / 1e6:,.1f} M for `import boto3` alone, "
        f"{counted['ms_at_150ms_boto3']:.1f} ms where it takes 150 ms); in wall clock "
        f"{import_ratio(doc)}, {wall}; {run}"
    )


@figure("import.met", IMPORT)
def import_met(doc: Results) -> str:
    return "yes" if import_counted_ratio(doc) <= doc["target"]["ratio"] else "**no**"


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


@figure("redis.script_us", REDIS)
def redis_script_us(doc: Results) -> str:
    """redis-server's CPU per fleetbreaker script (``INFO commandstats``), the cheapest to the
    dearest: what bench/README.md's cost assumption sits beside."""
    return span(doc["cache_miss"]["redis_server_us_per_script"].values(), 0, " µs")


# bench/redis_vs_dynamodb.py's contender and layout names.
HERD_FLEET, HERD_PYBREAKER = "fleetbreaker", "pybreaker"
PER_THREAD, PER_PROCESS = "one breaker per thread", "one breaker per process"


def _herd(doc: Results) -> dict[tuple[str, str], str]:
    """Calls admitted in the first 300 ms of half-open, by (contender, layout)."""

    def admitted(row: Results) -> str:
        # A degradation (the store missed its deadline: local state) is part of the figure.
        n = row.get("degradations", 0)
        return f"{row['admitted_in_window']}{f' ({n} degraded to local state)' if n else ''}"

    return {(row["contender"], row["layout"]): admitted(row) for row in doc["herd"]}


@figure("redis.herd.per_thread", REDIS)
def redis_herd_per_thread(doc: Results) -> str:
    """README's headline: every thread a single-request container, as on Lambda."""
    herd = _herd(doc)
    (row,) = [r for r in doc["herd"] if (r["contender"], r["layout"]) == (HERD_FLEET, PER_THREAD)]
    return (
        f"{herd[HERD_FLEET, PER_THREAD]} through fleetbreaker against "
        f"{herd[HERD_PYBREAKER, PER_THREAD]} through pybreaker, {row['callers']} containers "
        f"racing, a probe budget of {row['probe_budget']}"
    )


@figure("redis.pybreaker", REDIS)
def redis_pybreaker(doc: Results) -> str:
    over = doc["overhead"]["overhead_ns"]
    herd = _herd(doc)
    fleet, pybreaker = HERD_FLEET, HERD_PYBREAKER
    per_thread, per_process = PER_THREAD, PER_PROCESS
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


# --------------------------------------------------------------------------- the demo

DEMO = "demo_runs.json"  # bench/demo_runs.py folds the runs' fleet-demo.json into it


def _range(span: list[float] | None, sep: str = " – ") -> str:
    if span is None:
        return "none"
    low, high = span
    # Seconds keep their tenths (6.0, not 6); counts stay whole.
    one = (lambda x: f"{x:.1f}") if isinstance(low, float) or isinstance(high, float) else str
    return one(low) if one(low) == one(high) else f"{one(low)}{sep}{one(high)}"


@figure("demo.runs.conditions", DEMO)
def demo_runs_conditions(doc: Results) -> str:
    runs = doc["runs"]
    first, last = (date(stamp) for stamp in doc["date_utc"])
    when = first if first == last else f"{first} to {last}"
    loads = [load for run in runs for load in (run["loadavg_at_start"], run["loadavg_at_end"])]
    seconds = span((run["seconds"] for run in runs), 0, " s")
    passed = sum(run["exit_code"] == 0 for run in runs)
    return (
        ("1 run" if len(runs) == 1 else f"{len(runs)} runs")
        + " of `make demo`"
        + (" with its defaults" if doc["defaults"] else "")
        + f", {when}, {doc['cpu_count']} cores at load {load_span(loads)} (1-minute average "
        f"at each run's start and end), {seconds.replace('–', ' to ')} each; "
        f"{passed} of {len(runs)} exited 0"
    )


@figure("demo.runs.table", DEMO)
def demo_runs_table(doc: Results) -> str:
    lines = [
        "| | shared breaker (DynamoDB) | per-container breakers |",
        "|---|--:|--:|",
    ]
    sides = ("shared", "per_container")
    for row in doc["rows"]:
        cells = {side: _range(row[side]) for side in sides}
        for side in sides:
            if f"{side}_note" in row:
                cells[side] = f"0 ({row[f'{side}_note']})"
            if "probes_each" in row:
                cells[side] += f" × {_range(row['probes_each'][side], ' to ')}"
            missed = row.get("not_closed", {}).get(side, 0)
            if missed:
                cells[side] += f" (not closed in {missed} of {len(doc['runs'])} runs)"
        lines.append(f"| {row['figure']} | {cells['shared']} | {cells['per_container']} |")
    return "\n".join(lines)


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
    # Two decimals, as bench/layer_sizes.py and `make build` print them: a reader comparing
    # the README with a build of their own sees the same digits.
    full = span((row["full"] / 1e6 for row in compiled), 2)
    slim = span((row["slim"] / 1e6 for row in compiled), 2)
    return f"{full} MB and {slim} MB unzipped"


@figure("layers.python3.13", LAYERS)
def layers_python313(doc: Results) -> str:
    return _mb(doc["layers"]["python3.13"]["full"])


# --------------------------------------------------------------------------- scale

# bench/scale.py's results (bench/README.md says which command writes which file): the default
# run (seed 1), the 5,000-container runs the targets are about over seeds, the 60 % outage over
# seeds, and Lambda Managed Instances.
SCALE, SEEDS, RATE60, LMI = "scale.json", "scale_seeds.json", "scale_rate60.json", "scale_lmi.json"
TARGET_ARRIVALS = ("ramp100", "lambda")  # bench/scale.py's: those Lambda allows one function


def _runs(doc: Results, **match: Any) -> list[Results]:
    runs = [r for r in doc["results"] if all(r[k] == v for k, v in match.items())]
    if not runs:
        raise KeyError(f"no scale run with {match} (rerun bench/scale.py: bench/README.md)")
    return runs


def _count(n: float) -> str:
    return f"{n:,.0f}"


def _units(values: Iterable[float], bold_over: float | None = None) -> str:
    """min–max in whole units with thousands separators; the high end bold past a target."""
    ordered = sorted(values)
    low, high = _count(ordered[0]), _count(ordered[-1])
    if bold_over is not None and ordered[-1] > bold_over:
        high = f"**{high}**"
    return low if low == high else f"{low}–{high}"


def _of(runs: Iterable[Results], field: str) -> list[float]:
    return [float(r[field]) for r in runs]


def _scale_conditions(doc: Results) -> str:
    env = doc["environment"]
    low, high = env["loadavg_1min"]
    return f"{date(env['date_utc'])}, {env['cpu_count']} cores at load {low:g} to {high:g}"


def _seconds(value: float | None, limit: float) -> str:
    return f"> {limit:g}" if value is None else f"{value:.2f}"


def _meets(run: Results, targets: Results) -> str:
    ok = (
        run["peak_read_units_per_s"] <= targets["read_units_per_s"]
        and run["peak_write_units_per_s"] <= targets["write_units_per_s"]
    )
    if run["arrival"] in TARGET_ARRIVALS:
        return "yes" if ok else "NO"
    return "yes (outside target)" if ok else "no (outside target)"


@figure("scale.full.conditions", SCALE)
def scale_full_conditions(doc: Results) -> str:
    return f"{_scale_conditions(doc)}, `{doc['environment']['command']}`"


@figure("scale.full.table", SCALE)
def scale_full_table(doc: Results) -> str:
    """bench/scale.py's own table (its COLUMNS and table_rows), row for row."""
    targets = doc["targets"]
    lines = [
        "| store | containers | arrival | policy | noise | outage | seed | spurious trips | "
        "healthy rejected | s to open | s to fleet rejecting | failing calls sent | "
        "read units/s peak | read units/s mean | write units/s peak | write units/s mean | "
        "meets 2,400 / 1,000 (lambda, ramp100) |",
        "|" + "---|" * 17,
    ]
    for r in doc["results"]:
        outage_s = 10.0  # the default timeline's outage: a run that never opened shows "> 10"
        healthy = 100 * r["healthy_rejected"] / r["healthy_calls"] if r["healthy_calls"] else 0.0
        cells = [
            r["store"],
            f"{r['containers']:,}",
            r["arrival"] + (" shared reads" if r["refresh"] == "environment" else ""),
            r["policy"],
            f"{r['noise']:.1%}",
            f"{r['outage_share']:.0%}",
            str(r["seed"]),
            str(r["spurious_trips"]),
            f"{healthy:.1f} %",
            _seconds(r["seconds_to_open"], outage_s),
            _seconds(r["seconds_to_fleet_rejecting"], outage_s),
            f"{r['failing_calls_sent']:,}",
            _count(r["peak_read_units_per_s"]),
            _count(r["mean_read_units_per_s"]),
            _count(r["peak_write_units_per_s"]),
            _count(r["mean_write_units_per_s"]),
            _meets(r, targets),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@figure("scale.seeds.table", SEEDS, RATE60)
def scale_seeds_table(seeds: Results, rate60: Results) -> str:
    read_target = seeds["targets"]["read_units_per_s"]
    lines = [
        "| containers | arrival | policy | outage | s to open | s to fleet rejecting | "
        "spurious trips | read units/s peak | read units/s mean | write units/s peak | "
        "write units/s mean |",
        "|" + "---|" * 11,
    ]
    groups: dict[tuple[Any, ...], list[Results]] = {}
    for doc in (seeds, rate60):
        for r in doc["results"]:
            key = (r["containers"], r["arrival"], r["policy"], r["noise"], r["outage_share"])
            groups.setdefault(key, []).append(r)
    for (containers, arrival, policy, noise, share), runs in groups.items():
        label = f"{policy} (no noise)" if not noise else policy
        lines.append(
            f"| {containers:,} | {arrival} | {label} | {share:.0%} "
            f"| {span(_of(runs, 'seconds_to_open'), 2)} "
            f"| {span(_of(runs, 'seconds_to_fleet_rejecting'), 2)} "
            f"| {_units(_of(runs, 'spurious_trips'))} "
            f"| {_units(_of(runs, 'peak_read_units_per_s'), read_target)} "
            f"| {_units(_of(runs, 'mean_read_units_per_s'))} "
            f"| {_units(_of(runs, 'peak_write_units_per_s'))} "
            f"| {_units(_of(runs, 'mean_write_units_per_s'))} |"
        )
    return "\n".join(lines)


def _over(runs: list[Results], field: str, target: float) -> list[Results]:
    return [r for r in runs if r[field] > target]


def _unit_verdict(runs: list[Results], targets: Results) -> str:
    reads = _over(runs, "peak_read_units_per_s", targets["read_units_per_s"])
    writes = _over(runs, "peak_write_units_per_s", targets["write_units_per_s"])
    missed = {id(r): r for r in reads + writes}
    if not missed:
        return f"met in all {len(runs)} runs"
    return f"met in {len(runs) - len(missed)} of {len(runs)} runs"


@figure("scale.seeds.rate", SEEDS)
def scale_seeds_rate(doc: Results) -> str:
    runs = _runs(doc, policy="rate", containers=5000)
    return (
        f"{_unit_verdict(runs, doc['targets'])}: peak "
        f"{_units(_of(runs, 'peak_read_units_per_s'))} read units/s (mean "
        f"{_units(_of(runs, 'mean_read_units_per_s'))}), peak "
        f"{_units(_of(runs, 'peak_write_units_per_s'))} write units/s (mean "
        f"{_units(_of(runs, 'mean_write_units_per_s'))})"
    )


@figure("scale.seeds.count", SEEDS)
def scale_seeds_count(doc: Results) -> str:
    targets = doc["targets"]
    runs = _runs(doc, policy="count", containers=5000)
    over = _over(runs, "peak_read_units_per_s", targets["read_units_per_s"])
    rest = [r for r in runs if r not in over]
    text = _unit_verdict(runs, targets)
    if over:
        by = max(r["peak_read_units_per_s"] for r in over) - targets["read_units_per_s"]
        which = ", ".join(
            f"`{r['arrival']}`, seed {r['seed']}: {_count(r['peak_read_units_per_s'])}"
            for r in over
        )
        text += (
            f", missed in {len(over)} by {'' if len(over) == 1 else 'up to '}{_count(by)} "
            f"read units/s ({which}); "
            f"the other {len(rest)} peak at {_units(_of(rest, 'peak_read_units_per_s'))}"
        )
    else:
        text += f": reads peak at {_units(_of(runs, 'peak_read_units_per_s'))}"
    return (
        f"{text}. Writes peak at {_units(_of(runs, 'peak_write_units_per_s'))} "
        f"(mean {_units(_of(runs, 'mean_write_units_per_s'))})"
    )


@figure("scale.burst", SCALE)
def scale_burst(doc: Results) -> str:
    runs = _runs(doc, arrival="burst", containers=5000)
    count = _runs(doc, arrival="burst", containers=5000, policy="count", noise=0.0)
    rate = _runs(doc, arrival="burst", containers=5000, policy="rate", noise=0.005)
    rate2 = _runs(doc, arrival="burst", containers=5000, policy="rate", noise=0.02)
    return (
        f"read {_units(_of(runs, 'peak_read_units_per_s'))} units in that second under either "
        f"policy: each container's first read, half a unit, is the floor. Writes peak at "
        f"{_units(_of(count, 'peak_write_units_per_s'))} (count) and "
        f"{_units(_of(rate, 'peak_write_units_per_s'))} (rate; "
        f"{_units(_of(rate2, 'peak_write_units_per_s'))} at 2 % noise)"
    )


def _full_outage_rate(full: Results, seeds: Results, containers: int) -> list[Results]:
    """The rate policy's full-outage runs at a size: the seeded ones at 5,000 (the targets'
    arrivals, seed 1 among them), the default run's (every arrival and noise) below."""
    if containers == 5000:
        return _runs(seeds, policy="rate", containers=containers)
    return _runs(full, policy="rate", containers=containers, outage_share=1.0, noise=0.005)


@figure("scale.trip", SCALE, SEEDS)
def scale_trip(full: Results, seeds: Results) -> str:
    big = _full_outage_rate(full, seeds, 5000)
    mid = _full_outage_rate(full, seeds, 1000)
    small = _full_outage_rate(full, seeds, 100)

    def later(runs: list[Results]) -> str:
        return span((r["seconds_to_fleet_rejecting"] - r["seconds_to_open"] for r in runs), 1, " s")

    return (
        f"The rate policy opens {span(_of(big, 'seconds_to_open'), 2, ' s')} into a full outage "
        f"at 5,000 containers ({len(big)} runs), {span(_of(mid, 'seconds_to_open'), 2, ' s')} at "
        f"1,000 and {span(_of(small, 'seconds_to_open'), 2, ' s')} at 100 (seed 1, every arrival); "
        f"every container rejects {later(small)} later at 100, {later(mid)} at "
        f"1,000 and {later(big)} at 5,000"
    )


@figure("scale.partial", RATE60)
def scale_partial(doc: Results) -> str:
    runs = doc["results"]
    arrivals = sorted({r["arrival"] for r in runs})
    seeds = sorted({r["seed"] for r in runs})
    bound = doc["targets"]["partial_open_within_s"]
    windows = doc["targets"]["partial_open_within_windows"]
    opened = [99.0 if r["seconds_to_open"] is None else r["seconds_to_open"] for r in runs]
    return (
        f"opens the breaker {span(opened, 2, ' s')} in ({len(runs)} runs: {len(arrivals)} "
        f"arrivals × {len(seeds)} seeds), every container rejecting "
        f"{span(_of(runs, 'seconds_to_fleet_rejecting'), 2, ' s')} in, against the bound of "
        f"{windows:g} windows ({bound:g} s)"
    )


@figure("scale.partial.open", RATE60)
def scale_partial_open(doc: Results) -> str:
    runs = doc["results"]
    opened = [99.0 if r["seconds_to_open"] is None else r["seconds_to_open"] for r in runs]
    return (
        f"{span(opened, 2, ' s')} in ({runs[0]['containers']:,} containers, "
        f"{len(runs)} seeded runs)"
    )


@figure("scale.partial.healthy_writes", RATE60)
def scale_partial_healthy_writes(doc: Results) -> str:
    return f"{_units(_of(doc['results'], 'healthy_write_units_per_s'))} write units/s healthy"


@figure("scale.benchmarks.conditions", SEEDS, RATE60)
def scale_benchmarks_conditions(seeds: Results, rate60: Results) -> str:
    counts = {len({r["seed"] for r in doc["results"]}) for doc in (seeds, rate60)}
    each = " or ".join(str(n) for n in sorted(counts))
    return f"{date(seeds['environment']['date_utc'])} over {each} seeds each"


@figure("scale.benchmarks.table", SEEDS, RATE60)
def scale_benchmarks_table(seeds: Results, rate60: Results) -> str:
    targets = seeds["targets"]
    reads, writes = targets["read_units_per_s"], targets["write_units_per_s"]
    rate, count = _runs(seeds, policy="rate"), _runs(seeds, policy="count")

    def units(runs: list[Results]) -> str:
        return (
            f"{_units(_of(runs, 'peak_read_units_per_s'))} / "
            f"{_units(_of(runs, 'peak_write_units_per_s'))}"
        )

    def target(runs: list[Results]) -> str:
        text = f"≤ {_count(reads)} / ≤ {_count(writes)}"
        over = {
            id(r): r
            for r in _over(runs, "peak_read_units_per_s", reads)
            + _over(runs, "peak_write_units_per_s", writes)
        }
        if over:
            which = "; ".join(
                f"`{r['arrival']}`, seed {r['seed']}: {_count(r['peak_read_units_per_s'])} / "
                f"{_count(r['peak_write_units_per_s'])}"
                for r in over.values()
            )
            plural = "s" if len(over) > 1 else ""
            text += f": **missed in {len(over)} run{plural} of {len(runs)}** ({which})"
        return text

    opened = [
        99.0 if r["seconds_to_open"] is None else r["seconds_to_open"] for r in rate60["results"]
    ]
    arrivals = "`lambda` and `ramp100`"
    return "\n".join(
        [
            "| at | figure | measured | target |",
            "|---|---|---|---|",
            f"| 5,000 containers, {arrivals} arrivals, rate policy ({len(rate)} runs) | read / "
            f"write units per second on the item, peak over any second | {units(rate)} "
            f"| {target(rate)} |",
            f"| the same, count policy ({len(count)} runs) | the same | {units(count)} "
            f"| {target(count)} |",
            f"| 5,000 containers, full outage, rate policy ({len(rate)} runs) | seconds to open "
            f"| {span(_of(rate, 'seconds_to_open'), 2)} | ≤ {targets['open_within_s']:g} |",
            "| 2,000 containers, 60 % of calls failing, reports stretched, rate policy (every "
            f"arrival, {len(opened)} runs) | seconds to open | {span(opened, 2)} "
            f"| ≤ {rate60['targets']['partial_open_within_s']:g} "
            f"({rate60['targets']['partial_open_within_windows']:g} windows) |",
        ]
    )


@figure("scale.units", SEEDS)
def scale_units(doc: Results) -> str:
    targets = doc["targets"]
    text = (
        f"{_count(targets['write_units_per_s'])} write and "
        f"{_count(targets['read_units_per_s'])} read units/s"
    )
    missed = []
    for policy in ("count", "rate"):
        runs = _runs(doc, policy=policy)
        for field, what in (("peak_read_units_per_s", "read"), ("peak_write_units_per_s", "wrote")):
            kind = "read" if what == "read" else "write"
            over = _over(runs, field, targets[f"{kind}_units_per_s"])
            if over:
                missed.append(
                    f"the {policy} policy {what} {_units(_of(over, field))} in {len(over)} of "
                    f"{len(runs)} seeded runs"
                )
    return f"{text} ({'; '.join(missed)})" if missed else text


@figure("scale.noise", SCALE, SEEDS)
def scale_noise(full: Results, seeds: Results) -> str:
    noisy = _runs(full, policy="count", noise=0.005)
    tripped = sorted(r["containers"] for r in noisy if r["spurious_trips"])
    rate = [r for doc in (full, seeds) for r in _runs(doc, policy="rate") if r["outage_share"] == 1]
    spurious = [r for r in rate if r["spurious_trips"]]
    if not tripped:
        count_text = "the count policy never trips on noise"
    elif len(tripped) == len(noisy):
        count_text = (
            f"the count policy trips on noise at {tripped[0]:,} to {tripped[-1]:,} containers"
        )
    else:
        count_text = f"the count policy trips on noise in {len(tripped)} of {len(noisy)} runs"
    rate_text = "never does" if not spurious else f"does in {len(spurious)} of {len(rate)} runs"
    return (
        f"At 10,000 calls/s with 0.5 % errors {count_text}; the rate policy {rate_text} and "
        f"opens {span(_of(rate, 'seconds_to_open'), 0)}{' s'} into an outage"
    )


def _month(rows: list[Results]) -> str:
    return _units(r["per_month_healthy"] for r in rows)


@figure("scale.cost", SCALE)
def scale_cost(doc: Results) -> str:
    big = [c for c in doc["cost"] if c["containers"] == 5000]
    ddb = [c for c in big if c["store"].startswith("DynamoDB")]
    valkey = [c for c in big if not c["store"].startswith("DynamoDB")]
    return f"${_month(ddb)} vs ${_month(valkey)} a month"


@figure("scale.cost.redis", SCALE)
def scale_cost_redis(doc: Results) -> str:
    big = [c for c in doc["cost"] if c["containers"] == 5000]
    ddb = {c["policy"]: c for c in big if c["store"].startswith("DynamoDB")}
    valkey = [c for c in big if not c["store"].startswith("DynamoDB")]
    return (
        f"about ${_count(ddb['rate']['per_month_healthy'])} (rate policy) or "
        f"${_count(ddb['count']['per_month_healthy'])} (count policy) a month on DynamoDB "
        f"against ${_month(valkey)} on ElastiCache Serverless"
    )


@figure("scale.cost.table", SCALE)
def scale_cost_table(doc: Results) -> str:
    """bench/scale.py's cost table (cost_row), from the ``cost`` it wrote."""
    lines = [
        "| containers | policy | store | $ per 1M invocations, healthy | "
        "$ per 1M invocations, outage | $ per healthy hour | $ per outage hour | "
        "$ per month, healthy |",
        "|" + "---|" * 8,
    ]
    for c in doc["cost"]:
        cells = [
            f"{c['containers']:,}",
            c["policy"],
            c["store"],
            f"{c['per_million_invocations_healthy']:.4f}",
            f"{c['per_million_invocations_outage']:.4f}",
            f"{c['per_hour_healthy']:.2f}",
            f"{c['per_hour_outage']:.2f}",
            f"{c['per_month_healthy']:,.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@figure("scale.lmi.conditions", LMI)
def scale_lmi_conditions(doc: Results) -> str:
    seeds = sorted({r["seed"] for r in doc["results"]})
    return f"{_scale_conditions(doc)}; seeds {', '.join(map(str, seeds))}"


@figure("scale.lmi.table", LMI)
def scale_lmi_table(doc: Results) -> str:
    lines = [
        "| environments x processes | policy | per-process reads: mean / peak | "
        "shared reads: mean / peak | every process rejecting after a full outage "
        "(per-process / shared) |",
        "|---|---|---|---|---|",
    ]
    groups: dict[tuple[int, int, str], dict[str, list[Results]]] = {}
    for r in doc["results"]:
        key = (r["processes"], r["containers"], r["policy"])
        groups.setdefault(key, {}).setdefault(r["refresh"], []).append(r)
    for (processes, containers, policy), by in groups.items():
        environments = -(-containers // processes)

        def reads(runs: list[Results]) -> str:
            return (
                f"{_units(_of(runs, 'healthy_read_units_per_s'))} / "
                f"{_units(_of(runs, 'peak_read_units_per_s'))}"
            )

        own, shared = by["process"], by["environment"]
        lines.append(
            f"| {environments} x {processes} ({containers:,}) | {policy} | {reads(own)} "
            f"| {reads(shared)} | {span(_of(own, 'seconds_to_fleet_rejecting'), 2, ' s')} / "
            f"{span(_of(shared, 'seconds_to_fleet_rejecting'), 2, ' s')} |"
        )
    return "\n".join(lines)


def _to(text: str) -> str:
    return text.replace("–", " to ")


def _count_policy(full: Results, seeds: Results, containers: int) -> list[Results]:
    """The count policy's noiseless runs at a size: the default run's, and the seeded ones."""
    runs = _runs(full, policy="count", noise=0.0, containers=containers)
    if containers == 5000:
        runs += [r for r in _runs(seeds, policy="count") if r["seed"] != 1]
    return runs


@figure("scale.census.writes", SCALE, SEEDS)
def scale_census_writes(full: Results, seeds: Results) -> str:
    def healthy(containers: int, digits: int) -> str:
        runs = _count_policy(full, seeds, containers)
        return span(_of(runs, "healthy_write_units_per_s"), digits)

    return f"{healthy(100, 1)} units/s at 100 containers, {healthy(1000, 1)} at 1,000 and " + (
        f"{healthy(5000, 0)} at 5,000"
    )


@figure("scale.census.reads", SCALE, SEEDS)
def scale_census_reads(full: Results, seeds: Results) -> str:
    runs = _count_policy(full, seeds, 5000)
    return f"{_units(_of(runs, 'healthy_read_units_per_s'))} units/s at 5,000"


@figure("scale.census.fleet", SCALE, SEEDS)
def scale_census_fleet(full: Results, seeds: Results) -> str:
    small, mid, big = (_count_policy(full, seeds, n) for n in (100, 1000, 5000))
    return (
        f"At 100 containers every container rejects within "
        f"{span(_of(small, 'seconds_to_fleet_rejecting'), 2, ' s')} "
        f"({_units(_of(small, 'failing_calls_sent'))} failing calls). Past 300 containers its "
        "failures are thinned, so containers learn of a trip at their next refresh rather than "
        f"from their own failure's answer: at 1,000 containers "
        f"{_units(_of(mid, 'failing_calls_sent'))} failing calls reach the dependency before "
        f"every container rejects, within {span(_of(mid, 'seconds_to_fleet_rejecting'), 2, ' s')}"
        f" (write peak {_units(_of(mid, 'peak_write_units_per_s'))}); at 5,000, "
        f"{_units(_of(big, 'failing_calls_sent'))} within "
        f"{span(_of(big, 'seconds_to_fleet_rejecting'), 2, ' s')}"
    )


@figure("scale.census.cost", SCALE, SEEDS)
def scale_census_cost(full: Results, seeds: Results) -> str:
    per_unit_month = full["prices_assumed"]["dynamodb_per_million_write_units"] / 1e6 * 3600 * 730

    def units(containers: int) -> list[float]:
        return _of(_count_policy(full, seeds, containers), "healthy_write_units_per_s")

    sizes = ((100, 1), (1000, 1), (5000, 0))
    spans = [span(units(n), d) for n, d in sizes]
    dollars = [span((u * per_unit_month for u in units(n)), 1 if n == 100 else 0) for n, _ in sizes]
    return (
        f"{spans[0]}, {spans[1]} and {spans[2]} write units/s at 100, 1,000 and 5,000 "
        f"containers (about ${dollars[0]}, ${dollars[1]} and ${dollars[2]} a month)"
    )


@figure("scale.noise.writes", SCALE)
def scale_noise_writes(doc: Results) -> str:
    big, mid = (_runs(doc, policy="count", noise=0.005, containers=n) for n in (5000, 1000))
    return (
        f"writes peak at {_units(_of(big, 'peak_write_units_per_s'))} units/s at 5,000 and "
        f"{_units(_of(mid, 'peak_write_units_per_s'))} at 1,000"
    )


def _lmi(doc: Results, processes: int, **match: Any) -> list[Results]:
    return _runs(doc, processes=processes, **match)


@figure("scale.lmi.shared", LMI)
def scale_lmi_shared(doc: Results) -> str:
    shared = _lmi(doc, 64, refresh="environment")
    return f"{_to(_units(_of(shared, 'healthy_read_units_per_s')))} at 6,400 processes"


@figure("scale.lmi.fewer", LMI)
def scale_lmi_fewer(doc: Results) -> str:
    """Per-process over shared healthy reads, run by run (same processes, policy and seed)."""
    ratios = []
    for own in _runs(doc, refresh="process"):
        (shared,) = _runs(
            doc,
            refresh="environment",
            processes=own["processes"],
            policy=own["policy"],
            seed=own["seed"],
        )
        ratios.append(own["healthy_read_units_per_s"] / shared["healthy_read_units_per_s"])
    return f"{_to(span(ratios, 0))} times fewer read units"


@figure("scale.lmi.shared_peaks", LMI)
def scale_lmi_shared_peaks(doc: Results) -> str:
    peaks = [
        _units(_of(_lmi(doc, p, refresh="environment", policy="rate"), "peak_read_units_per_s"))
        for p in (16, 64)
    ]
    return f"({peaks[0]} and {peaks[1]})"


@figure("scale.lmi.busiest", LMI)
def scale_lmi_busiest(doc: Results) -> str:
    own = _lmi(doc, 64, refresh="process")
    return f"{_to(_units(_of(own, 'peak_read_units_per_s')))} units in its busiest second"


@figure("scale.lmi.writes", LMI)
def scale_lmi_writes(doc: Results) -> str:
    def healthy(processes: int, policy: str, refresh: str | None = None) -> list[float]:
        match = {"policy": policy} | ({"refresh": refresh} if refresh else {})
        return _of(_lmi(doc, processes, **match), "healthy_write_units_per_s")

    def more(processes: int) -> float:
        own, shared = (
            healthy(processes, "rate", "process"),
            healthy(processes, "rate", "environment"),
        )
        return 100 * (sum(shared) / len(shared) / (sum(own) / len(own)) - 1)

    return (
        f"healthy mean {_units(healthy(16, 'count'))} and {_units(healthy(64, 'count'))} write "
        f"units/s under the count policy at 16 and 64 processes, either way; the rate policy's "
        f"reports {_units(healthy(16, 'rate'))} and {_units(healthy(64, 'rate'))}, "
        f"{more(16):+.0f} % and {more(64):+.0f} % with shared reads at 16 and 64 processes"
    )


@figure("scale.lmi.start_writes", LMI)
def scale_lmi_start_writes(doc: Results) -> str:
    runs = _lmi(doc, 64)
    return f"{_to(_units(_of(runs, 'peak_write_units_per_s')))} write units on the item"


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


def expected(key: str, results: Path) -> str:
    """What the page must say for ``key``."""
    try:
        fig = FIGURES[key]
    except KeyError:
        raise KeyError(f"unknown figure {key!r}: register it in bench/figures.py") from None
    return fig.text(results)


def render_text(text: str, results: Path) -> str:
    def replace(match: re.Match[str]) -> str:
        key, quoted = match.group(1), match.group(2)
        wanted = expected(key, results)
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
            if quoted.strip("\n") != wanted:
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
