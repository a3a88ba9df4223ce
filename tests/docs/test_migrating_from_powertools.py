"""docs/migrating-from-powertools.md: its before (Powertools) and after (fleetbreaker) handler
run as written and behave alike through one outage."""

from __future__ import annotations

from typing import Any

import pytest

from devtools.servers import REPO_ROOT
from tests.docs.blocks import blocks
from tests.docs.conftest import run_block

GUIDE = REPO_ROOT / "docs" / "migrating-from-powertools.md"
BEFORE, AFTER = blocks(GUIDE, "python")


def test_the_guide_has_one_before_and_one_after_block() -> None:
    assert "aws_lambda_powertools" in BEFORE.code
    assert "fleetbreaker" in AFTER.code
    assert "aws_lambda_powertools" not in AFTER.code


@pytest.mark.parametrize(("block", "open_body"), [(BEFORE, "OPEN"), (AFTER, "open")])
@pytest.mark.usefixtures("doc_world")
def test_the_handler_opens_after_five_timeouts_and_answers_503(block: Any, open_body: str) -> None:
    # GIVEN the guide's handler, run as written
    handler = run_block(block)["lambda_handler"]
    from myapp import inventory

    # WHEN the inventory answers, THEN the handler returns its answer
    assert handler({"sku": "A-1"}, None) == {"statusCode": 200, "body": "reserved A-1"}

    # WHEN it times out five times in a row, THEN each timeout reaches the caller
    inventory.failure = TimeoutError("inventory timed out")
    for _ in range(5):
        with pytest.raises(TimeoutError):
            handler({"sku": "A-1"}, None)
    calls = inventory.calls

    # AND the next call is answered by the fallback without calling the inventory
    assert handler({"sku": "A-1"}, None) == {
        "statusCode": 503,
        "body": f"inventory-api is {open_body}",
    }
    assert inventory.calls == calls


@pytest.mark.usefixtures("doc_world")
def test_the_after_handler_counts_only_the_handled_exceptions() -> None:
    # GIVEN the fleetbreaker handler, configured with Powertools' handled_exceptions
    handler = run_block(AFTER)["lambda_handler"]
    from myapp import inventory

    # WHEN the inventory raises something outside (TimeoutError, ConnectionError) six times
    inventory.failure = KeyError("no such sku")
    for _ in range(6):
        with pytest.raises(KeyError):
            handler({"sku": "A-1"}, None)

    # THEN none counted: the breaker is still closed and calls the inventory
    inventory.failure = None
    assert handler({"sku": "A-1"}, None)["statusCode"] == 200


@pytest.mark.usefixtures("doc_world")
def test_powertools_swallows_a_failed_trip_write_and_the_trip_is_lost(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the guide's Powertools handler, run as written, whose table then goes away (the
    # guide says 3.37's _safe_persist logs and swallows a failed save_open)
    import logging

    import boto3

    handler = run_block(BEFORE)["lambda_handler"]
    from myapp import inventory

    assert handler({"sku": "A-1"}, None)["statusCode"] == 200
    boto3.client("dynamodb", region_name="us-east-1").delete_table(TableName="CircuitBreakerState")

    # WHEN the inventory times out five times, the threshold
    inventory.failure = TimeoutError("inventory timed out")
    # (heard on Powertools' own logger: another test of the process may have stopped it
    # propagating, or disabled it by configuring logging)
    powertools_log = logging.getLogger("aws_lambda_powertools.utilities.circuit_breaker.base")
    monkeypatch.setattr(powertools_log, "disabled", False)
    powertools_log.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger=powertools_log.name):
            for _ in range(5):
                with pytest.raises(TimeoutError):  # the call's own error: no persistence error
                    handler({"sku": "A-1"}, None)
    finally:
        powertools_log.removeHandler(caplog.handler)

    # THEN the failed write was logged, not raised, and the trip is lost: the next call
    # reaches the inventory instead of the fallback
    assert "persistence write (save_open) failed" in caplog.text
    inventory.failure = None
    calls = inventory.calls
    assert handler({"sku": "A-1"}, None)["statusCode"] == 200
    assert inventory.calls == calls + 1


def test_the_guide_names_the_module_its_powertools_facts_come_from() -> None:
    import aws_lambda_powertools.utilities.circuit_breaker.base as powertools_base
    from aws_lambda_powertools.shared.version import VERSION

    text = GUIDE.read_text()
    assert f"aws-lambda-powertools {VERSION}" in text
    assert "aws_lambda_powertools/utilities/circuit_breaker/base.py" in text
    assert callable(powertools_base.CircuitBreakerHandler._safe_persist)
    assert "raises `CircuitBreakerPersistenceError` into the call" not in text
