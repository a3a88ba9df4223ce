"""BreakerConfig's checks at their bounds: the largest count and duration accepted, and how
a refused value is shown (as it is, or by its number of digits when it is huge)."""

from __future__ import annotations

import pytest

from fleetbreaker import BreakerConfig, ConfigError
from fleetbreaker.config import MAX_COUNT, MAX_SECONDS


def test_the_largest_count_is_accepted() -> None:
    assert BreakerConfig(failure_threshold=MAX_COUNT).failure_threshold == MAX_COUNT


def test_the_longest_duration_is_accepted() -> None:
    assert BreakerConfig(window_seconds=MAX_SECONDS).window_seconds == MAX_SECONDS


def test_a_refused_count_is_shown_as_given() -> None:
    with pytest.raises(ConfigError) as refused:
        BreakerConfig(failure_threshold=0)

    assert str(refused.value) == (
        f"failure_threshold must be a positive integer up to {MAX_COUNT:,}, got 0"
    )


def test_a_count_just_past_the_bound_is_shown_with_all_its_digits() -> None:
    with pytest.raises(ConfigError) as refused:
        BreakerConfig(failure_threshold=MAX_COUNT + 1)

    assert str(refused.value).endswith(f", got {MAX_COUNT + 1}")


def test_an_integer_of_21_digits_is_shown_by_its_size() -> None:
    # GIVEN 10**20, the smallest integer shown by its size (a 400-digit one would flood a log)
    with pytest.raises(ConfigError) as refused:
        BreakerConfig(failure_threshold=10**20)

    assert str(refused.value).endswith(", got an integer of 21 digits")


def test_powertools_list_of_exception_classes_is_kept_as_a_tuple() -> None:
    # GIVEN Powertools' handled_exceptions as a list, as Powertools accepts it
    config = BreakerConfig(handled_exceptions=[TimeoutError, ConnectionError])

    # THEN the breaker counts exactly those classes

    assert config.failure_exceptions == (TimeoutError, ConnectionError)
