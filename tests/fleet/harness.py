"""A fleet on a virtual clock: real breakers, one shared store, a dependency that can fail.

Each container is a CircuitBreaker with its own id and seeded random source; all share one
store (any backend) and one clock that only the simulation moves. Containers call at their
own period from a random phase, one call at a time, as Lambda containers do; the dependency
fails every call while ``failing`` is set. The store's counting operations are weighed as
they happen, so a test can say what opened the breaker: how many failures were written,
with which weights, and whether a census write ever made a transition.
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import math
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from fleetbreaker import BreakerConfig, BreakerListener, CircuitBreaker, CircuitOpenError, State
from fleetbreaker import record as schema
from fleetbreaker.events import StateChange
from fleetbreaker.record import Record
from tests.coverage_scope import untraced

T0 = 1_800_000_000_000  # virtual epoch ms, far from any real record
NAME = "fleet-dependency"


# Whether a new Fleet's containers run under coverage's tracer (when one is set). A test that
# runs hundreds of seeded trials of the same fleet traces the first few: the later ones run
# the same lines of the package, at a third of the CPU (docs/testing.md, "Speed").
_TRACED: contextvars.ContextVar[bool] = contextvars.ContextVar("fleet_traced", default=True)


@contextlib.contextmanager
def fleets_untraced(untraced_: bool = True) -> Iterator[None]:
    """Fleets made inside run their containers untraced by coverage (when ``untraced_``)."""
    token = _TRACED.set(not untraced_)
    try:
        yield
    finally:
        _TRACED.reset(token)


class DependencyDown(Exception):
    """The simulated dependency's failure."""


class VirtualClock:
    def __init__(self, start_ms: int = T0) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms


@dataclass
class Ledger:
    """What the shared store was asked to count, and what the fleet saw."""

    failure_writes: list[tuple[int, int]] = field(default_factory=list)  # (ms, weight)
    census_writes: int = 0
    census_transitions: int = 0
    trips: list[int] = field(default_factory=list)  # ms of each closed -> open
    closes: list[int] = field(default_factory=list)  # ms of each recovery close

    def written_since(self, since_ms: int, until_ms: int) -> list[int]:
        return [w for at, w in self.failure_writes if since_ms <= at <= until_ms]


class Transitions(BreakerListener):
    def __init__(self, ledger: Ledger, clock: VirtualClock) -> None:
        self.ledger = ledger
        self.clock = clock

    def on_state_change(self, name: str, change: StateChange) -> None:
        if (change.before, change.after) == (State.CLOSED, State.OPEN):
            self.ledger.trips.append(self.clock())
        if change.after is State.CLOSED and change.before is not State.CLOSED:
            self.ledger.closes.append(self.clock())


def weigh(store: Any, ledger: Ledger, clock: VirtualClock) -> Any:
    """``store`` with its counting operations weighed into ``ledger`` (instance attributes:
    the store keeps its own type, so a MemoryStore still runs in-process)."""
    # The class's own methods: a store weighed for an earlier trial is weighed again, not
    # wrapped twice.
    record_failure = type(store).record_failure.__get__(store)
    census = type(store).census.__get__(store)

    def weighed_failure(name: str, policy: Any, now: int, observed: Any, weight: int = 1) -> Any:
        outcome = record_failure(name, policy, now, observed, weight)
        if outcome.changed:
            ledger.failure_writes.append((now, weight))
        return outcome

    def weighed_census(name: str, policy: Any, now: int, observed: Any) -> Any:
        outcome = census(name, policy, now, observed)
        ledger.census_writes += 1
        ledger.census_transitions += outcome.transition is not None
        return outcome

    store.record_failure = weighed_failure
    store.census = weighed_census
    return store


@dataclass
class Container:
    breaker: CircuitBreaker
    period_ms: float
    active: bool = True
    # Whether a call of this container is in the schedule (an asleep container's stays there
    # until it comes due, so waking it again before then must not start a second one).
    scheduled: bool = False
    # Where its own phase takes it after the call that ends an idle (Fleet.idle).
    resume_at: float | None = None
    sent: int = 0  # calls that reached the dependency
    failing_sent: int = 0  # ... while it was failing
    rejected: int = 0
    admitted_log: list[tuple[int, bool]] = field(default_factory=list)


