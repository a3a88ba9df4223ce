"""One call on its way through a breaker, and what the two drivers need of the core.

:class:`Call` is the ticket the core (:mod:`fleetbreaker.core`) hands a driver for a call it
admitted; a :data:`Request` is a store request the core returns for the driver to send;
:class:`CallPath` is the core as the drivers (:mod:`fleetbreaker.sync_driver`,
:mod:`fleetbreaker.async_driver`) see it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

if TYPE_CHECKING:
    from fleetbreaker.results import Admission

# A store request the call path needs, made by whichever driver runs the call: inline (sync)
# or on a worker thread (asyncio). Its answer is the driver's to ignore or return.
Request = Callable[[], Any]

# What a Call is (its kind): counted by the strategy, a probe to settle, a shadow call that
# settles a probe after it ran, or counted nowhere (disabled, a shadow would-be rejection).
COUNTED, PROBING, SHADOW_PROBING, UNCOUNTED = "counted", "probing", "shadow-probing", "uncounted"


class Accounting(Protocol):
    """A counting strategy as a call's ticket holds it (:class:`fleetbreaker.counting.Counting`)."""

    def end(self, ticket: Any, failed: bool) -> Request | None:
        """The call ended, failed or not: count it; a store request it needs, or None."""
        ...

    def abandon(self, ticket: Any) -> None:
        """The call was interrupted: it counts nowhere."""
        ...


class Call:
    """One admitted call on its way: what ends it (its kind), the strategy that counts it and
    its ticket, a probe's token, and a store request to send before it runs (a report due)."""

    __slots__ = ("before", "counting", "kind", "ticket", "token")

    def __init__(
        self,
        kind: str,
        counting: Accounting | None = None,
        ticket: Any = None,
        token: str | None = None,
        before: Request | None = None,
    ) -> None:
        self.kind = kind
        self.counting = counting
        self.ticket = ticket
        self.token = token
        self.before = before


class CallPath(Protocol):
    """The core (:class:`fleetbreaker.core.CallCore`) as a driver uses it."""

    clock: Callable[[], int]
    # The admission of a closed, healthy breaker's call (one object: told by identity).
    allow_closed: Admission

    def closed(self, now_ms: int) -> Call:
        """The call of a closed, healthy breaker."""
        ...

    def admit(self, now_ms: int | None = None, lease_ms: int | None = None) -> Admission:
        """Decide one call (may make a store request)."""
        ...

    def admit_quietly(self) -> Admission:
        """Decide one call now (may make a store request), telling no decision hook."""
        ...

    def announce(self, admission: Admission) -> None:
        """Tell the decision hooks of a quiet admission."""
        ...

    def admit_cached(self, now_ms: int) -> Admission | None:
        """Decide one call from the cached record, or None when that needs the store."""
        ...

    def plan(self, admission: Admission, now_ms: int) -> Call | None:
        """The call an admission lets run, or None when it is rejected."""
        ...

    def reject(self, admission: Admission, fallback: Callable[..., Any] | None) -> None:
        """Tell the listeners of a rejection; raise CircuitOpenError without a fallback."""
        ...

    def refuse(self, admission: Admission) -> NoReturn:
        """Tell the listeners of a rejection and raise CircuitOpenError."""
        ...

    def returned(self, call: Call, result: Any) -> Request | None:
        """The call returned ``result``."""
        ...

    def raised(self, call: Call, exc: Exception) -> Request | None:
        """The call raised ``exc``."""
        ...

    def interrupted(self, call: Call) -> Request | None:
        """The call was cancelled or cut short: no verdict."""
        ...
