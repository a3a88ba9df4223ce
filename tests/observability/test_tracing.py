"""X-Ray annotations and store subsegments, captured in-process by a test emitter."""

from __future__ import annotations

from typing import Any

import pytest

from fleetbreaker import CircuitOpenError, MemoryStore
from fleetbreaker.tracing import TracingListener, tracing_active

from .capture import Recorder, walk
from .support import Boom, BreakerFactory, CapturingEmitter, FakeClock, FlakyStore, fail, succeed


def annotations(entity: dict[str, Any]) -> dict[str, Any]:
    return dict(entity.get("annotations", {}))


def subsegment_names(segment: dict[str, Any]) -> list[str]:
    return [e["name"] for e in walk(segment) if e is not segment]


def traced_call(xray: Recorder, fn: Any) -> dict[str, Any]:
    """Run fn inside a fresh segment; return the segment as the emitter received it."""
    recorder, emitter = xray
    emitter.sent.clear()
    recorder.begin_segment("handler")
    try:
        fn()
    except (Boom, CircuitOpenError):
        pass
    finally:
        recorder.end_segment()
    (segment,) = emitter.sent
    return segment


@pytest.fixture
def traced(make_breaker: BreakerFactory, xray: Recorder) -> Any:
    recorder, _ = xray
    return make_breaker(listeners=[TracingListener(enabled=True, recorder=recorder)])


def test_allow_is_annotated_and_the_store_read_has_a_subsegment(
    traced: Any, xray: Recorder
) -> None:
    # WHEN a healthy call runs in a traced request
    segment = traced_call(xray, lambda: traced.call(succeed))
    # THEN the segment carries the decision
    assert annotations(segment) == {
        "circuit_breaker": "payment-api",
        "circuit_state": "closed",
        "circuit_decision": "allow",
    }
    # AND the store read has its own subsegment, annotated with the breaker
    (load,) = [e for e in walk(segment) if e["name"] == "fleetbreaker.load"]
    assert annotations(load) == {"circuit_breaker": "payment-api"}
    assert not load.get("fault")


def test_reject_is_annotated(traced: Any, xray: Recorder) -> None:
    for _ in range(3):
        with pytest.raises(Boom):
            traced.call(fail)
    segment = traced_call(xray, lambda: traced.call(succeed))
    assert annotations(segment) == {
        "circuit_breaker": "payment-api",
        "circuit_state": "open",
        "circuit_decision": "reject",
    }
    # a rejection answered from the cache touches no store
    assert subsegment_names(segment) == []


def test_probe_is_annotated_with_claim_and_settle_subsegments(
    traced: Any, xray: Recorder, clock: FakeClock
) -> None:
    for _ in range(3):
        with pytest.raises(Boom):
            traced.call(fail)
    clock.advance(11)
    segment = traced_call(xray, lambda: traced.call(succeed))
    assert annotations(segment) == {
        "circuit_breaker": "payment-api",
        "circuit_state": "half_open",
        "circuit_decision": "probe",
    }
    assert subsegment_names(segment) == [
        "fleetbreaker.load",
        "fleetbreaker.claim_probe",
        "fleetbreaker.settle_probe",
    ]


def test_annotations_go_on_the_current_subsegment(traced: Any, xray: Recorder) -> None:
    # GIVEN a handler subsegment, as Powertools' @tracer.capture_lambda_handler opens
    recorder, emitter = xray
    recorder.begin_segment("function")
    recorder.begin_subsegment("## lambda_handler")
    traced.call(succeed)
    recorder.end_subsegment()
    recorder.end_segment()
    (segment,) = emitter.sent
    (handler,) = segment["subsegments"]
    # THEN the annotations are on it, and the store subsegment is nested inside it
    assert annotations(handler)["circuit_decision"] == "allow"
    assert "circuit_decision" not in annotations(segment)
    assert [s["name"] for s in handler["subsegments"]] == ["fleetbreaker.load"]


def test_a_failed_store_call_is_a_fault(make_breaker: BreakerFactory, xray: Recorder) -> None:
    recorder, _ = xray
    store = FlakyStore()
    store.down = True
    breaker = make_breaker(
        listeners=[TracingListener(enabled=True, recorder=recorder)], store=store
    )
    segment = traced_call(xray, lambda: breaker.call(succeed))
    (load,) = [e for e in walk(segment) if e["name"] == "fleetbreaker.load"]
    assert load["fault"] is True
    assert annotations(segment)["circuit_decision"] == "allow"


def test_the_sdk_subsegment_of_a_store_call_nests_under_the_breakers_one(
    make_breaker: BreakerFactory, xray: Recorder
) -> None:
    # GIVEN a store that opens its own subsegment, as botocore's X-Ray patch does, on the
    # worker thread the breaker runs store calls on (to bound them by the deadline)
    recorder, _ = xray

    class SdkTracedStore(MemoryStore):
        def load(self, name: str, now_ms: int) -> Any:
            with recorder.in_subsegment("DynamoDB"):
                return super().load(name, now_ms)

    breaker = make_breaker(
        listeners=[TracingListener(enabled=True, recorder=recorder)], store=SdkTracedStore()
    )

    # WHEN a call reads the store in a traced request
    segment = traced_call(xray, lambda: breaker.call(succeed))

    # THEN the SDK's subsegment is a child of fleetbreaker.load
    (load,) = [e for e in walk(segment) if e["name"] == "fleetbreaker.load"]
    assert [child["name"] for child in load.get("subsegments", [])] == ["DynamoDB"]


