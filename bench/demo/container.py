"""One simulated Lambda container: a process that serves payments with the real handler.

The process imports ``functions/payment/app.py`` the way Lambda does, then for each run builds
a fresh handler with ``create_handler`` (a new deployment, a cold container) around the run's
store, and invokes it with API Gateway (HTTP API v2) events from ``events/payment-ok.json``,
one request at a time like a Lambda container, at the run's rate, until told to stop.

Each call is reported to the demo process as a :class:`Call`: when it ran, the function's HTTP
status, whether it was a half-open probe, the breaker state the container saw and the store
requests it cost. Logs of the function go to a file, not to the demo's terminal.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from bench.demo.stores import StoreSpec, WatchedStore
from devtools.functions import load_function
from devtools.lambda_context import FakeLambdaContext

REPO_ROOT = Path(__file__).resolve().parents[2]
EVENT = REPO_ROOT / "events" / "payment-ok.json"
# Calls travel to the demo process in batches this often: the live display is per second.
BATCH_SECONDS = 0.2


class Call(NamedTuple):
    """One invocation of the payment handler in one container."""

    container: int
    start: float  # seconds since the run began
    end: float
    status: int  # the function's HTTP status: 200, 502, 503, 202
    seen: str  # the breaker's state as this container saw it after the call
    store_requests: int
    windows: tuple[int, ...]  # half-open generations of the probe leases this call won
    gen: int = 0  # the generation of the breaker record seen after the call
    opened: float | None = None  # when that record opened (run seconds); None unless open

    @property
    def probe(self) -> bool:
        return bool(self.windows)


@dataclass(frozen=True)
class RunSpec:
    """What one run asks of a container."""

    label: str
    env: dict[str, str]  # the function's environment (create_handler reads it)
    store: StoreSpec
    endpoint_url: str | None  # moto, for DynamoDB and SQS
    rate: float  # payments per second
    containers: int  # the fleet's size: containers spread their first calls over a period


@dataclass(frozen=True)
class ContainerReport:
    """What a container's breaker counted over one run."""

    container: int
    store_requests: int
    store_errors: int
    degradations: int
    would_rejects: int = 0  # shadow mode: calls the breaker let through but would have rejected
    # What the store raised, by error name (bench.demo.stores.error_name): how many of each.
    # A timeout is the machine's load; a fault is not, and no deadline would have avoided it.
    store_faults: dict[str, int] = field(default_factory=dict)
    store_timeouts: dict[str, int] = field(default_factory=dict)


def payment_event(template: dict[str, Any], key: str, now: float) -> dict[str, Any]:
    """The sample event with a payment of its own (a fresh idempotency key and request id)."""
    event = dict(template)
    event["body"] = json.dumps({"amount": 1250, "currency": "EUR", "idempotency_key": key})
    event["requestContext"] = {
        **template["requestContext"],
        "requestId": key,
        "timeEpoch": int(now * 1000),
    }
    return event


def container_main(
    number: int,
    parent_pid: int,
    env: dict[str, str],
    log_path: str,
    commands: Any,
    results: Any,
    go: Any,
    stop: Any,
    t0: Any,
) -> None:
    """Entry point of a container process (spawned by :class:`bench.demo.fleet.Fleet`)."""
    exit_with_parent(parent_pid)
    # Ctrl-C in a terminal reaches every process of the foreground group: the demo process
    # stops the containers itself, in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _redirect_output(log_path)
    try:
        # Lambda's environment, not the shell's: an AWS profile or endpoint from the shell
        # must not point a container anywhere but loopback.
        for key in [key for key in os.environ if key.startswith("AWS_")]:
            del os.environ[key]
        os.environ.update(env)
        module = load_function("payment")
        template = json.loads(EVENT.read_text())
        results.put(("started", number, None))
        while (spec := commands.get()) is not None:
            report = serve(number, spec, module, template, results, go, stop, t0)
            results.put(("done", number, report))
    except BaseException:
        results.put(("error", number, traceback.format_exc()))
        raise
    # Everything has been reported: skip the interpreter's slow teardown (boto3, Powertools),
    # which on a busy machine can take seconds across a fleet.
    results.close()
    results.join_thread()
    sys.stdout.flush()
    os._exit(0)


def serve(
    number: int,
    spec: RunSpec,
    module: ModuleType,
    template: dict[str, Any],
    results: Any,
    go: Any,
    stop: Any,
    t0: Any,
) -> ContainerReport:
    """One run: build the handler, wait for the start, take payments until told to stop."""
    store = WatchedStore(spec.store.build())
    handler = module.create_handler(spec.env, endpoint_url=spec.endpoint_url, store=store)
    context = FakeLambdaContext(log_stream_name=f"container-{number}")
    # A warm container: its client has connected and its breaker has read the record once,
    # so the first payments of the run do not pay for a cold start.
    handler.breaker.state  # noqa: B018
    warm_requests = store.requests
    results.put(("ready", number, None))
    go.wait()
    began = t0.value
    period = 1.0 / spec.rate
    # Containers spread over one period, so the fleet's requests arrive evenly.
    next_at = began + period * number / spec.containers
    batch: list[Call] = []
    sent = time.time()
    sequence = 0
    while not stop.is_set():
        if (delay := next_at - time.time()) > 0 and stop.wait(delay):
            break
        sequence += 1
        before = store.requests
        start = time.time()
        key = f"demo-{spec.label}-{number}-{sequence}"
        response = handler(payment_event(template, key, start), context)
        end = time.time()
        batch.append(
            Call(
                number,
                start - began,
                end - began,
                int(response["statusCode"]),
                store.seen.value,
                store.requests - before,
                tuple(store.take_claims()),
                store.gen,
                None if store.opened_at is None else store.opened_at - began,
            )
        )
        # One request at a time, like a Lambda container: a slow call delays the next one.
        next_at = max(next_at + period, end)
        if end - sent >= BATCH_SECONDS:
            results.put(("calls", number, batch))
            batch, sent = [], end
    results.put(("calls", number, batch))
    stats = handler.breaker.stats
    return ContainerReport(
        number,
        store.requests - warm_requests if spec.store.shared else 0,
        stats.store_errors,
        stats.degradations,
        stats.would_rejects,
        store.faults,
        store.timeouts,
    )


def exit_with_parent(parent_pid: int) -> None:
    """Have the kernel kill this process if the demo process dies (Linux), however it dies."""
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # it died before the line above took effect
        os._exit(1)


def _redirect_output(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
