"""What the shared reads trust (docs/deploying.md, "Shared reads: what the directory is trusted
for"), each case tried: a foreign store's copy, a forged or stale freshness, a planted link, a
file of another user or writable by others, and the lock taken after another's refresh.

As in test_shared_refresh.py, breakers on one store with one directory stand for processes of
one execution environment; the store counts its reads.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path
from typing import Any

import boto3
import pytest
import redis

from fleetbreaker import CircuitBreaker, DynamoDBStore, MemoryStore, RedisStore, State
from fleetbreaker.record import Record
from fleetbreaker.shared_refresh import Shared, SharedCopy, copy_key
from tests.support import Dependency, FakeClock
from tests.unit.test_shared_refresh import COUNT, NAME, NoCensus, SharedStore, process

# moto in-process answers its first requests slowly on a loaded machine: not a deadline test.
NO_CENSUS: Any = NoCensus()
PATIENT = COUNT.__class__(failure_threshold=3, window_seconds=60, store_deadline_seconds=30)
TTL_MS = round(COUNT.cache_ttl * 1000)
# The longest a process keeps its own view: 2 x cache_ttl (docs/architecture.md).
LONGEST_MS = 2 * TTL_MS
DAY_MS = 86_400_000


@pytest.fixture
def store() -> SharedStore:
    return SharedStore()


def trip(store: Any, clock: FakeClock, config: Any = COUNT) -> None:
    """The fleet trips: a container of another environment fails the threshold's calls."""
    elsewhere = CircuitBreaker(
        NAME, store=store, config=config, clock=clock, rng=NO_CENSUS, shared_refresh_dir=None
    )
    dependency = Dependency()
    dependency.failing = True
    for _ in range(COUNT.failure_threshold):
        with pytest.raises(ConnectionError):
            elsewhere.call(dependency)
    assert elsewhere.state is State.OPEN


def the_copy(store: Any, directory: Path) -> SharedCopy:
    return SharedCopy(directory, copy_key(store, NAME))


def open_copy(clock: FakeClock, fresh_ms: int = TTL_MS) -> Shared:
    """A copy of an open record, read now, fresh for ``fresh_ms``."""
    now = clock()
    record = Record(
        state=State.OPEN,
        gen=1,
        opened_at=now,
        open_until=now + 60_000,
        expires_at=now // 1000 + 3_600,
    )
    return Shared(record, now, now + fresh_ms)


