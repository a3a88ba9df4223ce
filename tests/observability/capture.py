"""What the tracing tests capture: an OpenTelemetry provider whose finished spans stay in
memory, and the X-Ray entities a test emitter kept. Imported by the tests that trace only (the
OpenTelemetry SDK is not loaded for the others)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import suppress
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fleetbreaker import CircuitOpenError

from .support import Boom, CapturingEmitter

# A private X-Ray recorder and the emitter that keeps what it would send (conftest's `xray`).
Recorder = tuple[Any, CapturingEmitter]


class Traces:
    """A tracer provider whose finished spans stay in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests")

    def handler(self, fn: Any) -> ReadableSpan:
        """Run fn in a fresh ``handler`` span (as the ADOT wrapper does); return that span."""
        self.exporter.clear()
        with self.tracer.start_as_current_span("handler"), suppress(Boom, CircuitOpenError):
            fn()
        return self.span("handler")

    def span(self, name: str) -> ReadableSpan:
        (found,) = [s for s in self.exporter.get_finished_spans() if s.name == name]
        return found

    def names(self) -> list[str]:
        return [s.name for s in self.exporter.get_finished_spans()]


def walk(entity: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """An X-Ray entity as sent, then each of its subsegments, depth first."""
    yield entity
    for child in entity.get("subsegments", []):
        yield from walk(child)
