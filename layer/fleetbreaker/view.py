"""A container's view of one breaker's record: the copy it keeps, and how it refreshes it.

Healthy steady state: at most one store request per breaker per container per ``cache_ttl``
(longer in a fleet of thousands), made by one thread while the others wait for its answer.
What that request is belongs to the counting strategy: a read, a census write (count
policy) or a report (rate policy), each answered with the fleet's record. The breaker's core
drives the read-through (:meth:`fleetbreaker.core.CallCore.read`) with what the view offers:
its cache, the refresh lock, a read of its own; the view holds no way back into the core.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from fleetbreaker.calls import Answer
from fleetbreaker.record import State

if TYPE_CHECKING:
    import random

    from fleetbreaker.calls import Replied
    from fleetbreaker.protocols import GuardedStore
    from fleetbreaker.record import Record

# Read on every store answer: a module global, not an enum attribute (admission.py).
_CLOSED = State.CLOSED
# The healthy span that admits nothing (RecordCache.healthy).
_NEVER = (0, 0)

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
        self.healthy: tuple[int, int] = _NEVER
        # (record, stored at, fresh until), or None when empty: a large fleet keeps its view
        # longer than ttl_ms (refresh_ms), so its refreshes stay inside one partition's read
        # units. Read it, never assign it: put() and clear() do.
        self.entry: tuple[Record | None, int, int] | None = None
        self._write = threading.Lock()
        self._refreshing = threading.Lock()

    def get(self, now_ms: int) -> tuple[bool, Record | None]:
        """(hit, record): hit is False when empty, stale, or caching is off."""
        entry = self.entry  # (record, stored at, fresh until)
        if entry is not None and entry[1] <= now_ms < entry[2] and self.ttl_ms > 0:
            return True, entry[0]
        return False, None

    def put(self, record: Record | None, now_ms: int, fresh_ms: int | None = None) -> Record | None:
        """Keep ``record`` as seen at ``now_ms``, fresh for ``fresh_ms`` (default ttl_ms).
        Returns the newest record the cache holds now (``last_seen``): ``record``, or the
        newer generation it kept instead."""
        with self._write:
            entry = self.entry
            ttl_ms = self.ttl_ms
            if entry is not None and record is not None:
                # Keep the newest generation: a slow answer must not roll back a faster one.
                held = entry[0]
                if held is not None and record.gen < held.gen and 0 <= now_ms - entry[1] < ttl_ms:
                    return held
            until = now_ms + (ttl_ms if fresh_ms is None else fresh_ms)
            self.entry = (record, now_ms, until)
            # The span in which the hot path admits a call with no look at the record: every
            # store answer passes here, so it is worked out inline.
            if ttl_ms <= 0:
                self.healthy = _NEVER
            elif record is None:
                self.healthy = (now_ms, until)
            else:
                closed_at = record.closed_at
                if record.state is not _CLOSED or closed_at > now_ms:
                    # The ramp (admission.RecoveryRamp) judges calls until it ends. A close
                    # stamped ahead of our clock is the ramp's to clamp (it remembers when
                    # it first saw it).
                    self.healthy = _NEVER
                else:
                    start = closed_at + self.ramp_ms if closed_at else now_ms
                    self.healthy = (start if start > now_ms else now_ms, until)
            return record

    def begin_refresh(self, wait_s: float = 0.0) -> bool:
        """Claim the refresh; False when another thread kept it for ``wait_s`` seconds."""
        if wait_s <= 0:
            return self._refreshing.acquire(blocking=False)
        return self._refreshing.acquire(timeout=wait_s)

    def end_refresh(self) -> None:
        self._refreshing.release()

    def refresh_steps(self, wait_s: float) -> tuple[Callable[[], bool], Callable[[], object]]:
        """``begin_refresh(wait_s)`` and ``end_refresh``, as callables of the refresh lock
        itself: a view binds them once, and a refresh passes no frame of the cache's."""
        lock = self._refreshing
        if wait_s <= 0:
            return functools.partial(lock.acquire, blocking=False), lock.release
        return functools.partial(lock.acquire, timeout=wait_s), lock.release

    @property
    def last_seen(self) -> Record | None:
        entry = self.entry
        return entry[0] if entry is not None else None

    def clear(self) -> None:
        """Forget the record: empty, as at construction."""
        with self._write:
            self.entry = None
            self.healthy = _NEVER


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
        # The read-through's steps, which the core takes on every refresh, are bound here
        # once: each is the cache's or the store's own callable, no frame of the view's in
        # between.
        #
        # cached(now_ms) -> (hit, record) from the cache alone: no store request (an event
        # loop's look).
        self.cached: Callable[[int], tuple[bool, Record | None]] = cache.get
        # paused(now_ms): whether the store is left alone now (after a failure): local()
        # answers.
        self.paused: Callable[[int], bool] = store.paused
        # begin_refresh() claims the container's refresh: False when another thread kept it
        # longer than wait_s, longer than a store read can take. One thread per container
        # refreshes; the others wait for its answer (bounded) instead of sending the same
        # request, or acting on a view older than cache_ttl: that view may still say closed
        # after the fleet tripped. (RecordCache.begin_refresh(wait_s), bound.)
        # end_refresh() lets the refresh go.
        self.begin_refresh: Callable[[], bool]
        self.end_refresh: Callable[[], object]
        self.begin_refresh, self.end_refresh = cache.refresh_steps(wait_s)

    def local(self, now_ms: int) -> Record | None:
        """The record as the local twin holds it (answered locally: no store call to share,
        nothing the fleet's cache may take)."""
        return self._store.load(self.name, now_ms)

    def fetch(self, now_ms: int) -> Replied[Record | None]:
        """One store read of this thread's own: the record, and its answer for the core."""
        answer = self._store.read(self.name, now_ms)
        return answer.record, (Answer(answer, now_ms),)

    @property
    def last_seen(self) -> Record | None:
        """The newest record a store answered, fresh or not (a write's fence starts there)."""
        entry = self.cache.entry  # the cache's last_seen, read here: a frame fewer
        return entry[0] if entry is not None else None

    def forget(self) -> None:
        """Drop the cached record: the next read refreshes (a restored snapshot's view is
        another container's, from another time)."""
        self.cache.clear()
