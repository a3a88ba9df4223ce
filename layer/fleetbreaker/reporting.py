"""What a container counts between reports, and when it reports (rate policy, slow calls, quorum).

A success must not cost a store write, so under the rate policy each container adds its calls,
failures and slow calls up here and sends them in one write per report interval (the write
also refreshes its cached copy of the fleet's record). Three things bend that schedule:

- a failure (or slow call) that, added to the fleet's window as this container last saw it,
  would open the breaker is reported at once, so tripping stays about as fast as under the
  count policy;
- a call still running past ``slow_call_duration`` is reported slow while it runs (a Lambda
  timeout may kill the container before the call ends, and with it the count);
- one record takes every container's writes, and one DynamoDB item takes about 1,000 writes/s.
  Each record carries its own write rate (reports per bucket), and every container stretches
  its interval so the fleet's periodic reports stay near ``TARGET_REPORTS_PER_S``, while
  out-of-turn reports are thinned to about ``URGENT_REPORTS_PER_S`` in all.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import secrets
import threading
import weakref
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from fleetbreaker import state as rules
from fleetbreaker.state import Report, WindowCounts

if TYPE_CHECKING:
    from fleetbreaker.state import Policy, Record

# Periodic reports the fleet aims to send to one breaker's record per second, and the extra
# out-of-turn reports it may add: together well under one DynamoDB item's 1,000 writes/s.
TARGET_REPORTS_PER_S = 250.0
URGENT_REPORTS_PER_S = 200.0
# The longest report interval, in windows. Past one window a report carries calls older than
# the window, and the window holds about half the fleet's reports; the rates it shows are
# the same, and 5,000 containers then send 250 reports/s, not 500 (a margin under one item's
# 1,000 writes/s for lost fences, newcomers and out-of-turn reports).
MAX_INTERVAL_WINDOWS = 2
# The slow-call watcher's longest sleep (s), whatever slow_call_duration says.
SLOW_WATCH_MAX_PERIOD_S = 1.0

_process_ids: dict[int, str] = {}


def process_container_id() -> str:
    """This process's container id: random, and new in a forked child (one process is one
    Lambda container)."""
    pid = os.getpid()
    found = _process_ids.get(pid)
    if found is None:
        found = _process_ids.setdefault(pid, secrets.token_hex(6))
    return found


class CallTally:
    """A container's calls since its last report, and the calls still running.

    Good calls (succeeded, not slow) are the hot path: each is one ``next(good)`` on an
    ``itertools.count``, atomic under the GIL, so no lock. Bad calls, the watcher and
    ``take`` use the lock. ``take`` reads the counter with a ``next`` of its own, which it
    accounts for.
    """

    def __init__(self, policy: Policy, interval_ms: int) -> None:
        self.slow_ms = policy.slow_ms
        self.base_ms = interval_ms
        self.interval_ms = interval_ms  # the one in force: take() gets it from the breaker
        self._jitter: random.Random | None = None
        self.good = itertools.count()
        self._good_base = 0  # the counter's value just after the last take
        self._peeks = 0  # next() calls made by peeks since then (not calls)
        self.calls = 0  # bad calls, and calls the watcher reported
        self.taken = 0  # calls taken into reports, ever (this container's call rate)
        self.failures = 0
        self.slow = 0
        # The hot path's one check: ``now >= due_ms`` is the earlier of the report's due time
        # and the end of the current span (see rotate).
        self.due_ms = 0
        self.report_due_ms = 0  # the pending counts must be reported by then
        self.span_ms = policy.bucket_ms
        self.span_end_ms = 0
        # The pending counts (all calls, failures, slow) as they stood at the last two span
        # ends: what the pending counts hold beyond ``_older`` are the recent calls (one to
        # two spans of them), which a report may send alone (see take_recent).
        self._older = (0, 0, 0)
        self._mid = (0, 0, 0)
        self.urgent_after_ms = 0  # an out-of-turn report is considered again from then
        self.running: dict[int, int] = {}  # call number -> start, epoch ms
        self.numbers = itertools.count()
        # The generation the pending counts were taken under (None: not known yet). A store
        # counts them only into that generation's window (state.Report.gen).
        self.gen: int | None = None
        self._lock = threading.Lock()

    def _goods(self) -> int:
        # Caller holds the lock. This next() is not a call: remember it.
        seen = next(self.good) - self._good_base - self._peeks
        self._peeks += 1
        return seen

    def bad(self, started: int | None, now_ms: int, failed: bool) -> bool:
        """Count a call that failed or may be slow (``started`` None: it was not timed).
        True when it was bad."""
        with self._lock:
            slow = (
                started is not None
                and self.slow_ms is not None
                and now_ms - started >= self.slow_ms
            )
            self.calls += 1
            self.failures += failed
            self.slow += slow
            return failed or slow

    def late(self, failed: bool) -> bool:
        """Count the end of a call the watcher already reported as a call and a slow call."""
        if failed:
            with self._lock:
                self.failures += 1
        return failed

    def sweep(self, now_ms: int) -> int:
        """Count the calls running past ``slow_call_duration`` as slow calls; how many."""
        if self.slow_ms is None or not self.running:
            return 0
        overdue = [
            n for n, started in list(self.running.items()) if now_ms - started >= self.slow_ms
        ]
        # pop() decides the race with the call's end: whoever removes the entry counts it.
        taken = sum(1 for n in overdue if self.running.pop(n, None) is not None)
        if taken:
            with self._lock:
                self.calls += taken
                self.slow += taken
        return taken

    def take(self, container: str, now_ms: int, interval_ms: int) -> Report:
        """The pending counts as one report, zeroed here; the next one is due an interval on."""
        with self._lock:
            mark = next(self.good)
            goods = mark - self._good_base - self._peeks
            self._good_base, self._peeks = mark + 1, 0
            report = Report(container, self.calls + goods, self.failures, self.slow, self.gen)
            self.taken += report.calls
            self.calls = self.failures = self.slow = 0
            self._older = self._mid = (0, 0, 0)
            self._schedule(container, now_ms, interval_ms)
            return report

    def _totals(self) -> tuple[int, int, int]:
        # Caller holds the lock.
        return self.calls + self._goods(), self.failures, self.slow

    def rotate(self, now_ms: int) -> None:
        """A span ended: the calls before the previous span's end stop being recent."""
        with self._lock:
            if now_ms < self.span_end_ms:
                return
            self._older, self._mid = self._mid, self._totals()
            self.span_end_ms = now_ms + self.span_ms
            self.due_ms = min(self.report_due_ms, self.span_end_ms)

    def recent(self) -> tuple[int, int, int]:
        """(calls, failures, slow) pending from the last one to two spans."""
        with self._lock:
            calls, failures, slow = self._totals()
            old_calls, old_failures, old_slow = self._older
            return calls - old_calls, failures - old_failures, slow - old_slow

    def take_recent(self, container: str, now_ms: int, interval_ms: int) -> Report:
        """Only the recent counts as one report; the older ones stay pending.

        A container whose own recent calls fail at the policy's rate sends these alone: a
        report of a whole stretched interval (up to a window of calls, mostly from before an
        outage) would land in the newest bucket and hide the outage from the short window.
        The older counts follow with a later report, or are dropped by a trip.
        """
        with self._lock:
            mark = next(self.good)
            goods = mark - self._good_base - self._peeks
            self._good_base, self._peeks = mark + 1, 0
            old_calls, old_failures, old_slow = self._older
            report = Report(
                container,
                self.calls + goods - old_calls,
                self.failures - old_failures,
                self.slow - old_slow,
                self.gen,
            )
            self.taken += report.calls
            # Goods kept as plain calls: ``calls`` counts every call, good or bad.
            self.calls, self.failures, self.slow = self._older
            self._mid = self._older
            self._schedule(container, now_ms, interval_ms)
            return report

    def observe(self, gen: int) -> None:
        """The breaker saw its record at ``gen``: counts pending from another generation are
        dropped (they describe the dependency before a trip, or before a reset)."""
        if gen == self.gen:
            return
        with self._lock:
            if self.gen is not None:
                mark = next(self.good)
                self._good_base, self._peeks = mark + 1, 0
                self.calls = self.failures = self.slow = 0
                self._older = self._mid = (0, 0, 0)
            self.gen = gen

    def carry(self, report: Report) -> None:
        """Put back the counts of a report the store could not apply (they go with the next
        one), unless the generation moved on meanwhile."""
        with self._lock:
            if report.gen != self.gen:
                return
            # Goods carried as plain calls: ``calls`` counts every call, good or bad.
            self.calls += report.calls
            self.failures += report.failures
            self.slow += report.slow
            # Carried counts are older than anything pending since.
            carried = (report.calls, report.failures, report.slow)
            self._older = _plus(self._older, carried)
            self._mid = _plus(self._mid, carried)

    def reschedule(self, container: str, now_ms: int, interval_ms: int) -> None:
        """Set the next report ``interval_ms`` after ``now_ms`` (the report's answer may
        have changed the interval)."""
        with self._lock:
            self._schedule(container, now_ms, interval_ms)

    def defer(self, now_ms: int, interval_ms: int, delay_ms: int) -> None:
        """Use ``interval_ms`` from now on, the next report due ``delay_ms`` from ``now_ms``."""
        with self._lock:
            self.interval_ms = interval_ms
            self.report_due_ms = now_ms + delay_ms
            self.due_ms = min(self.report_due_ms, max(self.span_end_ms, now_ms))

    def start(self, now_ms: int) -> None:
        """The first report is due one base interval from ``now_ms``."""
        with self._lock:
            self.report_due_ms = now_ms + self.base_ms
            self.span_end_ms = now_ms + self.span_ms
            self.due_ms = min(self.report_due_ms, self.span_end_ms)

    def _schedule(self, container: str, now_ms: int, interval_ms: int) -> None:
        self.interval_ms = interval_ms
        if interval_ms > self.base_ms:
            # Containers that stretched at the same moment would otherwise keep reporting
            # in the same second, every interval: jitter by +-25 %, seeded by container.
            if self._jitter is None:
                self._jitter = random.Random(zlib.crc32(container.encode()))
            interval_ms = round(interval_ms * (0.75 + self._jitter.random() / 2))
        self.report_due_ms = now_ms + interval_ms
        self.due_ms = min(self.report_due_ms, max(self.span_end_ms, now_ms))

    @property
    def stretched(self) -> bool:
        """Whether the record's write rate stretched this container's report interval.

        A cache refresh then reads instead of reporting: a refresh every ``cache_ttl`` that
        wrote would undo the stretch (one write per container per ``cache_ttl`` whatever the
        interval), so the counts wait until they are due.
        """
        return self.interval_ms > self.base_ms

    def pending_calls(self) -> int:
        with self._lock:
            return self.calls + self._goods()

    def projected(self, counts: WindowCounts, container_noted: bool) -> WindowCounts:
        """The fleet's window as last seen, plus what this container has not reported yet."""
        adds_failing = 0 if container_noted or not self.failures else 1
        adds_slow = 0 if container_noted or not self.slow else 1
        return WindowCounts(
            counts.calls + self.pending_calls(),
            counts.failures + self.failures,
            counts.slow + self.slow,
            counts.reports,
            counts.failing_containers + adds_failing,
            counts.slow_containers + adds_slow,
        )


