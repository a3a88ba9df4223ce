"""Real test backends on loopback: moto's server, dynalite, redis-server, and fault helpers.

Every server runs as a child process in its own process group on a free 127.0.0.1 port and is
killed by PID when stopped, at interpreter exit (atexit) and, on Linux, when the test process
itself dies (PR_SET_PDEATHSIG, for servers started from the main thread), so a crashed or
interrupted run leaves nothing listening.

The pytest fixtures live in tests/conftest.py; the classes here are also usable directly by
tests that need a server of their own (for example to kill and restart redis mid-test).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import datetime
import http.client
import ipaddress
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from devtools import moto_validation

REPO_ROOT = Path(__file__).resolve().parent.parent
DYNALITE_CLI = REPO_ROOT / "node_modules" / "dynalite" / "cli.js"
LOOPBACK = "127.0.0.1"
READY_TIMEOUT = 20.0  # seconds; a backend slower than this to start is reported as broken
REGION = "us-east-1"

# Server logs go here; a startup failure quotes the log's tail in its error.
_LOG_DIR = Path(tempfile.mkdtemp(prefix="fleetbreaker-servers-"))
atexit.register(shutil.rmtree, _LOG_DIR, ignore_errors=True)


# The variables coverage.py hands a child process to start measuring it.
COVERAGE_CHILD_PREFIX = "COVERAGE_PROCESS_"


def untraced_env(**extra: str) -> dict[str, str]:
    """This process's environment without coverage.py's child-process variables, plus
    ``extra``: for a child that runs none of the measured code (a server, or a tool such as
    sam, cfn-lint or pip). `make test` measures coverage in every Python child that inherits
    those variables, and its tracer is called for every frame of the child, measured or not:
    cfn-lint on the template took 3.1 s of CPU traced, 1.6 s untraced."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(COVERAGE_CHILD_PREFIX)}
    env.update(extra)
    return env


class BackendMissing(RuntimeError):
    """A backend's program is not installed (the fixture turns this into skip, or fail in CI)."""


class ServerStartError(RuntimeError):
    """A backend process exited or did not become ready in time."""


# --------------------------------------------------------------------------- ports


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picked it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


# Sockets that reserve refused ports until the process exits.
_reserved: list[socket.socket] = []


def refused_port() -> int:
    """A port on 127.0.0.1 where connections are refused (RST), for "store is down" tests.

    The port is bound but never listened on, and stays bound for the life of the process, so
    no server started later can take it and turn "refused" into "answered".
    """
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((LOOPBACK, 0))
    _reserved.append(s)
    port: int = s.getsockname()[1]
    return port


# --------------------------------------------------------------------------- processes


_PR_SET_PDEATHSIG = 1
# Looked up here, not in the forked child, where loading libraries is unsafe.
_prctl: Any = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


