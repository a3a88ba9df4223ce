"""What BreakerConfig makes of the inputs users really give: a setting under both of its names,
an alias beside its variable, a variable that breaks a rule between fields, a derived record
TTL, NaN and infinity. Every refusal names what the user set."""

from __future__ import annotations

import math
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, ConfigError
from fleetbreaker.config import ENV_FIELDS, MAX_SECONDS, POWERTOOLS_ALIASES

# -- one setting, two names --------------------------------------------------------------------

# (alias, its value, the field, another value): the field's value is its default where it can
# be, the case that slipped through when "given" meant "not at its default".
CONFLICTS = [
    ("success_threshold", 3, "half_open_successes", 1),
    ("handled_exceptions", (TimeoutError,), "failure_exceptions", (Exception,)),
    ("local_cache_max_age", 5.0, "cache_ttl", 1.0),
]


@pytest.mark.parametrize(("alias", "value", "field", "other"), CONFLICTS)
def test_both_names_with_different_values_is_an_error_naming_both(
    alias: str, value: Any, field: str, other: Any
) -> None:
    # GIVEN one setting under both of its names, the native one at its default value
    assert BreakerConfig.__dataclass_fields__[field].default == other

    # WHEN the config is built, THEN it is refused naming both names
    with pytest.raises(ConfigError) as refused:
        BreakerConfig(**{alias: value, field: other})
    assert f"{alias}=" in str(refused.value)
    assert f"{field}=" in str(refused.value)
    assert refused.value.fields == (alias, field)


def test_both_names_positionally_and_by_keyword_conflict_too() -> None:
    # GIVEN half_open_successes given by position (the seventh field), success_threshold by name
    with pytest.raises(ConfigError, match=r"success_threshold=3 and half_open_successes=1"):
        BreakerConfig(5, 60.0, 30.0, 2.0, 300.0, 0.2, 1, success_threshold=3)


def test_one_class_and_its_tuple_are_the_same_exceptions() -> None:
    config = BreakerConfig(handled_exceptions=TimeoutError, failure_exceptions=(TimeoutError,))
    assert config.failure_exceptions == (TimeoutError,)


def test_every_alias_has_a_conflict_case() -> None:
    assert {alias for alias, *_ in CONFLICTS} == set(POWERTOOLS_ALIASES)


# -- explicit beats the environment, under either name ------------------------------------------


@pytest.mark.parametrize(
    ("variable", "raw", "keyword", "value", "field"),
    [
        ("BREAKER_CACHE_TTL", "2", "local_cache_max_age", 5.0, "cache_ttl"),
        ("BREAKER_CACHE_TTL", "2", "cache_ttl", 5.0, "cache_ttl"),
        ("BREAKER_HALF_OPEN_SUCCESSES", "2", "success_threshold", 3, "half_open_successes"),
        ("BREAKER_HALF_OPEN_SUCCESSES", "2", "half_open_successes", 3, "half_open_successes"),
    ],
)
def test_an_explicit_keyword_beats_its_variable_under_either_name(
    variable: str, raw: str, keyword: str, value: Any, field: str
) -> None:
    # GIVEN the variable set, WHEN from_env gets the same setting as a keyword
    config = BreakerConfig.from_env({variable: raw}, **{keyword: value})

    # THEN the keyword wins, whichever of its names it used
    assert getattr(config, field) == value


def test_the_variable_still_applies_when_no_keyword_names_its_setting() -> None:
    config = BreakerConfig.from_env({"BREAKER_CACHE_TTL": "2"}, success_threshold=3)
    assert (config.cache_ttl, config.half_open_successes) == (2.0, 3)


def test_both_names_as_keywords_of_from_env_must_agree() -> None:
    with pytest.raises(ConfigError, match=r"local_cache_max_age=5 and cache_ttl=6"):
        BreakerConfig.from_env({"BREAKER_CACHE_TTL": "2"}, local_cache_max_age=5, cache_ttl=6)


