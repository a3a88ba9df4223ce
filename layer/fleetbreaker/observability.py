"""One call for logs, CloudWatch metrics and tracing (X-Ray or OpenTelemetry) of every breaker.

Example
-------
>>> from aws_lambda_powertools import Logger
>>> from fleetbreaker import CircuitBreaker, MemoryStore
>>> from fleetbreaker.observability import default_listeners, log_metrics
>>> logger = Logger()
>>> breaker = CircuitBreaker(
...     "payment-api", store=MemoryStore(), listeners=default_listeners(logger)
... )
>>> @log_metrics
... def lambda_handler(event, context): ...

Every breaker built with ``default_listeners()`` shares the process-wide
:class:`~fleetbreaker.metrics.MetricsListener`, so the one ``@log_metrics`` on the handler
flushes them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetbreaker.events import BreakerListener, LoggerLike, LoggingListener
from fleetbreaker.metrics import MetricsListener, default_metrics, flush_metrics, log_metrics
from fleetbreaker.tracing import (
    OpenTelemetryListener,
    TracingListener,
    opentelemetry_configured,
    tracing_active,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "MetricsListener",
    "OpenTelemetryListener",
    "TracingListener",
    "default_listeners",
    "default_metrics",
    "flush_metrics",
    "log_metrics",
    "opentelemetry_configured",
    "tracing_active",
]

_tracing: TracingListener | None = None
_otel: OpenTelemetryListener | None = None


def default_listeners(
    logger: LoggerLike | None = None,
    *,
    metrics: bool = True,
    tracing: bool = True,
    extra: Sequence[BreakerListener] = (),
) -> list[BreakerListener]:
    """Listeners for structured logs, EMF metrics and tracing, ready for ``CircuitBreaker``.

    Parameters
    ----------
    logger:
        Your Powertools ``Logger`` (its JSON output, service and request id then apply to the
        breaker's records too) or a stdlib logger; defaults to the ``"fleetbreaker"`` logger.
    metrics:
        Add the process-wide :class:`MetricsListener`; flush it with :func:`log_metrics`.
    tracing:
        Add one tracing listener, chosen now: an :class:`OpenTelemetryListener` when
        :func:`opentelemetry_configured` (the ADOT layer, or your own SDK setup, has set a
        tracer provider), else a :class:`TracingListener` for the X-Ray SDK, which stays
        inert unless the process is traced. Never both: one decision is traced once. Set
        your tracer provider before calling this (the ADOT layer does it before your
        module is imported).
    extra:
        More listeners to append.
    """
    global _tracing, _otel
    listeners: list[BreakerListener] = [LoggingListener(logger)]
    if metrics:
        listeners.append(default_metrics())
    if tracing and opentelemetry_configured():
        if _otel is None:
            _otel = OpenTelemetryListener()
        listeners.append(_otel)
    elif tracing:
        if _tracing is None:
            _tracing = TracingListener()
        listeners.append(_tracing)
    listeners.extend(extra)
    return listeners
