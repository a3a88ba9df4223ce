"""The CLI opens its store through the functions' factory: its options become an environment.

``store_environ`` puts ``--table`` / ``--redis-url`` in place of the process's store variables;
``open_store`` hands the result to ``StoreSettings``, the one reader of those variables, so an
operator's shell configured like a function (IAM login included) opens the same store.
"""

from __future__ import annotations

import argparse

import pytest

from fleetbreaker import DynamoDBStore, RedisStore
from fleetbreaker.cli import CliError, build_parser, open_store, store_environ
from fleetbreaker.stores.elasticache_iam import ElastiCacheIAMAuth

IAM = {
    "CIRCUIT_BREAKER_REDIS_IAM_USER": "fleetbreaker-1a2b3c4d",
    "CIRCUIT_BREAKER_REDIS_IAM_CACHE": "fleetbreaker-1a2b3c4d",
}


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args([*argv, "list"])


def test_a_table_option_replaces_the_environments_redis_url() -> None:
    # GIVEN a shell configured for Redis WHEN the operator passes --table
    env = store_environ(
        parse("--table", "Other"), {"CIRCUIT_BREAKER_REDIS_URL": "redis://cache:6379"}
    )
    # THEN the factory sees the table only
    assert env["CIRCUIT_BREAKER_TABLE"] == "Other"
    assert env["CIRCUIT_BREAKER_REDIS_URL"] == ""


def test_the_region_option_is_the_region_tokens_are_signed_for() -> None:
    env = store_environ(parse("--redis-url", "rediss://cache:6379", "--region", "eu-west-1"), {})
    assert env["AWS_REGION"] == "eu-west-1"


def test_a_redis_url_option_logs_in_as_the_environments_iam_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN the cache's IAM user in the shell, as the functions have it
    for name, value in IAM.items():
        monkeypatch.setenv(name, value)

    # WHEN the CLI opens the store --redis-url names
    store, described = open_store(
        parse("--redis-url", "rediss://cache:6379", "--region", "eu-west-1")
    )

    # THEN it logs in as that user, with the CLI's longer timeouts
    assert isinstance(store, RedisStore)
    kwargs = store.client.connection_pool.connection_kwargs  # type: ignore[attr-defined]
    auth = kwargs["credential_provider"]
    assert isinstance(auth, ElastiCacheIAMAuth)
    assert (auth.user_id, auth.region) == ("fleetbreaker-1a2b3c4d", "eu-west-1")
    assert kwargs["socket_timeout"] == 3.0
    assert described == "Redis (IAM user 'fleetbreaker-1a2b3c4d')"
    store.close()


def test_one_iam_variable_without_the_other_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CIRCUIT_BREAKER_REDIS_IAM_USER", "fleetbreaker-1a2b3c4d")
    monkeypatch.delenv("CIRCUIT_BREAKER_REDIS_IAM_CACHE", raising=False)
    with pytest.raises(CliError, match="CIRCUIT_BREAKER_REDIS_IAM_CACHE") as raised:
        open_store(parse("--redis-url", "rediss://cache:6379"))
    assert raised.value.code == 2


def test_a_table_option_opens_that_table_with_the_cli_client() -> None:
    store, described = open_store(
        parse("--table", "CircuitBreakers", "--endpoint-url", "http://127.0.0.1:1")
    )
    assert isinstance(store, DynamoDBStore)
    assert store.table_name == "CircuitBreakers"
    assert described == "table 'CircuitBreakers'"
