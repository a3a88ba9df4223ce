"""Hypothesis drives a fleet under the rate policy (failure and slow-call rates, quorum) and
checks, after every step, what no store may get wrong:

- at most one trip per generation;
- a trip only when the window justified it: recomputed here from every report the store
  accepted (an independent model of the buckets and of the distinct failing containers);
- without a quorum, the breaker opens as soon as the window justifies it (never later);
- the probe budget and stale-probe fences hold as under the count policy.

It runs on MemoryStore (the rules themselves), DynamoDB (moto) and Redis (redis-server), so
each store's own implementation of ``report`` is checked against the model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fleetbreaker import (
    Admission,
    BreakerConfig,
    CircuitBreaker,
    CircuitOpenError,
    Decision,
    MemoryStore,
    State,
    rules,
)
from fleetbreaker.policy import Policy
from fleetbreaker.record import WINDOW_BUCKETS, Report
from fleetbreaker.window import RECENT_BUCKETS, WindowCounts
from tests.coverage_scope import traced_step, untraced
from tests.support import FakeClock

NAME = "stateful-rate"
CONTAINERS = 3
BASE = BreakerConfig(
    failure_rate_threshold=0.5,
    minimum_calls=4,
    window_seconds=10,
    slow_call_duration=2.0,
    slow_call_rate_threshold=0.5,
    recovery_timeout=5,
    max_recovery_timeout=20,
    half_open_max_probes=2,
    probe_lease_seconds=3,
    cache_ttl=1.0,
    record_ttl_seconds=3600,
    # The machine checks the rules, not the deadline: a loaded machine must not degrade it.
    store_deadline_seconds=30,
)


class Journal:
    """Wraps a store: every accepted report, and every trip, checked against the model."""

    def __init__(self, store: Any, policy: Policy, quorum: bool) -> None:
        self.store = store
        self.stats = store.stats
        self.policy = policy
        self.quorum = quorum
        self.accepted: list[tuple[int, Report]] = []  # since the last transition
        self.trip_gens: list[int] = []
        # The breaker treats anything a store raises as a store error and goes on locally,
        # so violations are collected here and asserted by the machine's invariant.
        self.violations: list[str] = []

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.store, attribute)

    def _model(self, now: int) -> WindowCounts:
        current = rules.sliding_window(self.policy).index(now)
        calls = failures = slow = 0
        # The short window: reports in the newest RECENT_BUCKETS buckets (rules.should_trip).
        recent_calls = recent_failures = recent_slow = 0
        failing: dict[str, int] = {}
        slowing: dict[str, int] = {}
        for at, report in self.accepted:
            bucket = rules.sliding_window(self.policy).index(at)
            if current - WINDOW_BUCKETS < bucket <= current:
                calls += report.calls
                failures += report.failures
                slow += report.slow
            if current - RECENT_BUCKETS < bucket <= current:
                recent_calls += report.calls
                recent_failures += report.failures
                recent_slow += report.slow
            if report.failures:
                failing[report.container] = at
            if report.slow:
                slowing[report.container] = at
        window = self.policy.window_ms
        return WindowCounts(
            calls,
            failures,
            slow,
            0,
            sum(1 for at in failing.values() if now - at < window),
            sum(1 for at in slowing.values() if now - at < window),
            recent_calls,
            recent_failures,
            recent_slow,
        )

    def report(self, name: str, policy: Policy, now: int, report: Report, observed: Any) -> Any:
        outcome = self.store.report(name, policy, now, report, observed)
        if outcome.changed:
            self.accepted.append((now, report))
            model = self._model(now)
            if outcome.transition == (State.CLOSED, State.OPEN):
                if not rules.sliding_window(policy).trips(model):
                    self.violations.append(f"tripped on {model}")
                record = outcome.record
                if self.trip_gens and record.gen <= self.trip_gens[-1]:
                    self.violations.append("two trips in one generation")
                self.trip_gens.append(record.gen)
                self.accepted.clear()
            elif not self.quorum and rules.sliding_window(policy).trips(model):
                self.violations.append(f"stayed closed on {model}")
        return outcome

    def _reset(self, outcome: Any) -> Any:
        if outcome.transition is not None:
            self.accepted.clear()
        return outcome

    def claim_probe(self, *args: Any) -> Any:
        return self._reset(self.store.claim_probe(*args))

    def settle_probe(self, *args: Any) -> Any:
        return self._reset(self.store.settle_probe(*args))

    def force_state(self, *args: Any) -> Any:
        return self._reset(self.store.force_state(*args))


class RateFleet(RuleBasedStateMachine):
    store_factory: Any = MemoryStore
    config: BreakerConfig = BASE

    @initialize()
    @traced_step
    def setup(self) -> None:
        self.clock = FakeClock()
        config = type(self).config
        self.journal = Journal(
            type(self).store_factory(), Policy.from_config(config), config.min_containers > 1
        )
        # Seeded random sources (the open window's jitter): an example must replay the same
        # way, or Hypothesis stops on a precondition that held once and not the next time
        # (FlakyStrategyDefinition, with --hypothesis-seed=1 on MemoryStore).
        self.breakers = [
            CircuitBreaker(
                NAME,
                store=self.journal,
                config=config,
                clock=self.clock,
                container_id=f"c{i}",
                rng=random.Random(i),
            )
            for i in range(CONTAINERS)
        ]
        self.held: list[tuple[int, Admission, int]] = []

    @rule(
        container=st.integers(0, CONTAINERS - 1),
        fails=st.booleans(),
        seconds=st.sampled_from([0, 0, 0, 0.5, 2.5]),
    )
    @traced_step
    def call(self, container: int, fails: bool, seconds: float) -> None:
        def dependency() -> str:
            self.clock.advance(seconds)  # a slow call takes virtual time
            if fails:
                raise ConnectionError("down")
            return "ok"

        with contextlib.suppress(ConnectionError, CircuitOpenError):
            self.breakers[container].call(dependency)

    @rule(container=st.integers(0, CONTAINERS - 1))
    @traced_step
    def probe_and_hold(self, container: int) -> None:
        admission = self.breakers[container].check()
        if admission.decision is Decision.PROBE:
            self.held.append((container, admission, self.clock()))

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data(), success=st.booleans())
    @traced_step
    def settle_held(self, data: st.DataObject, success: bool) -> None:
        index = data.draw(st.integers(0, len(self.held) - 1))
        container, admission, _ = self.held.pop(index)
        self.breakers[container].record(success, admission.token)

    @rule(seconds=st.sampled_from([0.1, 0.5, 1, 2, 5, 12]))
    @traced_step
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    @traced_step
    def store_agrees_with_the_model(self) -> None:
        assert self.journal.violations == []
        assert not any(breaker.degraded for breaker in self.breakers)

    @invariant()
    @traced_step
    def live_probes_within_budget(self) -> None:
        record = self.journal.store.load(NAME, self.clock())
        if record is None or record.state is not State.HALF_OPEN:
            return
        now = self.clock()
        config = type(self).config
        live = [
            a
            for _, a, claimed in self.held
            if claimed + config.probe_lease_seconds * 1000 > now
            and a.token in {lease.token for lease in record.leases.values()}
        ]
        assert len(live) <= config.half_open_max_probes


SETTINGS = settings(
    max_examples=120,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
QUORUM = dataclasses.replace(BASE, min_containers=2)


def run(store_factory: Any, config: BreakerConfig, examples: int) -> None:
    class Fleet(RateFleet):
        pass

    Fleet.store_factory = staticmethod(store_factory)
    Fleet.config = config
    Fleet.TestCase.settings = settings(SETTINGS, max_examples=examples)
    # Hypothesis's own work untraced by coverage, every step traced (traced_step).
    untraced(Fleet.TestCase("runTest").runTest)()


@pytest.mark.parametrize("config", [BASE, QUORUM], ids=["rate", "rate-quorum"])
def test_rate_fleet_on_memory_store(config: BreakerConfig) -> None:
    run(MemoryStore, config, 120)


@pytest.fixture
def moto_factory() -> Any:
    from moto import mock_aws

    from devtools import servers
    from fleetbreaker import DynamoDBStore

    with mock_aws():
        client = servers.dynamodb_client(None)
        client.create_table(
            TableName="StatefulRate",
            KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )

        def factory() -> Any:
            client.delete_item(TableName="StatefulRate", Key={"name": {"S": NAME}})
            return DynamoDBStore("StatefulRate", boto3_client=client)

        yield factory


@pytest.mark.slow
@pytest.mark.parametrize("config", [BASE, QUORUM], ids=["rate", "rate-quorum"])
def test_rate_fleet_on_dynamodb_store(moto_factory: Any, config: BreakerConfig) -> None:
    run(moto_factory, config, 25)


@pytest.mark.parametrize("config", [BASE, QUORUM], ids=["rate", "rate-quorum"])
def test_rate_fleet_on_redis_store(redis_server: str, config: BreakerConfig) -> None:
    import redis

    from fleetbreaker import RedisStore

    def factory() -> Any:
        redis.Redis.from_url(redis_server).delete(RedisStore(url=redis_server).key(NAME))
        return RedisStore(url=redis_server, use_server_time=False, socket_timeout=5.0)

    run(factory, config, 40)
