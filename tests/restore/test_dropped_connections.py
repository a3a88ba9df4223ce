"""DynamoDBStore.drop_connections: what a restored snapshot asks of the store.

On dynalite (which keeps connections alive, as DynamoDB does), behind a proxy that counts
the connections opened: after the drop the next request opens a new one, and the client
stays usable, whoever built it.
"""

from __future__ import annotations

import boto3

from fleetbreaker import DynamoDBStore
from tests.restore.conftest import StoreUnderTest


def test_after_the_drop_the_store_opens_a_new_connection(dynalite_store: StoreUnderTest) -> None:
    # GIVEN a store that built its client and reads through one kept-alive connection
    proxy, spec = dynalite_store.proxy, dynalite_store.spec
    assert proxy is not None
    store = DynamoDBStore(spec["table"], endpoint_url=spec["endpoint_url"])
    store.load("svc", 0)
    store.load("svc", 0)
    assert proxy.accepted == 1
    # WHEN it drops its connections and reads again
    store.drop_connections()
    store.load("svc", 0)
    # THEN that read opened a new connection
    assert proxy.accepted == 2


def test_a_client_passed_in_is_dropped_and_stays_usable(dynalite_store: StoreUnderTest) -> None:
    # GIVEN a store on a client of the caller's, which has opened one connection
    proxy, spec = dynalite_store.proxy, dynalite_store.spec
    assert proxy is not None
    client = boto3.client("dynamodb", endpoint_url=spec["endpoint_url"])
    store = DynamoDBStore(spec["table"], boto3_client=client)
    store.load("svc", 0)
    # WHEN the store drops its connections
    store.drop_connections()
    # THEN the caller's client still answers its owner, on a new connection
    assert spec["table"] in client.list_tables()["TableNames"]
    assert proxy.accepted == 2
