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


def test_each_expression_text_is_read_once_and_each_request_gets_its_own_list() -> None:
    from moto.dynamodb.parsing.tokens import ExpressionTokenizer

    # GIVEN the suite's moto, patched (tests/conftest.py)
    make_list: Any = ExpressionTokenizer.make_list
    text = f"SET {MANY} ADD #n :v"
    before = make_list.cache_info()
    # WHEN one text is read twice
    first, second = make_list(text), make_list(text)
    # THEN it was read once, and each reader got a list of its own over equal tokens
    after = make_list.cache_info()
    assert after.hits - before.hits >= 1
    assert first == second
    assert first is not second
    assert [(t.type, t.value) for t in first] == [
        (t.type, t.value) for t in make_list.__wrapped__(text)
    ]


def test_a_condition_is_lexed_once_into_nodes_each_request_may_consume(
    table: tuple[Any, str],
) -> None:
    client, name = table

    def set_n(to: str, if_below: str) -> None:
        client.update_item(
            TableName=name,
            Key={"name": {"S": "lexed"}},
            UpdateExpression="SET #n = :w",
            ConditionExpression="attribute_not_exists(#n) OR #n < :v",
            ExpressionAttributeNames={"#n": "n"},
            ExpressionAttributeValues={":v": {"N": if_below}, ":w": {"N": to}},
        )

    # GIVEN a conditional write applied twice with one condition text
    set_n("3", if_below="5")
    set_n("3", if_below="5")
    # THEN the same text still decides: n is 3, not below 3, so this one is refused
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        set_n("4", if_below="3")


def test_a_text_moto_refuses_is_refused_every_time(table: tuple[Any, str]) -> None:
    for _ in range(2):
        with pytest.raises(ClientError):
            update(table, "SET #a0 = :v SET", NAMES)
