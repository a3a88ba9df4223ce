"""A store that accepts connections and never answers: what docs/operations.md promises.

The CLI calls the store directly, not through a breaker, so `store_deadline_seconds` does not
apply: its own clients bound the wait. DynamoDB gets two attempts of STORE_TIMEOUT_S each
(plus the SDK's back-off between them), Redis one. The attempts are counted as connections
the silent server accepted, so the test does not depend on how fast the machine is.
"""

from __future__ import annotations

import pytest

from devtools.servers import BlackholeServer
from fleetbreaker import cli


def connections(hole: BlackholeServer) -> int:
    return hole.accepted


# One command each: every command reaches the store through the same client, and each run
# waits the timeouts out for real (about 7 s and 3 s).
@pytest.mark.parametrize("command", [["status", "payment-api"]])
def test_a_silent_dynamodb_gets_two_attempts_then_exit_3(
    blackhole: BlackholeServer, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a DynamoDB endpoint that never answers
    options = ["--table", "CircuitBreakers", "--endpoint-url", blackhole.endpoint_url]

    # WHEN the CLI reads from it
    code = cli.main([*options, "--region", "us-east-1", *command])

    # THEN it gives up after two attempts, with exit 3 and one line naming the table
    assert code == cli.EXIT_UNREACHABLE
    assert connections(blackhole) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "CircuitBreakers" in err
    assert "Read timeout" in err


@pytest.mark.parametrize("command", [["list"]])
def test_a_silent_redis_gets_one_attempt_then_exit_3(
    blackhole: BlackholeServer, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a Redis that never answers, WHEN the CLI reads from it
    code = cli.main(["--redis-url", blackhole.redis_url, *command])

    # THEN it gives up after one attempt, with exit 3
    assert code == cli.EXIT_UNREACHABLE
    assert connections(blackhole) == 1
    assert "Timeout" in capsys.readouterr().err


def test_the_documented_timeout_is_the_clients() -> None:
    # docs/operations.md quotes these numbers
    config = cli.aws_config()
    assert config.read_timeout == config.connect_timeout == cli.STORE_TIMEOUT_S == 3.0
    assert config.retries["total_max_attempts"] == 2
