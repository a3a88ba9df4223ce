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

from fleetbreaker.calls import Answer
from fleetbreaker.record import ProbeReport, State
from fleetbreaker.results import RecordResult

if TYPE_CHECKING:
    import random

    from fleetbreaker.calls import Replied
    from fleetbreaker.policy import Policy
    from fleetbreaker.protocols import GuardedStore
    from fleetbreaker.record import Outcome, Record


class ProbeLeases:
    """One breaker's probe claims and settles on its store.

    Each claim's and settle's answer is returned, as a value, to whoever asked: a claim's
    is its outcome, a settle's comes with its result as an :class:`~fleetbreaker.calls.Answer`
    marked ``probe``. The core takes them (it caches only the shared store's, and the
    strategy hears every generation a probe saw, the local twin's too).
    """

    def __init__(
        self,
        name: str,
        store: GuardedStore,
        *,
        rng: random.Random,
        recovery_jitter: float,
        emit: Callable[..., None],
    ) -> None:
        self.name = name
        self.rng = rng
        self._store = store
        self._jitter = recovery_jitter
        self._emit = emit

    def claim(self, policy: Policy, now_ms: int, observed: Record | None) -> Outcome:
        """Try to take a probe lease (open -> half_open when the open window has ended). The
        outcome is the store's answer: the caller hands it up to the core
        (:func:`probe_answer`)."""
        return self._store.claim_probe(self.name, policy, now_ms, secrets.token_hex(8), observed)

    def settle(
        self, policy: Policy, token: str, success: bool, now_ms: int, observed: Record | None
    ) -> Replied[RecordResult]:
        """Report a probe's result; a token whose lease has ended changes nothing."""
        # A failed probe reopens for a grown window, shortened by up to recovery_jitter so
        # the breakers of many functions do not reopen in step.
        jitter = 1.0 - self.rng.random() * self._jitter
        report = ProbeReport(token, success, jitter)
        outcome = self._store.settle_probe(self.name, policy, now_ms, report, observed)
        answers = (probe_answer(outcome, now_ms),)
        record = outcome.record
        state = record.state if record is not None else State.CLOSED
        self._emit("on_probe", self.name, success, outcome.changed)
        if outcome.changed:
            verdict = "succeeded" if success else "failed"
            return RecordResult(True, state, f"probe {verdict}"), answers
        return RecordResult(False, state, _STALE), answers

    def release(
        self, policy: Policy, token: str, now_ms: int, observed: Record | None
    ) -> Replied[RecordResult]:
        """Give a lease back with no verdict (its call was cancelled): the slot is free for
        the next claim at once, instead of when the lease runs out. Nothing is counted."""
        report = ProbeReport(token, False, released=True)
        outcome = self._store.settle_probe(self.name, policy, now_ms, report, observed)
        answers = (probe_answer(outcome, now_ms),)
        record = outcome.record
        state = record.state if record is not None else State.CLOSED
        if outcome.changed:
            return RecordResult(True, state, "probe cancelled: its lease was given back"), answers
        return RecordResult(False, state, _STALE), answers


_STALE = "stale probe token: its lease has ended; nothing changed"


def probe_answer(outcome: Outcome, now_ms: int) -> Answer:
    """A probe's claim or settle answer, on its way up to the core: marked ``probe`` (the
    strategy hears its record even from the local twin)."""
    return Answer(outcome, now_ms, from_probe=True)
