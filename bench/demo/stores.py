"""Where each run's breakers keep their state, and how a container watches its breaker.

A container process builds its store from a :class:`StoreSpec` (plain, picklable data). The
shared run gives every container a client to the same store; the per-container run gives each
one a ``MemoryStore`` of its own: the same thresholds, no shared state.

:class:`WatchedStore` sits between the breaker and its store and notes what every answer told
the breaker (the state it saw, the probe leases it won and in which half-open window) and
what the store raised, a timeout (the machine's load) or a fault. It changes nothing: the real
store does the work, and the breaker cannot tell the difference.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.managers import BaseManager
from typing import TYPE_CHECKING, TypeVar

from fleetbreaker import MemoryStore, State
from fleetbreaker.stores.base import StoreStats

if TYPE_CHECKING:
    from fleetbreaker.policy import Policy
    from fleetbreaker.record import Outcome, ProbeReport, Record, Report
    from fleetbreaker.stores.base import Store

T = TypeVar("T")

# Kinds of StoreSpec: the shared stores of scenario.STORES, and a container's own.
PER_CONTAINER = "per-container"

# What a store's client raises when an answer did not come in time: the machine's (or the
# emulator's) load, not a fault. By module and class: a class is looked up only in a module
# already imported, since no exception of it can exist before (a container on DynamoDB never
# imports redis).
TIMEOUTS = (
    ("builtins", "TimeoutError"),  # socket timeouts too
    ("botocore.exceptions", "ReadTimeoutError"),
    ("botocore.exceptions", "ConnectTimeoutError"),
    ("redis.exceptions", "TimeoutError"),
    ("fleetbreaker.errors", "StoreDeadlineError"),
)


@dataclass(frozen=True)
class StoreSpec:
    """How a container builds its breaker's store."""

    kind: str  # "dynamodb", "redis", "memory" (shared through a manager) or PER_CONTAINER
    address: str = ""  # endpoint URL, redis URL, or host:port of the manager
    table: str = ""
    authkey: bytes = b""
    # The breaker's store deadline (seconds) when the demo raises it for an emulated store:
    # the DynamoDB client's read timeout then follows it (see build), or the SDK would give
    # up on a queued write long before the deadline.
    deadline: float | None = None

    @property
    def shared(self) -> bool:
        return self.kind != PER_CONTAINER

    def build(self) -> Store:
        if self.kind == PER_CONTAINER:
            return MemoryStore()
        if self.kind == "dynamodb":
            from fleetbreaker import DynamoDBStore

            if self.deadline is None:
                # The store's own client and defaults (0.2 s connect, 0.3 s read, one retry),
                # as create_handler builds it.
                return DynamoDBStore(self.table, endpoint_url=self.address)
            from botocore.config import Config

            # moto's server applies one write at a time: under the fleet's load a write
            # waits its turn for longer than the 0.3 s read timeout meant for DynamoDB.
            # Both attempts fit in the deadline, as they do in the store's defaults.
            return DynamoDBStore(
                self.table,
                endpoint_url=self.address,
                boto_config=Config(read_timeout=self.deadline / 2),
            )
        if self.kind == "redis":
            from fleetbreaker import RedisStore

            # The store's defaults (0.2 s timeouts, the server's clock), as in Lambda.
            return RedisStore(url=self.address)
        if self.kind == "memory":
            return shared_store_proxy(self.address, self.authkey)
        raise ValueError(f"unknown store kind {self.kind!r}")


# --------------------------------------------------------------------------- memory, shared

_shared = MemoryStore()


def _shared_store() -> MemoryStore:
    return _shared


class SharedStoreManager(BaseManager):
    """Serves one MemoryStore to every container (``--store memory``): no server to install.

    Each operation is one request to the manager process, where MemoryStore applies the rules
    under its lock: as atomic as a conditional write, and nothing like a network store's
    latency. A quick look, not a benchmark.
    """


SharedStoreManager.register("shared_store", callable=_shared_store)

# One proxy of the shared store per manager (address, authkey), kept for the process's life.
# Every proxy of it carries the same id (the manager serves one object), and multiprocessing
# keeps one set of the ids a process holds proxies of: when any proxy of the store is freed,
# its finalizer drops that id, finds the set empty and closes the connection of the thread
# it runs on. A container serves runs one after another, and a finished run's proxy sits in
# reference cycles (its handler's, its breaker's) until the cyclic collector frees it, at
# whatever allocation comes next: in the middle of the next run's store call, on the same
# worker thread, that call then wrote to or read from a closed connection (TypeError from
# os.write or os.read on None: "store load failed", and the container ran on local state).
# With one proxy per process, no proxy of the store is ever freed while a container lives.
_proxies: dict[tuple[str, bytes], Store] = {}
_proxies_lock = threading.Lock()


def shared_store_proxy(address: str, authkey: bytes) -> Store:
    """This process's proxy of the shared MemoryStore served at ``address`` ("host:port")."""
    with _proxies_lock:
        proxy = _proxies.get((address, authkey))
        if proxy is None:
            host, _, port = address.rpartition(":")
            manager = SharedStoreManager(address=(host, int(port)), authkey=authkey)
            manager.connect()
            proxy = manager.shared_store()  # type: ignore[attr-defined]
            _proxies[(address, authkey)] = proxy
        return proxy


# --------------------------------------------------------------------------- watching


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and the errors it was raised from (a store's StoreError from redis's)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )


