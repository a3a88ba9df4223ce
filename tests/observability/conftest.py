"""Fixtures for the observability tests: a hand-moved clock, a clean Powertools/X-Ray
environment, and an in-process X-Ray recorder whose emitter keeps what it would send."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, MemoryStore
from fleetbreaker.events import BreakerListener

from .support import BreakerFactory, CapturingEmitter, FakeClock

# Variables that change what the listeners do; every test starts without them.
OBSERVABILITY_ENV = (
    "POWERTOOLS_METRICS_NAMESPACE",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_DISABLED",
    "POWERTOOLS_DEV",
    "POWERTOOLS_TRACE_DISABLED",
    "_X_AMZN_TRACE_ID",
    "AWS_XRAY_DAEMON_ADDRESS",
    "AWS_XRAY_CONTEXT_MISSING",
    "AWS_XRAY_SDK_ENABLED",
    "AWS_SAM_LOCAL",
    "LAMBDA_TASK_ROOT",
    "AWS_LAMBDA_FUNCTION_NAME",
)


@pytest.fixture(autouse=True)
def clean_observability_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in OBSERVABILITY_ENV:
        monkeypatch.delenv(name, raising=False)
    # Powertools' Tracer, created at import by a function module outside Lambda, switches the
    # X-Ray SDK off process-wide; these tests need it on whatever ran before them. Only touch
    # the SDK if something already imported it: some tests prove it stays unimported.
    import sys

    if "aws_xray_sdk" not in sys.modules:
        yield
        return
    from aws_xray_sdk import global_sdk_config

    was_enabled = global_sdk_config.sdk_enabled()
    global_sdk_config.set_sdk_enabled(True)
    yield
    global_sdk_config.set_sdk_enabled(was_enabled)


@pytest.fixture
def make_breaker(clock: FakeClock) -> BreakerFactory:
    """A breaker on a MemoryStore driven by the fake clock, with the given listeners."""

    def make(
        name: str = "payment-api",
        listeners: list[BreakerListener] | None = None,
        store: Any = None,
        **config: Any,
    ) -> CircuitBreaker:
        settings: dict[str, Any] = {
            "failure_threshold": 3,
            "recovery_timeout": 10,
            "recovery_jitter": 0.0,
        }
        settings.update(config)
        return CircuitBreaker(
            name,
            store=store if store is not None else MemoryStore(),
            config=BreakerConfig(**settings),
            listeners=listeners if listeners is not None else [],
            clock=clock,
            rng=random.Random(7),
        )

    return make


@pytest.fixture
def xray() -> Iterator[tuple[Any, CapturingEmitter]]:
    """A private X-Ray recorder (sampling off: every segment is kept) and its emitter."""
    from aws_xray_sdk.core.context import Context
    from aws_xray_sdk.core.recorder import AWSXRayRecorder

    recorder = AWSXRayRecorder()
    emitter = CapturingEmitter()
    recorder.configure(
        sampling=False,
        emitter=emitter,
        context=Context(context_missing="RUNTIME_ERROR"),
        plugins=(),
        streaming_threshold=1000,
    )
    yield recorder, emitter
    recorder.clear_trace_entities()


@pytest.fixture
def traces() -> Iterator[Any]:
    """An OpenTelemetry provider whose finished spans stay in memory (capture.Traces)."""
    from .capture import Traces

    traces = Traces()
    yield traces
    traces.provider.shutdown()
