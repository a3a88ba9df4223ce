"""The figures of a run, from what the provider and the containers recorded.

Pure functions of a :class:`RunRecord`, used live (each second of the progress display) and at
the end (the summary table, the chart). Times are seconds since the run began.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bench.demo.container import Call, ContainerReport

if TYPE_CHECKING:
    from bench.demo.drain import DrainFigures

STATES = ("closed", "half_open", "open")
CHARGED, PROVIDER_FAILED, CIRCUIT_OPEN, DEFERRED = 200, 502, 503, 202


@dataclass
class RunRecord:
    """Everything one run recorded."""

    label: str  # "shared" or "per-container"
    title: str
    store: str  # where the breakers kept their state, in words
    shared: bool
    containers: int
    outage: tuple[float, float]  # when the provider went down and came back
    policy: str = "count"
    calls: list[Call] = field(default_factory=list)
    provider: list[tuple[float, bool]] = field(default_factory=list)  # arrival, charged?
    reports: list[ContainerReport] = field(default_factory=list)
    duration: float = 0.0
    queued: int | None = None  # payments that reached the run's SQS queue (defer mode)
    drained: list[float] = field(default_factory=list)  # when the drain charged each one
    drain: DrainFigures | None = None  # the drain's line (defer mode)


@dataclass(frozen=True)
class RunSummary:
    """The figures the demo compares."""

    calls: int
    charged: int
    provider_failed: int  # 502s: the function saw the provider fail
    rejected: int  # 503s: the breaker turned the payment away, the provider was not called
    deferred: int  # 202s: turned away, and queued for later by the fallback
    failing_calls: int  # failures the provider answered during the outage
    noise_failures: int  # failures it answered while otherwise healthy (--noise)
    failed_probes: int  # probes that met the outage
    trip_failures: int  # failing calls in the outage that were not probes: what it took to trip
    spurious_trips: int  # transitions to open during the healthy phase: noise tripped it
    seconds_to_reject: float | None  # outage start → every container has turned a call away
    probes_at_recovery: int  # probes the recovered provider answered
    probes_per_window: tuple[int, ...]  # probe leases granted in each half-open window
    recovery_to_closed: float | None  # provider back → every container admitting again
    store_requests: int
    store_errors: int
    degradations: int
    would_rejects: int = 0  # shadow mode: calls it let through that enforce would have rejected
    # What the store raised in every container, by error name: how many of each. A timeout is
    # the machine's load; a fault is not (bench.demo.stores.WatchedStore tells them apart).
    store_faults: dict[str, int] = field(default_factory=dict)
    store_timeouts: dict[str, int] = field(default_factory=dict)

    @property
    def windows(self) -> int:
        return len(self.probes_per_window)

    @property
    def turned_away(self) -> int:
        """Payments the breaker rejected: answered 503, or deferred by the fallback."""
        return self.rejected + self.deferred


def summarize(record: RunRecord) -> RunSummary:
    statuses = Counter(call.status for call in record.calls)
    probes = [call for call in record.calls if call.probe]
    # A window is one generation of a breaker record: fleet-wide when shared, one per
    # container's own record otherwise.
    windows: Counter[Hashable] = Counter()
    for call in probes:
        for gen in call.windows:
            windows[gen if record.shared else (call.container, gen)] += 1
    down, back = record.outage
    # A probe that started after the recovery can only have failed on noise.
    failed_probes = sum(
        1 for call in probes if call.status == PROVIDER_FAILED and call.start < back
    )
    failing = sum(1 for at, ok in record.provider if not ok and down <= at < back)
    return RunSummary(
        calls=len(record.calls),
        charged=statuses[CHARGED],
        provider_failed=statuses[PROVIDER_FAILED],
        rejected=statuses[CIRCUIT_OPEN],
        deferred=statuses[DEFERRED],
        failing_calls=failing,
        noise_failures=sum(1 for _, ok in record.provider if not ok) - failing,
        failed_probes=failed_probes,
        trip_failures=failing - failed_probes,
        spurious_trips=spurious_trips(record),
        seconds_to_reject=seconds_to_reject(record),
        probes_at_recovery=sum(1 for call in probes if call.status == CHARGED),
        probes_per_window=tuple(windows[key] for key in sorted(windows, key=str)),
        recovery_to_closed=recovery_to_closed(record),
        store_requests=sum(report.store_requests for report in record.reports),
        store_errors=sum(report.store_errors for report in record.reports),
        degradations=sum(report.degradations for report in record.reports),
        would_rejects=sum(report.would_rejects for report in record.reports),
        store_faults=_totals(report.store_faults for report in record.reports),
        store_timeouts=_totals(report.store_timeouts for report in record.reports),
    )


def _totals(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    """Each name's count, summed over the containers."""
    total: Counter[str] = Counter()
    for each in counts:
        total.update(each)
    return dict(total)


@dataclass(frozen=True)
class Rates:
    """Payments per second over one span of a run: what two runs compare like with like.

    Two runs of the demo take the same traffic (containers × rate), but they do not make the
    same number of calls: a run lasts until its fleet has closed again (plus ``--linger``),
    and a container makes its next call only once its last one ended (store round trips and
    the provider's latency slow a fleet down). Counts over the same seconds, per second,
    compare the runs; counts over each run's own length do not.
    """

    seconds: float
    calls: float
    charged: float
    failed: float  # 502s: the function saw the provider fail
    turned_away: float  # 503s and 202s: the breaker answered without calling the provider


