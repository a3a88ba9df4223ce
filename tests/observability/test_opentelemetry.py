"""OpenTelemetry: decision events, transitions and store spans, captured in memory by the SDK.

A private TracerProvider with an InMemorySpanExporter is handed to the listener (the global
provider can be set once per process, so these tests never set it); the choice between
OpenTelemetry and X-Ray, which reads the global provider, runs in child processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from devtools.servers import REPO_ROOT
from fleetbreaker import MemoryStore
from fleetbreaker.tracing import OpenTelemetryListener

from .capture import Traces
from .support import Boom, BreakerFactory, FakeClock, fail, succeed


def events(span: ReadableSpan, prefix: str = "fleetbreaker.") -> list[tuple[str, dict[str, Any]]]:
    return [(e.name, dict(e.attributes or {})) for e in span.events if e.name.startswith(prefix)]


@pytest.fixture(params=["fast", "public"])
def otel(traces: Traces, request: pytest.FixtureRequest) -> OpenTelemetryListener:
    """The listener, with its fast span lookup or (as with another runtime context) the API's."""
    listener = OpenTelemetryListener(tracer_provider=traces.provider)
    if request.param == "public":
        listener._context_get = None
    return listener


def test_the_fast_span_lookup_finds_what_the_api_finds(traces: Traces) -> None:
    from opentelemetry import trace

    listener = OpenTelemetryListener(tracer_provider=traces.provider)
    assert listener._context_get is not None, "the default runtime context is contextvars"
    assert listener._context_get().get(listener._span_key) is None
    with traces.tracer.start_as_current_span("handler") as span:
        assert listener._context_get().get(listener._span_key) is span
        assert trace.get_current_span() is span


def test_each_decision_is_an_event_on_the_callers_span(
    make_breaker: BreakerFactory, traces: Traces, otel: OpenTelemetryListener
) -> None:
    # GIVEN a breaker with the OpenTelemetry listener
    breaker = make_breaker(listeners=[otel])
    # WHEN a healthy call runs inside the function's span
    span = traces.handler(lambda: breaker.call(succeed))
    # THEN that span carries one decision event with the breaker, its state and the decision
    assert events(span) == [
        (
            "fleetbreaker.decision",
            {
                "fleetbreaker.breaker": "payment-api",
                "fleetbreaker.state": "closed",
                "fleetbreaker.decision": "allow",
            },
        )
    ]


def test_a_rejection_is_a_reject_decision_event(
    make_breaker: BreakerFactory, traces: Traces, otel: OpenTelemetryListener
) -> None:
    # GIVEN an open breaker (3 failures)
    breaker = make_breaker(listeners=[otel])
    for _ in range(3):
        traces.handler(lambda: breaker.call(fail))
    # WHEN the next call is rejected
    span = traces.handler(lambda: breaker.call(succeed))
    # THEN its decision event says reject in state open
    assert events(span) == [
        (
            "fleetbreaker.decision",
            {
                "fleetbreaker.breaker": "payment-api",
                "fleetbreaker.state": "open",
                "fleetbreaker.decision": "reject",
            },
        )
    ]


def test_a_trip_adds_a_transition_event_with_generation_and_reason(
    make_breaker: BreakerFactory, traces: Traces, otel: OpenTelemetryListener
) -> None:
    # GIVEN a breaker two failures away from its threshold of 3
    breaker = make_breaker(listeners=[otel])
    for _ in range(2):
        traces.handler(lambda: breaker.call(fail))
    # WHEN the third failure trips it
    span = traces.handler(lambda: breaker.call(fail))
    # THEN the span says so, naming the old and new state, the generation and the reason
    assert (
        "fleetbreaker.transition.closed_to_open",
        {
            "fleetbreaker.breaker": "payment-api",
            "fleetbreaker.from_state": "closed",
            "fleetbreaker.to_state": "open",
            "fleetbreaker.generation": 1,
            "fleetbreaker.reason": "failure_threshold",
        },
    ) in events(span)


def test_recovery_transitions_name_their_reasons(
    make_breaker: BreakerFactory, traces: Traces, otel: OpenTelemetryListener, clock: FakeClock
) -> None:
    # GIVEN an open breaker whose open window (10 s) has passed
    breaker = make_breaker(listeners=[otel])
    for _ in range(3):
        traces.handler(lambda: breaker.call(fail))
    clock.advance(11)
    # WHEN the probe succeeds
    span = traces.handler(lambda: breaker.call(succeed))
    # THEN both transitions are on the span, each with the next generation and its reason
    transitions = [(n, a) for n, a in events(span) if n.startswith("fleetbreaker.transition")]
    assert [
        (n, a["fleetbreaker.generation"], a["fleetbreaker.reason"]) for n, a in transitions
    ] == [
        ("fleetbreaker.transition.open_to_half_open", 2, "open_window_elapsed"),
        ("fleetbreaker.transition.half_open_to_closed", 3, "probe_succeeded"),
    ]


