"""Fixtures for the restore tests: the three stores as a restored fleet reaches them, and
the run of one SnapStart life (tests/restore/runtime.py) in a process of its own.

- MemoryStore: one MemoryStore in a server process (tests/restore/served.py) that the
  snapshot's process and every restored environment reach over a socket;
- DynamoDB: moto's standalone server; for the connections a restored client opens,
  dynalite (which keeps them alive, as DynamoDB does, where moto's server closes each one)
  behind a proxy that counts them;
- Redis: behind such a proxy, a TLS-only redis-server whose only users are an admin and the
  IAM user, with the template's access string, logging in with ElastiCacheIAMAuth tokens
  (tests/redis's stand-in for ElastiCache's IAM check: the token is the user's password).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from botocore.credentials import Credentials

from devtools.servers import REPO_ROOT, TlsRedisServer, make_certificates, make_table
from fleetbreaker import DynamoDBStore, RedisStore
from fleetbreaker.record import Record
from fleetbreaker.stores.elasticache_iam import ElastiCacheIAMAuth
from tests.redis.test_iam_auth import template_access_string
from tests.restore.proxy import CountingProxy
from tests.restore.scenarios import T_INIT_MS
from tests.restore.served import ServedMemoryStore, memory_server

ENVIRONMENTS = 4
RESTORE_AFTER_S = 10.0  # the restores come this long after init (the token's life is 900 s)
IAM_USER = "fleetbreaker-1a2b3c4d"
IAM_CACHE = "fleetbreaker-1a2b3c4d"
IAM_REGION = "eu-west-1"
IAM_CREDENTIALS = ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "SESSION/TOKEN")
ADMIN = ("admin", "admin-secret")


@dataclass
class StoreUnderTest:
    """A store as the restored fleet uses it (``spec``, for the job) and as the test reads
    it (``load``); ``proxy``, in front of dynalite or Redis, counts the connections the
    fleet opens."""

    kind: str
    spec: dict[str, Any]
    load: Callable[[str, int], Record | None]
    proxy: CountingProxy | None = None


@dataclass
class Life:
    """What one SnapStart life told the test."""

    init: dict[str, Any]
    restored: list[dict[str, Any]]
    snapshot: dict[str, Any]
    stdout: str


Restore = Callable[..., Life]


@pytest.fixture
def name() -> str:
    return f"restore-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def restore(tmp_path: Path, name: str) -> Restore:
    """Run one life: init, snapshot, ``environments`` restores (tests/restore/runtime.py)."""

    def run(
        scenario: str,
        store: StoreUnderTest,
        *,
        hooks: bool = True,
        environments: int = ENVIRONMENTS,
        **job: Any,
    ) -> Life:
        out = tmp_path / f"{scenario}-out.json"
        job_file = tmp_path / f"{scenario}-job.json"
        job_file.write_text(
            json.dumps(
                {
                    "scenario": scenario,
                    "name": name,
                    "store": store.spec,
                    "environments": environments,
                    "hooks": hooks,
                    "restore_after_s": RESTORE_AFTER_S,
                    "out": str(out),
                    **job,
                }
            )
        )
        done = subprocess.run(
            [sys.executable, "-m", "tests.restore.runtime", str(job_file)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        result = json.loads(out.read_text())
        return Life(result["init"], result["restored"], result["snapshot"], done.stdout)

    return run


# -- MemoryStore -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def served_memory() -> Iterator[tuple[tuple[str, int], bytes]]:
    with memory_server() as served:
        yield served


@pytest.fixture
def memory_store(served_memory: tuple[tuple[str, int], bytes]) -> StoreUnderTest:
    address, authkey = served_memory
    reader = ServedMemoryStore(address, authkey)
    spec = {"kind": "memory", "address": list(address), "authkey": authkey.hex()}
    return StoreUnderTest("memory", spec, reader.load)


# -- DynamoDB: moto's server, and dynalite for connections ---------------------------------


@pytest.fixture(scope="session")
def moto_table(moto_server: str) -> str:
    return make_table(moto_server)


@pytest.fixture
def dynamodb_store(moto_server: str, moto_table: str) -> StoreUnderTest:
    """DynamoDB on moto's server (which closes each connection after its answer)."""
    reader = DynamoDBStore(moto_table, endpoint_url=moto_server, consistent_read=True)
    spec = {"kind": "dynamodb", "table": moto_table, "endpoint_url": moto_server}
    return StoreUnderTest("dynamodb", spec, reader.load)


