"""One call for logs, CloudWatch metrics and X-Ray tracing of every breaker in a function.

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
from fleetbreaker.tracing import TracingListener, tracing_active

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "MetricsListener",
    "TracingListener",
    "default_listeners",
    "default_metrics",
    "flush_metrics",
    "log_metrics",
    "tracing_active",
]

_tracing: TracingListener | None = None


def default_listeners(
    logger: LoggerLike | None = None,
    *,
    metrics: bool = True,
    tracing: bool = True,
    extra: Sequence[BreakerListener] = (),
) -> list[BreakerListener]:
    """Listeners for structured logs, EMF metrics and X-Ray, ready for ``CircuitBreaker``.

    Parameters
    ----------
    logger:
        Your Powertools ``Logger`` (its JSON output, service and request id then apply to the
        breaker's records too) or a stdlib logger; defaults to the ``"fleetbreaker"`` logger.
    metrics:
        Add the process-wide :class:`MetricsListener`; flush it with :func:`log_metrics`.
    tracing:
        Add a :class:`TracingListener`; it stays inert unless the process is traced.
    extra:
        More listeners to append.
    """
    global _tracing
    listeners: list[BreakerListener] = [LoggingListener(logger)]
    if metrics:
        listeners.append(default_metrics())
    if tracing:
        if _tracing is None:
            _tracing = TracingListener()
        listeners.append(_tracing)
    listeners.extend(extra)
    return listeners
