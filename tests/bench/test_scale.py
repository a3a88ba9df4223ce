"""bench/scale.py run tiny: 20 containers for a few virtual seconds on a MemoryStore.

The figures in bench/README.md come from the full run; this checks the invariants the
simulation is there to show, on the same code path, without timing anything.
"""

from __future__ import annotations

import pytest

from bench.scale import ITEM_WRITE_CAP, DynamoDBModelStore, Result, Scenario, simulate
from devtools.servers import dynamodb_client, make_table
from fleetbreaker import DynamoDBStore, MemoryStore

CONTAINERS = 20
TIMELINE = {"warmup_s": 1.0, "noise_s": 3.0, "outage_s": 8.0, "calls_per_s": 2_000}


def _run(policy: str, noise: float = 0.005) -> Result:
    scenario = Scenario(CONTAINERS, policy, noise=noise, **TIMELINE)
    return simulate(scenario, MemoryStore(), "memory", f"tiny-{policy}-{noise}")


@pytest.fixture(scope="module")
def rate() -> Result:
    return _run("rate")


@pytest.fixture(scope="module")
def count() -> Result:
    return _run("count")


def test_rate_policy_does_not_trip_on_half_a_percent_of_noise(rate: Result) -> None:
    # GIVEN 20 containers with 0.5 % of calls failing at random (about 10 failures a second)
    # WHEN the rate policy (50 % over 10 s) watches them
    # THEN the breaker never opens and no healthy call is rejected
    assert rate.noise_calls > 0
    assert rate.spurious_trips == 0
    assert rate.noise_rejected == 0


def test_count_policy_trips_on_the_same_noise(count: Result) -> None:
    # GIVEN the same fleet and noise, WHEN the count policy (5 failures in 60 s) watches it
    # THEN the noise alone opens the breaker and healthy calls are rejected
    assert count.spurious_trips >= 1
    assert count.noise_rejected > 0


def test_rate_policy_fleet_rejects_soon_after_the_outage(rate: Result) -> None:
    # GIVEN 3 s of healthy calls in the window, WHEN every call starts failing
    # THEN the failure rate reaches 50 % after about 3 s and every container rejects within
    # one cache_ttl (1 s) more, with slack for the report interval
    assert rate.trip_s is not None
    assert rate.trip_s <= 5.0
    assert rate.fleet_rejecting_s is not None
    assert rate.fleet_rejecting_s <= 6.0


def test_count_policy_fleet_rejects_within_one_cache_ttl_from_closed() -> None:
    # GIVEN a closed breaker (no noise), WHEN every call starts failing
    # THEN the fifth failure trips it and every container rejects within cache_ttl
    result = _run("count", noise=0.0)
    assert result.trip_s is not None
    assert result.trip_s < 0.1
    assert result.fleet_rejecting_s is not None
    assert result.fleet_rejecting_s <= 1.0


def test_rate_policy_peak_writes_stay_under_one_dynamodb_item(rate: Result) -> None:
    # GIVEN the rate policy through noise and outage, THEN its reports reached the store, and
    # no second took more writes than one DynamoDB item accepts
    assert rate.writes > 0
    assert rate.peak_writes_per_s <= ITEM_WRITE_CAP


def test_count_policy_peak_writes_stay_under_one_dynamodb_item(count: Result) -> None:
    # GIVEN the count policy at this scale, THEN its failure writes stay under the cap too
    assert count.peak_writes_per_s <= ITEM_WRITE_CAP


def test_dynamodb_model_counts_the_writes_dynamodb_store_makes(moto_server: str) -> None:
    # GIVEN the same tiny rate-policy run on DynamoDBStore (moto's server) and on the model
    # that prices 5,000 containers: MemoryStore's rules plus DynamoDBStore's lost fences
    scenario = Scenario(
        CONTAINERS, "rate", warmup_s=1.0, noise_s=2.0, outage_s=3.0, calls_per_s=400
    )
    table = make_table(moto_server)
    real = DynamoDBStore(table, boto3_client=dynamodb_client(moto_server))
    model = DynamoDBModelStore()

    # WHEN both run it
    on_dynamodb = simulate(scenario, real, "moto", "model-check")
    on_model = simulate(scenario, model, "ddb-model", "model-check")

    # THEN they made the same store requests, lost fences included
    assert model.fence_misses > 0
    assert on_model.writes == on_dynamodb.writes
    assert on_model.reads == on_dynamodb.reads
    assert on_model.trip_s == on_dynamodb.trip_s
