"""A simulated fleet on one breaker: read and write units per item, trip latency, spurious trips.

    make scale
    .venv/bin/python bench/scale.py [--stores ddb-model,memory,moto] [--containers 100,1000,5000]
        [--arrivals burst,ramp100,lambda] [--policies count*,rate]
        [--noise-policies count,rate@2%] [--timeline 10,20,10] [--moto-containers 100]
        [--moto-timeline 5,5,5] [--seeds 1] [--output PATH]
    .venv/bin/python bench/scale.py --merge PART.json... --output PATH   # one plan run in parts

Each simulated container is a real CircuitBreaker (its own ``container_id``, cache and report
tally: the layer's rules, not a copy) on a virtual clock, and all of them share one store
object: ``ddb-model`` (the default), a MemoryStore that also counts the write units
DynamoDBStore's conditional writes spend, checked request for request against DynamoDBStore
on moto by tests/bench; a plain MemoryStore; or a DynamoDBStore talking to moto's server
over loopback (opt-in: real HTTP, slow). Containers join as ``--arrivals`` says (all within
a second, 100 a second, or as Lambda scales a function); once all are in, 10,000 calls/s are
spread evenly over them (each calls at a fixed period from a random phase, one call at a
time, as a Lambda container does). The dependency fails a share of calls at random (the
policy's noise), then every call during the outage. Store time costs no virtual time, so the
figures are the rules', not this machine's speed.

``--policies`` run under every arrival, ``--noise-policies`` under the first only: ``count``
(failure_threshold 5 in 60 s, 0.5 % noise), ``count*`` (the same without noise, so its
outage starts from a closed breaker), ``rate`` (failure_rate_threshold 0.5, minimum_calls
20, window 10 s, 0.5 % noise) and ``rate@2%`` (2 % noise).

``--seeds`` runs every scenario once per seed (the arrivals' times, the calls' phases, the
noise and each container's random source change with it): the spread of each figure.

See bench/README.md ("scale.py") for each column, the targets and the derivations. Exit
status: 0 when every scenario ran, whether or not a figure met its target.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make bench and devtools importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib
import itertools

from bench import prepare_environment
from fleetbreaker import BreakerConfig, BreakerListener, CircuitBreaker, MemoryStore, StateChange
from fleetbreaker.policy import Policy
from fleetbreaker.record import WINDOW_BUCKETS, Outcome, Record, Report, State
from fleetbreaker.rules import sliding_window

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO_ROOT / "bench" / "results" / "scale.json"

CALLS_PER_S = 10_000
NOISE = 0.005
# One DynamoDB partition serves 1,000 write units/s and 3,000 read units/s, and one item lives
# in one partition; the targets keep 20 % of the reads spare.
ITEM_WRITE_CAP = 1_000
ITEM_READ_TARGET = 2_400
OPEN_WITHIN_S = 3.0  # a full outage opens the fleet within this (rate policy)
# Units per request, for items under 1 KB (the record is a few hundred bytes): a write is one
# unit, also when its condition fails; a cache refresh is one eventually consistent GetItem,
# half a unit (a strongly consistent one is a whole unit).
WRITE_UNITS = 1.0
READ_UNITS = 0.5
# On-demand list prices assumed (us-east-1, as published in late 2024; not verified here):
# dollars per million request units.
PRICE_PER_M_WRITES = 0.625
PRICE_PER_M_READS = 0.125
# ElastiCache Serverless for Valkey, same region and date, assumed: dollars per million ECPUs,
# dollars per GB-hour of data stored (billed at least 100 MB), and the ECPUs one EVALSHA of a
# fleetbreaker script is assumed to take (about 1 per KB moved, more for the server time a Lua
# script spends: not measured on ElastiCache).
PRICE_PER_M_ECPU = 0.0023
PRICE_PER_GB_HOUR = 0.084
MIN_GB = 0.1
ECPU_PER_REQUEST = 2.0
HOURS_PER_MONTH = 730
SAMPLE_MS = 100  # store counters are sampled this often; peaks are over any 10 samples (1 s)
START_MS = 1_800_000_000_000  # virtual epoch ms (2027-01-15): far from any real record

# How containers arrive (each calls only once it has joined):
ARRIVALS = {
    "burst": "every container joins within the first second",
    "ramp100": "100 new containers a second",
    "lambda": "1,000 within the first second, then 1,000 more every 10 s (Lambda's scaling)",
}
# Lambda Managed Instances (``--lmi-environments`` x ``--lmi-processes``): execution environments
# that each run P Python processes, every process a container with its own init. Managed
# Instances scale asynchronously (a fleet that more than doubles within 5 minutes may be
# throttled), so the environments here start faster than Lambda would start them: evenly over
# the first LMI_START_MS, each one's processes within its first second. Each fleet runs twice:
# every process reading the record for itself (``process``, as on Lambda), and the processes
# of one environment sharing their reads through a directory of their own
# (``environment``, fleetbreaker.shared_refresh; on Managed Instances, the default).
LMI = "lmi"
LMI_START_MS = 30_000
REFRESH_MODELS = ("process", "environment")
# The arrivals the read and write targets apply to: those Lambda allows one function.
# ``burst`` is reported beside them: 5,000 containers joining in one second read the record
# once each (half a unit), 2,500 read units in that second whatever the rules.
TARGET_ARRIVALS = ("ramp100", "lambda")


def join_times_ms(
    arrival: str, containers: int, rng: random.Random, processes: int = 1
) -> list[int]:
    """When each container joins, ms from the start, sorted (``lmi``: environment by
    environment, ``processes`` containers each, so container i runs in environment
    i // processes)."""
    if arrival == LMI:
        environments = -(-containers // processes)
        starts = [e * LMI_START_MS // environments for e in range(environments)]
        return [starts[i // processes] + rng.randrange(1000) for i in range(containers)]
    if arrival == "burst":
        joins = [rng.randrange(1000) for _ in range(containers)]
    elif arrival == "ramp100":
        joins = [i * 10 + rng.randrange(10) for i in range(containers)]
    elif arrival == "lambda":
        joins = [(i // 1000) * 10_000 + rng.randrange(1000) for i in range(containers)]
    else:
        raise ValueError(f"unknown arrival {arrival!r}: choose from {', '.join(ARRIVALS)}")
    return sorted(joins)


@dataclass(frozen=True)
class Scenario:
    """One simulated run: a fleet, its arrival, a policy and a timeline."""

    containers: int
    policy: str  # "count" or "rate"
    arrival: str = "burst"
    noise: float = NOISE
    noise_s: float = 20.0
    outage_s: float = 10.0
    outage_share: float = 1.0  # the share of calls that fail during the outage
    settle_s: float = 10.0  # noise after the last arrival, before the measured phases
    calls_per_s: int = CALLS_PER_S
    seed: int = 1
    processes: int = 1  # per execution environment (the lmi arrival)
    refresh: str = "process"  # "environment": the processes of one share their reads
    # A store request's deadline in real seconds (None: the policy's, 1 s). Store time costs
    # no virtual time, but the deadline is real: a moto request on a loaded machine can take
    # longer, and a run that degrades on it makes other requests than the model's.
    store_deadline_s: float | None = None

    @property
    def arrival_label(self) -> str:
        if self.arrival == LMI:
            return f"{LMI} {-(-self.containers // self.processes)}x{self.processes}"
        return self.arrival

    @property
    def label(self) -> str:
        outage = "" if self.outage_share >= 1 else f" outage {self.outage_share:.0%}"
        shared = " shared reads" if self.refresh == "environment" else ""
        return f"{self.policy} {self.arrival_label} noise {self.noise:.1%}{outage}{shared}"

    def warmup_s(self, joins: Sequence[int]) -> float:
        return joins[-1] / 1000 + self.settle_s


@dataclass
class Result:
    """What one scenario measured (times in virtual seconds, units per second per item)."""

    store: str
    policy: str
    containers: int
    arrival: str
    noise: float
    outage_share: float = 1.0
    processes: int = 1  # per execution environment (lmi)
    refresh: str = "process"  # "environment": its processes share their reads
    seed: int = 1
    peak_read_units_per_s: float = 0.0
    peak_write_units_per_s: float = 0.0
    mean_read_units_per_s: float = 0.0
    mean_write_units_per_s: float = 0.0
    spurious_trips: int = 0
    seconds_to_open: float | None = None  # outage start -> the trip (0: already open)
    seconds_to_fleet_rejecting: float | None = None  # ... -> every container rejected once
    failing_calls_sent: int = 0  # dependency calls from outage start until the fleet rejects
    healthy_rejected: int = 0
    healthy_calls: int = 0
    reads: int = 0
    writes: int = 0
    # Per phase, units per second: warm-up (arrivals) peak, noise mean, outage mean.
    warmup_peak_read_units_per_s: float = 0.0
    warmup_peak_write_units_per_s: float = 0.0
    healthy_read_units_per_s: float = 0.0
    healthy_write_units_per_s: float = 0.0
    outage_read_units_per_s: float = 0.0
    outage_write_units_per_s: float = 0.0
    wall_s: float = 0.0
    read_units_per_s: list[float] = field(default_factory=list)  # per whole virtual second
    write_units_per_s: list[float] = field(default_factory=list)

    @property
    def healthy_rejected_pct(self) -> float:
        return 100 * self.healthy_rejected / self.healthy_calls if self.healthy_calls else 0.0

    @property
    def in_target(self) -> bool:
        """Whether the unit targets apply to this run's arrival (TARGET_ARRIVALS)."""
        return self.arrival in TARGET_ARRIVALS

    def meets_units(self) -> bool:
        return (
            self.peak_read_units_per_s <= ITEM_READ_TARGET
            and self.peak_write_units_per_s <= ITEM_WRITE_CAP
        )


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

    def on_state_change(self, name: str, change: StateChange) -> None:
        if change.before is State.CLOSED and change.after is State.OPEN:
            self.at_ms.append(self.clock.now_ms)


class DynamoDBModelStore(MemoryStore):
    """MemoryStore's rules, counting the extra writes DynamoDBStore's fences cost.

    DynamoDBStore.report is one UpdateItem fenced on what the container last saw of the
    report's bucket slot; when another container has started the bucket since, the condition
    fails (a write unit spent) and it writes again. record_failure is fenced on the
    generation and window the container saw, the same way. A trip is one more UpdateItem.
    This counts them, so 5,000 containers can be priced without 5,000 containers' worth of
    HTTP.
    """

    # It stands for one table every process reaches: the processes of an environment share
    # their reads of it (fleetbreaker.shared_refresh.copy_key), as they would DynamoDB's.
    sharing_identity = "bench: the modelled table"

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

    def record_failure(
        self, name: str, policy: Policy, now_ms: int, observed: Record | None, weight: int = 1
    ) -> Outcome:
        # DynamoDBStore.record_failure is fenced on the generation and window_start it saw
        # (or, on an absent view, on there being no record): a stale closed view of a closed
        # record loses once and writes again. A failure that reaches the threshold trips in
        # a second write.
        current = self._records.get(name)
        if current is not None and current.is_expired(now_ms):
            current = None
        seen = observed if observed is not None and not observed.is_expired(now_ms) else None
        if (
            current is not None
            and current.state is State.CLOSED
            and (
                seen is None
                or (
                    seen.state is State.CLOSED
                    and (seen.gen, seen.window_start) != (current.gen, current.window_start)
                )
            )
        ):
            self.fence_misses += 1
            self.stats.count_write()
        outcome = super().record_failure(name, policy, now_ms, observed, weight)
        if outcome.transition is not None:
            self.stats.count_write()
        return outcome


def _fence_fails(
    current: Record | None, observed: Record | None, policy: Policy, now_ms: int
) -> bool:
    """Whether DynamoDBStore.report's first conditional write would fail on ``current``."""
    seen = observed if observed is not None and not observed.is_expired(now_ms) else None
    if seen is None:
        # It writes a fresh record, fenced on there being none; when there is one, it tries
        # again on the record the failed write returned only if that one is closed.
        return current is not None and current.state is State.CLOSED
    if current is None or seen.state is not State.CLOSED or current.state is not State.CLOSED:
        return False  # no write planned, or the one write fails and the report stops there
    idx = sliding_window(policy).index(now_ms)
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
    if scenario.store_deadline_s is not None:
        config = replace(config, store_deadline_seconds=scenario.store_deadline_s)
    clock = VirtualClock(START_MS)
    trips = TripLog(clock)
    rejected = object()
    rng = random.Random(scenario.seed)
    joins = join_times_ms(scenario.arrival, n, rng, scenario.processes)
    warm_ms = round(scenario.warmup_s(joins) * 1000)
    outage_ms = warm_ms + round(scenario.noise_s * 1000)
    end_ms = outage_ms + round(scenario.outage_s * 1000)
    period_ms = n * 1000 / scenario.calls_per_s
    # Container i calls every period_ms from its own phase, once it has joined: the fleet
    # makes calls_per_s once every container is in, each one call at a time.
    phases = [rng.random() * period_ms for _ in range(n)]
    breakers: list[CircuitBreaker | None] = [None] * n
    # Shared reads: one directory per execution environment, as each has its own /tmp.
    scratch = contextlib.ExitStack()
    directories: list[str | None] = [None] * n
    if scenario.refresh == "environment":
        per = scenario.processes
        rooms = [
            scratch.enter_context(tempfile.TemporaryDirectory(prefix="fleetbreaker-scale-"))
            for _ in range(-(-n // per))
        ]
        directories = [rooms[i // per] for i in range(n)]

    def join(i: int) -> CircuitBreaker:
        clock.now_ms = START_MS + joins[i]
        breaker = CircuitBreaker(
            name,
            store=store,
            config=config,
            fallback=lambda *_args, **_kw: rejected,
            listeners=[trips],
            clock=clock,
            rng=random.Random(scenario.seed * 100_003 + i),
            container_id=f"c{i:05d}",
            shared_refresh_dir=directories[i],
        )
        breaker.state  # noqa: B018 (a container's first read, as it starts)
        breakers[i] = breaker
        return breaker

    failing = False

    share = scenario.outage_share

    def dependency() -> None:
        if failing:
            if share >= 1.0 or rng.random() < share:
                raise DependencyDown
        elif rng.random() < scenario.noise:
            raise DependencyDown

    # Events in time order: (ms, kind, container); kind 0 joins, 1 calls.
    events: list[tuple[float, int, int]] = [(float(joins[i]), 0, i) for i in range(n)]
    for i in range(n):
        first = joins[i] + phases[i]
        events.append((first, 1, i))
    heapq.heapify(events)

    result = Result(
        store_label,
        scenario.policy,
        n,
        scenario.arrival_label,
        scenario.noise,
        scenario.outage_share,
        scenario.processes,
        scenario.refresh,
        scenario.seed,
    )
    samples: list[tuple[int, int]] = [(store.stats.reads, store.stats.writes)]
    next_sample = SAMPLE_MS
    first_reject: dict[int, int] = {}
    trips_before_outage: int | None = None
    with scratch:  # the shared-read directories go when the run ends
        while events:
            at_f, kind, i = heapq.heappop(events)
            if at_f >= end_ms:
                break
            at = round(at_f)
            while at >= next_sample:
                samples.append((store.stats.reads, store.stats.writes))
                next_sample += SAMPLE_MS
            if kind == 0:
                join(i)
                continue
            heapq.heappush(events, (at_f + period_ms, 1, i))
            breaker = breakers[i]
            assert breaker is not None
            if not failing and at >= outage_ms:
                failing = True
                trips_before_outage = len(trips.at_ms)
            clock.now_ms = START_MS + at
            outcome: object = None
            with contextlib.suppress(DependencyDown):
                outcome = breaker.call(dependency)
            if at < warm_ms:
                continue
            if not failing:
                result.healthy_calls += 1
                result.healthy_rejected += outcome is rejected
            elif outcome is rejected:
                first_reject.setdefault(i, at)
            elif len(first_reject) < n:
                result.failing_calls_sent += 1
    while next_sample <= end_ms:
        samples.append((store.stats.reads, store.stats.writes))
        next_sample += SAMPLE_MS
    if trips_before_outage is None:
        trips_before_outage = len(trips.at_ms)

    result.spurious_trips = trips_before_outage
    outage_trips = [t - START_MS - outage_ms for t in trips.at_ms[trips_before_outage:]]
    if len(first_reject) == n:
        result.seconds_to_fleet_rejecting = (max(first_reject.values()) - outage_ms) / 1000
    if outage_trips:
        result.seconds_to_open = outage_trips[0] / 1000
    elif first_reject:
        result.seconds_to_open = 0.0  # open (or opened by noise) before the outage began
    result.reads = samples[-1][0] - samples[0][0]
    result.writes = samples[-1][1] - samples[0][1]
    _units(result, samples, warm_ms, outage_ms, end_ms)
    result.wall_s = time.perf_counter() - started
    return result


def _units(
    result: Result, samples: Sequence[tuple[int, int]], warm_ms: int, outage_ms: int, end_ms: int
) -> None:
    """Read and write units per second on the item, from the 100 ms samples of its counters."""
    step = 1000 // SAMPLE_MS
    deltas = [
        ((b[0] - a[0]) * READ_UNITS, (b[1] - a[1]) * WRITE_UNITS)
        for a, b in itertools.pairwise(samples)
    ]
    # sliding[k]: the second that starts at sample k.
    sliding = [
        (sum(r for r, _ in deltas[k : k + step]), sum(w for _, w in deltas[k : k + step]))
        for k in range(max(1, len(deltas) - step + 1))
    ]
    result.peak_read_units_per_s = max(r for r, _ in sliding)
    result.peak_write_units_per_s = max(w for _, w in sliding)
    warm = sliding[: max(1, warm_ms // SAMPLE_MS - step + 1)]
    result.warmup_peak_read_units_per_s = max(r for r, _ in warm)
    result.warmup_peak_write_units_per_s = max(w for _, w in warm)

    def mean(first_ms: int, last_ms: int) -> tuple[float, float]:
        part = deltas[first_ms // SAMPLE_MS : last_ms // SAMPLE_MS]
        span_s = max(len(part), 1) * SAMPLE_MS / 1000
        return sum(r for r, _ in part) / span_s, sum(w for _, w in part) / span_s

    result.mean_read_units_per_s, result.mean_write_units_per_s = mean(warm_ms, end_ms)
    result.healthy_read_units_per_s, result.healthy_write_units_per_s = mean(warm_ms, outage_ms)
    result.outage_read_units_per_s, result.outage_write_units_per_s = mean(outage_ms, end_ms)
    result.read_units_per_s = [
        round(sum(r for r, _ in deltas[k : k + step]), 1) for k in range(0, len(deltas), step)
    ]
    result.write_units_per_s = [
        round(sum(w for _, w in deltas[k : k + step]), 1) for k in range(0, len(deltas), step)
    ]


# --------------------------------------------------------------------------- runs and table


# A policy, its noise and the share of calls its outage fails: "count*" runs without noise, so
# its outage starts from a closed breaker (with noise the count policy is usually open
# already); "rate@2%" at 2 % noise; "rate60" through a partial outage (60 % of calls fail).
POLICIES = {
    "count": ("count", NOISE, 1.0),
    "count*": ("count", 0.0, 1.0),
    "rate": ("rate", NOISE, 1.0),
    "rate@2%": ("rate", 0.02, 1.0),
    "rate60": ("rate", NOISE, 0.6),
}
# A partial outage opens the breaker within this many windows (rate policy, 2,000 containers).
PARTIAL_OPEN_WITHIN_WINDOWS = 1.5


def scenarios_for(
    containers: int,
    arrivals: Sequence[str],
    policies: Sequence[str],
    noise_policies: Sequence[str],
    timeline: tuple[float, float, float],
) -> list[Scenario]:
    """``policies`` under every arrival; ``noise_policies`` under the first one only."""
    settle_s, noise_s, outage_s = timeline
    phases = {"settle_s": settle_s, "noise_s": noise_s, "outage_s": outage_s}
    scenarios = []
    for number, arrival in enumerate(arrivals):
        for label in [*policies, *(noise_policies if number == 0 else ())]:
            policy, noise, share = POLICIES[label]
            scenarios.append(
                Scenario(containers, policy, arrival, noise, outage_share=share, **phases)
            )
    return scenarios


def lmi_scenarios(
    environments: int,
    processes: Sequence[int],
    policies: Sequence[str],
    timeline: tuple[float, float, float],
) -> list[Scenario]:
    """Managed Instances: ``environments`` x P processes, for each P, under each policy."""
    settle_s, noise_s, outage_s = timeline
    scenarios = []
    for per_environment in processes:
        for label in policies:
            policy, noise, share = POLICIES[label]
            for refresh in REFRESH_MODELS:
                scenarios.append(
                    Scenario(
                        environments * per_environment,
                        policy,
                        LMI,
                        noise,
                        noise_s,
                        outage_s,
                        share,
                        settle_s,
                        processes=per_environment,
                        refresh=refresh,
                    )
                )
    return scenarios


def _seconds(value: float | None, limit: float) -> str:
    return f"> {limit:g}" if value is None else f"{value:.2f}"


COLUMNS = (
    "store",
    "containers",
    "arrival",
    "policy",
    "noise",
    "outage",
    "seed",
    "spurious trips",
    "healthy rejected",
    "s to open",
    "s to fleet rejecting",
    "failing calls sent",
    "read units/s peak",
    "read units/s mean",
    "write units/s peak",
    "write units/s mean",
    "meets 2,400 / 1,000 (lambda, ramp100)",
)


def table_rows(results: Sequence[Result], outage_s: float) -> list[list[str]]:
    rows = []
    for r in results:
        rows.append(
            [
                r.store,
                f"{r.containers:,}",
                r.arrival + (" shared reads" if r.refresh == "environment" else ""),
                r.policy,
                f"{r.noise:.1%}",
                f"{r.outage_share:.0%}",
                str(r.seed),
                str(r.spurious_trips),
                f"{r.healthy_rejected_pct:.1f} %",
                _seconds(r.seconds_to_open, outage_s),
                _seconds(r.seconds_to_fleet_rejecting, outage_s),
                f"{r.failing_calls_sent:,}",
                f"{r.peak_read_units_per_s:,.0f}",
                f"{r.mean_read_units_per_s:,.0f}",
                f"{r.peak_write_units_per_s:,.0f}",
                f"{r.mean_write_units_per_s:,.0f}",
                _meets(r),
            ]
        )
    return rows


def markdown_table(rows: Sequence[Sequence[str]], columns: Sequence[str] = COLUMNS) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def dynamodb_dollars_per_s(read_units_per_s: float, write_units_per_s: float) -> float:
    return (read_units_per_s * PRICE_PER_M_READS + write_units_per_s * PRICE_PER_M_WRITES) / 1e6


def valkey_dollars_per_s(read_units_per_s: float, write_units_per_s: float) -> float:
    """The same requests as EVALSHAs on ElastiCache Serverless (Valkey), storage minimum included.

    A DynamoDB read unit is half a refresh; every write unit is taken as one script call
    (DynamoDB's lost fences count too: a slight overestimate for Redis, which has none).
    """
    requests = read_units_per_s / READ_UNITS + write_units_per_s / WRITE_UNITS
    storage = MIN_GB * PRICE_PER_GB_HOUR / 3600
    return requests * ECPU_PER_REQUEST * PRICE_PER_M_ECPU / 1e6 + storage


COST_COLUMNS = (
    "containers",
    "policy",
    "store",
    "$ per 1M invocations, healthy",
    "$ per 1M invocations, outage",
    "$ per healthy hour",
    "$ per outage hour",
    "$ per month, healthy",
)


def cost(results: Sequence[Result], calls_per_s: int = CALLS_PER_S) -> list[dict[str, Any]]:
    """The cost figures in dollars: one per fleet size, policy and store, from the burst runs
    (the JSON's ``cost``, which bench/figures.py renders)."""
    out: list[dict[str, Any]] = []
    for r in results:
        if r.arrival != "burst" or r.outage_share < 1 or (r.policy == "count" and r.noise):
            continue
        if r.policy == "rate" and r.noise != NOISE:
            continue
        for label, price in (
            ("DynamoDB on-demand", dynamodb_dollars_per_s),
            ("ElastiCache Serverless (Valkey)", valkey_dollars_per_s),
        ):
            healthy = price(r.healthy_read_units_per_s, r.healthy_write_units_per_s)
            outage = price(r.outage_read_units_per_s, r.outage_write_units_per_s)
            per_m = 1e6 / calls_per_s
            out.append(
                {
                    "containers": r.containers,
                    "policy": r.policy,
                    "store": label,
                    "per_million_invocations_healthy": healthy * per_m,
                    "per_million_invocations_outage": outage * per_m,
                    "per_hour_healthy": healthy * 3600,
                    "per_hour_outage": outage * 3600,
                    "per_month_healthy": healthy * 3600 * HOURS_PER_MONTH,
                }
            )
    return out


def cost_row(c: Mapping[str, Any]) -> list[str]:
    return [
        f"{c['containers']:,}",
        c["policy"],
        c["store"],
        f"{c['per_million_invocations_healthy']:.4f}",
        f"{c['per_million_invocations_outage']:.4f}",
        f"{c['per_hour_healthy']:.2f}",
        f"{c['per_hour_outage']:.2f}",
        f"{c['per_month_healthy']:,.0f}",
    ]


def cost_rows(results: Sequence[Result], calls_per_s: int = CALLS_PER_S) -> list[list[str]]:
    """The cost table: one row per fleet size, policy and store, from the burst runs."""
    return [cost_row(c) for c in cost(results, calls_per_s)]


def prices_assumed() -> dict[str, float]:
    return {
        "dynamodb_per_million_write_units": PRICE_PER_M_WRITES,
        "dynamodb_per_million_read_units": PRICE_PER_M_READS,
        "valkey_per_million_ecpu": PRICE_PER_M_ECPU,
        "valkey_per_gb_hour": PRICE_PER_GB_HOUR,
        "valkey_ecpu_per_request": ECPU_PER_REQUEST,
    }


def targets() -> dict[str, float]:
    """The targets the runs are judged against (bench/README.md "Targets")."""
    return {
        "read_units_per_s": ITEM_READ_TARGET,
        "write_units_per_s": ITEM_WRITE_CAP,
        "open_within_s": OPEN_WITHIN_S,
        "partial_open_within_windows": PARTIAL_OPEN_WITHIN_WINDOWS,
        "partial_open_within_s": PARTIAL_OPEN_WITHIN_WINDOWS * config_for("rate").window_seconds,
    }


def document(results: Sequence[Result], environment: Mapping[str, Any]) -> dict[str, Any]:
    """The results file: what bench/figures.py renders the docs' scale figures from."""
    return {
        "environment": dict(environment),
        "prices_assumed": prices_assumed(),
        "targets": targets(),
        "results": [asdict(r) for r in results],
        "cost": cost(results),
    }


def _scenario_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(
        row[k]
        for k in (
            "store",
            "containers",
            "arrival",
            "policy",
            "noise",
            "outage_share",
            "processes",
            "refresh",
        )
    )


def merge(paths: Sequence[Path]) -> dict[str, Any]:
    """Results files of one plan run in parts (``--seeds 1,2,3``, then ``--seeds 4,5``) as
    the file one run would have written: each scenario where it first appears, its seeds in
    order, the cost derived again. The parts must be priced as this module prices now."""
    docs = []
    for path in paths:
        doc = json.loads(path.read_text())
        if doc.get("prices_assumed") != prices_assumed():
            raise SystemExit(f"{path}: priced otherwise than bench/scale.py now: rerun it")
        env = doc.get("environment")
        if not isinstance(env, dict) or not {"date_utc", "loadavg_1min", "command"} <= set(env):
            raise SystemExit(f"{path}: no environment (date_utc, loadavg_1min, command)")
        docs.append(doc)
    rows = [row for doc in docs for row in doc["results"]]
    order: dict[tuple[Any, ...], int] = {}
    seen: set[tuple[Any, ...]] = set()
    for row in rows:
        key = _scenario_key(row)
        order.setdefault(key, len(order))
        if (*key, row["seed"]) in seen:
            raise SystemExit(f"{key} seed {row['seed']} is in more than one file")
        seen.add((*key, row["seed"]))
    rows.sort(key=lambda row: (order[_scenario_key(row)], row["seed"]))
    envs = [doc["environment"] for doc in docs]
    environment = {
        "date_utc": min(env["date_utc"] for env in envs),
        "cpu_count": envs[0].get("cpu_count"),
        "loadavg_1min": [
            min(env["loadavg_1min"][0] for env in envs),
            max(env["loadavg_1min"][-1] for env in envs),
        ],
        "command": "; ".join(env["command"] for env in envs),
        "merged_from": [path.name for path in paths],
    }
    notes = [env["note"] for env in envs if env.get("note")]
    if notes:
        environment["note"] = " ".join(dict.fromkeys(notes))
    return document([Result(**row) for row in rows], environment)


def _write(path: Path, doc: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(
    stores: Sequence[str],
    model_plan: Sequence[Scenario],
    moto_plan: Sequence[Scenario],
    progress: Callable[[str], None] = _log,
) -> list[Result]:
    """Every planned scenario on every store (``moto_plan`` on moto, ``model_plan`` on the
    others)."""
    results: list[Result] = []
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
                plan = moto_plan
            elif store_kind not in ("memory", "ddb-model"):
                raise SystemExit(f"unknown store {store_kind!r}: choose memory, ddb-model or moto")
            else:
                plan = model_plan
            for number, scenario in enumerate(plan):
                size = scenario.containers
                name = f"scale-{size}-{scenario.policy}-{scenario.arrival}-{number}"
                store: Any
                if store_kind == "memory":
                    store = MemoryStore()
                elif store_kind == "ddb-model":
                    store = DynamoDBModelStore()
                else:
                    store = DynamoDBStore(table, boto3_client=client)
                result = simulate(scenario, store, store_kind, name)
                progress(
                    f"{store_kind} {size:>5} {scenario.label:<36} seed {scenario.seed}"
                    f" done in {result.wall_s:.1f} s"
                )
                results.append(result)
        finally:
            if server is not None:
                server.stop()
    return results


def plan(
    containers: Sequence[int],
    arrivals: Sequence[str],
    policies: Sequence[str],
    noise_policies: Sequence[str],
    timeline: tuple[float, float, float],
    partial_containers: Sequence[int] = (),
    partial_timeline: tuple[float, float, float] = (10.0, 20.0, 20.0),
    lmi_environments: int = 0,
    lmi_processes: Sequence[int] = (),
    lmi_policies: Sequence[str] = (),
    seeds: Sequence[int] = (1,),
) -> list[Scenario]:
    """The scenarios of one run, in order: each fleet size's, the partial outages (``rate60``
    under every arrival), then Managed Instances', each under every one of ``seeds`` (the
    arrivals' times, the calls' phases, the noise, each container's random source)."""
    planned = [
        scenario
        for size in containers
        for scenario in scenarios_for(size, arrivals, policies, noise_policies, timeline)
    ]
    planned += [
        scenario
        for size in partial_containers
        for scenario in scenarios_for(size, arrivals, ["rate60"], [], partial_timeline)
    ]
    if lmi_environments and lmi_processes:
        planned += lmi_scenarios(lmi_environments, lmi_processes, lmi_policies, timeline)
    return [replace(scenario, seed=seed) for scenario in planned for seed in seeds]


def _names(text: str, known: Sequence[str], what: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise SystemExit(f"unknown {what} {unknown}: choose from {', '.join(known)}")
    return names


def _meets(r: Result) -> str:
    if r.in_target:
        return "yes" if r.meets_units() else "NO"
    return "yes (outside target)" if r.meets_units() else "no (outside target)"


def _numbers(text: str, kind: Callable[[str], Any]) -> list[Any]:
    return [kind(part) for part in text.split(",") if part.strip()]


def _timeline(text: str) -> tuple[float, float, float]:
    parts = _numbers(text, float)
    if len(parts) != 3 or min(parts) < 0:
        raise SystemExit(f"a timeline is settle,noise,outage seconds (>= 0), got {text!r}")
    return parts[0], parts[1], parts[2]


def verdicts(results: Sequence[Result]) -> list[str]:
    """The issue's targets, each line saying whether this run met it."""
    lines = []
    big = [r for r in results if r.containers >= 5_000]
    for r in big:
        if not r.meets_units():
            missed = "MISSED units" if r.in_target else "over (outside target) units"
            lines.append(
                f"{missed}: {r.store} {r.containers} {r.arrival} {r.policy} "
                f"noise {r.noise:.1%}: peak {r.peak_read_units_per_s:,.0f} read / "
                f"{r.peak_write_units_per_s:,.0f} write units/s"
            )
    window_s = config_for("rate").window_seconds
    for r in results:
        if r.policy == "rate" and r.containers >= 1_000:
            opened = r.seconds_to_open
            partial = r.outage_share < 1
            bound = PARTIAL_OPEN_WITHIN_WINDOWS * window_s if partial else OPEN_WITHIN_S
            if r.spurious_trips or opened is None or opened > bound:
                what = f"partial trip (outage {r.outage_share:.0%})" if partial else "trip"
                lines.append(
                    f"MISSED {what}: {r.store} {r.containers} {r.arrival} noise {r.noise:.1%}: "
                    f"{r.spurious_trips} spurious, open after {opened} s (bound {bound:g} s)"
                )
    if not any(line.startswith("MISSED") for line in lines):
        lines.append("every target met")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--stores", default="ddb-model", help="any of ddb-model, memory, moto (comma-separated)"
    )
    parser.add_argument("--containers", default="100,1000,5000", help="fleet sizes (model)")
    parser.add_argument("--moto-containers", default="100", help="fleet sizes (moto)")
    parser.add_argument("--arrivals", default=",".join(ARRIVALS), help=", ".join(ARRIVALS))
    parser.add_argument(
        "--policies",
        default="count*,rate",
        # argparse formats help with %: the 2 % policy's name needs escaping.
        help=f"under every arrival: {', '.join(POLICIES)}".replace("%", "%%"),
    )
    parser.add_argument(
        "--noise-policies", default="count,rate@2%", help="under the first arrival only"
    )
    parser.add_argument(
        "--partial-containers",
        default="2000",
        help="fleet sizes of the partial outage (rate60: 60 %% of calls fail), every arrival",
    )
    parser.add_argument(
        "--partial-timeline", default="10,20,20", help="settle,noise,outage s (partial outage)"
    )
    parser.add_argument(
        "--lmi-environments",
        type=int,
        default=100,
        help="Managed Instances: execution environments (0: no lmi runs)",
    )
    parser.add_argument(
        "--lmi-processes", default="16,64", help="Managed Instances: processes per environment"
    )
    parser.add_argument("--lmi-policies", default="count*,rate", help="Managed Instances' policies")
    parser.add_argument(
        "--seeds", default="1", help="run every scenario once per seed (the spread of a figure)"
    )
    parser.add_argument("--timeline", default="10,20,10", help="settle,noise,outage s (model)")
    parser.add_argument("--moto-timeline", default="5,5,5", help="settle,noise,outage s (moto)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="run nothing: write --output as these results files of one plan, run in parts",
    )
    args = parser.parse_args(argv)
    if args.merge:
        _write(args.output, merge(args.merge))
        _log(f"{len(args.merge)} files merged into {args.output}")
        return 0
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M")
    load_start = round(os.getloadavg()[0], 2)

    def stop(signum: int, _frame: object) -> None:
        # SIGTERM becomes an exception, so the moto server is stopped on the way out.
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    stores = _names(args.stores, ("ddb-model", "memory", "moto"), "stores")
    timeline = _timeline(args.timeline)
    arrivals = _names(args.arrivals, tuple(ARRIVALS), "arrivals")
    policies = _names(args.policies, tuple(POLICIES), "policies")
    noise_policies = _names(args.noise_policies, tuple(POLICIES), "policies")
    if args.lmi_environments < 0:
        raise SystemExit(f"--lmi-environments must be 0 or more, got {args.lmi_environments}")
    seeds = _numbers(args.seeds, int)
    if not seeds:
        raise SystemExit(f"--seeds needs at least one seed, got {args.seeds!r}")
    lmi_processes = _numbers(args.lmi_processes, int)
    if any(p < 1 for p in lmi_processes):
        raise SystemExit(f"--lmi-processes must be 1 or more each, got {args.lmi_processes!r}")
    model_plan = plan(
        _numbers(args.containers, int),
        arrivals,
        policies,
        noise_policies,
        timeline,
        _numbers(args.partial_containers, int),
        _timeline(args.partial_timeline),
        args.lmi_environments,
        lmi_processes,
        _names(args.lmi_policies, tuple(POLICIES), "policies"),
        seeds,
    )
    moto_plan = plan(
        _numbers(args.moto_containers, int),
        arrivals,
        policies,
        noise_policies,
        _timeline(args.moto_timeline),
        seeds=seeds,
    )
    results = run(stores, model_plan, moto_plan)
    print(markdown_table(table_rows(results, timeline[2])))
    print()
    print(markdown_table(cost_rows(results), COST_COLUMNS))
    print()
    print("\n".join(verdicts(results)))
    environment = {
        "date_utc": started,
        "cpu_count": os.cpu_count(),
        "loadavg_1min": [load_start, round(os.getloadavg()[0], 2)],
        "command": shlex.join(["bench/scale.py", *(sys.argv[1:] if argv is None else argv)]),
    }
    _write(args.output, document(results, environment))
    _log(f"figures written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
