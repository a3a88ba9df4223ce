"""AWS X-Ray: annotations on each breaker decision and a subsegment around each store call.

:class:`TracingListener` is inert unless the process is traced: it imports ``aws_xray_sdk``
on its first event, and only when :func:`tracing_active` says so (or it was built with
``enabled=True``). Untraced, a hook costs one attribute check and the SDK is never imported.

Annotations (indexed, usable in X-Ray filter expressions such as
``annotation.circuit_decision = "reject"``) go on the current subsegment, for example the
``## lambda_handler`` subsegment of Powertools' ``@tracer.capture_lambda_handler``:

- ``circuit_breaker``: the breaker's name
- ``circuit_state``: the state the decision was made in (``closed``, ``open``, ``half_open``...)
- ``circuit_decision``: ``allow``, ``probe`` or ``reject``
- ``circuit_would_reject``: ``true`` on a shadow breaker's call that an enforcing breaker would
  have rejected (it ran: ``circuit_decision`` is ``allow``)

Lambda's own segment cannot be annotated (the SDK holds it as a read-only facade); when there
is no subsegment to annotate, the annotations go on a short ``fleetbreaker`` subsegment of
their own. When one subsegment sees several decisions, the last one's values stay.

Each store round trip gets a subsegment ``fleetbreaker.<operation>`` (``load``,
``record_failure``, ``claim_probe``, ``settle_probe``) annotated with ``circuit_breaker``
and flagged as a fault when the call failed. The AWS SDK's own subsegment (when botocore is
patched) nests inside it.

An awaited call (the asyncio driver) sends its store requests from worker threads, where the
SDK's context holds nothing of the caller's. :meth:`TracingListener.thread_handoff` carries
the caller's current entity there, so the store subsegments nest under it as on the sync
path: a context kept per thread (the SDK's default; Lambda's ``LambdaContext``) is given that
entity for the request and left empty after it (the executor reuses its threads); under
``AsyncContext``, which keeps entities per asyncio task and answers on a worker thread with
whatever task the loop runs, the subsegment is attached to the entity directly and the
context is never touched off the loop's thread.

:class:`OpenTelemetryListener` does the same for OpenTelemetry (the ADOT Lambda layer, or any
OpenTelemetry SDK): events on the caller's current span and a child span per store round trip.
It needs only ``opentelemetry-api`` (from a clone of fleetbreaker, ``pip install '.[otel]'``),
imported when the listener is built, never by ``import fleetbreaker``.
:func:`opentelemetry_configured` is the rule
:func:`~fleetbreaker.observability.default_listeners` uses to pick one of the two: a function
never gets both for one decision.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fleetbreaker.events import BreakerListener
from fleetbreaker.stores.deadline import store_call_wrapper

if TYPE_CHECKING:
    from fleetbreaker.events import StateChange
    from fleetbreaker.record import Decision, State

TRACE_HEADER_ENV = "_X_AMZN_TRACE_ID"
DAEMON_ADDRESS_ENV = "AWS_XRAY_DAEMON_ADDRESS"
TRACE_DISABLED_ENV = "POWERTOOLS_TRACE_DISABLED"
SDK_ENABLED_ENV = "AWS_XRAY_SDK_ENABLED"
SAM_LOCAL_ENV = "AWS_SAM_LOCAL"
LAMBDA_TASK_ROOT_ENV = "LAMBDA_TASK_ROOT"

ANNOTATION_BREAKER = "circuit_breaker"
ANNOTATION_STATE = "circuit_state"
ANNOTATION_DECISION = "circuit_decision"
ANNOTATION_WOULD_REJECT = "circuit_would_reject"
SUBSEGMENT_PREFIX = "fleetbreaker"

# OpenTelemetry: attribute keys (on events and spans), event and span names.
OTEL_BREAKER = "fleetbreaker.breaker"
OTEL_STATE = "fleetbreaker.state"
OTEL_DECISION = "fleetbreaker.decision"
OTEL_WOULD_REJECT = "fleetbreaker.would_reject"
OTEL_RETRY_AFTER = "fleetbreaker.retry_after_s"
OTEL_FROM_STATE = "fleetbreaker.from_state"
OTEL_TO_STATE = "fleetbreaker.to_state"
OTEL_GENERATION = "fleetbreaker.generation"
OTEL_REASON = "fleetbreaker.reason"
OTEL_OPERATION = "fleetbreaker.store.operation"
OTEL_STORE = "fleetbreaker.store.kind"
OTEL_OUTCOME = "fleetbreaker.store.outcome"
OTEL_DECISION_EVENT = "fleetbreaker.decision"
OTEL_WOULD_REJECT_EVENT = "fleetbreaker.would_reject"
OTEL_TRANSITION_EVENT = "fleetbreaker.transition"  # + ".<from>_to_<to>"
OTEL_STORE_SPAN = "fleetbreaker.store"  # + ".<operation>"
# Read by the OpenTelemetry API itself to load a tracer provider from an entry point.
OTEL_PROVIDER_ENV = "OTEL_PYTHON_TRACER_PROVIDER"
# Decision attribute sets kept per listener: 5 states x 3 decisions per breaker name, so this
# holds over a hundred breakers; past it, the attributes are built per event.
MAX_CACHED_ATTRIBUTES = 2048

log = logging.getLogger("fleetbreaker")

_TRUE = frozenset({"1", "y", "yes", "t", "true", "on"})
_FALSE = frozenset({"0", "n", "no", "f", "false", "off"})


def tracing_active(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is traced by X-Ray, judged from the environment alone.

    Off when ``POWERTOOLS_TRACE_DISABLED`` is true, ``AWS_XRAY_SDK_ENABLED`` is false, or under
    ``sam local`` (no daemon listens there, as Powertools Tracer also assumes). Otherwise on when
    Lambda (or the user) has set ``_X_AMZN_TRACE_ID`` or ``AWS_XRAY_DAEMON_ADDRESS``.
    """
    env = os.environ if environ is None else environ
    if env.get(TRACE_DISABLED_ENV, "").strip().lower() in _TRUE:
        return False
    if env.get(SDK_ENABLED_ENV, "").strip().lower() in _FALSE:
        return False
    if env.get(SAM_LOCAL_ENV):
        return False
    return bool(env.get(TRACE_HEADER_ENV) or env.get(DAEMON_ADDRESS_ENV))


