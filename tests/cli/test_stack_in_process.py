"""`--stack NAME` with cli.main in-process: the stack's outputs name the table, on moto's
CloudFormation and DynamoDB in-process (tests/cli/test_cli_process.py runs the console script
against moto's server, and the cache's outputs)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from fleetbreaker import DynamoDBStore
from tests.cli.conftest import POLICY, Backend, fail, one_line_error, run_in_process


@pytest.fixture
def aws() -> Iterator[None]:
    from moto import mock_aws

    with mock_aws():
        yield


def stack_with_table(table: str) -> str:
    stack = f"fleetbreaker-cli-{uuid.uuid4().hex[:8]}"
    template: dict[str, Any] = {
        "Resources": {
            "Table": {
                "Type": "AWS::DynamoDB::Table",
                "Properties": {
                    "TableName": table,
                    "AttributeDefinitions": [{"AttributeName": "name", "AttributeType": "S"}],
                    "KeySchema": [{"AttributeName": "name", "KeyType": "HASH"}],
                    "BillingMode": "PAY_PER_REQUEST",
                },
            }
        },
        # The output name template.yaml gives the table.
        "Outputs": {"CircuitBreakersTableName": {"Value": {"Ref": "Table"}}},
    }
    boto3.client("cloudformation").create_stack(StackName=stack, TemplateBody=json.dumps(template))
    return stack


def test_a_stack_s_output_names_the_table_the_cli_reads(aws: None) -> None:
    # GIVEN a stack whose CircuitBreakersTableName output names a table holding an open breaker
    table = f"fleetbreaker-stack-{uuid.uuid4().hex[:8]}"
    stack = stack_with_table(table)
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
