"""Live tuning and recorded operator actions, on MemoryStore with a hand-moved clock."""

from __future__ import annotations

import logging

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, ConfigError, MemoryStore, State
from fleetbreaker.tuning import (
    MAX_REASON_CHARS,
    TUNABLE,
    Action,
    apply_tuning,
    check_reason,
    decode_tuned,
    encode_tuned,
    local_user,
    merge_tuned,
    retuned,
)
from tests.support import Dependency, FakeClock, FlakyStore, make_policy

CONFIG = BreakerConfig(failure_threshold=5, recovery_timeout=10, cache_ttl=1.0)


def fail(breaker: CircuitBreaker, dep: Dependency, times: int) -> None:
    dep.failing = True
    for _ in range(times):
        with pytest.raises(ConnectionError):
            breaker.call(dep)


def test_a_tuned_threshold_is_applied_once_the_cache_expires() -> None:
    # GIVEN a breaker with threshold 5 that has read its (empty) record
    clock, store, dep = FakeClock(), MemoryStore(), Dependency()
    breaker = CircuitBreaker("api", store=store, config=CONFIG, clock=clock)
    assert breaker.state is State.CLOSED

    # WHEN an operator tunes the threshold to 2 and cache_ttl passes
    store.tune("api", make_policy(CONFIG), clock(), encode_tuned({"failure_threshold": 2}), None)
    clock.advance(CONFIG.cache_ttl)

    # THEN two failures open it
    fail(breaker, dep, 2)
    assert breaker.state is State.OPEN


def test_an_unusable_tuned_value_is_ignored_with_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # GIVEN a stored threshold no BreakerConfig accepts, next to a usable window
    clock, store, dep = FakeClock(), MemoryStore(), Dependency()
    store.tune(
        "api", make_policy(CONFIG), clock(), '{"failure_threshold": 0, "window_seconds": 5}', None
    )
    breaker = CircuitBreaker("api", store=store, config=CONFIG, clock=clock)

    # WHEN the breaker runs several calls with it
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        fail(breaker, dep, 4)

    # THEN the bad value is logged once and ignored: four failures stay below the threshold 5
    lines = [r.getMessage() for r in caplog.records if "ignoring tuned" in r.getMessage()]
    assert len(lines) == 1
    assert "failure_threshold" in lines[0]
    assert breaker.state is State.CLOSED


@pytest.mark.parametrize(
    "stored",
    [
        '{"slow_call_duration": 1e11}',
        '{"window_seconds": 1e308}',
        '{"window_seconds": 1e999}',
        '{"failure_threshold": 1' + "0" * 400 + "}",
        '{"minimum_calls": 100000000000000000}',
    ],
)
def test_a_stored_tuning_past_the_bounds_is_ignored_with_one_warning(
    caplog: pytest.LogCaptureFixture, stored: str
) -> None:
    # GIVEN a stored setting no container can live with (another package version wrote it)
    clock, store, dep = FakeClock(), MemoryStore(), Dependency()
    store.tune("api", make_policy(CONFIG), clock(), stored, None)
    breaker = CircuitBreaker("api", store=store, config=CONFIG, clock=clock)

    # WHEN calls run across several cache refreshes
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        for _ in range(3):
            breaker.call(dep)
            clock.advance(CONFIG.cache_ttl)

    # THEN every call ran, the breaker kept its own config, and one warning said why
    assert dep.calls == 3
    assert breaker.effective_config == CONFIG
    lines = [r.getMessage() for r in caplog.records if "ignoring tuned" in r.getMessage()]
    assert len(lines) == 1


