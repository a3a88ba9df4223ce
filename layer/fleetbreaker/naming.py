"""The names a breaker is known by: its own, and the container's it counts calls under.

A breaker's name is the record's key in every store; a container's id goes into the record
(the quorum's failing containers) as a short digest. Both are checked once, when a breaker is
built, the CLI reads a name, or the Step Functions gate receives one.
"""

from __future__ import annotations

import hashlib
import os
import secrets

from fleetbreaker.errors import ConfigError

MAX_NAME_BYTES = 1024  # DynamoDB allows 2048 for a partition key; leave room for Redis keys
MAX_CONTAINER_ID = 64  # container ids are kept in the record (quorum), so they stay short

_process_ids: dict[int, str] = {}


def validate_name(name: object) -> str:
    """``name`` when it can name a breaker in every store; ConfigError saying why not."""
    if not isinstance(name, str):
        raise ConfigError(f"breaker name must be a string, got {type(name).__name__}")
    if not name or not name.strip():
        raise ConfigError("breaker name must not be empty")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        # A lone surrogate (e.g. from a JSON "\udcff" escape) has no UTF-8 form: no store
        # could keep the name.
        raise ConfigError(f"breaker name must be valid Unicode text: {name!r}") from None
    if size > MAX_NAME_BYTES:
        raise ConfigError(f"breaker name is {size} bytes; the limit is {MAX_NAME_BYTES} (UTF-8)")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise ConfigError(f"breaker name must not contain control characters: {name!r}")
    return name


def validate_container_id(container_id: object) -> str:
    """``container_id`` when it is 1 to 64 printable characters; ConfigError otherwise."""
    if not isinstance(container_id, str):
        raise ConfigError(f"container_id must be a string, got {type(container_id).__name__}")
    if not 1 <= len(container_id) <= MAX_CONTAINER_ID or not container_id.isprintable():
        raise ConfigError(
            f"container_id must be 1 to {MAX_CONTAINER_ID} printable characters: {container_id!r}"
        )
    return container_id


def container_key(container_id: str) -> str:
    """The short, fixed-size key a container's id is counted under in the quorum.

    8 hex characters whatever the id's length keep the record under one write unit.
    """
    return hashlib.blake2s(container_id.encode("utf-8"), digest_size=4).hexdigest()


def process_container_id() -> str:
    """This process's container id: random, and new in a forked child (one process is one
    Lambda container)."""
    pid = os.getpid()
    found = _process_ids.get(pid)
    if found is None:
        found = _process_ids.setdefault(pid, secrets.token_hex(6))
    return found


def renew_process_container_id() -> str:
    """Give this process a new container id, and return it.

    A process restored from a snapshot (Lambda SnapStart) keeps the snapshot's pid, so the id
    cached for that pid would be the snapshot's in every restored environment.
    ``secrets`` draws from ``os.urandom``, which a restored snapshot does not repeat.
    """
    fresh = secrets.token_hex(6)
    _process_ids[os.getpid()] = fresh
    return fresh
