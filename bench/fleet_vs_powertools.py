"""fleetbreaker vs the Powertools circuit breaker, side by side in one run on one moto server.

    make bench
    .venv/bin/python bench/fleet_vs_powertools.py [--output PATH]

Figures, not pass/fail tests (see bench/README.md for what each one means):

(a) per-call overhead of a closed, warm, healthy breaker around a no-op (median ns/call);
(b) failing calls that reach the dependency before a fleet of N containers (worker processes,
    one thread each) is rejecting, N = 8 and 16;
(c) calls admitted in the first 300 ms of half-open while 16 containers × 4 threads race;
(d) store round trips per 1,000 healthy calls per container, spread over a few seconds.
Two extra rows repeat (b) and (d) with 4 threads per container.

Both contenders get the same thresholds, the same boto3 client settings and the same moto
server (devtools/servers.py's MotoServer, which serialises DynamoDB requests like real DynamoDB
serialises writes to an item). The table is printed and written as JSON to
bench/results/fleet_vs_powertools.json. Exit status: 0 when every figure was measured, whether
or not its target was met; 1 when the benchmark itself failed; 130 when interrupted.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make bench and devtools importable
    sys.path.insert(0, str(REPO_ROOT))

from bench import prepare_environment  # noqa: E402

DEFAULT_OUTPUT = REPO_ROOT / "bench" / "results" / "fleet_vs_powertools.json"
DEFAULT_OVERHEAD_OUTPUT = REPO_ROOT / "bench" / "results" / "overhead.json"

FLEET_SIZES = (8, 16)  # (b): containers
TRIP_THREADS = 1  # (b): threads per container (a Lambda container runs one request at a time)
EXTRA_TRIP = (16, 4)  # (b), informational: containers × threads
RACE_FLEET = (16, 4)  # (c): containers × threads racing
RACE_WINDOW = 0.3  # (c): the first seconds of half-open, whose admissions are the figure
RACE_SECONDS = 1.0  # (c): how long the threads keep racing after half-open begins
HEALTHY_FLEET = 8  # (d): containers (1 thread each)
HEALTHY_EXTRA_THREADS = 4  # (d+), informational: the same calls shared by 4 threads
HEALTHY_CALLS = 1000  # (d): calls per container
HEALTHY_SECONDS = 3.0  # (d): ...spread evenly over this long
FLEET_RATE = "fleetbreaker (rate + slow calls)"
FLEET_OTEL = "fleetbreaker (OpenTelemetry listener)"
# The floor: a bare decorator that reads the breaker's clock and compares it with a cached
# deadline, all a closed breaker must do (a cache of the fleet's record, fresh until then).
FLOOR = "floor (clock read, cached deadline)"
# The standing targets of a closed breaker's overhead, as ratios to Powertools' measured in
# the same run: the count policy, the rate policy with slow calls, and the count policy with
# the OpenTelemetry listener attached (no span recording).
OVERHEAD_TARGET = 0.25
OVERHEAD_RATE_TARGET = 0.35
OVERHEAD_OTEL_TARGET = 0.3
# The count policy's closed path against the floor, and the async path's overhead (over a
# plain await of the same coroutine) against the sync path's, both measured in the same run.
OVERHEAD_FLOOR_TARGET = 3.0
OVERHEAD_ASYNC_TARGET = 2.0
OVERHEAD_BLOCKS = 30  # (a): interleaved blocks per contender
OVERHEAD_BLOCK_CALLS = 4000  # (a): individually timed calls per block


def _unique(label: str) -> str:
    return f"bench-{label}-{uuid.uuid4().hex[:8]}"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- (a)


def measure_overhead(container: Any, thresholds: Any) -> dict[str, Any]:
    """Median ns of one call: bare no-op, and each contender's decorator around it."""
    import dataclasses

    from bench import workers as w

    # The rate policy with slow-call detection: the most the hot path does.
    rate = dataclasses.replace(
        thresholds.fleetbreaker(), failure_rate_threshold=0.5, slow_call_duration=1.0
    )
    from fleetbreaker.events import LoggingListener
    from fleetbreaker.tracing import OpenTelemetryListener

    # The OpenTelemetry listener attached (as default_listeners() attaches it under the ADOT
    # layer) with no span recording: what a function pays outside sampled traces.
    otel = [LoggingListener(), OpenTelemetryListener()]
    guards = {
        "bare": w.noop,
        w.FLEET: container.guard(w.FLEET, _unique("overhead"), thresholds, w.noop).call,
        FLEET_OTEL: container.guard(
            w.FLEET, _unique("overhead-otel"), thresholds, w.noop, listeners=otel
        ).call,
        FLEET_RATE: container.guard(
            w.FLEET, _unique("overhead-rate"), thresholds, w.noop, config=rate
        ).call,
        w.POWERTOOLS: container.guard(w.POWERTOOLS, _unique("overhead"), thresholds, w.noop).call,
        FLOOR: floor_guard(w.noop),
    }
    samples: dict[str, list[int]] = {name: [] for name in guards}
    for fn in guards.values():
        for _ in range(2000):  # warm: caches filled, code paths hot
            fn()
    clock = time.perf_counter_ns
    order = list(guards)
    gc.collect()
    started = time.perf_counter()
    for block in range(OVERHEAD_BLOCKS):
        # Interleaved, alternating order: background load hits every contender alike.
        for name in order if block % 2 == 0 else order[::-1]:
            fn, out = guards[name], samples[name]
            for _ in range(OVERHEAD_BLOCK_CALLS):
                t0 = clock()
                fn()
                out.append(clock() - t0)
    elapsed = time.perf_counter() - started
    median = {name: statistics.median(values) for name, values in samples.items()}
    p90 = {name: _percentile(values, 0.9) for name, values in samples.items()}
    overhead = {
        name: median[name] - median["bare"]
        for name in (w.FLEET, FLEET_RATE, FLEET_OTEL, w.POWERTOOLS, FLOOR)
    }
    async_ns = measure_async_overhead(container, thresholds)
    return {
        "async_median_ns": async_ns,
        "async_overhead_ns": async_ns["fleetbreaker"] - async_ns["bare"],
        "ratio_floor": overhead[w.FLEET] / overhead[FLOOR],
        "ratio_async": (async_ns["fleetbreaker"] - async_ns["bare"]) / overhead[w.FLEET],
        "calls_per_contender": OVERHEAD_BLOCKS * OVERHEAD_BLOCK_CALLS,
        "seconds": round(elapsed, 2),
        "median_ns": median,
        "p90_ns": p90,
        "overhead_ns": overhead,
        "ratio": overhead[w.FLEET] / overhead[w.POWERTOOLS],
        "ratio_rate": overhead[FLEET_RATE] / overhead[w.POWERTOOLS],
        "ratio_otel": overhead[FLEET_OTEL] / overhead[w.POWERTOOLS],
    }


