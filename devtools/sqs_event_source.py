"""What Lambda's SQS event source mapping does around a handler, against a real (moto) queue.

Lambda receives a batch, invokes the function with an ``aws:sqs`` event built from the
received messages, then deletes the messages the function did not report in
``batchItemFailures`` (``ReportBatchItemFailures``); the reported ones come back after their
visibility timeout and, past the queue's ``maxReceiveCount``, move to its dead-letter queue.
:class:`SqsEventSource` does the same with a boto3 client, so a consumer's handler is tested on
messages a queue really holds and really redelivers. Expiring the visibility timeout is
explicit (:meth:`SqsEventSource.expire_visibility`): tests never wait for time to pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


def sqs_record(message: dict[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    """One received message as the record Lambda puts in an ``aws:sqs`` event."""
    attributes = {
        name: {
            "stringValue": value.get("StringValue"),
            "binaryValue": value.get("BinaryValue"),
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": value["DataType"],
        }
        for name, value in message.get("MessageAttributes", {}).items()
    }
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": message.get("Attributes", {}),
        "messageAttributes": attributes,
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


@dataclass
class BatchResult:
    """One poll: the event sent, the handler's answer, what was deleted and what failed."""

    event: dict[str, Any]
    response: dict[str, Any]
    deleted: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


class SqsEventSource:
    """An SQS event source mapping for one queue, driven by hand."""

    def __init__(self, client: Any, queue_url: str, *, batch_size: int = 10) -> None:
        self.client = client
        self.queue_url = queue_url
        self.batch_size = batch_size
        self.queue_arn: str = client.get_queue_attributes(
            QueueUrl=queue_url, AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
        self.region: str = client.meta.region_name
        self._in_flight: dict[str, str] = {}  # message id -> receipt handle

    def poll(self, handler: Handler, context: Any) -> BatchResult | None:
        """Receive one batch, invoke ``handler`` and settle the batch; None when empty."""
        answer = self.client.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch_size,
            MessageAttributeNames=["All"],
            AttributeNames=["All"],
        )
        messages = answer.get("Messages", [])
        if not messages:
            return None
        event = {"Records": [sqs_record(m, self.queue_arn, self.region) for m in messages]}
        response = handler(event, context)
        failed = {item["itemIdentifier"] for item in response.get("batchItemFailures", [])}
        result = BatchResult(event, response)
        for message in messages:
            if message["MessageId"] in failed:
                result.failed.append(message["MessageId"])
                self._in_flight[message["MessageId"]] = message["ReceiptHandle"]
            else:
                self.client.delete_message(
                    QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )
                result.deleted.append(message["MessageId"])
        return result

    def expire_visibility(self) -> None:
        """Make the failed messages visible again now, as their visibility timeout would."""
        for handle in self._in_flight.values():
            try:
                self.client.change_message_visibility(
                    QueueUrl=self.queue_url, ReceiptHandle=handle, VisibilityTimeout=0
                )
            except ClientError as error:
                # A loaded machine can let the queue's own visibility timeout run out first:
                # another poll then received the message again and settled it, and the old
                # handle names nothing (ReceiptHandleIsInvalid). Nothing is left to expire.
                if error.response.get("Error", {}).get("Code") != "ReceiptHandleIsInvalid":
                    raise
        self._in_flight.clear()

    def messages_left(self) -> int:
        """Messages the queue still holds, visible or in flight."""
        attributes = self.client.get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(
            attributes["ApproximateNumberOfMessagesNotVisible"]
        )
