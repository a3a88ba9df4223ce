"""`--stack NAME` with cli.main in-process: the stack's outputs name the table, on moto's
CloudFormation and DynamoDB in-process (tests/cli/test_cli_process.py runs the console script
against moto's server, and the cache's outputs)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import boto3
import pytest

from fleetbreaker import DynamoDBStore
from tests.cli.conftest import (
    POLICY,
    Backend,
    fail,
    one_line_error,
    run_in_process,
    stack_with_table,
)


@pytest.fixture
def aws() -> Iterator[None]:
    from moto import mock_aws

    with mock_aws():
        yield


def test_a_stack_s_output_names_the_table_the_cli_reads(aws: None) -> None:
    # GIVEN a stack whose CircuitBreakersTableName output names a table holding an open breaker
    table = f"fleetbreaker-stack-{uuid.uuid4().hex[:8]}"
    stack = stack_with_table(None, table)
    store = DynamoDBStore(table, boto3_client=boto3.client("dynamodb"))
    fail(Backend("in_process", [], store), "payment-api", POLICY.failure_threshold)

    # WHEN the operator names the stack instead of the table
    result = run_in_process(["--stack", stack, "status", "payment-api", "--json"])

    # THEN the CLI finds the breaker in that table
    assert result.code == 0, result.err
    assert json.loads(result.out)["state"] == "open"


def test_an_unknown_stack_exits_2_naming_it(aws: None) -> None:
    result = run_in_process(["--stack", "no-such-stack", "list"])

    assert result.code == 2
    assert "stack 'no-such-stack' not found" in one_line_error(result)
