"""The rate policy's sliding window and quorum: counting, kept apart from deciding.

A :class:`SlidingWindow` is a policy's view of a record's ring of buckets and quorum maps:
it adds a container's report, sums what is still inside the window, and says whether (and
why) those counts open the breaker. The rules in :mod:`fleetbreaker.rules` decide what to do
with that answer; the window never changes a record's state. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping

from fleetbreaker.frozen import frozen, replace
from fleetbreaker.policy import Policy, reaches
from fleetbreaker.record import WINDOW_BUCKETS, Bucket, Record, Report, State, TransitionReason

# The short window judged beside the whole one: the newest RECENT_BUCKETS buckets (the current
# one included, so between one and two tenths of the window). A sharp outage fills it with
# failures within a bucket or two, while the whole window still holds up to a window of healthy
# calls; it has its own ``minimum_calls``, so a quiet breaker is judged on the whole window.
RECENT_BUCKETS = 2


@frozen
class WindowCounts:
    """The fleet's calls in the sliding window, summed over its live buckets, and how many
    distinct containers the quorum maps hold in it (up to ``min_containers``).

    ``recent_*`` are the same sums over the newest RECENT_BUCKETS buckets, which cover the
    last ``recent_ms`` (the current bucket's elapsed part included); ``current_reports`` the
    reports in the current bucket, ``current_ms`` into it.
    """

    calls: int = 0
    failures: int = 0
    slow: int = 0
    reports: int = 0  # reports written (the hot-key control counts them)
    failing_containers: int = 0
    slow_containers: int = 0
    recent_calls: int = 0
    recent_failures: int = 0
    recent_slow: int = 0
    recent_reports: int = 0
    recent_ms: int = 0
    current_reports: int = 0
    current_ms: int = 0

    @property
    def failure_rate(self) -> float:
        return self.failures / self.calls if self.calls else 0.0

    @property
    def slow_call_rate(self) -> float:
        return self.slow / self.calls if self.calls else 0.0


class SlidingWindow:
    """A policy's sliding window over a record: WINDOW_BUCKETS buckets of ``bucket_ms`` each,
    plus the quorum maps of the containers whose failures and slow calls fall in it."""

    __slots__ = ("policy",)

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def index(self, now_ms: int) -> int:
        """The absolute number of the bucket ``now_ms`` falls in."""
        return now_ms // self.policy.bucket_ms

    def counts(self, record: Record | None, now_ms: int) -> WindowCounts:
        """Sum the buckets still inside the window ending at ``now_ms`` (closed records only)."""
        if record is None or record.state is not State.CLOSED:
            return WindowCounts()
        current = self.index(now_ms)
        calls = failures = slow = reports = 0
        r_calls = r_failures = r_slow = r_reports = 0
        now_reports = 0
        for bucket in record.buckets.values():
            if current - WINDOW_BUCKETS < bucket.idx <= current:
                calls += bucket.calls
                failures += bucket.failures
                slow += bucket.slow
                reports += bucket.reports
                if bucket.idx > current - RECENT_BUCKETS:
                    r_calls += bucket.calls
                    r_failures += bucket.failures
                    r_slow += bucket.slow
                    r_reports += bucket.reports
                if bucket.idx == current:
                    now_reports = bucket.reports
        bucket_ms = self.policy.bucket_ms
        return WindowCounts(
            calls,
            failures,
            slow,
            reports,
            self.live(record.failing, now_ms),
            self.live(record.slowing, now_ms),
            r_calls,
            r_failures,
            r_slow,
            r_reports,
            now_ms - (current - RECENT_BUCKETS + 1) * bucket_ms,
            now_reports,
            now_ms - current * bucket_ms,
        )

    def live(self, seen: Mapping[str, int], now_ms: int) -> int:
        """Containers whose latest bad call is inside the window (as many as the record keeps)."""
        return sum(1 for at in seen.values() if now_ms - at < self.policy.window_ms)

    def trip_reason(self, counts: WindowCounts) -> TransitionReason | None:
        """Why ``counts`` open the breaker under the policy and its quorum; None: they do not.

        Failures are checked first: a window that reaches both thresholds trips on failures.
        A rate is judged twice, each time with ``minimum_calls``: over the whole window (a slow
        burn) and over its newest RECENT_BUCKETS buckets (a sharp outage, which the whole
        window's healthy calls would otherwise dilute for up to half a window).
        """
        policy = self.policy
        quorum = policy.min_containers
        if self.failing(counts) and (quorum <= 1 or counts.failing_containers >= quorum):
            return (
                TransitionReason.FAILURE_THRESHOLD
                if policy.failure_ratio is None
                else TransitionReason.FAILURE_RATE
            )
        if policy.slow_ms is None:
            return None
        minimum, ratio = policy.minimum_calls, policy.slow_ratio
        slow = (counts.slow > 0 and judged(counts.slow, counts.calls, minimum, ratio)) or (
            counts.recent_slow > 0
            and judged(counts.recent_slow, counts.recent_calls, minimum, ratio)
        )
        if slow and (quorum <= 1 or counts.slow_containers >= quorum):
            return TransitionReason.SLOW_CALL_RATE
        return None

    def trips(self, counts: WindowCounts) -> bool:
        """Whether the window's counts open the breaker under the policy (with its quorum)."""
        return self.trip_reason(counts) is not None

    def failing(self, counts: WindowCounts) -> bool:
        """Whether the failures alone reach the policy's threshold (count or rate), quorum aside."""
        policy = self.policy
        ratio = policy.failure_ratio
        if ratio is None:
            return counts.failures >= policy.failure_threshold
        minimum = policy.minimum_calls
        return judged(counts.failures, counts.calls, minimum, ratio) or judged(
            counts.recent_failures, counts.recent_calls, minimum, ratio
        )

    def note(self, seen: Mapping[str, int], container: str, now_ms: int) -> Mapping[str, int]:
        """``seen`` with ``container`` stamped ``now_ms``, keeping the newest ``min_containers``.

        Keeping the K most recent distinct containers is enough to count, up to K, how many
        distinct containers fall in the window: if K or more do, the K newest all do.
        """
        quorum = self.policy.min_containers
        if quorum <= 1:
            return seen
        updated = {**seen, container: now_ms}
        if len(updated) > quorum:
            newest = sorted(updated.items(), key=lambda item: (item[1], item[0]), reverse=True)
            updated = dict(newest[:quorum])
        return updated

    def unchanged(self, seen: Mapping[str, int], container: str, now_ms: int) -> bool:
        """Whether noting ``container`` can be skipped: the map is exact to within one bucket.

        True when the quorum is off; when this container was noted within the last bucket; or
        when the map already holds ``min_containers`` containers all noted within the last
        bucket (the quorum is met, and stays met for most of a window, whoever else fails).
        Stores skip rewriting the map then, so in a fleet-wide outage thousands of failing
        containers do not all rewrite it.
        """
        policy = self.policy
        if policy.min_containers <= 1:
            return True
        fresh = now_ms - policy.bucket_ms
        at = seen.get(container)
        if at is not None and at > fresh:
            return True
        return len(seen) >= policy.min_containers and all(t > fresh for t in seen.values())

    def add(self, record: Record, now_ms: int, report: Report) -> Record:
        """``record`` (closed) with ``report`` added to the current bucket; not yet stamped."""
        current = self.index(now_ms)
        slot = current % WINDOW_BUCKETS
        bucket = record.buckets.get(slot)
        if bucket is None or bucket.idx != current:
            bucket = Bucket(current)
        bucket = Bucket(
            current,
            bucket.calls + report.calls,
            bucket.failures + report.failures,
            bucket.slow + report.slow,
            bucket.reports + 1,
        )
        failing, slowing = record.failing, record.slowing
        if report.failures and not self.unchanged(failing, report.container, now_ms):
            failing = self.note(failing, report.container, now_ms)
        if report.slow and not self.unchanged(slowing, report.container, now_ms):
            slowing = self.note(slowing, report.container, now_ms)
        return replace(
            record, buckets={**record.buckets, slot: bucket}, failing=failing, slowing=slowing
        )


def judged(part: int, calls: int, minimum: int, ratio: tuple[int, int]) -> bool:
    """Whether ``part`` of ``calls`` reaches ``ratio`` with at least ``minimum`` calls seen."""
    return calls >= minimum and reaches(part, calls, ratio)
