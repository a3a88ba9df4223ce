"""One refresh per execution environment (Lambda Managed Instances): processes share their reads.

Two breakers on one store with one directory stand for two processes of one environment (each
its own container); a third without it for another environment. The store counts its reads.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetbreaker import BreakerConfig, CircuitBreaker, MemoryStore, State
from fleetbreaker import record as schema
from fleetbreaker.record import Bucket, CensusBucket, Lease, Record
from fleetbreaker.shared_refresh import (
    CONCURRENCY_ENV,
    Shared,
    SharedCopy,
    copy_key,
    decode_copy,
    encode_copy,
    environment_directory,
)
from tests.support import Dependency, FakeClock, FlakyStore

NAME = "payment-api"
COUNT = BreakerConfig(failure_threshold=3, window_seconds=60, cache_ttl=1.0)
RATE = BreakerConfig(failure_rate_threshold=0.5, window_seconds=10, cache_ttl=1.0)


class SharedStore(MemoryStore):
    """A MemoryStore standing for a store every process reaches (a table, a cache)."""

    process_local = False
    sharing_identity = "one table every process reaches"


class NoCensus:
    """A random source whose census never fires (the store is then only read)."""

    def __init__(self) -> None:
        self._rng = random.Random(7)

    def random(self) -> float:
        return 0.999_999

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rng, name)


def process(
    store: Any,
    clock: FakeClock,
    directory: Path | None,
    container: str,
    config: BreakerConfig = COUNT,
    rng: Any = None,
) -> CircuitBreaker:
    return CircuitBreaker(
        NAME,
        store=store,
        config=config,
        clock=clock,
        rng=rng or NoCensus(),
        container_id=container,
        shared_refresh_dir=directory,
    )


@pytest.fixture
def store() -> SharedStore:
    return SharedStore()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_a_process_takes_the_environments_fresh_copy_instead_of_reading(
    store: SharedStore, clock: FakeClock, tmp_path: Path
) -> None:
    # GIVEN two processes of one execution environment
    first = process(store, clock, tmp_path, "p1")
    second = process(store, clock, tmp_path, "p2")
    # WHEN the first reads the record, and the second needs it 300 ms later
    assert first.state is State.CLOSED
    clock.advance(0.3)
    assert second.state is State.CLOSED
    # THEN the store was read once, for both
    assert store.stats.reads == 1


def test_a_taken_copy_comes_back_as_an_answer_read_when_its_reader_read_it(
    store: SharedStore, clock: FakeClock, tmp_path: Path
) -> None:
    # GIVEN the first process of an environment read the record (its copy written)
    first = process(store, clock, tmp_path, "p1")
    second = process(store, clock, tmp_path, "p2")
    read_at = clock()
    first.state  # noqa: B018
    clock.advance(0.3)
    # WHEN the second reads through the environment's shared reads 300 ms later
    shared = second._shared_reads
    assert shared is not None
    record, answers = shared.read(clock(), lambda record, now_ms: 10_000)
    # THEN it returns the copy as a value: an answer read when the first read it (not now),
    # fresh for as long as the first kept it, and caches nothing itself (the core does)
    [answer] = answers
    assert (answer.outcome.record, answer.at_ms, answer.fresh_ms) == (record, read_at, 1000)
    assert second._view.cached(clock()) == (False, None)


def test_processes_of_other_environments_read_for_themselves(
    store: SharedStore, clock: FakeClock, tmp_path: Path
) -> None:
    # GIVEN a process in each of two environments (each its own directory)
    first = process(store, clock, tmp_path / "one", "p1")
    other = process(store, clock, tmp_path / "two", "p2")
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    # WHEN both read
    first.state  # noqa: B018
    other.state  # noqa: B018
    # THEN each read the store
    assert store.stats.reads == 2


def test_a_copy_is_fresh_only_as_long_as_its_reader_kept_it(
    store: SharedStore, clock: FakeClock, tmp_path: Path
) -> None:
    # GIVEN the second process took the first one's read 300 ms after it (cache_ttl 1 s)
    first = process(store, clock, tmp_path, "p1")
    second = process(store, clock, tmp_path, "p2")
    first.state  # noqa: B018
    clock.advance(0.3)
    second.state  # noqa: B018
    # AND the fleet trips meanwhile (a container of another environment)
    elsewhere = process(store, clock, None, "elsewhere")
    dependency = Dependency()
    dependency.failing = True
    for _ in range(3):
        with pytest.raises(ConnectionError):
            elsewhere.call(dependency)
    # WHEN the second looks again 700 ms later: its view came from a read 1 s old
    clock.advance(0.7)
    # THEN it sees the trip: no view outlives cache_ttl, whoever read it
    assert second.state is State.OPEN


def test_one_process_reads_while_the_others_keep_their_view(
    store: SharedStore, clock: FakeClock, tmp_path: Path
) -> None:
    # GIVEN a process whose view went stale, and another process of its environment holding
    # the copy's lock (reading the store for the environment right now)
    second = process(store, clock, tmp_path, "p2")
    second.state  # noqa: B018
    clock.advance(1.0)
    copy = SharedCopy(tmp_path, copy_key(store, NAME))
    holder = os.open(copy.lock_path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        # WHEN it needs the record
        assert second.state is State.CLOSED
        # THEN it acts on its last view without a read of its own
        assert store.stats.reads == 1
        # AND a process with no view at all reads for itself
        process(store, clock, tmp_path, "p3").state  # noqa: B018
        assert store.stats.reads == 2
    finally:
        os.close(holder)
    # AND once the lock is free, the stale process reads (its last view was not kept fresh)
    second.state  # noqa: B018
    assert store.stats.reads == 3


def test_a_copy_it_cannot_read_is_no_copy_and_is_logged_once(
    store: SharedStore, clock: FakeClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a copy that is not one (a truncated write of some other program)
    copy = SharedCopy(tmp_path, copy_key(store, NAME))
    Path(copy.path).write_text('{"v": 1, "read_at": ', encoding="utf-8")
    breaker = process(store, clock, tmp_path, "p1")
    # WHEN the process needs the record, twice
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        breaker.state  # noqa: B018
        Path(copy.path).write_text("[]", encoding="utf-8")
        clock.advance(1.0)
        breaker.state  # noqa: B018
    # THEN it read the store each time, wrote a good copy, and said so once
    assert store.stats.reads == 2
    assert copy.get() is not None
    warnings = [r for r in caplog.records if "shared view" in r.getMessage()]
    assert len(warnings) == 1
    assert copy.path in warnings[0].getMessage()


def test_a_degraded_process_neither_takes_nor_writes_the_copy(
    clock: FakeClock, tmp_path: Path
) -> None:
    # GIVEN a process whose store is out of reach
    flaky = FlakyStore()
    flaky.down = True
    breaker = CircuitBreaker(
        NAME, store=flaky, config=COUNT, clock=clock, rng=NoCensus(), shared_refresh_dir=tmp_path
    )
    # WHEN it needs the record
    assert breaker.state is State.CLOSED
    # THEN its local twin answered, and no copy was written from it
    assert breaker.degraded
    assert not list(tmp_path.glob("fleetbreaker-*.json"))


def test_a_copy_older_than_the_process_view_is_not_taken(
    store: SharedStore, clock: FakeClock, tmp_path: Path
) -> None:
    # GIVEN a process that saw the breaker trip (generation 1)
    breaker = process(store, clock, tmp_path, "p1")
    dependency = Dependency()
    dependency.failing = True
    for _ in range(3):
        with pytest.raises(ConnectionError):
            breaker.call(dependency)
    reads = store.stats.reads
    # AND a copy of generation 0, fresh for a long while (read by a process before the trip)
    copy = SharedCopy(tmp_path, copy_key(store, NAME))
    copy.put(Shared(Record(expires_at=clock() // 1000 + 3600), clock(), clock() + 60_000))
    # WHEN its view goes stale
    clock.advance(1.0)
    # THEN it reads the store rather than go back to closed
    assert breaker.state is State.OPEN
    assert store.stats.reads == reads + 1


def test_census_writes_stay_each_process_own(
    store: SharedStore, clock: FakeClock, tmp_path: Path
) -> None:
    # GIVEN a fresh copy in the environment, and a process whose census falls due
    first = process(store, clock, tmp_path, "p1")
    first.state  # noqa: B018
    always = random.Random(3)
    always.random = lambda: 0.0  # type: ignore[method-assign]
    second = process(store, clock, tmp_path, "p2", rng=always)
    clock.advance(0.5)
    # WHEN it refreshes
    second.state  # noqa: B018
    # THEN it sends its census write (the fleet's size counts processes), no read
    assert (store.stats.reads, store.stats.writes) == (1, 1)


def test_rate_policy_reads_are_shared_too(
    store: SharedStore, clock: FakeClock, tmp_path: Path
) -> None:
    # GIVEN two rate-policy processes that made a call each and reported it (a newcomer's
    # read before its first report is its own: it decides how it joins the fleet)
    first = process(store, clock, tmp_path, "p1", RATE)
    second = process(store, clock, tmp_path, "p2", RATE)
    for breaker in (first, second):
        breaker.call(Dependency())
    clock.advance(1.0)
    for breaker in (first, second):
        breaker.state  # noqa: B018
    assert store.stats.writes == 2
    reads = store.stats.reads
    # WHEN both need the record again, with nothing to report
    clock.advance(1.0)
    first.state  # noqa: B018
    clock.advance(0.2)
    second.state  # noqa: B018
    # THEN one of them read it for both
    assert store.stats.reads == reads + 1


@pytest.fixture
def lambda_tmp(tmp_path: Path) -> Iterator[Path]:
    """tempfile's directory, pointed at ``tmp_path`` (as TMPDIR would)."""
    before = tempfile.tempdir
    tempfile.tempdir = str(tmp_path)
    try:
        yield tmp_path
    finally:
        tempfile.tempdir = before


