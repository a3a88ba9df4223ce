"""`fleetbreaker create-table NAME`: the template's table in one command, from both sides.

The request is compared with template.yaml's CircuitBreakersTable property by property; the
command runs as a process (forked from the CLI's server, tests/cli/forked.py; the documented
command line and the refused setups run the console script itself) against moto's server
(TTL and SSE are read back with DescribeTimeToLive and DescribeTable) and against dynalite,
which creates tables in CREATING first but has neither TTL nor SSE: there the command must
wait for ACTIVE, then fail in one line naming what the endpoint lacks.
"""

from __future__ import annotations

import json
import re
import shlex
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from devtools import servers
from devtools.servers import REPO_ROOT
from fleetbreaker import BreakerConfig, DynamoDBStore
from fleetbreaker.breaker import system_clock
from fleetbreaker.policy import Policy
from fleetbreaker.record import State
from fleetbreaker.stores.dynamodb import TTL_ATTRIBUTE
from fleetbreaker.stores.dynamodb_table import create_request, differences, ttl_request
from tests.cli.conftest import one_line_error, run_cli, run_forked, run_in_process

# Every property of the template's table is compared below, except this one: point-in-time
# recovery is a stack parameter (a backup choice), which the command leaves to the table's owner.
NOT_COMPARED = {"PointInTimeRecoverySpecification"}


@pytest.fixture(scope="module")
def template_table() -> dict[str, Any]:
    from samcli.yamlhelper import yaml_parse

    template = yaml_parse((REPO_ROOT / "template.yaml").read_text())
    properties: dict[str, Any] = template["Resources"]["CircuitBreakersTable"]["Properties"]
    return properties


@pytest.fixture
def table() -> str:
    return f"breakers-{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=["moto_server", "in_process"])
