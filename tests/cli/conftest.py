"""Fixtures for the CLI tests: the CLI in processes of its own, against real stores.

``Backend.run`` runs each command in a process forked from a server that has imported the CLI
(tests/cli/forked.py): its own argv, environment and output, without an interpreter's start-up
and boto3's import each time. ``run_cli`` runs the installed console script itself, for what
only the script shows (its shim, signals, a terminal, what it prints of a secret).

Every backend is a real server on loopback: moto's server and dynalite for DynamoDB, a
redis-server for Redis. STS answers from moto's server (AWS_ENDPOINT_URL_STS), so the
caller's identity the CLI records is a real GetCallerIdentity answer: moto's test user.

One more backend, ``in_process``, runs the same tests through ``cli.main(argv)`` in the test's
own process, against moto in-process (DynamoDB and STS): what mutation testing can follow
(`make mutate`'s mutants live in this process, not in a console script's). And ``memory``:
``cli.main(argv)`` on a MemoryStore, its AWS part (the client, STS) replaced: the commands,
parser and views in milliseconds a test, what `make mutate` runs per CLI mutant.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest

from devtools import servers
from devtools.sam_template import table_stack
from fleetbreaker import (
    BreakerConfig,
    CircuitBreaker,
    CircuitOpenError,
    DynamoDBStore,
    MemoryStore,
    RedisStore,
    cli,
    tuning,
)
from fleetbreaker.breaker import system_clock
from tests.cli import forked
from tests.support import Dependency, FakeClock, make_policy

CLI = Path(sys.executable).with_name("fleetbreaker")
MOTO_ARN = "arn:aws:sts::123456789012:user/moto"  # what moto's GetCallerIdentity answers
CLI_TIMEOUT_S = 60  # a hung CLI fails the test instead of hanging the suite


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json_lines(self) -> list[dict[str, Any]]:
        import json

        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


@dataclass
class Backend:
    """One store as the CLI reaches it (``options``) and as the test process reaches it."""

    kind: str
    options: list[str]
    store: Any
    env: dict[str, str] = field(default_factory=dict)

    def run(self, *args: str, env: dict[str, str] | None = None) -> Result:
        return run_forked([*self.options, *args], {**self.env, **(env or {})})


def run_forked(args: Sequence[str], env: dict[str, str] | None = None) -> Result:
    """``fleetbreaker ARGS`` in a process forked from the CLI's server (tests/cli/forked.py)."""
    code, out, err = forked.run(args, {**os.environ, **(env or {})}, CLI_TIMEOUT_S)
    return Result(code, out, err)


