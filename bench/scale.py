"""A simulated fleet on one breaker: spurious trips, trip latency and hot-key load at scale.

    make scale
    .venv/bin/python bench/scale.py [--stores ddb-model,memory,moto] [--containers 100,1000,5000]
        [--moto-containers 100] [--timeline 20,30,15] [--moto-timeline 10,10,10] [--ramp N]
        [--output PATH]

Each simulated container is a real CircuitBreaker (its own ``container_id`` and cache) on a
virtual clock, and all of them share one store object: a MemoryStore; ``ddb-model``, a
MemoryStore that also counts the write units DynamoDBStore's conditional writes spend (the
default: DynamoDB's figures at 5,000 containers in minutes); or a DynamoDBStore talking to
moto's server over loopback (opt-in: real HTTP, slow). 10,000 calls/s are spread evenly
over the containers (each calls at a fixed period from a random phase, one call at a time,
as a Lambda container does). The dependency fails 0.5 % of calls at random during the noise
phase, then every call during the outage. Store time costs no virtual time, so the figures
are the rules' and the report control's, not this machine's speed.

Per fleet size it runs three scenarios (four with ``--ramp``):

* ``count``: the count policy (failure_threshold 5 in 60 s, today's defaults) through noise
  then the outage;
* ``count*``: the same without noise, so its trip latency is measured from a closed breaker
  (with noise it is usually open already when the outage starts);
* ``rate``: failure_rate_threshold 0.5, minimum_calls 20, window 10 s, through noise then the
  outage.

See bench/README.md ("scale.py") for what each column means and the derivation of the write
rate. Exit status: 0 when every scenario ran, whether or not a figure met its target.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make bench and devtools importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib
import itertools

from bench import prepare_environment
from fleetbreaker import BreakerConfig, BreakerListener, CircuitBreaker, MemoryStore
from fleetbreaker.state import (
    WINDOW_BUCKETS,
    Outcome,
    Policy,
    Record,
    Report,
    State,
    bucket_index,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO_ROOT / "bench" / "results" / "scale.json"

CALLS_PER_S = 10_000
NOISE = 0.005
ITEM_WRITE_CAP = 1_000  # writes/s one DynamoDB item takes
# On-demand list prices assumed (us-east-1, not verified here): per million request units. A
# report or failure is one UpdateItem on an item under 1 KB (1 WRU, also when its condition
# fails); a load is one strongly consistent GetItem under 4 KB (1 RRU).
PRICE_PER_M_WRITES = 0.625
PRICE_PER_M_READS = 0.125
SAMPLE_MS = 100  # store counters are sampled this often; peaks are over any 10 samples (1 s)
START_MS = 1_800_000_000_000  # virtual epoch ms (2027-01-15): far from any real record


@dataclass(frozen=True)
class Scenario:
    """One simulated run: a fleet, a policy and a timeline."""

    containers: int
    policy: str  # "count" or "rate"
    noise: float = NOISE
    noise_s: float = 30.0
    outage_s: float = 15.0
    warmup_s: float = 20.0  # noise before the measured phases: the report control settles
    calls_per_s: int = CALLS_PER_S
    seed: int = 1
    # Containers joining per second during the warm-up (0: all within the first second), as
    # Lambda adds containers while the load grows; each calls only once it has joined.
    ramp_per_s: float = 0.0

    @property
    def label(self) -> str:
        label = self.policy if self.noise else f"{self.policy}*"
        return f"{label} ramp {self.ramp_per_s:g}/s" if self.ramp_per_s else label


@dataclass
class Result:
    """What one scenario measured (times in virtual seconds)."""

    store: str
    containers: int
    policy: str
    spurious_trips: int = 0
    noise_calls: int = 0
    noise_rejected: int = 0
    trip_s: float | None = None  # outage start -> first trip (0: already open)
    fleet_rejecting_s: float | None = None  # outage start -> every container rejected once
    failing_sent: int = 0  # dependency calls from outage start until the fleet rejects
    invocations: int = 0
    reads: int = 0
    writes: int = 0
    peak_requests_per_s: int = 0
    peak_writes_per_s: int = 0
    mean_requests_per_s: float = 0.0
    mean_writes_per_s: float = 0.0
    noise_reads: int = 0
    noise_writes: int = 0
    warmup_peak_writes_per_s: int = 0
    wall_s: float = 0.0
    writes_per_s: list[int] = field(default_factory=list)  # per whole virtual second

    @property
    def noise_rejected_pct(self) -> float:
        return 100 * self.noise_rejected / self.noise_calls if self.noise_calls else 0.0

    @property
    def cost_per_m(self) -> float:
        """DynamoDB $ per 1M invocations in the noise phase (a healthy fleet's steady cost)."""
        if not self.noise_calls:
            return 0.0
        dollars = (
            self.noise_writes * PRICE_PER_M_WRITES + self.noise_reads * PRICE_PER_M_READS
        ) / 1e6
        return dollars / self.noise_calls * 1e6


def config_for(policy: str) -> BreakerConfig:
    if policy == "count":
        return BreakerConfig(failure_threshold=5, window_seconds=60, cache_ttl=1.0)
    if policy == "rate":
        return BreakerConfig(
            failure_rate_threshold=0.5, minimum_calls=20, window_seconds=10, cache_ttl=1.0
        )
    raise ValueError(f"unknown policy {policy!r}: choose count or rate")


class VirtualClock:
    """Epoch milliseconds that move only when the simulation says so."""

    def __init__(self, start_ms: int) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms


class TripLog(BreakerListener):
    """When the breaker tripped (only the container whose write tripped it is told)."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.at_ms: list[int] = []

    def on_transition(self, name: str, before: State, after: State) -> None:
        if before is State.CLOSED and after is State.OPEN:
            self.at_ms.append(self.clock.now_ms)


class DynamoDBModelStore(MemoryStore):
    """MemoryStore's rules, counting the extra writes DynamoDBStore's fences cost.

    DynamoDBStore.report is one UpdateItem fenced on what the container last saw of the
    report's bucket slot; when another container has started the bucket since, the condition
    fails (a write unit spent) and it writes again. A trip is one more UpdateItem. This
    counts both, so 5,000 containers can be priced without 5,000 containers' worth of HTTP.
    """

    def __init__(self) -> None:
        super().__init__()
        self.fence_misses = 0

    def report(
        self, name: str, policy: Policy, now_ms: int, report: Report, observed: Record | None
    ) -> Outcome:
        if report:
            current = self._records.get(name)
            if current is not None and current.is_expired(now_ms):
                current = None
            if _fence_fails(current, observed, policy, now_ms):
                self.fence_misses += 1
                self.stats.count_write()
        outcome = super().report(name, policy, now_ms, report, observed)
        if outcome.transition is not None:
            self.stats.count_write()  # DynamoDBStore trips in a second, fenced write
        return outcome


def _fence_fails(
    current: Record | None, observed: Record | None, policy: Policy, now_ms: int
) -> bool:
    """Whether DynamoDBStore.report's first conditional write would fail on ``current``."""
    seen = observed if observed is not None and not observed.is_expired(now_ms) else None
    if seen is None:
        return current is not None  # it writes a fresh record, fenced on there being none
    if current is None or seen.state is not State.CLOSED or current.state is not State.CLOSED:
        return False  # no write planned, or the one write fails and the report stops there
    idx = bucket_index(policy, now_ms)
    slot = idx % WINDOW_BUCKETS
    held, stored = seen.buckets.get(slot), current.buckets.get(slot)
    if held is not None and held.idx == idx:
        return False  # an ADD to the bucket it saw: commutes with everyone else's
    # It starts the bucket over the one it saw: fenced on that one still being there.
    return (stored is None) != (held is None) or (
        stored is not None and held is not None and stored.idx != held.idx
    )


class DependencyDown(Exception):
    """The simulated dependency's failure."""


def simulate(scenario: Scenario, store: Any, store_label: str, name: str) -> Result:
    """Run ``scenario`` with one CircuitBreaker per container on ``store``; return its figures."""
    started = time.perf_counter()
    n = scenario.containers
    config = config_for(scenario.policy)
    clock = VirtualClock(START_MS)
    trips = TripLog(clock)
    rejected = object()
    rng = random.Random(scenario.seed)
    breakers = []
    joins = [round(i * 1000 / scenario.ramp_per_s) if scenario.ramp_per_s else 0 for i in range(n)]
    if joins[-1] >= scenario.warmup_s * 1000:
        raise ValueError(f"{n} containers at {scenario.ramp_per_s:g}/s need a longer warm-up")
    for i in range(n):
        # Containers started at different moments: their cache refreshes and report times
        # are spread over a second, as in a real fleet, not all on the same millisecond.
        clock.now_ms = START_MS + joins[i] - rng.randrange(1000)
        breaker = CircuitBreaker(
            name,
            store=store,
            config=config,
            fallback=lambda *_args, **_kw: rejected,
            listeners=[trips],
            clock=clock,
            rng=random.Random(scenario.seed * 100_003 + i),
            container_id=f"c{i:05d}",
        )
        breaker.state  # noqa: B018 (the container's first read, at its own start)
        breakers.append(breaker)
    period_ms = n * 1000 / scenario.calls_per_s
    order = sorted(range(n), key=lambda _i: rng.random())
    phases = sorted(rng.random() * period_ms for _ in range(n))
    warm_ms = round(scenario.warmup_s * 1000)
    outage_ms = warm_ms + round(scenario.noise_s * 1000)
    end_ms = outage_ms + round(scenario.outage_s * 1000)
    total_calls = math.ceil(end_ms / period_ms) * n

    failing = False

    def dependency() -> None:
        if failing or rng.random() < scenario.noise:
            raise DependencyDown

    result = Result(store_label, n, scenario.label)
    warm_samples: list[int] = [store.stats.writes]
    samples: list[tuple[int, int]] = []
    next_sample = SAMPLE_MS
    first_reject: dict[int, int] = {}
    noise_snapshot: tuple[int, int] | None = None
    trips_before_outage = 0
    for j in range(total_calls):
        offset = (j // n) * period_ms + phases[j % n]
        if offset >= end_ms:
            break
        at = round(offset)
        while at >= next_sample:
            if next_sample <= warm_ms:
                warm_samples.append(store.stats.writes)
            if next_sample >= warm_ms:
                samples.append((store.stats.reads, store.stats.writes))
            next_sample += SAMPLE_MS
        if at < warm_ms:
            container = order[j % n]
            if at >= joins[container]:
                clock.now_ms = START_MS + at
                with contextlib.suppress(DependencyDown):
                    breakers[container].call(dependency)
            continue
        if not samples:  # no warm-up
            samples.append((store.stats.reads, store.stats.writes))
        if not failing and at >= outage_ms:
            failing = True
            noise_snapshot = (store.stats.reads, store.stats.writes)
            trips_before_outage = len(trips.at_ms)
        clock.now_ms = START_MS + at
        container = order[j % n]
        outcome: object = None
        with contextlib.suppress(DependencyDown):
            outcome = breakers[container].call(dependency)
        result.invocations += 1
        if not failing:
            result.noise_calls += 1
            result.noise_rejected += outcome is rejected
        elif outcome is rejected:
            first_reject.setdefault(container, at)
        elif len(first_reject) < n:
            result.failing_sent += 1
    samples.append((store.stats.reads, store.stats.writes))
    if noise_snapshot is None:
        noise_snapshot = samples[-1]
        trips_before_outage = len(trips.at_ms)

    result.spurious_trips = trips_before_outage
    step = 1000 // SAMPLE_MS
    result.warmup_peak_writes_per_s = max(
        (warm_samples[i + step] - warm_samples[i] for i in range(len(warm_samples) - step)),
        default=0,
    )
    outage_trips = [t - START_MS - outage_ms for t in trips.at_ms[trips_before_outage:]]
    if len(first_reject) == n:
        result.fleet_rejecting_s = (max(first_reject.values()) - outage_ms) / 1000
    if outage_trips:
        result.trip_s = outage_trips[0] / 1000
    elif first_reject:
        result.trip_s = 0.0  # open (or opened by noise) before the outage began
    base_reads, base_writes = samples[0]
    result.reads = samples[-1][0] - base_reads
    result.writes = samples[-1][1] - base_writes
    result.noise_reads = noise_snapshot[0] - base_reads
    result.noise_writes = noise_snapshot[1] - base_writes
    per_sample = [(b[0] - a[0] + b[1] - a[1], b[1] - a[1]) for a, b in itertools.pairwise(samples)]
    sliding = [
        (sum(r for r, _ in per_sample[i : i + step]), sum(w for _, w in per_sample[i : i + step]))
        for i in range(max(1, len(per_sample) - step + 1))
    ]
    result.peak_requests_per_s = max(r for r, _ in sliding)
    result.peak_writes_per_s = max(w for _, w in sliding)
    span_s = (end_ms - warm_ms) / 1000
    result.mean_requests_per_s = (result.reads + result.writes) / span_s
    result.mean_writes_per_s = result.writes / span_s
    result.writes_per_s = [
        sum(w for _, w in per_sample[i : i + step]) for i in range(0, len(per_sample), step)
    ]
    result.wall_s = time.perf_counter() - started
    return result


# --------------------------------------------------------------------------- runs and table


POLICY_LABELS = ("count", "count*", "rate")


def scenarios_for(
    containers: int,
    warmup_s: float,
    noise_s: float,
    outage_s: float,
    ramp_per_s: float = 0.0,
    policies: Sequence[str] = POLICY_LABELS,
) -> list[Scenario]:
    timeline = {"warmup_s": warmup_s, "noise_s": noise_s, "outage_s": outage_s}
    scenarios = []
    if "count" in policies:
        scenarios.append(Scenario(containers, "count", **timeline))
    if "count*" in policies:
        scenarios.append(Scenario(containers, "count", noise=0.0, **timeline))
    if "rate" in policies:
        scenarios.append(Scenario(containers, "rate", **timeline))
    if ramp_per_s:
        ramped = {**timeline, "warmup_s": warmup_s + containers / ramp_per_s}
        scenarios.append(Scenario(containers, "rate", ramp_per_s=ramp_per_s, **ramped))
    return scenarios


def _seconds(value: float | None, limit: float) -> str:
    return f"> {limit:g}" if value is None else f"{value:.2f}"


COLUMNS = (
    "store",
    "containers",
    "policy",
    "spurious trips",
    "healthy rejected",
    "trip s",
    "fleet rejecting s",
    "failing calls sent",
    "req/s peak",
    "req/s mean",
    "writes/s peak",
    "writes/s mean",
    "warm-up writes/s peak",
    "$ per 1M inv.",
)


def table_rows(results: Sequence[Result], outage_s: dict[int, float]) -> list[list[str]]:
    rows = []
    for r in results:
        limit = outage_s.get(r.containers, 0.0)
        rows.append(
            [
                r.store,
                f"{r.containers:,}",
                r.policy,
                "-" if r.policy.endswith("*") else str(r.spurious_trips),
                "-" if r.policy.endswith("*") else f"{r.noise_rejected_pct:.1f} %",
                _seconds(r.trip_s, limit),
                _seconds(r.fleet_rejecting_s, limit),
                f"{r.failing_sent:,}",
                f"{r.peak_requests_per_s:,}",
                f"{r.mean_requests_per_s:,.0f}",
                f"{r.peak_writes_per_s:,}",
                f"{r.mean_writes_per_s:,.0f}",
                f"{r.warmup_peak_writes_per_s:,}",
                f"{r.cost_per_m:.3f}",
            ]
        )
    return rows


def markdown_table(rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(
    stores: Sequence[str],
    containers: Sequence[int],
    moto_containers: Sequence[int],
    timeline: tuple[float, float, float],
    moto_timeline: tuple[float, float, float],
    ramp_per_s: float = 0.0,
    policies: Sequence[str] = POLICY_LABELS,
    progress: Callable[[str], None] = _log,
) -> tuple[list[Result], dict[str, dict[int, float]]]:
    """Every scenario on every store; the results and each store's outage length."""
    results: list[Result] = []
    outages: dict[str, dict[int, float]] = {}
    for store_kind in stores:
        server = None
        try:
            if store_kind == "moto":
                from fleetbreaker import DynamoDBStore

                prepare_environment()
                from devtools.servers import MotoServer, dynamodb_client, make_table

                server = MotoServer()
                server.start()
                progress(f"moto server on {server.endpoint_url} (pid {server.pid})")
                table = make_table(server.endpoint_url, "fleetbreaker-scale")
                client = dynamodb_client(server.endpoint_url)
                phases, sizes = moto_timeline, moto_containers
            elif store_kind not in ("memory", "ddb-model"):
                raise SystemExit(f"unknown store {store_kind!r}: choose memory, ddb-model or moto")
            else:
                phases, sizes = timeline, containers
            outages[store_kind] = {}
            for size in sizes:
                outages[store_kind][size] = phases[2]
                planned = scenarios_for(size, *phases, ramp_per_s, policies)
                for number, scenario in enumerate(planned):
                    name = f"scale-{size}-{scenario.label}-{number}"
                    store: Any
                    if store_kind == "memory":
                        store = MemoryStore()
                    elif store_kind == "ddb-model":
                        store = DynamoDBModelStore()
                    else:
                        store = DynamoDBStore(table, boto3_client=client)
                    result = simulate(scenario, store, store_kind, name)
                    progress(
                        f"{store_kind} {size:>5} {scenario.label:<6} done in {result.wall_s:.1f} s"
                        f" (virtual {scenario.warmup_s + sum(phases[1:]):g} s)"
                    )
                    results.append(result)
        finally:
            if server is not None:
                server.stop()
    return results, outages


def _numbers(text: str, kind: Callable[[str], Any]) -> list[Any]:
    return [kind(part) for part in text.split(",") if part.strip()]


def _timeline(text: str) -> tuple[float, float, float]:
    parts = _numbers(text, float)
    if len(parts) != 3 or min(parts) < 0:
        raise SystemExit(f"a timeline is warm-up,noise,outage seconds (>= 0), got {text!r}")
    return parts[0], parts[1], parts[2]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--stores", default="ddb-model", help="any of ddb-model, memory, moto (comma-separated)"
    )
    parser.add_argument("--containers", default="100,1000,5000", help="fleet sizes (memory)")
    parser.add_argument("--moto-containers", default="100", help="fleet sizes (moto)")
    parser.add_argument("--timeline", default="20,30,15", help="warm-up,noise,outage s (memory)")
    parser.add_argument("--moto-timeline", default="10,10,10", help="warm-up,noise,outage s (moto)")
    parser.add_argument(
        "--ramp",
        type=float,
        default=0.0,
        help="also run the rate policy with containers joining at this many per second",
    )
    parser.add_argument(
        "--policies",
        default=",".join(POLICY_LABELS),
        help="any of count, count* (no noise), rate (comma-separated); --ramp adds rate ramped",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = sorted(set(policies) - set(POLICY_LABELS))
    if unknown:
        parser.error(f"unknown policies {unknown}: choose from {', '.join(POLICY_LABELS)}")

    def stop(signum: int, _frame: object) -> None:
        # SIGTERM becomes an exception, so the moto server is stopped on the way out.
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    results, outages = run(
        stores,
        _numbers(args.containers, int),
        _numbers(args.moto_containers, int),
        _timeline(args.timeline),
        _timeline(args.moto_timeline),
        args.ramp,
        policies,
    )
    rows = []
    for store_kind in stores:
        rows += table_rows([r for r in results if r.store == store_kind], outages[store_kind])
    print(markdown_table(rows))
    over = [r for r in results if r.policy == "rate" and r.peak_writes_per_s > ITEM_WRITE_CAP]
    for r in over:
        print(f"rate policy over {ITEM_WRITE_CAP} writes/s: {r.store} {r.containers}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(
        json.dumps(
            {
                "prices_assumed": {
                    "per_million_writes": PRICE_PER_M_WRITES,
                    "per_million_reads": PRICE_PER_M_READS,
                },
                "results": [asdict(r) for r in results],
            },
            indent=1,
        )
    )
    _log(f"figures written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
