"""A store call cut short by a BaseException (Ctrl-C, SystemExit): every span or subsegment a
listener opened for it is ended, its context detached, and the exception goes on.

On the package's MemoryStore (the call runs on the caller's thread, a real SIGINT lands in it),
on a store whose call raises on the deadline worker (the exception is handed to the caller),
and on a real Redis client waiting for a server that holds its answer (Ctrl-C while the
caller waits for the worker).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from devtools.servers import BlackholeServer
from fleetbreaker import MemoryStore, RedisStore
from fleetbreaker.events import BreakerListener
from fleetbreaker.tracing import OpenTelemetryListener, TracingListener
from tests.support import ctrl_c_when

from .capture import Recorder, Traces, walk
from .support import BreakerFactory, FlakyStore, succeed


class InterruptedStore(FlakyStore):
    """A store whose read is cut short by ``error`` (it runs on the deadline's worker)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error

    def load(self, name: str, now_ms: int) -> Any:
        raise self.error


def ctrl_c_during_load(store: MemoryStore) -> MemoryStore:
    """``store`` (still the package's MemoryStore, so called on the caller's thread) whose next
    read gets a real SIGINT while it runs."""

    def load(name: str, now_ms: int) -> Any:
        signal.raise_signal(signal.SIGINT)
        return MemoryStore.load(store, name, now_ms)

    store.load = load  # type: ignore[method-assign]
    return store


@pytest.fixture
def hole() -> Iterator[BlackholeServer]:
    with BlackholeServer() as server:
        yield server


def assert_store_span_closed(traces: Traces, exception_type: str) -> None:
    span = traces.span("fleetbreaker.store.load")  # only finished spans are exported
    assert span.attributes is not None
    assert span.attributes["fleetbreaker.store.outcome"] == "interrupted"
    assert span.status.status_code is StatusCode.ERROR
    assert span.events[0].attributes is not None
    assert span.events[0].attributes["exception.type"] == exception_type


@pytest.mark.parametrize(
    ("error", "exception_type"),
    [(KeyboardInterrupt(), "KeyboardInterrupt"), (SystemExit(2), "SystemExit")],
)
def test_a_base_exception_on_the_worker_ends_the_otel_span_and_detaches_it(
    make_breaker: BreakerFactory, traces: Traces, error: BaseException, exception_type: str
) -> None:
    # GIVEN a traced breaker whose store read is cut short by a BaseException
    otel = OpenTelemetryListener(tracer_provider=traces.provider)
    breaker = make_breaker(listeners=[otel], store=InterruptedStore(error))

    with traces.tracer.start_as_current_span("handler") as handler:
        # WHEN a call needs the store, THEN the exception reaches the caller unchanged
        with pytest.raises(type(error)):
            breaker.call(succeed)
        # AND the handler's span is current again: the store span's context is detached
        assert trace.get_current_span() is handler

    # AND the store span ended, as an interrupted error
    assert_store_span_closed(traces, exception_type)


def test_ctrl_c_during_a_memory_store_call_ends_the_otel_span(
    make_breaker: BreakerFactory, traces: Traces
) -> None:
    # GIVEN a breaker on the package's MemoryStore, whose read gets a real SIGINT
    otel = OpenTelemetryListener(tracer_provider=traces.provider)
    breaker = make_breaker(listeners=[otel], store=ctrl_c_during_load(MemoryStore()))

    with traces.tracer.start_as_current_span("handler") as handler:
        with pytest.raises(KeyboardInterrupt):
            breaker.call(succeed)
        assert trace.get_current_span() is handler

    assert_store_span_closed(traces, "KeyboardInterrupt")


def test_ctrl_c_while_redis_holds_its_answer_ends_the_otel_span(
    make_breaker: BreakerFactory, traces: Traces, hole: BlackholeServer
) -> None:
    # GIVEN a breaker on a real Redis client whose server accepts and never answers, with
    # deadlines long enough that only Ctrl-C can end the wait
    store = RedisStore(url=hole.redis_url, socket_timeout=30, socket_connect_timeout=30)
    otel = OpenTelemetryListener(tracer_provider=traces.provider)
    breaker = make_breaker(listeners=[otel], store=store, store_deadline_seconds=30)

    with traces.tracer.start_as_current_span("handler") as handler:
        # WHEN Ctrl-C comes while the call waits for the store's answer
        with ctrl_c_when(lambda: hole.accepted > 0), pytest.raises(KeyboardInterrupt):
            breaker.call(succeed)
        assert trace.get_current_span() is handler

    # THEN the store span ended, as interrupted, and the breaker did not degrade
    assert_store_span_closed(traces, "KeyboardInterrupt")
    assert not breaker.degraded
    store.close()


class InterruptedStart(BreakerListener):
    """A listener after the tracer, interrupted while it starts its own part of a store call."""

    def on_store_call_start(self, name: str, operation: str) -> None:
        raise KeyboardInterrupt


def test_ctrl_c_in_a_later_listeners_start_hook_still_ends_the_span(
    make_breaker: BreakerFactory, traces: Traces
) -> None:
    # GIVEN the OpenTelemetry listener, then one interrupted as the store call starts
    otel = OpenTelemetryListener(tracer_provider=traces.provider)
    breaker = make_breaker(listeners=[otel, InterruptedStart()])

    with traces.tracer.start_as_current_span("handler") as handler:
        with pytest.raises(KeyboardInterrupt):
            breaker.call(succeed)
        assert trace.get_current_span() is handler

    assert traces.span("fleetbreaker.store.load").end_time is not None


# -- X-Ray: the same for subsegments ----------------------------------------------------------


def test_a_keyboard_interrupt_on_the_worker_closes_the_xray_subsegment(
    make_breaker: BreakerFactory, xray: Recorder
) -> None:
    # GIVEN an X-Ray traced breaker whose store read is interrupted
    recorder, emitter = xray
    listener = TracingListener(enabled=True, recorder=recorder)
    breaker = make_breaker(listeners=[listener], store=InterruptedStore(KeyboardInterrupt()))
    segment = recorder.begin_segment("handler")
    try:
        with pytest.raises(KeyboardInterrupt):
            breaker.call(succeed)
        # THEN the segment is current again
        assert recorder.get_trace_entity() is segment
    finally:
        recorder.end_segment()

    # AND the store subsegment was closed as a fault
    (sent,) = emitter.sent
    (load,) = [e for e in walk(sent) if e["name"] == "fleetbreaker.load"]
    assert load["fault"] is True
    assert not load.get("in_progress")


def test_ctrl_c_in_a_later_listeners_start_hook_closes_the_xray_subsegment(
    make_breaker: BreakerFactory, xray: Recorder
) -> None:
    recorder, emitter = xray
    listener = TracingListener(enabled=True, recorder=recorder)
    breaker = make_breaker(listeners=[listener, InterruptedStart()])
    segment = recorder.begin_segment("handler")
    try:
        with pytest.raises(KeyboardInterrupt):
            breaker.call(succeed)
        assert recorder.get_trace_entity() is segment
    finally:
        recorder.end_segment()

    (sent,) = emitter.sent
    (load,) = [e for e in walk(sent) if e["name"] == "fleetbreaker.load"]
    assert not load.get("in_progress")
