"""A container's view of one breaker's record: the copy it keeps, and how it refreshes it.

Healthy steady state: at most one store request per breaker per container per ``cache_ttl``
(longer in a fleet of thousands), made by one thread while the others wait for its answer.
What that request is belongs to the counting strategy: a read, a census write (count
policy) or a report (rate policy), each answered with the fleet's record. The breaker's core
drives the read-through (:meth:`fleetbreaker.core.CallCore.read`) with what the view offers:
its cache, the refresh lock, a read of its own; the view holds no way back into the core.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from fleetbreaker.calls import Answer
from fleetbreaker.record import State

if TYPE_CHECKING:
    import random

    from fleetbreaker.calls import Replied
    from fleetbreaker.protocols import GuardedStore
    from fleetbreaker.record import Record

# Cache refreshes the fleet aims to send to one record per second: 1,500 read units of
# eventually consistent reads (half a unit each), under 80 % of one partition's 3,000.
TARGET_REFRESHES_PER_S = 3_000.0
# A refresh waits at most this many cache_ttl: the longest a container acts on a view of the
# record (the documented maximum staleness, docs/architecture.md).
MAX_REFRESH_STRETCH = 2.0


def refresh_ms(containers: float, cache_ms: int, rng: random.Random) -> int:
    """How long a container's cached view stays fresh, given the fleet's size.

    ``cache_ttl`` while the fleet's refreshes stay under TARGET_REFRESHES_PER_S; past that,
    stretched so they do, jittered by +-25 % (else containers that stretched together keep
    refreshing in the same instant), never shorter than ``cache_ttl`` nor longer than
    MAX_REFRESH_STRETCH of it. Each strategy estimates the fleet's size its own way: the
    count policy from the census (:func:`fleetbreaker.census.census_containers`), the rate
    policy from the window's calls (:func:`fleetbreaker.rate.fleet_size`).
    """
    wanted = containers * 1000 / TARGET_REFRESHES_PER_S
    if cache_ms <= 0 or wanted <= cache_ms:
        return cache_ms
    jittered = wanted * (0.75 + rng.random() / 2)
    return round(max(cache_ms, min(jittered, MAX_REFRESH_STRETCH * cache_ms)))


class RecordCache:
    """Holds the last record a store returned, fresh for ``ttl_ms``.

    Every store answer goes in, including the current item a failed conditional write hands
    back, so a container that loses a race learns the new state at once. ``last_seen`` keeps
    the newest answer past its freshness: it seeds the local breaker if the store goes away.
    ``begin_refresh`` lets one thread at a time read the store, so a container sends one read
    per refresh however many of its threads find the cache stale at that moment.

    Reads take no lock: the entry is one tuple, replaced whole.
    """

    def __init__(self, ttl_ms: int, ramp_ms: int = 0) -> None:
        self.ttl_ms = ttl_ms
        self.ramp_ms = ramp_ms
        # (from, until) ms: while from <= now < until, the cached record admits a call as
        # closed and healthy with no look at it: fresh, closed, past the recovery ramp. The
        # hot path compares a clock with it and nothing else (the drivers' fast path).
        self.healthy: tuple[int, int] = (0, 0)
        # (record, stored at, fresh until): a large fleet keeps its view longer than ttl_ms
        # (refresh_ms), so its refreshes stay inside one partition's read units.
        self._entry: tuple[Record | None, int, int] | None = None
        self._write = threading.Lock()
        self._refreshing = threading.Lock()

    def get(self, now_ms: int) -> tuple[bool, Record | None]:
        """(hit, record): hit is False when empty, stale, or caching is off."""
        entry = self._entry
        if entry is None or self.ttl_ms <= 0:
            return False, None
        record, stored_at, fresh_until = entry
        if stored_at <= now_ms < fresh_until:
            return True, record
        return False, None

    def put(self, record: Record | None, now_ms: int, fresh_ms: int | None = None) -> None:
        """Keep ``record`` as seen at ``now_ms``, fresh for ``fresh_ms`` (default ttl_ms)."""
        with self._write:
            entry = self._entry
            # Keep the newest generation: a slow answer must not roll back a faster one.
            if (
                entry is not None
                and entry[0] is not None
                and record is not None
                and record.gen < entry[0].gen
                and 0 <= now_ms - entry[1] < self.ttl_ms
            ):
                return
            fresh = self.ttl_ms if fresh_ms is None else fresh_ms
            until = now_ms + fresh
            self._entry = (record, now_ms, until)
            self.healthy = self._healthy_span(record, now_ms, until)

    def _healthy_span(self, record: Record | None, now_ms: int, until: int) -> tuple[int, int]:
        if self.ttl_ms <= 0:
            return (0, 0)
        if record is None:
            return (now_ms, until)
        if record.state is not State.CLOSED:
            return (0, 0)
        # The ramp (admission.RecoveryRamp) judges calls until it ends. A close stamped
        # ahead of our clock is the ramp's to clamp (it remembers when it first saw it).
        if record.closed_at > now_ms:
            return (0, 0)
        ramp_end = record.closed_at + self.ramp_ms if record.closed_at else 0
        return (max(now_ms, ramp_end), until)

    def begin_refresh(self, wait_s: float = 0.0) -> bool:
        """Claim the refresh; False when another thread kept it for ``wait_s`` seconds."""
        if wait_s <= 0:
            return self._refreshing.acquire(blocking=False)
        return self._refreshing.acquire(timeout=wait_s)

    def end_refresh(self) -> None:
        self._refreshing.release()

    @property
    def last_seen(self) -> Record | None:
        entry = self._entry
        return entry[0] if entry is not None else None

    @property
    def entry(self) -> tuple[Record | None, int, int] | None:
        """(record, stored at, fresh until), or None when empty."""
        return self._entry

    def clear(self) -> None:
        """Forget the record: empty, as at construction."""
        with self._write:
            self._entry = None
            self.healthy = (0, 0)


class RecordView:
    """The record as this container sees it: from the cache while fresh, else refreshed.

    The core reads through it (:meth:`fleetbreaker.core.CallCore.read`): the cache while
    fresh; a paused store's local answer; else the refresh of the counting strategy in force,
    made by one thread of the container while the others wait (:meth:`begin_refresh`), whose
    answers the core takes before the next thread looks; or, when another thread kept the
    refresh too long, a read of this thread's own (:meth:`fetch`). Every answer goes back up
    to the core as a value: the view calls nothing back.
    """

    def __init__(
        self,
        name: str,
        store: GuardedStore,
        cache: RecordCache,
        *,
        wait_s: float,
    ) -> None:
        self.name = name
        self.cache = cache
        self._store = store
        # Waiting for another thread's refresh: longer than a store read can take.
        self._wait_s = wait_s

    def cached(self, now_ms: int) -> tuple[bool, Record | None]:
        """(hit, record) from the cache alone: no store request (an event loop's look)."""
        return self.cache.get(now_ms)

    def paused(self, now_ms: int) -> bool:
        """Whether the store is left alone now (after a failure): :meth:`local` answers."""
        return self._store.paused(now_ms)

    def local(self, now_ms: int) -> Record | None:
        """The record as the local twin holds it (answered locally: no store call to share,
        nothing the fleet's cache may take)."""
        return self._store.load(self.name, now_ms)

    def begin_refresh(self) -> bool:
        """Claim the container's refresh: False when another thread kept it longer than a
        store read can take. One thread per container refreshes; the others wait for its
        answer (bounded) instead of sending the same request, or acting on a view older than
        cache_ttl: that view may still say closed after the fleet tripped."""
        return self.cache.begin_refresh(wait_s=self._wait_s)

    def end_refresh(self) -> None:
        self.cache.end_refresh()

    def fetch(self, now_ms: int) -> Replied[Record | None]:
        """One store read of this thread's own: the record, and its answer for the core."""
        answer = self._store.read(self.name, now_ms)
        return answer.record, (Answer(answer, now_ms),)

    @property
    def last_seen(self) -> Record | None:
        """The newest record a store answered, fresh or not (a write's fence starts there)."""
        return self.cache.last_seen

    def forget(self) -> None:
        """Drop the cached record: the next read refreshes (a restored snapshot's view is
        another container's, from another time)."""
        self.cache.clear()