def test_an_operator_override_is_a_transition_with_reason_operator(
    make_breaker: BreakerFactory, traces: Traces, otel: OpenTelemetryListener
) -> None:
    breaker = make_breaker(listeners=[otel])
    # WHEN an operator forces the breaker open inside a traced request
    span = traces.handler(breaker.force_open)
    # THEN the transition says who moved it: an operator
    ((name, attributes),) = events(span)
    assert name == "fleetbreaker.transition.closed_to_forced_open"
    assert attributes["fleetbreaker.reason"] == "operator"


def test_each_store_operation_is_a_child_span_with_kind_and_outcome(
    make_breaker: BreakerFactory, traces: Traces, otel: OpenTelemetryListener
) -> None:
    # GIVEN a breaker on a MemoryStore
    breaker = make_breaker(listeners=[otel])
    # WHEN a failing call runs: one load, one record_failure
    handler = traces.handler(lambda: breaker.call(fail))
    # THEN each round trip is a CLIENT span under the handler's span, answered
    load = traces.span("fleetbreaker.store.load")
    failure = traces.span("fleetbreaker.store.record_failure")
    for span, operation in ((load, "load"), (failure, "record_failure")):
        assert span.parent is not None
        assert span.parent.span_id == handler.context.span_id
        assert span.kind is SpanKind.CLIENT
        assert dict(span.attributes or {}) == {
            "fleetbreaker.breaker": "payment-api",
            "fleetbreaker.store.operation": operation,
            "fleetbreaker.store.kind": "memory",
            "fleetbreaker.store.outcome": "answered",
        }
        assert span.status.status_code is StatusCode.UNSET


class HungStore(MemoryStore):
    """A store whose load hangs until the test releases it (a DynamoDB that never answers)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def load(self, name: str, now_ms: int) -> Any:
        self.release.wait(10)
        return super().load(name, now_ms)


def test_a_store_call_past_its_deadline_is_an_error_span_with_outcome_deadline(
    make_breaker: BreakerFactory, traces: Traces, otel: OpenTelemetryListener
) -> None:
    # GIVEN a store that hangs, and a breaker allowing each operation 50 ms
    store = HungStore()
    breaker = make_breaker(listeners=[otel], store=store, store_deadline_seconds=0.05)
    try:
        # WHEN a call needs the store
        traces.handler(lambda: breaker.call(succeed))
    finally:
        store.release.set()
    # THEN the load span ends at the deadline, as an error that records why
    span = traces.span("fleetbreaker.store.load")
    assert span.attributes is not None
    assert span.attributes["fleetbreaker.store.outcome"] == "deadline"
    assert span.attributes["fleetbreaker.store.kind"] == "hung"
    assert span.status.status_code is StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]
    assert span.events[0].attributes is not None
    assert span.events[0].attributes["exception.type"] == "fleetbreaker.errors.StoreDeadlineError"
    # AND the call itself went on, on local state
    assert breaker.degraded


def test_a_store_error_span_says_store_error(
    make_breaker: BreakerFactory, traces: Traces, otel: OpenTelemetryListener
) -> None:
    from .support import FlakyStore

    store = FlakyStore()
    store.down = True
    breaker = make_breaker(listeners=[otel], store=store)
    traces.handler(lambda: breaker.call(succeed))
    span = traces.span("fleetbreaker.store.load")
    assert span.attributes is not None
    assert span.attributes["fleetbreaker.store.outcome"] == "store_error"
    assert span.status.status_code is StatusCode.ERROR


def test_the_sdks_span_of_a_round_trip_nests_in_the_store_span(
    make_breaker: BreakerFactory, traces: Traces, otel: OpenTelemetryListener
) -> None:
    # GIVEN a store whose round trip opens a span of its own, as instrumented botocore does,
    # on the store's worker thread (a FlakyStore is not the package's MemoryStore: it runs
    # there, under the deadline)
    from .support import FlakyStore

    class Instrumented(FlakyStore):
        def load(self, name: str, now_ms: int) -> Any:
            with traces.tracer.start_as_current_span("DynamoDB.UpdateItem"):
                return super().load(name, now_ms)

    breaker = make_breaker(listeners=[otel], store=Instrumented())
    # WHEN a call loads the record
    traces.handler(lambda: breaker.call(succeed))
    # THEN the SDK's span is a child of fleetbreaker.store.load
    sdk = traces.span("DynamoDB.UpdateItem")
    store_span = traces.span("fleetbreaker.store.load")
    assert sdk.parent is not None
    assert sdk.parent.span_id == store_span.context.span_id


def test_outside_a_recording_span_nothing_is_recorded(
    make_breaker: BreakerFactory, traces: Traces, otel: OpenTelemetryListener
) -> None:
    # GIVEN no current span (code running outside any trace)
    breaker = make_breaker(listeners=[otel])
    # WHEN calls run, one trips the breaker
    for _ in range(3):
        with pytest.raises(Boom):
            breaker.call(fail)
    # THEN the listener made no spans of its own
    assert traces.names() == []


def test_a_shadow_would_reject_sets_the_attribute_and_an_event(
    make_breaker: BreakerFactory, traces: Traces, otel: OpenTelemetryListener
) -> None:
    # GIVEN a shadow breaker that is open
    breaker = make_breaker(listeners=[otel], mode="shadow")
    for _ in range(3):
        traces.handler(lambda: breaker.call(fail))
    # WHEN the next call runs (an enforcing breaker would have rejected it)
    span = traces.handler(lambda: breaker.call(succeed))
    # THEN the call was allowed, and the span says it would have been rejected
    assert span.attributes is not None
    assert span.attributes["fleetbreaker.would_reject"] is True
    names = [(n, a.get("fleetbreaker.decision")) for n, a in events(span)]
    assert names == [("fleetbreaker.decision", "allow"), ("fleetbreaker.would_reject", None)]
    (_, would) = events(span)[1]
    assert would["fleetbreaker.state"] == "open"
    assert would["fleetbreaker.would_reject"] is True
    assert would["fleetbreaker.retry_after_s"] == 10.0


# -- choosing OpenTelemetry or X-Ray --------------------------------------------------------

CHOOSE = """
import json, sys
setup = sys.argv[1]
if setup in ("sdk", "noop"):
    from opentelemetry import trace
