"""The listeners on the async path: decisions, transitions, shadow mode and store spans for
awaited calls, as tests/observability's sync tests see them for plain calls.

OpenTelemetry's current span travels with the contextvars that ``asyncio.to_thread`` copies
into the worker thread, so the store spans of an awaited call nest under the caller's span.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from fleetbreaker import CircuitOpenError, MemoryStore, State
from fleetbreaker.events import BreakerListener, StateChange
from fleetbreaker.record import Decision
from fleetbreaker.tracing import OpenTelemetryListener, TracingListener

from .capture import Traces
from .support import Boom, BreakerFactory, fail_async, succeed_async


def in_handler_span(traces: Traces, coroutine: Any) -> ReadableSpan:
    """Await ``coroutine`` inside a fresh ``handler`` span; return that span."""

    async def main() -> None:
        with (
            traces.tracer.start_as_current_span("handler"),
            contextlib.suppress(Boom, CircuitOpenError),
        ):
            await coroutine

    traces.exporter.clear()
    asyncio.run(main())
    return traces.span("handler")


class Heard(BreakerListener):
    def __init__(self) -> None:
        self.decisions: list[tuple[Decision, State]] = []
        self.changes: list[StateChange] = []
        self.would_reject = 0
        self.rejected = 0

    def on_decision(self, name: str, decision: Decision, state: State) -> None:
        self.decisions.append((decision, state))

    def on_state_change(self, name: str, change: StateChange) -> None:
        self.changes.append(change)

    def on_would_reject(self, name: str, state: State, retry_after: float) -> None:
        self.would_reject += 1

    def on_rejected(self, name: str, state: State, retry_after: float) -> None:
        self.rejected += 1


def test_an_awaited_call_is_a_decision_event_on_the_callers_span(
    make_breaker: BreakerFactory, traces: Traces
) -> None:
    # GIVEN a breaker with the OpenTelemetry listener
    breaker = make_breaker(listeners=[OpenTelemetryListener(tracer_provider=traces.provider)])
    # WHEN an awaited call runs inside the function's span
    span = in_handler_span(traces, breaker.call_async(succeed_async))
    # THEN the span carries its decision
    decisions = [e for e in span.events if e.name == "fleetbreaker.decision"]
    assert [dict(e.attributes or {})["fleetbreaker.decision"] for e in decisions] == ["allow"]


def test_an_awaited_calls_store_round_trips_nest_under_the_callers_span(
    make_breaker: BreakerFactory, traces: Traces
) -> None:
    # GIVEN a breaker with the OpenTelemetry listener
    breaker = make_breaker(listeners=[OpenTelemetryListener(tracer_provider=traces.provider)])
    # WHEN a failing awaited call runs: a load and a failure's write, both on worker threads
    handler = in_handler_span(traces, breaker.call_async(fail_async))
    # THEN each is a child span of the caller's span
    for name in ("fleetbreaker.store.load", "fleetbreaker.store.record_failure"):
        span = traces.span(name)
        assert span.parent is not None
        assert span.parent.span_id == handler.context.span_id


def test_an_awaited_trip_is_one_state_change_and_rejections_are_heard(
    make_breaker: BreakerFactory,
) -> None:
    # GIVEN a breaker (3 failures open it) with a listener
    heard = Heard()
    breaker = make_breaker(listeners=[heard])

    # WHEN three awaited calls fail and a fourth comes
    async def main() -> None:
        for _ in range(3):
            with contextlib.suppress(Boom):
                await breaker.call_async(fail_async)
        with contextlib.suppress(CircuitOpenError):
            await breaker.call_async(succeed_async)

    asyncio.run(main())
    # THEN the trip was told once, and the fourth call's rejection was heard
    assert [(c.before, c.after) for c in heard.changes] == [(State.CLOSED, State.OPEN)]
    assert heard.rejected == 1
    assert heard.decisions[-1] == (Decision.REJECT, State.OPEN)


def test_a_shadow_breaker_lets_an_awaited_call_through_and_counts_the_would_reject(
    make_breaker: BreakerFactory,
) -> None:
    # GIVEN an open breaker in shadow mode
    heard, store = Heard(), MemoryStore()
    make_breaker(store=store).force_open()
    shadow = make_breaker(listeners=[heard], store=store, mode="shadow")
    # WHEN an awaited call comes to the shadow breaker
    result = asyncio.run(shadow.call_async(succeed_async))
    # THEN it ran, and the would-be rejection was counted
    assert result == "ok"
    assert heard.would_reject == 1
    assert shadow.stats.would_rejects == 1


def test_an_awaited_calls_decision_annotates_the_callers_xray_segment(
    make_breaker: BreakerFactory, xray: Any
) -> None:
    # GIVEN a breaker with the X-Ray listener (its first call reads the store on a worker
    # thread, where the SDK's thread-local context has no segment)
    recorder, emitter = xray
    breaker = make_breaker(listeners=[TracingListener(enabled=True, recorder=recorder)])

    # WHEN an awaited call runs inside a segment
    async def main() -> None:
        recorder.begin_segment("handler")
        try:
            await breaker.call_async(succeed_async)
        finally:
            recorder.end_segment()

    emitter.sent.clear()
    asyncio.run(main())
    # THEN the caller's segment carries the decision
    (segment,) = emitter.sent
    assert segment["annotations"] == {
        "circuit_breaker": "payment-api",
        "circuit_state": "closed",
        "circuit_decision": "allow",
    }
