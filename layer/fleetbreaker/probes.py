"""Probe leases: claiming one when an open window ends, and settling it with a probe's result.

Half-open admits exactly ``half_open_max_probes`` calls fleet-wide: each is a lease claimed
with one conditional write and settled with another, fenced on its token, so a prober whose
lease ran out changes nothing. The admission pipeline claims (``admission.ProbeClaim``); the
breaker settles a probe it ran, a workflow settles one through ``record(token=...)``, and
shadow mode claims and settles at once, after its call (``admission.Shadow``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING

from fleetbreaker.record import ProbeReport, State
from fleetbreaker.results import RecordResult

if TYPE_CHECKING:
    import random

    from fleetbreaker.policy import Policy
    from fleetbreaker.protocols import GuardedStore
    from fleetbreaker.record import Outcome, Record


class ProbeLeases:
    """One breaker's probe claims and settles on its store.

    Each claim's and settle's answer goes, as it comes back, to ``answered(outcome, now_ms)``
    (the breaker's one place for store answers, which caches only the shared store's) and
    its record to ``observe(record)``, the local twin's too: the strategy hears every
    generation a probe saw.
    """

    def __init__(
        self,
        name: str,
        store: GuardedStore,
        *,
        rng: random.Random,
        recovery_jitter: float,
        emit: Callable[..., None],
        answered: Callable[[Outcome, int], None],
        observe: Callable[[Record | None], None],
    ) -> None:
        self.name = name
        self.rng = rng
        self._store = store
        self._jitter = recovery_jitter
        self._emit = emit
        self._answered = answered
        self._observe = observe

    def _heard(self, outcome: Outcome, now_ms: int) -> None:
        self._answered(outcome, now_ms)
        self._observe(outcome.record)

    def claim(self, policy: Policy, now_ms: int, observed: Record | None) -> Outcome:
        """Try to take a probe lease (open -> half_open when the open window has ended)."""
        outcome = self._store.claim_probe(self.name, policy, now_ms, secrets.token_hex(8), observed)
        self._heard(outcome, now_ms)
        return outcome

    def settle(
        self, policy: Policy, token: str, success: bool, now_ms: int, observed: Record | None
    ) -> RecordResult:
        """Report a probe's result; a token whose lease has ended changes nothing."""
        # A failed probe reopens for a grown window, shortened by up to recovery_jitter so
        # the breakers of many functions do not reopen in step.
        jitter = 1.0 - self.rng.random() * self._jitter
        report = ProbeReport(token, success, jitter)
        outcome = self._store.settle_probe(self.name, policy, now_ms, report, observed)
        self._heard(outcome, now_ms)
        record = outcome.record
        state = record.state if record is not None else State.CLOSED
        self._emit("on_probe", self.name, success, outcome.changed)
        if outcome.changed:
            return RecordResult(True, state, f"probe {'succeeded' if success else 'failed'}")
        return RecordResult(False, state, "stale probe token: its lease has ended; nothing changed")

    def release(
        self, policy: Policy, token: str, now_ms: int, observed: Record | None
    ) -> RecordResult:
        """Give a lease back with no verdict (its call was cancelled): the slot is free for
        the next claim at once, instead of when the lease runs out. Nothing is counted."""
        report = ProbeReport(token, False, released=True)
        outcome = self._store.settle_probe(self.name, policy, now_ms, report, observed)
        self._heard(outcome, now_ms)
        record = outcome.record
        state = record.state if record is not None else State.CLOSED
        if outcome.changed:
            return RecordResult(True, state, "probe cancelled: its lease was given back")
        return RecordResult(False, state, "stale probe token: its lease has ended; nothing changed")