def floor_guard(fn: Any) -> Any:
    """The floor: what any closed breaker must do per call, and nothing more."""
    import functools

    from fleetbreaker.clock import system_clock

    clock = system_clock
    fresh_until = [clock() + 3_600_000]

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if clock() < fresh_until[0]:
            return fn(*args, **kwargs)
        raise RuntimeError("stale (never, in this benchmark)")

    return guarded


async def _noop_async() -> None:
    return None


def measure_async_overhead(container: Any, thresholds: Any) -> dict[str, float]:
    """Median ns of one awaited call: a plain await of a no-op coroutine, and the same
    coroutine function under @breaker (count policy), in one event loop, interleaved."""
    import asyncio

    from bench import workers as w

    guarded = container.guard(w.FLEET, _unique("overhead-async"), thresholds, _noop_async).call
    contenders = {"bare": _noop_async, "fleetbreaker": guarded}
    samples: dict[str, list[int]] = {name: [] for name in contenders}
    clock = time.perf_counter_ns

    async def measure() -> None:
        for fn in contenders.values():
            for _ in range(2000):  # warm
                await fn()
        order = list(contenders)
        for block in range(OVERHEAD_BLOCKS):
            for name in order if block % 2 == 0 else order[::-1]:
                fn, out = contenders[name], samples[name]
                for _ in range(OVERHEAD_BLOCK_CALLS):
                    t0 = clock()
                    await fn()
                    out.append(clock() - t0)

    gc.collect()
    asyncio.run(measure())
    return {name: statistics.median(values) for name, values in samples.items()}


def _percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


# --------------------------------------------------------------------------- (b)


