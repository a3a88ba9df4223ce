"""A store error that quotes a secret (a client library's message holding its URL, or the
IAM token it sent) reaches no log line, metric or trace: each listener redacts what it keeps.

On a MemoryStore whose calls fail with such messages (the real Redis paths are in
tests/redis/test_secrets.py).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from fleetbreaker.events import LoggingListener
from fleetbreaker.metrics import MetricsListener
from fleetbreaker.tracing import OpenTelemetryListener, TracingListener

from .capture import Recorder, Traces
from .support import BreakerFactory, FlakyStore, succeed

PASSWORD = "hunter2-7c1e"
SIGNATURE = "4f1d2a9be0c3"
TOKEN = (
    "cache/?Action=connect&User=app&X-Amz-Credential=AKIDLEAKED%2F20260101%2Feu-west-1"
    f"%2Felasticache%2Faws4_request&X-Amz-Security-Token=SESSIONLEAK&X-Amz-Signature={SIGNATURE}"
)


class QuotingStore(FlakyStore):
    """A store whose client fails with a message quoting its URL and the token it sent."""

    def load(self, name: str, now_ms: int) -> Any:
        raise RuntimeError(
            f"cannot reach rediss://app:{PASSWORD}@cache.example.com:6379/0 with AUTH app {TOKEN}"
        )


def test_a_secret_in_a_store_error_reaches_no_output(
    make_breaker: BreakerFactory,
    xray: Recorder,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN a breaker with every listener, on a store whose error quotes secrets
    traces = Traces()
    recorder, emitter = xray
    metrics = MetricsListener(namespace="Test", service="secrets")
    listeners = [
        LoggingListener(),
        metrics,
        OpenTelemetryListener(tracer_provider=traces.provider),
        TracingListener(enabled=True, recorder=recorder),
    ]
    breaker = make_breaker(listeners=listeners, store=QuotingStore())

    # WHEN a traced call runs and the store fails
    with caplog.at_level(logging.INFO, logger="fleetbreaker"):
        recorder.begin_segment("handler")
        with traces.tracer.start_as_current_span("handler"):
            breaker.call(succeed)
        recorder.end_segment()
    metrics.flush()

    # THEN the log line, its fields, the EMF, the span and the subsegment tell of the failure
    logs = [r.getMessage() for r in caplog.records]
    fields = [json.dumps(vars(r), default=str) for r in caplog.records]
    spans = [s.to_json() for s in traces.exporter.get_finished_spans()]
    everything = "\n".join(
        [*logs, *fields, capsys.readouterr().out, *spans, *map(str, emitter.sent)]
    )
    assert "cannot reach rediss://app:***@cache.example.com:6379/0" in everything
    assert "X-Amz-Signature=***" in everything
    # AND none holds a secret
    for secret in (PASSWORD, SIGNATURE, "SESSIONLEAK", "AKIDLEAKED"):
        assert secret not in everything, secret
    traces.provider.shutdown()
