"""Fixtures for the RedisStore suites: stores on the session server, and special servers.

Besides the plain redis-server of tests/conftest.py, two variants run here, both real
redis-server processes started on free loopback ports:

- TlsRedisServer: TLS only (as ElastiCache Serverless is), with a CA and a certificate for
  127.0.0.1 made for the test session;
- ClusterRedisServer: cluster mode, one node owning all 16384 slots, so Redis itself checks
  the keys each script declares (CROSSSLOT) and redis-py's cluster client routes by slot.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from devtools.servers import LOOPBACK, RedisServer, ServerStartError
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


# --------------------------------------------------------------------------- TLS


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1: (ca, cert, key) PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fleetbreaker test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, LOOPBACK)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(LOOPBACK))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


class TlsRedisServer(RedisServer):
    """redis-server accepting TLS connections only, on `port`."""

    name = "redis-tls"

    def __init__(self, ca: Path, cert: Path, key: Path) -> None:
        super().__init__()
        self.ca, self.cert, self.key = ca, cert, key

    def command(self) -> Sequence[str]:
        args = list(super().command())
        args[args.index("--port") + 1] = "0"  # no plain-text listener at all
        return [
            *args,
            "--tls-port",
            str(self.port),
            "--tls-cert-file",
            str(self.cert),
            "--tls-key-file",
            str(self.key),
            "--tls-ca-cert-file",
            str(self.ca),
            "--tls-auth-clients",
            "no",
        ]

    def is_ready(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.ca))
        with (
            socket.create_connection((LOOPBACK, self.port), timeout=1.0) as plain,
            context.wrap_socket(plain, server_hostname=LOOPBACK) as s,
        ):
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")

    @property
    def url(self) -> str:
        return f"rediss://{LOOPBACK}:{self.port}/0"


@pytest.fixture(scope="session")
def tls_redis(redis_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A TLS-only redis-server (depends on redis_server for the missing-backend rule)."""
    server = TlsRedisServer(*make_certificates(tmp_path_factory.mktemp("tls")))
    try:
        server.start()
        yield server
    finally:
        server.stop()


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