def _plus(a: tuple[int, int, int], b: tuple[int, int, int]) -> tuple[int, int, int]:
    return a[0] + b[0], a[1] + b[1], a[2] + b[2]


def write_rate(counts: WindowCounts, policy: Policy) -> float:
    """Reports per second the record takes (its load as a hot key).

    The largest of the window's average, the newest buckets' rate and the current bucket's
    (over at least a tenth of a bucket): the average lags a fleet that just grew (a thousand
    containers starting in the same second) by up to a window, and the newcomers of such a
    fleet must see it within a fraction of a second.
    """
    average = counts.reports * 1000 / policy.window_ms
    if counts.recent_ms <= 0:
        return average
    recent = counts.recent_reports * 1000 / counts.recent_ms
    current = counts.current_reports * 1000 / max(counts.current_ms, policy.bucket_ms / 10, 1)
    return max(average, recent, current)


def recent_failing(recent: tuple[int, int, int], policy: Policy) -> bool:
    """Whether a container's own recent calls fail (or run slow) at the policy's rate."""
    calls, failures, slow = recent
    if calls <= 0:
        return False
    ratio = policy.failure_ratio
    if ratio is not None and failures and rules.reaches(failures, calls, ratio):
        return True
    return policy.slow_ms is not None and slow > 0 and rules.reaches(slow, calls, policy.slow_ratio)