def _die_with_parent() -> None:
    """preexec_fn: have the kernel SIGKILL the child if the test process dies (Linux only)."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _preexec() -> Callable[[], None] | None:
    # The death signal fires when the *thread* that forked exits, so only servers started from
    # the main thread get it; one started from a worker thread relies on stop()/atexit alone.
    if _prctl is not None and threading.current_thread() is threading.main_thread():
        return _die_with_parent
    return None


_live: set[ServerProcess] = set()


@atexit.register
def _stop_all() -> None:
    for server in list(_live):
        server.stop()


class ServerProcess:
    """One backend child process: start, readiness polling, stop/kill/pause by PID.

    Subclasses supply `command()` and `is_ready()`. Start retries on a fresh port if the
    chosen one was taken between `free_port()` and the server binding it (unless the port was
    fixed by the caller, as a restart on the same port needs).
    """

    name = "server"

    def __init__(self, port: int | None = None, *, ready_timeout: float = READY_TIMEOUT) -> None:
        self._fixed_port = port is not None
        self.port: int = port if port is not None else free_port()
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = _LOG_DIR / f"{self.name}-{uuid.uuid4().hex[:8]}.log"

    # -- subclass hooks
    @staticmethod
    def check_installed() -> None:
        """Raise BackendMissing if the server's program is not installed."""

    def command(self) -> Sequence[str]:
        raise NotImplementedError

    def env(self) -> Mapping[str, str]:
        # A server runs none of the measured code: tracing it would only slow its tests.
        return untraced_env()

    def is_ready(self) -> bool:
        raise NotImplementedError

    # -- lifecycle
    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> ServerProcess:
        if self.running:
            return self
        attempts = 1 if self._fixed_port else 3
        for attempt in range(attempts):
            try:
                self._spawn_and_wait()
                return self
            except ServerStartError:
                self.stop()
                if attempt == attempts - 1:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _spawn_and_wait(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                list(self.command()),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(self.env()),
                cwd=REPO_ROOT,
                start_new_session=True,  # own process group: stop() kills helpers too
                preexec_fn=_preexec(),
            )
        _live.add(self)
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"{self.name} exited with code {self.proc.returncode} on port {self.port}"
                    f"\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError):
                if self.is_ready():
                    return
            time.sleep(0.05)
        raise ServerStartError(
            f"{self.name} not ready on port {self.port} after {self.ready_timeout:.0f} s"
            f"\n{self.log_tail()}"
        )

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float = 5.0) -> None:
        """Graceful stop (SIGTERM to the process group), SIGKILL if it lingers."""
        if self.proc is None:
            return
        self._signal_group(signal.SIGCONT)  # a paused server cannot act on SIGTERM
        self._signal_group(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            self.proc.wait()
        self._signal_group(signal.SIGKILL)  # stragglers left in the group
        self.proc = None
        _live.discard(self)

    def kill(self) -> None:
        """Crash the server (SIGKILL): no clean shutdown, connections reset."""
        if self.proc is None:
            return
        self._signal_group(signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        _live.discard(self)

    def restart(self) -> ServerProcess:
        """Stop and start again on the same port (clients keep their URL)."""
        self.stop()
        self._fixed_port = True
        return self.start()

    def pause(self) -> None:
        """SIGSTOP: the port still accepts connections but nothing answers (a hung server)."""
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _http_answers(port: int) -> bool:
    """True once anything answers HTTP on the port (any status: the server is up)."""
    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=1.0)
    try:
        conn.request("GET", "/")
        conn.getresponse().read()
        return True
    finally:
        conn.close()


class MotoServer(ServerProcess):
    """moto's standalone server (`python -m moto.server`): AWS APIs over real HTTP.

    ``validate_once``: moto checks each UpdateExpression once instead of once per action
    (devtools/moto_validation.py) and builds its JSON answers without its alias search where
    none can match (devtools/moto_serialize.py), as the test suite's servers do; the demo
    and the benchmarks leave it off and run moto as it is.
    """

    name = "moto"

    def __init__(
        self,
        port: int | None = None,
        *,
        ready_timeout: float = READY_TIMEOUT,
        validate_once: bool = False,
    ) -> None:
        super().__init__(port, ready_timeout=ready_timeout)
        self.validate_once = validate_once

    @staticmethod
    def check_installed() -> None:
        import importlib.util

        if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
            raise BackendMissing("moto[server] is not installed in this Python (run `make venv`)")

    def command(self) -> Sequence[str]:
        # DynamoDB requests are serialised the way real DynamoDB serialises writes to an item;
        # see devtools/moto_atomic_server.py.
        launcher = str(Path(__file__).with_name("moto_atomic_server.py"))
        return [sys.executable, launcher, LOOPBACK, str(self.port)]

    def env(self) -> Mapping[str, str]:
        # Step Functions service integrations call back into moto at MOTO_PORT.
        env = {**super().env(), "MOTO_PORT": str(self.port), "PYTHONUNBUFFERED": "1"}
        if self.validate_once:
            env[moto_validation.ENV] = "1"
        return env

    def is_ready(self) -> bool:
        return _http_answers(self.port)

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"


class DynaliteServer(ServerProcess):
    """dynalite from node_modules (an independent, in-memory DynamoDB implementation)."""

    name = "dynalite"

    @staticmethod
    def check_installed() -> None:
        if shutil.which("node") is None:
            raise BackendMissing("node is not on PATH (dynalite needs Node.js)")
        if not DYNALITE_CLI.is_file():
            raise BackendMissing(f"{DYNALITE_CLI} is missing (run `make node`)")

    def command(self) -> Sequence[str]:
        # Short CREATING/DELETING phases keep table setup fast; make_table still waits for
        # ACTIVE, so the state machine is exercised. No --path: in-memory store.
        return [
            "node",
            str(DYNALITE_CLI),
            "--host",
            LOOPBACK,
            "--port",
            str(self.port),
            "--createTableMs",
            "50",
            "--deleteTableMs",
            "50",
            "--updateTableMs",
            "50",
        ]

    def is_ready(self) -> bool:
        return _http_answers(self.port)

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"


class RedisServer(ServerProcess):
    """A throwaway redis-server: no persistence, loopback only, on its own port.

    `stop()`/`kill()`/`restart()`/`pause()` simulate outages; `restart()` keeps the port so a
    client's URL stays valid (the data is gone: nothing is persisted).
    """

    name = "redis"

    @staticmethod
    def check_installed() -> None:
        if shutil.which("redis-server") is None:
            raise BackendMissing("redis-server is not on PATH (run `make redis`)")

    def command(self) -> Sequence[str]:
        return [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            LOOPBACK,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(_LOG_DIR),
        ]

    def is_ready(self) -> bool:
        with socket.create_connection((LOOPBACK, self.port), timeout=1.0) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"


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


# --------------------------------------------------------------------------- fault helpers


class BlackholeServer:
    """Accepts TCP connections on 127.0.0.1 and never reads or answers: every read times out.

    Stands in for a store that is reachable but hung. Use as a context manager or call
    close(); accepted sockets are held open until then.
    """

    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((LOOPBACK, 0))
        self._listener.listen(128)
        self.port: int = self._listener.getsockname()[1]
        self._held: list[socket.socket] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="blackhole", daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        return (LOOPBACK, self.port)

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def redis_url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    @property
    def accepted(self) -> int:
        """Connections accepted so far (each one a client now waiting for an answer)."""
        return len(self._held)

    def _accept_loop(self) -> None:
        self._listener.settimeout(0.2)
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._held.append(conn)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=2)
        self._listener.close()
        for conn in self._held:
            conn.close()
        self._held.clear()

    def __enter__(self) -> BlackholeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class HoldingProxy:
    """An HTTP proxy on 127.0.0.1 in front of a DynamoDB endpoint that holds chosen operations.

    Every request is passed to ``upstream`` and its answer passed back, except a request whose
    ``X-Amz-Target`` operation is in ``hold`` (``"DescribeTable"``, ``"UpdateItem"``...): that
    one is held unanswered until close(), as a DynamoDB that took the request and has not
    answered yet. ``held`` counts them, so a test knows when a client is waiting. The client
    must not give up first: give it a read timeout longer than the test.
    """

    def __init__(self, upstream: str, hold: Sequence[str]) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit

        target = urlsplit(upstream)
        self.hold = frozenset(hold)
        self._held = 0
        self._count_lock = threading.Lock()
        self._closed = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                operation = self.headers.get("X-Amz-Target", "").rpartition(".")[2]
                if operation in proxy.hold:
                    with proxy._count_lock:
                        proxy._held += 1
                    proxy._closed.wait()
                    self.close_connection = True
                    return
                connection = http.client.HTTPConnection(
                    target.hostname or LOOPBACK, target.port, timeout=30
                )
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                    connection.request("POST", self.path, body=body, headers=headers)
                    answer = connection.getresponse()
                    payload = answer.read()
                finally:
                    connection.close()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("content-length", "connection", "transfer-encoding"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="holding-proxy", daemon=True
        )
        self._thread.start()

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def held(self) -> int:
        """Requests held so far (each one a client now waiting for its answer)."""
        with self._count_lock:
            return self._held

    def close(self) -> None:
        self._closed.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=2)

    def __enter__(self) -> HoldingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- store clients