@pytest.fixture
def dynalite_store(dynalite_server: str) -> Iterator[StoreUnderTest]:
    """DynamoDB on dynalite, behind a proxy that counts connections: dynalite keeps them
    alive, as DynamoDB does, so a restored client can reuse the snapshot's."""
    table = make_table(dynalite_server)
    host, port = dynalite_server.removeprefix("http://").split(":")
    proxy = CountingProxy((host, int(port)))
    reader = DynamoDBStore(table, endpoint_url=dynalite_server, consistent_read=True)
    spec = {"kind": "dynamodb", "table": table, "endpoint_url": proxy.endpoint_url}
    try:
        yield StoreUnderTest("dynalite", spec, reader.load, proxy=proxy)
    finally:
        proxy.close()


# -- Redis: TLS and an IAM user --------------------------------------------------------------


@pytest.fixture(scope="session")
def iam_tls_redis(
    redis_server: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TlsRedisServer]:
    """A private TLS-only redis-server (depends on redis_server for the missing-backend
    rule) whose default user is off: an admin, and the IAM user each test sets."""
    server = TlsRedisServer(*make_certificates(tmp_path_factory.mktemp("restore-tls")))
    server.start()
    try:
        admin = redis.Redis.from_url(server.url, ssl_ca_certs=str(server.ca))
        admin.execute_command("ACL", "SETUSER", ADMIN[0], "on", f">{ADMIN[1]}", "~*", "&*", "+@all")
        admin.execute_command("AUTH", *ADMIN)
        admin.execute_command("ACL", "SETUSER", "default", "off")
        admin.close()
        yield server
    finally:
        server.stop()


def token_at(epoch_ms: int) -> str:
    """The token ElastiCacheIAMAuth signs at ``epoch_ms`` for the tests' IAM user."""
    auth = ElastiCacheIAMAuth(
        IAM_USER,
        IAM_CACHE,
        IAM_REGION,
        credentials=Credentials(*IAM_CREDENTIALS),
        clock=lambda: epoch_ms / 1000,
    )
    return auth.token()


@pytest.fixture
def redis_store(iam_tls_redis: TlsRedisServer) -> Iterator[StoreUnderTest]:
    """The IAM user logs in with the token signed at init, or the one signed at the
    restores; the init's is refused once the snapshot is taken (scenarios.snapshotted)."""
    server = iam_tls_redis
    admin = redis.Redis.from_url(
        server.url, ssl_ca_certs=str(server.ca), username=ADMIN[0], password=ADMIN[1]
    )
    at_init = token_at(T_INIT_MS)
    at_restore = token_at(T_INIT_MS + round(RESTORE_AFTER_S * 1000))
    admin.execute_command(
        "ACL",
        "SETUSER",
        IAM_USER,
        "reset",
        *template_access_string(),
        f">{at_init}",
        f">{at_restore}",
    )
    reader = RedisStore(
        url=server.url,
        ssl_ca_certs=str(server.ca),
        username=ADMIN[0],
        password=ADMIN[1],
        use_server_time=False,
    )
    proxy = CountingProxy(("127.0.0.1", server.port))
    spec = {
        "kind": "redis",
        "url": proxy.tls_redis_url,
        "admin_url": server.url,
        "ca": str(server.ca),
        "iam": {
            "user": IAM_USER,
            "cache": IAM_CACHE,
            "region": IAM_REGION,
            "credentials": list(IAM_CREDENTIALS),
        },
        "admin": list(ADMIN),
    }
    try:
        yield StoreUnderTest("redis", spec, reader.load, proxy=proxy)
    finally:
        proxy.close()
        reader.close()
        admin.close()


@pytest.fixture(params=["memory", "dynamodb", "redis"])
def store(request: pytest.FixtureRequest) -> StoreUnderTest:
    """Each of the three stores in turn."""
    chosen: StoreUnderTest = request.getfixturevalue(f"{request.param}_store")
    return chosen
