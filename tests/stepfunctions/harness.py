"""Test helpers for the Lambda functions and the payment workflow.

- :class:`InProcessLambdas` makes moto's Lambda backend run registered Python handlers
  instead of Docker containers (see tests/stepfunctions/test_payment_workflow.py).
- :class:`Workflow` starts executions of a state machine in moto and waits for them.
- :func:`install_execution_hooks` has moto read each definition once (not once per
  execution) and tell the waiters when an execution's interpreter returns.
- :func:`resolve` reads template.yaml (devtools.template.load_template) the way the tests
  deploy it.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.lambda_context import FakeLambdaContext
from devtools.servers import REPO_ROOT
from tests.coverage_scope import traced

STATEMACHINE_DIR = REPO_ROOT / "statemachine"
EVENTS_DIR = REPO_ROOT / "events"
TEMPLATE = REPO_ROOT / "template.yaml"

Handler = Callable[[Any, Any], Any]


def read_event(name: str) -> Any:
    return json.loads((EVENTS_DIR / name).read_text())


# --------------------------------------------------------------------------- Lambda


class LambdaThrottled(Exception):
    """Raise from a routed handler to make moto's Lambda answer TooManyRequestsException."""


def error_payload(exc: BaseException) -> dict[str, Any]:
    """What the Lambda Python runtime returns when a handler raises (FunctionError: Unhandled)."""
    return {
        "errorMessage": str(exc),
        "errorType": type(exc).__name__,
        "requestId": str(uuid.uuid4()),
        "stackTrace": traceback.format_tb(exc.__traceback__),
    }


@dataclass
class Invocation:
    """One call of a routed function: its event, and what it returned or raised."""

    event: Any
    result: Any = None
    error: BaseException | None = None


class InProcessLambdas:
    """Runs Lambda functions created in moto as Python callables in this process.

    moto's ``LambdaFunction._invoke_lambda(event)`` is the one place where its Lambda backend
    starts a Docker container; it returns ``(payload, errored, logs)``. :meth:`patch` swaps it
    for :meth:`_invoke`, which looks the function up by name in :attr:`handlers` and returns
    the same triple. Everything around it stays moto's own code: resolving the ARN, the IAM
    role check, the ``X-Amz-Function-Error`` header, and the Step Functions interpreter turning
    the payload's ``errorType`` into the error name that Retry and Catch match.
    """

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}
        self.calls: dict[str, list[Invocation]] = {}
        self._lock = threading.Lock()

    def register(self, function_name: str, handler: Handler) -> None:
        self.handlers[function_name] = handler
        self.calls.setdefault(function_name, [])

    def count(self, function_name: str) -> int:
        with self._lock:
            return len(self.calls[function_name])

    def invocations(self, function_name: str) -> list[Invocation]:
        with self._lock:
            return list(self.calls[function_name])

    @contextlib.contextmanager
    def patch(self) -> Iterator[InProcessLambdas]:
        from unittest import mock

        from moto.awslambda.models import LambdaFunction

        router = self

        def _invoke_lambda(fn: Any, event: Any = None) -> tuple[str, bool, str]:
            return router._invoke(fn, event)

        with mock.patch.object(LambdaFunction, "_invoke_lambda", _invoke_lambda):
            yield self

    def _invoke(self, fn: Any, event: Any) -> tuple[str, bool, str]:
        from moto.awslambda.exceptions import LambdaClientError

        handler = self.handlers.get(fn.function_name)
        if handler is None:
            raise AssertionError(f"no in-process handler registered for {fn.function_name}")
        invocation = Invocation(event)
        with self._lock:
            self.calls[fn.function_name].append(invocation)
        context = FakeLambdaContext(
            function_name=fn.function_name,
            invoked_function_arn=fn.function_arn,
            memory_limit_in_mb=int(fn.memory_size or 128),
        )
        try:
            # moto calls this inside its request handler, which runs untraced: the function
            # is ours, and measured (tests/coverage_scope.py).
            invocation.result = traced(handler, event, context)
        except LambdaThrottled as exc:
            # Lambda itself refused the call: an API error, not a function error.
            invocation.error = exc
            raise LambdaClientError("TooManyRequestsException", str(exc)) from exc
        except Exception as exc:
            invocation.error = exc
            return json.dumps(error_payload(exc)), True, ""
        return json.dumps(invocation.result), False, ""


