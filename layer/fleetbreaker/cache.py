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
    """

    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms
        self._lock = threading.Lock()
        self._record: Record | None = None
        self._stored_at: int | None = None

    def get(self, now_ms: int) -> tuple[bool, Record | None]:
        """(hit, record): hit is False when empty, stale, or caching is off."""
        with self._lock:
            if self._stored_at is None or self.ttl_ms <= 0:
                return False, None
            if not 0 <= now_ms - self._stored_at < self.ttl_ms:
                return False, None
            return True, self._record

    def put(self, record: Record | None, now_ms: int) -> None:
        with self._lock:
            # Keep the newest generation: a slow answer must not roll back a faster one.
            if (
                self._record is not None
                and record is not None
                and record.gen < self._record.gen
                and self._stored_at is not None
                and now_ms - self._stored_at < self.ttl_ms
            ):
                return
            self._record = record
            self._stored_at = now_ms

    def invalidate(self) -> None:
        with self._lock:
            self._stored_at = None

    @property
    def last_seen(self) -> Record | None:
        with self._lock:
            return self._record
