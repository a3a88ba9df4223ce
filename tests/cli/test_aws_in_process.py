"""Where the CLI meets AWS, in-process (moto in-process where AWS must answer): an endpoint
or a region missing is a usage error saying what to pass, the caller's identity comes from
STS when there is one and is the local user otherwise, and a stack's outputs name the cache
(as rediss://, with its IAM user) or the table."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from fleetbreaker import tuning
from fleetbreaker.cli import build_parser, store_environ
from fleetbreaker.cli.aws import aws_error, caller_identity
from fleetbreaker.stores import IAM_CACHE_ENV, IAM_USER_ENV, TABLE_ENV, URL_ENV
from tests.cli.conftest import MOTO_ARN, one_line_error, run_in_process, stack_with_table

NO_REGION = {"AWS_DEFAULT_REGION": "", "AWS_REGION": "", "AWS_CONFIG_FILE": "/dev/null"}
NO_STS = {"AWS_ENDPOINT_URL_STS": "", "AWS_ENDPOINT_URL": ""}


@pytest.fixture
def aws() -> Iterator[None]:
    from moto import mock_aws

    with mock_aws():
        yield


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args([*argv, "list"])


def test_an_endpoint_without_a_scheme_is_a_usage_error_showing_one() -> None:
    result = run_in_process(["--table", "T", "--endpoint-url", "localhost:8000", "list"])

    assert result.code == 2
    assert one_line_error(result) == (
        "fleetbreaker: error: --endpoint-url 'localhost:8000' is not an http(s) URL: include"
        " the scheme, e.g. http://localhost:8000"
    )


def test_no_region_is_a_usage_error_saying_how_to_give_one() -> None:
    result = run_in_process(["--table", "T", "list"], NO_REGION)

    assert result.code == 2
    assert one_line_error(result) == (
        "fleetbreaker: error: no AWS region: pass --region or set AWS_REGION"
        " (or AWS_DEFAULT_REGION)"
    )


def test_a_local_dynamodb_without_sts_records_the_local_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for variable in NO_STS:
        monkeypatch.delenv(variable, raising=False)

    who = caller_identity(parse("--table", "T", "--endpoint-url", "http://localhost:8000"))

    assert who == tuning.local_user()


def test_the_caller_is_who_sts_says(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in NO_STS:
        monkeypatch.delenv(variable, raising=False)

    assert caller_identity(parse("--table", "T")) == MOTO_ARN


def test_an_sts_that_does_not_answer_leaves_the_local_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN an STS endpoint nothing listens on
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9")

    who = caller_identity(parse("--table", "T"))

    assert who == tuning.local_user()


def test_a_stack_s_cache_is_reached_over_tls_as_its_iam_user(aws: None) -> None:
    # GIVEN a stack whose outputs name a table, a cache and the cache's IAM user
    stack = stack_with_table(None, "breakers", "cache.example:6379", ("user-1", "cache-1"))

    env = store_environ(parse("--stack", stack), {})

    # THEN the cache wins, over TLS, signed in as its user
    assert (env[URL_ENV], env[IAM_USER_ENV], env[IAM_CACHE_ENV]) == (
        "rediss://cache.example:6379",
        "user-1",
        "cache-1",
    )
    assert TABLE_ENV not in env


def test_a_stack_without_a_store_output_is_a_usage_error_naming_both(aws: None) -> None:
    import json

    import boto3

    boto3.client("cloudformation").create_stack(
        StackName="empty",
        TemplateBody=json.dumps({"Resources": {"Q": {"Type": "AWS::SQS::Queue"}}}),
    )

    result = run_in_process(["--stack", "empty", "list"])

    assert result.code == 2
    assert one_line_error(result) == (
        "fleetbreaker: error: stack 'empty' has neither CircuitBreakersTableName nor"
        " BreakerCacheEndpoint"
    )


def test_an_aws_refusal_is_exit_3_with_its_code_and_message() -> None:
    from botocore.exceptions import ClientError

    refusal = ClientError(
        {"Error": {"Code": "AccessDeniedException", "Message": "not allowed"}}, "DescribeStacks"
    )

    error = aws_error(refusal, "cannot describe stack 'fleetbreaker'")

    assert (error.code, str(error)) == (
        3,
        "cannot describe stack 'fleetbreaker': AccessDeniedException: not allowed",
    )


def test_any_other_failure_is_exit_3_named_by_its_class() -> None:
    error = aws_error(ValueError("bad endpoint"), "cannot create table 't'")

    assert (error.code, str(error)) == (3, "cannot create table 't': ValueError: bad endpoint")


def test_the_table_is_read_at_the_endpoint_given(aws: None) -> None:
    # GIVEN an https endpoint nothing listens on (moto in-process answers any other)
    result = run_in_process(
        ["--table", "Tab", "--endpoint-url", "https://127.0.0.1:9", "status", "x"]
    )

    # THEN the CLI tried there: unreachable (3), not a usage error or moto's answer
    assert result.code == 3
    assert one_line_error(result) == (
        "fleetbreaker: error: DynamoDB unreachable for table 'Tab': Could not connect to the"
        ' endpoint URL: "https://127.0.0.1:9/"'
    )


def test_an_endpoint_with_a_scheme_but_no_host_is_a_usage_error() -> None:
    result = run_in_process(["--table", "T", "--endpoint-url", "ftp://h", "list"])

    assert result.code == 2
    assert "--endpoint-url 'ftp://h' is not an http(s) URL" in one_line_error(result)


def test_an_endpoint_the_client_refuses_is_a_usage_error_quoting_why() -> None:
    result = run_in_process(["--table", "T", "--endpoint-url", "http://exa mple:80", "list"])

    assert result.code == 2
    assert one_line_error(result) == (
        "fleetbreaker: error: cannot set up the DynamoDB client: Invalid endpoint:"
        " http://exa mple:80"
    )


def test_no_store_named_is_a_usage_error_listing_the_ways_to_name_one() -> None:
    result = run_in_process(
        ["list"], {"CIRCUIT_BREAKER_TABLE": "", "CIRCUIT_BREAKER_REDIS_URL": ""}
    )

    assert result.code == 2
    assert one_line_error(result) == (
        "fleetbreaker: error: no store: pass --table, --redis-url or --stack, or set"
        " CIRCUIT_BREAKER_TABLE or CIRCUIT_BREAKER_REDIS_URL"
    )


def test_the_region_option_is_the_table_s_region(aws: None) -> None:
    import boto3

    # GIVEN a table in eu-west-1 only, and no region in the environment
    boto3.client("dynamodb", region_name="eu-west-1").create_table(
        TableName="Tab",
        KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )

    result = run_in_process(["--table", "Tab", "--region", "eu-west-1", "list"], NO_REGION)

    # THEN the CLI reads it there
    assert (result.code, result.out) == (0, "no breakers in table 'Tab'\n")


def test_a_stack_without_a_region_is_a_usage_error_saying_how_to_give_one() -> None:
    result = run_in_process(["--stack", "fleetbreaker", "list"], NO_REGION)

    assert result.code == 2
    assert one_line_error(result) == (
        "fleetbreaker: error: no AWS region: pass --region or set AWS_REGION"
        " (or AWS_DEFAULT_REGION)"
    )