# --------------------------------------------------------------------------- moto's interpreter

# Bumped, and the waiters woken, each time an execution's interpreter returns (whatever it
# ended in): a waiter asks moto again then, instead of every few milliseconds.
_ENDED = threading.Condition()
_ended = 0


def executions_ended() -> int:
    """How many executions' interpreters have returned in this process."""
    with _ENDED:
        return _ended


def wait_for_an_execution_to_end(seen: int, timeout: float) -> None:
    """Block until more than ``seen`` executions have ended, or ``timeout`` seconds."""
    with _ENDED:
        _ENDED.wait_for(lambda: _ended > seen, timeout)


def install_execution_hooks() -> None:
    """Two changes to moto's Step Functions, made once per process; neither changes what an
    execution does.

    - An execution's thread tells :func:`wait_for_an_execution_to_end` when its interpreter
      returns. :meth:`Workflow.wait` polled DescribeExecution every 5 ms: 750 requests a run
      of test_payment_workflow.py, 1.8 s of CPU.
    - Each definition text is lexed and parsed once: moto parses the definition at
      CreateStateMachine and again at every execution's start (35 ms of CPU each, 60 a run
      of test_payment_workflow.py). The parse tree is kept, and each call still builds its
      own program from it (moto's Preprocessor, which only reads the tree), so no two
      executions share a component.
    """
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor
    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    logic = vars(ExecutionWorker)["_execution_logic"]
    if not getattr(logic, "tells_the_waiters", False):

        def execution_logic(self: Any) -> None:
            global _ended
            try:
                logic(self)
            finally:
                with _ENDED:
                    _ended += 1
                    _ENDED.notify_all()

        execution_logic.tells_the_waiters = True  # type: ignore[attr-defined]
        # Wrapped already: tests/coverage_scope.py leaves it as it is.
        execution_logic.__wrapped__ = logic  # type: ignore[attr-defined]
        ExecutionWorker._execution_logic = execution_logic  # type: ignore[method-assign]

    parse = vars(AmazonStateLanguageParser)["parse"].__func__
    if hasattr(parse, "trees"):
        return
    trees: dict[str, Any] = {}

    def parse_once(definition: str) -> tuple[Any, Any]:
        tree = trees.get(definition)
        if tree is None:
            program, tree = parse(definition)  # a definition moto refuses raises, every time
            trees[definition] = tree
            return program, tree
        return Preprocessor().visit(tree), tree

    parse_once.trees = trees  # type: ignore[attr-defined]
    AmazonStateLanguageParser.parse = staticmethod(parse_once)  # type: ignore[method-assign]


# --------------------------------------------------------------------------- executions


@dataclass
class Execution:
    """A finished execution: its status, output or error, and the states it went through."""

    name: str
    status: str
    output: Any
    error: str | None
    cause: str | None
    states: list[str]
    seconds: float

    def entered(self, state: str) -> int:
        return self.states.count(state)


