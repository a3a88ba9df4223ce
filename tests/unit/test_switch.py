"""FLEETBREAKER_DISABLED: every breaker lets every call through and never asks its store.

The breakers here sit on a store that fails the test on any use: the switch is proven by
what does not happen.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any, NoReturn

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, ConfigError, Decision, State
from fleetbreaker.switch import DISABLED_ENV, switched_off
from tests.support import Dependency

RATE = BreakerConfig(failure_rate_threshold=0.5, slow_call_duration=1.0)


class UntouchableStore:
    """A store whose every operation fails the test (it may be looked at, never used)."""

    def _used(self, *_: Any, **__: Any) -> NoReturn:
        raise AssertionError("the store was used while breakers are switched off")

    load = record_failure = claim_probe = settle_probe = report = census = force_state = _used
    list_records = tune = prepare = _used


@pytest.fixture
def switched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLED_ENV, "true")


@pytest.mark.usefixtures("switched")
@pytest.mark.parametrize("config", [BreakerConfig(failure_threshold=1), RATE])
def test_every_call_runs_and_the_store_is_never_asked(config: BreakerConfig) -> None:
    # GIVEN a breaker on a store that may not be used, with a threshold of one failure
    breaker = CircuitBreaker("api", store=UntouchableStore(), config=config)  # type: ignore[arg-type]
    dep = Dependency()

    # WHEN calls fail, and more follow
    dep.failing = True
    for _ in range(3):
        with pytest.raises(ConnectionError):
            breaker.call(dep)
    dep.failing = False

    # THEN every call reached the dependency, and nothing went to the store
    assert breaker.call(dep) == "ok"
    assert dep.calls == 4


@pytest.mark.usefixtures("switched")
def test_the_breaker_says_it_is_disabled_without_asking() -> None:
    breaker = CircuitBreaker("api", store=UntouchableStore())  # type: ignore[arg-type]

    admission = breaker.check()
    assert (admission.decision, admission.state) == (Decision.ALLOW, State.DISABLED)
    assert breaker.record(False).applied is False
    assert breaker.state is State.DISABLED
    assert breaker.snapshot().state is State.DISABLED
    assert breaker.force_open() is State.DISABLED
    assert breaker.reset() is State.DISABLED


@pytest.mark.usefixtures("switched")
def test_a_breaker_needs_no_store_variable_while_switched_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN no store named anywhere (a unit test of a handler)
    monkeypatch.delenv("CIRCUIT_BREAKER_TABLE", raising=False)
    monkeypatch.delenv("CIRCUIT_BREAKER_REDIS_URL", raising=False)

    # THEN a breaker built as a handler builds it runs its calls
    assert CircuitBreaker("api").call(lambda: "ok") == "ok"
    assert CircuitBreaker.from_env("api").call(lambda: "ok") == "ok"


@pytest.mark.parametrize("value", ["true", "TRUE", " 1 ", "yes", "on"])
def test_the_switch_turns_off_on_any_true_word(value: str) -> None:
    assert switched_off({DISABLED_ENV: value}) is True


@pytest.mark.parametrize("value", ["", "false", "0", "no", "OFF"])
def test_the_switch_stays_on_otherwise(value: str) -> None:
    assert switched_off({DISABLED_ENV: value}) is False
    assert switched_off({}) is False


def test_a_typo_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLED_ENV, "ture")
    with pytest.raises(ConfigError, match=f"{DISABLED_ENV} must be true or false.*'ture'"):
        CircuitBreaker("api", store=UntouchableStore())  # type: ignore[arg-type]


def test_the_switch_is_logged_once_per_process() -> None:
    # GIVEN a process with the switch on that builds three breakers
    script = (
        "import logging, sys\n"
        "logging.basicConfig(stream=sys.stdout, level=logging.INFO, format='%(message)s')\n"
        "from fleetbreaker import CircuitBreaker, MemoryStore\n"
        "for name in ('a', 'b', 'c'):\n"
        "    CircuitBreaker(name, store=MemoryStore()).call(lambda: None)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={"FLEETBREAKER_DISABLED": "true", "PATH": "", "PYTHONPATH": ":".join(sys.path)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    # THEN one line says breakers are off, naming the first
    lines = [line for line in out.splitlines() if DISABLED_ENV in line]
    assert len(lines) == 1
    assert "first: a" in lines[0]
