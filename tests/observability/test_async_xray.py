"""X-Ray on the async path: the store subsegments of an awaited call.

An awaited call's store requests are sent from worker threads (``asyncio.to_thread``), where
the X-Ray SDK's context has nothing of the caller's: Lambda's ``LambdaContext`` keeps its
entities per thread (a new thread gets a fresh facade of Lambda's segment), and the
``AsyncContext`` an asyncio service configures keeps them per asyncio task (a worker thread
has none). The listener carries the caller's current entity to the worker, so each
``fleetbreaker.<operation>`` subsegment nests under the handler's subsegment, closed and
annotated, as on the sync path (tests/observability/test_tracing.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from fleetbreaker.tracing import TracingListener
from tests.contract.conftest import (  # noqa: F401  (fixtures make_store asks for by name)
    make_store,
    moto_inprocess_store,
    redis_contract_store,
)

from .support import (
    Boom,
    BreakerFactory,
    CapturingEmitter,
    FakeClock,
    FlakyStore,
    fail_async,
    succeed_async,
)

TRACE_HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"

Main = Callable[[], Awaitable[None]]

# A store deadline no loaded test machine reaches: a store call past it would be a fault.
PATIENT = 30.0


class Traced:
    """A recorder configured as the function would have it, and the entities it sent."""

    def __init__(self, recorder: Any, emitter: CapturingEmitter, handler: str) -> None:
        self.recorder = recorder
        self.emitter = emitter
        self.handler = handler  # the name of the subsegment the handler runs in

    def entities(self) -> list[tuple[dict[str, Any], str | None]]:
        """Every entity sent, streamed or nested, with the id of its parent."""
        found: list[tuple[dict[str, Any], str | None]] = []

        def visit(entity: dict[str, Any], parent: str | None) -> None:
            found.append((entity, parent))
            for child in entity.get("subsegments", []):
                visit(child, entity["id"])

        for sent in self.emitter.sent:
            visit(sent, sent.get("parent_id"))
        return found

    def named(self, name: str) -> dict[str, Any]:
        (entity,) = [e for e, _ in self.entities() if e["name"] == name]
        return entity

    def store_calls(self) -> list[tuple[dict[str, Any], str | None]]:
        """The store subsegments (``fleetbreaker.<operation>``) and their parents' ids."""
        return [(e, p) for e, p in self.entities() if e["name"].startswith("fleetbreaker.")]

    def run(self, main: Main) -> None:
        """Await ``main()`` inside the handler's subsegment, as the function would."""
        raise NotImplementedError


class InLambda(Traced):
    """Lambda: Powertools' ``@tracer.capture_lambda_handler`` opens ``## lambda_handler`` on
    the runtime's thread, and the handler runs its coroutines with ``asyncio.run``."""

    def run(self, main: Main) -> None:
        self.emitter.sent.clear()
        self.recorder.begin_subsegment(self.handler)
        try:
            with contextlib.suppress(Boom):
                asyncio.run(main())
        finally:
            self.recorder.end_subsegment()


class InAsyncioService(Traced):
    """An asyncio service: a segment per request, the handler's subsegment in it; entities
    kept per task (the SDK's AsyncContext, by default) or per thread (its default Context)."""

    def __init__(self, *, per_task: bool = True) -> None:
        from aws_xray_sdk.core.async_context import AsyncContext
        from aws_xray_sdk.core.context import Context

        recorder, emitter = _recorder()
        super().__init__(recorder, emitter, "## handler")
        self.loop = asyncio.new_event_loop()
        recorder.configure(
            context=AsyncContext(loop=self.loop, context_missing="RUNTIME_ERROR")
            if per_task
            else Context(context_missing="RUNTIME_ERROR")
        )

    def run(self, main: Main) -> None:
        recorder = self.recorder

        async def request() -> None:
            recorder.begin_segment("service")
            recorder.begin_subsegment(self.handler)
            try:
                with contextlib.suppress(Boom):
                    await main()
            finally:
                recorder.end_subsegment()
                recorder.end_segment()

        self.emitter.sent.clear()
        self.loop.run_until_complete(request())


