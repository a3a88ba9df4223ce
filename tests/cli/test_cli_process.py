"""The CLI as a process of its own: stores out of reach, --stack, identity and usage errors,
each command forked from the CLI tests' server (tests/cli/forked.py, which answers as the
console script does: tests/cli/test_forked.py); and what only the console script shows:
`python -m fleetbreaker`, Ctrl-C, colour on a terminal, and `import fleetbreaker` staying
free of the CLI.
"""

from __future__ import annotations

import getpass
import json
import os
import pty
import signal
import subprocess
import sys
import uuid
from typing import Any

import pytest

from devtools import servers
from devtools.servers import LOOPBACK
from fleetbreaker import DynamoDBStore, RedisStore
from fleetbreaker.breaker import system_clock
from fleetbreaker.record import State
from fleetbreaker.tuning import Action
from tests.cli.conftest import (
    CLI,
    CLI_TIMEOUT_S,
    POLICY,
    Backend,
    fail,
    load,
    one_line_error,
    run_forked,
    stack_with_table,
)

# -- exit 3: store unreachable ---------------------------------------------------------------


def test_an_unreachable_dynamodb_exits_3_with_one_line(refused_port: int) -> None:
    endpoint = f"http://127.0.0.1:{refused_port}"

    result = run_forked(["--table", "CircuitBreakers", "--endpoint-url", endpoint, "list"])

    assert result.code == 3
    assert "unreachable" in one_line_error(result)


def test_an_unreachable_redis_exits_3_with_one_line(refused_port: int) -> None:
    result = run_forked(["--redis-url", f"redis://127.0.0.1:{refused_port}/0", "status", "x"])

    assert result.code == 3
    assert "Redis" in one_line_error(result)


def test_a_missing_table_exits_3_naming_it(moto_server: str) -> None:
    result = run_forked(["--table", "no-such-table", "--endpoint-url", moto_server, "list"])

    assert result.code == 3
    assert "'no-such-table' does not exist" in one_line_error(result)


# -- exit 2: usage ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--table", "CircuitBreakers", "explode"], "invalid choice: 'explode'"),
        (["--table", "CircuitBreakers", "status"], "required: name"),
        (["--table", "CircuitBreakers", "status", "bad\x07name"], "control characters"),
        (["--redis-url", "http://nowhere", "list"], "redis:// or rediss://"),
        (["list"], "no store: pass --table, --redis-url or --stack"),
        (
            ["--table", "T", "--endpoint-url", "localhost:8000", "list"],
            "include the scheme, e.g. http://localhost:8000",
        ),
        (["--table", "T", "list"], "no AWS region: pass --region"),
        (["--table", "T", "--region", "", "list"], "no AWS region: pass --region"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args: list[str], problem: str) -> None:
    # No region anywhere: AWS_REGION and AWS_DEFAULT_REGION empty, no config file.
    env = {
        "CIRCUIT_BREAKER_TABLE": "",
        "CIRCUIT_BREAKER_REDIS_URL": "",
        "AWS_REGION": "",
        "AWS_DEFAULT_REGION": "",
        "AWS_CONFIG_FILE": "/nonexistent",
    }

    result = run_forked(args, env)

    assert result.code == 2
    assert problem in one_line_error(result)


def test_global_options_work_after_the_command(moto_server_backend: Backend, name: str) -> None:
    fail(moto_server_backend, name, 1)

    result = run_forked(["status", name, *moto_server_backend.options, "--json"])

    assert result.code == 0, result.err
    assert json.loads(result.out)["failures"] == 1


