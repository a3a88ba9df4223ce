"""A fleet restored from one SnapStart snapshot is a fleet of new containers, on every store.

Each test runs one life of a function under SnapStart (tests/restore/runtime.py): init in a
process of its own, the Lambda runtime's before-snapshot hooks, then 4 environments restored
from it, one after another, each a fork whose ``os.getpid`` answers the snapshot's pid, with
the runtime's after-restore hooks run as awslambdaric runs them. The stores: MemoryStore in
a server process all of them reach, DynamoDB on moto's server (and on dynalite for the
connections: moto's server keeps none open), Redis over TLS as an IAM user
(tests/restore/conftest.py). The controls at the end run the same lives without the hooks:
what the fleet was before them, and proof that each test can fail.
"""

from __future__ import annotations

import json

import pytest

from fleetbreaker import BreakerConfig
from fleetbreaker.policy import Policy
from fleetbreaker.rules import sliding_window
from tests.restore.conftest import ENVIRONMENTS, RESTORE_AFTER_S, Life, Restore, StoreUnderTest
from tests.restore.scenarios import T_INIT_MS, Counts

pytestmark = pytest.mark.slow

# The restores' clock after the scenarios' last step (wake, then 2 s to a report).
AFTER_MS = T_INIT_MS + round((RESTORE_AFTER_S + 2.0) * 1000)


def rate_policy() -> Policy:
    return Policy.from_config(BreakerConfig(failure_rate_threshold=0.5))


# -- on each store ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def identity_lives() -> dict[str, Life]:
    """The "identity" life on each store, run once for the two tests below that only read
    it (they form one worker's group: tests/workers.py)."""
    return {}


def identity_life(lives: dict[str, Life], restore: Restore, store: StoreUnderTest) -> Life:
    if store.kind not in lives:
        lives[store.kind] = restore("identity", store)
    return lives[store.kind]


def test_each_restored_environment_has_a_container_id_of_its_own(
    restore: Restore, store: StoreUnderTest, identity_lives: dict[str, Life]
) -> None:
    # GIVEN a breaker built at init WHEN 4 environments are restored from its snapshot
    life = identity_life(identity_lives, restore, store)
    # THEN each has an id of its own, none the snapshot's, and each stayed on the store
    ids = [environment["container_id"] for environment in life.restored]
    assert len(set(ids)) == ENVIRONMENTS
    assert life.snapshot["container_id"] not in ids
    assert life.init["container_id"] == life.snapshot["container_id"]
    assert not any(environment["degraded"] for environment in life.restored)


def test_each_restored_environment_draws_its_own_random_numbers(
    restore: Restore, store: StoreUnderTest, identity_lives: dict[str, Life]
) -> None:
    # GIVEN a breaker built at init WHEN 4 environments are restored from its snapshot
    life = identity_life(identity_lives, restore, store)
    # THEN their breakers' random streams differ from each other and from the snapshot's
    streams = [tuple(environment["draws"]) for environment in life.restored]
    streams.append(tuple(life.snapshot["draws"]))
    assert len(set(streams)) == ENVIRONMENTS + 1


def test_no_call_is_lost_or_counted_twice(
    restore: Restore, store: StoreUnderTest, name: str
) -> None:
    # GIVEN a rate-policy breaker that tallied 7 calls (2 failing) at init, unreported
    # WHEN the snapshot is taken and 4 restored environments each report 5 calls (1 failing)
    restore("counts", store)
    # THEN the fleet's window holds the init's calls once and each environment's once
    record = store.load(name, AFTER_MS)
    counts = sliding_window(rate_policy()).counts(record, AFTER_MS)
    assert counts.calls == Counts.INIT_CALLS + ENVIRONMENTS * Counts.CALLS
    assert counts.failures == Counts.INIT_FAILURES + ENVIRONMENTS * Counts.FAILURES