@pytest.fixture
def in_lambda(monkeypatch: pytest.MonkeyPatch) -> Iterator[InLambda]:
    """Lambda's X-Ray setup: the trace header set, the SDK's LambdaContext."""
    from aws_xray_sdk.core.lambda_launcher import LambdaContext
    from aws_xray_sdk.core.recorder import AWSXRayRecorder

    monkeypatch.setenv("LAMBDA_TASK_ROOT", "/var/task")
    monkeypatch.setenv("_X_AMZN_TRACE_ID", TRACE_HEADER)
    recorder, emitter = AWSXRayRecorder(), CapturingEmitter()
    # As the SDK configures itself in Lambda: every closed subsegment is streamed.
    recorder.configure(
        sampling=False, emitter=emitter, context=LambdaContext(), streaming_threshold=0
    )
    yield InLambda(recorder, emitter, "## lambda_handler")
    recorder.clear_trace_entities()


@pytest.fixture(params=["lambda", "asyncio"])
def traced(request: pytest.FixtureRequest) -> Iterator[Traced]:
    """The function's X-Ray setup: on Lambda, or an asyncio service on AsyncContext."""
    if request.param == "lambda":
        yield request.getfixturevalue("in_lambda")
        return
    service = InAsyncioService()
    yield service
    service.loop.close()


@pytest.fixture(params=["memory", "moto", "redis"])
def async_store(request: pytest.FixtureRequest) -> Any:
    return make_store(request, request.param)


@pytest.fixture
def unique_name() -> str:
    """A breaker name no other test uses (the Redis server is shared by the session)."""
    return f"xray-{uuid.uuid4().hex[:12]}"


def listening(traced: Traced) -> list[Any]:
    return [TracingListener(enabled=True, recorder=traced.recorder)]


def assert_nested_under_the_handler(traced: Traced, breaker: str, names: list[str]) -> None:
    handler = traced.named(traced.handler)
    calls = traced.store_calls()
    assert [e["name"] for e, _ in calls] == names
    for entity, parent in calls:
        assert parent == handler["id"], f"{entity['name']} is not under {traced.handler}"
        assert not entity.get("in_progress")
        assert entity["end_time"] >= entity["start_time"]
        assert entity["annotations"] == {"circuit_breaker": breaker}
        assert not entity.get("fault")


def test_an_awaited_calls_refresh_and_failure_write_nest_under_the_handler(
    traced: Traced, async_store: Any, make_breaker: BreakerFactory, unique_name: str
) -> None:
    # GIVEN a traced breaker on the store, its cache empty
    breaker = make_breaker(
        unique_name, listening(traced), store=async_store, store_deadline_seconds=PATIENT
    )
    # WHEN the handler awaits a call that fails: a store read, then the failure's write,
    # both sent from worker threads
    traced.run(lambda: breaker.call_async(fail_async))
    # THEN each has its own closed, annotated subsegment under the handler's subsegment
    assert_nested_under_the_handler(
        traced, unique_name, ["fleetbreaker.load", "fleetbreaker.record_failure"]
    )


def test_an_awaited_probes_claim_and_settle_nest_under_the_handler(
    traced: Traced,
    async_store: Any,
    make_breaker: BreakerFactory,
    unique_name: str,
    clock: FakeClock,
) -> None:
    # GIVEN a traced breaker that opened and whose open window has ended
    breaker = make_breaker(
        unique_name,
        listening(traced),
        store=async_store,
        failure_threshold=1,
        store_deadline_seconds=PATIENT,
    )
    breaker.record(False)
    clock.advance(10)
    # WHEN the handler awaits the probe (its cached record is stale by now)
    traced.run(lambda: breaker.call_async(succeed_async))
    # THEN the refresh, the claim and the settle are subsegments of the handler's subsegment
    assert_nested_under_the_handler(
        traced,
        unique_name,
        ["fleetbreaker.load", "fleetbreaker.claim_probe", "fleetbreaker.settle_probe"],
    )


