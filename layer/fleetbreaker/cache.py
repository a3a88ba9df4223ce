"""The per-container copy of one breaker's record."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetbreaker.state import Record


class RecordCache:
    """Holds the last record a store returned, fresh for ``ttl_ms``.

    Every store answer goes in, including the current item a failed conditional write hands
    back, so a container that loses a race learns the new state at once. ``last_seen`` keeps
    the newest answer past its freshness: it seeds the local breaker if the store goes away.
    ``begin_refresh`` lets one thread at a time read the store, so a container sends one read
    per refresh however many of its threads find the cache stale at that moment.

    Reads take no lock: the entry is one tuple, replaced whole.
    """

    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms
        # (record, stored at, fresh until): a large fleet keeps its view longer than ttl_ms
        # (refresh.refresh_ms), so its refreshes stay inside one partition's read units.
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
            self._entry = (record, now_ms, now_ms + fresh)

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
