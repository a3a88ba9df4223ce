"""Recovery ramp: after the breaker closes, each container admits a growing share of calls.

A closed breaker admits everything at once: a dependency that just survived one probe gets the
fleet's full load in the next millisecond (a step). With ``recovery_ramp_seconds`` > 0 each
container admits a share of its calls that grows linearly from :data:`MIN_SHARE` to 1 over the
ramp, counted from the moment the breaker closed; a call not admitted is rejected like an open
circuit's (fallback or ``CircuitOpenError``) with a short ``retry_after``. Each container
decides alone, from the record it already has, with a random draw: no store request, and
across N containers the dependency sees about ``share * load``.

When did it close? A record this package writes on closing (a successful probe, or an
operator's reset) is a fresh one: ``gen`` > 0, no failures, no failure window; its
``updated_at`` is the close time. Only a close that ends an outage ramps: such a record keeps
the ``opened_at`` of the outage (a probe's close, or a reset of an open, half-open or forced
open breaker); a reset of a breaker that was closed or disabled has none, and admits everything
at once (nothing was being turned away). A failure counted later rewrites ``updated_at`` but
not ``gen``, so the close time is remembered per generation: a failure during the ramp counts
as usual and does not restart or end the ramp. A container that first sees the generation after
such a write has no close time and does not ramp: a cold start during a ramp under the count
policy (rare); under the rate policy, whose containers report every ``report_interval``, any
container that missed the fresh record, so there the ramp is partial.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetbreaker.state import State

if TYPE_CHECKING:
    from fleetbreaker.state import Record

# The share admitted at the close: the probes that closed the breaker showed the dependency
# answers again, so a trickle is safe and lets the fleet see that it holds.
MIN_SHARE = 0.1
# Rejected during the ramp: come back soon, the share grows (at most this long, in ms).
RETRY_AFTER_MS = 1000


def admitted_share(elapsed_ms: int, ramp_ms: int) -> float:
    """The share of calls admitted ``elapsed_ms`` after the close: linear, MIN_SHARE to 1."""
    if ramp_ms <= 0 or elapsed_ms >= ramp_ms:
        return 1.0
    return MIN_SHARE + (1.0 - MIN_SHARE) * max(0, elapsed_ms) / ramp_ms


def closed_at(record: Record | None) -> int | None:
    """When ``record`` closed, if it is the fresh record written on closing; else None."""
    if record is None or record.state is not State.CLOSED or record.gen <= 0:
        return None
    if record.opened_at <= 0:
        return None  # not a recovery: a reset of a breaker that was closed or disabled
    if record.failures or record.window_start or record.buckets or record.failing or record.slowing:
        return None  # counts written since the close moved updated_at
    return record.updated_at


class RecoveryRamp:
    """One container's ramp for one breaker: remembers the close time of the current generation."""

    def __init__(self, ramp_seconds: float) -> None:
        self.ramp_ms = round(ramp_seconds * 1000)
        # (generation, close time or None), replaced as one tuple: safe across threads.
        self._seen: tuple[int, int | None] = (-1, None)

    def rejects(self, record: Record | None, now_ms: int, draw: float) -> int:
        """0 to admit the call; else the ``retry_after`` (ms) of a call the ramp turns away.

        ``record`` is the closed record the call was admitted on, ``draw`` a uniform random
        number in [0, 1).
        """
        if record is None:
            return 0
        gen, start = self._seen
        if record.gen != gen:
            start = closed_at(record)
            self._seen = (record.gen, start)
        if start is None:
            return 0
        elapsed = now_ms - start
        if draw < admitted_share(elapsed, self.ramp_ms):
            return 0
        return max(1, min(RETRY_AFTER_MS, self.ramp_ms - elapsed))