# Cache refreshes the fleet aims to send to one record per second: 1,500 read units of
# eventually consistent reads (half a unit each), under 80 % of one partition's 3,000.
TARGET_REFRESHES_PER_S = 3_000.0
# A refresh waits at most this many cache_ttl: the longest a container acts on a view of the
# record (the documented maximum staleness, docs/architecture.md).
MAX_REFRESH_STRETCH = 2.0


def fleet_size(counts: WindowCounts, policy: Policy, own_calls: int, own_ms: int) -> float | None:
    """The containers calling a breaker: the fleet's call rate over this container's own.

    Every call is reported once, so the window's calls over its length are the fleet's call
    rate, whatever the intervals; Lambda spreads requests evenly over a function's
    containers. None when there is nothing to go on.
    """
    if counts.calls <= 0 or own_calls <= 0 or own_ms <= 0:
        return None
    return (counts.calls / policy.window_ms) / (own_calls / own_ms)


def refresh_ms(containers: float, cache_ms: int, rng: random.Random) -> int:
    """How long a container's cached view stays fresh, given the fleet's size.

    ``cache_ttl`` while the fleet's refreshes stay under TARGET_REFRESHES_PER_S; past that,
    stretched so they do, jittered by +-25 % (else containers that stretched together keep
    refreshing in the same instant), never shorter than ``cache_ttl`` nor longer than
    MAX_REFRESH_STRETCH of it.
    """
    wanted = containers * 1000 / TARGET_REFRESHES_PER_S
    if cache_ms <= 0 or wanted <= cache_ms:
        return cache_ms
    jittered = wanted * (0.75 + rng.random() / 2)
    return round(max(cache_ms, min(jittered, MAX_REFRESH_STRETCH * cache_ms)))