def run_cli(args: Sequence[str], env: dict[str, str] | None = None) -> Result:
    """Run the installed console script and collect its exit code and output."""
    merged = {**os.environ, **(env or {})}
    done = subprocess.run(
        [str(CLI), *args],
        capture_output=True,
        text=True,
        env=merged,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


@contextlib.contextmanager
def environ_with(values: Mapping[str, str]) -> Iterator[None]:
    """os.environ with ``values`` set, as it was afterwards."""
    saved = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_in_process(args: Sequence[str], env: Mapping[str, str] | None = None) -> Result:
    """The CLI run by ``cli.main(argv)`` in this process, its exit code and output captured."""
    out, err = io.StringIO(), io.StringIO()
    with (
        environ_with(env or {}),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = cli.main(list(args))
    return Result(code, out.getvalue(), err.getvalue())


@dataclass
class InProcessBackend(Backend):
    """The CLI run by ``cli.main(argv)`` in this process (moto in-process answers it)."""

    def run(self, *args: str, env: dict[str, str] | None = None) -> Result:
        return run_in_process([*self.options, *args], {**self.env, **(env or {})})


@pytest.fixture
def in_process_backend() -> Iterator[Backend]:
    """moto in-process: a table for this test, DynamoDB and STS answered in this process."""
    from moto import mock_aws

    with mock_aws():
        client = servers.dynamodb_client(None)
        table = f"cli-{uuid.uuid4().hex[:8]}"
        client.create_table(
            TableName=table,
            KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        store = DynamoDBStore(table, boto3_client=client)
        yield InProcessBackend("in_process", ["--table", table], store)


@pytest.fixture
def memory_backend(monkeypatch: pytest.MonkeyPatch) -> Backend:
    """cli.main(argv) on a MemoryStore: the CLI's own options name the store (store_environ and
    its description are the real ones), only the store and the STS caller are replaced."""
    from fleetbreaker.cli import aws, commands
    from fleetbreaker.stores import StoreSettings

    store = MemoryStore()

    def open_memory(args: Any) -> tuple[MemoryStore, str]:
        return store, StoreSettings.from_env(aws.store_environ(args)).description

    def identity(args: Any) -> str:
        # What caller_identity (tested on the other backends) answers from these options:
        # the local user for a local endpoint, else the identity moto's STS gives.
        return tuning.local_user() if args.endpoint_url is not None else MOTO_ARN

    monkeypatch.setattr(commands, "open_store", open_memory)
    monkeypatch.setattr(commands, "caller_identity", identity)
    return InProcessBackend("memory", ["--table", "cli-memory"], store)


def stack_with_table(
    endpoint: str | None,
    table: str,
    cache_endpoint: str | None = None,
    cache_user: tuple[str, str] | None = None,
) -> str:
    """A stack with a breaker table and the outputs template.yaml gives it (endpoint None:
    moto in-process)."""
    stack = f"fleetbreaker-cli-{uuid.uuid4().hex[:8]}"
    template = table_stack(table)
    if cache_endpoint is not None:
        template["Outputs"]["BreakerCacheEndpoint"] = {"Value": cache_endpoint}
    if cache_user is not None:
        # The outputs template.yaml gives the cache's IAM user and the cache's name.
        template["Outputs"]["BreakerCacheUserId"] = {"Value": cache_user[0]}
        template["Outputs"]["BreakerCacheName"] = {"Value": cache_user[1]}
    client = boto3.client("cloudformation", endpoint_url=endpoint)
    client.create_stack(StackName=stack, TemplateBody=json.dumps(template))
    return stack


@pytest.fixture(scope="session")
def sts_env(moto_server: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL_STS": moto_server}


@pytest.fixture(params=["moto_server", "dynalite", "redis", "in_process", "memory"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each store the CLI supports, holding only this test's breakers."""
    kind = request.param
    if kind in ("in_process", "memory"):
        yield request.getfixturevalue(f"{kind}_backend")
        return
    sts_env = request.getfixturevalue("sts_env")
    if kind == "redis":
        # The server is shared by the session: tests use unique breaker names, and `list`
        # may show other tests' breakers too.
        url = request.getfixturevalue("redis_server")
        store = RedisStore(url=url, socket_timeout=5.0)
        yield Backend(kind, ["--redis-url", url], store, dict(sts_env))
        store.close()
        return
    endpoint = request.getfixturevalue(f"{kind}_server" if kind == "dynalite" else kind)
    # A table per test: `list` then sees this test's breakers only.
    table = servers.make_table(endpoint)
    store = DynamoDBStore(table, boto3_client=servers.dynamodb_client(endpoint))
    yield Backend(kind, ["--table", table, "--endpoint-url", endpoint], store, dict(sts_env))


@pytest.fixture
def moto_server_backend(moto_server: str, sts_env: dict[str, str]) -> Backend:
    table = servers.make_table(moto_server)
    store = DynamoDBStore(table, boto3_client=servers.dynamodb_client(moto_server))
    return Backend("moto_server", ["--table", table, "--endpoint-url", moto_server], store, sts_env)


@pytest.fixture(params=["moto_server", "in_process", "memory"])
def dynamodb_backend(request: pytest.FixtureRequest) -> Backend:
    """One DynamoDB: moto's server for the console script, moto in-process for cli.main; and
    cli.main on a MemoryStore, for what does not depend on the store (`make mutate`)."""
    found: Backend = request.getfixturevalue(f"{request.param}_backend")
    return found


@pytest.fixture
def name() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


POLICY = make_policy(failure_threshold=3)


def fail(backend: Backend, name: str, times: int) -> None:
    for _ in range(times):
        now = system_clock()
        backend.store.record_failure(name, POLICY, now, backend.store.load(name, now))


def load(backend: Backend, name: str) -> Any:
    return backend.store.load(name, system_clock())


@dataclass
class Running:
    """A CircuitBreaker at work on a backend's store, as a container runs it while the CLI acts.

    Its clock moves only when a test says so (``wait_cache_ttl``), so what it sees is its
    cached record until then, and the store's record after.
    """

    breaker: CircuitBreaker
    clock: FakeClock
    dependency: Dependency

    def wait_cache_ttl(self) -> None:
        self.clock.advance(self.breaker.config.cache_ttl)

    def next_call_reaches_the_dependency(self) -> bool:
        """Make one call through the breaker: did it run the dependency?"""
        before = self.dependency.calls
        try:
            self.breaker.call(self.dependency)
        except CircuitOpenError:
            assert self.dependency.calls == before, "a rejected call ran the dependency"
            return False
        except ConnectionError:  # the dependency ran and failed (dependency.failing)
            pass
        return self.dependency.calls == before + 1


@pytest.fixture
def running(backend: Backend, name: str) -> Running:
    """A breaker on ``backend``'s store with POLICY's threshold and a one-second cache."""
    config = BreakerConfig(
        failure_threshold=POLICY.failure_threshold, cache_ttl=1.0, store_deadline_seconds=30
    )
    clock = FakeClock(system_clock())
    return Running(
        CircuitBreaker(name, store=backend.store, config=config, clock=clock), clock, Dependency()
    )


def one_line_error(result: Any) -> str:
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err
    return lines[0]
