"""What data a store reaches, said in one string: its ``sharing_identity``.

The processes of one Lambda Managed Instances environment share their reads of a breaker's
record through a file named by it (:func:`fleetbreaker.shared_refresh.copy_key`). Two stores
that reach different data must never name one copy, so an identity holds everything that
tells them apart; a store that cannot say gives None, and its processes share nothing.
"""

from __future__ import annotations

from typing import Any


def dynamodb_identity(client: Any, table_name: str) -> str:
    """The region, the endpoint the client sends to, and the table.

    Both come from the client as built (``meta``), so a region or endpoint set by argument,
    variable or config file counts alike. The account is not in it: the processes of one
    environment run one function with one role.
    """
    import json  # at use, not import: a cold start elsewhere never needs it

    meta = client.meta
    place = {"region": meta.region_name, "endpoint": meta.endpoint_url, "table": table_name}
    return json.dumps({"dynamodb": place}, sort_keys=True)


def redis_identity(client: Any, key_prefix: str) -> str | None:
    """The server (host and port, or Unix socket), the database and the key prefix.

    Read from a redis-py client's connection pool; None for a client without one (a
    cluster client, whose nodes change as it discovers them, or a custom client).
    """
    import json  # at use, not import: a cold start elsewhere never needs it

    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return None
    host, port, path = kwargs.get("host"), kwargs.get("port"), kwargs.get("path")
    if not host and not path:
        return None
    place = {
        "host": None if host is None else str(host).lower(),
        "port": None if port is None else str(port),
        "path": None if path is None else str(path),
        "db": str(kwargs.get("db", 0)),
        "key_prefix": key_prefix,
    }
    return json.dumps({"redis": place}, sort_keys=True)
