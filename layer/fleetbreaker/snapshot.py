"""The fleet's view of one breaker, as the breaker, the CLI and the gate present it.

:func:`snapshot_of` computes a :class:`Snapshot` from a record (pure: no I/O, no clock); the
snapshot says how it reads as JSON (times as ISO 8601 UTC).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleetbreaker.frozen import frozen
from fleetbreaker.record import WINDOW_BUCKETS, Decision, State
from fleetbreaker.rules import sliding_window, verdict

if TYPE_CHECKING:
    from fleetbreaker.policy import Policy
    from fleetbreaker.record import Record


@frozen
class Snapshot:
    """The fleet's view of one breaker at one moment (see ``CircuitBreaker.snapshot``).

    ``calls``, ``failures`` and ``slow_calls`` are the sliding window's, fleet-wide. Under
    the plain count policy the fleet reports no calls: ``failures`` are the current window's
    and ``calls``, ``slow_calls`` and both rates are None (not known, rather than zero).
    ``containers`` counts the distinct containers whose failures or slow calls fall in the
    window, up to ``min_containers`` (the record keeps no more), and at least 1 when the
    window holds any. ``census_writes`` are the census writes in the window (the count
    policy's fleet-size signal, :mod:`fleetbreaker.census`): never calls.
    ``retry_after`` is the seconds until a rejected call may be admitted (0 when admitting);
    ``open_until`` the epoch ms the open window ends (None unless open).
    """

    name: str
    state: State
    generation: int
    calls: int | None
    failures: int
    slow_calls: int | None
    containers: int
    failure_rate: float | None
    slow_call_rate: float | None
    retry_after: float
    open_until: int | None
    updated_at: int | None
    # "enforce" or "shadow": what this container does with a call the state would reject.
    mode: str = "enforce"
    census_writes: int = 0

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
            "census_writes": self.census_writes,
        }


def snapshot_of(
    name: str, record: Record | None, policy: Policy, now_ms: int, mode: str = "enforce"
) -> Snapshot:
    """What a record says about a breaker at ``now_ms`` (pure: the CLI and the gate reuse it).

    Calls are known when the policy reports them, or when the window holds reports (an
    operator's tool does not know the fleet's policy; the record does).
    """
    counts = sliding_window(policy).counts(record, now_ms)
    failures = counts.failures
    # The plain count policy keeps its own window: failures since window_start.
    if (
        record is not None
        and record.state is State.CLOSED
        and record.window_start
        and now_ms - record.window_start < policy.window_ms
    ):
        failures = max(failures, record.failures)
    known = policy.reporting or counts.reports > 0
    calls = counts.calls if known else None
    decided = verdict(record, policy, now_ms)
    state = record.state if record is not None else State.CLOSED
    return Snapshot(
        name=name,
        state=state,
        generation=record.gen if record is not None else 0,
        calls=calls,
        failures=failures,
        slow_calls=counts.slow if known else None,
        # The record keeps up to min_containers ids (none under min_containers=1): "capped as
        # stored", and at least one container when the window holds failures or slow calls.
        containers=max(
            counts.failing_containers, counts.slow_containers, 1 if failures or counts.slow else 0
        ),
        failure_rate=counts.failures / calls if calls else None,
        slow_call_rate=counts.slow / calls if calls else None,
        retry_after=decided.retry_after_ms / 1000 if decided.decision is Decision.REJECT else 0.0,
        open_until=record.open_until if record is not None and state is State.OPEN else None,
        updated_at=record.updated_at if record is not None else None,
        mode=mode,
        census_writes=census_writes(record, policy, now_ms),
    )


def census_writes(record: Record | None, policy: Policy, now_ms: int) -> int:
    """The census writes the record holds within the window ending at ``now_ms``."""
    if record is None:
        return 0
    current = now_ms // policy.bucket_ms
    return sum(
        bucket.count
        for bucket in record.census.values()
        if current - WINDOW_BUCKETS < bucket.idx <= current
    )


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
