"""Runs the demo: local servers, the container fleet, both runs, the report.

Everything started here is stopped here, in reverse order, whether the demo ends, fails or is
interrupted (Ctrl-C or SIGTERM become KeyboardInterrupt in ``__main__``).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.demo import report, results
from bench.demo.container import RunSpec, exit_with_parent
from bench.demo.drain import DrainProcess
from bench.demo.drain import figures as drain_figures
from bench.demo.fleet import CTX, Fleet, sigint_blocked
from bench.demo.progress import Progress
from bench.demo.provider import DRAIN_PATH, Outage, ScheduledPaymentApi
from bench.demo.scenario import FUNCTION_STORE_DEADLINE, STORE_LABELS, STORE_NAMES
from bench.demo.stores import PER_CONTAINER, SharedStoreManager, StoreSpec
from bench.demo.summary import DEFERRED, RunRecord, fleet_closed_at, summarize

if TYPE_CHECKING:
    from typing import TextIO

    from bench.demo.container import Call
    from bench.demo.scenario import Options

TABLE = "CircuitBreakers"
BREAKER = "payment-api"
REGION = "us-east-1"
SHARED = "shared"
SHARED_COUNT = "shared-count"
SHADOW = "shadow"
RUNS = (SHARED, PER_CONTAINER, SHARED_COUNT, SHADOW)


@dataclass(frozen=True)
class Plan:
    """One run of the demo: where its breakers keep their state and under which policy."""

    label: str
    shared: bool
    policy: str
    mode: str = "enforce"

    @property
    def breaker(self) -> str:
        # Runs that share a store must not share a record.
        return BREAKER if self.label == SHARED else f"{BREAKER}-{self.label}"


def plans(options: Options) -> list[Plan]:
    """The two runs the demo compares.

    Under the count policy: the shared breaker against per-container breakers (what sharing
    the state buys). Under the rate policy: the shared rate breaker against the shared count
    breaker on the same traffic and noise (what the rate buys; both share their state). With
    ``--mode shadow``: the shared breaker against the same shared breaker in shadow mode,
    which lets every call through and counts the ones it would have rejected.
    """
    if options.mode == "shadow":
        return [Plan(SHARED, True, options.policy), Plan(SHADOW, True, options.policy, "shadow")]
    if options.policy == "rate":
        return [Plan(SHARED, True, "rate"), Plan(SHARED_COUNT, True, "count")]
    return [Plan(SHARED, True, "count"), Plan(PER_CONTAINER, False, "count")]


# A port nothing listens on: the endpoint of AWS services the demo does not run.
NOWHERE = "http://127.0.0.1:9"


# The demo's exit status when a guarantee did not hold (`python -m bench.demo`).
FAILED = 1


def exit_code(checks: list[tuple[bool | None, str]]) -> int:
    """0 when every guarantee held (a finding, None, is none), else FAILED."""
    return 0 if all(held is not False for held, _ in checks) else FAILED


@dataclass(frozen=True)
class DemoResult:
    """What a finished demo produced."""

    runs: list[report.Run]
    chart: Path
    markdown: Path
    checks: list[tuple[bool | None, str]]  # None: a finding stated, not a guarantee
    seconds: float
    results: Path  # fleet-demo.json: the comparison, machine-readable

    @property
    def guarantees_held(self) -> bool:
        return self.exit_code == 0

    @property
    def exit_code(self) -> int:
        return exit_code(self.checks)


class DeferredQueues:
    """One SQS queue (on moto) per run for the payments the fallback defers.

    One per run because moto's SendMessage slows down as a queue grows (it is linear in the
    queue's length): a queue shared by both runs would slow the second run's containers.
    """

    def __init__(self, endpoint_url: str) -> None:
        import boto3

        self.sqs = boto3.client(
            "sqs",
            endpoint_url=endpoint_url,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        self.urls = {
            label: self.sqs.create_queue(QueueName=f"deferred-payments-{label}")["QueueUrl"]
            for label in RUNS
        }

    def count(self, label: str) -> int:
        """Payments in the run's queue."""
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.urls[label], AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"])


@dataclass(frozen=True)
class Backends:
    """The local services both runs use."""

    api: ScheduledPaymentApi
    shared_store: StoreSpec
    endpoint_url: str | None  # moto: DynamoDB and SQS
    queues: DeferredQueues | None  # with --fallback defer


