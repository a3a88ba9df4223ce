"""An in-process store: the reference implementation of the rules, for tests and local runs."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from fleetbreaker import rules
from fleetbreaker.frozen import replace
from fleetbreaker.record import RECORD_TEXTS, Outcome, ProbeReport, Record, Report, State
from fleetbreaker.stores.base import Listing, StoreStats

if TYPE_CHECKING:
    from fleetbreaker.policy import Policy
    from fleetbreaker.record import Action


class MemoryStore:
    """Thread-safe store kept in this process's memory.

    It shares state between the breakers of one process only, so it protects one container,
    not a fleet. fleetbreaker also uses one privately as the local breaker it falls back to
    when the shared store is unreachable.

    Example
    -------
    >>> breaker = CircuitBreaker("payment-api", store=MemoryStore())
    >>> breaker.state
    <State.CLOSED: 'closed'>
    """

    # Its records live in this process: processes that share a directory (Lambda Managed
    # Instances) must not share their views of them (fleetbreaker.shared_refresh).
    process_local = True
    # No data beyond this process to name: it shares no copy (shared_refresh.copy_key).
    sharing_identity: str | None = None

    def __init__(self) -> None:
        self._records: dict[str, Record] = {}
        self._lock = threading.Lock()
        self.stats = StoreStats()

    def _live(self, name: str, now_ms: int) -> Record | None:
        record = self._records.get(name)
        if record is not None and record.is_expired(now_ms):
            del self._records[name]
            return None
        return record

    def _apply(self, name: str, now_ms: int, rule: Callable[[Record | None], Outcome]) -> Outcome:
        self.stats.count_write()
        with self._lock:
            before = self._live(name, now_ms)
            outcome = _carry_texts(before, rule(before))
            if outcome.changed and outcome.record is not None:
                self._records[name] = outcome.record
            return outcome

    def load(self, name: str, now_ms: int) -> Record | None:
        self.stats.count_read()
        with self._lock:
            # _live(), written out: every cache refresh of a breaker on this store is one.
            record = self._records.get(name)
            if record is not None and record.expires_at * 1000 <= now_ms:  # is_expired()
                del self._records[name]
                return None
            return record

    def seed(self, name: str, record: Record | None) -> None:
        """Replace a record wholesale (used to start a local breaker from the fleet's view)."""
        with self._lock:
            if record is None:
                self._records.pop(name, None)
            else:
                self._records[name] = record

    def clear(self) -> None:
        """Forget every record (a degraded breaker's local twin, once the fleet answers)."""
        with self._lock:
            self._records.clear()

    def record_failure(
        self, name: str, policy: Policy, now_ms: int, observed: Record | None, weight: int = 1
    ) -> Outcome:
        return self._apply(name, now_ms, lambda r: rules.apply_failure(r, policy, now_ms, weight))

    def claim_probe(
        self, name: str, policy: Policy, now_ms: int, nonce: str, observed: Record | None
    ) -> Outcome:
        return self._apply(name, now_ms, lambda r: rules.apply_claim(r, policy, now_ms, nonce))

    def settle_probe(
        self, name: str, policy: Policy, now_ms: int, report: ProbeReport, observed: Record | None
    ) -> Outcome:
        return self._apply(name, now_ms, lambda r: rules.apply_settle(r, policy, now_ms, report))

    def report(
        self, name: str, policy: Policy, now_ms: int, report: Report, observed: Record | None
    ) -> Outcome:
        return self._apply(name, now_ms, lambda r: rules.apply_report(r, policy, now_ms, report))

    def census(self, name: str, policy: Policy, now_ms: int, observed: Record | None) -> Outcome:
        return self._apply(name, now_ms, lambda r: rules.apply_census(r, policy, now_ms))

    def force_state(
        self, name: str, policy: Policy, now_ms: int, target: State, *, action: Action | None = None
    ) -> Outcome:
        def force(record: Record | None) -> Outcome:
            outcome = rules.apply_force(record, policy, now_ms, target)
            if action is None or outcome.record is None:
                return outcome
            return replace(outcome, record=replace(outcome.record, last_action=action.encode()))

        return self._apply(name, now_ms, force)

    def list_records(self, now_ms: int) -> Iterator[Listing]:
        with self._lock:
            names = sorted(self._records)
        for name in names:
            record = self.load(name, now_ms)
            if record is not None:
                yield Listing(name, record)

    def tune(
        self,
        name: str,
        policy: Policy,
        now_ms: int,
        tuned: str,
        action: Action | None,
        *,
        expected: str | None = None,
    ) -> Record | None:
        self.stats.count_write()
        with self._lock:
            current = self._live(name, now_ms)
            if expected is not None and (current.tuned if current is not None else "") != expected:
                return current
            if current is None:
                current = Record(expires_at=now_ms // 1000 + policy.ttl_s, updated_at=now_ms)
            after = replace(current, tuned=tuned)
            if action is not None:
                after = replace(after, last_action=action.encode())
            self._records[name] = after
            return after


def _carry_texts(before: Record | None, outcome: Outcome) -> Outcome:
    """The outcome with the operator's fields of ``before`` carried over, as every store does."""
    after = outcome.record
    if before is None or after is None or not outcome.changed:
        return outcome
    carried = {
        field: getattr(before, field)
        for field in RECORD_TEXTS
        if getattr(before, field) and not getattr(after, field)
    }
    return replace(outcome, record=replace(after, **carried)) if carried else outcome
