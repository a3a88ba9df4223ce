"""template.yaml's storage-first resources (OpenCircuitMode=defer) and the code they describe.

The deferred-payments consumer's wiring is checked against the consumer's own code and
Powertools' defaults, so the template and the function cannot drift apart silently.
"""

from __future__ import annotations

from typing import Any

import pytest

from devtools.servers import REPO_ROOT
from tests.sam.test_template import load_template
from tests.support import function_reads

FUNCTIONS = REPO_ROOT / "functions"


@pytest.fixture(scope="module")
def resources() -> dict[str, Any]:
    resources: dict[str, Any] = load_template()["Resources"]
    return resources


def test_the_consumer_reports_partial_failures_and_batches(resources: dict[str, Any]) -> None:
    # GIVEN the consumer's event source mapping
    mapping = resources["DeferredPaymentsMapping"]["Properties"]
    # THEN it reads the deferred-payments queue, reports failed records one by one, waits
    # for a batch, and bounds how many consumers charge at once
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": ["DeferredPaymentsQueue", "Arn"]}
    assert mapping["FunctionName"] == {"Ref": "DeferredPaymentsFunction"}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["MaximumBatchingWindowInSeconds"] > 0
    assert mapping["ScalingConfig"]["MaximumConcurrency"] >= 2


def test_a_message_that_keeps_failing_is_kept_in_a_dead_letter_queue(
    resources: dict[str, Any],
) -> None:
    # GIVEN the deferred-payments queue and the consumer
    queue = resources["DeferredPaymentsQueue"]["Properties"]
    timeout = resources["DeferredPaymentsFunction"]["Properties"]["Timeout"]
    # THEN failing messages move to a retained dead-letter queue after a bounded number of
    # receives, and a batch in progress is not handed to a second consumer
    redrive = queue["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == {
        "Fn::GetAtt": ["DeferredPaymentsDeadLetterQueue", "Arn"]
    }
    assert 3 <= redrive["maxReceiveCount"] <= 20
    assert resources["DeferredPaymentsDeadLetterQueue"]["DeletionPolicy"] == "Retain"
    assert queue["VisibilityTimeout"] >= 6 * timeout


def test_the_idempotency_table_is_the_one_powertools_expects() -> None:
    # GIVEN Powertools' DynamoDB persistence layer with its defaults (what the consumer uses)
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

    layer = DynamoDBPersistenceLayer(table_name="unused")
    table = load_template()["Resources"]["DeferredPaymentsIdempotencyTable"]["Properties"]
    # THEN the table's key and TTL attribute are the layer's
    assert table["KeySchema"] == [{"AttributeName": layer.key_attr, "KeyType": "HASH"}]
    assert table["TimeToLiveSpecification"] == {
        "AttributeName": layer.expiry_attr,
        "Enabled": True,
    }


def test_every_consumer_variable_is_read_by_the_consumer(resources: dict[str, Any]) -> None:
    # GIVEN the consumer's source: its app.py and the charging module it shares with the API
    source = (FUNCTIONS / "deferred_payments" / "app.py").read_text()
    source += (FUNCTIONS / "shared" / "charging.py").read_text()
    variables = resources["DeferredPaymentsFunction"]["Properties"]["Environment"]["Variables"]
    # THEN every variable the template sets is read, and the breaker is the API's breaker
    for name in variables:
        assert function_reads(source, name), name
    api = resources["PaymentFunction"]["Properties"]["Environment"]["Variables"]
    for name in ("CIRCUIT_BREAKER_TABLE", "BREAKER_NAME", "PAYMENT_API_URL"):
        assert variables[name] == api[name], name
