"""The suite's own helpers that a test's verdict passes through."""

from __future__ import annotations

import threading

import pytest

from fleetbreaker import BreakerConfig, MemoryStore, State
from fleetbreaker.events import BreakerListener
from fleetbreaker.policy import Policy
from tests.support import (
    STORE_CONFIG,
    Dependency,
    FakeClock,
    RecordingListener,
    breaker_on,
    in_a_fresh_thread,
    make_policy,
    trip,
)


def test_a_fresh_thread_gives_back_the_result_from_another_thread() -> None:
    seen: list[threading.Thread] = []

    def work() -> int:
        seen.append(threading.current_thread())
        return 42

    assert in_a_fresh_thread(work) == 42
    assert len(seen) == 1
    assert seen[0] is not threading.current_thread()


def test_a_fresh_thread_passes_a_failure_on() -> None:
    def fails() -> None:
        raise AssertionError("the invariant broke")

    with pytest.raises(AssertionError, match="the invariant broke"):
        in_a_fresh_thread(fails)


# -- RecordingListener: every hook the package emits, as the package passes it --------------


def test_the_recording_listener_overrides_every_hook_the_package_declares() -> None:
    # GIVEN the hooks BreakerListener declares today (read here, not from tests.support)
    hooks = [name for name in vars(BreakerListener) if name.startswith("on_")]
    # THEN each is the recorder's own method: a breaker calls only the hooks a listener
    # overrides, so one it inherited would never be heard
    assert hooks
    assert [h for h in hooks if getattr(RecordingListener, h) is getattr(BreakerListener, h)] == []


def test_the_recording_listener_hears_a_trip_in_the_order_the_breaker_reports_it() -> None:
    # GIVEN a breaker with a recording listener, stamped by its clock
    clock = FakeClock()
    heard = RecordingListener(clock)
    breaker = breaker_on(MemoryStore(), clock, failure_threshold=2, listeners=[heard])
    # WHEN two failures open it
    clock.advance(1)
    trip(breaker, Dependency())
    # THEN it heard both failures, the transition, and when
    assert heard.args("on_failure_recorded") == [
        ("payment-api", State.CLOSED),
        ("payment-api", State.OPEN),
    ]
    [change] = heard.values("on_state_change", "change")
    assert (change.before, change.after, change.generation) == (State.CLOSED, State.OPEN, 1)
    assert {h.at_ms for h in heard.of("on_state_change")} == {clock()}
    assert heard.count("on_decision") == 2


def test_the_recording_listener_binds_keyword_arguments_to_their_positions() -> None:
    heard = RecordingListener()
    heard.on_probe("payment-api", applied=False, success=True)
    heard.on_degraded(name="payment-api", reason="store load failed")
    assert heard.args("on_probe") == [("payment-api", True, False)]
    assert heard.values("on_degraded", "reason") == ["store load failed"]
    assert [h.hook for h in heard.of()] == ["on_probe", "on_degraded"]


def test_the_recording_listener_refuses_a_hook_that_does_not_exist() -> None:
    # A misspelt hook would otherwise read as "never heard" and pass a negative assertion.
    heard = RecordingListener()
    with pytest.raises(AssertionError, match="on_transitoin"):
        heard.count("on_transitoin")
    with pytest.raises(AssertionError, match="on_probe has no argument 'reason'"):
        heard.values("on_probe", "reason")


def test_the_recording_listener_forgets_what_it_heard_when_cleared() -> None:
    heard = RecordingListener()
    heard.on_recovered("payment-api")
    heard.clear()
    heard.on_degraded("payment-api", "again")
    assert [h.hook for h in heard.of()] == ["on_degraded"]


# -- make_policy: the numbers a breaker derives -----------------------------------------------


def test_make_policy_is_the_policy_a_breaker_with_those_settings_derives() -> None:
    config = BreakerConfig(failure_threshold=2, recovery_timeout=10)
    assert make_policy(failure_threshold=2, recovery_timeout=10) == Policy.from_config(config)
    assert make_policy() == Policy.from_config(BreakerConfig())


def test_make_policy_replaces_settings_of_the_config_it_is_given() -> None:
    policy = make_policy(STORE_CONFIG, half_open_max_probes=2)
    assert (policy.failure_threshold, policy.window_ms, policy.max_probes) == (3, 10_000, 2)
    assert STORE_CONFIG.half_open_max_probes == 1


def test_make_policy_refuses_a_setting_breaker_config_does_not_have() -> None:
    with pytest.raises(TypeError, match="threshold"):
        make_policy(threshold=2)
