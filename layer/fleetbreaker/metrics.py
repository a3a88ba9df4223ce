"""CloudWatch metrics in Embedded Metric Format (EMF), written by Powertools for AWS Lambda.

:class:`MetricsListener` counts breaker events in memory and writes them as EMF documents when
it is flushed, normally once at the end of each invocation by :meth:`MetricsListener.log_metrics`
(or the module-level :func:`log_metrics` for the process-wide listener). A healthy protected
call adds nothing at all; a flush writes one document per breaker (and one per ``To`` value of
``Transition``), however many calls the invocation made.

Metrics (namespace ``POWERTOOLS_METRICS_NAMESPACE``, default ``FleetBreaker``; dimensions
``Breaker`` and ``service``, the latter from ``POWERTOOLS_SERVICE_NAME``):

- ``Transition`` (Count): state changes written by this container; extra dimension ``To``
- ``Trip`` (Count): of those, the ones into ``open``; extra dimension ``Reason``, the
  :class:`~fleetbreaker.record.TransitionReason` (``failure_threshold``, ``failure_rate``,
  ``slow_call_rate``, ``probe_failed``)
- ``Rejected`` (Count): calls rejected without running
- ``WouldReject`` (Count): shadow mode: calls an enforcing breaker would have rejected (they ran)
- ``Fallback`` (Count): rejected calls answered by the fallback
- ``FailureRecorded`` (Count): failed calls counted toward the threshold
- ``ProbeSucceeded``, ``ProbeFailed`` (Count): half-open probes and how they ended
- ``StoreError`` (Count): store round trips that failed; a failure of configuration (no such
  table, access denied, login refused) is also counted, every time, under the extra dimension
  ``Misconfiguration`` (its :class:`~fleetbreaker.errors.StoreMisconfiguredError` ``problem``:
  ``table_not_found``, ``wrong_key_schema``, ``access_denied``, ``authentication_refused``),
  which the core stack's ``StoreMisconfiguredAlarm`` watches
- ``Degraded`` (Count): switches to the local, per-container breaker
- ``StoreLatency`` (Milliseconds): each store round trip, one sample per call
- ``FailureRate``, ``SlowCallRate`` (Percent): the fleet's sliding window as this container's
  last report in the invocation saw it (rate policy, slow calls, quorum only); one sample per
  flush, so CloudWatch's ``Maximum`` is the worst any container saw

Why not the user's ``Metrics``
------------------------------
Powertools ``Metrics`` instances share one process-wide metric set with a single set of
dimension *values*, so a per-breaker ``Breaker`` dimension on it would overwrite the user's own
dimensions (or theirs ours). Each document here is built on a fresh ``EphemeralMetrics`` (not
shared) at flush time, so the user's ``@metrics.log_metrics`` and this flush never see each
other's data, in either decorator order.

Why counters and not one EMF value per event
--------------------------------------------
EMF allows a metric's value to be an array of up to 100 samples, and Powertools writes a
document as soon as one metric holds 100. Counting events here and writing one summed value
per flush keeps a storm of rejections to one document per breaker. CloudWatch's ``Sum`` is
the event count; ``SampleCount`` is the number of flushes, not of events. ``StoreLatency``
keeps one sample per store call so percentiles are real; when one breaker gathers 100
samples before a flush they are written at once (bounded memory, as Powertools does).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from fleetbreaker.errors import ConfigError
from fleetbreaker.events import BreakerListener

if TYPE_CHECKING:
    from fleetbreaker.errors import StoreMisconfiguredError
    from fleetbreaker.events import StateChange
    from fleetbreaker.record import State

P = ParamSpec("P")
R = TypeVar("R")

NAMESPACE_ENV = "POWERTOOLS_METRICS_NAMESPACE"
SERVICE_ENV = "POWERTOOLS_SERVICE_NAME"
DEFAULT_NAMESPACE = "FleetBreaker"
# Powertools Logger's name for a service nobody named; the dimension is always present so that
# alarms and dashboards can name the full dimension set.
DEFAULT_SERVICE = "service_undefined"
# EMF: a metric's value array holds at most 100 samples per document.
MAX_VALUES_PER_DOCUMENT = 100

TRANSITION = "Transition"
TRIP = "Trip"
REJECTED = "Rejected"
WOULD_REJECT = "WouldReject"
FALLBACK = "Fallback"
FAILURE_RECORDED = "FailureRecorded"
PROBE_SUCCEEDED = "ProbeSucceeded"
PROBE_FAILED = "ProbeFailed"
STORE_ERROR = "StoreError"
DEGRADED = "Degraded"
STORE_LATENCY = "StoreLatency"
FAILURE_RATE = "FailureRate"
SLOW_CALL_RATE = "SlowCallRate"

# StoreError's extra dimension for a store misconfigured, not out of reach (template.yaml's
# StoreMisconfiguredAlarm selects it).
MISCONFIGURATION = "Misconfiguration"

COUNT = "Count"
MILLISECONDS = "Milliseconds"
PERCENT = "Percent"

log = logging.getLogger("fleetbreaker")

# One EMF document's dimension values, in order: (("Breaker", "payment-api"), ("To", "open")).
DimensionKey = tuple[tuple[str, str], ...]


@dataclass
class _Pending:
    counts: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    rates: dict[str, float] = field(default_factory=dict)  # latest value, in percent

    def __bool__(self) -> bool:
        return bool(self.counts) or bool(self.latencies_ms) or bool(self.rates)


class MetricsListener(BreakerListener):
    """Aggregates breaker events and writes them as CloudWatch EMF on :meth:`flush`.

    Parameters
    ----------
    namespace:
        CloudWatch namespace; defaults to ``POWERTOOLS_METRICS_NAMESPACE``, then
        ``"FleetBreaker"``.
    service:
        Value of the ``service`` dimension; defaults to ``POWERTOOLS_SERVICE_NAME``, then
        ``"service_undefined"``.

    Example
    -------
    >>> metrics = MetricsListener()
    >>> breaker = CircuitBreaker(
    ...     "payment-api", store=MemoryStore(), listeners=[LoggingListener(), metrics]
    ... )
    >>> @metrics.log_metrics
    ... def lambda_handler(event, context): ...
    """

    def __init__(self, namespace: str | None = None, service: str | None = None) -> None:
        try:
            # Imported here, at container init, rather than on the first flush; and not at all
            # by `import fleetbreaker`.
            from aws_lambda_powertools.metrics import EphemeralMetrics
        except ImportError as exc:  # pragma: no cover - the layer and dev extras ship it
            raise ConfigError(
                "fleetbreaker metrics need aws-lambda-powertools: "
                "from a clone of fleetbreaker, pip install '.[observability]'"
            ) from exc
        self._provider_class = EphemeralMetrics
        self.namespace = namespace or os.environ.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE
        self.service = service or os.environ.get(SERVICE_ENV) or DEFAULT_SERVICE
        self._pending: dict[DimensionKey, _Pending] = {}
        self._lock = threading.Lock()
        _listeners.add(self)

    def __repr__(self) -> str:
        return f"MetricsListener(namespace={self.namespace!r}, service={self.service!r})"

    # -- hooks -----------------------------------------------------------------------------

    def on_state_change(self, name: str, change: StateChange) -> None:
        self._count((("Breaker", name), ("To", change.after.value)), TRANSITION)
        # Why the breaker opened, as its own count: the dashboards' Transition keeps its
        # dimensions (Breaker, To), and a trip on noise reads apart from a real outage.
        if change.after.value == "open":
            self._count((("Breaker", name), ("Reason", change.reason.value)), TRIP)

    def on_rejected(self, name: str, state: State, retry_after: float) -> None:
        self._count((("Breaker", name),), REJECTED)

    def on_would_reject(self, name: str, state: State, retry_after: float) -> None:
        self._count((("Breaker", name),), WOULD_REJECT)

    def on_fallback(self, name: str, state: State) -> None:
        self._count((("Breaker", name),), FALLBACK)

    def on_failure_recorded(self, name: str, state: State) -> None:
        self._count((("Breaker", name),), FAILURE_RECORDED)

    def on_probe(self, name: str, success: bool, applied: bool) -> None:
        # Counted whether or not the lease was still held: the metric is about the dependency.
        self._count((("Breaker", name),), PROBE_SUCCEEDED if success else PROBE_FAILED)

    def on_store_error(self, name: str, operation: str, error: BaseException) -> None:
        self._count((("Breaker", name),), STORE_ERROR)

    def on_store_misconfigured(
        self, name: str, operation: str, error: StoreMisconfiguredError
    ) -> None:
        # A dimension of its own: an alarm on it fires for a broken rollout, not for weather.
        self._count((("Breaker", name), (MISCONFIGURATION, error.problem)), STORE_ERROR)

    def on_degraded(self, name: str, reason: str) -> None:
        self._count((("Breaker", name),), DEGRADED)

    def on_window(self, name: str, calls: int, failure_rate: float, slow_call_rate: float) -> None:
        key: DimensionKey = (("Breaker", name),)
        with self._lock:
            rates = self._pending.setdefault(key, _Pending()).rates
            rates[FAILURE_RATE] = round(failure_rate * 100, 3)
            rates[SLOW_CALL_RATE] = round(slow_call_rate * 100, 3)

    def on_store_call(self, name: str, operation: str, elapsed_ms: float, ok: bool) -> None:
        key: DimensionKey = (("Breaker", name),)
        with self._lock:
            pending = self._pending.setdefault(key, _Pending())
            pending.latencies_ms.append(round(elapsed_ms, 3))
            if len(pending.latencies_ms) < MAX_VALUES_PER_DOCUMENT:
                return
            del self._pending[key]
        self._write(key, pending)

    # -- flushing --------------------------------------------------------------------------

    def flush(self) -> int:
        """Write everything gathered since the last flush; return the number of EMF documents.

        Never raises: a failure to serialize is logged, so that a flush at the end of a handler
        cannot replace the handler's own result or exception.
        """
        with self._lock:
            pending, self._pending = self._pending, {}
        written = 0
        for key, metrics in pending.items():
            written += self._write(key, metrics)
        return written

    @overload
    def log_metrics(self, handler: Callable[P, R], /) -> Callable[P, R]: ...

    @overload
    def log_metrics(
        self, handler: None = None, /
    ) -> Callable[[Callable[P, R]], Callable[P, R]]: ...

    def log_metrics(self, handler: Callable[..., Any] | None = None, /) -> Any:
        """Decorator: flush these metrics when the handler returns or raises.

        Works as ``@metrics.log_metrics`` and ``@metrics.log_metrics()``, above or below
        Powertools' own ``@metrics.log_metrics``.
        """
        if handler is None:
            return self.log_metrics
        return _flushing(handler, self.flush)

    def restart(self) -> None:
        """Drop what is gathered, unwritten (after a restored snapshot).

        What the buffer holds then was gathered by the snapshot's process, and was written
        before the snapshot if :func:`fleetbreaker.before_snapshot` ran: every restored
        environment writing it again would count each of those events once per environment.
        The lock is new too (a thread that held it may be gone).
        """
        self._lock = threading.Lock()
        self._pending = {}

    @property
    def pending_documents(self) -> int:
        """How many EMF documents the next flush would write (at least)."""
        with self._lock:
            return sum(1 for metrics in self._pending.values() if metrics)

    # -- internals -------------------------------------------------------------------------

    def _count(self, key: DimensionKey, metric: str) -> None:
        with self._lock:
            self._pending.setdefault(key, _Pending()).counts[metric] += 1

    def _write(self, key: DimensionKey, pending: _Pending) -> int:
        if not pending:
            return 0
        try:
            provider = self._provider_class(namespace=self.namespace, service=self.service)
            for dimension, value in key:
                provider.add_dimension(name=dimension, value=value)
            for metric, count in sorted(pending.counts.items()):
                provider.add_metric(name=metric, unit=COUNT, value=count)
            for sample in pending.latencies_ms:
                provider.add_metric(name=STORE_LATENCY, unit=MILLISECONDS, value=sample)
            for metric, percent in sorted(pending.rates.items()):
                provider.add_metric(name=metric, unit=PERCENT, value=percent)
            # Powertools writes a document by itself when a metric reaches 100 values; flushing
            # an emptied set would only warn.
            if provider.metric_set:
                provider.flush_metrics()
        except Exception:
            log.exception("fleetbreaker: could not write metrics for %s", dict(key))
            return 0
        return 1


def _flushing(handler: Callable[P, R], flush: Callable[[], int]) -> Callable[P, R]:
    @functools.wraps(handler)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return handler(*args, **kwargs)
        finally:
            flush()

    return wrapper


_default: MetricsListener | None = None
_default_lock = threading.Lock()
# Every listener of the process, the default one included (weakly: it keeps none alive), for
# the snapshot hooks (fleetbreaker.restore).
_listeners: weakref.WeakSet[MetricsListener] = weakref.WeakSet()


def flush_every_listener() -> int:
    """Flush every :class:`MetricsListener` of the process (before a snapshot); returns the
    number of EMF documents written."""
    return sum(listener.flush() for listener in list(_listeners))


def restart_every_listener() -> None:
    """Empty every :class:`MetricsListener`'s buffer (after a restored snapshot)."""
    for listener in list(_listeners):
        listener.restart()


def default_metrics() -> MetricsListener:
    """The process-wide :class:`MetricsListener` that :func:`log_metrics` flushes."""
    global _default
    with _default_lock:
        if _default is None:
            _default = MetricsListener()
        return _default


def flush_metrics() -> int:
    """Flush the process-wide listener now; returns the number of EMF documents written."""
    return default_metrics().flush()


@overload
def log_metrics(handler: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def log_metrics(handler: None = None, /) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def log_metrics(handler: Callable[..., Any] | None = None, /) -> Any:
    """Decorator for a Lambda handler: flush the process-wide breaker metrics at its end.

    Example
    -------
    >>> from fleetbreaker.observability import default_listeners, log_metrics
    >>> breaker = CircuitBreaker(
    ...     "payment-api", store=MemoryStore(), listeners=default_listeners()
    ... )
    >>> @log_metrics
    ... def lambda_handler(event, context): ...
    """
    if handler is None:
        return log_metrics
    return _flushing(handler, flush_metrics)
