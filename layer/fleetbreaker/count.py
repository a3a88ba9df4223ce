"""The count policy: every failure one atomic write, a census for the fleet's size.

A failure is added to the record's current window (``failure_threshold`` within
``window_seconds`` opens the breaker, once, whatever the race); a success writes nothing. A
healthy fleet therefore writes nothing its record could tell the fleet's size by, so the
refreshes carry a census (:mod:`fleetbreaker.census`). The fleet's size, once the census
shows it with enough evidence, stretches refreshes past ``cache_ttl`` (so 5,000 containers
stay inside one partition's read units) and, past twice TARGET_FAILURE_WRITES_PER_S
containers, thins failure writes: a failure is written with probability 1 / weight and
counts ``weight`` failures (the same rule in every store). A fleet of up to 300 containers
is never thinned: it opens on exactly ``failure_threshold`` failures.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from fleetbreaker.calls import NO_ANSWERS, Answer
from fleetbreaker.census import (
    MIN_CENSUS_GAP_MS,
    census_chance,
    containers_shown,
    failure_weight,
    max_slice_count,
)
from fleetbreaker.record import State
from fleetbreaker.results import RecordResult
from fleetbreaker.view import MAX_REFRESH_STRETCH, refresh_ms

if TYPE_CHECKING:
    from fleetbreaker.calls import Answers, Replied, Request
    from fleetbreaker.config import BreakerConfig
    from fleetbreaker.counting import CountingContext
    from fleetbreaker.policy import Policy
    from fleetbreaker.record import Record


class CountStrategy:
    """The count policy's side of a breaker (a :class:`~fleetbreaker.counting.Counting`)."""

    kind = "count"

    def __init__(self, context: CountingContext, policy: Policy, cache_ms: int) -> None:
        self._ctx = context
        # A call admitted while closed needs no ticket and nothing is due before it; a
        # success writes nothing (start, due and end say so): the core skips asking. (An
        # attribute of the instance: read on every call, where a class attribute costs a
        # lookup a few times as long.)
        self.failures_only = True
        self._cache_ms = cache_ms
        self._follow(policy)
        # A store of the user's own without a census operation: no census, no thinning.
        self._censuses = callable(getattr(context.store.shared, "census", None))
        # The longest gap between refreshes that counts toward a census write: a container
        # that was idle owes none for its idle time (census.census_chance).
        self._max_gap_ms = max(MIN_CENSUS_GAP_MS, round(MAX_REFRESH_STRETCH * cache_ms) * 2)
        self._refreshed_ms = context.clock()

    # -- the record ------------------------------------------------------------------------

    def refresh(self, now_ms: int) -> Replied[Record | None]:
        """A read, or now and then a census write instead (its answer is the record too)."""
        ctx = self._ctx
        gap = min(max(0, now_ms - self._refreshed_ms), self._max_gap_ms)
        self._refreshed_ms = now_ms
        store = ctx.store
        if self._censuses and not store.degraded and ctx.rng.random() < census_chance(gap):
            answer = store.census(ctx.name, self.policy, now_ms, ctx.view.last_seen)
            return answer.record, (Answer(answer, now_ms),)
        return ctx.read(now_ms, self.fresh_ms)

    def _follow(self, policy: Policy) -> None:
        self.policy = policy
        # What reading the census takes from the policy (census.census_containers), worked
        # out once per policy: every store answer reads it (fresh_ms).
        self._census_slice = (policy.bucket_ms, max_slice_count(policy.bucket_ms))

    def fresh_ms(self, record: Record | None, now_ms: int) -> int:
        if record is None or not record.census:
            return self._cache_ms  # no census, no fleet to stretch for (every store answer)
        bucket_ms, most = self._census_slice
        containers = containers_shown(record, now_ms, bucket_ms, most)
        if not containers:
            return self._cache_ms  # refresh_ms's answer for a fleet the census cannot show
        return refresh_ms(containers, self._cache_ms, self._ctx.rng)

    def observe(self, record: Record | None) -> None:
        """Nothing to do: the count policy holds no counts of its own."""

    # -- calls -----------------------------------------------------------------------------

    def due(self, now_ms: int) -> Request | None:
        """Nothing is ever due before a call: failures are written as they happen."""
        return None

    def start(self, now_ms: int) -> None:
        """Nothing to time: the count policy counts failures only."""
        return

    def end(self, ticket: None, failed: bool) -> Request | None:
        """A call ended: a failure is one store request (decided now, sent by the driver)."""
        if not failed:
            return None
        return self.failure(self._ctx.clock())

    def abandon(self, ticket: None) -> None:
        """An interrupted call counts nowhere."""

    def count(
        self, success: bool, now_ms: int, read: Callable[[int], Record | None]
    ) -> Replied[RecordResult]:
        if success:
            state = _state_of(read(now_ms))
            return RecordResult(True, state, "success: nothing to write"), NO_ANSWERS
        return self.failure(now_ms)()

    def failure(self, now_ms: int) -> Callable[[], Replied[RecordResult]]:
        """The store request that counts one failure at ``now_ms``. The thinning draw is made
        now; the write waits for whoever performs the request (a driver's thread)."""
        ctx = self._ctx
        weight = self.weight(now_ms)
        if weight > 1 and ctx.rng.random() * weight >= 1:
            state = _state_of(ctx.view.last_seen)
            skipped = RecordResult(False, state, f"failure not written: 1 in {weight} is")
            return lambda: (skipped, NO_ANSWERS)
        return functools.partial(self._write_failure, now_ms, weight)

    def _write_failure(self, now_ms: int, weight: int) -> Replied[RecordResult]:
        ctx = self._ctx
        store, observed = ctx.store, ctx.view.last_seen
        if weight > 1:
            outcome = store.record_failure(ctx.name, self.policy, now_ms, observed, weight)
        else:
            outcome = store.record_failure(ctx.name, self.policy, now_ms, observed)
        # Lost or won, the answer is the fleet's record now: it goes up with the result, and
        # the core caches it as soon as the request returns.
        answers = (Answer(outcome, now_ms),)
        state = _state_of(outcome.record)
        if outcome.changed:
            ctx.emit("on_failure_recorded", ctx.name, state)
            return RecordResult(True, state, "failure counted"), answers
        return RecordResult(False, state, f"breaker is {state.value}: failure not counted"), answers

    def weight(self, now_ms: int) -> int:
        """What one written failure counts for: 1 unless the census shows a large fleet
        (as of now: the estimate decays as the census it was read from ages)."""
        if not self._censuses or self._ctx.store.degraded:
            # The local twin is this container alone: its failures count once each.
            return 1
        bucket_ms, most = self._census_slice
        return failure_weight(containers_shown(self._ctx.view.last_seen, now_ms, bucket_ms, most))

    def claim_weight(self, now_ms: int) -> int:
        return self.weight(now_ms)

    # -- settings and lifetime -------------------------------------------------------------

    def adopt(self, config: BreakerConfig, policy: Policy) -> None:
        self._follow(policy)

    def flush(self, now_ms: int) -> Answers:
        """Nothing is ever pending: every failure was written when it happened."""
        return NO_ANSWERS

    def restart(self, now_ms: int) -> None:
        # The census clock starts again: the snapshot's refresh gap is not this container's.
        self._refreshed_ms = now_ms


def _state_of(record: Record | None) -> State:
    return record.state if record is not None else State.CLOSED
