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

Lambda's own segment cannot be annotated (the SDK holds it as a read-only facade); when there
is no subsegment to annotate, the annotations go on a short ``fleetbreaker`` subsegment of
their own. When one subsegment sees several decisions, the last one's values stay.

Each store round trip gets a subsegment ``fleetbreaker.<operation>`` (``load``,
``record_failure``, ``claim_probe``, ``settle_probe``) annotated with ``circuit_breaker``
and flagged as a fault when the call failed. The AWS SDK's own subsegment (when botocore is
patched) nests inside it.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fleetbreaker.events import BreakerListener
from fleetbreaker.stores.fallback import store_call_wrapper

if TYPE_CHECKING:
    from fleetbreaker.state import Decision, State

TRACE_HEADER_ENV = "_X_AMZN_TRACE_ID"
DAEMON_ADDRESS_ENV = "AWS_XRAY_DAEMON_ADDRESS"
TRACE_DISABLED_ENV = "POWERTOOLS_TRACE_DISABLED"
SDK_ENABLED_ENV = "AWS_XRAY_SDK_ENABLED"
SAM_LOCAL_ENV = "AWS_SAM_LOCAL"
LAMBDA_TASK_ROOT_ENV = "LAMBDA_TASK_ROOT"

ANNOTATION_BREAKER = "circuit_breaker"
ANNOTATION_STATE = "circuit_state"
ANNOTATION_DECISION = "circuit_decision"
SUBSEGMENT_PREFIX = "fleetbreaker"

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
        entity = _current_entity(recorder)
        if entity is None:
            return
        annotations = {
            ANNOTATION_BREAKER: name,
            ANNOTATION_STATE: state.value,
            ANNOTATION_DECISION: decision.value,
        }
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

    def on_store_call_start(self, name: str, operation: str) -> None:
        recorder = self._activate()
        if recorder is None:
            return
        subsegment = None
        token = None
        if not _lambda_initializing() and _current_entity(recorder) is not None:
            subsegment = recorder.begin_subsegment(f"{SUBSEGMENT_PREFIX}.{operation}")
            if subsegment is not None:
                subsegment.put_annotation(ANNOTATION_BREAKER, name)
                # The round trip runs on a store worker thread: the SDK's own subsegment
                # (botocore's, redis') must find this one as its parent there.
                token = store_call_wrapper.set(functools.partial(_within, recorder, subsegment))
        self._open_subsegments().append((subsegment, token))

    def on_store_call(self, name: str, operation: str, elapsed_ms: float, ok: bool) -> None:
        recorder = self._activate()
        stack = self._open_subsegments()
        if recorder is None or not stack:
            return
        subsegment, token = stack.pop()
        if token is not None:
            store_call_wrapper.reset(token)
        if subsegment is None:
            return
        if not ok:
            subsegment.add_fault_flag()
        # Only close what is still ours: a store call cut short by a BaseException left no
        # on_store_call, and its subsegment must not close whatever is current now.
        if _current_entity(recorder) is subsegment:
            recorder.end_subsegment()

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
    """Run ``job`` on this (worker) thread with ``entity`` as the X-Ray context."""
    recorder.context.set_trace_entity(entity)
    try:
        return job()
    finally:
        recorder.context.clear_trace_entities()


def _current_entity(recorder: Any) -> Any:
    """The current segment or subsegment, or None (never raises, whatever context_missing)."""
    try:
        return recorder.get_trace_entity()
    except Exception:  # SegmentNotFoundException under AWS_XRAY_CONTEXT_MISSING=RUNTIME_ERROR
        return None


def _annotate(entity: Any, annotations: Mapping[str, str]) -> None:
    for key, value in annotations.items():
        entity.put_annotation(key, value)
