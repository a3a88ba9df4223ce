"""The census scenarios (tests/fleet/scenarios.py), each over many seeded trials, on every
kind of store.

Target: each holds in at least 999 of 1,000 seeded trials. MemoryStore runs the 1,000 (the
rules are the same on every store: tests/contract). DynamoDB (moto in-process, a few ms a
request) and Redis run MOTO_TRIALS and REDIS_TRIALS each here, which must all pass; with
``FLEET_TRIALS=N`` every store runs N (docs/testing.md records the last long run).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fleetbreaker import DynamoDBStore, MemoryStore, RedisStore
from tests.coverage_scope import untraced
from tests.fleet.scenarios import SCENARIOS

MEMORY_TRIALS = int(os.environ.get("FLEET_TRIALS", "1000"))
MOTO_TRIALS = int(os.environ.get("FLEET_TRIALS", "4"))
REDIS_TRIALS = int(os.environ.get("FLEET_TRIALS", "12"))
# Under coverage, the first TRACED_TRIALS trials of a scenario are traced (the first
# DYNAMODB_REDIS_TRACED_TRIALS on DynamoDB and Redis); the rest run the same package lines
# untraced, at a third of the CPU: the whole trial, its set-up and checks too, and the store
# calls its breakers hand to store workers (tests/coverage_scope.py). A seed changes when
# things happen, not which lines run. The 100-container scenario on the three stores: 67 s of
# CPU with 50 traced, 55 s with 3. On DynamoDB and Redis, where a traced trial costs the most,
# one traced trial covers the lines and branches three did (compared on their 14 tests).
TRACED_TRIALS = 3
DYNAMODB_REDIS_TRACED_TRIALS = 1


def trials(
    scenario: str, stores: Callable[[], Any], count: int, traced: int = TRACED_TRIALS
) -> tuple[int, dict[int, list[str]]]:
    """Run ``count`` seeded trials of ``scenario``, each on a fresh breaker name, the first
    ``traced`` of them traced by coverage."""
    run = SCENARIOS[scenario]
    failed: dict[int, list[str]] = {}
    for seed in range(count):
        trial = run if seed < traced else untraced(run)
        problems = trial(stores(), seed, f"{scenario}-{seed}-{uuid.uuid4().hex[:6]}")
        if problems:
            failed[seed] = problems
    return count - len(failed), failed


def allowed_failures(count: int) -> int:
    """At least 999 of 1,000: one failure per full thousand trials."""
    return count // 1000


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_each_scenario_holds_on_memory_store(scenario: str) -> None:
    passed, failed = trials(scenario, MemoryStore, MEMORY_TRIALS)
    assert len(failed) <= allowed_failures(MEMORY_TRIALS), (passed, dict(list(failed.items())[:5]))


@pytest.fixture
def moto_stores() -> Iterator[Callable[[], DynamoDBStore]]:
    from moto import mock_aws

    from devtools import servers

    with mock_aws():
        client = servers.dynamodb_client(None)
        client.create_table(
            TableName="FleetBreakers",
            KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield lambda: DynamoDBStore("FleetBreakers", boto3_client=client)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_each_scenario_holds_on_dynamodb(
    scenario: str, moto_stores: Callable[[], DynamoDBStore]
) -> None:
    passed, failed = trials(scenario, moto_stores, MOTO_TRIALS, DYNAMODB_REDIS_TRACED_TRIALS)
    assert len(failed) <= allowed_failures(MOTO_TRIALS), (passed, dict(list(failed.items())[:5]))


@pytest.fixture
def redis_stores(redis_server: str) -> Iterator[Callable[[], RedisStore]]:
    # The trials move a virtual clock: the scripts take the caller's time.
    store = RedisStore(
        url=redis_server,
        key_prefix=f"fleet-{uuid.uuid4().hex[:8]}",
        use_server_time=False,
        socket_timeout=5.0,
    )
    yield lambda: store
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_each_scenario_holds_on_redis(
    scenario: str, redis_stores: Callable[[], RedisStore]
) -> None:
    passed, failed = trials(scenario, redis_stores, REDIS_TRIALS, DYNAMODB_REDIS_TRACED_TRIALS)
    assert len(failed) <= allowed_failures(REDIS_TRIALS), (passed, dict(list(failed.items())[:5]))
