"""fleetbreaker on Redis vs on DynamoDB, and vs pybreaker's Redis storage, on one redis-server.

    .venv/bin/python bench/redis_vs_dynamodb.py [--output PATH]

Figures, not pass/fail tests. Everything runs on loopback: one redis-server and one moto
server, started here on free ports (devtools/servers.py) and stopped at the end.

(a) Cache miss: a decision (``CircuitBreaker.check()`` with ``cache_ttl=0``) costs one store
    round trip: one EVALSHA on RedisStore, one GetItem on DynamoDBStore (moto's server).
    Median, p90 and p99 in microseconds, interleaved blocks; with a counted failure (one write)
    and a bare redis PING as the floor of a Redis round trip.
(b) Per-call overhead of a closed, warm, healthy breaker around a no-op, median ns per call
    minus the bare call: fleetbreaker on RedisStore (cache_ttl 1 s) vs pybreaker with
    ``CircuitRedisStorage``, both on the same redis-server.
(c) Herd: 16 processes × 8 threads call the dependency as soon as the open window ends; the
    recovering dependency holds each caller for 300 ms and then fails. The figure is how many
    calls reached it in those 300 ms; the target is exactly the probe budget (1). Measured with
    one breaker per process shared by its threads (a module-level breaker), and with one per
    thread (every thread a single-request container, as Lambda runs them).

The table is printed; the JSON goes to bench/results/redis_vs_dynamodb.json.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import multiprocessing
import os
import platform
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make bench and devtools importable
    sys.path.insert(0, str(REPO_ROOT))

from bench import prepare_environment  # noqa: E402

DEFAULT_OUTPUT = REPO_ROOT / "bench" / "results" / "redis_vs_dynamodb.json"
CTX = multiprocessing.get_context("spawn")

LATENCY_BLOCKS, LATENCY_BLOCK_CALLS = 20, 100  # (a): per store, interleaved
OVERHEAD_BLOCKS, OVERHEAD_BLOCK_CALLS = 20, 1000  # (b): per contender, interleaved
HERD_PROCESSES, HERD_THREADS = 16, 8  # (c)
HERD_WINDOW = 0.3  # (c): seconds the recovering dependency holds each caller
HERD_REJECTED_PAUSE = 0.005  # (c): a rejected caller tries again after this long
HERD_OPEN_SECONDS = 3  # (c): open window; long enough for every worker to get ready
PROBE_BUDGET = 1
FAILURE_THRESHOLD = 5

FLEET, PYBREAKER = "fleetbreaker", "pybreaker"
PER_PROCESS, PER_THREAD = "one breaker per process", "one breaker per thread"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _unique(label: str) -> str:
    return f"bench-{label}-{uuid.uuid4().hex[:8]}"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary_us(samples_ns: list[int]) -> dict[str, float]:
    us = [s / 1000 for s in samples_ns]
    return {
        "median_us": round(statistics.median(us), 1),
        "p90_us": round(_percentile(us, 0.9), 1),
        "p99_us": round(_percentile(us, 0.99), 1),
        "samples": len(us),
    }


def _interleaved(
    fns: dict[str, Callable[[], Any]], blocks: int, calls: int
) -> dict[str, list[int]]:
    """Time every call of every contender, in alternating blocks so background load is shared."""
    samples: dict[str, list[int]] = {name: [] for name in fns}
    order = list(fns)
    clock = time.perf_counter_ns
    gc.collect()
    for block in range(blocks):
        for name in order if block % 2 == 0 else order[::-1]:
            fn, out = fns[name], samples[name]
            for _ in range(calls):
                t0 = clock()
                fn()
                out.append(clock() - t0)
    return samples


def noop() -> None:
    return None


# --------------------------------------------------------------------------- (a)


def measure_cache_miss(redis_url: str, moto_url: str) -> dict[str, Any]:
    import redis

    from devtools import servers
    from fleetbreaker import BreakerConfig, CircuitBreaker, DynamoDBStore, RedisStore

    uncached = BreakerConfig(cache_ttl=0, failure_threshold=10**9)
    redis_store = RedisStore(url=redis_url)
    table = servers.make_table(moto_url)
    dynamo_store = DynamoDBStore(table, boto3_client=servers.dynamodb_client(moto_url))
    breakers = {
        "redis": CircuitBreaker(_unique("miss"), store=redis_store, config=uncached),
        "dynamodb": CircuitBreaker(_unique("miss"), store=dynamo_store, config=uncached),
    }
    ping = redis.Redis.from_url(redis_url)
    for breaker in breakers.values():
        for _ in range(50):  # warm: connections open, scripts loaded, code paths hot
            breaker.check()
            breaker.record(False)
    reads_before = {kind: b.store.stats.reads for kind, b in breakers.items()}
    server_before = _evalsha_stats(ping)
    checks = _interleaved(
        {
            "redis": breakers["redis"].check,
            "dynamodb": breakers["dynamodb"].check,
            "redis PING": ping.ping,
        },
        LATENCY_BLOCKS,
        LATENCY_BLOCK_CALLS,
    )
    round_trips = {
        kind: (b.store.stats.reads - reads_before[kind]) / (LATENCY_BLOCKS * LATENCY_BLOCK_CALLS)
        for kind, b in breakers.items()
    }
    server_checks = _evalsha_stats(ping)
    writes = _interleaved(
        {kind: (lambda b=b: b.record(False)) for kind, b in breakers.items()},
        LATENCY_BLOCKS // 2,
        LATENCY_BLOCK_CALLS,
    )
    server_writes = _evalsha_stats(ping)
    ping.close()
    redis_store.close()
    return {
        "decision": {name: _summary_us(values) for name, values in checks.items()},
        "store_round_trips_per_decision": round_trips,
        "failure_write": {name: _summary_us(values) for name, values in writes.items()},
        # Time redis-server itself spent per EVALSHA (INFO commandstats): the script's cost,
        # apart from the network, the client and this machine's scheduling noise.
        "redis_server_us_per_script": {
            "load": _per_call(server_before, server_checks),
            "record_failure": _per_call(server_checks, server_writes),
        },
        "degradations": {kind: b.stats.degradations for kind, b in breakers.items()},
    }


def _evalsha_stats(client: Any) -> tuple[int, int]:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


def _per_call(before: tuple[int, int], after: tuple[int, int]) -> float:
    calls = after[0] - before[0]
    return round((after[1] - before[1]) / calls, 1) if calls else 0.0


# --------------------------------------------------------------------------- (b)


def measure_overhead(redis_url: str) -> dict[str, Any]:
    import pybreaker
    import redis

    from fleetbreaker import BreakerConfig, CircuitBreaker, RedisStore

    store = RedisStore(url=redis_url)
    fleet = CircuitBreaker(_unique("overhead"), store=store, config=BreakerConfig(cache_ttl=1.0))
    client = redis.Redis.from_url(redis_url)
    storage = pybreaker.CircuitRedisStorage(
        pybreaker.STATE_CLOSED, client, namespace=_unique("overhead")
    )
    pybreaker_breaker = pybreaker.CircuitBreaker(fail_max=FAILURE_THRESHOLD, state_storage=storage)
    fns: dict[str, Callable[[], Any]] = {
        "bare": noop,
        FLEET: lambda: fleet.call(noop),
        PYBREAKER: lambda: pybreaker_breaker.call(noop),
    }
    for fn in fns.values():
        for _ in range(500):
            fn()
    reads_before = store.stats.requests
    started = time.perf_counter()
    samples = _interleaved(fns, OVERHEAD_BLOCKS, OVERHEAD_BLOCK_CALLS)
    elapsed = time.perf_counter() - started
    calls = OVERHEAD_BLOCKS * OVERHEAD_BLOCK_CALLS
    median = {name: statistics.median(values) for name, values in samples.items()}
    client.close()
    store.close()
    return {
        "calls_per_contender": calls,
        "seconds": round(elapsed, 2),
        "median_ns": median,
        "p99_ns": {name: _percentile([float(v) for v in s], 0.99) for name, s in samples.items()},
        "overhead_ns": {name: median[name] - median["bare"] for name in (FLEET, PYBREAKER)},
        # pybreaker reads the state (GET) and resets the failure counter (SET) on every call
        "fleetbreaker_store_requests": store.stats.requests - reads_before,
    }


# --------------------------------------------------------------------------- (c)


def _build_breaker(kind: str, redis_url: str, name: str) -> tuple[Any, type[BaseException]]:
    if kind == FLEET:
        from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError, RedisStore

        config = BreakerConfig(
            failure_threshold=FAILURE_THRESHOLD,
            recovery_timeout=float(HERD_OPEN_SECONDS),
            half_open_max_probes=PROBE_BUDGET,
            cache_ttl=1.0,
        )
        return CircuitBreaker(name, store=RedisStore(url=redis_url), config=config), (
            CircuitOpenError
        )
    import pybreaker
    import redis

    storage = pybreaker.CircuitRedisStorage(
        pybreaker.STATE_CLOSED, redis.Redis.from_url(redis_url), namespace=name
    )
    breaker = pybreaker.CircuitBreaker(
        fail_max=FAILURE_THRESHOLD, reset_timeout=HERD_OPEN_SECONDS, state_storage=storage
    )
    return breaker, pybreaker.CircuitBreakerError


def _herd_worker(
    kind: str,
    layout: str,
    redis_url: str,
    name: str,
    ready: Any,
    go_at: Any,
    results: Any,
) -> None:
    prepare_environment()
    shared = _build_breaker(kind, redis_url, name) if layout == PER_PROCESS else None
    breakers = [shared or _build_breaker(kind, redis_url, name) for _ in range(HERD_THREADS)]
    for breaker, _ in breakers:
        _ = breaker.state  # warm: connection open, scripts loaded, state read
    entries: list[float] = []
    rejected = [0]
    lock = threading.Lock()
    ready.wait()  # every worker built: the parent now trips the breaker
    ready.wait()  # ...and has published when the open window ends
    start = go_at.value
    end = start + HERD_WINDOW

    def dependency() -> None:
        with lock:
            entries.append(time.time())
        # Still down and slow: hold the caller for the rest of the window, then fail.
        time.sleep(max(0.0, end - time.time()))
        raise ConnectionError("dependency still down")

    def run(breaker: Any, open_error: type[BaseException]) -> None:
        time.sleep(max(0.0, start - time.time()))
        while time.time() < end:
            try:
                breaker.call(dependency)
            except open_error:
                with lock:
                    rejected[0] += 1
                time.sleep(HERD_REJECTED_PAUSE)
            except ConnectionError:
                pass

    threads = [threading.Thread(target=run, args=pair) for pair in breakers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    distinct = [shared[0]] if shared is not None else [breaker for breaker, _ in breakers]
    degradations = sum(b.stats.degradations for b in distinct) if kind == FLEET else 0
    results.put(
        {
            "admitted": sum(1 for t in entries if start <= t < end),
            "rejected": rejected[0],
            "degradations": degradations,
        }
    )


def _trip(kind: str, redis_url: str, name: str) -> float:
    """Open the shared breaker from this process; the epoch second its open window ends."""
    breaker, _ = _build_breaker(kind, redis_url, name)

    def failing() -> None:
        raise ConnectionError("down")

    for _ in range(FAILURE_THRESHOLD):
        # pybreaker raises its own error on the tripping call
        with contextlib.suppress(Exception):
            breaker.call(failing)
    if kind == FLEET:
        record = breaker.store.load(name, 0)
        if record is None or record.state.value != "open":
            raise RuntimeError(f"fleetbreaker did not trip: {record}")
        return float(record.open_until) / 1000
    opened_at = breaker._state_storage.opened_at  # whole seconds, as pybreaker stores it
    assert breaker.current_state == "open"
    return float(opened_at.timestamp()) + HERD_OPEN_SECONDS


def measure_herd(redis_url: str, kind: str, layout: str) -> dict[str, Any]:
    name = _unique("herd")
    ready = CTX.Barrier(HERD_PROCESSES + 1)
    go_at = CTX.Value("d", 0.0)
    results = CTX.Queue()
    workers = [
        CTX.Process(
            target=_herd_worker,
            args=(kind, layout, redis_url, name, ready, go_at, results),
            daemon=True,
        )
        for _ in range(HERD_PROCESSES)
    ]
    for worker in workers:
        worker.start()
    try:
        ready.wait(timeout=60)
        go_at.value = _trip(kind, redis_url, name) + 0.002
        if go_at.value < time.time() + 0.2:
            raise RuntimeError("the open window ended before the fleet was ready")
        ready.wait(timeout=60)
        payloads = [results.get(timeout=60) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
    return {
        "contender": kind,
        "layout": layout,
        "callers": HERD_PROCESSES * HERD_THREADS,
        "probe_budget": PROBE_BUDGET,
        "admitted_in_window": sum(p["admitted"] for p in payloads),
        "rejected_calls": sum(p["rejected"] for p in payloads),
        "degradations": sum(p["degradations"] for p in payloads),
    }


# --------------------------------------------------------------------------- report


def format_table(results: dict[str, Any]) -> str:
    miss, over = results["cache_miss"], results["overhead"]

    def timing(label: str, row: dict[str, float]) -> str:
        return f"    {label:42}{row['median_us']:>9}{row['p90_us']:>9}{row['p99_us']:>9}"

    server = miss["redis_server_us_per_script"]
    lines = [
        "",
        "(a) decision that misses the cache = one store round trip (µs, loopback)",
        f"    {'':42}{'median':>9}{'p90':>9}{'p99':>9}",
        timing("RedisStore: check() (EVALSHA)", miss["decision"]["redis"]),
        timing("DynamoDBStore on moto: check() (GetItem)", miss["decision"]["dynamodb"]),
        timing("redis PING (a bare round trip)", miss["decision"]["redis PING"]),
        timing("RedisStore: failure counted", miss["failure_write"]["redis"]),
        timing("DynamoDBStore on moto: failure counted", miss["failure_write"]["dynamodb"]),
        f"    redis-server CPU per script: load {server['load']} µs,"
        f" record_failure {server['record_failure']} µs",
        "",
        "(b) per-call overhead: closed, warm, healthy, around a no-op (median ns)",
        f"    {'fleetbreaker on RedisStore':42}{over['overhead_ns'][FLEET]:>9.0f}",
        f"    {'pybreaker with CircuitRedisStorage':42}{over['overhead_ns'][PYBREAKER]:>9.0f}",
        "",
        f"(c) herd: {HERD_PROCESSES} processes x {HERD_THREADS} threads once the open window"
        f" ends; calls reaching the dependency in {HERD_WINDOW * 1000:.0f} ms"
        f" (target: {PROBE_BUDGET})",
    ]
    for row in results["herd"]:
        label = f"{row['contender']}, {row['layout']}"
        degraded = f"  ({row['degradations']} degradations)" if row["degradations"] else ""
        lines.append(f"    {label:42}{row['admitted_in_window']:>9}{degraded}")
    return "\n".join(lines)


def _versions() -> dict[str, str]:
    import subprocess

    out = {name: metadata.version(name) for name in ("redis", "pybreaker", "moto", "boto3")}
    server = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
    out["redis-server"] = server.stdout.split()[2].removeprefix("v=")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    prepare_environment()
    from devtools.servers import MotoServer, RedisServer

    started = time.perf_counter()
    load_start = [round(x, 2) for x in os.getloadavg()]
    redis_server, moto_server = RedisServer(), MotoServer()
    with redis_server, moto_server:
        redis_url, moto_url = redis_server.url, moto_server.endpoint_url
        _log("(a) cache-miss latency ...")
        cache_miss = measure_cache_miss(redis_url, moto_url)
        _log("(b) per-call overhead ...")
        overhead = measure_overhead(redis_url)
        herd = []
        for layout in (PER_PROCESS, PER_THREAD):
            for kind in (FLEET, PYBREAKER):
                _log(f"(c) herd: {kind}, {layout} ...")
                herd.append(measure_herd(redis_url, kind, layout))
    results = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "versions": _versions(),
        # The 1-, 5- and 15-minute load at the start and the end: a busy machine moves every
        # latency here by up to two times, the server's own script time much less.
        "loadavg": [load_start, [round(x, 2) for x in os.getloadavg()]],
        "cache_miss": cache_miss,
        "overhead": overhead,
        "herd": herd,
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(format_table(results))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    _log(f"\nwritten to {args.output} ({results['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
