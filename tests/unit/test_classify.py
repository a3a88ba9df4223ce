"""What counts as a failure of the dependency (OutcomeJudge): exception types, the user's
predicates, and a predicate that raises (logged once, counted as a failure)."""

from __future__ import annotations

import functools
import logging
from typing import Any

import pytest

from fleetbreaker import BreakerConfig
from fleetbreaker.classify import OutcomeJudge, predicate_name


class Throttled(ConnectionError):
    pass


def judge(**settings: Any) -> OutcomeJudge:
    return OutcomeJudge(BreakerConfig(**settings), "payment-api")


def predicate_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.__dict__.get("breaker_event") == "predicate_error"]


def is_server_error(exc: BaseException) -> bool:
    return "503" in str(exc)


def unreadable(value: object) -> bool:
    raise KeyError("status")


# -- exceptions -------------------------------------------------------------------------------


def test_by_default_every_exception_is_a_failure_and_a_base_exception_is_not() -> None:
    # KeyboardInterrupt and SystemExit say nothing about the dependency
    default = judge()
    assert default.exception_fails(ValueError("bad"))
    assert not default.exception_fails(KeyboardInterrupt())
    assert not default.exception_fails(SystemExit(1))


def test_only_the_listed_exception_types_and_their_subclasses_fail() -> None:
    listed = judge(failure_exceptions=(ConnectionError,))
    assert listed.exception_fails(ConnectionError())
    assert listed.exception_fails(Throttled())
    assert not listed.exception_fails(ValueError())


def test_an_ignored_exception_never_fails_even_when_listed_as_a_failure() -> None:
    both = judge(failure_exceptions=(ConnectionError,), ignored_exceptions=(Throttled,))
    assert not both.exception_fails(Throttled())
    assert both.exception_fails(ConnectionError())


def test_the_failure_predicate_decides_over_the_listed_types() -> None:
    # GIVEN a predicate, and types that would say otherwise
    predicate = judge(failure_exceptions=(ValueError,), is_failure=is_server_error)
    # THEN the predicate's answer is the verdict
    assert predicate.exception_fails(ConnectionError("503 Service Unavailable"))
    assert not predicate.exception_fails(ValueError("404"))


def test_an_ignored_exception_is_not_shown_to_the_predicate() -> None:
    shown: list[BaseException] = []

    def records(exc: BaseException) -> bool:
        shown.append(exc)
        return True

    ignoring = judge(ignored_exceptions=(Throttled,), is_failure=records)
    assert not ignoring.exception_fails(Throttled())
    assert shown == []


def test_a_predicates_truthy_answer_is_a_failure() -> None:
    truthy = judge(is_failure=lambda exc: "yes")
    assert truthy.exception_fails(ValueError()) is True


# -- results ----------------------------------------------------------------------------------


def test_without_a_result_predicate_no_result_fails() -> None:
    plain = judge()
    assert plain.failure_result is None
    assert not plain.result_fails(None)
    assert not plain.result_fails({"status": 503})


def test_the_result_predicate_says_which_results_fail() -> None:
    status = judge(failure_result=lambda result: result["status"] >= 500)
    assert status.result_fails({"status": 503})
    assert not status.result_fails({"status": 200})


# -- a predicate that raises: the user's bug, not the dependency's verdict ---------------------


def test_a_raising_failure_predicate_counts_a_failure_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # GIVEN an is_failure predicate that raises
    def broken(exc: BaseException) -> bool:
        raise AttributeError("no .response")

    raising = judge(is_failure=broken)
    # WHEN it judges three exceptions
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        verdicts = [raising.exception_fails(ValueError(n)) for n in range(3)]
    # THEN each counts as a failure, and one warning names the breaker, the predicate and
    # its error
    assert verdicts == [True, True, True]
    [warning] = predicate_warnings(caplog)
    assert warning.levelno == logging.WARNING
    message = warning.getMessage()
    assert "circuit payment-api: is_failure predicate" in message
    assert "test_classify.test_a_raising_failure_predicate_counts_a_failure" in message
    assert "AttributeError: no .response" in message
    assert (warning.__dict__["breaker"], warning.__dict__["predicate"]) == (
        "payment-api",
        "is_failure",
    )
    assert warning.__dict__["error_type"] == "AttributeError"


def test_a_raising_result_predicate_counts_a_failure_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raising = judge(failure_result=unreadable)
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        assert raising.result_fails("ok")
        assert raising.result_fails("ok")
    [warning] = predicate_warnings(caplog)
    assert warning.__dict__["predicate"] == "failure_result"
    assert "test_classify.unreadable raised KeyError" in warning.getMessage()


def test_each_raising_predicate_of_a_breaker_gets_its_own_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # GIVEN both predicates raising, on one judge and on another breaker's
    def broken(exc: BaseException) -> bool:
        raise RuntimeError("bug")

    first, second = judge(is_failure=broken, failure_result=unreadable), judge(is_failure=broken)
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        first.exception_fails(ValueError())
        first.result_fails(None)
        first.exception_fails(ValueError())
        second.exception_fails(ValueError())
    # THEN one warning per breaker and predicate
    assert [r.__dict__["predicate"] for r in predicate_warnings(caplog)] == [
        "is_failure",
        "failure_result",
        "is_failure",
    ]


def test_a_predicate_that_raises_a_base_exception_lets_it_through() -> None:
    # A KeyboardInterrupt inside the predicate is the process being stopped, not a bug
    def interrupted(exc: BaseException) -> bool:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        judge(is_failure=interrupted).exception_fails(ValueError())


# -- how a log line names a predicate ----------------------------------------------------------


def test_a_function_is_named_by_its_module_and_qualified_name() -> None:
    assert predicate_name(is_server_error) == f"{__name__}.is_server_error"


def test_a_callable_without_a_name_is_named_by_its_repr() -> None:
    partial = functools.partial(is_server_error)
    assert predicate_name(partial) == repr(partial)


def test_a_name_without_a_module_is_the_name_alone() -> None:
    # a method of a built-in type has a qualified name and no module
    assert predicate_name(str.isdigit) == "str.isdigit"