def next_interval_ms(current_ms: int, base_ms: int, counts: WindowCounts, policy: Policy) -> int:
    """The next report interval, from the one in force and the record's write rate.

    Scaling the interval in force by sqrt(W / TARGET) settles the fleet at W = TARGET for any
    fleet size; scaling the base interval by W / TARGET settles at sqrt(C * TARGET / base)
    instead (1,414 writes/s for 5,000 containers at a 1 s base) and oscillates. The square
    root damps the correction: the window's rate lags a change by up to a window. The
    interval stays between ``base_ms`` and ``max_interval_ms``.
    """
    rate = write_rate(counts, policy)
    if rate <= 0:
        return base_ms
    wanted = round(current_ms * math.sqrt(rate / TARGET_REPORTS_PER_S))
    return max(base_ms, min(wanted, max_interval_ms(policy)))


def max_interval_ms(policy: Policy) -> int:
    """The longest report interval (MAX_INTERVAL_WINDOWS windows)."""
    return MAX_INTERVAL_WINDOWS * policy.window_ms


def fleet_interval_ms(
    counts: WindowCounts, policy: Policy, own_calls: int, own_ms: int
) -> int | None:
    """The report interval the fleet already uses, estimated by a container that just joined.

    A bucket's calls per report is what one container gathers in one interval; divided by
    this container's own call rate (``own_calls`` in ``own_ms``) it gives that interval for
    a fleet of containers that each take about the same traffic. None when there is nothing
    to go on. A newcomer adopts it once, after its first report, instead of reporting at the
    base interval until the fleet's write rate teaches it (which, with a hundred containers
    joining a second, kept the record over 1,000 writes/s for a while).
    """
    if counts.reports <= 0 or counts.calls <= 0 or own_calls <= 0 or own_ms <= 0:
        return None
    if write_rate(counts, policy) < TARGET_REPORTS_PER_S / 2:
        # Not a hot record: report_interval stays the longest a container holds its counts.
        return None
    calls_per_report = counts.calls / counts.reports
    return round(calls_per_report / (own_calls / own_ms))