class TracingListener(BreakerListener):
    """Puts breaker decisions on X-Ray traces; does nothing (and imports nothing) untraced.

    Parameters
    ----------
    enabled:
        ``None`` (default) decides on the first event with :func:`tracing_active`; ``True`` or
        ``False`` overrides it.
    recorder:
        The X-Ray recorder to use; defaults to ``aws_xray_sdk.core.xray_recorder`` (the one
        Powertools Tracer uses too).

    Example
    -------
    >>> breaker = CircuitBreaker(
    ...     "payment-api",
    ...     store=MemoryStore(),
    ...     listeners=[LoggingListener(), TracingListener()],
    ... )
    """

    def __init__(self, enabled: bool | None = None, recorder: Any = None) -> None:
        self._enabled = enabled
        self._recorder: Any = recorder
        self._facade_type: type | None = None
        self._ready = False
        self._lock = threading.Lock()
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"TracingListener(enabled={self._enabled!r})"

    @property
    def active(self) -> bool:
        """True once tracing is known to be on (the SDK is then imported)."""
        return self._activate() is not None

    # -- hooks -----------------------------------------------------------------------------

    def on_decision(self, name: str, decision: Decision, state: State) -> None:
        recorder = self._activate()
        if recorder is None or _lambda_initializing():
            return
        annotations: dict[str, str | bool] = {
            ANNOTATION_BREAKER: name,
            ANNOTATION_STATE: state.value,
            ANNOTATION_DECISION: decision.value,
        }
        self._annotate_current(recorder, annotations)

    def on_would_reject(self, name: str, state: State, retry_after: float) -> None:
        recorder = self._activate()
        if recorder is None or _lambda_initializing():
            return
        self._annotate_current(recorder, {ANNOTATION_BREAKER: name, ANNOTATION_WOULD_REJECT: True})

    def _annotate_current(self, recorder: Any, annotations: Mapping[str, str | bool]) -> None:
        entity = _current_entity(recorder)
        if entity is None:
            return
        if self._facade_type is not None and isinstance(entity, self._facade_type):
            subsegment = recorder.begin_subsegment(SUBSEGMENT_PREFIX)
            if subsegment is None:
                return
            try:
                _annotate(subsegment, annotations)
            finally:
                recorder.end_subsegment()
            return
        _annotate(entity, annotations)

    def thread_handoff(self) -> Callable[[Callable[[], Any]], Any] | None:
        # On the awaiting task's thread: what is current here is the caller's entity (the
        # handler's subsegment), which the store subsegments on the worker must nest under.
        recorder = self._activate()
        if recorder is None or _lambda_initializing():
            return None
        entity = _current_entity(recorder)
        if entity is None:
            return None
        if _task_bound(recorder):
            return functools.partial(self._under, entity)
        return functools.partial(_within, recorder, entity)

    def _under(self, parent: Any, job: Callable[[], Any]) -> Any:
        """Run ``job`` on this worker thread, its store subsegments begun under ``parent``.

        For a context kept per asyncio task (the SDK's ``AsyncContext``): a worker thread has
        no task, and whatever it set in that context would land on the task the event loop
        happens to run, so the subsegments are attached to ``parent`` directly.
        """
        self._local.parent = parent
        try:
            return job()
        finally:
            self._local.parent = None

    def on_store_call_start(self, name: str, operation: str) -> None:
        recorder = self._activate()
        if recorder is None:
            return
        stack = self._open_subsegments()
        parent = getattr(self._local, "parent", None)
        owned = parent is not None
        if owned:
            subsegment = _begin_under(parent, f"{SUBSEGMENT_PREFIX}.{operation}")
        elif _lambda_initializing() or not _open(_current_entity(recorder)):
            subsegment = None
        else:
            subsegment = recorder.begin_subsegment(f"{SUBSEGMENT_PREFIX}.{operation}")
        if subsegment is None:
            stack.append((None, None, False))
            return
        token = None
        try:
            subsegment.put_annotation(ANNOTATION_BREAKER, name)
            # The round trip runs on a store worker thread: the SDK's own subsegment
            # (botocore's, redis') must find this one as its parent there.
            token = store_call_wrapper.set(functools.partial(_within, recorder, subsegment))
            stack.append((subsegment, token, owned))
        except BaseException:
            # Interrupted before on_store_call could close it: close it now.
            if stack and stack[-1][0] is subsegment:
                stack.pop()
            if token is not None:
                store_call_wrapper.reset(token)
            _end(recorder, subsegment, owned)
            raise

    def on_store_call(self, name: str, operation: str, elapsed_ms: float, ok: bool) -> None:
        recorder = self._activate()
        stack = self._open_subsegments()
        if recorder is None or not stack:
            return
        subsegment, token, owned = stack.pop()
        if token is not None:
            store_call_wrapper.reset(token)
        if subsegment is None:
            return
        if not ok:
            subsegment.add_fault_flag()
        _end(recorder, subsegment, owned)

    # -- internals -------------------------------------------------------------------------

    def _activate(self) -> Any:
        """The recorder when tracing is on, else None; imports the SDK at most once."""
        if self._ready:
            return self._recorder
        with self._lock:
            if not self._ready:
                enabled = tracing_active() if self._enabled is None else self._enabled
                if enabled:
                    from aws_xray_sdk.core.models.facade_segment import FacadeSegment

                    if self._recorder is None:
                        from aws_xray_sdk.core import xray_recorder

                        self._recorder = xray_recorder
                    self._facade_type = FacadeSegment
                else:
                    self._recorder = None
                self._ready = True
        return self._recorder

    def _open_subsegments(self) -> list[Any]:
        stack: list[Any] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack


def _lambda_initializing() -> bool:
    # During Lambda's init phase there is no trace header yet and the SDK would discard (and
    # warn about) any subsegment.
    return bool(os.environ.get(LAMBDA_TASK_ROOT_ENV)) and not os.environ.get(TRACE_HEADER_ENV)


def _within(recorder: Any, entity: Any, job: Callable[[], Any]) -> Any:
    """Run ``job`` on this (worker) thread with ``entity`` as the X-Ray context, and no
    entity left behind after it (the thread is reused for other callers' work)."""
    if _task_bound(recorder):
        # A context per asyncio task: this thread has none, and setting one here would
        # land on whichever task the event loop is running (the caller's, or another's).
        return job()
    try:
        recorder.set_trace_entity(entity)
    except Exception:  # a context that cannot take it: the store call goes on untraced
        log.warning("fleetbreaker: X-Ray context refused a worker thread's entity", exc_info=True)
        return job()
    try:
        return job()
    finally:
        try:
            recorder.clear_trace_entities()
        except Exception:
            log.warning("fleetbreaker: X-Ray context not cleared on a worker thread", exc_info=True)


def _task_bound(recorder: Any) -> bool:
    """Whether the recorder keeps its entities per asyncio task (the SDK's AsyncContext).

    Looked up, never imported: that module imports asyncio, and a process that has not
    loaded it cannot hold one.
    """
    module = sys.modules.get("aws_xray_sdk.core.async_context")
    return module is not None and isinstance(recorder.context, module.AsyncContext)