def test_a_failed_store_call_of_an_awaited_call_is_a_fault_under_the_handler(
    traced: Traced, make_breaker: BreakerFactory
) -> None:
    # GIVEN a traced breaker whose store is down
    store = FlakyStore()
    store.down = True
    breaker = make_breaker(listeners=listening(traced), store=store)
    # WHEN the handler awaits a call (the store read fails; the call runs on local state)
    traced.run(lambda: breaker.call_async(succeed_async))
    # THEN the read's subsegment, under the handler's, is flagged as a fault
    ((load, parent),) = traced.store_calls()
    assert load["name"] == "fleetbreaker.load"
    assert parent == traced.named(traced.handler)["id"]
    assert load["fault"] is True
    assert not load.get("in_progress")


class ClientTracedStore(FlakyStore):
    """A store whose client opens its own subsegment per request, as the AWS SDK's does
    when botocore is patched (Powertools Tracer patches it by default).

    Given the event loop, each request first waits for the loop to run a callback it
    queues: by then the awaiting task has yielded, so the loop runs no task while the
    client's subsegment begins (the SDK's AsyncContext reads whichever task runs then).
    """

    def __init__(self, recorder: Any, loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__()
        self.recorder = recorder
        self.loop = loop

    def load(self, name: str, now_ms: int) -> Any:
        if self.loop is not None:
            yielded = threading.Event()
            self.loop.call_soon_threadsafe(yielded.set)
            assert yielded.wait(timeout=PATIENT)
        with self.recorder.in_subsegment("DynamoDB"):
            return super().load(name, now_ms)


def test_on_lambda_the_store_clients_subsegment_nests_inside_the_store_subsegment(
    in_lambda: InLambda, make_breaker: BreakerFactory
) -> None:
    # GIVEN a traced breaker whose store client traces its own requests, on the store's
    # worker thread
    store = ClientTracedStore(in_lambda.recorder)
    breaker = make_breaker(
        listeners=listening(in_lambda), store=store, store_deadline_seconds=PATIENT
    )
    # WHEN the handler awaits a call (a store read)
    in_lambda.run(lambda: breaker.call_async(succeed_async))
    # THEN the client's subsegment is a child of fleetbreaker.load, itself under the handler
    parents = {entity["name"]: parent for entity, parent in in_lambda.entities()}
    assert parents["DynamoDB"] == in_lambda.named("fleetbreaker.load")["id"]
    assert parents["fleetbreaker.load"] == in_lambda.named("## lambda_handler")["id"]


@pytest.mark.parametrize(
    ("context_missing", "degraded"), [("LOG_ERROR", False), ("RUNTIME_ERROR", True)]
)
def test_under_asynccontext_the_store_clients_subsegment_finds_no_parent_on_the_worker(
    make_breaker: BreakerFactory, context_missing: str, degraded: bool
) -> None:
    # GIVEN an asyncio service on AsyncContext (which follows no work onto threads) and a
    # store client that traces its own requests on the store's worker thread, while the
    # loop runs no task
    service = InAsyncioService()
    service.recorder.context.context_missing = context_missing
    breaker = make_breaker(
        listeners=listening(service),
        store=ClientTracedStore(service.recorder, service.loop),
        store_deadline_seconds=PATIENT,
    )
    # WHEN the handler awaits a call (a store read)
    try:
        service.run(lambda: breaker.call_async(succeed_async))
    finally:
        service.loop.close()
    # THEN the store subsegment nests under the handler, the client's is not recorded, and
    # under RUNTIME_ERROR the client's request raised: the store counts as unreachable
    names = [entity["name"] for entity, _ in service.entities()]
    assert names == ["service", "## handler", "fleetbreaker.load"]
    assert breaker.degraded is degraded


class MeetingStore(FlakyStore):
    """Holds each failure write until ``parties`` of them are in flight at once."""

    def __init__(self, parties: int) -> None:
        super().__init__()
        self.meeting = threading.Barrier(parties, timeout=30)

    def record_failure(self, *args: Any, **kwargs: Any) -> Any:
        self.meeting.wait()
        return super().record_failure(*args, **kwargs)


def test_concurrent_awaited_calls_nest_under_their_own_tasks_subsegment(
    make_breaker: BreakerFactory,
) -> None:
    # GIVEN an asyncio service on AsyncContext and a breaker whose failure writes both have
    # to be in flight before either answers
    traced = InAsyncioService()
    store = MeetingStore(parties=2)
    breaker = make_breaker(listeners=listening(traced), store=store, store_deadline_seconds=PATIENT)
    recorder = traced.recorder

    async def task(number: int) -> None:
        recorder.begin_subsegment(f"task-{number}")
        try:
            with contextlib.suppress(Boom):
                await breaker.call_async(fail_async)
        finally:
            recorder.end_subsegment()

    async def main() -> None:
        await asyncio.gather(task(1), task(2))

    # WHEN two tasks of one request await a failing call at once
    try:
        traced.run(main)
    finally:
        traced.loop.close()
    # THEN each failure's write is a subsegment of its own task's subsegment
    for number in (1, 2):
        writes = [
            e["name"]
            for e in traced.named(f"task-{number}").get("subsegments", [])
            if e["name"] == "fleetbreaker.record_failure"
        ]
        assert writes == ["fleetbreaker.record_failure"], f"task-{number}"


@pytest.fixture(params=["per_thread", "per_task"])
def one_worker(request: pytest.FixtureRequest) -> Iterator[InAsyncioService]:
    """A service whose event loop has one worker thread, reused by every store request;
    its X-Ray context kept per thread (the SDK's default) or per task (AsyncContext)."""
    service = InAsyncioService(per_task=request.param == "per_task")
    service.loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
    yield service
    service.loop.close()


def test_a_reused_worker_thread_carries_no_entity_to_the_next_call(
    one_worker: InAsyncioService, make_breaker: BreakerFactory
) -> None:
    # GIVEN a traced breaker that reads its store on every call
    recorder = one_worker.recorder
    breaker = make_breaker(listeners=listening(one_worker), cache_ttl=0)

    async def main() -> None:
        # WHEN a call inside a segment reads the store on the worker thread, and the next
        # call, with no entity of its own, reads it on the same thread
        segment = recorder.begin_segment("first")
        await breaker.call_async(succeed_async)
        recorder.clear_trace_entities()
        await breaker.call_async(succeed_async)
        recorder.set_trace_entity(segment)
        recorder.end_segment()

    one_worker.loop.run_until_complete(main())
    # THEN only the first call's read is in the first segment
    (first,) = one_worker.emitter.sent
    assert [e["name"] for e in first.get("subsegments", [])] == ["fleetbreaker.load"]


def test_the_worker_thread_holds_no_entity_after_an_awaited_calls_store_request(
    make_breaker: BreakerFactory,
) -> None:
    # GIVEN an asyncio service on the SDK's per-thread context, with one worker thread
    from aws_xray_sdk.core.exceptions.exceptions import SegmentNotFoundException

    service = InAsyncioService(per_task=False)
    service.loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
    breaker = make_breaker(listeners=listening(service))
    seen_after: list[Any] = []

    def entity_on_this_thread() -> Any:
        try:
            return service.recorder.get_trace_entity()
        except SegmentNotFoundException:
            return None

    async def main() -> None:
        # WHEN an awaited call reads the store on that thread
        await breaker.call_async(succeed_async)
        seen_after.append(await asyncio.to_thread(entity_on_this_thread))

    try:
        service.run(main)
    finally:
        service.loop.close()
    # THEN the read nested under the handler, and the thread kept no entity of it
    ((load, parent),) = service.store_calls()
    assert load["name"] == "fleetbreaker.load"
    assert parent == service.named("## handler")["id"]
    assert seen_after == [None]


@pytest.mark.parametrize(
    ("failing", "logged"),
    [
        ("set_trace_entity", "X-Ray context refused"),
        ("clear_trace_entities", "X-Ray context not cleared"),
    ],
)
def test_an_xray_context_that_fails_on_the_worker_never_fails_the_awaited_call(
    make_breaker: BreakerFactory, caplog: pytest.LogCaptureFixture, failing: str, logged: str
) -> None:
    # GIVEN a context that fails to set (or to clear) the entity of any thread but the
    # caller's, and a store read through the store's worker thread
    from aws_xray_sdk.core.context import Context

    caller = threading.get_ident()

    class Failing(Context):  # type: ignore[misc]
        def __getattribute__(self, name: str) -> Any:
            if name == failing and threading.get_ident() != caller:
                raise RuntimeError("context fails off the caller's thread (test)")
            return super().__getattribute__(name)

    recorder, _ = _recorder()
    recorder.configure(context=Failing(context_missing="LOG_ERROR"))
    store = FlakyStore()
    breaker = make_breaker(
        listeners=[TracingListener(enabled=True, recorder=recorder)],
        store=store,
        store_deadline_seconds=PATIENT,
    )

    async def main() -> str:
        recorder.begin_segment("handler")
        try:
            return await breaker.call_async(succeed_async)
        finally:
            recorder.end_segment()

    # WHEN an awaited call reads the store
    # THEN the call returns, the store answered, and the failure was logged
    assert asyncio.run(main()) == "ok"
    assert store.calls == 1
    assert not breaker.degraded
    assert logged in caplog.text


def test_an_unsampled_request_gets_no_store_subsegments_and_no_listener_failure(
    make_breaker: BreakerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN an asyncio service on AsyncContext whose request is not sampled
    service = InAsyncioService()
    recorder = service.recorder
    breaker = make_breaker(listeners=listening(service))

    async def request() -> str:
        recorder.begin_segment("service", sampling=0)
        try:
            return await breaker.call_async(fail_async)
        except Boom:
            return "failed"
        finally:
            recorder.end_segment()

    # WHEN it awaits a failing call (a read and a write on worker threads)
    try:
        assert service.loop.run_until_complete(request()) == "failed"
    finally:
        service.loop.close()
    # THEN nothing was sent, the failure was counted, and no listener failed
    assert service.emitter.sent == []
    assert breaker.snapshot().failures == 1
    assert "failed in" not in caplog.text


def test_a_store_request_handed_off_after_its_callers_subsegment_ended_opens_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # GIVEN an AsyncContext handoff taken while the caller's subsegment was open, which
    # then ended (a shielded probe release outliving a twice-cancelled caller)
    service = InAsyncioService()
    recorder = service.recorder
    listener = TracingListener(enabled=True, recorder=recorder)

    async def handoff() -> tuple[Any, Any]:
        recorder.begin_segment("service")
        handler = recorder.begin_subsegment("## handler")
        taken = listener.thread_handoff()
        recorder.end_subsegment()
        return taken, handler

    try:
        taken, handler = service.loop.run_until_complete(handoff())
    finally:
        service.loop.close()
    assert taken is not None

    def store_request() -> None:
        listener.on_store_call_start("payment-api", "settle_probe")
        listener.on_store_call("payment-api", "settle_probe", 1.0, True)

    # WHEN the worker sends the store request
    worker = threading.Thread(target=taken, args=(store_request,))
    worker.start()
    worker.join()
    # THEN the ended subsegment got no child, and nothing failed
    assert handler.subsegments == []
    assert "Traceback" not in caplog.text


def test_a_sync_call_in_a_coroutine_leaves_the_tasks_xray_context_alone(
    make_breaker: BreakerFactory,
) -> None:
    # GIVEN an asyncio service on AsyncContext, and a store read through the store's worker
    # thread while the task waits for it (a sync call on the loop)
    traced = InAsyncioService()
    breaker = make_breaker(
        listeners=listening(traced), store=FlakyStore(), store_deadline_seconds=PATIENT
    )
    still_current: list[Any] = []

    async def main() -> None:
        assert breaker.call(lambda: "ok") == "ok"
        still_current.append(traced.recorder.get_trace_entity())

    # WHEN the handler makes a sync call
    try:
        traced.run(main)
    finally:
        traced.loop.close()
    # THEN the task's subsegment is still current after it, and the read nested under it
    assert [e.name for e in still_current] == ["## handler"]
    ((load, parent),) = traced.store_calls()
    assert load["name"] == "fleetbreaker.load"
    assert parent == traced.named("## handler")["id"]


def _recorder() -> tuple[Any, CapturingEmitter]:
    from aws_xray_sdk.core.recorder import AWSXRayRecorder

    recorder, emitter = AWSXRayRecorder(), CapturingEmitter()
    recorder.configure(sampling=False, emitter=emitter, plugins=(), streaming_threshold=1000)
    return recorder, emitter
