"""moto's UpdateExpression checks, made once per expression (devtools/moto_validation.py),
still refuse what DynamoDB refuses: in process (tests/conftest.py applies them) and on the
suite's moto server, which is started with them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from devtools import moto_validation, servers

# Twenty actions, as the store's writes have tens: moto checked every action list before.
MANY = ", ".join(f"#a{i} = :v" for i in range(20))
NAMES = {f"#a{i}": f"a{i}" for i in range(20)}


@pytest.fixture(params=["in_process", "moto_server"])
def table(request: pytest.FixtureRequest) -> Iterator[tuple[Any, str]]:
    if request.param == "moto_server":
        endpoint = request.getfixturevalue("moto_server")
        yield servers.dynamodb_client(endpoint), servers.make_table(endpoint)
        return
    from moto import mock_aws

    with mock_aws():
        client = servers.dynamodb_client(None)
        client.create_table(
            TableName="Checks",
            KeySchema=[{"AttributeName": "name", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "name", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client, "Checks"


def update(table: tuple[Any, str], expression: str, names: dict[str, str]) -> Any:
    client, name = table
    return client.update_item(
        TableName=name,
        Key={"name": {"S": "checked"}},
        UpdateExpression=expression,
        ExpressionAttributeNames=names,
        ExpressionAttributeValues={":v": {"N": "1"}},
    )


def test_the_suites_moto_servers_check_once() -> None:
    assert servers.MotoServer(validate_once=True).env()[moto_validation.ENV] == "1"
    assert moto_validation.ENV not in servers.MotoServer().env()


def test_an_expression_of_many_actions_applies(table: tuple[Any, str]) -> None:
    update(table, f"SET {MANY} ADD #n :v", {**NAMES, "#n": "n"})
    client, name = table
    item = client.get_item(TableName=name, Key={"name": {"S": "checked"}})["Item"]
    assert item["a19"] == item["n"] == {"N": "1"}


def test_a_second_set_clause_is_refused(table: tuple[Any, str]) -> None:
    with pytest.raises(ClientError, match="SET"):
        update(table, f"SET {MANY} ADD #n :v SET #m = :v", {**NAMES, "#n": "n", "#m": "m"})


def test_overlapping_paths_are_refused(table: tuple[Any, str]) -> None:
    with pytest.raises(ClientError, match=r"overlap .* path one: \[m, x\], path two: \[m\]"):
        update(table, f"SET {MANY}, m.x = :v, m = :v", NAMES)


def test_the_same_path_twice_is_refused(table: tuple[Any, str]) -> None:
    with pytest.raises(ClientError, match=r"overlap .* path one: \[b\], path two: \[b\]"):
        update(table, f"SET {MANY}, #b = :v REMOVE #b", {**NAMES, "#b": "b"})