def endpoint(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """moto's server for the console script; None: moto in-process, for cli.main in-process."""
    if request.param == "moto_server":
        yield request.getfixturevalue("moto_server")
        return
    from moto import mock_aws

    with mock_aws():
        yield None


def create_table(endpoint: str | None, *args: str) -> Any:
    if endpoint is None:
        return run_in_process(["create-table", *args])
    return run_forked(["create-table", *args, "--endpoint-url", endpoint])


def dynamodb(endpoint: str | None) -> Any:
    return boto3.client("dynamodb") if endpoint is None else servers.dynamodb_client(endpoint)


# -- the request is the template's table --------------------------------------------------------


def test_the_request_declares_what_the_template_declares(template_table: dict[str, Any]) -> None:
    # GIVEN what the command would send for a table with a stream
    request = create_request("CircuitBreakers", stream=True)
    ttl = ttl_request("CircuitBreakers")["TimeToLiveSpecification"]
    # THEN each of the template's properties says the same (CloudFormation's names for SSE
    # and streams differ from the API's: mapped here)
    compared = {
        "BillingMode": request["BillingMode"],
        "AttributeDefinitions": request["AttributeDefinitions"],
        "KeySchema": request["KeySchema"],
        "TimeToLiveSpecification": ttl,
        "SSESpecification": {"SSEEnabled": request["SSESpecification"]["Enabled"]},
        "StreamSpecification": {"StreamViewType": request["StreamSpecification"]["StreamViewType"]},
    }
    assert {key: template_table[key] for key in compared} == compared
    # AND no property of the template's table is left out unseen
    assert set(template_table) == set(compared) | NOT_COMPARED
    assert request["SSESpecification"] == {"Enabled": True}  # AWS managed key, no key named


def test_without_stream_the_request_has_none() -> None:
    assert "StreamSpecification" not in create_request("CircuitBreakers")


# -- moto's server -------------------------------------------------------------------------


def test_create_table_makes_the_templates_table(endpoint: str | None, table: str) -> None:
    # WHEN create-table runs for a new name
    result = create_table(endpoint, table)
    # THEN it exits 0 and says what it made
    assert result.code == 0, result.err
    assert result.out == (
        f"created table {table!r}: key name (S), on-demand, TTL on expires_at, "
        "encrypted with KMS (AWS managed key)\n"
    )
    # AND the table has the template's shape, read back from the server
    client = dynamodb(endpoint)
    described = client.describe_table(TableName=table)["Table"]
    ttl = client.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": TTL_ATTRIBUTE}
    assert described["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert described["KeySchema"] == [{"AttributeName": "name", "KeyType": "HASH"}]
    assert (described["SSEDescription"]["Status"], described["SSEDescription"]["SSEType"]) == (
        "ENABLED",
        "KMS",
    )
    assert "StreamSpecification" not in described
    assert differences(described, ttl) == []


def test_stream_adds_new_and_old_images(endpoint: str | None, table: str) -> None:
    result = create_table(endpoint, table, "--stream")

    assert result.code == 0, result.err
    described = dynamodb(endpoint).describe_table(TableName=table)["Table"]
    assert described["StreamSpecification"] == {
        "StreamEnabled": True,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }


def test_a_second_run_finds_the_table_and_exits_0(endpoint: str | None, table: str) -> None:
    # GIVEN a table the command made
    assert create_table(endpoint, table, "--stream").code == 0
    # WHEN it runs again, as text and as JSON
    text = create_table(endpoint, table, "--stream")
    assert text.code == 0, text.err
    assert text.out.startswith(f"table {table!r} exists with that shape: key name (S)")
    result = create_table(endpoint, table, "--stream", "--json")
    # THEN the table is found with that shape, unchanged
    assert result.code == 0, result.err
    assert json.loads(result.out) == {
        "table": table,
        "created": False,
        "finished": False,
        "differences": [],
    }


def test_a_breaker_runs_on_the_table_it_made(endpoint: str | None, table: str) -> None:
    # GIVEN a table from create-table
    assert create_table(endpoint, table).code == 0
    store = DynamoDBStore(table, boto3_client=dynamodb(endpoint))
    policy = Policy.from_config(BreakerConfig(failure_threshold=1))
    # WHEN a failure is counted THEN the breaker opens there, with its TTL attribute set
    now = system_clock()
    outcome = store.record_failure("payment-api", policy, now, None)
    assert outcome.record is not None
    assert outcome.record.state is State.OPEN
    item = dynamodb(endpoint).get_item(TableName=table, Key={"name": {"S": "payment-api"}})["Item"]
    assert int(item[TTL_ATTRIBUTE]["N"]) > now // 1000


def test_a_table_without_ttl_or_encryption_exits_1_naming_both(
    moto_server: str,
) -> None:
    # GIVEN a table with the right key and billing, made without TTL or SSE
    table = servers.make_table(moto_server)
    # WHEN create-table is pointed at it
    result = create_table(moto_server, table)
    # THEN it exits 1 with the differences in one line, and changes nothing
    assert result.code == 1
    line = one_line_error(result)
    assert f"TTL is disabled; want it on {TTL_ATTRIBUTE}" in line
    assert "encryption at rest uses the AWS owned key; want KMS" in line
    ttl = servers.dynamodb_client(moto_server).describe_time_to_live(TableName=table)
    assert ttl["TimeToLiveDescription"]["TimeToLiveStatus"] == "DISABLED"


def test_a_powertools_table_exits_1_naming_key_and_billing(
    endpoint: str | None, table: str
) -> None:
    # GIVEN a table keyed on `id` with provisioned capacity (Powertools' default table)
    client = dynamodb(endpoint)
    client.create_table(
        TableName=table,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        ProvisionedThroughput={"ReadCapacityUnits": 1, "WriteCapacityUnits": 1},
    )
    # WHEN create-table is pointed at it, as JSON
    result = create_table(endpoint, table, "--json")
    # THEN exit 1, and the differences are listed one by one
    assert result.code == 1
    found = json.loads(result.out)["differences"]
    assert "key is id (S, HASH); want name (S, HASH) only" in found
    assert "billing mode is PROVISIONED; want PAY_PER_REQUEST (on-demand)" in found


def test_stream_is_a_difference_only_when_asked_for(endpoint: str | None, table: str) -> None:
    # GIVEN a table made without a stream
    assert create_table(endpoint, table).code == 0
    # WHEN it is checked with --stream THEN the missing stream is the difference
    result = create_table(endpoint, table, "--stream")
    assert result.code == 1
    assert "stream is off; want NEW_AND_OLD_IMAGES" in one_line_error(result)


@pytest.mark.parametrize("bad", ["ab", "has space", "x" * 256])
def test_a_name_dynamodb_refuses_exits_2(endpoint: str | None, bad: str) -> None:
    result = create_table(endpoint, bad)

    assert result.code == 2
    assert "table name must be 3 to 255" in one_line_error(result)


def test_without_a_region_exits_2(moto_server: str, table: str) -> None:
    env = {"AWS_DEFAULT_REGION": "", "AWS_REGION": "", "AWS_CONFIG_FILE": "/dev/null"}

    result = run_forked(["create-table", table, "--endpoint-url", moto_server], env)

    assert result.code == 2
    assert "no AWS region" in one_line_error(result)


def test_region_option_is_used(moto_server: str, table: str) -> None:
    env = {"AWS_DEFAULT_REGION": "", "AWS_REGION": "", "AWS_CONFIG_FILE": "/dev/null"}

    result = run_forked(
        ["create-table", table, "--endpoint-url", moto_server, "--region", "eu-west-1"], env
    )

    assert result.code == 0, result.err
    # moto keeps a table per region: it is found in eu-west-1, and only there
    client = boto3.client("dynamodb", endpoint_url=moto_server, region_name="eu-west-1")
    assert client.describe_table(TableName=table)["Table"]["TableStatus"] == "ACTIVE"
    elsewhere = servers.dynamodb_client(moto_server)  # us-east-1
    assert table not in elsewhere.list_tables()["TableNames"]


def test_the_documented_command_prints_what_the_docs_show(moto_server: str) -> None:
    # GIVEN the transcript docs/operations.md shows ("$ command" then its output)
    text = (REPO_ROOT / "docs" / "operations.md").read_text()
    command, shown = re.search(r"^\$ (fleetbreaker create-table .*)\n(.*)$", text, re.M).groups()
    # WHEN the command runs as shown (its DynamoDB on moto, as AWS_ENDPOINT_URL_DYNAMODB says)
    result = run_cli(shlex.split(command)[1:], {"AWS_ENDPOINT_URL_DYNAMODB": moto_server})
    # THEN it exits 0 and prints that output
    assert result.code == 0, result.err
    assert result.out == shown + "\n"


# -- dynalite: waits for ACTIVE, then names what it lacks ------------------------------------------


def test_dynalite_table_is_created_and_the_missing_ttl_api_named(
    dynalite_server: str, table: str
) -> None:
    # WHEN create-table runs against dynalite (tables start CREATING; no TTL API)
    result = create_table(dynalite_server, table)
    # THEN it exits 3 in one line naming the operation the endpoint does not know
    assert result.code == 3
    assert "UnknownOperationException" in one_line_error(result)
    # AND the table it waited for is ACTIVE with the key and billing asked for
    described = servers.dynamodb_client(dynalite_server).describe_table(TableName=table)["Table"]
    assert described["TableStatus"] == "ACTIVE"
    assert described["KeySchema"] == [{"AttributeName": "name", "KeyType": "HASH"}]
    assert described["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"


# -- in-process, what the console script's tests above check in a child process -------------

NO_REGION = {"AWS_DEFAULT_REGION": "", "AWS_REGION": "", "AWS_CONFIG_FILE": "/dev/null"}


def test_in_process_without_a_region_exits_2_saying_how_to_give_one(table: str) -> None:
    result = run_in_process(["create-table", table], NO_REGION)

    assert result.code == 2
    assert one_line_error(result) == (
        "fleetbreaker: error: no AWS region: pass --region or set AWS_REGION (or "
        "AWS_DEFAULT_REGION)"
    )


def test_in_process_the_region_option_is_the_table_s_region(table: str) -> None:
    from moto import mock_aws

    with mock_aws():
        # GIVEN no region in the environment, and --region eu-west-1
        result = run_in_process(["create-table", table, "--region", "eu-west-1"], NO_REGION)

        # THEN the table is made there
        assert result.code == 0, result.err
        client = boto3.client("dynamodb", region_name="eu-west-1")
        assert table in client.list_tables()["TableNames"]


def test_in_process_an_unreachable_endpoint_exits_3_naming_the_table_and_the_endpoint(
    table: str,
) -> None:
    from moto import mock_aws

    with mock_aws():
        # GIVEN an endpoint nothing listens on (moto in-process would answer any other)
        result = run_in_process(["create-table", table, "--endpoint-url", "http://127.0.0.1:9"])

    assert result.code == 3
    assert one_line_error(result) == (
        f"fleetbreaker: error: cannot create table {table!r}: Could not connect to the"
        ' endpoint URL: "http://127.0.0.1:9/"'
    )


def test_in_process_a_table_made_with_a_stream_says_so(table: str) -> None:
    from moto import mock_aws

    with mock_aws():
        result = run_in_process(["create-table", table, "--stream"])

    assert result.code == 0, result.err
    assert result.out == (
        f"created table {table!r}: key name (S), on-demand, TTL on expires_at, encrypted with"
        " KMS (AWS managed key), stream NEW_AND_OLD_IMAGES\n"
    )


def test_in_process_the_json_answer_has_its_keys_sorted(table: str) -> None:
    from moto import mock_aws

    with mock_aws():
        result = run_in_process(["create-table", table, "--json"])

    assert result.out == (
        f'{{"created": true, "differences": [], "finished": false, "table": "{table}"}}\n'
    )


def test_in_process_each_difference_is_named_in_the_one_line(table: str) -> None:
    from moto import mock_aws

    with mock_aws():
        # GIVEN Powertools' default table: keyed on `id`, provisioned
        boto3.client("dynamodb").create_table(
            TableName=table,
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            ProvisionedThroughput={"ReadCapacityUnits": 1, "WriteCapacityUnits": 1},
        )

        result = run_in_process(["create-table", table])

    # THEN exit 1, the differences separated by "; " after what the table is not
    assert result.code == 1
    line = one_line_error(result)
    prefix = (
        f"fleetbreaker: error: table {table!r} exists but is not a breaker table as"
        " template.yaml declares it: "
    )
    assert line.startswith(prefix)
    assert "key is id (S, HASH); want name (S, HASH) only; billing mode is PROVISIONED" in line


# -- the endpoint and the region are checked as every command checks them ---------------------

BAD_SETUP = [
    (["--endpoint-url", "localhost:8000"], "include the scheme, e.g. http://localhost:8000"),
    (["--endpoint-url", "http://"], "is not an http(s) URL"),
    (["--region", "us east 1"], "cannot set up the DynamoDB client"),
    (["--region", "eu-west-1/../x"], "cannot set up the DynamoDB client"),
    (["--region", ""], "no AWS region: pass --region"),
]
COMMANDS = [
    ["create-table", "CircuitBreakers"],
    ["--table", "T", "list"],
    ["--table", "T", "status", "x"],
]


@pytest.mark.parametrize(("options", "problem"), BAD_SETUP)
def test_create_table_refuses_a_bad_endpoint_or_region_as_list_and_status_do(
    options: list[str], problem: str
) -> None:
    # GIVEN the same mistaken endpoint or region given to create-table, list and status
    results = [run_in_process([*command, *options], NO_REGION) for command in COMMANDS]

    # THEN each exits 2 (a usage error, not "store unreachable") with the same line
    lines = {one_line_error(result) for result in results}
    assert [result.code for result in results] == [2, 2, 2]
    assert len(lines) == 1, lines
    assert problem in lines.pop()


@pytest.mark.parametrize(("options", "problem"), BAD_SETUP[::2])
def test_the_console_script_refuses_them_too(options: list[str], problem: str) -> None:
    result = run_cli(["create-table", "CircuitBreakers", *options], NO_REGION)

    assert result.code == 2
    assert problem in one_line_error(result)
