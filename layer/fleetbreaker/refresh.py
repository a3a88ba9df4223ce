"""How long a container's cached view of its breaker's record stays fresh.

``cache_ttl`` for a small fleet. A large one stretches it (up to MAX_REFRESH_STRETCH), so the
fleet's refreshes of one record stay inside one DynamoDB partition's read units: each
container estimates the fleet's size from the record's call counts and its own call rate
(reporting policies) or from the record's census writes (the plain count policy, Census).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from fleetbreaker.record import WINDOW_BUCKETS, Report, State

if TYPE_CHECKING:
    import random

    from fleetbreaker.record import Record
    from fleetbreaker.state import Policy, WindowCounts
    from fleetbreaker.stores.fallback import FallbackStore


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


# -- the plain count policy's fleet-size signal --------------------------------------------
# A healthy count-policy fleet writes nothing, so its record would show no fleet size. Each
# container sends one census write (a report of one call) on average every CENSUS_MEAN_MS,
# at exponentially drawn times: the census writes then arrive as a Poisson stream of
# C / CENSUS_MEAN_S per second at any moment, warm-up included (a container's first census
# is as likely in its first second as in any later one), and the record's reports per
# second times CENSUS_MEAN_S is the fleet's size. 16 containers send one every 12.5 s;
# 5,000 send 25 a second.
CENSUS_MEAN_MS = 200_000
# Failure writes a count-policy fleet aims to send at most, per second, while its views
# still say closed after a trip (an outage's first seconds). A fleet larger than this writes
# each failure with probability 1 / weight and counts it ``weight`` times (failure_weight).
TARGET_FAILURE_WRITES_PER_S = 300.0


def census_fleet_size(record: Record | None, policy: Policy, now_ms: int) -> float | None:
    """The containers a count-policy record's census writes show; None: none to go on.

    The larger of the whole window's rate and its newest two buckets' (the current one for
    its elapsed part): the average lags a fleet that grows for up to a window. Read from
    the buckets directly, so a count-policy breaker never loads the rate policy's window.
    """
    if record is None or not record.buckets:
        return None
    bucket_ms = policy.bucket_ms
    current = now_ms // bucket_ms
    total = recent = 0
    for bucket in record.buckets.values():
        if current - WINDOW_BUCKETS < bucket.idx <= current:
            total += bucket.reports
            if bucket.idx >= current - 1:
                recent += bucket.reports
    if total <= 0:
        return None
    recent_ms = bucket_ms + now_ms - current * bucket_ms
    rate = max(total / policy.window_ms, recent / recent_ms)
    return rate * CENSUS_MEAN_MS


def failure_weight(containers: float) -> int:
    """How many failures one written failure counts for, in a fleet of ``containers``.

    1 (every failure written) up to TARGET_FAILURE_WRITES_PER_S containers: their outage
    writes at most one doomed failure each. Past it, each container writes a failure with
    probability 1 / weight, so the fleet's failure writes stay near the target, and the
    count stays right on average.
    """
    return max(1, math.ceil(containers / TARGET_FAILURE_WRITES_PER_S))


class Census:
    """A plain count-policy breaker's census: its fleet-size signal, and what follows from it.

    Off the hot path: it runs when the cached view is refreshed, and when a failure is
    counted. The census write is a ``report`` of one call, made instead of the refresh read
    it replaces (its answer is the fresh record); a report without failures never trips.
    """

    def __init__(
        self,
        name: str,
        store: FallbackStore,
        cache_ms: int,
        container: str,
        rng: random.Random,
        now_ms: int,
        ramp_ms: int = 0,
        writes: bool = True,
    ) -> None:
        self.name = name
        self._ramp_ms = ramp_ms
        self._writes = writes  # False: a store of its own without a report operation
        self._store = store
        self._cache_ms = cache_ms
        self._container = container
        self._rng = rng
        self._due_ms = now_ms + self._draw_ms()
        # Containers on this breaker, as the last closed record with census writes showed
        # (kept while open: the fleet's refreshes must stay spread while it waits).
        self.fleet = 0.0

    def _draw_ms(self) -> int:
        return round(self._rng.expovariate(1.0 / CENSUS_MEAN_MS))

    def refresh(self, policy: Policy, now_ms: int, seen: Record | None) -> Record | None:
        """The cache's refresh: a read, or the census write when one is due."""
        store = self._store
        if (
            not self._writes
            or now_ms < self._due_ms
            or store.degraded
            or (seen is not None and seen.state is not State.CLOSED)
        ):
            # Not due; or on local state; or not closed, where a report changes nothing.
            return store.load(self.name, now_ms)
        if self._ramp_ms and seen is not None and self._ramping(seen, now_ms):
            # A write would hide the close time from containers that have not seen it yet.
            return store.load(self.name, now_ms)
        self._due_ms = now_ms + self._draw_ms()
        census = Report(self._container, calls=1)
        return store.report(self.name, policy, now_ms, census, seen).record

    def _ramping(self, seen: Record, now_ms: int) -> bool:
        """Whether ``seen`` is the record a recovery wrote, within its recovery ramp."""
        from fleetbreaker.ramp import closed_at

        closed = closed_at(seen)
        return closed is not None and now_ms - closed < self._ramp_ms

    def fresh_ms(self, record: Record | None, policy: Policy, now_ms: int) -> int:
        """How long a store answer stays fresh: cache_ttl, longer for a large fleet."""
        size = census_fleet_size(record, policy, now_ms)
        if size is not None:
            self.fleet = size
        return refresh_ms(self.fleet, self._cache_ms, self._rng)

    def failure_weight(self) -> int:
        """What one written failure counts for (1 unless the fleet is large)."""
        return failure_weight(self.fleet)