def rates(record: RunRecord, until: float) -> Rates:
    """Payments per second among the calls that started in the first ``until`` seconds."""
    if until <= 0:
        raise ValueError(f"a span of {until} s holds no calls")
    statuses = Counter(call.status for call in record.calls if call.start < until)
    return Rates(
        until,
        calls=sum(statuses.values()) / until,
        charged=statuses[CHARGED] / until,
        failed=statuses[PROVIDER_FAILED] / until,
        turned_away=(statuses[CIRCUIT_OPEN] + statuses[DEFERRED]) / until,
    )


def common_seconds(records: Iterable[RunRecord]) -> float:
    """The seconds every run covers: from the start to the end of the shortest run."""
    return min(record.duration for record in records)


def spurious_trips(record: RunRecord) -> int:
    """Trips that opened the breaker before the outage began: each a record generation seen
    open (one per container's own record when not shared) whose opening came first."""
    down = record.outage[0]
    trips = {
        call.gen if record.shared else (call.container, call.gen)
        for call in record.calls
        if call.opened is not None and call.opened < down
    }
    return len(trips)


def seconds_to_reject(record: RunRecord) -> float | None:
    """From the outage's start until the last container turned its first payment away (an
    open breaker, seen fleet-wide); None if a container never did during the outage."""
    down, back = record.outage
    first: dict[int, float] = {}
    for call in record.calls:
        if down <= call.start < back and call.status in (CIRCUIT_OPEN, DEFERRED):
            first[call.container] = min(call.start, first.get(call.container, call.start))
    if len(first) < record.containers:
        return None
    return max(first.values()) - down


def by_container(calls: Iterable[Call]) -> dict[int, list[Call]]:
    grouped: dict[int, list[Call]] = defaultdict(list)
    for call in sorted(calls, key=lambda call: call.end):
        grouped[call.container].append(call)
    return grouped


def closed_since(calls: Sequence[Call], after: float) -> float | None:
    """When a container, after ``after``, took its first payment that nothing turned away
    since: the end of its first 200 after its last 503/202. None while it has none.

    A 502 after the recovery was admitted (the breaker let it through) and failed on
    background noise: it neither closes nor reopens the container's view.
    """
    admitted_at = None
    for call in calls:
        if call.start < after or call.status == PROVIDER_FAILED:
            continue
        if call.status == CHARGED:
            admitted_at = admitted_at if admitted_at is not None else call.end
        else:
            admitted_at = None
    return admitted_at


def fleet_closed_at(record: RunRecord) -> float | None:
    """When the last container started admitting payments again after the recovery."""
    grouped = by_container(record.calls)
    if len(grouped) < record.containers:
        return None
    times = [closed_since(calls, record.outage[1]) for calls in grouped.values()]
    if any(when is None for when in times):
        return None
    return max(when for when in times if when is not None)


def recovery_to_closed(record: RunRecord) -> float | None:
    closed = fleet_closed_at(record)
    return None if closed is None else closed - record.outage[1]


# --------------------------------------------------------------------------- over time


@dataclass(frozen=True)
class Interval:
    """What happened in ``[start, end)``: the figures of one progress line or chart bin."""

    start: float
    end: float
    api_charged: int
    api_failed: int
    turned_away: int  # rejected by the breaker: a 503, or a 202 when the fallback deferred it
    deferred: int
    probes: int
    store_requests: int
    states: dict[str, int]  # containers by the state they saw at ``end``


def interval(record: RunRecord, start: float, end: float, states_at: StateIndex) -> Interval:
    statuses: Counter[int] = Counter()
    probes = store_requests = 0
    for call in record.calls:
        if start <= call.start < end:
            statuses[call.status] += 1
            probes += call.probe
            store_requests += call.store_requests if record.shared else 0
    provider = [ok for at, ok in record.provider if start <= at < end]
    return Interval(
        start,
        end,
        api_charged=sum(provider),
        api_failed=len(provider) - sum(provider),
        turned_away=statuses[CIRCUIT_OPEN] + statuses[DEFERRED],
        deferred=statuses[DEFERRED],
        probes=probes,
        store_requests=store_requests,
        states=states_at.counts(end),
    )


class StateIndex:
    """Each container's view of the breaker over time, from the calls it made."""

    def __init__(self, record: RunRecord) -> None:
        self.containers = record.containers
        self._ends: dict[int, list[float]] = {}
        self._seen: dict[int, list[str]] = {}
        for number, calls in by_container(record.calls).items():
            self._ends[number] = [call.end for call in calls]
            self._seen[number] = [call.seen for call in calls]

    def counts(self, at: float) -> dict[str, int]:
        """Containers by the state they last saw before ``at`` (closed before any call)."""
        counts = dict.fromkeys(STATES, 0)
        for number in range(self.containers):
            ends = self._ends.get(number, [])
            index = bisect.bisect_right(ends, at) - 1
            counts[self._seen[number][index] if index >= 0 else "closed"] += 1
        return counts


def intervals(record: RunRecord, width: float, until: float | None = None) -> list[Interval]:
    """The run cut into ``width``-second intervals (the chart's bins)."""
    index = StateIndex(record)
    end = record.duration if until is None else until
    count = max(1, round(end / width))
    return [interval(record, i * width, (i + 1) * width, index) for i in range(count)]
