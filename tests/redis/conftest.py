"""Fixtures for the RedisStore suites: stores on the session server, and special servers.

Besides the plain redis-server and the TLS-only one (`tls_redis`) of tests/conftest.py, one
variant runs here, a real redis-server process started on a free loopback port:

- ClusterRedisServer: cluster mode, one node owning all 16384 slots, so Redis itself checks
  the keys each script declares (CROSSSLOT) and redis-py's cluster client routes by slot.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import redis

from devtools.servers import (
    LOOPBACK,
    RedisServer,
    ServerStartError,
)
from fleetbreaker import RedisStore

# --------------------------------------------------------------------------- stores


@pytest.fixture
def raw(redis_server: str) -> Iterator[redis.Redis]:
    """A plain client on the session server, answering str (for looking at keys directly)."""
    client = redis.Redis.from_url(redis_server, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def make_store(redis_server: str) -> Iterator[Callable[..., RedisStore]]:
    """RedisStore factory on the session server (caller's clock unless told otherwise)."""
    made: list[RedisStore] = []

    def make(url: str = redis_server, **options: Any) -> RedisStore:
        options.setdefault("use_server_time", False)
        store = RedisStore(url=url, **options)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def name() -> str:
    """A breaker name no other test uses (the session server is shared)."""
    return f"redis-{uuid.uuid4().hex[:12]}"


# --------------------------------------------------------------------------- cluster


class ClusterRedisServer(RedisServer):
    """A one-node Redis Cluster: cluster mode on, every slot assigned to this node."""

    name = "redis-cluster"

    def command(self) -> Sequence[str]:
        nodes = f"nodes-{uuid.uuid4().hex[:8]}.conf"
        return [*super().command(), "--cluster-enabled", "yes", "--cluster-config-file", nodes]

    def start(self) -> ClusterRedisServer:
        super().start()
        client = redis.Redis(host=LOOPBACK, port=self.port, decode_responses=True)
        try:
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
            deadline = time.monotonic() + self.ready_timeout
            while "cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):
                if time.monotonic() > deadline:
                    raise ServerStartError(f"cluster on port {self.port} never became ok")
                time.sleep(0.05)
        finally:
            client.close()
        return self


@pytest.fixture(scope="session")
def cluster_redis(redis_server: str) -> Iterator[ClusterRedisServer]:
    server = ClusterRedisServer()
    try:
        yield server.start()
    finally:
        server.stop()
