"""The drain: the deferred-payments consumer charging, after recovery, what the fleet deferred.

With ``--fallback defer`` the containers answer 202 and queue payments in SQS (on moto) while
the circuit is open. A :class:`Drain` runs the real consumer (``functions/deferred_payments``,
built by ``create_consumer``: the API's charge, the API's breaker, Powertools idempotency on a
moto table) in a thread of the demo process, fed the way Lambda's event source mapping feeds it
(``devtools.sqs_event_source``), and paused the way the breaker-events function pauses the
mapping on the table's stream: ``breaker_events.wanted_in`` the breaker's state, read every
:data:`CHECK_SECONDS` (a compressed stand-in for the stream). The function's one-minute
schedule, which resumes consumers when nobody else probes, is played only where nobody else
does: in the per-container run the consumers' breaker is their own, so they resume when its
open window ends (``consumers_wanted``) and probe it themselves; in the shared run the fleet's
traffic probes, and the failing-call counts stay the fleet's. The provider's log then
tells how many deferred payments were charged, and whether any was charged twice.

The consumers run in a process of their own (:class:`DrainProcess`), like the containers: in
the demo process their threads would compete for its interpreter with the provider's server
and slow the fleet's calls down.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import queue
import signal
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from devtools.functions import load_function
from devtools.lambda_context import FakeLambdaContext
from devtools.sqs_event_source import SqsEventSource
from fleetbreaker import MemoryStore

if TYPE_CHECKING:
    from bench.demo.provider import Request
    from bench.demo.stores import StoreSpec
    from fleetbreaker.stores.base import Store

CHECK_SECONDS = 0.1
# Once the run's traffic has stopped, the drain gets this long to empty the queue. It stops
# as soon as the queue is empty; the bound only matters on a loaded machine, where 30 s
# left 36 of 156 deferred payments in the queue (load average 25 on 2 cores).
FINISH_SECONDS = 60.0
CONSUMERS = 2
IDEMPOTENCY_TABLE = "DeferredPaymentsIdempotency"


@dataclass(frozen=True)
class DrainFigures:
    """``queued`` deferred, ``charged`` of them after the recovery, ``twice`` charged twice."""

    queued: int
    charged: int
    twice: int
    left: int  # still in the queue when the drain stopped

    def line(self) -> str:
        return (
            f"deferred payments: {self.queued} queued, {self.charged} charged after recovery, "
            f"{self.twice} charged twice"
        )


@dataclass
class Worker:
    """One consumer container: its handler (and breaker) and its view of the queue."""

    consumer: Any
    source: SqsEventSource


@dataclass
class Drain:
    """One run's consumers, polling the run's queue in threads while their breaker allows."""

    workers: list[Worker]
    store: Store
    breaker: str
    began: float  # epoch seconds of the run's start
    resume_when_window_ends: bool = False  # the schedule's resume (nobody else probes)
    charged: list[tuple[float, str]] = field(default_factory=list)  # (run time, key)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Drain:
        for number, worker in enumerate(self.workers):
            thread = threading.Thread(
                target=self._loop, args=(worker,), name=f"drain-{number}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        return self

    def messages_left(self) -> int:
        return self.workers[0].source.messages_left()

    def finish(self, deadline_s: float = FINISH_SECONDS) -> None:
        """Let the drain empty the queue (bounded), then stop it."""
        until = time.time() + deadline_s
        while time.time() < until and self.messages_left():
            time.sleep(CHECK_SECONDS)
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _loop(self, worker: Worker) -> None:
        from breaker_events import consumers_wanted, wanted_in
        from fleetbreaker import State

        enabled = True
        while not self._stop.is_set():
            now_ms = time.time_ns() // 1_000_000
            try:
                record = self.store.load(self.breaker, now_ms)
                if self.resume_when_window_ends:
                    wanted = consumers_wanted(record, now_ms)
                else:
                    wanted = wanted_in(record.state if record is not None else State.CLOSED)
            except Exception:
                wanted = None  # the store hiccupped: leave the mapping as it is
            if wanted is not None:
                enabled = wanted
            if enabled:
                batch = worker.source.poll(worker.consumer, FakeLambdaContext())
                if batch is not None:
                    self._note(batch.response, batch.event)
                    if batch.failed:
                        # The demo's seconds are compressed: a failed message is visible again
                        # at once instead of after the queue's visibility timeout.
                        worker.source.expire_visibility()
                    continue
            self._stop.wait(CHECK_SECONDS)

    def _note(self, response: Mapping[str, Any], event: Mapping[str, Any]) -> None:
        import json

        failed = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
        now = time.time() - self.began
        with self._lock:
            for record in event["Records"]:
                if record["messageId"] not in failed:
                    self.charged.append((now, json.loads(record["body"])["idempotency_key"]))


def figures(
    charged: list[tuple[float, str]],
    left: int,
    deferred: int,
    recovered_at: float,
    requests: list[Request],
) -> DrainFigures:
    """The drain's line: from the consumers' deletions and the provider's own log."""
    after = {key for at, key in charged if at >= recovered_at}
    charges = Counter(request.key for request in requests if request.ok and request.key)
    return DrainFigures(
        queued=deferred,
        charged=len(after),
        twice=sum(1 for count in charges.values() if count > 1),
        left=left,
    )


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def make_idempotency_table(endpoint_url: str) -> str:
    """The consumer's idempotency table on moto, as the template declares it."""
    from devtools.servers import dynamodb_client

    client = dynamodb_client(endpoint_url)
    with contextlib.suppress(client.exceptions.ResourceInUseException):
        client.create_table(
            TableName=IDEMPOTENCY_TABLE,
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
    return IDEMPOTENCY_TABLE


def start_drain(
    env: Mapping[str, str],
    aws_env: Mapping[str, str],
    endpoint_url: str,
    store: Store,
    queue_url: str,
    began: float,
) -> Drain:
    """Build the consumers for a run (their environment is the payment function's); start them."""
    import boto3

    consumer_env = {
        **env,
        "IDEMPOTENCY_TABLE": make_idempotency_table(endpoint_url),
        # The consumer's logs would drown the demo's display.
        "POWERTOOLS_LOG_LEVEL": "ERROR",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }
    # Credentials and region for the consumers' clients: loopback only, never the shell's.
    os.environ.update(aws_env)
    with _environment(consumer_env):
        module = load_function("deferred_payments")
        importlib.import_module("breaker_events")
        # As the template's MaximumConcurrency: two consumer containers, each its own breaker
        # instance on the run's store.
        workers = [
            Worker(
                module.create_consumer(consumer_env, endpoint_url=endpoint_url, store=store),
                SqsEventSource(boto3.client("sqs", endpoint_url=endpoint_url), queue_url),
            )
            for _ in range(CONSUMERS)
        ]
    # A breaker of the consumers' own (per-container run) is probed by nobody else.
    alone = isinstance(store, MemoryStore)
    return Drain(workers, store, workers[0].consumer.breaker.name, began, alone).start()


def drain_main(
    parent_pid: int,
    spec: StoreSpec,
    env: dict[str, str],
    aws_env: dict[str, str],
    endpoint_url: str,
    queue_url: str,
    began: float,
    stop: Any,
    results: Any,
) -> None:
    """Entry point of the drain's process: drain until told to stop, then report the charges."""
    from bench.demo.container import exit_with_parent

    exit_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the demo process stops it, in order
    for key in [key for key in os.environ if key.startswith("AWS_")]:
        del os.environ[key]
    try:
        drain = start_drain(env, aws_env, endpoint_url, spec.build(), queue_url, began)
        results.put(("started", None))
        stop.wait()
        drain.finish()
        results.put(("done", (drain.charged, drain.messages_left())))
    except BaseException:
        results.put(("error", traceback.format_exc()))
        raise


class DrainProcess:
    """The run's drain in a child process: :meth:`finish` returns what it charged."""

    def __init__(
        self,
        spec: StoreSpec,
        env: Mapping[str, str],
        aws_env: Mapping[str, str],
        endpoint_url: str,
        queue_url: str,
        began: float,
    ) -> None:
        from bench.demo.fleet import CTX, START_TIMEOUT

        self._stop = CTX.Event()
        self._results = CTX.Queue()
        self._process = CTX.Process(
            target=drain_main,
            args=(
                os.getpid(),
                spec,
                dict(env),
                dict(aws_env),
                endpoint_url,
                queue_url,
                began,
                self._stop,
                self._results,
            ),
            name="drain",
            daemon=True,
        )
        self._process.start()
        self._expect("started", START_TIMEOUT)

    def finish(self) -> tuple[list[tuple[float, str]], int]:
        """Stop once the queue is drained (bounded): the charges (time, key), and what is left."""
        self._stop.set()
        charged, left = self._expect("done", FINISH_SECONDS + 30)
        self._process.join(timeout=10)
        return charged, left

    def kill(self) -> None:
        if self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=5)

    def _expect(self, kind: str, timeout: float) -> Any:
        try:
            got, value = self._results.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise RuntimeError(f"the drain did not answer within {timeout:g} s") from None
        if got != kind:
            self.kill()
            raise RuntimeError(f"the drain failed:\n{value}")
        return value
