"""Renamed public names keep working, with a DeprecationWarning (CHANGELOG.md)."""

from __future__ import annotations

import dataclasses

import pytest

import fleetbreaker
from fleetbreaker import Admission, BreakerConfig, CircuitBreaker, Decision, MemoryStore, State
from fleetbreaker.results import RecordResult
from tests.support import FakeClock


def test_admission_retry_after_still_answers_in_seconds_with_a_warning() -> None:
    # GIVEN a rejecting admission that names its wait in seconds
    admission = Admission("payment-api", Decision.REJECT, State.OPEN, 2.5)
    # WHEN the old name is read THEN it warns and gives the same seconds
    with pytest.warns(DeprecationWarning, match="retry_after_s"):
        assert admission.retry_after == 2.5
    assert admission.retry_after_s == 2.5


def test_breaker_stats_is_the_store_error_stats_with_a_warning() -> None:
    # GIVEN the package WHEN the old name of the stats type is read THEN it warns
    with pytest.warns(DeprecationWarning, match="StoreErrorStats"):
        old = fleetbreaker.BreakerStats
    # AND it is the type a breaker's stats have
    breaker = CircuitBreaker("payment-api", store=MemoryStore(), clock=FakeClock())
    assert old is fleetbreaker.StoreErrorStats
    assert isinstance(breaker.stats, old)


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
