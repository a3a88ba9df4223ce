"""What a container counts between its reports: its calls since the last one, and the calls
still running (slow-call detection). See :mod:`fleetbreaker.rate` for when it reports.
"""

from __future__ import annotations

import itertools
import random
import threading
import zlib
from typing import TYPE_CHECKING

from fleetbreaker.record import Report
from fleetbreaker.window import WindowCounts

if TYPE_CHECKING:
    from fleetbreaker.policy import Policy

# The recent calls (see CallTally.rotate) cover one to two spans, and more when calls are
# sparse: the older mark moves on only once the calls after it would number at least
# MIN_RECENT_CALLS, or it is MAX_RECENT_SPANS span ends old. At one call a second a span (a
# tenth of a 10 s window) holds one call: a container whose one recent call succeeded in a
# 60 % outage (40 % of them) sent its whole stretched interval, mostly calls from before the
# outage, and held the fleet's short window under the threshold for seconds.
MIN_RECENT_CALLS = 4
MAX_RECENT_SPANS = 4


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
        # Pending calls a window old are in no window any more: a report would count them as
        # calls of now (see rotate). When the last bad call was counted, epoch ms.
        self.window_ms = policy.window_ms
        self.bad_ms = 0
        # The pending counts (all calls, failures, slow) as they stood at the last two span
        # ends: what the pending counts hold beyond ``_older`` are the recent calls (one to
        # two spans of them), which a report may send alone (see take_recent).
        self._older = (0, 0, 0)
        self._mid = (0, 0, 0)
        self._older_spans = 0  # span ends since ``_older`` was marked
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
            self.bad_ms = max(self.bad_ms, now_ms)
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
                self.bad_ms = max(self.bad_ms, now_ms)
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
            self._older_spans = 0
            self._schedule(container, now_ms, interval_ms)
            return report

    def _totals(self) -> tuple[int, int, int]:
        # Caller holds the lock.
        return self.calls + self._goods(), self.failures, self.slow

    def rotate(self, now_ms: int) -> None:
        """A span ended: the calls before the previous span's end stop being recent, unless
        too few would be left recent (MIN_RECENT_CALLS; for up to MAX_RECENT_SPANS spans)."""
        with self._lock:
            if now_ms < self.span_end_ms:
                return
            if now_ms - max(self.span_end_ms, self.bad_ms) >= self.window_ms:
                # A call starts only after this check (a call at or past span_end_ms rotates
                # first), so every pending call started before span_end_ms, and each bad one
                # was counted by bad_ms: all a window old or more, as a container frozen
                # between invocations keeps them. No window holds them any more, and a
                # report would count them as calls of now (a trip from minutes-old failures
                # when the traffic comes back): they are dropped.
                mark = next(self.good)
                self._good_base, self._peeks = mark + 1, 0
                self.calls = self.failures = self.slow = 0
                self._older = self._mid = (0, 0, 0)
                self._older_spans = 0
            totals = self._totals()
            self._older_spans += 1
            if (
                totals[0] - self._mid[0] >= MIN_RECENT_CALLS
                or self._older_spans >= MAX_RECENT_SPANS
            ):
                self._older, self._older_spans = self._mid, 1
            self._mid = totals
            self.span_end_ms = now_ms + self.span_ms
            self.due_ms = min(self.report_due_ms, self.span_end_ms)

    def recent(self) -> tuple[int, int, int]:
        """(calls, failures, slow) pending from the last one to two spans (more when calls
        are sparse: see MIN_RECENT_CALLS)."""
        with self._lock:
            calls, failures, slow = self._totals()
            old_calls, old_failures, old_slow = self._older
            return calls - old_calls, failures - old_failures, slow - old_slow

    def older(self) -> tuple[int, int, int]:
        """(calls, failures, slow) pending from before the recent spans."""
        with self._lock:
            return self._older

    def take_recent(self, container: str, now_ms: int, interval_ms: int) -> Report:
        """Only the recent counts as one report; the older ones stay pending.

        A container whose recent calls fail more often than its older ones sends these
        alone (:func:`fleetbreaker.rate.recent_worse`): a report of a whole stretched
        interval (up to two windows of calls, mostly from before an outage) would land in
        the newest bucket and hide the outage from the short window. The older counts
        follow with a later report, or are dropped by a trip.
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
                self._older_spans = 0
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