class Fleet:
    """Containers on one store and one virtual clock (see the module doc)."""

    def __init__(
        self,
        store: Any,
        config: BreakerConfig,
        *,
        seed: int,
        name: str = NAME,
        clock: VirtualClock | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.name = name
        self.clock = clock or VirtualClock()
        self.ledger = ledger or Ledger()
        self.store = store
        self.config = config
        self.rng = random.Random(seed)
        self.seed = seed
        self.failing = False
        self.noise = 0.0  # the share of calls that fail while not failing
        self.containers: list[Container] = []
        self._listener = Transitions(self.ledger, self.clock)
        weigh(store, self.ledger, self.clock)
        self._events: list[tuple[float, int, int]] = []
        self._sequence = 0
        self.record_admissions = False
        # Untraced, the containers' work (their breakers' construction and calls) runs with
        # coverage's tracer off: each entry point below is a call of its own, as
        # tests/coverage_scope.py's untraced needs.
        if not _TRACED.get():
            self.add = untraced(self.add)  # type: ignore[method-assign]
            self.retune = untraced(self.retune)  # type: ignore[method-assign]
            self.run_until = untraced(self.run_until)  # type: ignore[method-assign]

    # -- the fleet -------------------------------------------------------------------------

    def add(self, count: int, period_s: float, config: BreakerConfig | None = None) -> None:
        """``count`` new containers, each calling every ``period_s`` from a random phase."""
        for _ in range(count):
            index = len(self.containers)
            breaker = CircuitBreaker(
                self.name,
                store=self.store,
                config=config or self.config,
                fallback=lambda *_a, **_k: CircuitOpenError,
                listeners=[self._listener],
                clock=self.clock,
                rng=random.Random(self.seed * 1_000_003 + index),
                container_id=f"c{self.seed}-{index}",
            )
            period_ms = period_s * 1000
            self.containers.append(Container(breaker, period_ms))
            self._schedule(self.clock() + self.rng.random() * period_ms, index)

    def _schedule(self, at_ms: float, index: int) -> None:
        self._sequence += 1
        self.containers[index].scheduled = True
        heapq.heappush(self._events, (at_ms, self._sequence, index))

    def set_active(self, indexes: Iterable[int], active: bool) -> None:
        for index in indexes:
            container = self.containers[index]
            if active and not container.active and not container.scheduled:
                self._schedule(self.clock() + self.rng.random() * container.period_ms, index)
            container.active = active

    def set_period(self, indexes: Iterable[int], period_s: float) -> None:
        """Containers ``indexes`` call every ``period_s`` from their next call on."""
        for index in indexes:
            self.containers[index].period_ms = period_s * 1000

    def retune(self, index: int, config: BreakerConfig) -> None:
        """Container ``index`` redeployed with ``config`` (a new process: a new breaker)."""
        old = self.containers[index]
        old.breaker = CircuitBreaker(
            self.name,
            store=self.store,
            config=config,
            fallback=lambda *_a, **_k: CircuitOpenError,
            listeners=[self._listener],
            clock=self.clock,
            rng=random.Random(self.seed * 7_000_003 + index),
            container_id=f"r{self.seed}-{index}",
        )

    # -- time ------------------------------------------------------------------------------

    def run_until(self, end_ms: int, stop: Callable[[], bool] | None = None) -> None:
        """Run every call due before ``end_ms`` (or until ``stop()`` holds)."""
        events = self._events
        while events and events[0][0] < end_ms:
            at, _, index = heapq.heappop(events)
            container = self.containers[index]
            if not container.active:
                container.scheduled = False
                container.resume_at = None
                continue  # rescheduled when it wakes
            self.clock.now_ms = max(self.clock.now_ms, round(at))
            self._call(container)
            resume_at, container.resume_at = container.resume_at, None
            self._schedule(at + container.period_ms if resume_at is None else resume_at, index)
            if stop is not None and stop():
                return
        self.clock.now_ms = max(self.clock.now_ms, end_ms)

    def run_for(self, seconds: float, stop: Callable[[], bool] | None = None) -> None:
        self.run_until(self.clock() + round(seconds * 1000), stop)

    def idle(self, ms: int) -> None:
        """Nobody calls for ``ms``; then the traffic comes back at once: each container that
        had a call due during the idle makes one call at its end (the whole fleet wakes in
        the same instant, each refreshing its view together), then calls on its own phase
        again. Not a backlog of every call the idle skipped, all made in that instant: a
        90-minute idle at 100 calls a second was 540,000 calls at one millisecond."""
        end = self.clock.now_ms + ms
        self.clock.now_ms = end
        events = []
        for at, sequence, index in self._events:
            if at < end:
                container = self.containers[index]
                skipped = math.floor((end - at) / container.period_ms) + 1
                container.resume_at = at + skipped * container.period_ms
                at = end
            events.append((at, sequence, index))
        heapq.heapify(events)
        self._events = events

    def _call(self, container: Container) -> None:
        failing = self.failing or (self.noise > 0 and self.rng.random() < self.noise)

        def dependency() -> str:
            container.sent += 1
            if failing:
                container.failing_sent += 1
                raise DependencyDown
            return "ok"

        try:
            result = container.breaker.call(dependency)
        except DependencyDown:
            result = "failed"
        if result is CircuitOpenError:
            container.rejected += 1
        if self.record_admissions:
            container.admitted_log.append((self.clock(), result is not CircuitOpenError))

    # -- what it saw -----------------------------------------------------------------------

    def failing_sent(self) -> int:
        return sum(c.failing_sent for c in self.containers)

    def all_rejecting(self, since: dict[int, int]) -> bool:
        """Whether every active container has been turned away since ``since`` (index ->
        rejections counted then)."""
        return all(c.rejected > since[i] for i, c in enumerate(self.containers) if c.active)


def seed_record(store: Any, name: str, record: Record) -> None:
    """Put ``record`` in ``store`` as its stored form, whatever the backend (as a fleet that
    ran before this one left it)."""
    kind = type(store).__name__
    if kind == "MemoryStore":
        store.seed(name, record)
        return
    fields: dict[str, str] = {schema.STATE: record.state.value}
    for attribute, stored in {**schema.NUMBER_FIELDS, **schema.OPTIONAL_NUMBER_FIELDS}.items():
        fields[stored] = str(getattr(record, attribute))
    for slot, bucket in record.census.items():
        for code, attribute in schema.CENSUS_CODES.items():
            fields[schema.census_field(slot, code)] = str(getattr(bucket, attribute))
    for slot, window in record.buckets.items():
        for code, attribute in schema.BUCKET_CODES.items():
            fields[schema.bucket_field(slot, code)] = str(getattr(window, attribute))
    if kind == "DynamoDBStore":
        item = {stored: {"N": value} for stored, value in fields.items()}
        item[schema.STATE] = {"S": record.state.value}
        item["name"] = {"S": name}
        store.client.put_item(TableName=store.table_name, Item=item)
    elif kind == "RedisStore":
        key = store.key(name)
        store.client.delete(key)
        store.client.hset(key, mapping=fields)
    else:
        raise AssertionError(f"no way to seed a {kind}")
