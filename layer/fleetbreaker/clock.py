"""The wall clock every breaker shares with the rest of its fleet (injectable everywhere)."""

from __future__ import annotations

import time


def system_clock() -> int:
    """Epoch milliseconds from the wall clock (shared with other containers' clocks)."""
    return time.time_ns() // 1_000_000
