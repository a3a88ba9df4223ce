"""Library code that runs in a test's own process, with coverage's tracer off.

`make test` measures coverage of the package and the functions; its tracer is called for
every Python frame in the process, measured or not. moto in-process answers each request in
the test's own thread, through tens of thousands of Python calls (its response serializer
alone): under the tracer, 31 contract tests on moto in-process took 24 s of CPU instead of
12 s.

So moto's request handler, its Step Functions interpreter (a thread per execution) and
botocore's own work on a request (serialize, sign, parse) run with the thread's trace
function removed, put back when they return: those 31 tests then take 15 s, with the same
lines covered. Code of ours that moto runs meanwhile (a Lambda function invoked in process
by tests/stepfunctions) is traced again for its duration (:func:`traced`).

The tests that repeat one simulation many times (tests/fleet, tests/bench) trace the first
few runs, or a sample of a run's containers, and run the rest untraced; the store calls an
untraced call hands to the package's store workers run untraced there too. The Hypothesis
state machines run Hypothesis untraced and their steps traced (:func:`traced_step`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from devtools.servers import COVERAGE_CHILD_PREFIX

_suspended = threading.local()


def untraced(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` run with this thread's trace function off (when one is set), and so are
    the store calls it hands to the package's store workers (:func:`_store_calls_untraced`).
    """

    def call(*args: Any, **kwargs: Any) -> Any:
        tracer = sys.gettrace()
        if tracer is None:
            return function(*args, **kwargs)
        stack = _suspended.__dict__.setdefault("tracers", [])
        stack.append(tracer)
        sys.settrace(None)
        handed_off = _store_calls_untraced()
        try:
            return function(*args, **kwargs)
        finally:
            if handed_off is not None:
                handed_off.var.reset(handed_off)
            stack.pop()
            # Installed the Python way, coverage's tracer puts itself back the C way at the
            # next call event; its record of the frames above this one is intact.
            sys.settrace(tracer)

    call.__wrapped__ = function  # type: ignore[attr-defined]
    return call


def _store_call_handoff() -> contextvars.ContextVar[Any] | None:
    """The package's ``store_call_wrapper``, when the package is loaded. Never imported from
    here: a module first imported untraced would lose its import-time lines."""
    deadline = sys.modules.get("fleetbreaker.stores.deadline")
    return None if deadline is None else deadline.store_call_wrapper


class _UntracedJob:
    """A ``store_call_wrapper`` that runs the job untraced, through the wrapper that was set
    before it (``outer``) when there was one."""

    def __init__(self, outer: Callable[[Callable[[], Any]], Any] | None) -> None:
        self.outer = outer

    def __call__(self, job: Callable[[], Any]) -> Any:
        return untraced(job if self.outer is None else functools.partial(self.outer, job))()


def _store_calls_untraced() -> contextvars.Token[Any] | None:
    """Store calls handed to a store worker from here on run untraced there too.

    A breaker on DynamoDB or Redis runs each store call on a worker thread (its deadline,
    fleetbreaker/stores/deadline.py), and coverage traces every thread it started on: the
    store's code, botocore's client and redis-py's did, under a call run untraced here. The
    package lets a caller wrap the job its worker runs (``store_call_wrapper``, carried in
    the caller's context, as the X-Ray listener uses it); the wrapper set here runs the job
    untraced, through the caller's own wrapper when there is one.
    """
    handoff = _store_call_handoff()
    return None if handoff is None else handoff.set(_UntracedJob(handoff.get()))


def traced(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` traced, inside an :func:`untraced` call (a plain call
    elsewhere), and so are the store calls it hands to store workers. A function, not a
    context manager: the frame that turns the tracer back off must be one the tracer never
    saw enter, or its record of the frames would be off by one.
    """
    stack = getattr(_suspended, "tracers", [])
    if not stack or sys.gettrace() is not None:
        return function(*args, **kwargs)
    handoff = _store_call_handoff()
    token = None
    if handoff is not None and isinstance(handoff.get(), _UntracedJob):
        token = handoff.set(handoff.get().outer)
    sys.settrace(stack[-1])
    try:
        return function(*args, **kwargs)
    finally:
        sys.settrace(None)
        if token is not None:
            token.var.reset(token)


def traced_step(step: Callable[..., Any]) -> Callable[..., Any]:
    """A step of a Hypothesis state machine (an initializer, a rule, an invariant), traced
    when the machine runs under :func:`untraced`: Hypothesis's own work between the steps
    (drawing, choosing a rule, keeping its tree of examples) runs untraced, and every step of
    every example, where all the package's code runs, is traced as before. Innermost, under
    Hypothesis's decorators."""

    @functools.wraps(step)
    def run(*args: Any, **kwargs: Any) -> Any:
        return traced(step, *args, **kwargs)

    return run


@contextlib.contextmanager
def children_unmeasured() -> Iterator[None]:
    """Python processes started inside start without coverage: the variables its subprocess
    patch hands to children are out of ``os.environ`` meanwhile (put back after). For runs
    whose children run none of the lines only they could cover (the demo's containers, whose
    breaker code every other suite covers), where measuring them only costs CPU."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith(COVERAGE_CHILD_PREFIX)}
    try:
        yield
    finally:
        os.environ.update(saved)


def _untraced_methods() -> list[tuple[type, str]]:
    """The library code run in a test's own thread that is both hot and ours-free: moto's
    request handler and Step Functions interpreter, and botocore's work on each request
    (its serializers, endpoint rules, signing, the request's preparation and its HTTP
    exchange, response parser). None of these calls a handler of ours: the package's
    botocore handlers (before-parse, needs-retry) are emitted around them, by the client.

    Signing is every signer botocore may pick for a request (``AUTH_TYPE_MAPS``): with the
    AWS Common Runtime installed (the SAM CLI brings it to the dev venv) SigV4 is the CRT's
    signer, not ``SigV4Auth``, and it ran traced: a GetItem on moto's server took 1.6 ms
    of the client's CPU under coverage, 1.2 ms with the signer, the preparation and the
    exchange untraced."""
    from botocore import auth, awsrequest, httpsession, parsers, regions, serialize
    from moto.core.botocore_stubber import BotocoreStubber

    methods: list[tuple[type, str]] = [
        (BotocoreStubber, "process_request"),
        (parsers.ResponseParser, "parse"),
        (regions.EndpointRulesetResolver, "construct_endpoint"),
        (awsrequest.AWSRequest, "prepare"),
        (httpsession.URLLib3Session, "send"),
    ]
    for signer in {auth.SigV4Auth, *auth.AUTH_TYPE_MAPS.values()}:
        if isinstance(signer, type) and "add_auth" in vars(signer):
            methods.append((signer, "add_auth"))
    for value in vars(serialize).values():
        if isinstance(value, type) and "serialize_to_request" in vars(value):
            methods.append((value, "serialize_to_request"))
    return methods


def install() -> None:
    """Untrace :func:`_untraced_methods` (once per process)."""
    _untrace(_untraced_methods())


def install_stepfunctions() -> None:
    """Untrace moto's Step Functions interpreter too: called where state machines run in
    process (tests/stepfunctions' executions), not by every pytest process,
    whose import of tests/conftest.py it made a second longer (1.4 s, 0.5 s without)."""
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    _untrace([(ExecutionWorker, "_execution_logic")])


def _untrace(methods: list[tuple[type, str]]) -> None:
    for owner, name in methods:
        method = vars(owner)[name]
        if not hasattr(method, "__wrapped__"):
            setattr(owner, name, untraced(method))
