"""Shared pytest setup: AWS environment hygiene, real backend fixtures, and the CI skip rule.

Backends (see devtools/servers.py) are started by the fixtures on free loopback ports and stopped
at the end of their scope, also when tests fail. A backend whose program is missing skips the
tests that need it locally, but fails them under CI (env CI non-empty), and in CI any skipped
test makes the whole session fail: a skip there would hide untested code.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TypeVar

import pytest

from devtools import botocore_data, moto_serialize, moto_validation, servers
from devtools.servers import (
    BackendMissing,
    BlackholeServer,
    DynaliteServer,
    MotoServer,
    RedisServer,
    ServerProcess,
    ServerStartError,
    TlsRedisServer,
    make_certificates,
)
from tests import coverage_scope, workers
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
coverage_scope.install()  # moto in-process, untraced by coverage (tests/coverage_scope.py)
moto_validation.validate_once()  # moto checks an UpdateExpression once, not once per action
moto_serialize.serialize_fast()  # ... and answers without its alias search where none can match
botocore_data.share_loaders()  # botocore's JSON read once per process, not once per session


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


@pytest.fixture(autouse=True)
def fresh_container_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a fresh container: LoggingListener says each kind of store
    misconfiguration once per process, so a test that asserts its one ERROR line must not
    find it said already by whichever test of its worker met that kind first."""
    import fleetbreaker.events as events

    monkeypatch.setattr(events, "reported_misconfigurations", set())


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """Endpoint URL of moto's standalone server (real HTTP, own process, MOTO_PORT set)."""
    with _serve(MotoServer(validate_once=True)) as server:
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


# Every store client the package builds in a test process gets the patient timeouts of the
# test servers' own clients (servers.PATIENT_*), except in the tests about the wall clock and
# the stores' timeouts themselves: those marked `realtime` (tests/faults, the Redis faults) or
# `store_timeouts` (the defaults read back, a reply held past them), which get the package's
# defaults back. Child processes (the CLI, the demo) keep the defaults; the deploy
# rehearsal's functions get the patient ones (devtools/lambda_runtime.py).
_DYNAMODB_DEFAULTS, _REDIS_DEFAULTS = servers.store_client_defaults()
PRODUCTION = (
    {setting: _DYNAMODB_DEFAULTS[setting] for setting in servers.PATIENT_DYNAMODB},
    {setting: _REDIS_DEFAULTS[setting] for setting in servers.PATIENT_REDIS},
)


def _set_store_client_defaults(
    patch: pytest.MonkeyPatch, dynamodb: dict[str, Any], redis: dict[str, Any]
) -> None:
    for defaults, values in ((_DYNAMODB_DEFAULTS, dynamodb), (_REDIS_DEFAULTS, redis)):
        for setting, seconds in values.items():
            patch.setitem(defaults, setting, seconds)


@pytest.fixture(scope="session", autouse=True)
def patient_store_clients() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        _set_store_client_defaults(patch, servers.PATIENT_DYNAMODB, servers.PATIENT_REDIS)
        yield


@pytest.fixture(autouse=True)
def own_store_timeouts(
    request: pytest.FixtureRequest, patient_store_clients: None
) -> Iterator[None]:
    """The stores' own timeouts back for a test marked `realtime` or `store_timeouts`."""
    if not any(request.node.get_closest_marker(m) for m in ("realtime", "store_timeouts")):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        _set_store_client_defaults(patch, *PRODUCTION)
        yield


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


class IamMoto:
    """A private moto server that enforces IAM on actions (as tests/rehearsal's do), its admin,
    and principals holding just the actions a test gives them.

    moto authorises actions against ``*`` and ignores conditions (devtools/rehearsal.py), so a
    principal's statements allow actions on every resource.
    """

    def __init__(self, endpoint_url: str) -> None:
        from devtools.rehearsal import create_admin, enforce_iam

        self.endpoint_url = endpoint_url
        self.admin = create_admin(endpoint_url)
        enforce_iam(endpoint_url)

    def principal(self, *actions: str) -> Any:
        """A new IAM user allowed exactly ``actions`` (e.g. "dynamodb:GetItem"), its keys."""
        import uuid

        from devtools.rehearsal import create_user

        statements = [{"Effect": "Allow", "Action": list(actions), "Resource": "*"}]
        return create_user(self.endpoint_url, f"p-{uuid.uuid4().hex[:10]}", statements, self.admin)

    def environment(self, keys: Any) -> dict[str, str]:
        """The variables that make a process (or boto3 in this one) sign as ``keys``."""
        return {
            "AWS_ACCESS_KEY_ID": keys.access_key_id,
            "AWS_SECRET_ACCESS_KEY": keys.secret_access_key,
        }

    def client(self, service: str = "dynamodb") -> Any:
        """A client signed as the admin."""
        from devtools.rehearsal import client

        return client(self.endpoint_url, service, self.admin)

    def breaker_table(self) -> str:
        """A breaker table shaped as template.yaml declares it (fleetbreaker create-table's)."""
        import uuid

        from fleetbreaker.stores import dynamodb_table

        table = f"doctor-{uuid.uuid4().hex[:10]}"
        dynamodb_table.ensure_table(self.client(), table)
        return table


@pytest.fixture(scope="session")
def iam_moto() -> Iterator[IamMoto]:
    """moto's server enforcing IAM: a server of its own (enforcement is server-wide)."""
    with _serve(MotoServer(validate_once=True)) as server:
        yield IamMoto(server.endpoint_url)


# --------------------------------------------------------------------------- TLS


@pytest.fixture(scope="session")
def tls_redis(redis_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A TLS-only redis-server (depends on redis_server for the missing-backend rule)."""
    server = TlsRedisServer(*make_certificates(tmp_path_factory.mktemp("tls")))
    try:
        server.start()
        yield server
    finally:
        server.stop()


# --------------------------------------------------------------------------- workers
# `make test` runs on pytest-xdist's workers; tests/workers.py keeps the tests that share a
# costly fixture on one worker and starts the slow ones first.

_GROUPS_DIR = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    if workers.distributed_by_group(config) and not hasattr(config, "workerinput"):
        config.stash[_GROUPS_DIR] = workers.make_groups_dir(config)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    if _GROUPS_DIR in node.config.stash:
        node.workerinput[workers.GROUPS_DIR] = node.config.stash[_GROUPS_DIR]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if _GROUPS_DIR not in config.stash:
        return None  # another --dist mode: xdist's own scheduler
    return workers.make_scheduler(config, log, config.stash[_GROUPS_DIR])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workers.on_worker_collected(config, items)


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