def local_aws_environment() -> dict[str, str]:
    """Dummy credentials and a region: nothing in a container can reach, or wait for, AWS."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


@contextlib.contextmanager
def backends(options: Options, out: TextIO) -> Iterator[Backends]:
    """Start the payment API and the shared store (and moto when needed); stop them after."""
    from devtools.servers import MotoServer, RedisServer, make_table

    with contextlib.ExitStack() as stack:
        api = stack.enter_context(ScheduledPaymentApi())
        endpoint = None
        if options.needs_moto:
            moto = MotoServer()
            stack.enter_context(moto)
            endpoint = moto.endpoint_url
            say(out, f"moto server (DynamoDB, SQS) at {endpoint}, pid {moto.pid}")
        if options.store == "dynamodb":
            assert endpoint is not None
            shared = StoreSpec(
                "dynamodb",
                endpoint,
                make_table(endpoint, TABLE),
                deadline=options.deadline if options.deadline > FUNCTION_STORE_DEADLINE else None,
            )
        elif options.store == "redis":
            redis = RedisServer()
            stack.enter_context(redis)
            say(out, f"redis-server at {redis.url}, pid {redis.pid}")
            shared = StoreSpec("redis", redis.url)
        else:
            authkey = os.urandom(16)
            manager = SharedStoreManager(address=("127.0.0.1", 0), authkey=authkey, ctx=CTX)
            with sigint_blocked():
                manager.start(exit_with_parent, (os.getpid(),))
            stack.callback(manager.shutdown)
            address = manager.address
            assert isinstance(address, tuple)
            host, port = address
            shared = StoreSpec("memory", f"{host}:{port}", authkey=authkey)
            say(out, f"shared MemoryStore in a manager process at {host}:{port}")
        queues = None
        if options.fallback == "defer":
            assert endpoint is not None
            queues = DeferredQueues(endpoint)
        say(out, f"payment API at {api.url}")
        yield Backends(api, shared, endpoint, queues)


def say(out: TextIO, line: str) -> None:
    print(line, file=out, flush=True)


def function_env(options: Options, found: Backends, plan: Plan | None = None) -> dict[str, str]:
    """The payment function's environment in run ``plan``, as the SAM template sets it."""
    plan = plan or plans(options)[0]
    env = {
        "CIRCUIT_BREAKER_TABLE": TABLE,
        "PAYMENT_API_URL": found.api.url,
        "BREAKER_NAME": plan.breaker,
        **options.function_env(plan.policy),
        "BREAKER_MODE": plan.mode,
    }
    if found.queues is not None:
        env["DEFERRED_PAYMENTS_QUEUE_URL"] = found.queues.urls[plan.label]
    return env


def process_env(options: Options, found: Backends) -> dict[str, str]:
    """A container's process environment: what Lambda would give it, pointed at loopback."""
    endpoint = found.endpoint_url or NOWHERE
    return {
        **local_aws_environment(),
        **function_env(options, found),
        "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
        "AWS_ENDPOINT_URL_SQS": endpoint,
        "POWERTOOLS_SERVICE_NAME": "payment",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }


def run_once(
    options: Options,
    fleet: Fleet,
    found: Backends,
    plan: Plan,
    out: TextIO,
) -> RunRecord:
    """One run of the scenario, with the live display."""
    shared = plan.shared
    store = found.shared_store if shared else StoreSpec(PER_CONTAINER)
    # The policy is named when the runs differ in it (--policy rate).
    named = f"{plan.policy} " if options.policy == "rate" else ""
    title = (
        f"shared {named}breaker ({STORE_NAMES[options.store]})"
        if shared
        else f"per-container {named}breakers"
    )
    if plan.mode == "shadow":
        title = f"shadow {named}breaker ({STORE_NAMES[options.store]})"
    down, back = options.healthy, options.healthy + options.outage
    where = STORE_LABELS[options.store] if shared else "a MemoryStore in each container"
    where += f", {options.policy_words(plan.policy)}"
    record = RunRecord(
        label=plan.label,
        title=title,
        store=where,
        shared=shared,
        containers=options.containers,
        policy=plan.policy,
        outage=(down, back),
    )
    spec = RunSpec(
        label=record.label,
        env=function_env(options, found, plan),
        store=store,
        endpoint_url=found.endpoint_url,
        rate=options.rate,
        containers=options.containers,
    )
    api = found.api
    progress = Progress(out, record)
    fleet.prepare(spec)
    # Before the start time is taken: a new process takes a while to import the consumer.
    drain = _start_drain(found, spec, store)
    start = time.time() + 0.3
    api.schedule(Outage(start + down, start + back), options.noise, options.seed)
    progress.header(["", f"== {title}: {where}"])

    def on_calls(calls: list[Call]) -> None:
        record.calls.extend(calls)

    end: float | None = None
    next_check = 0.0
    fleet.go(start)
    while True:
        fleet.drain(on_calls, 0.05)
        now = time.time() - start
        if now >= next_check:
            next_check = now + 0.25
            record.provider = [(r.at - start, r.ok) for r in api.requests() if not r.drain]
            progress.tick(now)
            if end is None:
                end = _end_of_run(options, record, now)
        if end is not None and now >= end:
            break
    record.reports = fleet.finish(on_calls)
    record.duration = end
    record.provider = [
        (r.at - start, r.ok) for r in api.requests() if r.at - start < end and not r.drain
    ]
    progress.tick(end, final=True)
    if drain is not None:
        _finish_drain(drain, record, api, progress, start)
    elif found.queues is not None:
        record.queued = found.queues.count(record.label)
        progress.note(f"-- {record.queued} deferred payments are in the run's SQS queue")
    closed = fleet_closed_at(record)
    if closed is not None:
        progress.note(
            f"-- {closed:.1f} s: every container admits payments again, "
            f"{closed - back:.1f} s after the recovery"
        )
    else:
        progress.note(f"-- not every container closed within {options.max_after:g} s")
    return record


