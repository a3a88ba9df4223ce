"""Shared pytest setup: AWS environment hygiene, real backend fixtures, and the CI skip rule.

Backends (see devtools/servers.py) are started by the fixtures on free loopback ports and stopped
at the end of their scope, also when tests fail. A backend whose program is missing skips the
tests that need it locally, but fails them under CI (env CI non-empty), and in CI any skipped
test makes the whole session fail: a skip there would hide untested code.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import socket
import ssl
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import pytest

from devtools import servers
from devtools.servers import (
    LOOPBACK,
    BackendMissing,
    BlackholeServer,
    DynaliteServer,
    MotoServer,
    RedisServer,
    ServerProcess,
    ServerStartError,
)
from tests.support import FakeClock

IN_CI = bool(os.environ.get("CI"))


# --------------------------------------------------------------------------- environment
# Done at import time, before any test module creates a boto3 session.


def _sanitize_aws_environment() -> None:
    # An endpoint override from the outer shell would silently redirect every client.
    for key in [k for k in os.environ if k.startswith("AWS_ENDPOINT_URL")]:
        del os.environ[key]
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    if os.environ.get("FLEETBREAKER_STACK"):
        # The opt-in deployed suite (`make test-deployed`) needs the real credential chain.
        return
    # Local runs: dummy credentials and a fixed region, and no profile, config file, SSO or
    # instance metadata lookup, so boto3 can neither find nor wait for real credentials.
    for key in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_REGION",
    ):
        os.environ.pop(key, None)
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
            "SAM_CLI_TELEMETRY": "0",
        }
    )


_sanitize_aws_environment()


# --------------------------------------------------------------------------- backends


def backend_unavailable(reason: str) -> NoReturn:
    """Skip locally; fail in CI, where every backend must be installed by `make deps`."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: a missing backend is a failure)", pytrace=False)
    pytest.skip(reason)


S = TypeVar("S", bound=ServerProcess)


def _start(server: S) -> S:
    """Start a backend; a missing program is backend_unavailable(), a broken one a failure."""
    try:
        server.check_installed()
        missing = None
    except BackendMissing as exc:
        missing = str(exc)
    if missing is not None:  # outside the except block: no chained traceback in the report
        backend_unavailable(missing)
    try:
        server.start()
        broken = None
    except ServerStartError as exc:
        broken = str(exc)
    if broken is not None:  # installed but broken is a real failure everywhere, not a skip
        pytest.fail(broken, pytrace=False)
    return server


@contextlib.contextmanager
def _serve(server: S) -> Iterator[S]:
    try:
        yield _start(server)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """Endpoint URL of moto's standalone server (real HTTP, own process, MOTO_PORT set)."""
    with _serve(MotoServer()) as server:
        yield server.endpoint_url


@pytest.fixture(scope="session")
def dynalite_server() -> Iterator[str]:
    """Endpoint URL of an in-memory dynalite (DynamoDB implementation from npm)."""
    with _serve(DynaliteServer()) as server:
        yield server.endpoint_url


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """URL (redis://127.0.0.1:PORT/0) of a redis-server shared by the session.

    Shared: use unique keys. Tests that stop or restart redis use `redis_factory` instead.
    """
    with _serve(RedisServer()) as server:
        yield server.url


@pytest.fixture
def redis_factory() -> Iterator[Callable[[], RedisServer]]:
    """Start private RedisServer instances (stop/kill/restart/pause them freely).

    All of them are stopped when the test ends.
    """
    started: list[RedisServer] = []

    def start() -> RedisServer:
        server = RedisServer()
        started.append(server)
        return _start(server)

    try:
        yield start
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def clock() -> FakeClock:
    """Epoch milliseconds that move only when the test advances them."""
    return FakeClock()


@pytest.fixture
def blackhole() -> Iterator[BlackholeServer]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""
    with BlackholeServer() as server:
        yield server


@pytest.fixture
def refused_port() -> int:
    """A 127.0.0.1 port where connections are refused."""
    return servers.refused_port()


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


# --------------------------------------------------------------------------- CI skip rule

_skipped: list[str] = []


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(f"{report.nodeid}: {_skip_reason(report)}")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        _skipped.append(f"{report.nodeid}: {_skip_reason(report)}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if IN_CI and _skipped and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if IN_CI and _skipped:
        terminalreporter.section("skipped tests fail the run in CI", red=True, bold=True)
        for line in _skipped:
            terminalreporter.line(f"SKIPPED {line}", red=True)
