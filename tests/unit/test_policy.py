"""The policy: a breaker's config as the numbers the rules and the stores read (pure: no
store, no clock)."""

from __future__ import annotations

import pytest

from fleetbreaker import BreakerConfig, State
from fleetbreaker.frozen import replace
from fleetbreaker.policy import (
    MAX_RATIO_DENOMINATOR,
    OVERRIDE_TTL_S,
    Policy,
    alone,
    check_weight,
    exact_ratio,
    open_duration_ms,
    reaches,
    ttl_seconds,
)
from fleetbreaker.record import WINDOW_BUCKETS
from tests.support import make_policy

# Open 30 s at first, doubling up to 300 s (BreakerConfig's defaults).
GROWING = make_policy(failure_threshold=3, window_seconds=10)


# -- from_config: seconds become store units --------------------------------------------------


def test_a_config_becomes_the_numbers_in_store_units() -> None:
    # GIVEN a config in seconds
    config = BreakerConfig(
        failure_threshold=4,
        window_seconds=12.5,
        recovery_timeout=7,
        recovery_backoff=3,
        max_recovery_timeout=90,
        half_open_max_probes=2,
        half_open_successes=2,
        probe_lease_seconds=1.5,
        record_ttl_seconds=7_200,
    )
    # THEN the policy holds them in ms (times) and s (the record's TTL), backoff as a float
    assert Policy.from_config(config) == Policy(
        failure_threshold=4,
        window_ms=12_500,
        base_open_ms=7_000,
        backoff=3.0,
        max_open_ms=90_000,
        max_probes=2,
        successes_needed=2,
        lease_ms=1_500,
        ttl_s=7_200,
    )
    assert isinstance(Policy.from_config(config).backoff, float)


def test_the_count_policy_does_not_report() -> None:
    policy = make_policy(failure_threshold=3)
    assert (policy.failure_rate, policy.slow_ms, policy.reporting) == (None, None, False)


def test_rate_settings_carry_over_and_the_slow_duration_becomes_ms() -> None:
    policy = make_policy(
        failure_rate_threshold=0.4,
        minimum_calls=8,
        slow_call_duration=0.25,
        slow_call_rate_threshold=0.6,
        min_containers=3,
    )
    assert (policy.failure_rate, policy.minimum_calls, policy.slow_ms) == (0.4, 8, 250)
    assert (policy.slow_rate, policy.min_containers, policy.reporting) == (0.6, 3, True)


def test_a_time_under_half_a_millisecond_is_one_millisecond_never_zero() -> None:
    # GIVEN durations that round to 0 ms: a zero would mean "already over" to the rules
    tiny = 0.0004
    policy = make_policy(
        window_seconds=tiny,
        recovery_timeout=tiny,
        max_recovery_timeout=tiny,
        probe_lease_seconds=tiny,
        slow_call_duration=tiny,
    )
    # THEN each is 1 ms
    times = (policy.window_ms, policy.base_open_ms, policy.max_open_ms, policy.lease_ms)
    assert times == (1, 1, 1, 1)
    assert policy.slow_ms == 1


def test_a_window_is_cut_into_buckets_rounded_up() -> None:
    # GIVEN windows that divide and do not divide into WINDOW_BUCKETS
    even = make_policy(window_seconds=WINDOW_BUCKETS)
    uneven = make_policy(window_seconds=WINDOW_BUCKETS + 0.001)
    # THEN a bucket is the window's share, rounded up (the buckets cover the whole window)
    assert even.bucket_ms == 1_000
    assert uneven.bucket_ms == 1_001
    assert uneven.bucket_ms * WINDOW_BUCKETS >= uneven.window_ms


# -- rate thresholds: compared exactly, as their decimal text says ----------------------------


def test_a_rate_threshold_is_the_fraction_its_decimal_text_says() -> None:
    assert exact_ratio(0.55) == (11, 20)
    assert exact_ratio(0.5) == (1, 2)
    assert exact_ratio(1.0) == (1, 1)


def test_a_threshold_past_six_decimals_is_the_nearest_fraction_the_stores_compare_exactly() -> None:
    numerator, denominator = exact_ratio(1 / 3)
    assert denominator <= MAX_RATIO_DENOMINATOR
    assert (numerator, denominator) == (1, 3)
    _, denominator = exact_ratio(0.12345678901)
    assert denominator <= MAX_RATIO_DENOMINATOR