@pytest.mark.parametrize(
    ("value", "shared"), [(None, False), ("1", False), ("32", True), ("lots", False)]
)
def test_managed_instances_are_told_by_lambdas_concurrency_variable(
    lambda_tmp: Path, value: str | None, shared: bool
) -> None:
    environ = {} if value is None else {CONCURRENCY_ENV: value}
    assert environment_directory(environ) == (str(lambda_tmp) if shared else None)


def test_on_managed_instances_processes_share_reads_by_default(
    store: SharedStore,
    clock: FakeClock,
    lambda_tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN Lambda Managed Instances (AWS_LAMBDA_MAX_CONCURRENCY set by Lambda)
    monkeypatch.setenv(CONCURRENCY_ENV, "32")
    # WHEN two processes build their breakers with no shared_refresh_dir
    for container in ("p1", "p2"):
        breaker = CircuitBreaker(
            NAME, store=store, config=COUNT, clock=clock, rng=NoCensus(), container_id=container
        )
        assert breaker.state is State.CLOSED
    # THEN they shared one read, through the temporary directory
    assert store.stats.reads == 1
    assert list(lambda_tmp.glob("fleetbreaker-*.json"))


def test_a_memory_store_is_never_shared_by_default(
    clock: FakeClock, lambda_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN Managed Instances, and a MemoryStore (its records are its process's own)
    monkeypatch.setenv(CONCURRENCY_ENV, "32")
    local = MemoryStore()
    # WHEN two breakers read
    for container in ("p1", "p2"):
        breaker = CircuitBreaker(
            NAME, store=local, config=COUNT, clock=clock, rng=NoCensus(), container_id=container
        )
        assert breaker.state is State.CLOSED
    # THEN each read it: another process's MemoryStore would be another fleet
    assert local.stats.reads == 2
    assert not list(lambda_tmp.glob("fleetbreaker-*.json"))


def _full_record() -> Record:
    return Record(
        state=State.HALF_OPEN,
        gen=7,
        failures=3,
        window_start=1_000,
        opened_at=2_000,
        open_until=3_000,
        reopens=2,
        successes=1,
        leases={0: Lease("tok", 4_000, 3_500), 3: Lease("t3", 5_000, None)},
        updated_at=6_000,
        expires_at=7_000,
        tuned='{"mode": "shadow"}',
        last_action='{"action": "open"}',
        buckets={1: Bucket(11, 20, 5, 1, 3), 9: Bucket(19, 7, 0, 0, 1)},
        failing={"ab12cd34": 5_500},
        slowing={"ef56ab78": 5_600},
        rev=4,
        closed_at=1_500,
        window_ms=10_000,
        census={2: CensusBucket(12, 40)},
    )


def test_the_copy_carries_every_field_of_a_record() -> None:
    shared = Shared(_full_record(), 100, 1_100)
    assert decode_copy(json.loads(json.dumps(encode_copy(shared)))) == shared
    assert decode_copy(encode_copy(Shared(None, 5, 6))) == Shared(None, 5, 6)


@pytest.mark.parametrize(
    "spoil",
    [
        lambda d: d.update(v=2),
        lambda d: d["record"]["fields"].update({schema.STATE: "ajar"}),
        lambda d: d["record"]["fields"].update({schema.GEN: True}),
        lambda d: d["record"]["fields"].update({schema.GEN: 10**14}),
        lambda d: d["record"]["fields"].pop(schema.CLOSED_AT),
        lambda d: d["record"]["fields"].update({schema.TUNED: 3}),
        lambda d: d["record"]["buckets"][0].__setitem__(2, -1),
        lambda d: d["record"]["buckets"][0].__setitem__(0, 10),
        lambda d: d["record"]["leases"][0].__setitem__(2, "soon"),
        lambda d: d["record"]["quorum"][0].update(x="now"),
        lambda d: d.update(read_at=1.5),
    ],
)
def test_a_copy_that_is_not_a_record_is_refused(spoil: Any) -> None:
    data = json.loads(json.dumps(encode_copy(Shared(_full_record(), 100, 1_100))))
    spoil(data)
    with pytest.raises((ValueError, TypeError, KeyError)):
        decode_copy(data)


def test_a_copy_read_before_the_process_own_last_answer_is_not_taken(
    store: SharedStore, clock: FakeClock, tmp_path: Path
) -> None:
    # GIVEN a process that read the record itself
    breaker = process(store, clock, tmp_path, "p1")
    breaker.state  # noqa: B018
    reads = store.stats.reads
    # AND a copy another process read 200 ms before that, fresh for 2 s (a large fleet's
    # stretched view), written after it
    copy = SharedCopy(tmp_path, copy_key(store, NAME))
    copy.put(Shared(None, clock() - 200, clock() + 1_800))
    # WHEN its own view goes stale while the copy is still fresh
    clock.advance(1.0)
    breaker.state  # noqa: B018
    # THEN it reads the store rather than step back to the older copy
    assert store.stats.reads == reads + 1