def is_timeout(error: BaseException) -> bool:
    """Whether ``error``, or an error it was raised from, is a timeout (:data:`TIMEOUTS`)."""
    kinds = tuple(
        kind
        for module, name in TIMEOUTS
        if isinstance(kind := getattr(sys.modules.get(module), name, None), type)
    )
    return any(isinstance(each, kinds) for each in _chain(error))


def error_name(error: BaseException) -> str:
    """How the report names an error: its class, and the class it was raised from if any."""
    name = type(error).__name__
    cause = error.__cause__
    return name if cause is None else f"{name} from {type(cause).__name__}"


class WatchedStore:
    """Passes every operation to ``inner`` and remembers what the answers told the breaker.

    ``seen`` is the breaker's state as this container last learned it from the store;
    ``claims`` the probe leases it won, each with the generation of the half-open window (a
    window is one generation of the record, so claims with the same generation shared one);
    ``gen`` the generation of the record last seen and ``opened_at`` (epoch seconds) when
    that record opened, None unless it is open: together they name one trip. ``faults`` and
    ``timeouts`` count what ``inner`` raised, by :func:`error_name`: a timeout is load, any
    other error a fault (a bug, a broken connection) that no deadline would have avoided.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        # A manager's proxy has no stats: then each operation counts as one request.
        inner_stats = getattr(inner, "stats", None)
        self._inner_stats = inner_stats if isinstance(inner_stats, StoreStats) else None
        self.stats = StoreStats()
        self.seen = State.CLOSED
        self.gen = 0
        self.opened_at: float | None = None
        self.claims: list[int] = []
        self._lock = threading.Lock()
        self._faults: Counter[str] = Counter()
        self._timeouts: Counter[str] = Counter()

    @property
    def requests(self) -> int:
        """Round trips to the store so far (the store's own count when it keeps one)."""
        stats = self._inner_stats or self.stats
        return stats.requests

    @property
    def faults(self) -> dict[str, int]:
        """Errors other than timeouts the inner store raised, by name: how many of each."""
        with self._lock:
            return dict(self._faults)

    @property
    def timeouts(self) -> dict[str, int]:
        """Timeouts the inner store raised, by name: how many of each."""
        with self._lock:
            return dict(self._timeouts)

    def _ask(self, job: Callable[[], T]) -> T:
        """``job()`` on the inner store, noting what it raised (then raising it on)."""
        try:
            return job()
        except Exception as error:
            with self._lock:
                (self._timeouts if is_timeout(error) else self._faults)[error_name(error)] += 1
            raise

    def prepare(self) -> None:
        """The inner store's one-off setup (a client), which the breaker runs off the clock."""
        prepare = getattr(self.inner, "prepare", None)
        if callable(prepare):
            self._ask(prepare)

    def _saw(self, record: Record | None) -> None:
        self.seen = record.state if record is not None else State.CLOSED
        self.gen = record.gen if record is not None else 0
        opened = record is not None and record.state is State.OPEN
        self.opened_at = record.opened_at / 1000 if opened and record is not None else None

    def _after(self, outcome: Outcome) -> Outcome:
        self._saw(outcome.record)
        return outcome

    def load(self, name: str, now_ms: int) -> Record | None:
        self.stats.count_read()
        record = self._ask(lambda: self.inner.load(name, now_ms))
        self._saw(record)
        return record

    def record_failure(
        self, name: str, policy: Policy, now_ms: int, observed: Record | None, weight: int = 1
    ) -> Outcome:
        self.stats.count_write()
        if weight == 1:  # the store contract's call, as the breaker makes it
            return self._after(
                self._ask(lambda: self.inner.record_failure(name, policy, now_ms, observed))
            )
        return self._after(
            self._ask(lambda: self.inner.record_failure(name, policy, now_ms, observed, weight))
        )

    def census(self, name: str, policy: Policy, now_ms: int, observed: Record | None) -> Outcome:
        self.stats.count_write()
        return self._after(self._ask(lambda: self.inner.census(name, policy, now_ms, observed)))

    def claim_probe(
        self, name: str, policy: Policy, now_ms: int, nonce: str, observed: Record | None
    ) -> Outcome:
        self.stats.count_write()
        outcome = self._ask(lambda: self.inner.claim_probe(name, policy, now_ms, nonce, observed))
        if outcome.token is not None and outcome.record is not None:
            with self._lock:
                self.claims.append(outcome.record.gen)
        return self._after(outcome)

    def settle_probe(
        self, name: str, policy: Policy, now_ms: int, report: ProbeReport, observed: Record | None
    ) -> Outcome:
        self.stats.count_write()
        return self._after(
            self._ask(lambda: self.inner.settle_probe(name, policy, now_ms, report, observed))
        )

    def report(
        self, name: str, policy: Policy, now_ms: int, report: Report, observed: Record | None
    ) -> Outcome:
        self.stats.count_write()
        return self._after(
            self._ask(lambda: self.inner.report(name, policy, now_ms, report, observed))
        )

    def force_state(self, name: str, policy: Policy, now_ms: int, target: State) -> Outcome:
        self.stats.count_write()
        return self._after(self._ask(lambda: self.inner.force_state(name, policy, now_ms, target)))

    def take_claims(self) -> list[int]:
        """The half-open generations of the leases won since the last call."""
        with self._lock:
            claims, self.claims = self.claims, []
        return claims
