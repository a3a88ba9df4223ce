"""Hypothesis drives random calls, outcomes, stuck probes and clock jumps through several
breakers ("containers") sharing one store, and checks the fleet-wide invariants after every
step:

- at most one trip per generation (generations only grow across trips);
- never open without `failure_threshold` counted failures inside one window (a failure
  written by a container whose record's census shows a large fleet counts its weight;
  census writes, which such fleets send, count nothing and never trip);
- live admitted probes never exceed `half_open_max_probes`;
- the breaker is closed as soon as enough probes succeeded.
"""

from __future__ import annotations

import contextlib
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
    StateChange,
)
from tests.coverage_scope import traced_step, untraced
from tests.support import FakeClock, RecordingListener, in_a_fresh_thread, make_policy

CONFIG = BreakerConfig(
    failure_threshold=3,
    window_seconds=20,
    recovery_timeout=10,
    max_recovery_timeout=40,
    half_open_max_probes=2,
    half_open_successes=2,
    probe_lease_seconds=5,
    cache_ttl=1.0,
    record_ttl_seconds=3600,
    # The machine checks the rules, not the deadline: a loaded machine must not degrade it.
    store_deadline_seconds=30,
)
# The DynamoDB machine runs its examples on moto in-process: beside a loop spinning one core,
# with coverage and three workers on two cores, it passed the suite's 300 s default once.
# The examples are the guarantee, so the time grows.
pytestmark = pytest.mark.timeout(900)

NAME = "stateful"
CONTAINERS = 3


# The hooks the invariants read, by the name the journal gives them.
JOURNALED = {"on_state_change": "transition", "on_failure_recorded": "failure", "on_probe": "probe"}


class FleetMachine(RuleBasedStateMachine):
    store_factory: Any = MemoryStore

    @initialize()
    @traced_step
    def setup(self) -> None:
        self.clock = FakeClock()
        self.store = type(self).store_factory()
        # The weight of every failure the breakers write (the store is what they count on).
        self.weights: list[int] = []
        write_failure = self.store.record_failure

        def weighed(name: str, policy: Any, now: int, observed: Any, weight: int = 1) -> Any:
            self.weights.append(weight)
            return write_failure(name, policy, now, observed, weight)

        self.store.record_failure = weighed
        # Everything the breakers report (stamped with the fake clock), moved after each
        # step into the journal: (kind, at, detail), detail the hook's arguments after the
        # name, a failure's weight once weighed.
        self.heard = RecordingListener(self.clock)
        self.journal: list[tuple[str, int, Any]] = []
        self.policy = make_policy(CONFIG)
        # Seeded random sources: census times and thinned writes must replay the same way
        # for Hypothesis to shrink an example.
        self.breakers = [
            CircuitBreaker(
                NAME,
                store=self.store,
                config=CONFIG,
                clock=self.clock,
                listeners=[self.heard],
                rng=random.Random(index),
            )
            for index in range(CONTAINERS)
        ]
        self.held: list[tuple[int, Admission, int]] = []  # (container, probe, claimed at)
        self.trip_gens: list[int] = []
        self.episode_successes = 0  # applied probe successes since the last transition
        self.closed_after = 0  # successes counted before the last half_open -> closed

    def _record(self) -> Any:
        return self.store.load(NAME, self.clock())

    @rule(container=st.integers(0, CONTAINERS - 1), fails=st.booleans())
    @traced_step
    def call(self, container: int, fails: bool) -> None:
        def dependency() -> str:
            if fails:
                raise ConnectionError("down")
            return "ok"

        before = len(self.journal)
        self.weights.clear()
        with contextlib.suppress(ConnectionError, CircuitOpenError):
            self.breakers[container].call(dependency)
        self._weigh(before, self.weights[-1] if self.weights else 1)
        self._after_step(before)

    @rule(writes=st.sampled_from([1, 40]))
    @traced_step
    def census_crowd(self, writes: int) -> None:
        # A crowd's census lands in the current slice (40 in a 2 s slice read as thousands
        # of containers): past 600 containers a failure is written with probability
        # 1 / weight and counts weight times; a census write itself never trips.
        # Each container of the crowd writes from the record it last read, as a refresh
        # does (one write each; from no record, a write is planned as a fresh item, refused,
        # and planned again: the `census` rule below takes that path).
        before = len(self.journal)
        now = self.clock()
        seen = self._record()
        for _ in range(writes):
            seen = self.store.census(NAME, self.policy, now, seen).record
        self._after_step(before)

    @rule(container=st.integers(0, CONTAINERS - 1))
    @traced_step
    def census(self, container: int) -> None:
        # One container's own census write (its refresh draws one now and then).
        before = len(self.journal)
        breaker = self.breakers[container]
        outcome = self.store.census(NAME, self.policy, self.clock(), None)
        assert outcome.transition is None, "a census write tripped the breaker"
        breaker.state  # noqa: B018
        self._after_step(before)

    def _journal(self) -> list[tuple[str, int, Any]]:
        """The journal, with what the breakers reported since it was last read."""
        for heard in self.heard.of(*JOURNALED):
            assert heard.at_ms is not None
            detail = heard.args[1:]  # after the breaker's name
            entry = detail[0] if len(detail) == 1 else detail
            if isinstance(entry, StateChange):  # the invariants read (before, after)
                entry = (entry.before, entry.after)
            self.journal.append((JOURNALED[heard.hook], heard.at_ms, entry))
        self.heard.clear()
        return self.journal

    def _weigh(self, before: int, weight: int) -> None:
        """Tag the failures a step wrote with the weight they were written with."""
        events = self._journal()
        for index in range(before, len(events)):
            kind, at, _ = events[index]
            if kind == "failure":
                events[index] = (kind, at, weight)

    @rule(container=st.integers(0, CONTAINERS - 1))
    @traced_step
    def probe_and_hold(self, container: int) -> None:
        before = len(self.journal)
        admission = self.breakers[container].check()
        if admission.decision is Decision.PROBE:
            self.held.append((container, admission, self.clock()))
        self._after_step(before)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data(), success=st.booleans())
    @traced_step
    def settle_held(self, data: st.DataObject, success: bool) -> None:
        index = data.draw(st.integers(0, len(self.held) - 1))
        container, admission, _ = self.held.pop(index)
        before = len(self.journal)
        self.breakers[container].record(success, admission.token)
        self._after_step(before)

    @rule(seconds=st.sampled_from([0.1, 0.5, 1, 2, 5, 10, 20, 45]))
    @traced_step
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def _after_step(self, before: int) -> None:
        events = self._journal()
        for index in range(before, len(events)):
            kind, at, detail = events[index]
            if kind == "transition":
                closing = detail == (State.HALF_OPEN, State.CLOSED)
                self.closed_after = self.episode_successes if closing else 0
                self.episode_successes = 0
                if detail == (State.CLOSED, State.OPEN):
                    self._check_trip(index, at)
            elif kind == "probe" and detail == (True, True):
                # A closing transition is reported just before the probe that caused it.
                if index > 0 and events[index - 1][2] == (State.HALF_OPEN, State.CLOSED):
                    assert self.closed_after + 1 >= CONFIG.half_open_successes, "closed early"
                else:
                    self.episode_successes += 1
                    assert self.episode_successes < CONFIG.half_open_successes, (
                        "enough probe successes but still not closed"
                    )

    def _check_trip(self, index: int, at: int) -> None:
        record = self._record()
        assert record is not None
        if self.trip_gens:
            assert record.gen > self.trip_gens[-1], "two trips in one generation"
        self.trip_gens.append(record.gen)
        # The tripping failure is reported just after the transition; count back to the
        # previous transition of any kind.
        counted = 0
        for kind, _, weight in self.journal[index + 1 : index + 2]:
            if kind == "failure":
                counted += weight if isinstance(weight, int) else 1
        for kind, when, weight in reversed(self.journal[:index]):
            if kind == "transition":
                break
            if kind == "failure" and when > at - CONFIG.window_seconds * 1000:
                counted += weight if isinstance(weight, int) else 1
        assert counted >= CONFIG.failure_threshold, f"opened after {counted} failures"

    @invariant()
    @traced_step
    def live_probes_within_budget(self) -> None:
        record = self._record()
        if record is None or record.state is not State.HALF_OPEN:
            return
        now = self.clock()
        live = [
            a
            for _, a, claimed in self.held
            if claimed + CONFIG.probe_lease_seconds * 1000 > now
            and a.token in {lease.token for lease in record.leases.values()}
        ]
        assert len(live) <= CONFIG.half_open_max_probes


FleetMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def run_machine(machine: type[RuleBasedStateMachine]) -> None:
    """``machine``'s examples, Hypothesis's own work untraced by coverage and every step
    traced (tests/coverage_scope.py's traced_step)."""
    untraced(machine.TestCase("runTest").runTest)()


def test_fleet_invariants_on_memory_store() -> None:
    run_machine(FleetMachine)


@pytest.fixture
def moto_store_factory() -> Any:
    from moto import mock_aws

    from devtools import servers
    from fleetbreaker import DynamoDBStore

    with mock_aws():
        client = servers.dynamodb_client(None)
        client.create_table(
            TableName="StatefulBreakers",
            KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )

        def factory() -> Any:
            client.delete_item(TableName="StatefulBreakers", Key={"name": {"S": NAME}})
            return DynamoDBStore("StatefulBreakers", boto3_client=client)

        yield factory


@pytest.mark.slow
def test_fleet_invariants_on_dynamodb_store(moto_store_factory: Any) -> None:
    class DynamoFleet(FleetMachine):
        store_factory = staticmethod(moto_store_factory)

    DynamoFleet.TestCase.settings = settings(
        max_examples=25,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    # From a new thread's shallow stack (tests/support.py's in_a_fresh_thread): 30 s of
    # CPU became 19 s with one seed.
    in_a_fresh_thread(lambda: run_machine(DynamoFleet))


@pytest.fixture
def redis_store_factory(redis_server: str) -> Any:
    import uuid

    from fleetbreaker import RedisStore

    stores: list[RedisStore] = []

    def factory() -> Any:
        # A fresh key prefix per example: the machine starts from an absent record. The fake
        # clock drives the rules, so the scripts take the caller's time.
        store = RedisStore(
            url=redis_server,
            key_prefix=f"stateful-{uuid.uuid4().hex[:8]}",
            use_server_time=False,
            socket_timeout=5.0,
        )
        stores.append(store)
        return store

    yield factory
    for store in stores:
        store.close()


@pytest.mark.slow
def test_fleet_invariants_on_redis_store(redis_store_factory: Any) -> None:
    class RedisFleet(FleetMachine):
        store_factory = staticmethod(redis_store_factory)

    RedisFleet.TestCase.settings = settings(
        max_examples=25,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    run_machine(RedisFleet)