def measure_trip(
    pool: Any, kind: str, workers: int, threads: int, thresholds: Any
) -> dict[str, Any]:
    cmd = {
        "phase": "trip",
        "kind": kind,
        "name": _unique(f"trip{workers}x{threads}"),
        "thresholds": thresholds,
        "workers": workers,
        "threads": threads,
        "max_seconds": 30.0,
    }
    payloads = pool.run(cmd, workers, _aligned_start)
    firsts = [t for p in payloads for t in p["first_reject_s"]]
    return {
        "kind": kind,
        "workers": workers,
        "threads": threads,
        "dependency_calls": pool.dependency_calls.value,
        "per_container": [p["dependency_calls"] for p in payloads],
        "all_rejecting": len(firsts) == workers * threads,
        "seconds_until_fleet_rejecting": round(max(firsts), 3) if firsts else None,
        "admitted_after_first_reject": sum(p["admitted_after_first_reject"] for p in payloads),
        "store_reads": sum(p["store"]["reads"] for p in payloads),
        "store_writes": sum(p["store"]["writes"] for p in payloads),
        "degradations": sum(p["degradations"] for p in payloads),
    }


def _aligned_start() -> dict[str, float]:
    """Warm every container just after a whole second, start the outage 0.25 s later."""
    warm_at = math.ceil(time.time() + 0.05) + 0.02
    return {"warm_at": warm_at, "start_at": warm_at + 0.25}


# --------------------------------------------------------------------------- (c)


def measure_race(
    pool: Any, container: Any, kind: str, workers: int, threads: int, thresholds: Any
) -> dict[str, Any]:
    from bench import workers as w

    name = _unique("race")
    cmd = {
        "phase": "race",
        "kind": kind,
        "name": name,
        "thresholds": thresholds,
        "threads": threads,
        "race_seconds": RACE_SECONDS,
    }
    moment: dict[str, float] = {}

    def go() -> dict[str, Any]:
        # Every container is ready (breaker built, cache empty for this name): open the
        # breaker from this process, then let the fleet call it until the window is over.
        w.trip(container, kind, name, thresholds)
        moment["tripped_at"] = time.time()
        moment["half_open_at"] = container.half_open_at(kind, name, thresholds)
        return {"half_open_at": moment["half_open_at"]}

    payloads = pool.run(cmd, workers, go)
    start = moment["half_open_at"]
    entries = sorted(e for p in payloads for e in p["entries"])
    after = [e for e in entries if e >= start]
    return {
        "kind": kind,
        "workers": workers,
        "threads": threads,
        "open_seconds": round(start - moment["tripped_at"], 3),
        "admitted_in_window": sum(1 for e in after if e < start + RACE_WINDOW),
        "admitted_in_race": sum(1 for e in after if e < start + RACE_SECONDS),
        "admitted_before_half_open": len(entries) - len(after),
        "first_admission_ms_after_half_open": (
            round((after[0] - start) * 1000, 1) if after else None
        ),
        "rejections": sum(p["rejections"] for p in payloads),
        "store_reads": sum(p["store"]["reads"] for p in payloads),
        "store_writes": sum(p["store"]["writes"] for p in payloads),
        "degradations": sum(p["degradations"] for p in payloads),
    }


# --------------------------------------------------------------------------- (d)


def measure_healthy(
    pool: Any, kind: str, workers: int, threads: int, thresholds: Any
) -> dict[str, Any]:
    cmd = {
        "phase": "healthy",
        "kind": kind,
        "name": _unique("healthy"),
        "thresholds": thresholds,
        "calls": HEALTHY_CALLS,
        "seconds": HEALTHY_SECONDS,
        "threads": threads,
    }
    payloads = pool.run(cmd, workers, lambda: {"start_at": time.time() + 0.3})
    # Per container, reads scaled to 1,000 calls, against the allowance for its own span.
    reads = [p["store"]["reads"] * 1000 / p["calls"] for p in payloads]
    writes = [p["store"]["writes"] * 1000 / p["calls"] for p in payloads]
    spans = [p["span_s"] for p in payloads]
    allowed = [_read_allowance(span, thresholds.cache_ttl) for span in spans]
    client_reads = [p["client"]["reads"] for p in payloads]
    return {
        "kind": kind,
        "workers": workers,
        "threads": threads,
        "calls_per_container": HEALTHY_CALLS,
        "span_s": [round(s, 3) for s in spans],
        "reads_per_1000": reads,
        "writes_per_1000": writes,
        "read_allowance": allowed,
        "reads_within_allowance": all(r <= a for r, a in zip(reads, allowed, strict=True)),
        "client_hook_reads": client_reads,
        "client_hook_writes": [p["client"]["writes"] for p in payloads],
        "degradations": sum(p["degradations"] for p in payloads),
    }


