"""devtools.sqs_event_source: a failed message that another poll settled meanwhile."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from devtools.sqs_event_source import SqsEventSource


@pytest.fixture
def sqs() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("sqs", region_name="us-east-1")


def failing_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"]]}


def test_expiring_a_failed_message_another_poll_settled_meanwhile_is_no_error(sqs: Any) -> None:
    # GIVEN a message whose batch failed, and that another poll then received (its visibility
    # timeout ran out on a loaded machine) and deleted
    queue_url = sqs.create_queue(QueueName="deferred")["QueueUrl"]
    sqs.send_message(QueueUrl=queue_url, MessageBody="payment")
    source = SqsEventSource(sqs, queue_url)
    result = source.poll(failing_handler, None)
    assert result is not None
    assert len(result.failed) == 1
    handle = result.event["Records"][0]["receiptHandle"]
    sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=handle, VisibilityTimeout=0)
    (again,) = sqs.receive_message(QueueUrl=queue_url)["Messages"]
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=again["ReceiptHandle"])

    # WHEN the first source makes its failed messages visible again
    source.expire_visibility()

    # THEN it does not fail on the stale handle, and nothing is left on the queue
    assert source.messages_left() == 0


def test_expiring_a_failed_message_makes_it_visible_again(sqs: Any) -> None:
    # GIVEN a message whose batch failed
    queue_url = sqs.create_queue(QueueName="deferred")["QueueUrl"]
    sqs.send_message(QueueUrl=queue_url, MessageBody="payment")
    source = SqsEventSource(sqs, queue_url)
    source.poll(failing_handler, None)

    # WHEN its visibility is expired THEN the next poll receives it again
    source.expire_visibility()
    assert len(sqs.receive_message(QueueUrl=queue_url).get("Messages", [])) == 1


def test_another_refusal_to_expire_a_message_still_raises(sqs: Any) -> None:
    # GIVEN a failed message whose queue is then deleted
    queue_url = sqs.create_queue(QueueName="gone")["QueueUrl"]
    sqs.send_message(QueueUrl=queue_url, MessageBody="payment")
    source = SqsEventSource(sqs, queue_url)
    source.poll(failing_handler, None)
    sqs.delete_queue(QueueUrl=queue_url)

    # WHEN its visibility is expired THEN the error is not taken for a settled message
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        source.expire_visibility()