def test_a_bad_alias_keyword_is_named_not_the_variable_it_replaced() -> None:
    # GIVEN a valid variable, and its setting given badly under Powertools' name
    with pytest.raises(ConfigError) as refused:
        BreakerConfig.from_env({"BREAKER_CACHE_TTL": "2"}, local_cache_max_age=-1)

    # THEN the refusal is about the keyword; the variable played no part
    assert str(refused.value).startswith("local_cache_max_age must be")
    assert "BREAKER_CACHE_TTL" not in str(refused.value)


# -- refusals caused by the environment name its variables ---------------------------------------


def test_a_variable_breaking_a_rule_with_a_default_names_both_variables() -> None:
    # GIVEN BREAKER_RECOVERY_TIMEOUT above max_recovery_timeout's default (300)
    with pytest.raises(ConfigError) as refused:
        BreakerConfig.from_env({"BREAKER_RECOVERY_TIMEOUT": "400"})

    # THEN the variable set is named first, and the one that would fix it is named too
    message = str(refused.value)
    assert message.startswith("BREAKER_RECOVERY_TIMEOUT: max_recovery_timeout must be at least")
    assert "max_recovery_timeout is its default 300.0: BREAKER_MAX_RECOVERY_TIMEOUT" in message


def test_two_variables_breaking_a_rule_are_both_named() -> None:
    env = {"BREAKER_RECOVERY_TIMEOUT": "400", "BREAKER_MAX_RECOVERY_TIMEOUT": "350"}

    with pytest.raises(ConfigError) as refused:
        BreakerConfig.from_env(env)

    assert str(refused.value).startswith(
        "BREAKER_MAX_RECOVERY_TIMEOUT, BREAKER_RECOVERY_TIMEOUT: max_recovery_timeout"
    )


def test_a_variable_breaking_a_rule_with_a_keyword_names_the_variable() -> None:
    with pytest.raises(ConfigError) as refused:
        BreakerConfig.from_env({"BREAKER_MAX_RECOVERY_TIMEOUT": "10"}, recovery_timeout=30)

    message = str(refused.value)
    assert message.startswith("BREAKER_MAX_RECOVERY_TIMEOUT: max_recovery_timeout")
    # recovery_timeout was given in code: no variable is offered for it
    assert "BREAKER_RECOVERY_TIMEOUT" not in message


def test_a_keyword_breaking_a_rule_alone_names_no_variable() -> None:
    with pytest.raises(ConfigError) as refused:
        BreakerConfig.from_env({}, recovery_timeout=400)

    assert str(refused.value).startswith("max_recovery_timeout must be at least")
    assert "BREAKER_" not in str(refused.value)


@pytest.mark.parametrize("variable", sorted(f"BREAKER_{name.upper()}" for name in ENV_FIELDS))
def test_every_variable_that_cannot_be_read_is_named(variable: str) -> None:
    with pytest.raises(ConfigError) as refused:
        BreakerConfig.from_env({variable: "not a number" if variable != "BREAKER_MODE" else "x"})
    assert str(refused.value).startswith(variable)


# -- record_ttl_seconds: derived unless given ------------------------------------------------


@pytest.mark.parametrize(
    ("env", "ttl"),
    [
        ({"BREAKER_MAX_RECOVERY_TIMEOUT": "100000"}, 100_010),
        ({"BREAKER_PROBE_LEASE_SECONDS": "90000"}, 90_300),
        (
            {"BREAKER_MAX_RECOVERY_TIMEOUT": "100000.5", "BREAKER_PROBE_LEASE_SECONDS": "0.25"},
            100_001,
        ),
    ],
)
def test_an_untouched_record_ttl_grows_to_fit_settings_within_their_bounds(
    env: dict[str, str], ttl: int
) -> None:
    # GIVEN open windows or leases longer than a day, each inside its documented bound
    config = BreakerConfig.from_env(env)

    # THEN the record lives as long as they need (rounded up to a whole second)
    assert config.record_ttl_seconds == ttl
    assert config.record_ttl_seconds >= config.max_recovery_timeout + config.probe_lease_seconds


