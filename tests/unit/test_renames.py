"""Public names: the removed ones are gone (nothing was released under them: CHANGELOG.md),
and the public value classes behave as the dataclasses they stand for."""

from __future__ import annotations

import dataclasses

import pytest

import fleetbreaker
import fleetbreaker.results
from fleetbreaker import Admission, BreakerConfig, CircuitBreaker, Decision, MemoryStore, State
from fleetbreaker.results import RecordResult
from tests.support import FakeClock


def test_the_removed_names_are_gone() -> None:
    # Nothing was released under the old names: they were removed, not aliased (CHANGELOG).
    admission = Admission("payment-api", Decision.REJECT, State.OPEN, 2.5)
    assert not hasattr(admission, "retry_after")
    assert not hasattr(fleetbreaker, "BreakerStats")
    assert not hasattr(fleetbreaker.results, "FallbackStats")
    breaker = CircuitBreaker("payment-api", store=MemoryStore(), clock=FakeClock())
    assert type(breaker.stats) is fleetbreaker.StoreErrorStats


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        _ = fleetbreaker.NoSuchThing  # type: ignore[attr-defined]


def test_public_values_work_with_the_dataclasses_functions() -> None:
    # GIVEN the public value classes (built without generated code, fleetbreaker.frozen)
    admission = Admission("payment-api", Decision.ALLOW, State.CLOSED)
    result = RecordResult(True, State.CLOSED, "call tallied")
    config = BreakerConfig(failure_threshold=3, success_threshold=2)
    # THEN fields, replace and asdict see their fields, as on a dataclass
    assert [f.name for f in dataclasses.fields(admission)][:4] == [
        "name",
        "decision",
        "state",
        "retry_after_s",
    ]
    assert dataclasses.replace(admission, degraded=True).degraded is True
    assert dataclasses.asdict(result) == {
        "applied": True,
        "state": State.CLOSED,
        "detail": "call tallied",
    }
    changed = dataclasses.replace(config, cache_ttl=2.0)
    assert (changed.cache_ttl, changed.half_open_successes) == (2.0, 2)
    assert "success_threshold" not in {f.name for f in dataclasses.fields(config)}
    # AND predicates stay out of equality and hashing, as field(compare=False) says
    judged = dataclasses.replace(config, is_failure=lambda exc: True)
    assert judged == config
    assert hash(judged) == hash(config)
    # AND a bad value is still refused by the config's own checks
    with pytest.raises(fleetbreaker.ConfigError, match="cache_ttl"):
        dataclasses.replace(config, cache_ttl=-1.0)


def test_counters_stay_mutable_dataclass_like_values() -> None:
    # GIVEN a breaker's counters and a store's (mutable value classes, fleetbreaker.frozen)
    from fleetbreaker.stores.base import StoreStats

    stats = fleetbreaker.StoreErrorStats()
    requests = StoreStats()
    # WHEN they count
    stats.store_errors += 1
    requests.count_read()
    # THEN they compare, show and convert as the dataclasses they replace, and do not hash
    assert stats == fleetbreaker.StoreErrorStats(store_errors=1)
    assert repr(requests) == "StoreStats(reads=1, writes=0)"
    assert dataclasses.asdict(stats)["store_errors"] == 1
    with pytest.raises(TypeError):
        hash(stats)
