"""Powertools' CircuitBreakerConfig names, accepted by BreakerConfig as keyword aliases."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from fleetbreaker import BreakerConfig, ConfigError


def test_each_alias_sets_fleetbreakers_field() -> None:
    # GIVEN a config written with Powertools' names
    config = BreakerConfig(
        success_threshold=3, handled_exceptions=(TimeoutError,), local_cache_max_age=5
    )

    # THEN it is the config written with fleetbreaker's names
    assert config == BreakerConfig(
        half_open_successes=3, failure_exceptions=(TimeoutError,), cache_ttl=5
    )


def test_handled_exceptions_takes_one_class_as_powertools_does() -> None:
    assert BreakerConfig(handled_exceptions=TimeoutError).failure_exceptions == (TimeoutError,)
    assert BreakerConfig(handled_exceptions=[OSError]).failure_exceptions == (OSError,)


def test_the_aliases_are_documented_so_they_warn_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BreakerConfig(success_threshold=2)


def test_the_alias_is_not_kept_only_the_field() -> None:
    # GIVEN a config built with an alias
    config = BreakerConfig(local_cache_max_age=2)

    # THEN it holds fleetbreaker's field only, and replace() keeps the value
    names = {field.name for field in dataclasses.fields(config)}
    assert "local_cache_max_age" not in names
    assert dataclasses.replace(config, failure_threshold=9).cache_ttl == 2


def test_both_names_with_different_values_is_an_error_naming_both() -> None:
    with pytest.raises(ConfigError, match=r"success_threshold.*half_open_successes"):
        BreakerConfig(success_threshold=2, half_open_successes=3)


def test_both_names_with_the_same_value_is_accepted() -> None:
    assert BreakerConfig(cache_ttl=2.0, local_cache_max_age=2.0).cache_ttl == 2.0


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"success_threshold": 0}, "success_threshold must be a positive integer"),
        ({"local_cache_max_age": -1}, "local_cache_max_age must be a non-negative"),
        ({"handled_exceptions": ("TimeoutError",)}, "handled_exceptions must be a tuple"),
    ],
)
def test_a_bad_value_is_reported_under_the_name_given(kwargs: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        BreakerConfig(**kwargs)


def test_from_env_overrides_take_the_aliases_too() -> None:
    config = BreakerConfig.from_env({"BREAKER_FAILURE_THRESHOLD": "4"}, success_threshold=2)
    assert (config.failure_threshold, config.half_open_successes) == (4, 2)
