"""Shadow mode: a breaker that counts, trips and recovers with the fleet but never rejects.

A shadow breaker shares the record and makes every transition an enforcing one makes, but
runs every call: a call an enforcing breaker would have rejected is counted (``WouldReject``)
and counts nowhere else; a call that would have been a probe settles a probe only once it
has finished, so an enforcing container is never kept from probing by a shadow call.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from fleetbreaker import frozen
from fleetbreaker import state as rules
from fleetbreaker.results import Admission, RecordResult
from fleetbreaker.state import Decision

if TYPE_CHECKING:
    from fleetbreaker.breaker import CircuitBreaker

R = TypeVar("R")


class ShadowMode:
    """What a breaker does differently in shadow mode (it holds one while in that mode)."""

    def __init__(self, breaker: CircuitBreaker) -> None:
        self._breaker = breaker

    def admission(self, verdict: rules.Verdict, would: Decision) -> Admission:
        """Allow the call, saying what an enforcing breaker would have decided."""
        breaker = self._breaker
        retry_after = verdict.retry_after_ms / 1000
        admission = Admission(
            breaker.name,
            Decision.ALLOW,
            verdict.state,
            0.0,
            None,
            breaker.degraded,
            would,
        )
        breaker._emit("on_decision", breaker.name, Decision.ALLOW, verdict.state)
        if would is Decision.REJECT:
            breaker.stats.would_rejects += 1
            breaker._emit("on_would_reject", breaker.name, verdict.state, retry_after)
        return admission

    def call(
        self,
        admission: Admission,
        fn: Callable[..., R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> R:
        """Run a call an enforcing breaker would have rejected or probed.

        A would-be rejected call counts nowhere (an enforcing fleet would not have made it).
        A would-be probe settles a probe after it finished: see :meth:`probe`.
        """
        if admission.shadow is Decision.REJECT:
            return fn(*args, **kwargs)
        breaker = self._breaker
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            self.probe(not breaker.config.counts_exception(exc), breaker.clock())
            raise
        self.probe(not breaker._judge(result), breaker.clock())
        return result

    def outcome(self, success: bool, now: int) -> RecordResult | None:
        """:meth:`CircuitBreaker.record` without a token: None when it counts as usual.

        While the breaker would reject, the outcome counts nowhere; when a probe is due, it
        settles one (see :meth:`probe`).
        """
        breaker = self._breaker
        record = breaker._read(now)
        verdict = rules.verdict(record, breaker._policy, now)
        if verdict.decision is Decision.PROBE:
            return self.probe(success, now)
        if verdict.decision is Decision.REJECT:
            state = breaker._state_of(record)
            return RecordResult(False, state, f"shadow: breaker is {state.value}; not counted")
        return None

    def probe(self, success: bool, now: int) -> RecordResult:
        """Settle a probe with the outcome of a call that already ran.

        The lease is claimed only now, with the outcome known, and settled at once: it lives
        for the two round trips in between (and at most two store deadlines, should this
        container die between them), never for the call's duration, so an enforcing
        container is never kept from probing by a shadow call. Losing the claim means an
        enforcing breaker would have rejected the call: it counts as a would-be rejection.
        """
        breaker = self._breaker
        base = breaker._policy
        lease_ms = max(1, round(breaker.config.store_deadline_seconds * 2000))
        policy = frozen.replace(base, lease_ms=min(base.lease_ms, lease_ms))
        store, name = breaker._store, breaker.name
        observed = breaker._cache.last_seen
        claim = store.claim_probe(name, policy, now, secrets.token_hex(8), observed)
        if claim.token is None:
            state = breaker._state_of(claim.record)
            verdict = rules.verdict(claim.record, base, now)
            if verdict.decision is not Decision.ALLOW:
                breaker.stats.would_rejects += 1
                breaker._emit("on_would_reject", name, state, verdict.retry_after_ms / 1000)
            return RecordResult(False, state, "shadow: probe slot taken; not counted")
        return breaker._settle(claim.token, success, breaker.clock())