def test_python_m_fleetbreaker_is_the_same_command(moto_server_backend: Backend, name: str) -> None:
    fail(moto_server_backend, name, 1)

    done = subprocess.run(
        [sys.executable, "-m", "fleetbreaker", *moto_server_backend.options, "status", name],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert f"name         {name}" in done.stdout


def test_importing_the_package_does_not_load_the_cli() -> None:
    code = "import sys, fleetbreaker; print('fleetbreaker.cli' in sys.modules)"

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert done.stdout.strip() == "False"


# -- --stack ---------------------------------------------------------------------------------


def test_stack_names_the_table_through_its_outputs(moto_server: str, name: str) -> None:
    # GIVEN a stack whose CircuitBreakersTableName output names a table holding a breaker
    table = f"fleetbreaker-stack-{uuid.uuid4().hex[:8]}"
    stack = stack_with_table(moto_server, table)
    store = DynamoDBStore(table, boto3_client=servers.dynamodb_client(moto_server))
    fail(Backend("moto_server", [], store), name, 1)

    # WHEN the operator names the stack instead of the table
    env = {"AWS_ENDPOINT_URL_CLOUDFORMATION": moto_server, "AWS_ENDPOINT_URL_DYNAMODB": moto_server}
    result = run_forked(["--stack", stack, "status", name, "--json"], env)

    # THEN the CLI finds the breaker in that table
    assert result.code == 0, result.err
    assert json.loads(result.out)["failures"] == 1


def test_a_stack_with_a_cache_sends_the_cli_to_redis_over_tls(
    moto_server: str, tls_redis: Any, name: str
) -> None:
    # GIVEN a stack with a table and a cache, the cache a redis-server that speaks TLS only
    # and holds a breaker (the table does not)
    store = RedisStore(url=tls_redis.url, ssl_ca_certs=str(tls_redis.ca), socket_timeout=5.0)
    fail(Backend("redis", [], store), name, 1)
    store.close()
    table = f"fleetbreaker-stack-{uuid.uuid4().hex[:8]}"
    stack = stack_with_table(moto_server, table, cache_endpoint=f"{LOOPBACK}:{tls_redis.port}")

    # WHEN the operator names the stack (the test CA stands in for the system's CAs)
    env = {
        "AWS_ENDPOINT_URL_CLOUDFORMATION": moto_server,
        "AWS_ENDPOINT_URL_DYNAMODB": moto_server,
        "SSL_CERT_FILE": str(tls_redis.ca),
    }
    result = run_forked(["--stack", stack, "status", name, "--json"], env)

    # THEN the CLI went to the cache (as the functions do), over TLS (the server takes
    # nothing else), and found the breaker there
    assert result.code == 0, result.err
    assert json.loads(result.out)["failures"] == 1


def test_an_unknown_stack_exits_2(moto_server: str) -> None:
    env = {"AWS_ENDPOINT_URL_CLOUDFORMATION": moto_server}

    result = run_forked(["--stack", "no-such-stack", "list"], env)

    assert result.code == 2
    assert "stack 'no-such-stack' not found" in one_line_error(result)


# -- identity --------------------------------------------------------------------------------


def test_without_sts_a_local_dynamodb_records_the_local_user(moto_server: str, name: str) -> None:
    # GIVEN a local DynamoDB and no STS endpoint: there is no AWS identity to ask for
    table = servers.make_table(moto_server)

    # WHEN an operator forces a breaker open
    result = run_forked(
        [
            "--table",
            table,
            "--endpoint-url",
            moto_server,
            "open",
            name,
            "--create",
            "--reason",
            "drill",
        ]
    )

    # THEN the action names the local user
    assert result.code == 0, result.err
    store = DynamoDBStore(table, boto3_client=servers.dynamodb_client(moto_server))
    record = store.load(name, system_clock())
    assert record is not None
    action = Action.decode(record.last_action)
    assert action is not None
    assert action.by == getpass.getuser()


def test_an_sts_that_does_not_answer_falls_back_to_the_local_user(
    moto_server_backend: Backend, name: str, refused_port: int
) -> None:
    env = {"AWS_ENDPOINT_URL_STS": f"http://127.0.0.1:{refused_port}"}

    result = moto_server_backend.run("disable", name, "--create", "--reason", "drill", env=env)

    assert result.code == 0, result.err
    action = Action.decode(load(moto_server_backend, name).last_action)
    assert action is not None
    assert action.by == getpass.getuser()


# -- watch and Ctrl-C ------------------------------------------------------------------------


def in_the_foreground() -> None:
    """preexec_fn: SIGINT as a terminal's foreground job gets it. A suite started in the
    background by a shell without job control (`make test &`) ignores SIGINT, a child inherits
    that, and Python then installs no KeyboardInterrupt for it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_watch_ends_on_ctrl_c_with_exit_130_and_one_line(
    moto_server_backend: Backend, name: str
) -> None:
    # GIVEN a watch running with no bound, as an operator's terminal runs it
    fail(moto_server_backend, name, 1)
    process = subprocess.Popen(
        [str(CLI), *moto_server_backend.options, "watch", name, "--output", "jsonl"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **moto_server_backend.env},
        preexec_fn=in_the_foreground,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()  # it has shown the status once

        # WHEN the operator presses Ctrl-C
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    # THEN it stops with exit 130 (a script must not take it for success), saying nothing
    # was changed, and no traceback
    assert json.loads(first)["name"] == name
    assert process.returncode == 130
    assert err == "fleetbreaker: interrupted; nothing was changed\n"


def test_watch_json_reports_a_store_error_as_a_json_line(
    moto_server_backend: Backend, name: str
) -> None:
    # GIVEN a watch, with --json, that has shown the status once
    fail(moto_server_backend, name, 1)
    process = subprocess.Popen(
        [
            str(CLI),
            *moto_server_backend.options,
            "watch",
            name,
            "--json",
            "--count",
            "2",
            "--interval",
            "0.5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **moto_server_backend.env},
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()

        # WHEN the store fails before the next refresh (its table is gone)
        moto_server_backend.store.client.delete_table(
            TableName=moto_server_backend.store.table_name
        )
        rest, err = process.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    # THEN every line of the output is JSON, the error one naming the breaker and the problem
    assert json.loads(first)["name"] == name
    [problem] = [json.loads(line) for line in rest.splitlines()]
    assert problem["name"] == name
    assert problem["error"].startswith("store error:")
    assert process.returncode == 0, err


# -- colour ----------------------------------------------------------------------------------


def _run_in_terminal(args: list[str], env: dict[str, str]) -> str:
    """Run the CLI with stdout on a pseudo-terminal; return what it wrote there."""
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [str(CLI), *args],
            stdout=follower,
            stderr=subprocess.PIPE,
            env={**os.environ, **env},
            timeout=CLI_TIMEOUT_S,
            check=False,
        )
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    assert done.returncode == 0, done.stderr
    return b"".join(chunks).decode()


def test_the_state_is_coloured_on_a_terminal(moto_server_backend: Backend, name: str) -> None:
    fail(moto_server_backend, name, POLICY.failure_threshold)

    shown = _run_in_terminal([*moto_server_backend.options, "status", name], {"NO_COLOR": ""})

    assert f"\x1b[31m{State.OPEN.value}\x1b[0m" in shown


def test_no_color_turns_colour_off_on_a_terminal(moto_server_backend: Backend, name: str) -> None:
    fail(moto_server_backend, name, POLICY.failure_threshold)

    shown = _run_in_terminal([*moto_server_backend.options, "status", name], {"NO_COLOR": "1"})

    assert "\x1b[" not in shown
    assert "open" in shown


def test_a_stack_with_an_iam_cache_user_signs_in_as_that_user(
    moto_server: str, refused_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a stack whose outputs name the cache, its name and its IAM-authenticated user
    from fleetbreaker.cli import build_parser, open_store
    from fleetbreaker.stores.elasticache_iam import ElastiCacheIAMAuth

    table = f"fleetbreaker-stack-{uuid.uuid4().hex[:8]}"
    stack = stack_with_table(
        moto_server,
        table,
        cache_endpoint=f"127.0.0.1:{refused_port}",
        cache_user=("fleetbreaker-1a2b3c4d", "fleetbreaker-1a2b3c4d"),
    )
    monkeypatch.setenv("AWS_ENDPOINT_URL_CLOUDFORMATION", moto_server)

    # WHEN the CLI opens the store the stack names
    args = build_parser().parse_args(["--stack", stack, "--region", "us-east-1", "list"])
    store, described = open_store(args)

    # THEN it signs in to the cache as that user, with tokens for that cache and region
    kwargs = store.client.connection_pool.connection_kwargs  # type: ignore[attr-defined]
    auth = kwargs["credential_provider"]
    assert isinstance(auth, ElastiCacheIAMAuth)
    assert (auth.user_id, auth.cache_name, auth.region) == (
        "fleetbreaker-1a2b3c4d",
        "fleetbreaker-1a2b3c4d",
        "us-east-1",
    )
    assert described == "Redis (IAM user 'fleetbreaker-1a2b3c4d')"