def test_a_quorum_of_n_is_met_by_n_restored_environments(
    restore: Restore, store: StoreUnderTest, name: str
) -> None:
    # GIVEN a breaker built at init with min_containers = 4
    # WHEN 4 environments restored from its snapshot each fail 2 calls of 3
    life = restore("quorum", store)
    # THEN the breaker stayed closed through the first 3 and opened with the 4th: 4 distinct
    # failing containers
    states = [environment["state"] for environment in life.restored[:-1]]
    assert states == ["closed"] * (ENVIRONMENTS - 1)
    record = store.load(name, AFTER_MS)
    assert record is not None
    assert record.state.value == "open"


@pytest.mark.parametrize("kind", ["dynalite", "redis"])
def test_each_restored_environment_opens_a_connection_of_its_own(
    restore: Restore, kind: str, request: pytest.FixtureRequest
) -> None:
    # GIVEN a breaker whose init opened one connection to its store (through a proxy that
    # counts them); for Redis, the IAM token signed at init is refused after the snapshot
    store: StoreUnderTest = request.getfixturevalue(f"{kind}_store")
    assert store.proxy is not None
    # WHEN 4 environments restored from its snapshot each make a call
    life = restore("identity", store)
    # THEN each opened a connection of its own (and logged in anew), and none degraded
    assert store.proxy.accepted == 1 + ENVIRONMENTS
    assert [environment["store_errors"] for environment in life.restored] == [0] * ENVIRONMENTS


# -- the process's own pieces (MemoryStore) --------------------------------------------------


@pytest.mark.realtime
def test_a_call_hung_in_a_restored_environment_is_reported_slow(
    restore: Restore, memory_store: StoreUnderTest
) -> None:
    # GIVEN a breaker with slow_call_duration whose slow-call watcher started at init
    # WHEN a call hangs in each restored environment (its clock 20 durations on)
    life = restore("slow_calls", memory_store, wait_s=10.0)
    # THEN the restored process's watcher reports it while it runs, in every environment
    # (the fork left no watcher thread: SnapStart would have resumed one, as a restore by
    # another mechanism may not)
    assert [environment["slow_calls_in_window"] for environment in life.restored] == list(
        range(1, ENVIRONMENTS + 1)
    )


def test_the_metrics_of_init_are_written_once(
    restore: Restore, memory_store: StoreUnderTest
) -> None:
    # GIVEN a breaker with an EMF MetricsListener whose init made one store call
    # WHEN 4 restored environments each make one and write their metrics
    life = restore("metrics", memory_store)
    # THEN there is one document per process (the init's written before the snapshot), and
    # each store call's latency sample appears once
    documents = [json.loads(line) for line in life.stdout.splitlines() if '"_aws"' in line]
    assert [len(document["StoreLatency"]) for document in documents] == [1] * (1 + ENVIRONMENTS)


# -- without the hooks: the fleet this package had before them -------------------------------


def test_without_the_hooks_every_restored_environment_is_the_snapshots_container(
    restore: Restore, memory_store: StoreUnderTest
) -> None:
    # GIVEN a runtime that runs no hook WHEN 4 environments are restored
    life = restore("identity", memory_store, hooks=False)
    # THEN all of them have the snapshot's id and draw the snapshot's random numbers
    assert {env["container_id"] for env in life.restored} == {life.snapshot["container_id"]}
    assert all(env["draws"] == life.snapshot["draws"] for env in life.restored)


def test_without_the_hooks_the_init_calls_are_counted_by_every_environment(
    restore: Restore, memory_store: StoreUnderTest, name: str
) -> None:
    # GIVEN a runtime that runs no hook WHEN the counts life runs
    restore("counts", memory_store, hooks=False)
    # THEN every environment reports the init's calls again with its own
    counts = sliding_window(rate_policy()).counts(memory_store.load(name, AFTER_MS), AFTER_MS)
    assert counts.calls == ENVIRONMENTS * (Counts.INIT_CALLS + Counts.CALLS)


def test_without_the_hooks_the_quorum_sees_one_container(
    restore: Restore, memory_store: StoreUnderTest, name: str
) -> None:
    # GIVEN a runtime that runs no hook WHEN the quorum life runs
    restore("quorum", memory_store, hooks=False)
    # THEN the 4 environments count as one failing container, and the breaker stays closed
    record = memory_store.load(name, AFTER_MS)
    assert record is not None
    assert len(record.failing) == 1
    assert record.state.value == "closed"
