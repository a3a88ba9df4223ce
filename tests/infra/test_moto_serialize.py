"""moto's JSON answers built the quick way (devtools/moto_serialize.py) are the answers moto's
own walk builds: byte for byte, on DynamoDB's requests and on values the quick way leaves
to moto's walk."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from devtools import moto_serialize, servers

TABLE = "Serialized"

# Every kind of AttributeValue, nested too.
ITEM = {
    "name": {"S": "every-kind"},
    "n": {"N": "12.5"},
    "b": {"B": b"\x00\x01bytes"},
    "yes": {"BOOL": True},
    "no": {"BOOL": False},
    "nothing": {"NULL": True},
    "ss": {"SS": ["a", "b"]},
    "ns": {"NS": ["1", "2"]},
    "bs": {"BS": [b"x", b"y"]},
    "m": {"M": {"inner": {"N": "1"}, "deeper": {"M": {"s": {"S": "x"}}}}},
    "l": {"L": [{"S": "a"}, {"N": "2"}, {"L": [{"BOOL": False}]}, {"M": {}}]},
    **{f"slot{i}": {"N": str(i)} for i in range(40)},
}


def moto_walk() -> Any:
    from moto.core.serialize import JSONSerializer

    return JSONSerializer._serialize_type_structure.__wrapped__  # type: ignore[attr-defined]


@pytest.fixture
def both_walks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    """Every answer moto serializes meanwhile, built both ways: (quick, moto's own)."""
    from moto.core.serialize import JSONSerializer, ResponseSerializer

    moto_serialize.serialize_fast()  # as tests/conftest.py applies it (idempotent)
    quick = JSONSerializer._serialize_type_structure
    serialize = ResponseSerializer.serialize
    answers: list[tuple[Any, Any]] = []

    def built_twice(self: Any, result: Any) -> Any:
        first = serialize(self, result)
        monkeypatch.setattr(JSONSerializer, "_serialize_type_structure", moto_walk())
        try:
            self.path = [self.operation_name]
            second = serialize(self, result)
        finally:
            monkeypatch.setattr(JSONSerializer, "_serialize_type_structure", quick)
        # Copies: moto adds its own headers to the answer it sends afterwards.
        answers.append(
            ((first["status_code"], first["body"], {**first["headers"]}),
             (second["status_code"], second["body"], {**second["headers"]}))
        )  # fmt: skip
        return first

    monkeypatch.setattr(ResponseSerializer, "serialize", built_twice)
    return answers


@pytest.fixture
def client() -> Iterator[Any]:
    from moto import mock_aws

    with mock_aws():
        yield servers.dynamodb_client(None)


def test_dynamodb_answers_are_the_ones_motos_walk_builds(
    client: Any, both_walks: list[tuple[Any, Any]]
) -> None:
    # GIVEN moto in-process answering the requests the stores and the suite make, with every
    # kind of attribute value, table descriptions (timestamps, nested lists) and errors
    client.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.update_time_to_live(
        TableName=TABLE, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"}
    )
    client.describe_time_to_live(TableName=TABLE)
    client.describe_table(TableName=TABLE)
    client.list_tables()
    client.put_item(TableName=TABLE, Item=ITEM, ReturnConsumedCapacity="TOTAL")
    key = {"name": {"S": "every-kind"}}
    got = client.get_item(TableName=TABLE, Key=key, ConsistentRead=True)["Item"]
    client.get_item(TableName=TABLE, Key={"name": {"S": "absent"}})
    client.update_item(
        TableName=TABLE,
        Key=key,
        UpdateExpression="SET #n = #n + :one",
        ExpressionAttributeNames={"#n": "n"},
        ExpressionAttributeValues={":one": {"N": "1"}},
        ReturnValues="ALL_NEW",
    )
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        client.update_item(
            TableName=TABLE,
            Key=key,
            UpdateExpression="SET #n = :one",
            ConditionExpression="attribute_not_exists(#n)",
            ExpressionAttributeNames={"#n": "n"},
            ExpressionAttributeValues={":one": {"N": "1"}},
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    client.scan(TableName=TABLE)
    client.query(
        TableName=TABLE,
        KeyConditionExpression="#k = :k",
        ExpressionAttributeNames={"#k": "name"},
        ExpressionAttributeValues={":k": {"S": "every-kind"}},
    )
    client.batch_get_item(RequestItems={TABLE: {"Keys": [key]}})
    with pytest.raises(ClientError, match="TransactionCanceled"):
        client.transact_write_items(
            TransactItems=[
                {"ConditionCheck": {
                    "TableName": TABLE, "Key": key,
                    "ConditionExpression": "attribute_not_exists(#n)",
                    "ExpressionAttributeNames": {"#n": "n"},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }},
            ]
        )  # fmt: skip
    with pytest.raises(ClientError, match="ResourceNotFound"):
        client.describe_table(TableName="absent")
    client.delete_item(TableName=TABLE, Key=key, ReturnValues="ALL_OLD")

    # THEN the item came back whole, and every answer is the one moto's own walk builds
    assert got == ITEM
    assert len(both_walks) >= 13  # the 16 requests less the 3 errors (moto builds them apart)
    for quick, motos in both_walks:
        assert quick == motos


def test_values_the_quick_walk_leaves_to_moto_come_out_as_moto_builds_them() -> None:
    from moto.core.serialize import JSONSerializer, XFormedAttributePicker
    from moto.core.utils import get_service_model

    moto_serialize.serialize_fast()
    operation = get_service_model("dynamodb").operation_model("GetItem")

    class Item:  # an object, not a dict: its values are its attributes
        N = "3"

    results = [
        # members under another name only moto's search finds (snake_case, a shape's name)
        {"Item": {"a": {"n": "1"}, "b": {"list_attribute_value": [{"S": "x"}]}}},
        {"item": {"a": {"S": "x"}}},
        # a member set to None is left out; an empty map stays
        {"Item": {"a": {"S": None, "N": "1"}}, "ConsumedCapacity": None},
        {"Item": {}},
        {"Item": {"a": Item()}},
        {},
    ]
    for result in results:
        built = []
        for walk in (JSONSerializer._serialize_type_structure, moto_walk()):
            serializer = JSONSerializer(operation, value_picker=XFormedAttributePicker())
            serializer._serialize_type_structure = walk.__get__(serializer)  # type: ignore[method-assign]
            built.append(serializer.serialize(result)["body"])
        assert built[0] == built[1], result


def test_a_read_of_a_large_item_asks_the_picker_for_a_few_values(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.core.serialize import XFormedAttributePicker

    # GIVEN an item of 51 attributes, as a breaker's record has tens
    client.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.put_item(TableName=TABLE, Item=ITEM)
    asked = []
    pick = XFormedAttributePicker.__call__

    def counted(self: Any, context: Any) -> Any:
        asked.append(context.key)
        return pick(self, context)

    monkeypatch.setattr(XFormedAttributePicker, "__call__", counted)
    # WHEN it is read
    item = client.get_item(TableName=TABLE, Key={"name": {"S": "every-kind"}})["Item"]
    # THEN it came back whole, and moto searched no member of its attribute values (moto's
    # walk searches all ten members of each: over 500 searches)
    assert item == ITEM
    assert len(asked) < 10, len(asked)
