"""One call on its way through a breaker, and what the two drivers need of the core.

:class:`Call` is the ticket the core (:mod:`fleetbreaker.core`) hands a driver for a call it
admitted; a :data:`Request` is a store request the core returns for the driver to hand back
to it (:meth:`CallPath.send`); an :class:`Answer` is a store's answer on its way up to the
core, as a value; :class:`CallPath` is the core as the drivers
(:mod:`fleetbreaker.sync_driver`, :mod:`fleetbreaker.async_driver`) see it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

if TYPE_CHECKING:
    from fleetbreaker.record import Outcome
    from fleetbreaker.results import Admission

T = TypeVar("T")


class Answer:
    """A store's answer on its way up to the core, which takes every one in one place
    (:meth:`fleetbreaker.core.CallCore.answered`: the cache, the strategy, live tuning).

    ``at_ms`` is when it was read: now, or the read time of an environment's shared copy
    (:mod:`fleetbreaker.shared_refresh`). ``fresh_ms``: how long the cache keeps it, when
    whoever asked already knows (a shared copy's own freshness); None, the strategy's.
    ``from_probe``: a probe's claim or settle, whose record the strategy hears even from the
    local twin (:mod:`fleetbreaker.probes`).
    """

    __slots__ = ("at_ms", "fresh_ms", "from_probe", "outcome")

    def __init__(
        self, outcome: Outcome, at_ms: int, *, fresh_ms: int | None = None, from_probe: bool = False
    ) -> None:
        self.outcome = outcome
        self.at_ms = at_ms
        self.fresh_ms = fresh_ms
        self.from_probe = from_probe

    def __repr__(self) -> str:
        return f"Answer({self.outcome!r}, at_ms={self.at_ms})"


# What a part below the core returns when it asked the store: its result, and every store
# answer it got on the way (in the order they came), for the core to take.
Answers = tuple[Answer, ...]
Replied = tuple[T, Answers]
NO_ANSWERS: Answers = ()

# A store request the call path needs, sent by whichever driver runs the call: inline (sync)
# or on a worker thread (asyncio), always through the core (:meth:`CallPath.send`), which
# takes the answers it brings back and returns its result.
Request = Callable[[], Replied[Any]]

# What a Call is (its kind): counted by the strategy, a probe to settle, a shadow call that
# settles a probe after it ran, or counted nowhere (disabled, a shadow would-be rejection).
COUNTED, PROBING, SHADOW_PROBING, UNCOUNTED = "counted", "probing", "shadow-probing", "uncounted"


class Accounting(Protocol):
    """A counting strategy as a call's ticket holds it (:class:`fleetbreaker.counting.Counting`)."""

    # A success needs no end(): the strategy counts failures only.
    failures_only: bool

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

    def send(self, request: Request) -> Any:
        """Send a store request the core returned; the answers it brings come back to the
        core, and its result to the caller."""
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
