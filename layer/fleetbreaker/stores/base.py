"""The store contract: a handful of atomic operations on one breaker record."""

from __future__ import annotations

import threading
from dataclasses import field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from fleetbreaker.frozen import frozen, mutable_value

if TYPE_CHECKING:
    from collections.abc import Iterator

    from fleetbreaker.policy import Policy
    from fleetbreaker.record import Action, Outcome, ProbeReport, Record, Report, State


@mutable_value  # a dataclass without generated code (cold start)
class StoreStats:
    """Round trips a store made, for benchmarks and tests (thread-safe counters)."""

    reads: int = 0
    writes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count_read(self) -> None:
        with self._lock:
            self.reads += 1

    def count_write(self) -> None:
        with self._lock:
            self.writes += 1

    @property
    def requests(self) -> int:
        return self.reads + self.writes


@runtime_checkable
class Store(Protocol):
    """What every store implements. Each operation is atomic on the shared record.

    ``observed`` is the caller's latest view of the record (possibly stale). A store may use
    it to pick its first conditional write; it must never trust it: every write is fenced on
    the state the store itself finds. ``now_ms`` is the caller's clock in epoch ms; a store
    with a trustworthy clock of its own (Redis' TIME) may use that instead.

    A store may also have a ``prepare()`` method that does its one-off, local setup (building
    a client); :class:`~fleetbreaker.stores.fallback.FallbackStore` calls it once, outside the
    store deadline. And a ``drop_connections()`` method that closes its pooled connections
    and forgets cached logins, leaving it usable: called after the process was restored from
    a snapshot (Lambda SnapStart, :func:`fleetbreaker.after_restore`), when every connection
    it holds belongs to another time. And a ``sharing_identity``: a string naming everything
    that makes its data another fleet's (region, endpoint, table...), which lets the
    processes of one Lambda Managed Instances environment share their reads
    (:func:`fleetbreaker.shared_refresh.copy_key`); without one they do not. Operations raise
    :class:`fleetbreaker.errors.StoreError` when the store cannot answer.
    :class:`~fleetbreaker.stores.fallback.FallbackStore` wraps any store to answer from a
    local twin instead, and bounds every operation by a deadline.
    """

    stats: StoreStats

    def load(self, name: str, now_ms: int) -> Record | None:
        """The record, or None when it does not exist or is past its TTL."""
        ...

    def record_failure(
        self, name: str, policy: Policy, now_ms: int, observed: Record | None, weight: int = 1
    ) -> Outcome:
        """Count a failure (``weight`` failures) in the current window; trip (once) at the
        threshold. The breaker passes ``weight`` only when it is not 1."""
        ...

    def claim_probe(
        self, name: str, policy: Policy, now_ms: int, nonce: str, observed: Record | None
    ) -> Outcome:
        """Take a probe lease (moving open→half_open when the open window has ended)."""
        ...

    def settle_probe(
        self, name: str, policy: Policy, now_ms: int, report: ProbeReport, observed: Record | None
    ) -> Outcome:
        """Report a probe's result; a token whose lease is gone changes nothing."""
        ...

    def report(
        self, name: str, policy: Policy, now_ms: int, report: Report, observed: Record | None
    ) -> Outcome:
        """Add one container's batch of calls to the window; trip (once) when the rate,
        slow-call or count rule says so. The outcome's record is the fleet's view after it."""
        ...

    def census(self, name: str, policy: Policy, now_ms: int, observed: Record | None) -> Outcome:
        """Count one census write in the record's census ring, in any state; never a
        transition. An absent record becomes a fresh closed one; a record the store cannot
        read is left as it is (CorruptRecordError): it may hold an open breaker. The
        outcome's record is the fleet's view after it (the write replaces a refresh read)."""
        ...

    def force_state(self, name: str, policy: Policy, now_ms: int, target: State) -> Outcome:
        """Operator override: forced_open, disabled, or closed (reset)."""
        ...


@frozen
class Listing:
    """One breaker found by :meth:`AdminStore.list_records`.

    ``record`` is None when the stored item could not be read; ``error`` then says why.
    """

    name: str
    record: Record | None
    error: str | None = None


@runtime_checkable
class AdminStore(Store, Protocol):
    """A store an operator can steer: list every breaker, store live settings.

    Kept apart from :class:`Store` so a store (or wrapper) that only serves breakers still
    satisfies the breaker's contract.
    """

    def force_state(
        self, name: str, policy: Policy, now_ms: int, target: State, *, action: Action | None = None
    ) -> Outcome:
        """Operator override, with ``action`` (when given) stored as the record's last_action."""
        ...

    def list_records(self, now_ms: int) -> Iterator[Listing]:
        """Every breaker record in the store (expired ones left out), each read on its own:
        a record that cannot be parsed is listed with its error instead of stopping the walk.
        """
        ...

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
        """Store live settings (JSON text, "" to clear) with the record; state untouched.

        A breaker without a live record gets a fresh closed one to carry them. With
        ``expected``, only if the stored settings are still that text (a record without any
        holds ""): the caller merged its change into them. Returns the record after the write,
        or, when the settings were no longer ``expected``, the record as it is (unchanged).
        """
        ...