# The timeouts of the clients the tests give their local servers. The stores' own defaults
# (DynamoDB: 0.2 s connect, 0.3 s read; Redis: 0.2 s) are made for DynamoDB and ElastiCache
# next to the function; a local server on a busy machine (other test workers, a CI
# neighbour) can answer later than that without anything being wrong.
PATIENT_DYNAMODB = {"connect_timeout": 2.0, "read_timeout": 10.0}
PATIENT_REDIS = {"socket_timeout": 5.0, "socket_connect_timeout": 5.0}


def store_client_defaults() -> tuple[dict[str, Any], dict[str, Any]]:
    """The package's own defaults, as live objects: the DynamoDB store's client timeouts and
    RedisStore's keyword defaults. Set a key and every client built afterwards in this
    process gets the value (the package reads both when it builds a client)."""
    from fleetbreaker.stores.dynamodb import wire
    from fleetbreaker.stores.redis import RedisStore

    redis_defaults = RedisStore.__init__.__kwdefaults__
    assert redis_defaults is not None
    return wire.DEFAULT_TIMEOUTS, redis_defaults


def patient_store_clients() -> None:
    """Give every store client built from now on in this process PATIENT_* timeouts.

    For processes that run the package against local servers and are not about its
    timeouts (tests/conftest.py does it per test, restoring the defaults for the tests that
    are; the deploy rehearsal's function processes, devtools/lambda_runtime.py, for life).
    """
    dynamodb, redis = store_client_defaults()
    dynamodb.update(PATIENT_DYNAMODB)
    redis.update(PATIENT_REDIS)


# --------------------------------------------------------------------------- DynamoDB


def dynamodb_client(endpoint_url: str, **config: Any) -> Any:
    """A boto3 DynamoDB client for a local endpoint, with dummy credentials and patient
    timeouts (PATIENT_DYNAMODB).

    Keyword arguments go to botocore.config.Config (they override the defaults here).
    """
    import boto3
    from botocore.config import Config

    settings: dict[str, Any] = {
        **PATIENT_DYNAMODB,
        "retries": {"max_attempts": 2, "mode": "standard"},
        **config,
    }
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(**settings),
    )


def make_table(endpoint_url: str, name: str | None = None, *, timeout: float = 20.0) -> str:
    """Create a breaker table (partition key `name` (S), on-demand) and wait until ACTIVE.

    Works against moto's server and dynalite. The default name is unique, so tests sharing
    one server never see each other's items. Returns the table name.
    """
    table = name or f"fleetbreaker-test-{uuid.uuid4().hex[:12]}"
    client = dynamodb_client(endpoint_url)
    client.create_table(
        TableName=table,
        AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    _wait_until(
        lambda: client.describe_table(TableName=table)["Table"]["TableStatus"] == "ACTIVE",
        timeout,
        f"table {table} at {endpoint_url} not ACTIVE",
    )
    return table


def _wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {timeout:.0f} s")
        time.sleep(0.05)
