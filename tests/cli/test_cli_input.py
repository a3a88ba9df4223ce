"""What the CLI is given before it reaches a store: an AWS profile, an endpoint, a region and
credentials. A mistake in any is a usage error (exit 2) naming the option or the variable
that carried it, never "store unreachable" (exit 3, which scripts retry)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cli.conftest import one_line_error, run_forked, run_in_process

# An AWS with no profile files, no instance metadata and no keys but those a test gives.
NO_AWS_FILES = {
    "AWS_CONFIG_FILE": "/nonexistent",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_ENDPOINT_URL": "",
    "AWS_ENDPOINT_URL_DYNAMODB": "",
}
NO_CREDENTIALS = {
    **NO_AWS_FILES,
    "AWS_ACCESS_KEY_ID": "",
    "AWS_SECRET_ACCESS_KEY": "",
    "AWS_SESSION_TOKEN": "",
}


@pytest.fixture(autouse=True)
def no_profile_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """No profile named by the environment, unless a test names one, and no container
    credentials (set at all, even empty, botocore asks the container for them)."""
    for variable in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ):
        monkeypatch.delenv(variable, raising=False)


# -- profiles ---------------------------------------------------------------------------------


def test_an_unknown_profile_from_the_environment_is_named_with_its_variable() -> None:
    # GIVEN AWS_PROFILE naming a profile no file has
    env = {**NO_AWS_FILES, "AWS_PROFILE": "no-such-profile"}

    # WHEN a command needs AWS
    result = run_in_process(["--table", "T", "--region", "us-east-1", "list"], env)

    # THEN it is a usage error naming the profile and the variable, not 'None'
    assert result.code == 2
    error = one_line_error(result)
    assert "AWS profile 'no-such-profile' not found" in error
    assert error.endswith("change AWS_PROFILE")
    assert "None" not in error


def test_an_unknown_profile_given_as_an_option_is_named_with_the_option() -> None:
    result = run_in_process(
        ["--profile", "nope", "--table", "T", "--region", "us-east-1", "list"], NO_AWS_FILES
    )

    assert result.code == 2
    assert one_line_error(result).endswith("change --profile")


def test_an_unknown_profile_is_refused_before_a_stack_is_read() -> None:
    env = {**NO_AWS_FILES, "AWS_PROFILE": "no-such-profile"}

    result = run_in_process(["--stack", "fleetbreaker", "--region", "us-east-1", "list"], env)

    assert result.code == 2
    assert "AWS profile 'no-such-profile' not found" in one_line_error(result)


# -- endpoints --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "endpoint",
    ["http://[::1", "http://localhost:abc", "http://localhost:99999", "http://:8000"],
)
def test_a_malformed_endpoint_option_is_a_usage_error_naming_it(endpoint: str) -> None:
    # WHEN the endpoint cannot be a URL botocore uses (a broken IPv6 host, a port that is not
    # a number or out of range, no host)
    result = run_in_process(
        ["--table", "T", "--region", "us-east-1", "--endpoint-url", endpoint, "list"]
    )

    # THEN exit 2 (not 3: nothing is unreachable), naming the option and the value
    assert result.code == 2
    error = one_line_error(result)
    assert error.startswith(f"fleetbreaker: error: --endpoint-url {endpoint!r} ")
    assert "ValueError" not in error


@pytest.mark.parametrize("variable", ["AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL"])
def test_a_malformed_endpoint_variable_is_a_usage_error_naming_it(variable: str) -> None:
    env = {**NO_AWS_FILES, variable: "http://[::1"}

    result = run_in_process(["--table", "T", "--region", "us-east-1", "list"], env)

    assert result.code == 2
    assert one_line_error(result).startswith(f"fleetbreaker: error: {variable} 'http://[::1' ")


def test_an_empty_profile_variable_is_named_as_botocore_reads_it() -> None:
    # GIVEN AWS_PROFILE set, but empty: botocore looks for a profile named ""
    env = {**NO_AWS_FILES, "AWS_PROFILE": ""}

    result = run_in_process(["--table", "T", "--region", "us-east-1", "list"], env)

    assert result.code == 2
    assert one_line_error(result).endswith(
        "not found in the AWS config and credentials files "
        "(AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE): "
        "change AWS_PROFILE"
    )


def test_a_malformed_endpoint_is_refused_by_create_table_too() -> None:
    result = run_in_process(
        ["create-table", "T-table", "--region", "us-east-1", "--endpoint-url", "http://h:port"]
    )

    assert result.code == 2
    assert "--endpoint-url 'http://h:port' is not a valid URL" in one_line_error(result)


# -- regions ----------------------------------------------------------------------------------


@pytest.fixture
def table_in_us_west_2() -> Iterator[str]:
    """A breaker table in us-west-2 only, on moto in-process."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-west-2")
        client.create_table(
            TableName="west",
            KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield "west"


def test_aws_region_alone_is_the_region(table_in_us_west_2: str) -> None:
    # GIVEN only AWS_REGION exported (the SDK itself reads AWS_DEFAULT_REGION only)
    env = {"AWS_REGION": "us-west-2", "AWS_DEFAULT_REGION": "", "AWS_CONFIG_FILE": "/nonexistent"}

    # WHEN the CLI lists the table there
    result = run_in_process(["--table", table_in_us_west_2, "list"], env)

    # THEN it found the table in that region
    assert result.code == 0, result.err
    assert f"no breakers in table {table_in_us_west_2!r}" in result.out


def test_aws_region_wins_over_aws_default_region(table_in_us_west_2: str) -> None:
    # GIVEN both variables, as Lambda and the AWS CLI read them: AWS_REGION first
    env = {"AWS_REGION": "us-west-2", "AWS_DEFAULT_REGION": "us-east-1"}

    result = run_in_process(["--table", table_in_us_west_2, "list"], env)

    assert result.code == 0, result.err


def test_the_region_option_wins_over_aws_region(table_in_us_west_2: str) -> None:
    env = {"AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1"}

    result = run_in_process(["--table", table_in_us_west_2, "--region", "us-west-2", "list"], env)

    assert result.code == 0, result.err


# -- credentials ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [["list"], ["status", "payment-api"], ["open", "payment-api", "--create"], ["doctor"]],
)
def test_no_credentials_is_a_usage_error_saying_so(refused_port: int, command: list[str]) -> None:
    # GIVEN a local DynamoDB named, and no AWS credentials anywhere
    options = ["--table", "T", "--region", "us-east-1"]
    options += ["--endpoint-url", f"http://127.0.0.1:{refused_port}"]

    # WHEN a command runs
    result = run_in_process([*options, *command], NO_CREDENTIALS)

    # THEN it exits 2 saying what is missing and how to give it (dummy keys do locally)
    assert result.code == 2
    error = one_line_error(result)
    assert error.startswith("fleetbreaker: error: no AWS credentials: set AWS_ACCESS_KEY_ID")
    assert "e.g. testing" in error


