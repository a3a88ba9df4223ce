"""A script whose reply timed out is never sent again: it runs once, and counts once.

The store's client retries a broken connection once but never a timeout (the script may have
run). A loopback proxy (tests/faults/trickle.py) passes the request to redis-server at once,
so the script runs, but holds the reply on the store's connection back one byte per second,
past the store's socket timeout. A new connection is served at once, so had the client
reconnected and re-sent the script after the timeout, it would have run twice.
"""

from __future__ import annotations

import socket
import urllib.parse

import pytest
import redis

from fleetbreaker import RedisStore, State
from fleetbreaker.errors import StoreError
from tests.faults.trickle import TrickleProxy
from tests.support import make_policy

T0 = 1_700_000_000_000
NAME = "payment-api-no-rerun"  # the session server is shared: a name of its own


class SlowFirstConnection(TrickleProxy):
    """Paces the replies of the first connection only (the store's pooled one)."""

    def _pump(self, source: socket.socket, sink: socket.socket, paced: bool) -> None:
        super()._pump(source, sink, paced and sink is self._sockets[0])


def evalsha_calls(raw: redis.Redis) -> int:
    return int(raw.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


@pytest.mark.store_timeouts  # a reply held past the store's own socket timeout
def test_a_timed_out_failure_is_not_sent_again_and_counts_once(redis_server: str) -> None:
    url = urllib.parse.urlsplit(redis_server)
    raw = redis.Redis.from_url(redis_server, decode_responses=True)
    upstream = (url.hostname or "127.0.0.1", url.port or 6379)
    with SlowFirstConnection(upstream, interval_s=0.0) as proxy:
        # GIVEN a store connected through the proxy (with its short timeouts), its script
        # loaded, and then replies that arrive one byte per second
        store = RedisStore(url=proxy.redis_url, use_server_time=False)
        store.record_failure(f"{NAME}-warm", make_policy(failure_threshold=2), T0, None)
        before = evalsha_calls(raw)
        proxy.interval_s = 1.0
        # WHEN one failure is recorded and its reply times out
        with pytest.raises(StoreError):
            store.record_failure(NAME, make_policy(failure_threshold=2), T0, None)
        store.close()
    fields = raw.hgetall(store.key(NAME))
    sent = evalsha_calls(raw) - before
    raw.close()

    # THEN the script ran exactly once: counted once, not re-sent, and threshold 2 not reached
    assert sent == 1
    assert fields["failures"] == "1"
    assert fields["state"] == State.CLOSED.value