def test_the_default_record_ttl_stays_a_day_when_it_is_long_enough() -> None:
    assert BreakerConfig(max_recovery_timeout=3_600).record_ttl_seconds == 86_400


def test_the_longest_settings_take_a_record_ttl_past_its_own_bound() -> None:
    # GIVEN both durations at their bound: the derived TTL is their sum, twice the bound a
    # given record_ttl_seconds may have (epoch seconds plus it still fits the record's digits)
    config = BreakerConfig(
        recovery_timeout=MAX_SECONDS,
        max_recovery_timeout=MAX_SECONDS,
        probe_lease_seconds=MAX_SECONDS,
    )
    assert config.record_ttl_seconds == 2 * int(MAX_SECONDS)


def test_a_given_record_ttl_too_short_is_refused_saying_what_fits() -> None:
    with pytest.raises(ConfigError) as refused:
        BreakerConfig(max_recovery_timeout=100_000, record_ttl_seconds=3_600)

    message = str(refused.value)
    assert message.startswith("record_ttl_seconds must outlast")
    assert "give at least 100,010" in message


def test_a_given_record_ttl_too_short_for_a_variable_names_the_variable() -> None:
    with pytest.raises(ConfigError) as refused:
        BreakerConfig.from_env({"BREAKER_MAX_RECOVERY_TIMEOUT": "100000"}, record_ttl_seconds=3_600)

    assert str(refused.value).startswith("BREAKER_MAX_RECOVERY_TIMEOUT: record_ttl_seconds")


def test_a_derived_record_ttl_is_kept_by_replace() -> None:
    import dataclasses

    config = BreakerConfig(max_recovery_timeout=100_000)
    assert dataclasses.replace(config, failure_threshold=2).record_ttl_seconds == 100_010


# -- NaN and infinity: refused naming the field given -----------------------------------------

NUMBER_FIELDS = [
    "failure_threshold",
    "window_seconds",
    "recovery_timeout",
    "recovery_backoff",
    "max_recovery_timeout",
    "recovery_jitter",
    "half_open_successes",
    "half_open_max_probes",
    "probe_lease_seconds",
    "cache_ttl",
    "record_ttl_seconds",
    "store_backoff_seconds",
    "store_deadline_seconds",
    "recovery_ramp_seconds",
    "failure_rate_threshold",
    "minimum_calls",
    "slow_call_duration",
    "slow_call_rate_threshold",
    "min_containers",
    "report_interval",
    "success_threshold",
    "local_cache_max_age",
]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("field", NUMBER_FIELDS)
def test_nan_and_infinity_are_refused_naming_the_field_given(field: str, value: float) -> None:
    with pytest.raises(ConfigError) as refused:
        BreakerConfig(**{field: value})

    assert str(refused.value).startswith(f"{field} must be"), str(refused.value)
    assert refused.value.fields[0] == field


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "NaN", "Infinity"])
@pytest.mark.parametrize(
    "field", sorted(name for name, kind in ENV_FIELDS.items() if kind is float)
)
def test_nan_and_infinity_variables_are_refused_naming_the_variable(field: str, raw: str) -> None:
    variable = f"BREAKER_{field.upper()}"

    with pytest.raises(ConfigError) as refused:
        BreakerConfig.from_env({variable: raw})

    assert str(refused.value).startswith(f"{variable}: {field} must be"), str(refused.value)


def test_every_number_field_is_in_the_nan_test() -> None:
    numbers = {
        name
        for name, entry in BreakerConfig.__dataclass_fields__.items()
        if any(kind in str(entry.type) for kind in ("int", "float"))
    }
    assert numbers == set(NUMBER_FIELDS)