def test_55_of_100_reaches_a_threshold_of_0_55_and_54_does_not() -> None:
    # 55 / 100 as doubles is 0.55000000000000004441 >= 0.55000000000000004441, but 0.55 * 100
    # is 55.000000000000007: a float comparison could go either way; integers cannot.
    ratio = make_policy(failure_rate_threshold=0.55).failure_ratio
    assert ratio is not None
    assert reaches(55, 100, ratio)
    assert not reaches(54, 100, ratio)


def test_the_count_policy_has_no_failure_ratio_and_slow_calls_default_to_all() -> None:
    policy = make_policy(failure_threshold=3)
    assert policy.failure_ratio is None
    assert policy.slow_ratio == (1, 1)
    assert make_policy(slow_call_rate_threshold=0.25).slow_ratio == (1, 4)


# -- alone: a container that lost the store ---------------------------------------------------


def test_a_container_alone_needs_no_quorum_of_others() -> None:
    # GIVEN a policy whose trips wait for 3 failing containers
    quorum = make_policy(failure_threshold=3, min_containers=3)
    # THEN alone, a container's own failures are the quorum; the rest is unchanged (it still
    # counts in reports, as the fleet does)
    local = alone(quorum)
    assert local == replace(quorum, min_containers=1)
    assert local.reporting


def test_a_policy_without_a_quorum_is_its_own_alone_policy() -> None:
    policy = make_policy(failure_threshold=3)
    assert alone(policy) is policy


# -- failure weights ------------------------------------------------------------------------------


@pytest.mark.parametrize("weight", [1, 2, 1_000])
def test_a_whole_weight_of_one_or_more_is_accepted(weight: int) -> None:
    check_weight(weight)


@pytest.mark.parametrize("weight", [0, -1, True, 1.0, "2", None])
def test_any_other_weight_is_refused_naming_it(weight: object) -> None:
    with pytest.raises(ValueError, match=f"got {weight!r}"):
        check_weight(weight)  # type: ignore[arg-type]


# -- how long a breaker stays open ------------------------------------------------------------


@pytest.mark.parametrize(
    ("reopens", "jitter", "expected"),
    [(0, 0.5, 30_000), (1, 1.0, 60_000), (2, 1.0, 120_000), (2, 0.8, 96_000), (9, 1.0, 300_000)],
)
def test_open_duration_grows_exponentially_with_jitter_and_a_cap(
    reopens: int, jitter: float, expected: int
) -> None:
    assert open_duration_ms(GROWING, reopens, jitter) == expected


def test_the_first_opening_lasts_exactly_the_recovery_timeout_whatever_the_jitter() -> None:
    assert open_duration_ms(GROWING, 0, 0.01) == GROWING.base_open_ms
    assert open_duration_ms(GROWING, -1, 0.01) == GROWING.base_open_ms


def test_a_breaker_that_failed_to_recover_for_ages_waits_the_cap_without_overflow() -> None:
    # 2.0 ** 10_000 overflows a float: the exponent stops growing once the cap is reached
    assert open_duration_ms(GROWING, 10_000, 1.0) == GROWING.max_open_ms


def test_a_jittered_open_duration_is_whole_milliseconds_and_never_zero() -> None:
    assert open_duration_ms(GROWING, 1, 0.123456) == 7_407  # floor(60_000 * 0.123456)
    assert open_duration_ms(make_policy(recovery_timeout=0.001), 1, 0.1) == 1


# -- how long a record is kept ------------------------------------------------------------------


@pytest.mark.parametrize("state", [State.CLOSED, State.OPEN, State.HALF_OPEN])
def test_a_record_the_breaker_wrote_is_kept_for_the_record_ttl(state: State) -> None:
    assert ttl_seconds(make_policy(record_ttl_seconds=3_600), state) == 3_600


@pytest.mark.parametrize("state", [State.FORCED_OPEN, State.DISABLED])
def test_an_operators_override_outlives_any_idle_ttl(state: State) -> None:
    assert ttl_seconds(make_policy(record_ttl_seconds=3_600), state) == OVERRIDE_TTL_S
    longer = OVERRIDE_TTL_S + 1
    assert ttl_seconds(Policy.from_config(BreakerConfig(record_ttl_seconds=longer)), state) == (
        longer
    )