def _off_the_loop() -> bool:
    """Whether this thread runs no asyncio event loop (asyncio is loaded: _task_bound)."""
    try:
        sys.modules["asyncio"].get_running_loop()
    except RuntimeError:
        return True
    return False


def _current_entity(recorder: Any) -> Any:
    """The current segment or subsegment, or None (never raises, whatever context_missing).

    None on a thread that runs no event loop when the context is kept per asyncio task:
    there it would answer with whatever task the loop is running.
    """
    if _task_bound(recorder) and _off_the_loop():
        return None
    try:
        return recorder.get_trace_entity()
    except Exception:  # SegmentNotFoundException under AWS_XRAY_CONTEXT_MISSING=RUNTIME_ERROR
        return None


def _open(entity: Any) -> bool:
    """Whether ``entity`` can take a subsegment: it exists and has not ended (an awaited
    call's shielded probe release may outlive the caller's subsegment, cancelled twice)."""
    return entity is not None and getattr(entity, "in_progress", True) is not False


def _begin_under(parent: Any, name: str) -> Any:
    """A subsegment ``name`` begun under ``parent`` without the recorder's context, or None
    when the SDK is off or ``parent`` is not sampled (the recorder would make a dummy)."""
    from aws_xray_sdk import global_sdk_config
    from aws_xray_sdk.core.models.subsegment import Subsegment

    if not global_sdk_config.sdk_enabled() or not parent.sampled or not _open(parent):
        return None
    segment = parent.parent_segment if isinstance(parent, Subsegment) else parent
    subsegment = Subsegment(name, "local", segment)
    parent.add_subsegment(subsegment)
    return subsegment


def _end(recorder: Any, subsegment: Any, owned: bool) -> None:
    """Close a store subsegment: one begun under a carried parent by itself (the segment's
    own end sends it), one of the recorder's context through the recorder, and only while
    it is still the current one: a store call cut short by a BaseException left no
    on_store_call, and its subsegment must not close whatever is current now."""
    if owned:
        if subsegment.in_progress:
            subsegment.close()
    elif _current_entity(recorder) is subsegment:
        recorder.end_subsegment()


def _annotate(entity: Any, annotations: Mapping[str, str | bool]) -> None:
    for key, value in annotations.items():
        entity.put_annotation(key, value)


