"""What an operator meets at the console: `tune` merging into the live settings, an open
breaker whose window is over shown as due its probe, `--output` and `--profile`.

Run on every store the CLI supports (the `backend` fixture): moto's server, dynalite and
redis-server in processes of their own (tests/cli/forked.py), moto in-process and a
MemoryStore through ``cli.main``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import boto3
import pytest

from fleetbreaker import MemoryStore, RedisStore, State
from fleetbreaker.breaker import system_clock
from fleetbreaker.cli.commands import tune_merged
from fleetbreaker.tuning import Action, decode_tuned, encode_tuned
from tests.cli import forked
from tests.cli.conftest import (
    CLI_TIMEOUT_S,
    POLICY,
    Backend,
    Result,
    Running,
    load,
    one_line_error,
    run_forked,
)

# -- tune merges -------------------------------------------------------------------------------


def test_a_tune_keeps_the_live_settings_it_does_not_name(backend: Backend, name: str) -> None:
    # GIVEN a breaker switched to shadow mode
    assert backend.run("tune", name, "--mode", "shadow").code == 0

    # WHEN the operator then sets the failure rate alone
    result = backend.run("tune", name, "--failure-rate-threshold", "0.5", "--output", "jsonl")

    # THEN the record keeps shadow mode beside the new rate, and status says so
    assert result.code == 0, result.err
    assert decode_tuned(load(backend, name).tuned) == {
        "failure_rate_threshold": 0.5,
        "mode": "shadow",
    }
    (shown,) = result.json_lines()
    assert (shown["mode"], shown["tuned"]["failure_rate_threshold"]) == ("shadow", 0.5)


def test_a_running_shadow_breaker_stays_shadow_after_a_threshold_tune(
    backend: Backend, name: str, running: Running
) -> None:
    # GIVEN a running fleet tuned to shadow mode, then to a threshold of one failure
    assert backend.run("tune", name, "--mode", "shadow").code == 0
    assert backend.run("tune", name, "--failure-threshold", "1").code == 0
    running.wait_cache_ttl()

    # WHEN one call fails: the breaker trips on its one failure
    running.dependency.failing = True
    assert running.next_call_reaches_the_dependency()
    assert running.breaker.state is State.OPEN

    # THEN the next call still runs: the fleet is still in shadow mode
    assert running.breaker.mode == "shadow"
    assert running.next_call_reaches_the_dependency()


def test_replace_drops_the_live_settings_it_does_not_name(
    backend: Backend, name: str, running: Running
) -> None:
    # GIVEN a fleet in shadow mode
    assert backend.run("tune", name, "--mode", "shadow").code == 0

    # WHEN a tune replaces the settings with a threshold of one failure
    assert backend.run("tune", name, "--failure-threshold", "1", "--replace").code == 0
    running.wait_cache_ttl()

    # THEN the mode went back to the deployed one (enforce): once tripped, it rejects
    assert decode_tuned(load(backend, name).tuned) == {"failure_threshold": 1}
    running.dependency.failing = True
    assert running.next_call_reaches_the_dependency()
    assert running.breaker.mode == "enforce"
    assert not running.next_call_reaches_the_dependency()


def test_a_stored_setting_this_version_cannot_use_refuses_the_merge(
    backend: Backend, name: str
) -> None:
    # GIVEN a record carrying a setting another version of the package stored
    stored = encode_tuned({"future_setting": 3})
    backend.store.tune(name, POLICY, system_clock(), stored, None)

    # WHEN a tune merges into it THEN it is refused naming the setting, nothing is stored
    result = backend.run("tune", name, "--failure-threshold", "4")
    assert result.code == 2
    assert "future_setting is not tunable" in one_line_error(result)
    assert "--replace" in one_line_error(result)
    assert load(backend, name).tuned == stored

    # AND --replace drops it
    assert backend.run("tune", name, "--failure-threshold", "4", "--replace").code == 0
    assert decode_tuned(load(backend, name).tuned) == {"failure_threshold": 4}


def test_replace_with_clear_is_refused(backend: Backend, name: str) -> None:
    result = backend.run("tune", name, "--replace", "--clear")

    assert result.code == 2
    assert "--replace" in one_line_error(result)


class RacedStore(MemoryStore):
    """A store on which another operator's tune lands between this one's read and write."""

    def __init__(self, rival: dict[str, float | int | str]) -> None:
        super().__init__()
        self.rival: dict[str, float | int | str] | None = rival

    def tune(self, name, policy, now_ms, tuned, action, *, expected=None):  # type: ignore[no-untyped-def]
        if self.rival is not None:
            rival, self.rival = self.rival, None
            merged = {**decode_tuned(expected or ""), **rival}
            super().tune(name, policy, now_ms, encode_tuned(merged), None, expected=expected)
        return super().tune(name, policy, now_ms, tuned, action, expected=expected)


def test_a_tune_racing_another_keeps_both() -> None:
    # GIVEN a store where another operator's tune (mode shadow) lands between this tune's
    # read of the settings and its write
    store = RacedStore({"mode": "shadow"})
    action = Action("tune", "alice", None, system_clock())

    # WHEN this tune sets the threshold
    tune_merged(store, "payment-api", {"failure_threshold": 2}, action)

    # THEN its fenced write was refused once and merged again: both settings are there
    record = store.load("payment-api", action.at)
    assert record is not None
    assert decode_tuned(record.tuned) == {"failure_threshold": 2, "mode": "shadow"}


# -- an open breaker whose window is over --------------------------------------------------


def open_a_minute_ago(backend: Backend, name: str) -> None:
    """Trip the breaker a minute ago: its 30 s open window ended half a minute ago."""
    store = backend.store
    if backend.kind == "redis":  # the backend's store decides on the server's clock
        store = RedisStore(url=backend.options[1], use_server_time=False)
    then = system_clock() - 60_000
    for _ in range(POLICY.failure_threshold):
        store.record_failure(name, POLICY, then, store.load(name, then))


def test_status_shows_an_open_breaker_past_its_window_as_due_its_probe(
    backend: Backend, name: str
) -> None:
    open_a_minute_ago(backend, name)

    result = backend.run("status", name)

    assert result.code == 0, result.err
    assert re.search(r"^state +half-open: next call probes$", result.out, re.M), result.out
    assert re.search(r"^retry after +now$", result.out, re.M), result.out


def test_list_and_watch_show_it_so_too(backend: Backend, name: str) -> None:
    open_a_minute_ago(backend, name)

    listed = backend.run("list")
    watched = backend.run("watch", name, "--count", "1")

    assert listed.code == watched.code == 0, listed.err + watched.err
    (row,) = [line for line in listed.out.splitlines() if line.startswith(name)]
    assert "half-open: next call probes" in row
    assert re.search(r"^state +half-open: next call probes$", watched.out, re.M)


def test_json_keeps_the_stored_state_with_no_wait(backend: Backend, name: str) -> None:
    open_a_minute_ago(backend, name)

    (shown,) = backend.run("status", name, "--output", "jsonl").json_lines()

    assert (shown["state"], shown["retry_after"]) == ("open", 0.0)


def test_an_open_breaker_within_its_window_shows_its_wait(backend: Backend, name: str) -> None:
    now = system_clock()
    for _ in range(POLICY.failure_threshold):
        backend.store.record_failure(name, POLICY, now, backend.store.load(name, now))

    result = backend.run("status", name)

    assert re.search(r"^state +open$", result.out, re.M), result.out
    assert re.search(r"^retry after +\d+\.\ds$", result.out, re.M), result.out


# -- --output ----------------------------------------------------------------------------------


def test_output_json_prints_list_as_one_array(backend: Backend, name: str) -> None:
    backend.store.tune(f"{name}-a", POLICY, system_clock(), "", None)
    backend.store.tune(f"{name}-b", POLICY, system_clock(), "", None)

    result = backend.run("list", "--output", "json")

    assert result.code == 0, result.err
    listed = json.loads(result.out)
    assert isinstance(listed, list)
    assert {f"{name}-a", f"{name}-b"} <= {entry["name"] for entry in listed}


def test_output_json_prints_status_as_one_object(backend: Backend, name: str) -> None:
    backend.store.tune(name, POLICY, system_clock(), "", None)

    result = backend.run("status", name, "--output", "json")

    assert json.loads(result.out)["name"] == name


def test_output_jsonl_prints_one_object_per_breaker_and_line(backend: Backend, name: str) -> None:
    backend.store.tune(f"{name}-a", POLICY, system_clock(), "", None)
    backend.store.tune(f"{name}-b", POLICY, system_clock(), "", None)

    result = backend.run("list", "--output", "jsonl")

    names = [entry["name"] for entry in result.json_lines()]
    assert {f"{name}-a", f"{name}-b"} <= set(names)
    assert len(result.out.strip().splitlines()) == len(names)


def test_json_is_a_deprecated_alias_printing_the_same_lines(
    dynamodb_backend: Backend, name: str
) -> None:
    dynamodb_backend.store.tune(name, POLICY, system_clock(), "", None)

    old = dynamodb_backend.run("list", "--json")
    new = dynamodb_backend.run("list", "--output", "jsonl")

    assert old.code == 0, old.err
    assert [e["name"] for e in old.json_lines()] == [e["name"] for e in new.json_lines()]
    assert "--json is deprecated: use --output jsonl" in old.err
    assert new.err == ""


def test_json_with_another_output_is_refused(dynamodb_backend: Backend, name: str) -> None:
    result = dynamodb_backend.run("list", "--json", "--output", "text")

    assert result.code == 2
    assert "--output text" in one_line_error(result)


# -- --profile ---------------------------------------------------------------------------------


@pytest.fixture
def aws_config(tmp_path: Path) -> dict[str, str]:
    """An AWS config file with the profile "ops" in eu-west-1."""
    config = tmp_path / "config"
    config.write_text(
        "[profile ops]\nregion = eu-west-1\n"
        "aws_access_key_id = testing\naws_secret_access_key = testing\n"
    )
    return {"AWS_CONFIG_FILE": str(config)}


def run_without_region(args: list[str], env: dict[str, str]) -> Result:
    """The CLI in a process of its own (tests/cli/forked.py) with no region in the environment:
    AWS_DEFAULT_REGION would win over a profile's region (as it does for the AWS CLI: the
    environment before the config file)."""
    merged = {k: v for k, v in os.environ.items() if k not in ("AWS_REGION", "AWS_DEFAULT_REGION")}
    return Result(*forked.run(args, {**merged, **env}, CLI_TIMEOUT_S))


def test_profile_gives_the_region(moto_server: str, aws_config: dict[str, str]) -> None:
    # GIVEN a breaker table in eu-west-1 only
    table = "profile-region-table"
    client = boto3.client("dynamodb", endpoint_url=moto_server, region_name="eu-west-1")
    if table not in client.list_tables()["TableNames"]:
        client.create_table(
            TableName=table,
            AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
    options = ["--table", table, "--endpoint-url", moto_server, "list"]

    # WHEN the CLI lists it with the profile, and with the region of the tests' environment
    with_profile = run_without_region(["--profile", "ops", *options], aws_config)
    without = run_forked(options, aws_config)

    # THEN the profile's region finds it; us-east-1 has no such table
    assert with_profile.code == 0, with_profile.err
    assert f"no breakers in table {table!r}" in with_profile.out
    assert without.code == 3
    assert "does not exist in region us-east-1" in without.err


def test_an_unknown_profile_is_a_usage_error(moto_server: str, aws_config: dict[str, str]) -> None:
    result = run_forked(
        ["--profile", "nope", "--table", "T-table", "--endpoint-url", moto_server, "list"],
        aws_config,
    )

    assert result.code == 2
    assert "AWS profile 'nope' not found" in one_line_error(result)