def urgent_allowed(
    counts: WindowCounts, policy: Policy, interval_ms: int, cache_ms: int, rng: random.Random
) -> bool:
    """Thin out-of-turn reports so the whole fleet sends about URGENT_REPORTS_PER_S.

    The fleet has about W * I containers; each considers an urgent report at most once per
    ``cache_ttl``, so each goes ahead with probability URGENT * cache_ttl / containers.
    """
    containers = write_rate(counts, policy) * interval_ms / 1000
    if containers <= 1:
        return True
    chance = URGENT_REPORTS_PER_S * max(cache_ms, 1) / 1000 / containers
    return chance >= 1 or rng.random() < chance


def wants_urgent_report(
    record: Record | None, tally: CallTally, policy: Policy, container: str, now_ms: int
) -> bool:
    """Whether this container's pending counts should reach the store before they are due.

    When they would open the breaker as this container last saw it; or, while the interval
    is stretched, when its own recent calls fail (or run slow) at the policy's rate: the
    fleet's counts then reach the store up to a whole interval late, and without this a
    large fleet would trip that much later than a small one.
    """
    if tally.stretched and recent_failing(tally.recent(), policy):
        return True
    counts = rules.window_counts(record, policy, now_ms)
    noted = record is not None and container in record.failing
    return rules.should_trip(tally.projected(counts, noted), policy)


class SlowCallWatcher:
    """A breaker's entry with the process's slow-call watcher, which reports calls hung past
    ``slow_call_duration``.

    One daemon thread per process sweeps every watching breaker, each every quarter of its
    duration (a timer per call would cost far more on the hot path), so a hung call is
    reported within 1.25 × the duration; the thread ends when no breaker is left. One thread
    whatever the number of breakers: a thousand breakers built and dropped do not leave a
    thousand threads behind. A sweep that reports waits for its store (at most its deadline),
    and the other breakers' sweeps wait with it.
    """

    def __init__(self, sweep: Callable[[], object], period_s: float) -> None:
        # A weak reference: the watcher must not keep a discarded breaker alive.
        self._sweep = weakref.WeakMethod(sweep)
        self.period_s = period_s
        self.due = 0.0  # monotonic seconds of the next sweep
        self._started = False

    def ensure_running(self) -> None:
        if not self._started:
            self._started = True
            _WATCH.add(self)

    def stop(self) -> None:
        _WATCH.discard(self)

    def sweep(self) -> bool:
        """Sweep once; False when the breaker is gone."""
        sweep = self._sweep()
        if sweep is None:
            return False
        try:
            sweep()
        except Exception:  # never let the watcher die: log and keep watching
            import logging

            logging.getLogger("fleetbreaker").exception("slow-call watcher failed")
        return True


class _ProcessWatch:
    """The process's one slow-call watcher thread and the breakers it sweeps."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watchers: set[SlowCallWatcher] = set()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, watcher: SlowCallWatcher) -> None:
        import time

        with self._lock:
            watcher.due = time.monotonic() + watcher.period_s
            self._watchers.add(watcher)
            # Not alive in a forked child, or ended when its last breaker went: start one.
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="fleetbreaker-slow-calls", daemon=True
                )
                self._thread.start()
        self._wake.set()  # a shorter period than the current sleep

    def discard(self, watcher: SlowCallWatcher) -> None:
        with self._lock:
            self._watchers.discard(watcher)

    def _run(self) -> None:
        import time

        while True:
            with self._lock:
                if not self._watchers:
                    self._thread = None
                    return
                watchers = list(self._watchers)
            now = time.monotonic()
            for watcher in watchers:
                if watcher.due <= now:
                    if not watcher.sweep():  # the breaker is gone
                        self.discard(watcher)
                        continue
                    watcher.due = time.monotonic() + watcher.period_s
            soonest = min((w.due for w in watchers), default=now) - time.monotonic()
            self._wake.wait(min(max(soonest, 0.001), SLOW_WATCH_MAX_PERIOD_S))
            self._wake.clear()

    def threads(self) -> int:
        """Live watcher threads (0 or 1)."""
        thread = self._thread
        return int(thread is not None and thread.is_alive())


_WATCH = _ProcessWatch()