def _read_allowance(span_s: float, cache_ttl: float) -> int:
    """≤ 1 read per cache_ttl: calls spanning T seconds may read ceil(T / cache_ttl) times
    (the first call of a cold breaker reads, then one read per elapsed cache_ttl)."""
    return max(1, -(-round(span_s * 1000) // round(cache_ttl * 1000)))


# --------------------------------------------------------------------------- report


def build_rows(results: dict[str, Any], thresholds: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary table: one row per figure; `met` is fleetbreaker against its target."""
    threshold = thresholds["trip"]["failure_threshold"]
    rows: list[dict[str, Any]] = []
    a = results["a_overhead"]
    rows.append(
        {
            "id": "a",
            "metric": "(a) closed breaker around a no-op: overhead, median ns/call",
            "fleetbreaker": round(a["overhead_ns"]["fleetbreaker"]),
            "powertools": round(a["overhead_ns"]["powertools"]),
            "ratio": a["ratio"],
            "target": f"≤ {OVERHEAD_TARGET} × Powertools",
            "met": a["ratio"] <= OVERHEAD_TARGET,
        }
    )
    rows.append(
        {
            "id": "a_rate",
            "metric": "(a) same, rate policy with slow-call detection on",
            "fleetbreaker": round(a["overhead_ns"][FLEET_RATE]),
            "powertools": round(a["overhead_ns"]["powertools"]),
            "ratio": a["ratio_rate"],
            "target": f"≤ {OVERHEAD_RATE_TARGET} × Powertools",
            "met": a["ratio_rate"] <= OVERHEAD_RATE_TARGET,
        }
    )
    rows.append(
        {
            "id": "a_otel",
            "metric": "(a) same, count policy, OpenTelemetry listener attached, no span recording",
            "fleetbreaker": round(a["overhead_ns"][FLEET_OTEL]),
            "powertools": round(a["overhead_ns"]["powertools"]),
            "ratio": a["ratio_otel"],
            "target": f"≤ {OVERHEAD_OTEL_TARGET} × Powertools",
            "met": a["ratio_otel"] <= OVERHEAD_OTEL_TARGET,
        }
    )
    rows.append(
        {
            "id": "a_floor",
            "metric": "(a) same, count policy, against the floor (clock read, cached deadline)",
            "fleetbreaker": round(a["overhead_ns"]["fleetbreaker"]),
            "powertools": None,
            "ratio": a["ratio_floor"],
            "target": f"≤ {OVERHEAD_FLOOR_TARGET} × floor ({round(a['overhead_ns'][FLOOR])} ns)",
            "met": a["ratio_floor"] <= OVERHEAD_FLOOR_TARGET,
        }
    )
    rows.append(
        {
            "id": "a_async",
            "metric": "(a) awaited: @breaker on an async def over a plain await, count policy",
            "fleetbreaker": round(a["async_overhead_ns"]),
            "powertools": None,
            "ratio": a["ratio_async"],
            "target": f"≤ {OVERHEAD_ASYNC_TARGET} × the sync overhead",
            "met": a["ratio_async"] <= OVERHEAD_ASYNC_TARGET,
        }
    )
    for b in results["b_trip"]:
        fb, pt = b["fleetbreaker"], b["powertools"]
        n, t = fb["workers"], fb["threads"]
        extra = t != TRIP_THREADS
        metric = (
            f"(b+) same, N={n} × {t} threads each (extra)"
            if extra
            else f"(b) failing calls reaching the dependency, N={n} (1 thread each)"
        )
        rows.append(
            {
                "id": f"b{n}x{t}",
                "metric": metric,
                "fleetbreaker": fb["dependency_calls"],
                "powertools": pt["dependency_calls"],
                "ratio": fb["dependency_calls"] / max(pt["dependency_calls"], 1),
                "target": (
                    f"≤ {threshold + n * t} (threshold+N×{t})"
                    if extra
                    else f"≤ {threshold + n} (threshold+N)"
                ),
                "met": fb["dependency_calls"] <= threshold + n * t and fb["all_rejecting"],
            }
        )
    fb, pt = results["c_race"]["fleetbreaker"], results["c_race"]["powertools"]
    budget = thresholds["race"]["probe_budget"]
    rows.append(
        {
            "id": "c",
            "metric": (
                f"(c) calls admitted in first {round(RACE_WINDOW * 1000)} ms of half-open "
                f"({fb['workers']}×{fb['threads']} racing)"
            ),
            "fleetbreaker": fb["admitted_in_window"],
            "powertools": pt["admitted_in_window"],
            "ratio": None,
            "target": f"= {budget} (probe budget)",
            "met": fb["admitted_in_window"] == budget and fb["admitted_before_half_open"] == 0,
        }
    )
    for d in results["d_healthy"]:
        fb, pt = d["fleetbreaker"], d["powertools"]
        t = fb["threads"]
        label = "(d)" if t == 1 else "(d+)"
        how = f"worst of {fb['workers']}" if t == 1 else f"{t} threads each, extra"
        allowance = max(fb["read_allowance"])
        fb_reads, pt_reads = max(fb["reads_per_1000"]), max(pt["reads_per_1000"])
        rows.append(
            {
                "id": f"d_reads_{t}",
                "metric": f"{label} store reads per 1,000 healthy calls per container ({how})",
                "fleetbreaker": _num(fb_reads),
                "powertools": _num(pt_reads),
                "ratio": fb_reads / pt_reads if pt_reads else None,
                "target": f"≤ {allowance} ({HEALTHY_SECONDS:g} s / cache_ttl)",
                "met": fb["reads_within_allowance"],
            }
        )
        rows.append(
            {
                "id": f"d_writes_{t}",
                "metric": f"{label} store writes per 1,000 healthy calls per container",
                "fleetbreaker": _num(max(fb["writes_per_1000"])),
                "powertools": _num(max(pt["writes_per_1000"])),
                "ratio": None,
                "target": "= 0",
                "met": max(fb["writes_per_1000"]) == 0,
            }
        )
    return rows


def _num(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(value, 2)


def format_table(rows: list[dict[str, Any]]) -> str:
    header = ("metric", "fleetbreaker", "powertools", "ratio / target", "met?")
    cells = [
        (
            r["metric"],
            str(r["fleetbreaker"]),
            "–" if r["powertools"] is None else str(r["powertools"]),
            f"{'–' if r['ratio'] is None else format(r['ratio'], '.2f')} / {r['target']}",
            "yes" if r["met"] else "NO",
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [header, *cells]) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        parts = [
            row[i].ljust(widths[i]) if i in (0, 3) else row[i].rjust(widths[i])
            for i in range(len(row))
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(c) for c in cells)])


def details(results: dict[str, Any]) -> list[str]:
    """Supporting figures: where the time and the store round trips went."""
    out = [
        "ratio = fleetbreaker / powertools; met? = fleetbreaker against its target. "
        "Powertools is expected at ≈ threshold × N in (b), and up to threshold × N × "
        "threads in (b+) (each tripping thread writes OPEN before caching it)."
    ]
    a = results["a_overhead"]
    out.append(
        "(a) median ns/call incl. timer: bare {bare:.0f}, fleetbreaker {fb:.0f}, "
        "powertools {pt:.0f} ({n:,} calls each, interleaved)".format(
            bare=a["median_ns"]["bare"],
            fb=a["median_ns"]["fleetbreaker"],
            pt=a["median_ns"]["powertools"],
            n=a["calls_per_contender"],
        )
    )
    for b in results["b_trip"]:
        for kind in ("fleetbreaker", "powertools"):
            r = b[kind]
            out.append(
                f"(b) {r['workers']}×{r['threads']} {kind}: fleet rejecting after "
                f"{r['seconds_until_fleet_rejecting']} s; per container "
                f"{r['per_container']}; store reads/writes {r['store_reads']}/"
                f"{r['store_writes']}; admitted after a rejection "
                f"{r['admitted_after_first_reject']}; degradations {r['degradations']}"
            )
    for kind in ("fleetbreaker", "powertools"):
        r = results["c_race"][kind]
        out.append(
            f"(c) {kind}: open {r['open_seconds']} s; first admission "
            f"{r['first_admission_ms_after_half_open']} ms into half-open; admitted in the "
            f"first {RACE_SECONDS:g} s {r['admitted_in_race']}, before half-open "
            f"{r['admitted_before_half_open']}; rejections {r['rejections']}; "
            f"store reads/writes {r['store_reads']}/{r['store_writes']}"
        )
    for d in results["d_healthy"]:
        for kind in ("fleetbreaker", "powertools"):
            r = d[kind]
            out.append(
                f"(d) {r['workers']}×{r['threads']} {kind}: reads per container "
                f"{[_num(x) for x in r['reads_per_1000']]} (botocore hook "
                f"{r['client_hook_reads']}), spans {r['span_s']} s"
            )
    return out


def _git_state() -> dict[str, Any]:
    """The commit measured, and whether the package's source differs from it."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    status = git("status", "--porcelain", "--", "layer")
    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "layer_dirty": bool(status) if status is not None else None,
    }


def environment_info() -> dict[str, Any]:
    versions = {}
    for package in ("fleetbreaker", "aws-lambda-powertools", "boto3", "botocore", "moto"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git": _git_state(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "versions": versions,
    }


# --------------------------------------------------------------------------- main


TARGETS = {
    "ratio": OVERHEAD_TARGET,
    "ratio_rate": OVERHEAD_RATE_TARGET,
    "ratio_otel": OVERHEAD_OTEL_TARGET,
    "ratio_floor": OVERHEAD_FLOOR_TARGET,
    "ratio_async": OVERHEAD_ASYNC_TARGET,
}


def _overhead_only(
    container: Any, thresholds: Any, info: dict[str, Any], repeat: int, output: Path
) -> int:
    """(a) alone, `repeat` times in a row: the spread between runs is the figure's spread.

    Docs quote (a) as a min-max over runs, never one run, because this machine's load moves
    the nanoseconds (not the ratios) by a factor of two through the day.
    """
    runs: list[dict[str, Any]] = []
    for index in range(repeat):
        _log(f"(a) per-call overhead, run {index + 1} of {repeat}...")
        load_before = [round(x, 2) for x in os.getloadavg()]
        a = measure_overhead(container, thresholds)
        a["loadavg"] = [load_before, [round(x, 2) for x in os.getloadavg()]]
        runs.append(a)
        print(f"(a) run {index + 1}, load {a['loadavg'][0]} -> {a['loadavg'][1]}; overhead ns")
        for name, ns in a["overhead_ns"].items():
            print(f"  {name:<40} {ns:>8.0f}")
        print(f"  ratio count {a['ratio']:.3f} (target {OVERHEAD_TARGET})")
        print(f"  ratio rate + slow calls {a['ratio_rate']:.3f} (target {OVERHEAD_RATE_TARGET})")
        print(
            f"  ratio OpenTelemetry listener {a['ratio_otel']:.3f} (target {OVERHEAD_OTEL_TARGET})"
        )
        print(f"  ratio count / floor {a['ratio_floor']:.3f} (target {OVERHEAD_FLOOR_TARGET})")
        print(
            f"  async overhead {a['async_overhead_ns']:.0f} ns, / sync "
            f"{a['ratio_async']:.3f} (target {OVERHEAD_ASYNC_TARGET})"
        )
    if output is not None:
        info["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
        document = {
            "benchmark": "fleet_vs_powertools_overhead",
            "environment": info,
            "thresholds": thresholds.as_dict(),
            "targets": TARGETS,
            "runs": runs,
        }
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(document, indent=2) + "\n")
        print(f"\nJSON: {output}")
    return 0


def run(output: Path, overhead_only: bool = False, repeat: int = 1) -> int:
    from bench import workers as w
    from devtools.servers import MotoServer, make_table

    info = environment_info()
    trip_thresholds = w.Thresholds(failure_threshold=5, recovery_timeout=30, cache_ttl=1)
    race_thresholds = w.Thresholds(failure_threshold=5, recovery_timeout=2, cache_ttl=1)
    thresholds = {"trip": trip_thresholds.as_dict(), "race": race_thresholds.as_dict()}
    started = time.monotonic()
    server = MotoServer()
    pool = None
    results: dict[str, Any] = {}
    try:
        server.start()
        _log(f"moto server on {server.endpoint_url} (pid {server.pid})")
        endpoint = w.Endpoint(
            server.endpoint_url,
            make_table(server.endpoint_url, "bench-fleetbreaker-circuits"),
            w.make_powertools_table(server.endpoint_url),
        )
        container = w.Container(endpoint)  # this process: (a), and the trips of (c)
        container.warm_connections()

        if overhead_only:
            return _overhead_only(container, trip_thresholds, info, repeat, output)
        _log("(a) per-call overhead...")
        results["a_overhead"] = measure_overhead(container, trip_thresholds)

        size = max(*FLEET_SIZES, EXTRA_TRIP[0], RACE_FLEET[0], HEALTHY_FLEET)
        _log(f"starting {size} worker processes (spawn)...")
        pool = w.Pool(size, endpoint)
        pool.start()

        results["b_trip"] = []
        for workers, threads in [*((n, TRIP_THREADS) for n in FLEET_SIZES), EXTRA_TRIP]:
            row = {}
            for kind in w.KINDS:
                _log(f"(b) {kind}: {workers} containers × {threads} thread(s)...")
                row[kind] = measure_trip(pool, kind, workers, threads, trip_thresholds)
            results["b_trip"].append(row)

        results["c_race"] = {}
        for kind in w.KINDS:
            _log(f"(c) {kind}: half-open race, {RACE_FLEET[0]} × {RACE_FLEET[1]} threads...")
            results["c_race"][kind] = measure_race(
                pool, container, kind, RACE_FLEET[0], RACE_FLEET[1], race_thresholds
            )

        results["d_healthy"] = []
        for threads in (1, HEALTHY_EXTRA_THREADS):
            row = {}
            for kind in w.KINDS:
                _log(
                    f"(d) {kind}: {HEALTHY_CALLS} healthy calls × {HEALTHY_FLEET} containers"
                    f" × {threads} thread(s)..."
                )
                row[kind] = measure_healthy(pool, kind, HEALTHY_FLEET, threads, trip_thresholds)
            results["d_healthy"].append(row)
    finally:
        if pool is not None:
            pool.close()
        server.stop()

    info["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    info["runtime_s"] = round(time.monotonic() - started, 1)
    rows = build_rows(results, thresholds)
    print()
    git = info["git"]
    print(
        f"fleetbreaker {git['commit']}{' (layer/ modified)' if git['layer_dirty'] else ''} "
        f"vs Powertools {info['versions']['aws-lambda-powertools']} circuit breaker — "
        f"{info['date_utc']}, {info['cpu_count']} cores, load {info['loadavg_at_start']} → "
        f"{info['loadavg_at_end']}, {info['runtime_s']} s"
    )
    print(
        f"thresholds: failure_threshold {trip_thresholds.failure_threshold}, cache "
        f"{trip_thresholds.cache_ttl} s, probe budget {race_thresholds.probe_budget}; "
        f"recovery_timeout {trip_thresholds.recovery_timeout} s ((a), (b), (d)), "
        f"{race_thresholds.recovery_timeout} s ((c))"
    )
    print()
    print(format_table(rows))
    print()
    for line in details(results):
        print(line)
    output.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": "fleet_vs_powertools",
        "environment": info,
        "thresholds": thresholds,
        "targets": TARGETS,
        "fleet": {
            "b_threads_per_container": TRIP_THREADS,
            "b_extra": list(EXTRA_TRIP),
            "c_containers_threads": list(RACE_FLEET),
            "c_window_s": RACE_WINDOW,
            "c_race_s": RACE_SECONDS,
            "d_containers": HEALTHY_FLEET,
            "d_extra_threads": HEALTHY_EXTRA_THREADS,
            "d_calls": HEALTHY_CALLS,
            "d_seconds": HEALTHY_SECONDS,
        },
        "table": rows,
        "results": results,
    }
    output.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nJSON: {output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"JSON file to write ({DEFAULT_OUTPUT.name}, or with --overhead-only "
        f"{DEFAULT_OVERHEAD_OUTPUT.name}, in bench/results)",
    )
    parser.add_argument(
        "--overhead-only",
        action="store_true",
        help="measure (a) alone (no worker fleet): about a minute a run",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="with --overhead-only: runs of (a) in a row, for the spread the docs quote (1)",
    )
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    if args.output is None:
        args.output = DEFAULT_OVERHEAD_OUTPUT if args.overhead_only else DEFAULT_OUTPUT
    prepare_environment()
    os.environ.pop("POWERTOOLS_CIRCUIT_BREAKER_DISABLED", None)

    def terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminate)
    try:
        return run(args.output, args.overhead_only, args.repeat)
    except KeyboardInterrupt:
        _log("interrupted: workers and the moto server were stopped")
        return 130


if __name__ == "__main__":
    sys.exit(main())