def test_tuned_text_that_is_not_json_is_ignored() -> None:
    clock, store = FakeClock(), MemoryStore()
    store.tune("api", make_policy(CONFIG), clock(), "not json", None)
    breaker = CircuitBreaker("api", store=store, config=CONFIG, clock=clock)

    assert breaker.state is State.CLOSED
    assert breaker.effective_config == CONFIG


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"failure_threshold": 0}, "failure_threshold must be a positive integer"),
        ({"failure_threshold": 2.5}, "failure_threshold must be a whole number"),
        ({"window_seconds": "60"}, "window_seconds must be a number"),
        ({"recovery_timeout": 900}, "max_recovery_timeout must be at least recovery_timeout"),
        ({"cache_ttl": 0}, "cache_ttl is not tunable"),
    ],
)
def test_tuning_is_checked_by_breakerconfigs_rules(values: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        apply_tuning(BreakerConfig(), values)


def test_every_tunable_setting_is_a_breakerconfig_field() -> None:
    defaults = BreakerConfig()
    assert all(hasattr(defaults, setting) for setting in TUNABLE)


def test_tuned_text_round_trips() -> None:
    assert decode_tuned(encode_tuned({"window_seconds": 5.0, "failure_threshold": 2})) == {
        "failure_threshold": 2,
        "window_seconds": 5.0,
    }


def test_force_open_with_a_reason_records_who_and_why() -> None:
    clock, store = FakeClock(), MemoryStore()
    breaker = CircuitBreaker("api", store=store, config=CONFIG, clock=clock)

    breaker.force_open(reason="provider incident", by="alice")

    action = Action.decode(store.load("api", clock()).last_action)  # type: ignore[union-attr]
    assert action == Action("forced_open", "alice", "provider incident", clock())


def test_force_open_without_metadata_records_no_action() -> None:
    clock, store = FakeClock(), MemoryStore()
    breaker = CircuitBreaker("api", store=store, config=CONFIG, clock=clock)

    breaker.force_open()

    assert store.load("api", clock()).last_action == ""  # type: ignore[union-attr]


def test_a_reason_on_a_store_that_cannot_keep_it_is_refused() -> None:
    class BareStore:  # only the breaker's contract, no operator operations
        def __init__(self) -> None:
            self._inner = FlakyStore()
            self.stats = self._inner.stats
            self.load = self._inner.load
            self.record_failure = self._inner.record_failure
            self.claim_probe = self._inner.claim_probe
            self.settle_probe = self._inner.settle_probe
            self.force_state = self._inner.force_state

    breaker = CircuitBreaker("api", store=BareStore(), config=CONFIG, clock=FakeClock())

    with pytest.raises(ConfigError, match="cannot record who forced"):
        breaker.disable(reason="load test")


def test_a_stored_action_that_is_not_one_reads_as_none() -> None:
    assert Action.decode('{"by": 3}') is None
    assert Action.decode("garbage") is None


# -- the text stored, the reasons, the errors by name --------------------------------------------


def test_settings_are_stored_as_compact_sorted_json() -> None:
    assert encode_tuned({"recovery_timeout": 2.5, "failure_threshold": 3}) == (
        '{"failure_threshold":3,"recovery_timeout":2.5}'
    )
    assert encode_tuned({}) == ""


def test_stored_text_that_is_not_a_json_object_is_refused_quoting_its_start() -> None:
    garbage = "x" * 100
    with pytest.raises(ConfigError) as not_json:
        decode_tuned(garbage)
    assert str(not_json.value) == f"tuned settings are not JSON: {'x' * 80!r}"

    a_list = "[" + "1," * 50 + "1]"
    with pytest.raises(ConfigError) as not_object:
        decode_tuned(a_list)
    assert str(not_object.value) == f"tuned settings are not a JSON object: {a_list[:80]!r}"


def test_a_setting_that_is_not_tunable_is_refused_naming_the_tunable_ones() -> None:
    with pytest.raises(ConfigError) as refused:
        apply_tuning(BreakerConfig(), {"store_deadline_seconds": 1})
    assert str(refused.value) == (
        f"store_deadline_seconds is not tunable (tunable: {', '.join(TUNABLE)})"
    )


def test_an_infinite_setting_is_refused_by_name() -> None:
    with pytest.raises(ConfigError) as refused:
        apply_tuning(BreakerConfig(), {"recovery_timeout": float("inf")})
    assert str(refused.value) == "recovery_timeout must be a finite number, got inf"


def test_an_integer_past_any_double_is_refused_as_not_finite() -> None:
    # GIVEN a stored window of 10**400 seconds (JSON integers have no bound; doubles do)
    with pytest.raises(ConfigError) as refused:
        apply_tuning(BreakerConfig(), {"window_seconds": 10**400})

    # THEN it is refused by name, showing the value's first 40 characters only
    assert str(refused.value) == "window_seconds must be a finite number, got 1" + "0" * 39


def test_a_mode_is_tuned_as_its_text() -> None:
    tuned = apply_tuning(BreakerConfig(), {"mode": "shadow"})

    assert tuned.mode == "shadow"


def test_an_unknown_mode_is_refused_naming_the_setting_and_the_value() -> None:
    with pytest.raises(ConfigError) as refused:
        apply_tuning(BreakerConfig(), {"mode": "lenient"})

    assert str(refused.value) == "mode must be one of enforce, shadow, got 'lenient'"


def test_unreadable_tuned_text_is_logged_naming_the_breaker_and_the_problem(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # GIVEN tuned text that is not JSON
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        tuned = retuned(BreakerConfig(), "not json", "payment-api")

    # THEN the breaker keeps its config and the one warning names it and what is wrong
    assert tuned == BreakerConfig()
    (line,) = [r.getMessage() for r in caplog.records]
    with pytest.raises(ConfigError) as problem:
        decode_tuned("not json")
    assert line == f"circuit payment-api: ignoring its tuned settings: {problem.value}"


def test_an_unusable_tuned_setting_is_logged_naming_the_breaker_the_setting_and_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        retuned(BreakerConfig(), '{"failure_threshold": 0}', "payment-api")

    (line,) = [r.getMessage() for r in caplog.records]
    with pytest.raises(ConfigError) as problem:
        apply_tuning(BreakerConfig(), {"failure_threshold": 0})
    assert line == f"circuit payment-api: ignoring tuned failure_threshold: {problem.value}"


def test_a_reason_is_text_of_at_most_500_characters() -> None:
    assert check_reason(None) is None
    assert check_reason("r" * MAX_REASON_CHARS) == "r" * MAX_REASON_CHARS
    with pytest.raises(ConfigError) as too_long:
        check_reason("r" * (MAX_REASON_CHARS + 1))
    assert str(too_long.value) == "reason is 501 characters; the limit is 500"
    with pytest.raises(ConfigError) as not_text:
        check_reason(42)  # type: ignore[arg-type]
    assert str(not_text.value) == "reason must be text, got int"


def test_retuned_applies_the_stored_text() -> None:
    tuned = retuned(BreakerConfig(), '{"failure_threshold":2}', "payment-api")
    assert tuned.failure_threshold == 2


def test_the_local_user_is_unknown_when_the_system_has_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_user() -> str:
        raise OSError("no login name")

    monkeypatch.setattr("getpass.getuser", no_user)
    assert local_user() == "unknown"


def test_a_merge_keeps_the_stored_settings_it_does_not_name() -> None:
    stored = encode_tuned({"mode": "shadow", "failure_threshold": 3})

    merged = merge_tuned(stored, {"failure_rate_threshold": 0.5, "failure_threshold": 4})

    assert merged == {"mode": "shadow", "failure_threshold": 4, "failure_rate_threshold": 0.5}


@pytest.mark.parametrize("stored", ["", "not json", "[1, 2]"])
def test_a_merge_into_no_or_unreadable_settings_is_the_new_ones(stored: str) -> None:
    assert merge_tuned(stored, {"mode": "shadow"}) == {"mode": "shadow"}


def test_reset_with_a_reason_is_recorded_as_reset() -> None:
    # GIVEN a breaker an operator forced open
    clock, store = FakeClock(), MemoryStore()
    breaker = CircuitBreaker("api", store=store, config=CONFIG, clock=clock)
    breaker.force_open(reason="incident", by="alice")

    # WHEN it is reset with a reason
    clock.advance(1)
    breaker.reset(reason="provider recovered", by="bob")

    # THEN the last action says reset (it closed the breaker, whatever state it was in)
    action = Action.decode(store.load("api", clock()).last_action)  # type: ignore[union-attr]
    assert action == Action("reset", "bob", "provider recovered", clock())
