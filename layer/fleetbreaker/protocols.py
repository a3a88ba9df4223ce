"""The interfaces the breaker's parts are written against, defined below all of them.

The admission pipeline, the view and the counting strategies talk to the store through
:class:`GuardedStore`: what :class:`~fleetbreaker.stores.fallback.FallbackStore` offers on
top of the store contract (the deadline, degraded mode, the local twin); the strategies see
the container's record through :class:`View`. Typing them against these interfaces, not the
classes, keeps them free of what sits above or beside them (the breaker wires the classes
in), so a call's path is short to follow and to import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from fleetbreaker.policy import Policy
    from fleetbreaker.record import Action, Outcome, ProbeReport, Record, Report, State


class View(Protocol):
    """A container's view of its breaker's record, as the counting strategies use it
    (:class:`~fleetbreaker.view.RecordView`)."""

    @property
    def last_seen(self) -> Record | None:
        """The newest record a store answered, fresh or not."""
        ...


class LocalStore(Protocol):
    """The local twin's side a breaker reads while degraded."""

    def load(self, name: str, now_ms: int) -> Record | None: ...


class GuardedStore(Protocol):
    """A breaker's store as its parts use it: the contract's operations under a deadline,
    answered by a local twin while the shared store is out of reach.

    Every operation's answer comes back to its caller as a value (an Outcome whose ``local``
    says the twin gave it); the caller returns it up to the breaker's core, which takes every
    answer in one place (:meth:`fleetbreaker.core.CallCore.answered`). The store calls
    nothing back."""

    @property
    def degraded(self) -> bool:
        """True from a shared-store failure until the shared store answers again."""
        ...

    @property
    def local(self) -> LocalStore:
        """The per-container twin that answers while the shared store cannot."""
        ...

    @property
    def shared(self) -> object:
        """The fleet's store it guards."""
        ...

    def paused(self, now_ms: int) -> bool:
        """Whether an operation at ``now_ms`` is answered locally without asking the store."""
        ...

    def load(self, name: str, now_ms: int) -> Record | None: ...

    def read(self, name: str, now_ms: int) -> Outcome:
        """A load whose answer says whether the local twin gave it (``Outcome.local``)."""
        ...

    def record_failure(
        self, name: str, policy: Policy, now_ms: int, observed: Record | None, weight: int = 1
    ) -> Outcome: ...

    def claim_probe(
        self, name: str, policy: Policy, now_ms: int, nonce: str, observed: Record | None
    ) -> Outcome: ...

    def settle_probe(
        self, name: str, policy: Policy, now_ms: int, report: ProbeReport, observed: Record | None
    ) -> Outcome: ...

    def report(
        self, name: str, policy: Policy, now_ms: int, report: Report, observed: Record | None
    ) -> Outcome: ...

    def census(
        self, name: str, policy: Policy, now_ms: int, observed: Record | None
    ) -> Outcome: ...

    def force_state(
        self, name: str, policy: Policy, now_ms: int, target: State, *, action: Action | None = None
    ) -> Outcome: ...
