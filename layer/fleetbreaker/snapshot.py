"""The fleet's view of one breaker, as the breaker, the CLI and the gate present it.

:func:`fleetbreaker.state.snapshot_of` computes a :class:`Snapshot` from a record; this module
only holds it and says how it reads as JSON (times as ISO 8601 UTC).
"""

from __future__ import annotations

from typing import Any

from fleetbreaker.frozen import frozen
from fleetbreaker.record import State


@frozen
class Snapshot:
    """The fleet's view of one breaker at one moment (see ``CircuitBreaker.snapshot``).

    ``calls``, ``failures`` and ``slow_calls`` are the sliding window's, fleet-wide (under the
    plain count policy: ``failures`` in the current window and no calls). ``containers``
    counts the distinct containers whose failures or slow calls fall in the window, up to
    ``min_containers`` (the record keeps no more), and at least 1 when the window holds any.
    Rates are None while no call is counted.
    ``retry_after`` is the seconds until a rejected call may be admitted (0 when admitting);
    ``open_until`` the epoch ms the open window ends (None unless open).
    """

    name: str
    state: State
    generation: int
    calls: int
    failures: int
    slow_calls: int
    containers: int
    failure_rate: float | None
    slow_call_rate: float | None
    retry_after: float
    open_until: int | None
    updated_at: int | None
    # "enforce" or "shadow": what this container does with a call the state would reject.
    mode: str = "enforce"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: times as ISO 8601 UTC strings (or None), rates as fractions."""
        return {
            "name": self.name,
            "state": self.state.value,
            "generation": self.generation,
            "calls": self.calls,
            "failures": self.failures,
            "slow_calls": self.slow_calls,
            "containers": self.containers,
            "failure_rate": self.failure_rate,
            "slow_call_rate": self.slow_call_rate,
            "retry_after": round(self.retry_after, 3),
            "open_until": iso_utc(self.open_until),
            "updated_at": iso_utc(self.updated_at),
            "mode": self.mode,
        }


def iso_utc(epoch_ms: int | None) -> str | None:
    """Epoch milliseconds as ISO 8601 UTC with milliseconds (``...Z``), or None."""
    if epoch_ms is None:
        return None
    import datetime

    try:
        moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):  # past year 9999: a hand-edited record
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
