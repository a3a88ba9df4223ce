"""A simulated fleet: worker processes ("containers") × threads sharing one breaker per process.

Everything a worker needs crosses the process boundary as plain data (a store spec) or as
multiprocessing primitives; the clock is a shared integer the test moves, so no worker ever
sleeps to make time pass.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from dataclasses import dataclass
from typing import Any

from fleetbreaker import BreakerConfig, CircuitBreaker, CircuitOpenError
from tests.support import RecordingListener

# Each container is a fresh process, forked from a server process that imported what a
# container runs (and built one DynamoDB client, so botocore's models are loaded): no
# interpreter start and no imports per container. The server is started once per test
# process, single-threaded, so no fork copies a lock another thread held.
CTX = multiprocessing.get_context("forkserver")
CTX.set_forkserver_preload(["tests.concurrency.warm"])


@dataclass(frozen=True)
class StoreSpec:
    """How a worker builds its own client to the shared store."""

    kind: str  # "dynamodb" or "redis"
    address: str  # endpoint URL or redis URL
    table: str = ""

    def build(self) -> Any:
        if self.kind == "dynamodb":
            from devtools.servers import dynamodb_client
            from fleetbreaker import DynamoDBStore

            return DynamoDBStore(self.table, boto3_client=dynamodb_client(self.address))
        if self.kind == "redis":
            from fleetbreaker.stores.redis import RedisStore

            return RedisStore(url=self.address, use_server_time=False)
        raise ValueError(self.kind)


def _worker(
    spec: StoreSpec,
    name: str,
    config: dict[str, Any],
    mode: str,
    threads: int,
    clock: Any,
    ready: Any,
    dependency_calls: Any,
    rejected: Any,
    everyone: int,
    results: Any,
) -> None:
    budget = config.get("half_open_max_probes", 1)
    heard = RecordingListener()
    breaker = CircuitBreaker(
        name,
        store=spec.build(),
        config=BreakerConfig(**config),
        listeners=[heard],
        clock=lambda: int(clock.value),
    )
    decisions: list[str] = []
    lock = threading.Lock()

    def failing_dependency() -> None:
        with dependency_calls.get_lock():
            dependency_calls.value += 1
        raise ConnectionError("dependency down")

    def run() -> None:
        ready.wait(60)  # every thread of every process starts together
        if mode == "trip":
            for _ in range(1000):
                try:
                    breaker.call(failing_dependency)
                except ConnectionError:
                    continue
                except CircuitOpenError:
                    break
        else:
            # Every thread calls once. An admitted probe holds its lease until every other
            # thread of the fleet has been turned away, so a quick recovery cannot let late
            # arrivals in as "closed" and blur the count.
            def probe() -> None:
                with dependency_calls.get_lock():
                    dependency_calls.value += 1
                deadline = time.monotonic() + 60
                while rejected.value < everyone - budget and time.monotonic() < deadline:
                    time.sleep(0.005)

            try:
                breaker.call(probe)
                outcome = "probe"
            except CircuitOpenError:
                with rejected.get_lock():
                    rejected.value += 1
                outcome = "reject"
            with lock:
                decisions.append(outcome)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    transitions = [
        (change.before.value, change.after.value)
        for change in heard.values("on_state_change", "change")
    ]
    results.put({"transitions": transitions, "decisions": decisions})


@dataclass
class FleetResult:
    transitions: list[tuple[str, str]]
    decisions: list[str]
    dependency_calls: int


class Fleet:
    """Runs rounds of N processes × T threads against one breaker name."""

    def __init__(self, spec: StoreSpec, name: str, config: dict[str, Any], start_ms: int) -> None:
        self.spec = spec
        self.name = name
        self.config = config
        self.clock = CTX.Value("q", start_ms)

    def advance(self, seconds: float) -> None:
        with self.clock.get_lock():
            self.clock.value += round(seconds * 1000)

    def run(self, mode: str, processes: int = 8, threads: int = 8) -> FleetResult:
        ready = CTX.Barrier(processes * threads)
        calls = CTX.Value("i", 0)
        rejected = CTX.Value("i", 0)
        results = CTX.Queue()
        procs = [
            CTX.Process(
                target=_worker,
                args=(
                    self.spec,
                    self.name,
                    self.config,
                    mode,
                    threads,
                    self.clock,
                    ready,
                    calls,
                    rejected,
                    processes * threads,
                    results,
                ),
            )
            for _ in range(processes)
        ]
        for proc in procs:
            proc.start()
        collected = [results.get(timeout=120) for _ in procs]
        for proc in procs:
            proc.join(30)
            assert proc.exitcode == 0, f"worker exited with {proc.exitcode}"
        return FleetResult(
            transitions=[t for r in collected for t in r["transitions"]],
            decisions=[d for r in collected for d in r["decisions"]],
            dependency_calls=calls.value,
        )
