"""The CLI's fork server (tests/cli/forked.py), which runs most CLI tests' commands: each
command answers as the installed console script answers it, in an environment of its own."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from devtools import servers
from tests.cli import forked
from tests.cli.conftest import run_cli, run_forked

# No region anywhere, no store named by the environment.
BARE = {
    "CIRCUIT_BREAKER_TABLE": "",
    "CIRCUIT_BREAKER_REDIS_URL": "",
    "AWS_REGION": "",
    "AWS_DEFAULT_REGION": "",
    "AWS_CONFIG_FILE": "/nonexistent",
}


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["status", "--help"],
        ["--table", "CircuitBreakers", "explode"],
        ["--table", "T", "list"],
        ["list"],
    ],
)
def test_a_forked_command_answers_as_the_console_script(args: list[str]) -> None:
    assert run_forked(args, BARE) == run_cli(args, BARE)


def test_an_unreachable_store_answers_as_the_console_script(refused_port: int) -> None:
    args = ["--table", "CircuitBreakers", "--endpoint-url", f"http://127.0.0.1:{refused_port}"]
    env = {**BARE, "AWS_DEFAULT_REGION": "us-east-1"}
    forked, script = run_forked([*args, "list"], env), run_cli([*args, "list"], env)
    assert forked == script
    assert forked.code == 3


def test_each_command_has_the_environment_it_was_given_and_no_other() -> None:
    # GIVEN a command that finds its store in the environment (a region and a table)
    named = run_forked(["list"], {**BARE, "CIRCUIT_BREAKER_TABLE": "T", "AWS_REGION": "x"})
    # THEN it used them (a region is all it lacked before; now the endpoint is what fails)
    assert "no store" not in named.err
    # AND the next command, given none, does not see them
    bare = run_forked(["list"], BARE)
    assert bare.code == 2
    assert "no store: pass --table, --redis-url or --stack" in bare.err


def test_a_command_past_its_timeout_is_killed(moto_server: str) -> None:
    # GIVEN `watch` of a breaker, which runs until interrupted
    table = servers.make_table(moto_server)
    options = ["--table", table, "--endpoint-url", moto_server]
    env = {"AWS_ENDPOINT_URL_STS": moto_server}
    assert run_forked([*options, "open", "watched", "--create"], env).code == 0
    args = [*options, "watch", "watched"]
    # THEN it is stopped at its timeout, as subprocess.run stops the console script
    with pytest.raises(subprocess.TimeoutExpired):
        forked.run(args, {**os.environ, **env}, timeout=2.0)
    # AND killed: the server is left running no command (killed, the kernel reaps it)
    deadline = time.monotonic() + 10
    while forked.commands_running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert forked.commands_running() == []
    # AND the server still runs the next command
    assert run_forked(["--help"], BARE).code == 0
