"""The fleet side of bench/fleet_vs_powertools.py: contenders, containers and a process pool.

One spawned worker process stands for one warm Lambda container. It keeps its own boto3
clients (one per contender, so their round trips are counted apart) and builds a fresh breaker
instance of either contender for every phase, under a breaker name no other phase uses.

The parent drives phases in two steps: every worker *prepares* (builds its breaker, warms its
cache) and reports ready; then the parent sends *go* with a wall-clock start time (and, for the
half-open race, the moment half-open begins), and every worker's threads start together. The
dependency calls of the whole fleet are counted in a shared multiprocessing counter.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CTX = multiprocessing.get_context("spawn")

FLEET = "fleetbreaker"
POWERTOOLS = "powertools"
KINDS = (FLEET, POWERTOOLS)

# The Powertools DynamoDB persistence's default partition key ("id", S).
POWERTOOLS_KEY = "id"

READ_OPS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"})
WRITE_OPS = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
)

# A rejected caller calls again after this long: ~200 calls/s per thread, a hard stream of
# requests that still leaves the 2 cores to the store and to the callers that were admitted.
REJECTED_PAUSE = 0.005


# --------------------------------------------------------------------------- configuration


STORE_DEADLINE_S = 10.0


@dataclass(frozen=True)
class Thresholds:
    """One set of numbers, given to both contenders in their own vocabulary.

    Whole seconds, because Powertools accepts only integers for its timeouts and cache age.
    """

    failure_threshold: int = 5
    recovery_timeout: int = 30
    cache_ttl: int = 1  # fleetbreaker cache_ttl = Powertools local_cache_max_age
    probe_budget: int = 1  # fleetbreaker half_open_max_probes; Powertools always elects one
    probe_successes: int = 1  # half_open_successes = Powertools success_threshold

    def fleetbreaker(self) -> Any:
        from fleetbreaker import BreakerConfig

        return BreakerConfig(
            failure_threshold=self.failure_threshold,
            recovery_timeout=float(self.recovery_timeout),
            cache_ttl=float(self.cache_ttl),
            half_open_max_probes=self.probe_budget,
            half_open_successes=self.probe_successes,
            # moto's server runs one write at a time: 64 racing writers queue past the 1 s
            # default (real DynamoDB answers them in milliseconds), and a container would
            # go local. Powertools waits as long as it takes; so does fleetbreaker here.
            store_deadline_seconds=STORE_DEADLINE_S,
        )

    def powertools(self) -> Any:
        from aws_lambda_powertools.utilities.circuit_breaker import CircuitBreakerConfig

        return CircuitBreakerConfig(
            failure_threshold=self.failure_threshold,
            recovery_timeout=self.recovery_timeout,
            success_threshold=self.probe_successes,
            local_cache_max_age=self.cache_ttl,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "failure_threshold": self.failure_threshold,
            "recovery_timeout_s": self.recovery_timeout,
            "cache_ttl_s": self.cache_ttl,
            "probe_budget": self.probe_budget,
            "probe_successes": self.probe_successes,
        }


@dataclass(frozen=True)
class Endpoint:
    """The one moto server both contenders use, and each contender's table on it."""

    url: str
    fleet_table: str
    powertools_table: str


def make_powertools_table(url: str, name: str = "bench-powertools-circuits") -> str:
    """The table Powertools' DynamoDB persistence expects: partition key ``id`` (S)."""
    from devtools.servers import dynamodb_client

    client = dynamodb_client(url)
    client.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": POWERTOOLS_KEY, "AttributeType": "S"}],
        KeySchema=[{"AttributeName": POWERTOOLS_KEY, "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.get_waiter("table_exists").wait(
        TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 20}
    )
    return name


# --------------------------------------------------------------------------- counting


class RequestCounter:
    """DynamoDB API calls made through one boto3 client, by operation (botocore hook).

    ``before-call`` fires once per API call (retries of one call are not counted again),
    which is what fleetbreaker's ``store.stats`` counts too.
    """

    def __init__(self, client: Any) -> None:
        self._lock = threading.Lock()
        self._by_op: dict[str, int] = {}
        client.meta.events.register("before-call.dynamodb.*", self._count)

    def _count(self, model: Any = None, **_: Any) -> None:
        name = getattr(model, "name", "?")
        with self._lock:
            self._by_op[name] = self._by_op.get(name, 0) + 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._by_op)


