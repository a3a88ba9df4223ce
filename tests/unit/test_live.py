"""Live tuning as a breaker follows it: the text it follows, the config and policy it gives."""

from __future__ import annotations

from fleetbreaker import BreakerConfig
from fleetbreaker.live import LiveTuning
from fleetbreaker.policy import Policy
from fleetbreaker.tuning import encode_tuned

DEPLOYED = BreakerConfig(failure_threshold=5)


def test_it_starts_with_the_deployed_settings() -> None:
    tuning = LiveTuning(DEPLOYED, "payment-api")
    assert (tuning.config, tuning.text, tuning.policy.failure_threshold) == (DEPLOYED, "", 5)


def test_a_new_text_gives_the_tuned_config_and_policy() -> None:
    tuning = LiveTuning(DEPLOYED, "payment-api")
    config = tuning.follow(encode_tuned({"failure_threshold": 9}))
    assert config is not None
    assert config.failure_threshold == 9
    assert (tuning.config, tuning.policy.failure_threshold) == (config, 9)


def test_the_same_text_again_is_no_change() -> None:
    tuning = LiveTuning(DEPLOYED, "payment-api")
    text = encode_tuned({"mode": "shadow"})
    assert tuning.follow(text) is not None
    assert tuning.follow(text) is None


def test_an_empty_text_returns_to_the_deployed_settings() -> None:
    tuning = LiveTuning(DEPLOYED, "payment-api")
    tuning.follow(encode_tuned({"failure_threshold": 9}))
    assert tuning.follow("") == DEPLOYED


def test_the_followed_config_s_policy_is_built_once_and_any_other_gets_its_own() -> None:
    # GIVEN live tuning that followed a tuned text
    tuning = LiveTuning(DEPLOYED, "payment-api")
    config = tuning.follow(encode_tuned({"failure_threshold": 9}))
    assert config is not None
    # THEN the policy of the config it follows is the one it built (a breaker's mode takes
    # it: no second build at construction or on a tune), and another config's is its own
    assert tuning.policy_for(config) is tuning.policy
    assert tuning.policy_for(DEPLOYED) == Policy.from_config(DEPLOYED)
    assert tuning.policy_for(DEPLOYED).failure_threshold == 5