def opentelemetry_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether an OpenTelemetry tracer provider other than the API's default no-op is set.

    The ADOT Lambda layer (and ``opentelemetry-instrument``) sets one before the function's
    module is imported. Costs nothing when OpenTelemetry is absent: whoever set a provider
    has imported ``opentelemetry.trace`` already, so it is looked up in ``sys.modules`` and
    imported only when ``OTEL_PYTHON_TRACER_PROVIDER`` names a provider to load.
    """
    trace: Any = sys.modules.get("opentelemetry.trace")
    if trace is None:
        env = os.environ if environ is None else environ
        if not env.get(OTEL_PROVIDER_ENV):
            return False
        try:
            import opentelemetry.trace as trace
        except ImportError:
            return False
    try:
        provider = trace.get_tracer_provider()
        return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
    except Exception:  # a provider named in the environment that cannot be loaded
        log.warning("fleetbreaker: OpenTelemetry tracer provider unavailable", exc_info=True)
        return False


class OpenTelemetryListener(BreakerListener):
    """Puts breaker decisions on OpenTelemetry traces: span events and store child spans.

    - Each decision adds an event ``fleetbreaker.decision`` to the caller's current span, with
      ``fleetbreaker.breaker``, ``fleetbreaker.state`` and ``fleetbreaker.decision``.
    - A shadow breaker's call that an enforcing one would have rejected also sets the span
      attribute ``fleetbreaker.would_reject`` (true) and adds an event of that name.
    - A state change this container wrote adds an event
      ``fleetbreaker.transition.<from>_to_<to>`` with ``fleetbreaker.from_state``,
      ``fleetbreaker.to_state``, ``fleetbreaker.generation`` and ``fleetbreaker.reason``.
    - Each store round trip runs in a child span ``fleetbreaker.store.<operation>`` (kind
      CLIENT) with ``fleetbreaker.store.kind`` (``dynamodb``, ``redis``...) and
      ``fleetbreaker.store.outcome`` (``answered``, ``store_error``, ``deadline``,
      ``interrupted``; all but the first also set the span's status to error and record the
      exception, its message and stack trace redacted by :mod:`fleetbreaker.redaction`). The
      span ends, and its context is detached, however the round trip ends: a
      KeyboardInterrupt included. The AWS SDK's own span (botocore instrumentation) nests
      inside it.

    Nothing is recorded outside a recording span: no root spans of its own, and a hook costs
    one context lookup when the current span does not record.

    Parameters
    ----------
    tracer_provider:
        The provider to take the tracer from; default the global one (the ADOT layer's).

    Example
    -------
    >>> from fleetbreaker.tracing import OpenTelemetryListener
    >>> breaker = CircuitBreaker(
    ...     "payment-api", store=MemoryStore(), listeners=[OpenTelemetryListener()]
    ... )
    """

    def __init__(self, tracer_provider: Any = None) -> None:
        try:
            from opentelemetry import context, trace
            from opentelemetry.trace import SpanKind, Status, StatusCode
        except ImportError as exc:
            from fleetbreaker.errors import ConfigError

            raise ConfigError(
                "OpenTelemetryListener needs opentelemetry-api "
                "(from a clone of fleetbreaker: pip install '.[otel]')"
            ) from exc
        from fleetbreaker._version import __version__

        self._trace: Any = trace
        self._context: Any = context
        # The hot path (every decision) looks the current span up in the current context
        # itself: two calls instead of the API's four Python frames (bench/
        # fleet_vs_powertools.py, row a_otel).
        self._context_get, self._span_key = _fast_span_lookup()
        self._client = SpanKind.CLIENT
        self._error_status = functools.partial(Status, StatusCode.ERROR)
        self._tracer: Any = trace.get_tracer(
            "fleetbreaker", __version__, tracer_provider=tracer_provider
        )
        self._local = threading.local()
        # Per (breaker, state, decision), the event's attributes: built once, not per call
        # (the SDK copies them into the event).
        self._decision_attributes: dict[tuple[str, State, Decision], Mapping[str, str]] = {}
        if self._context_get is not None:
            self.on_decision = self._fast_on_decision()  # type: ignore[method-assign,assignment]

    def __repr__(self) -> str:
        return "OpenTelemetryListener()"

    def _fast_on_decision(self) -> Callable[[str, Decision, State], None]:
        """:meth:`on_decision` for the API's default context: no span, no work.

        Every admitted call runs it, and outside sampled traces there is nothing to record:
        two C lookups (the context, its span) and out, with no attribute read on ``self``.
        """
        context_get, span_key = self._context_get, self._span_key
        assert context_get is not None
        record = self._record_decision

        def on_decision(name: str, decision: Decision, state: State) -> None:
            span = context_get().get(span_key)
            if span is not None and span.is_recording():
                record(span, name, decision, state)

        return on_decision

    def _record_decision(self, span: Any, name: str, decision: Decision, state: State) -> None:
        key = (name, state, decision)
        attributes = self._decision_attributes.get(key)
        if attributes is None:
            attributes = {
                OTEL_BREAKER: name,
                OTEL_STATE: state.value,
                OTEL_DECISION: decision.value,
            }
            if len(self._decision_attributes) < MAX_CACHED_ATTRIBUTES:
                self._decision_attributes[key] = attributes
        span.add_event(OTEL_DECISION_EVENT, attributes)

    # -- hooks -----------------------------------------------------------------------------

    def on_decision(self, name: str, decision: Decision, state: State) -> None:
        # Another runtime context than the API's default (see _fast_on_decision otherwise).
        span = self._trace.get_current_span()
        if span.is_recording():
            self._record_decision(span, name, decision, state)

    def on_would_reject(self, name: str, state: State, retry_after: float) -> None:
        span = self._trace.get_current_span()
        if not span.is_recording():
            return
        span.set_attribute(OTEL_WOULD_REJECT, True)
        span.add_event(
            OTEL_WOULD_REJECT_EVENT,
            {
                OTEL_BREAKER: name,
                OTEL_STATE: state.value,
                OTEL_WOULD_REJECT: True,
                OTEL_RETRY_AFTER: round(retry_after, 3),
            },
        )

    def on_state_change(self, name: str, change: StateChange) -> None:
        span = self._trace.get_current_span()
        if not span.is_recording():
            return
        before, after = change.before.value, change.after.value
        span.add_event(
            f"{OTEL_TRANSITION_EVENT}.{before}_to_{after}",
            {
                OTEL_BREAKER: name,
                OTEL_FROM_STATE: before,
                OTEL_TO_STATE: after,
                OTEL_GENERATION: change.generation,
                OTEL_REASON: change.reason.value,
            },
        )

    def on_store_call_start(self, name: str, operation: str) -> None:
        stack = self._open_spans()
        if not self._trace.get_current_span().is_recording():
            stack.append(None)
            return
        span = self._tracer.start_span(
            f"{OTEL_STORE_SPAN}.{operation}",
            kind=self._client,
            attributes={OTEL_BREAKER: name, OTEL_OPERATION: operation},
        )
        token = None
        try:
            # Current on this thread, and on the store's worker thread, which runs the round
            # trip in a copy of this context: the SDK's own span becomes its child.
            token = self._context.attach(self._trace.set_span_in_context(span))
            stack.append((span, token))
        except BaseException:
            # Interrupted before the span was ours to close in on_store_call: close it now.
            if stack and stack[-1] is not None and stack[-1][0] is span:
                stack.pop()
            if token is not None:
                self._context.detach(token)
            span.end()
            raise

    def on_store_result(
        self, name: str, operation: str, store: str, outcome: str, error: BaseException | None
    ) -> None:
        stack = self._open_spans()
        if not stack or stack[-1] is None:
            return
        span = stack[-1][0]
        span.set_attribute(OTEL_STORE, store)
        span.set_attribute(OTEL_OUTCOME, outcome)
        if error is not None:
            _record_exception(span, error)
            span.set_status(self._error_status(f"{outcome}: {type(error).__name__}"))

    def on_store_call(self, name: str, operation: str, elapsed_ms: float, ok: bool) -> None:
        stack = self._open_spans()
        if not stack:
            return
        entry = stack.pop()
        if entry is None:
            return
        span, token = entry
        try:
            self._context.detach(token)
        finally:
            span.end()

    def _open_spans(self) -> list[tuple[Any, Any] | None]:
        stack: list[tuple[Any, Any] | None] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack


def _record_exception(span: Any, error: BaseException) -> None:
    """``span.record_exception(error)``, its message and stack trace without secrets: a
    client's message may quote its URL or token (the trace keeps what the log would not)."""
    import traceback

    from fleetbreaker.redaction import redact

    stacktrace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    span.record_exception(
        error,
        attributes={
            "exception.message": redact(str(error)),
            "exception.stacktrace": redact(stacktrace),
        },
    )


def _fast_span_lookup() -> tuple[Callable[[], Any] | None, Any]:
    """``(get the current Context, the key of its span)``, or ``(None, None)``.

    Both from the API's public functions: the key is the one entry of a Context that holds
    a span and nothing else. An API without them takes the public ``get_current_span()``.
    """
    try:
        from opentelemetry import context, trace

        holder = trace.set_span_in_context(trace.INVALID_SPAN, context.Context())
        (key,) = holder.keys()
        get_current: Callable[[], Any] = context.get_current
        return get_current, key
    except Exception:  # another API version: the public path works everywhere
        return None, None
