"""Ctrl-C is never success: every command exits 130 with one line saying what may be left half
done, and how to finish it.

The console script runs as a process against a store that holds its answer (a proxy in front
of moto's server that holds one DynamoDB operation, or a server that never answers), and gets a
real SIGINT while it waits. cli.main runs in this process too: on a MemoryStore whose call
gets a real SIGINT, and against the holding proxy.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devtools import servers
from devtools.servers import BlackholeServer, HoldingProxy
from fleetbreaker import DynamoDBStore, MemoryStore, State
from fleetbreaker.breaker import system_clock
from fleetbreaker.cli import commands
from fleetbreaker.stores.dynamodb import TTL_ATTRIBUTE
from tests.cli.conftest import (
    CLI,
    CLI_TIMEOUT_S,
    POLICY,
    Result,
    one_line_error,
    run_cli,
    run_in_process,
)
from tests.support import ctrl_c_when, wait_for

NOTHING_CHANGED = "fleetbreaker: interrupted; nothing was changed"


def interrupted_cli(args: list[str], ready: Callable[[], bool], env: dict[str, str]) -> Result:
    """Run the console script; send it SIGINT (Ctrl-C) once ``ready()`` holds."""
    process = subprocess.Popen(
        [str(CLI), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    try:
        wait_for(lambda: ready() or process.poll() is not None, "the command reaching the store")
        assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return Result(process.returncode, out, err)


@pytest.fixture
def table(moto_server: str) -> str:
    return servers.make_table(moto_server)


@pytest.fixture
def name() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def hold_writes(moto_server: str) -> Iterator[HoldingProxy]:
    """moto's server behind a proxy that holds every UpdateItem (the breaker's writes)."""
    with HoldingProxy(moto_server, hold=["UpdateItem"]) as proxy:
        yield proxy


def record_a_failure(moto_server: str, table: str, name: str) -> None:
    store = DynamoDBStore(table, boto3_client=servers.dynamodb_client(moto_server))
    now = system_clock()
    store.record_failure(name, POLICY, now, store.load(name, now))


def state_of(moto_server: str, table: str, name: str) -> State | None:
    store = DynamoDBStore(table, boto3_client=servers.dynamodb_client(moto_server))
    record = store.load(name, system_clock())
    return None if record is None else record.state


# -- the console script, a real SIGINT while the store holds its answer ----------------------


def test_ctrl_c_while_a_new_table_waits_for_active_exits_130_and_a_rerun_finishes_it(
    moto_server: str,
) -> None:
    # GIVEN create-table against a DynamoDB that takes CreateTable and holds DescribeTable
    table = f"breakers-{uuid.uuid4().hex[:10]}"
    with HoldingProxy(moto_server, hold=["DescribeTable"]) as proxy:
        # WHEN Ctrl-C comes while it waits for the table to be ACTIVE
        args = ["create-table", table, "--endpoint-url", proxy.endpoint_url]
        result = interrupted_cli(args, lambda: proxy.held > 0, {})

    # THEN exit 130 and one line: what may be half done, and how to finish it
    assert result.code == 130
    assert one_line_error(result) == (
        f"fleetbreaker: interrupted while table {table!r} was being created: it may exist "
        f"without its TTL; run `fleetbreaker create-table {table}` again (same options) to finish"
    )
    assert result.out == ""
    # AND the table is indeed there without its TTL
    client = servers.dynamodb_client(moto_server)
    ttl = client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    assert ttl["TimeToLiveStatus"] == "DISABLED"

    # WHEN the command runs again, as the line says
    again = run_cli(["create-table", table, "--endpoint-url", moto_server])

    # THEN it finishes the table: its TTL is on, and it says so
    assert again.code == 0, again.err
    assert again.out.startswith(f"finished table {table!r} (turned its TTL on): key name (S)")
    ttl = client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", TTL_ATTRIBUTE)


# (command, extra arguments, what the interrupted write was, the state a rerun leaves)
WRITES = [
    ("open", [], "was being forced open: it may or may not be", State.FORCED_OPEN),
    ("disable", [], "was being disabled: it may or may not be", State.DISABLED),
    ("reset", [], "was being reset: it may or may not be", State.CLOSED),
]


@pytest.mark.parametrize(("command", "extra", "half_done", "after"), WRITES)
def test_ctrl_c_while_the_store_holds_an_override_exits_130_saying_to_run_it_again(
    moto_server: str,
    hold_writes: HoldingProxy,
    table: str,
    name: str,
    command: str,
    extra: list[str],
    half_done: str,
    after: State,
) -> None:
    # GIVEN a breaker with a failure, and the command's write held by the store
    record_a_failure(moto_server, table, name)
    options = ["--table", table, "--endpoint-url", hold_writes.endpoint_url]

    # WHEN Ctrl-C comes while the command waits for the store's answer
    result = interrupted_cli([*options, command, name, *extra], lambda: hold_writes.held > 0, {})

    # THEN exit 130, and the line says the write may or may not be done and what to run
    assert result.code == 130
    assert one_line_error(result) == (
        f"fleetbreaker: interrupted while breaker {name!r} {half_done}; run "
        f"`fleetbreaker {command} {name}` again to be sure"
    )

    # AND running it again, as the line says, does it
    again = run_cli(["--table", table, "--endpoint-url", moto_server, command, name])
    assert again.code == 0, again.err
    assert state_of(moto_server, table, name) is after


def test_ctrl_c_while_the_store_holds_a_tune_exits_130_saying_to_run_it_again(
    moto_server: str, hold_writes: HoldingProxy, table: str, name: str
) -> None:
    options = ["--table", table, "--endpoint-url", hold_writes.endpoint_url]

    result = interrupted_cli(
        [*options, "tune", name, "--failure-threshold", "9"], lambda: hold_writes.held > 0, {}
    )

    assert result.code == 130
    assert one_line_error(result) == (
        f"fleetbreaker: interrupted while breaker {name!r}'s live settings were being "
        "stored: they may or may not be; run the same tune again to be sure (it merges them again)"
    )


def test_ctrl_c_while_redis_holds_an_override_exits_130(
    blackhole: BlackholeServer, name: str, sts_env: dict[str, str]
) -> None:
    # GIVEN a Redis that takes the connection and never answers
    args = ["--redis-url", blackhole.redis_url, "open", name, "--create"]

    result = interrupted_cli(args, lambda: blackhole.accepted > 0, sts_env)

    assert result.code == 130
    assert one_line_error(result).startswith(
        f"fleetbreaker: interrupted while breaker {name!r} was being forced open"
    )


@pytest.mark.parametrize("command", [["list"], ["status", "payment-api"], ["watch", "x"]])
def test_ctrl_c_during_a_read_exits_130_saying_nothing_changed(
    blackhole: BlackholeServer, command: list[str]
) -> None:
    # GIVEN a DynamoDB that never answers, WHEN Ctrl-C comes while the command reads
    args = ["--table", "CircuitBreakers", "--endpoint-url", blackhole.endpoint_url, *command]
    result = interrupted_cli(args, lambda: blackhole.accepted > 0, {})

    # THEN exit 130: never 0, and nothing to finish
    assert result.code == 130
    assert one_line_error(result) == NOTHING_CHANGED


# -- cli.main in this process ------------------------------------------------------------------


class CtrlCStore(MemoryStore):
    """A MemoryStore whose every call gets a real SIGINT after it has done its work."""

    def _interrupted(self, result: Any) -> Any:
        signal.raise_signal(signal.SIGINT)
        return result

    def load(self, name: str, now_ms: int) -> Any:
        return self._interrupted(super().load(name, now_ms))

    def force_state(self, *args: Any, **kwargs: Any) -> Any:
        return self._interrupted(super().force_state(*args, **kwargs))

    def tune(self, *args: Any, **kwargs: Any) -> Any:
        return self._interrupted(super().tune(*args, **kwargs))

    def list_records(self, now_ms: int) -> Any:
        return self._interrupted(list(super().list_records(now_ms)))


@pytest.fixture
def ctrl_c_store(monkeypatch: pytest.MonkeyPatch) -> CtrlCStore:
    store = CtrlCStore()
    monkeypatch.setattr(commands, "open_store", lambda args: (store, "table 'T'"))
    monkeypatch.setattr(commands, "caller_identity", lambda args: "tester")
    return store


@pytest.mark.parametrize(
    ("command", "line"),
    [
        (["list"], NOTHING_CHANGED),
        (["status", "b"], NOTHING_CHANGED),
        (["watch", "b"], NOTHING_CHANGED),
        (
            ["open", "b", "--create"],
            "fleetbreaker: interrupted while breaker 'b' was being forced open: it may or may "
            "not be; run `fleetbreaker open b --create` again to be sure",
        ),
        (
            ["disable", "b", "--create"],
            "fleetbreaker: interrupted while breaker 'b' was being disabled: it may or may "
            "not be; run `fleetbreaker disable b --create` again to be sure",
        ),
        (
            ["tune", "b", "--mode", "shadow"],
            "fleetbreaker: interrupted while breaker 'b''s live settings were being stored: "
            "they may or may not be; run the same tune again to be sure (it merges them again)",
        ),
    ],
)
def test_in_process_ctrl_c_in_a_store_call_exits_130_with_its_line(
    ctrl_c_store: CtrlCStore, command: list[str], line: str
) -> None:
    result = run_in_process(["--table", "T", *command])

    assert result.code == 130
    assert one_line_error(result) == line


def test_in_process_ctrl_c_in_reset_s_first_read_changed_nothing(
    ctrl_c_store: CtrlCStore,
) -> None:
    # GIVEN a breaker, WHEN Ctrl-C comes during reset's read (before its write)
    MemoryStore.force_state(ctrl_c_store, "b", POLICY, system_clock(), State.FORCED_OPEN)
    result = run_in_process(["--table", "T", "reset", "b"])

    # THEN nothing was changed, and the line says so
    assert result.code == 130
    assert one_line_error(result) == NOTHING_CHANGED
    assert MemoryStore.load(ctrl_c_store, "b", system_clock()).state is State.FORCED_OPEN


def test_in_process_ctrl_c_after_the_write_says_it_is_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a store whose write answers, and whose read back gets Ctrl-C
    class ReadInterrupted(MemoryStore):
        def load(self, name: str, now_ms: int) -> Any:
            signal.raise_signal(signal.SIGINT)
            return super().load(name, now_ms)

    store = ReadInterrupted()
    monkeypatch.setattr(commands, "open_store", lambda args: (store, "table 'T'"))
    monkeypatch.setattr(commands, "caller_identity", lambda args: "tester")

    result = run_in_process(["--table", "T", "open", "b", "--create"])

    # THEN exit 130, saying the override is in place and how to see it
    assert result.code == 130
    assert one_line_error(result) == (
        "fleetbreaker: interrupted after breaker 'b' was forced open (that is done): "
        "`fleetbreaker status b` shows it"
    )
    assert MemoryStore.load(store, "b", system_clock()).state is State.FORCED_OPEN


def test_in_process_ctrl_c_while_a_table_waits_for_active(moto_server: str) -> None:
    table = f"breakers-{uuid.uuid4().hex[:10]}"
    with HoldingProxy(moto_server, hold=["DescribeTable"]) as proxy:
        args = ["create-table", table, "--endpoint-url", proxy.endpoint_url]
        with ctrl_c_when(lambda: proxy.held > 0):
            result = run_in_process(args)

    assert result.code == 130
    assert one_line_error(result).startswith(
        f"fleetbreaker: interrupted while table {table!r} was being created"
    )