def closed_copy(clock: FakeClock, fresh_ms: int = TTL_MS) -> Shared:
    now = clock()
    return Shared(Record(expires_at=now // 1000 + 3_600), now, now + fresh_ms)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "shared view" in r.getMessage()]


# -- the copy's key: everything that makes a store another fleet's -----------------------


def dynamodb(region: str, endpoint: str | None = None, table: str = "CircuitBreakers") -> Any:
    client = boto3.client(
        "dynamodb",
        region_name=region,
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    return DynamoDBStore(table, boto3_client=client)


def test_two_regions_name_two_copies() -> None:
    # GIVEN one table name in two regions, THEN two copies
    assert copy_key(dynamodb("us-east-1"), NAME) != copy_key(dynamodb("us-west-2"), NAME)


def test_two_endpoints_name_two_copies() -> None:
    east = dynamodb("us-east-1", "http://127.0.0.1:8000")
    other = dynamodb("us-east-1", "http://127.0.0.1:8001")
    assert copy_key(east, NAME) != copy_key(other, NAME)


def test_two_tables_and_two_names_name_four_copies() -> None:
    keys = {copy_key(dynamodb("us-east-1", table=t), n) for t in ("aaa", "bbb") for n in "xy"}
    assert len(keys) == 4


def test_stores_built_alike_name_one_copy() -> None:
    # GIVEN two processes that build their stores from the same settings, THEN one copy
    assert copy_key(dynamodb("us-east-1"), NAME) == copy_key(dynamodb("us-east-1"), NAME)
    first = RedisStore(url="redis://cache.example.com:6379/0")
    second = RedisStore(url="redis://cache.example.com:6379/0")
    assert copy_key(first, NAME) == copy_key(second, NAME)


@pytest.mark.parametrize(
    "other",
    [
        "redis://cache.example.com:6379/1",  # another database
        "redis://cache.example.com:6380/0",  # another port
        "redis://other.example.com:6379/0",  # another host
    ],
)
def test_redis_stores_of_other_databases_or_servers_name_other_copies(other: str) -> None:
    first = RedisStore(url="redis://cache.example.com:6379/0")
    assert copy_key(first, NAME) != copy_key(RedisStore(url=other), NAME)


def test_a_redis_store_on_a_socket_names_the_socket() -> None:
    one = RedisStore(client=redis.Redis(unix_socket_path="/run/redis/one.sock"))
    two = RedisStore(client=redis.Redis(unix_socket_path="/run/redis/two.sock"))
    assert None is not copy_key(one, NAME) != copy_key(two, NAME)


def test_redis_key_prefixes_name_other_copies() -> None:
    url = "redis://cache.example.com:6379/0"
    first = RedisStore(url=url, key_prefix="a")
    assert copy_key(first, NAME) != copy_key(RedisStore(url=url, key_prefix="b"), NAME)


def test_the_store_kind_is_in_the_key() -> None:
    class Other(SharedStore):
        pass

    assert copy_key(SharedStore(), NAME) != copy_key(Other(), NAME)


class CustomStore(MemoryStore):
    """A store of the user's own, shared by every process (no MemoryStore attributes)."""

    process_local = False
    sharing_identity = None


class PlacedStore(CustomStore):
    table_name = "CircuitBreakers"
    key_prefix = "fleetbreaker"


def test_a_store_that_names_no_identity_shares_nothing(clock: FakeClock, tmp_path: Path) -> None:
    # GIVEN a custom store with a table name and a key prefix, but no sharing_identity
    store = PlacedStore()
    assert copy_key(store, NAME) is None
    # WHEN two processes of one environment read
    for container in ("p1", "p2"):
        assert process(store, clock, tmp_path, container).state is State.CLOSED
    # THEN each read the store, and nothing was written in the directory
    assert store.stats.reads == 2
    assert list(tmp_path.iterdir()) == []


def test_a_redis_client_the_store_cannot_see_into_shares_nothing() -> None:
    # GIVEN a client without a connection pool (a cluster client, a user's own)
    class OwnClient:
        def evalsha(self, sha: str, numkeys: int, *keys_and_args: str) -> Any:
            raise NotImplementedError

        def script_load(self, script: str) -> Any:
            raise NotImplementedError

    assert copy_key(RedisStore(client=OwnClient()), NAME) is None


def test_a_store_that_names_no_identity_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Unnamed(CustomStore):
        pass

    with caplog.at_level(logging.INFO, logger="fleetbreaker"):
        copy_key(Unnamed(), "a")
        copy_key(Unnamed(), "b")
    said = [r.getMessage() for r in caplog.records if "sharing_identity" in r.getMessage()]
    assert len(said) == 1
    assert "Unnamed" in said[0]


def test_a_region_reads_its_own_record_not_the_other_regions_copy(
    clock: FakeClock, tmp_path: Path
) -> None:
    from moto import mock_aws

    with mock_aws():
        stores = {}
        for region in ("us-east-1", "us-west-2"):
            store = dynamodb(region)
            store.client.create_table(
                TableName="CircuitBreakers",
                KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
            stores[region] = store
        # GIVEN a process in us-east-1 that saw its breaker trip, and shared its read
        east = process(stores["us-east-1"], clock, tmp_path, "east", PATIENT)
        trip(stores["us-east-1"], clock, PATIENT)
        clock.advance(1.0)
        assert east.state is State.OPEN
        # WHEN a process of the same environment reads the same-named table in us-west-2
        west = process(stores["us-west-2"], clock, tmp_path, "west", PATIENT)
        # THEN it sees its own region's record: none, closed
        assert west.state is State.CLOSED
        assert stores["us-west-2"].stats.reads == 1


def test_two_redis_databases_with_one_prefix_read_their_own_records(
    redis_server: str, clock: FakeClock, tmp_path: Path
) -> None:
    base = redis_server.rsplit("/", 1)[0]  # redis://127.0.0.1:PORT, without its database
    one = RedisStore(url=f"{base}/1", use_server_time=False, socket_timeout=5.0)
    two = RedisStore(url=f"{base}/2", use_server_time=False, socket_timeout=5.0)
    try:
        for db in (1, 2):
            redis.Redis.from_url(f"{base}/{db}").delete(one.key(NAME))
        # GIVEN a process on database 1 that saw its breaker trip, and shared its read
        first = process(one, clock, tmp_path, "p1")
        trip(one, clock)
        clock.advance(1.0)
        assert first.state is State.OPEN
        # WHEN a process of the environment reads the same key on database 2
        second = process(two, clock, tmp_path, "p2")
        # THEN it reads its own database: closed
        assert second.state is State.CLOSED
        assert two.stats.reads == 1
    finally:
        one.close()
        two.close()


# -- freshness: bounded by the reader's own cache_ttl --------------------------------------


def test_a_copy_claiming_a_day_of_freshness_does_not_hide_a_trip(
    store: SharedStore, clock: FakeClock, tmp_path: Path
) -> None:
    # GIVEN a copy of the closed record that claims to be fresh for a day
    the_copy(store, tmp_path).put(closed_copy(clock, DAY_MS))
    breaker = process(store, clock, tmp_path, "p1")
    before = breaker.state, store.stats.reads
    # WHEN the fleet trips, and the longest this process would keep its own view passes
    trip(store, clock)
    clock.advance(LONGEST_MS / 1000)
    # THEN it took the copy until then, and now has read the store and rejects
    assert before == (State.CLOSED, 0)
    assert breaker.state is State.OPEN


def test_a_copy_is_taken_only_within_the_readers_own_bound(
    store: SharedStore, clock: FakeClock, tmp_path: Path
) -> None:
    # GIVEN a copy read just under the reader's longest view ago, claiming a day
    the_copy(store, tmp_path).put(closed_copy(clock, DAY_MS))
    clock.advance((LONGEST_MS - 1) / 1000)
    # WHEN a process needs the record, then 1 ms later another
    process(store, clock, tmp_path, "p1").state  # noqa: B018
    assert store.stats.reads == 0
    clock.advance(0.001)
    process(store, clock, tmp_path, "p2").state  # noqa: B018
    # THEN the first took it, the second read the store
    assert store.stats.reads == 1


def test_a_copy_read_in_the_future_is_not_taken(
    store: SharedStore, clock: FakeClock, tmp_path: Path
) -> None:
    # GIVEN a forged copy that says it was read a minute from now, open
    clock.advance(60.0)
    forged = open_copy(clock)
    clock.advance(-60.0)
    the_copy(store, tmp_path).put(forged)
    # WHEN a process needs the record, THEN it reads the store
    assert process(store, clock, tmp_path, "p1").state is State.CLOSED
    assert store.stats.reads == 1


def test_a_stale_copy_is_not_taken(store: SharedStore, clock: FakeClock, tmp_path: Path) -> None:
    # GIVEN an open copy read two seconds ago, fresh for one
    the_copy(store, tmp_path).put(open_copy(clock))
    clock.advance(2.0)
    # WHEN a process needs the record, THEN it reads the store: closed
    assert process(store, clock, tmp_path, "p1").state is State.CLOSED
    assert store.stats.reads == 1


def test_with_caching_off_a_process_never_takes_a_copy(
    store: SharedStore, clock: FakeClock, tmp_path: Path
) -> None:
    the_copy(store, tmp_path).put(open_copy(clock))
    uncached = COUNT.__class__(failure_threshold=3, window_seconds=60, cache_ttl=0)
    assert process(store, clock, tmp_path, "p1", uncached).state is State.CLOSED
    assert store.stats.reads == 1


# -- files: no links, our owner, nobody else's writes --------------------------------------


def test_a_link_planted_at_the_lock_creates_nothing_where_it_points(
    store: SharedStore, clock: FakeClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a symbolic link at the lock's path, to a file that does not exist
    target = tmp_path / "elsewhere" / "victim"
    target.parent.mkdir()
    os.symlink(target, the_copy(store, tmp_path).lock_path)
    # WHEN a process reads
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        assert process(store, clock, tmp_path, "p1").state is State.CLOSED
    # THEN it read the store, created nothing where the link points, and said why
    assert store.stats.reads == 1
    assert not target.exists()
    [said] = warnings(caplog)
    assert "symbolic link" in said


def test_a_link_planted_at_the_copy_is_not_followed(
    store: SharedStore, clock: FakeClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a link at the copy's path to a well-formed, fresh, open copy elsewhere
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    planted = the_copy(store, elsewhere)
    planted.put(open_copy(clock))
    os.symlink(planted.path, the_copy(store, tmp_path).path)
    # WHEN a process reads
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        state = process(store, clock, tmp_path, "p1").state
    # THEN it read the store (closed), and said why
    assert state is State.CLOSED
    assert store.stats.reads == 1
    assert any("symbolic link" in said for said in warnings(caplog))


def test_a_foreign_open_copy_does_not_reject_calls(
    store: SharedStore,
    clock: FakeClock,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # GIVEN a fresh copy saying open, owned by another user than this process's
    the_copy(store, tmp_path).put(open_copy(clock))
    owner = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    # WHEN this process needs the record
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        state = process(store, clock, tmp_path, "p1").state
    # THEN it read the store (closed), and said whose file it refused
    assert state is State.CLOSED
    assert store.stats.reads == 1
    [said] = warnings(caplog)
    assert f"owned by uid {owner}" in said


def test_a_foreign_closed_copy_does_not_let_calls_through_an_open_breaker(
    store: SharedStore, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an open breaker, and a fresh copy saying closed owned by another user
    trip(store, clock)
    the_copy(store, tmp_path).put(closed_copy(clock))
    owner = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    # WHEN this process needs the record, THEN it reads the store: open
    assert process(store, clock, tmp_path, "p1").state is State.OPEN


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666], ids=["group", "others", "both"])
def test_a_copy_others_may_write_is_not_taken(
    store: SharedStore,
    clock: FakeClock,
    tmp_path: Path,
    mode: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # GIVEN a fresh open copy of ours that the group or others may write
    copy = the_copy(store, tmp_path)
    copy.put(open_copy(clock))
    os.chmod(copy.path, mode)
    # WHEN a process needs the record
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        state = process(store, clock, tmp_path, "p1").state
    # THEN it read the store, and said why
    assert state is State.CLOSED
    assert store.stats.reads == 1
    assert any("writable by group or others" in said for said in warnings(caplog))


def test_a_lock_others_may_write_is_not_used(
    store: SharedStore, clock: FakeClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a lock file anyone may write (another user could hold it for ever)
    lock = Path(the_copy(store, tmp_path).lock_path)
    lock.touch()
    os.chmod(lock, 0o666)
    # WHEN a process reads
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        process(store, clock, tmp_path, "p1").state  # noqa: B018
    # THEN it read the store without the lock, wrote no copy, and said why
    assert store.stats.reads == 1
    assert not Path(the_copy(store, tmp_path).path).exists()
    [said] = warnings(caplog)
    assert "lock" in said
    assert "writable by group or others" in said


def test_a_fifo_planted_at_the_copy_blocks_nothing(
    store: SharedStore, clock: FakeClock, tmp_path: Path
) -> None:
    # GIVEN a named pipe at the copy's path (opening it to read would wait for a writer)
    os.mkfifo(the_copy(store, tmp_path).path, 0o600)
    # WHEN a process reads, THEN it reads the store at once
    assert process(store, clock, tmp_path, "p1").state is State.CLOSED
    assert store.stats.reads == 1


def test_a_hard_link_to_the_copy_is_not_taken(
    store: SharedStore, clock: FakeClock, tmp_path: Path
) -> None:
    # GIVEN a fresh open copy with a second name (someone kept a link to a copy of ours)
    copy = the_copy(store, tmp_path)
    copy.put(open_copy(clock))
    os.link(copy.path, tmp_path / "kept")
    # WHEN a process needs the record, THEN it reads the store
    assert process(store, clock, tmp_path, "p1").state is State.CLOSED
    assert store.stats.reads == 1


def test_an_untrusted_file_is_said_once(
    store: SharedStore, clock: FakeClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a copy others may write
    copy = the_copy(store, tmp_path)
    copy.put(open_copy(clock, DAY_MS))
    os.chmod(copy.path, 0o666)
    breaker = process(store, clock, tmp_path, "p1")
    # WHEN the process reads three times over three seconds
    with caplog.at_level(logging.WARNING, logger="fleetbreaker"):
        for _ in range(3):
            breaker.state  # noqa: B018
            clock.advance(1.0)
            os.chmod(copy.path, 0o666)  # its own refresh replaced it: plant it again
    # THEN it read the store each time, and said why once
    assert store.stats.reads == 3
    assert len(warnings(caplog)) == 1


# -- the lock: one read for the environment ------------------------------------------------


def test_a_process_that_takes_the_lock_after_a_refresh_takes_that_refresh(
    store: SharedStore, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN two processes whose views went stale together
    first = process(store, clock, tmp_path, "p1")
    second = process(store, clock, tmp_path, "p2")
    first.state  # noqa: B018
    second.state  # noqa: B018
    assert store.stats.reads == 1
    clock.advance(1.0)
    # AND the second, having found the copy stale, reaches for the lock just after the first
    # refreshed the copy and let the lock go
    take_lock = SharedCopy.try_lock
    raced: list[bool] = []

    def after_the_first(copy: SharedCopy) -> bool:
        if not raced:
            raced.append(True)
            monkeypatch.setattr(SharedCopy, "try_lock", take_lock)
            assert first.state is State.CLOSED  # the first process's whole refresh
        return take_lock(copy)

    monkeypatch.setattr(SharedCopy, "try_lock", after_the_first)
    # WHEN the second needs the record
    assert second.state is State.CLOSED
    # THEN the environment read the store once for both
    assert raced
    assert store.stats.reads == 2


def test_a_lock_held_for_ever_keeps_no_process_on_an_old_view(
    store: SharedStore, clock: FakeClock, tmp_path: Path
) -> None:
    # GIVEN a process with a view, and another process of the environment that took the
    # copy's lock and never lets it go (stuck, or stopped)
    breaker = process(store, clock, tmp_path, "p1")
    breaker.state  # noqa: B018
    holder = os.open(the_copy(store, tmp_path).lock_path, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        # WHEN the fleet trips, and the longest this process keeps its own view passes
        trip(store, clock)
        clock.advance(LONGEST_MS / 1000)
        # THEN it reads the store itself: open
        assert breaker.state is State.OPEN
    finally:
        os.close(holder)
