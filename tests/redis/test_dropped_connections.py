"""RedisStore.drop_connections: what a restored snapshot asks of the store (fleetbreaker.restore).

After the drop the next command runs on a new connection (CLIENT ID differs), the client
stays usable, whoever built it, and an IAM token provider signs its next token afresh.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
from botocore.credentials import Credentials
from redis.cluster import RedisCluster

from devtools.servers import LOOPBACK
from fleetbreaker import RedisStore
from fleetbreaker.stores.elasticache_iam import ElastiCacheIAMAuth
from tests.redis.conftest import ClusterRedisServer

MakeStore = Callable[..., RedisStore]


def connection_id(client: Any) -> int:
    """The server's id of the connection the client's next command uses."""
    return int(client.execute_command("CLIENT", "ID"))


def test_after_the_drop_the_store_runs_on_a_new_connection(
    make_store: MakeStore, name: str
) -> None:
    # GIVEN a store that built its client and has used one connection
    store = make_store()
    store.load(name, 0)
    before = connection_id(store.client)
    # WHEN it drops its connections
    store.drop_connections()
    # THEN its next command connects anew, and the store still answers
    assert connection_id(store.client) != before
    assert store.load(name, 0) is None


def test_a_client_passed_in_is_dropped_and_stays_usable(redis_server: str, name: str) -> None:
    # GIVEN a store on a client of the caller's, which has used one connection
    client = redis.Redis.from_url(redis_server)
    store = RedisStore(client=client, use_server_time=False)
    store.load(name, 0)
    before = connection_id(client)
    try:
        # WHEN the store drops its connections
        store.drop_connections()
        # THEN the caller's client connects anew and still answers its owner
        assert connection_id(client) != before
        assert client.ping()
    finally:
        client.close()


def test_a_cluster_client_drops_the_connections_of_every_node(
    cluster_redis: ClusterRedisServer, name: str
) -> None:
    # GIVEN a store on a cluster client that has used a node's connection
    client = RedisCluster(host=LOOPBACK, port=cluster_redis.port)
    store = RedisStore(client=client, use_server_time=False)
    node = client.get_default_node()
    store.load("{eu}" + name, 0)
    before = connection_id(node.redis_connection)
    try:
        # WHEN the store drops its connections
        store.drop_connections()
        # THEN that node's next command runs on a new connection
        assert connection_id(node.redis_connection) != before
    finally:
        client.close()


def test_the_drop_forgets_the_iam_token_of_the_clients_provider(redis_server: str) -> None:
    # GIVEN a store whose client logs in through ElastiCacheIAMAuth, with a token made,
    # and the role's credentials rotated since
    credentials = Credentials("AKIDFIRST", "first-secret", "first-session")
    auth = ElastiCacheIAMAuth("user", "cache", "eu-west-1", credentials=credentials)
    first = auth.token()
    store = RedisStore(url=redis_server, credential_provider=auth)
    credentials.access_key, credentials.secret_key = "AKIDSECOND", "second-secret"
    assert auth.token() == first
    # WHEN the store drops its connections
    store.drop_connections()
    # THEN the next login's token is signed anew, with the credentials of now
    renewed = auth.token()
    assert renewed != first
    assert "AKIDSECOND" in renewed
    store.close()
