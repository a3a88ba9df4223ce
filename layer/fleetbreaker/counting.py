"""How a breaker counts its calls: one interface, two strategies.

A breaker holds one :class:`Counting` strategy at a time, chosen by its settings and swapped
when live tuning changes them:

- :class:`fleetbreaker.count.CountStrategy`, the count policy: every failure is one atomic
  write; successes write nothing; census writes tell the fleet's size;
- :class:`fleetbreaker.rate.RateStrategy`, the rate policy, slow calls and the quorum: each
  container tallies its calls and reports them in batches.

Each strategy owns what differs between them: the refresh of the cached record (a read, a
census write or a report), how long a store answer stays fresh, what a finished call
writes, and the weight of a probe claim. A strategy holds no way back into the breaker:
what it asks the store comes back up to the core as a value (its result with the
:class:`~fleetbreaker.calls.Answer` s it got), and the core takes the answers in one place.
Neither reads what the other left in the record:
the count policy's failures (``failures``, ``window_start``), the rate policy's window
(``buckets``) and the census ring are separate fields, so a tune from one to the other
never judges the leftovers of the first by the rule of the second.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from fleetbreaker.calls import Answer

if TYPE_CHECKING:
    import random

    from fleetbreaker.calls import Answers, Replied, Request
    from fleetbreaker.classify import OutcomeJudge
    from fleetbreaker.config import BreakerConfig
    from fleetbreaker.policy import Policy
    from fleetbreaker.protocols import GuardedStore, View
    from fleetbreaker.record import Record
    from fleetbreaker.results import RecordResult


class Counting(Protocol):
    """What a counting strategy does for its breaker (see the module doc)."""

    kind: str  # "count" or "rate"
    # True when the strategy counts failures only: start() and due() always return None and
    # end() of a success does nothing, so the core asks none of them for a call that
    # succeeds (every call of a closed breaker).
    failures_only: bool

    def refresh(self, now_ms: int) -> Replied[Record | None]:
        """The cache's refresh: one store request whose answer is the fleet's record (the
        record, with the answers for the core)."""
        ...

    def fresh_ms(self, record: Record | None, now_ms: int) -> int:
        """How long a store answer stays fresh (``cache_ttl``, longer in a large fleet)."""
        ...

    def observe(self, record: Record | None) -> None:
        """Hear a record a store returned (its generation: older counts are stale)."""
        ...

    def due(self, now_ms: int) -> Request | None:
        """A store request to send before a call admitted while closed (a report that is
        due), or None."""
        ...

    def start(self, now_ms: int) -> Any:
        """A call admitted while closed starts: its ticket (None when it is not timed)."""
        ...

    def end(self, ticket: Any, failed: bool) -> Request | None:
        """The call of ``ticket`` ended, failed or not: count it. A store request it needs
        (a failure's write, an urgent report) is returned for the driver to send."""
        ...

    def abandon(self, ticket: Any) -> None:
        """The call of ``ticket`` was interrupted (cancelled, SystemExit): it counts nowhere."""
        ...

    def count(
        self, success: bool, now_ms: int, read: Callable[[int], Record | None]
    ) -> Replied[RecordResult]:
        """Count the outcome of a call admitted while closed that ran elsewhere. ``read`` is
        the core's read-through of the record, for this call only."""
        ...

    def claim_weight(self, now_ms: int) -> int:
        """1, or the weight that thins a large fleet's probe claims."""
        ...

    def adopt(self, config: BreakerConfig, policy: Policy) -> None:
        """Follow tuned numbers of the same strategy (thresholds, durations)."""
        ...

    def flush(self, now_ms: int) -> Answers:
        """Send what is pending now (before a snapshot is taken, or the process ends); the
        answers, for the core."""
        ...

    def restart(self, now_ms: int) -> None:
        """Start over as a new container (the context's id and random source are new):
        forget every schedule and pending count, draw them afresh."""
        ...


class SharedReading(Protocol):
    """The execution environment's shared reads (:class:`fleetbreaker.shared_refresh.
    SharedReads`), as a refresh reads through them."""

    def read(
        self, now_ms: int, fresh_ms: Callable[[Record | None, int], int]
    ) -> Replied[Record | None]:
        """The record at ``now_ms`` (the environment's fresh copy, or one store read), with
        its answer."""
        ...


class CountingContext:
    """What both strategies work with: the breaker's name, store, view, clock, random
    source, container key, event hook and failure judge (the breaker builds one). The random
    source and the container key change when a snapshot is restored: read them at use.

    :meth:`read` is a refresh's read of the record: one store read, or on Lambda Managed
    Instances the execution environment's shared one (``shared``,
    :class:`fleetbreaker.shared_refresh.SharedReads`). Neither calls anything back: each
    returns the record with its answer, which the strategy returns up to the core."""

    def __init__(
        self,
        name: str,
        store: GuardedStore,
        view: View,
        *,
        clock: Callable[[], int],
        rng: random.Random,
        container_key: str,
        emit: Callable[..., None],
        judge: OutcomeJudge,
        shared: SharedReading | None = None,
    ) -> None:
        self.name = name
        self.store = store
        self.view = view
        self.clock = clock
        self.rng = rng
        self.container_key = container_key
        self.emit = emit
        self.judge = judge
        self.shared = shared

    def become(self, container_key: str) -> None:
        """Count as another container from now on (a restored snapshot's new id)."""
        self.container_key = container_key

    def load(self, now_ms: int) -> Replied[Record | None]:
        """One store read of the record: the record, and its answer for the core."""
        answer = self.store.read(self.name, now_ms)
        return answer.record, (Answer(answer, now_ms),)

    def read(
        self, now_ms: int, fresh_ms: Callable[[Record | None, int], int]
    ) -> Replied[Record | None]:
        """A refresh's read: the environment's shared one when there is one, else
        :meth:`load`. ``fresh_ms`` is the strategy's (how long the answer stays fresh: a
        shared read writes it into the environment's copy)."""
        shared = self.shared
        if shared is not None:
            return shared.read(now_ms, fresh_ms)
        # load(), written out: every refresh of a breaker passes here.
        answer = self.store.read(self.name, now_ms)
        return answer.record, (Answer(answer, now_ms),)