def requests_between(before: dict[str, int], after: dict[str, int]) -> dict[str, Any]:
    """Reads, writes and per-operation counts between two snapshots of a RequestCounter."""
    ops = {op: after[op] - before.get(op, 0) for op in after if after[op] != before.get(op, 0)}
    return {
        "reads": sum(n for op, n in ops.items() if op in READ_OPS),
        "writes": sum(n for op, n in ops.items() if op in WRITE_OPS),
        "by_op": ops,
    }


# --------------------------------------------------------------------------- contenders


@dataclass
class Guard:
    """One contender's breaker wrapped around one function, in one container.

    ``requests()`` is the contender's own count of store round trips: ``store.stats`` for
    fleetbreaker, the botocore hook on its client for Powertools (which keeps no count).
    ``client_requests()`` is the botocore hook for both, as a cross-check.
    """

    kind: str
    call: Callable[[], Any]
    open_error: type[BaseException]
    requests: Callable[[], dict[str, int]]
    client_requests: Callable[[], dict[str, int]]
    warm: Callable[[], None]
    breaker: Any = None

    def degradations(self) -> int:
        return int(self.breaker.stats.degradations) if self.breaker is not None else 0


class Container:
    """What one warm Lambda container keeps between invocations: clients and persistence."""

    def __init__(self, endpoint: Endpoint) -> None:
        from aws_lambda_powertools.utilities.circuit_breaker.persistence import (
            CircuitBreakerDynamoDBPersistence,
        )

        from devtools.servers import dynamodb_client

        self.endpoint = endpoint
        # The same client settings for both contenders (devtools/servers.py: 2 s connect,
        # 10 s read, standard retries), so neither is judged on its client configuration.
        self.fleet_client = dynamodb_client(endpoint.url)
        self.powertools_client = dynamodb_client(endpoint.url)
        self.fleet_counter = RequestCounter(self.fleet_client)
        self.powertools_counter = RequestCounter(self.powertools_client)
        # Powertools shares one persistence object per container (its cache lives there).
        self.persistence = CircuitBreakerDynamoDBPersistence(
            table_name=endpoint.powertools_table, boto3_client=self.powertools_client
        )

    def warm_connections(self) -> None:
        """One request per client, so no measured call pays for a TCP connection."""
        self.fleet_client.get_item(
            TableName=self.endpoint.fleet_table, Key={"name": {"S": "bench-warmup"}}
        )
        self.powertools_client.get_item(
            TableName=self.endpoint.powertools_table,
            Key={POWERTOOLS_KEY: {"S": "bench-warmup"}},
        )

    def guard(
        self,
        kind: str,
        name: str,
        thresholds: Thresholds,
        fn: Callable[[], Any],
        config: Any = None,
        listeners: Any = None,
    ) -> Guard:
        """A contender's breaker around ``fn``; ``config`` overrides fleetbreaker's config,
        ``listeners`` its listeners (default: its LoggingListener)."""
        if kind == FLEET:
            return self._fleet_guard(name, thresholds, fn, config, listeners)
        if kind == POWERTOOLS:
            return self._powertools_guard(name, thresholds, fn)
        raise ValueError(kind)

    def _fleet_guard(
        self,
        name: str,
        thresholds: Thresholds,
        fn: Callable[[], Any],
        config: Any = None,
        listeners: Any = None,
    ) -> Guard:
        from fleetbreaker import CircuitBreaker, CircuitOpenError, DynamoDBStore

        store = DynamoDBStore(self.endpoint.fleet_table, boto3_client=self.fleet_client)
        breaker = CircuitBreaker(
            name, store=store, config=config or thresholds.fleetbreaker(), listeners=listeners
        )

        def warm() -> None:
            breaker.state  # noqa: B018  one load, then cached for cache_ttl

        return Guard(
            kind=FLEET,
            call=breaker(fn),
            open_error=CircuitOpenError,
            requests=lambda: {"reads": store.stats.reads, "writes": store.stats.writes},
            client_requests=self.fleet_counter.snapshot,
            warm=warm,
            breaker=breaker,
        )

    def _powertools_guard(self, name: str, thresholds: Thresholds, fn: Callable[[], Any]) -> Guard:
        from aws_lambda_powertools.utilities.circuit_breaker import (
            CircuitBreakerOpenError,
            circuit_breaker,
        )

        config = thresholds.powertools()
        persistence = self.persistence
        counter = self.powertools_counter

        def requests() -> dict[str, int]:
            counts = requests_between({}, counter.snapshot())
            return {"reads": counts["reads"], "writes": counts["writes"]}

        def warm() -> None:
            # What the decorator does first on every call: bind the config, read the state.
            persistence.configure(config=config, circuit_name=name)
            persistence.get_state(name)

        return Guard(
            kind=POWERTOOLS,
            call=circuit_breaker(name=name, persistence_store=persistence, config=config)(fn),
            open_error=CircuitBreakerOpenError,
            requests=requests,
            client_requests=counter.snapshot,
            warm=warm,
        )

    def half_open_at(self, kind: str, name: str, thresholds: Thresholds) -> float:
        """Epoch seconds at which a tripped breaker's open window ends (half-open begins)."""
        if kind == FLEET:
            from fleetbreaker import DynamoDBStore

            store = DynamoDBStore(self.endpoint.fleet_table, boto3_client=self.fleet_client)
            record = store.load(name, time.time_ns() // 1_000_000)
            if record is None or record.state.value != "open":
                raise RuntimeError(f"fleetbreaker {name!r} did not open: {record!r}")
            return float(record.open_until) / 1000
        item = self.powertools_client.get_item(
            TableName=self.endpoint.powertools_table,
            Key={POWERTOOLS_KEY: {"S": name}},
            ConsistentRead=True,
        ).get("Item")
        if not item or item.get("state", {}).get("S") != "OPEN":
            raise RuntimeError(f"Powertools {name!r} did not open: {item!r}")
        # Powertools probes once int(now) >= opened_at + recovery_timeout (whole seconds).
        return float(int(item["opened_at"]["N"]) + thresholds.recovery_timeout)


def trip(container: Container, kind: str, name: str, thresholds: Thresholds) -> int:
    """Open a breaker from one container: `failure_threshold` failing calls through it."""
    guard = container.guard(kind, name, thresholds, _fail)
    for _ in range(thresholds.failure_threshold):
        with contextlib.suppress(DependencyDown):
            guard.call()
    return guard.degradations()


class DependencyDown(ConnectionError):
    """What the failing dependency raises."""


def _fail() -> None:
    raise DependencyDown("dependency down")


def noop() -> None:
    """The healthy dependency: does nothing."""


def sleep_until(when: float) -> None:
    while (left := when - time.time()) > 0:
        time.sleep(min(left, 0.05))


# --------------------------------------------------------------------------- phases


@dataclass
class WorkerContext:
    wid: int
    container: Container
    commands: Any
    results: Any
    dependency_calls: Any
    rejecting: Any

    def count_dependency_call(self) -> None:
        with self.dependency_calls.get_lock():
            self.dependency_calls.value += 1

    def ready_then_go(self) -> dict[str, Any]:
        self.results.put(("ready", self.wid, None))
        go: dict[str, Any] = self.commands.get(timeout=120)
        return go


def _run_threads(count: int, target: Callable[[int], None]) -> None:
    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def phase_trip(ctx: WorkerContext, cmd: dict[str, Any]) -> dict[str, Any]:
    """(b) Every thread calls a failing dependency back to back until every thread of the
    fleet has been rejected at least once; rejected threads keep calling (every
    REJECTED_PAUSE) until then, so a re-admission would be seen."""
    thresholds: Thresholds = cmd["thresholds"]
    fleet_threads = cmd["workers"] * cmd["threads"]
    lock = threading.Lock()
    calls = [0]

    def failing() -> None:
        ctx.count_dependency_call()
        with lock:
            calls[0] += 1
        raise DependencyDown("dependency down")

    guard = ctx.container.guard(cmd["kind"], cmd["name"], thresholds, failing)
    go = ctx.ready_then_go()
    # A healthy, warm container: the breaker's closed state is freshly cached when the
    # outage starts. The parent puts warm_at just after a whole second, so Powertools'
    # cache (it expires on whole seconds) stays fresh as long as fleetbreaker's does.
    sleep_until(go["warm_at"])
    guard.warm()
    before, client_before = guard.requests(), guard.client_requests()
    start, deadline = go["start_at"], go["start_at"] + cmd["max_seconds"]
    first_reject: list[float] = []
    admitted_after_reject = [0]

    def run(_: int) -> None:
        rejected = False
        sleep_until(start)
        while ctx.rejecting.value < fleet_threads and time.time() < deadline:
            try:
                guard.call()
            except DependencyDown:
                if rejected:
                    with lock:
                        admitted_after_reject[0] += 1
            except guard.open_error:
                if not rejected:
                    rejected = True
                    with lock:
                        first_reject.append(time.time() - start)
                    with ctx.rejecting.get_lock():
                        ctx.rejecting.value += 1
            if rejected:
                time.sleep(REJECTED_PAUSE)

    _run_threads(cmd["threads"], run)
    after = guard.requests()
    return {
        "dependency_calls": calls[0],
        "admitted_after_first_reject": admitted_after_reject[0],
        "first_reject_s": sorted(first_reject),
        "store": {k: after[k] - before[k] for k in ("reads", "writes")},
        "client": requests_between(client_before, guard.client_requests()),
        "degradations": guard.degradations(),
    }


def phase_race(ctx: WorkerContext, cmd: dict[str, Any]) -> dict[str, Any]:
    """(c) The breaker is open; every thread calls it (again REJECTED_PAUSE after each
    rejection) until `race_seconds` into half-open. An admitted call blocks until the race
    is over, then succeeds: whoever got in is still probing while the others race."""
    thresholds: Thresholds = cmd["thresholds"]
    lock = threading.Lock()
    entries: list[float] = []
    race_end = [0.0]

    def probe_dependency() -> str:
        entered = time.time()
        ctx.count_dependency_call()
        with lock:
            entries.append(entered)
        sleep_until(race_end[0] + 0.05)  # a slow, recovering dependency
        return "ok"

    guard = ctx.container.guard(cmd["kind"], cmd["name"], thresholds, probe_dependency)
    before, client_before = guard.requests(), guard.client_requests()
    go = ctx.ready_then_go()
    race_end[0] = go["half_open_at"] + cmd["race_seconds"]
    rejections = [0]

    def run(_: int) -> None:
        while time.time() < race_end[0]:
            try:
                guard.call()
            except guard.open_error:
                with lock:
                    rejections[0] += 1
                time.sleep(REJECTED_PAUSE)

    _run_threads(cmd["threads"], run)
    after = guard.requests()
    return {
        "entries": entries,
        "rejections": rejections[0],
        "store": {k: after[k] - before[k] for k in ("reads", "writes")},
        "client": requests_between(client_before, guard.client_requests()),
        "degradations": guard.degradations(),
    }


def phase_healthy(ctx: WorkerContext, cmd: dict[str, Any]) -> dict[str, Any]:
    """(d) `calls` healthy calls spread evenly over `seconds` from a cold breaker instance,
    shared round-robin by `threads` threads (call i goes to thread i % threads)."""
    guard = ctx.container.guard(cmd["kind"], cmd["name"], cmd["thresholds"], noop)
    before, client_before = guard.requests(), guard.client_requests()
    go = ctx.ready_then_go()
    start, calls, seconds, threads = go["start_at"], cmd["calls"], cmd["seconds"], cmd["threads"]
    lock = threading.Lock()
    stamps: list[float] = []

    def run(k: int) -> None:
        mine: list[float] = []
        for i in range(k, calls, threads):
            sleep_until(start + i * seconds / calls)
            mine.append(time.time())
            guard.call()
        with lock:
            stamps.extend(mine)

    _run_threads(threads, run)
    after = guard.requests()
    return {
        "calls": calls,
        "span_s": max(stamps) - min(stamps),
        "store": {k: after[k] - before[k] for k in ("reads", "writes")},
        "client": requests_between(client_before, guard.client_requests()),
        "degradations": guard.degradations(),
    }


PHASES: dict[str, Callable[[WorkerContext, dict[str, Any]], dict[str, Any]]] = {
    "trip": phase_trip,
    "race": phase_race,
    "healthy": phase_healthy,
}


# --------------------------------------------------------------------------- processes


def _die_with_parent() -> None:
    """Linux: have the kernel kill this worker if the benchmark process dies."""
    if sys.platform != "linux":
        return
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def worker_main(
    wid: int,
    endpoint: Endpoint,
    commands: Any,
    results: Any,
    dependency_calls: Any,
    rejecting: Any,
) -> None:
    """A worker process: build the container, then run phases until told to stop (None)."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        container = Container(endpoint)
        container.warm_connections()
    except Exception:
        results.put(("error", wid, traceback.format_exc()))
        return
    ctx = WorkerContext(wid, container, commands, results, dependency_calls, rejecting)
    results.put(("up", wid, os.getpid()))
    while True:
        cmd = commands.get()
        if cmd is None:
            return
        try:
            payload = PHASES[cmd["phase"]](ctx, cmd)
        except Exception:
            results.put(("error", wid, traceback.format_exc()))
        else:
            results.put(("done", wid, payload))


class WorkerError(RuntimeError):
    """A worker failed or did not answer in time."""


class Pool:
    """`size` long-lived worker processes (spawn context); a phase uses the first N of them."""

    def __init__(self, size: int, endpoint: Endpoint) -> None:
        self.size = size
        self.dependency_calls = CTX.Value("i", 0)
        self.rejecting = CTX.Value("i", 0)
        self.results = CTX.Queue()
        self.commands = [CTX.Queue() for _ in range(size)]
        self.procs = [
            CTX.Process(
                target=worker_main,
                args=(
                    wid,
                    endpoint,
                    self.commands[wid],
                    self.results,
                    self.dependency_calls,
                    self.rejecting,
                ),
                name=f"bench-container-{wid}",
                daemon=True,
            )
            for wid in range(size)
        ]

    def start(self, timeout: float = 120.0) -> None:
        for proc in self.procs:
            proc.start()
        self._collect("up", range(self.size), timeout)

    def _collect(self, kind: str, wids: range, timeout: float) -> dict[int, Any]:
        got: dict[int, Any] = {}
        deadline = time.monotonic() + timeout
        while len(got) < len(wids):
            left = deadline - time.monotonic()
            try:
                tag, wid, payload = self.results.get(timeout=max(left, 0.01))
            except queue.Empty:
                missing = sorted(set(wids) - set(got))
                raise WorkerError(
                    f"workers {missing} sent no {kind!r} in {timeout:.0f} s"
                ) from None
            if tag == "error":
                raise WorkerError(f"worker {wid} failed:\n{payload}")
            if tag != kind:
                raise WorkerError(f"worker {wid} sent {tag!r} while {kind!r} was expected")
            got[wid] = payload
        return got

    def run(
        self,
        cmd: dict[str, Any],
        workers: int,
        go: Callable[[], dict[str, Any]],
        timeout: float = 120.0,
    ) -> list[dict[str, Any]]:
        """Prepare `workers` workers, then send each the `go` message; their payloads."""
        if workers > self.size:
            raise ValueError(f"pool has {self.size} workers, phase wants {workers}")
        with self.dependency_calls.get_lock():
            self.dependency_calls.value = 0
        with self.rejecting.get_lock():
            self.rejecting.value = 0
        wids = range(workers)
        for wid in wids:
            self.commands[wid].put(cmd)
        self._collect("ready", wids, timeout)
        message = go()
        for wid in wids:
            self.commands[wid].put(message)
        done = self._collect("done", wids, timeout)
        return [done[wid] for wid in wids]

    def close(self) -> None:
        """Stop every worker: ask, then terminate, then kill (by PID)."""
        for wid, proc in enumerate(self.procs):
            if proc.is_alive():
                with contextlib.suppress(Exception):
                    self.commands[wid].put_nowait(None)
        deadline = time.monotonic() + 3.0
        for proc in self.procs:
            if proc.pid is not None:
                proc.join(max(deadline - time.monotonic(), 0.01))
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self.procs:
            if proc.pid is not None:
                proc.join(2.0)
            if proc.is_alive():
                proc.kill()
                proc.join(2.0)
        for q in [self.results, *self.commands]:
            q.close()
            q.cancel_join_thread()