def _start_drain(found: Backends, spec: RunSpec, store: StoreSpec) -> DrainProcess | None:
    """The deferred-payments consumers for this run (defer mode), on the run's kind of breaker."""
    if found.queues is None or found.endpoint_url is None:
        return None
    return DrainProcess(
        store,
        # The same provider, at a path of its own: the fleet's figures leave the drain out.
        {**spec.env, "PAYMENT_API_URL": found.api.url + DRAIN_PATH},
        local_aws_environment(),
        found.endpoint_url,
        found.queues.urls[spec.label],
        0.0,  # the drain reports epoch times; the run's own start is not known yet
    )


def _finish_drain(
    drain: DrainProcess,
    record: RunRecord,
    api: ScheduledPaymentApi,
    progress: Progress,
    start: float,
) -> None:
    charges, left = drain.finish()
    charged = [(at - start, key) for at, key in charges]
    record.drained = [at for at, _key in charged]
    deferred = sum(1 for call in record.calls if call.status == DEFERRED)
    figures = drain_figures(charged, left, deferred, record.outage[1], api.requests())
    record.drain = figures
    record.queued = len({key for _at, key in charged}) + left
    progress.note(f"-- {figures.line()}")


def _end_of_run(options: Options, record: RunRecord, now: float) -> float | None:
    """A whole second: ``linger`` after the fleet closed, or the cap after the recovery."""
    back = record.outage[1]
    if now < back:
        return None
    closed = fleet_closed_at(record)
    if closed is not None:
        return float(math.ceil(max(closed + options.linger, back + 1)))
    if now >= back + options.max_after:
        return float(math.ceil(now))
    return None


def run_demo(options: Options, out: TextIO = sys.stdout) -> DemoResult:
    """The whole demo: both runs, the table, the report. Raises KeyboardInterrupt on Ctrl-C."""
    began = time.monotonic()
    conditions = results.Conditions.now()
    options = options.validate()
    output = options.output
    output.mkdir(parents=True, exist_ok=True)
    # An earlier demo's results must not pass for this one's if this one fails or is stopped:
    # bench/demo_runs.py would fold them as a run that happened.
    (output / results.RESULTS).unlink(missing_ok=True)
    log_path = output / "containers.log"
    log_path.write_text("")
    say(out, f"fleetbreaker demo: {options.describe()}")
    with contextlib.ExitStack() as stack:
        found = stack.enter_context(backends(options, out))
        say(out, f"starting {options.containers} containers (processes) ...")
        fleet = stack.enter_context(
            Fleet(options.containers, process_env(options, found), str(log_path))
        )
        records = [run_once(options, fleet, found, plan, out) for plan in plans(options)]
    runs = [report.Run(record, summarize(record)) for record in records]
    checks = report.guarantees(options, runs)
    say(out, "")
    say(out, report.table(runs))
    say(out, "")
    for held, sentence in checks:
        say(out, f"{report.mark(held)} {sentence}")
    chart, markdown = report.write(options, runs, output)
    seconds = time.monotonic() - began
    conditions = conditions.ended(seconds)
    code = exit_code(checks)
    written = results.write(results.document(options, runs, checks, conditions, code), output)
    say(out, "")
    say(out, f"finished in {seconds:.0f} s; every server and container has stopped")
    say(out, f"chart:   {_shown(chart)}")
    say(out, f"summary: {_shown(markdown)}")
    say(out, f"results: {_shown(written)} (load average {_load(conditions)}; exit {code})")
    return DemoResult(runs, chart, markdown, checks, seconds, written)


def _load(conditions: results.Conditions) -> str:
    start, end = conditions.loadavg_at_start[0], conditions.loadavg_at_end[0]
    return f"{start:g} at the start, {end:g} at the end"


def _shown(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.resolve().relative_to(Path.cwd()))
    return str(path)
