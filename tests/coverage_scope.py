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
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from devtools.servers import COVERAGE_CHILD_PREFIX

_suspended = threading.local()


def untraced(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` run with this thread's trace function off (when one is set)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        tracer = sys.gettrace()
        if tracer is None:
            return function(*args, **kwargs)
        stack = _suspended.__dict__.setdefault("tracers", [])
        stack.append(tracer)
        sys.settrace(None)
        try:
            return function(*args, **kwargs)
        finally:
            stack.pop()
            # Installed the Python way, coverage's tracer puts itself back the C way at the
            # next call event; its record of the frames above this one is intact.
            sys.settrace(tracer)

    call.__wrapped__ = function  # type: ignore[attr-defined]
    return call


def traced(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` traced, inside an :func:`untraced` call (a plain call
    elsewhere). A function, not a context manager: the frame that turns the tracer back off
    must be one the tracer never saw enter, or its record of the frames would be off by one.
    """
    stack = getattr(_suspended, "tracers", [])
    if not stack or sys.gettrace() is not None:
        return function(*args, **kwargs)
    sys.settrace(stack[-1])
    try:
        return function(*args, **kwargs)
    finally:
        sys.settrace(None)


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
