"""A call run untraced by coverage (tests/coverage_scope.py) runs untraced on the store
workers it hands its store calls to, as on its own thread; code traced again inside it
(``traced``) hands them off traced. A Hypothesis state machine run untraced traces its steps
(``traced_step``)."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fleetbreaker.stores import deadline
from tests.coverage_scope import traced, traced_step, untraced


@contextlib.contextmanager
def traced_threads() -> Iterator[None]:
    """This thread and the store workers traced: by coverage's tracer when it runs (it traces
    every thread it sees start), else by a stand-in that traces nothing."""

    def stand_in(*_: Any) -> None:
        return None

    mine, new_threads = sys.gettrace(), threading.gettrace()
    if mine is None:
        sys.settrace(stand_in)
    if new_threads is None:
        threading.settrace(stand_in)
    deadline.restart_workers()  # workers started from here on carry the thread tracer
    try:
        yield
    finally:
        if new_threads is None:
            threading.settrace(None)  # type: ignore[arg-type]
        if mine is None:
            sys.settrace(None)
        deadline.restart_workers()


def on_a_store_worker(seen: list[Any]) -> Callable[[], None]:
    """A store call that notes the trace function of the thread it runs on."""

    def call() -> None:
        deadline.run_within(
            lambda: seen.append(sys.gettrace()), 30.0, "probe", deadline.CallSlots()
        )

    return call


def test_a_store_call_handed_off_by_an_untraced_call_runs_untraced() -> None:
    seen: list[Any] = []
    with traced_threads():
        # GIVEN a store call handed to a store worker, from a traced call (the control)
        on_a_store_worker(seen)()
        # WHEN the same is handed off from inside an untraced call
        untraced(on_a_store_worker(seen))()
    # THEN the worker ran the traced call's job traced and the untraced call's untraced
    assert seen[0] is not None
    assert seen[1] is None


def test_a_store_call_handed_off_by_code_traced_again_runs_traced() -> None:
    # GIVEN code of ours traced again inside an untraced call (as moto runs a Lambda
    # function in process: tests/stepfunctions)
    seen: list[Any] = []
    with traced_threads():
        # WHEN it hands a store call off
        untraced(traced)(on_a_store_worker(seen))
    # THEN the worker runs it traced
    assert seen[0] is not None


def test_a_wrapper_the_caller_set_still_runs_the_job() -> None:
    # GIVEN a wrapper of the store calls set by the caller (as the X-Ray listener sets one)
    wrapped: list[str] = []

    def wrapper(job: Callable[[], Any]) -> Any:
        wrapped.append("wrapped")
        return job()

    seen: list[Any] = []
    with traced_threads():
        token = deadline.store_call_wrapper.set(wrapper)
        try:
            # WHEN an untraced call hands a store call off
            untraced(on_a_store_worker(seen))()
        finally:
            deadline.store_call_wrapper.reset(token)
    # THEN the job ran through the caller's wrapper, and untraced
    assert wrapped == ["wrapped"]
    assert seen == [None]


class Traces(RuleBasedStateMachine):
    """Notes the trace function its steps, and Hypothesis's own calls (a precondition), see."""

    seen: list[tuple[str, Any]]

    @precondition(lambda self: bool(self.seen.append(("precondition", sys.gettrace())) or True))
    @rule(value=st.integers(0, 3))
    @traced_step
    def step(self, value: int) -> None:
        self.seen.append(("rule", sys.gettrace()))

    @invariant()
    @traced_step
    def holds(self) -> None:
        self.seen.append(("invariant", sys.gettrace()))


def test_a_state_machine_run_untraced_traces_its_steps_only() -> None:
    Traces.seen = []
    Traces.TestCase.settings = settings(max_examples=3, stateful_step_count=3, database=None)
    with traced_threads():
        # WHEN the machine runs untraced
        untraced(Traces.TestCase("runTest").runTest)()
    # THEN its rules and invariants ran traced, and Hypothesis's own work did not
    kinds = {
        kind: {tracer is not None for k, tracer in Traces.seen if k == kind}
        for kind, _ in Traces.seen
    }
    assert kinds == {"rule": {True}, "invariant": {True}, "precondition": {False}}