def test_no_credentials_is_said_before_a_stack_is_read() -> None:
    result = run_in_process(
        ["--stack", "fleetbreaker", "--region", "us-east-1", "list"], NO_CREDENTIALS
    )

    assert result.code == 2
    assert "no AWS credentials" in one_line_error(result)


def test_no_credentials_is_said_by_create_table() -> None:
    result = run_in_process(["create-table", "T-table", "--region", "us-east-1"], NO_CREDENTIALS)

    assert result.code == 2
    assert "no AWS credentials" in one_line_error(result)


def test_the_console_script_says_so_too(refused_port: int) -> None:
    # GIVEN the command as a process of its own, as an operator runs it
    local = ["--table", "T", "--region", "us-east-1"]
    local += ["--endpoint-url", f"http://127.0.0.1:{refused_port}", "list"]

    # WHEN it has no credentials, an unknown profile, or a malformed endpoint
    runs = [
        run_forked(local, NO_CREDENTIALS),
        run_forked(local, {**NO_AWS_FILES, "AWS_PROFILE": "no-such-profile"}),
        run_forked(["--endpoint-url", "http://[::1", *local[:4], "list"], NO_AWS_FILES),
    ]

    # THEN each exits 2 in one line saying which
    assert [run.code for run in runs] == [2, 2, 2]
    assert "no AWS credentials" in one_line_error(runs[0])
    assert "AWS profile 'no-such-profile' not found" in one_line_error(runs[1])
    assert "--endpoint-url 'http://[::1' is not a valid URL" in one_line_error(runs[2])