def test_no_segment_raises_nothing(traced: Any, xray: Recorder) -> None:
    # GIVEN tracing forced on, no open segment, and the SDK told to raise on missing context
    recorder, emitter = xray
    assert recorder.context.context_missing == "RUNTIME_ERROR"
    # WHEN calls run (allow, store read, failure write)
    assert traced.call(succeed) == "ok"
    with pytest.raises(Boom):
        traced.call(fail)
    # THEN nothing raised from tracing and nothing was sent
    assert emitter.sent == []


def test_in_lambda_the_facade_segment_gets_a_short_annotated_subsegment(
    make_breaker: BreakerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN Lambda's environment: a trace header and the SDK's Lambda context, whose segment
    # is a read-only facade
    from aws_xray_sdk.core.lambda_launcher import LambdaContext
    from aws_xray_sdk.core.recorder import AWSXRayRecorder

    monkeypatch.setenv("LAMBDA_TASK_ROOT", "/var/task")
    monkeypatch.setenv(
        "_X_AMZN_TRACE_ID",
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
    )
    emitter = CapturingEmitter()
    recorder = AWSXRayRecorder()
    recorder.configure(
        sampling=False, emitter=emitter, context=LambdaContext(), streaming_threshold=0
    )
    breaker = make_breaker(listeners=[TracingListener(enabled=True, recorder=recorder)])
    # WHEN a call runs with no handler subsegment open
    assert breaker.call(succeed) == "ok"
    # THEN the decision arrives as its own subsegment (the facade cannot be annotated)
    by_name = {e["name"]: e for e in emitter.sent}
    assert annotations(by_name["fleetbreaker"]) == {
        "circuit_breaker": "payment-api",
        "circuit_state": "closed",
        "circuit_decision": "allow",
    }
    assert "fleetbreaker.load" in by_name


def test_lambda_init_phase_opens_no_subsegments(
    make_breaker: BreakerFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN Lambda before its first invocation: no trace header yet
    from aws_xray_sdk.core.lambda_launcher import LambdaContext
    from aws_xray_sdk.core.recorder import AWSXRayRecorder

    monkeypatch.setenv("LAMBDA_TASK_ROOT", "/var/task")
    emitter = CapturingEmitter()
    recorder = AWSXRayRecorder()
    recorder.configure(sampling=False, emitter=emitter, context=LambdaContext())
    breaker = make_breaker(listeners=[TracingListener(enabled=True, recorder=recorder)])
    # WHEN the breaker is used at module level
    assert breaker.call(succeed) == "ok"
    # THEN nothing is sent and the SDK had nothing to warn about
    assert emitter.sent == []
    assert not [r for r in caplog.records if r.name.startswith("aws_xray_sdk")]


def test_disabled_listener_never_touches_the_recorder(make_breaker: BreakerFactory) -> None:
    class Exploding:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"recorder.{name} used while tracing is off")

    listener = TracingListener(enabled=False, recorder=Exploding())
    breaker = make_breaker(listeners=[listener])
    assert breaker.call(succeed) == "ok"
    assert listener.active is False


@pytest.mark.parametrize(
    ("env", "active"),
    [
        ({}, False),
        ({"_X_AMZN_TRACE_ID": "Root=1-a-b;Parent=c;Sampled=1"}, True),
        ({"AWS_XRAY_DAEMON_ADDRESS": "169.254.79.129:2000"}, True),
        ({"AWS_XRAY_DAEMON_ADDRESS": "x:2000", "POWERTOOLS_TRACE_DISABLED": "true"}, False),
        ({"AWS_XRAY_DAEMON_ADDRESS": "x:2000", "POWERTOOLS_TRACE_DISABLED": "1"}, False),
        ({"AWS_XRAY_DAEMON_ADDRESS": "x:2000", "POWERTOOLS_TRACE_DISABLED": "false"}, True),
        ({"AWS_XRAY_DAEMON_ADDRESS": "x:2000", "AWS_XRAY_SDK_ENABLED": "false"}, False),
        ({"AWS_XRAY_DAEMON_ADDRESS": "x:2000", "AWS_SAM_LOCAL": "true"}, False),
    ],
)
def test_tracing_active_reads_the_environment(env: dict[str, str], active: bool) -> None:
    assert tracing_active(env) is active


def test_a_shadow_would_reject_is_annotated(make_breaker: BreakerFactory, xray: Recorder) -> None:
    # GIVEN an open shadow breaker on a traced function
    recorder, _ = xray
    breaker = make_breaker(
        listeners=[TracingListener(enabled=True, recorder=recorder)], mode="shadow"
    )
    for _ in range(3):
        traced_call(xray, lambda: breaker.call(fail))
    # WHEN a call runs that enforce mode would have rejected
    segment = traced_call(xray, lambda: breaker.call(succeed))
    # THEN the call was allowed and the trace says it would have been rejected
    assert annotations(segment) == {
        "circuit_breaker": "payment-api",
        "circuit_state": "open",
        "circuit_decision": "allow",
        "circuit_would_reject": True,
    }