if setup == "sdk":
    from opentelemetry.sdk.trace import TracerProvider
    trace.set_tracer_provider(TracerProvider())
if setup == "noop":
    trace.set_tracer_provider(trace.NoOpTracerProvider())
from fleetbreaker.observability import default_listeners
names = [type(listener).__name__ for listener in default_listeners(metrics=False)]
print(json.dumps({"listeners": names, "otel_imported": "opentelemetry" in sys.modules}))
"""


def choose(setup: str, **env: str) -> dict[str, Any]:
    clean = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT / "layer"), **env}
    done = subprocess.run(
        [sys.executable, "-c", CHOOSE, setup],
        capture_output=True,
        text=True,
        check=True,
        env=clean,
        timeout=60,
    )
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def test_with_a_configured_tracer_provider_the_function_traces_with_opentelemetry_only() -> None:
    # GIVEN a process whose tracer provider is an SDK one (as the ADOT layer sets it)
    # WHEN default_listeners() picks the tracer, even with X-Ray's trace header present
    answer = choose("sdk", _X_AMZN_TRACE_ID="Root=1-5759e988-bd862e3fe1be46a994272793")
    # THEN it is OpenTelemetry, and not X-Ray too
    assert answer["listeners"] == ["LoggingListener", "OpenTelemetryListener"]


def test_without_opentelemetry_configured_the_function_keeps_xray_and_imports_nothing() -> None:
    # GIVEN a process that never set up OpenTelemetry
    answer = choose("none")
    # THEN the X-Ray listener is chosen and OpenTelemetry is not even imported
    assert answer == {"listeners": ["LoggingListener", "TracingListener"], "otel_imported": False}


def test_the_apis_no_op_provider_does_not_count_as_configured() -> None:
    answer = choose("noop")
    assert answer["listeners"] == ["LoggingListener", "TracingListener"]


def test_a_provider_named_in_the_environment_is_found() -> None:
    # GIVEN OTEL_PYTHON_TRACER_PROVIDER names the SDK's provider and nothing imported the API
    answer = choose("none", OTEL_PYTHON_TRACER_PROVIDER="sdk_tracer_provider")
    # THEN OpenTelemetry is chosen
    assert answer["listeners"] == ["LoggingListener", "OpenTelemetryListener"]


def test_import_fleetbreaker_does_not_import_opentelemetry() -> None:
    code = (
        "import sys, fleetbreaker, fleetbreaker.tracing, fleetbreaker.observability; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT / "layer")},
        timeout=60,
    )
    assert done.stdout.strip() == "[]"