class Workflow:
    """One state machine in moto's Step Functions: start executions and wait for the end."""

    def __init__(self, client: Any, state_machine_arn: str, timeout: float = 30.0) -> None:
        self.client = client
        self.arn = state_machine_arn
        self.timeout = timeout

    def start(self, payment: Any, name: str | None = None) -> str:
        # Execution names are unique per state machine (for 90 days in AWS).
        name = name or f"test-{uuid.uuid4().hex}"
        return str(
            self.client.start_execution(
                stateMachineArn=self.arn, name=name, input=json.dumps(payment)
            )["executionArn"]
        )

    def wait(self, execution_arn: str, started: float | None = None) -> Execution:
        started = time.perf_counter() if started is None else started
        deadline = started + self.timeout
        while True:
            ended = executions_ended()
            described = self.client.describe_execution(executionArn=execution_arn)
            if described["status"] != "RUNNING":
                break
            now = time.perf_counter()
            if now >= deadline:
                raise TimeoutError(f"{execution_arn} still RUNNING after {self.timeout} s")
            # Asked again when an execution (this one or another) has ended since, at the
            # latest every half second.
            wait_for_an_execution_to_end(ended, min(deadline - now, 0.5))
        seconds = time.perf_counter() - started
        events = self.client.get_execution_history(executionArn=execution_arn, maxResults=1000)[
            "events"
        ]
        states = [
            e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e
        ]
        failed = [
            e["executionFailedEventDetails"] for e in events if "executionFailedEventDetails" in e
        ]
        output = described.get("output")
        return Execution(
            name=described["name"],
            status=described["status"],
            output=json.loads(output) if output else None,
            error=failed[0].get("error") if failed else None,
            cause=failed[0].get("cause") if failed else None,
            states=states,
            seconds=seconds,
        )

    def run(self, payment: Any, name: str | None = None) -> Execution:
        started = time.perf_counter()
        return self.wait(self.start(payment, name), started)


# CloudFormation's pseudo parameters as moto's default account and region give them.
PSEUDO_PARAMETERS = {
    "AWS::Partition": "aws",
    "AWS::Region": "us-east-1",
    "AWS::URLSuffix": "amazonaws.com",
}

# The template's conditions as its parameters' defaults make them (the tests deploy those).
DEFAULT_CONDITIONS = {
    "BreakerOnRedis": False,
    "DeferWhenOpen": False,
    "RunsLocally": False,
    "RatePolicy": False,
    "SlowCallDetection": False,
    "PauseFromContainers": False,
    "TracesWithAdot": False,
    "InvokesPublishedVersions": False,
}


def resolve(value: Any, template: dict[str, Any], refs: dict[str, str]) -> str | None:
    """A template value as CloudFormation would resolve it, for what the workflow's wiring uses.

    ``Ref`` to a pseudo parameter, to a name in ``refs`` (deployed resources, test overrides) or
    else to a parameter
    (its Default), ``Fn::GetAtt`` through ``refs["<LogicalId>.<Attribute>"]``, ``Fn::If`` on
    :data:`DEFAULT_CONDITIONS`, scalars (environment variables are strings), and None for
    ``AWS::NoValue``.
    """
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, dict) and len(value) == 1:
        ((function, argument),) = value.items()
        if function == "Ref" and argument == "AWS::NoValue":
            return None
        if function == "Ref" and argument in PSEUDO_PARAMETERS:
            return PSEUDO_PARAMETERS[argument]
        if function == "Ref":
            if argument in refs:
                return refs[argument]
            return str(template["Parameters"][argument]["Default"])
        if function == "Fn::GetAtt":
            name = ".".join(argument) if isinstance(argument, list) else str(argument)
            return refs[name]
        if function == "Fn::If":
            condition, when_true, when_false = argument
            chosen = when_true if DEFAULT_CONDITIONS[condition] else when_false
            return resolve(chosen, template, refs)
    raise AssertionError(f"the test deployment cannot resolve {value!r}")


def environment(
    properties: dict[str, Any], template: dict[str, Any], refs: dict[str, str]
) -> dict[str, str]:
    """A function's environment variables as deployed (variables set to AWS::NoValue dropped)."""
    variables = properties["Environment"]["Variables"]
    resolved = {name: resolve(value, template, refs) for name, value in variables.items()}
    return {name: value for name, value in resolved.items() if value is not None}


def read_definition(path: Path, substitutions: dict[str, str]) -> str:
    """The ASL text with ``${Name}`` placeholders replaced, as CloudFormation does it."""
    text = path.read_text()
    for key, value in substitutions.items():
        text = text.replace("${" + key + "}", value)
    return text
