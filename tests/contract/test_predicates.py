"""A failure predicate that raises: logged once, counted as a failure, never the caller's.

``is_failure`` and ``failure_result`` are the user's code. When one raises (an
AttributeError reading ``exc.response`` off a timeout, say), the breaker counts the call as a
failure, logs the predicate's error once at WARNING with its name, and the caller gets the
call's own exception or result, in every policy and mode: a closed call under the count and
the rate policy, a probe, and shadow mode's probe. On MemoryStore and Redis.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, State
from tests.contract.conftest import make_store
from tests.support import FakeClock, quiet_rng


class ProviderTimeout(Exception):
    """The call's own exception (it has no ``response``)."""


def reads_response(exc: BaseException) -> bool:
    return bool(exc.response["Error"])  # type: ignore[attr-defined]


def reads_status(result: Any) -> bool:
    return bool(result.status_code >= 500)


# Two failures open the breaker under either policy: the second also shows the predicate's
# error is logged once, not per call.
POLICIES = {
    "count": {"failure_threshold": 2},
    "rate": {"failure_rate_threshold": 0.5, "minimum_calls": 2, "report_interval": 0.001},
}


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Any:
    return make_store(request, request.param)


def breaker_on(store: Any, name: str, clock: FakeClock, **config: Any) -> CircuitBreaker:
    settings = {"recovery_timeout": 10, "cache_ttl": 0, "store_deadline_seconds": 30, **config}
    return CircuitBreaker(
        name, store=store, config=BreakerConfig(**settings), clock=clock, rng=quiet_rng()
    )


def warnings_about(caplog: pytest.LogCaptureFixture, field: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and f"{field} predicate" in r.getMessage()
    ]


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_raising_is_failure_counts_the_failure_and_keeps_the_callers_exception(
    store: Any, name: str, clock: FakeClock, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a breaker whose is_failure predicate raises on the call's exception
    breaker = breaker_on(store, name, clock, is_failure=reads_response, **POLICIES[policy])

    def call() -> None:
        raise ProviderTimeout("timed out")

    # WHEN two calls raise ProviderTimeout
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        for _ in range(2):
            with pytest.raises(ProviderTimeout):
                breaker.call(call)
            clock.advance(0.01)

    # THEN the caller caught its own exception each time, the failures opened the breaker,
    # and one warning named the predicate and its error
    assert breaker.state is State.OPEN
    [line] = warnings_about(caplog, "is_failure")
    assert "reads_response" in line
    assert "AttributeError" in line


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_raising_failure_result_counts_the_failure_and_returns_the_result(
    store: Any, name: str, clock: FakeClock, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a breaker whose failure_result predicate raises on the result it gets
    breaker = breaker_on(store, name, clock, failure_result=reads_status, **POLICIES[policy])

    # WHEN two calls return a result the predicate cannot read
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        results = []
        for _ in range(2):
            results.append(breaker.call(lambda: "no status"))
            clock.advance(0.01)

    # THEN the caller got its results, the calls counted as failures, one warning
    assert results == ["no status", "no status"]
    assert breaker.state is State.OPEN
    assert len(warnings_about(caplog, "failure_result")) == 1


@pytest.mark.parametrize("mode", ["enforce", "shadow"])
def test_a_probe_whose_predicate_raises_fails_and_keeps_the_callers_exception(
    store: Any, name: str, clock: FakeClock, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN an open breaker whose open window has ended (the next call is its probe)
    breaker = breaker_on(store, name, clock, is_failure=reads_response, failure_threshold=1)
    breaker.force_open()
    breaker.reset()
    breaker.record(False)
    assert breaker.state is State.OPEN
    clock.advance(10)
    probing = breaker_on(
        store, name, clock, is_failure=reads_response, failure_threshold=1, mode=mode
    )

    def call() -> None:
        raise ProviderTimeout("still timing out")

    # WHEN the probe raises and the predicate raises on it
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"), pytest.raises(ProviderTimeout):
        probing.call(call)

    # THEN the probe failed (the breaker reopened) and the caller has its own exception
    assert probing.state is State.OPEN
    assert len(warnings_about(caplog, "is_failure")) == 1
