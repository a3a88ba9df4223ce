"""The payment provider the demo's containers call: healthy, then down for a while, then back.

A real HTTP server (``http.server`` on a thread, 127.0.0.1, a free port), so the payment
function's ``requests`` session, timeouts and status handling run over a socket. Whether it is
down is decided per request from the wall clock and the schedule of the current run (and, with
background noise, a seeded random draw per request while it is up), and every
request is logged with its arrival time and answer: the provider's own count of the calls that
reached it is what the demo reports, not the callers' idea of it.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple

from devtools.payment_api import PaymentApiHandler
from devtools.servers import LOOPBACK

# The drain's consumers charge at this path, so the fleet's figures leave their calls out.
DRAIN_PATH = "/drain"


class Request(NamedTuple):
    """One request that reached the provider: when (epoch s), whether it was charged, and the
    payment's idempotency key (the drain's "charged twice" is counted from it)."""

    at: float
    ok: bool
    key: str | None = None
    drain: bool = False  # sent by the drain's consumers (to DRAIN_PATH), not by the fleet


@dataclass(frozen=True)
class Outage:
    """The provider answers 503 from ``starts`` until ``ends`` (epoch seconds)."""

    starts: float
    ends: float

    def covers(self, at: float) -> bool:
        return self.starts <= at < self.ends


class ScheduledPaymentApi:
    """``POST /charges``: 200 with a JSON charge, or 503 during the scheduled outage, and 503
    to a ``noise`` fraction of the requests outside it.

    Use as a context manager; :meth:`schedule` starts a new run (and a new request log).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outage: Outage | None = None
        self._noise = 0.0
        self._draws = random.Random(0)
        self._log: list[Request] = []
        self._server = ThreadingHTTPServer((LOOPBACK, 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="payment-api", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/charges"

    def schedule(self, outage: Outage, noise: float = 0.0, seed: int = 0) -> None:
        """Fail during ``outage``, and a ``noise`` fraction of the other requests; forget the
        requests of the previous run.

        The noise is drawn from a generator seeded anew for each run, so the n-th request of
        every run gets the same draw: runs of one demo meet the same background errors.
        """
        with self._lock:
            self._outage = outage
            self._noise = noise
            self._draws = random.Random(seed)
            self._log = []

    def requests(self) -> list[Request]:
        """Every request of the current run so far, in arrival order."""
        with self._lock:
            return list(self._log)

    def _answer_ok(self, key: str | None = None, drain: bool = False) -> bool:
        now = time.time()
        with self._lock:
            ok = self._outage is None or not self._outage.covers(now)
            if ok and self._noise:
                ok = self._draws.random() >= self._noise
            self._log.append(Request(now, ok, key, drain))
        return ok

    def start(self) -> ScheduledPaymentApi:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ScheduledPaymentApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(PaymentApiHandler):
            # Keep-alive, as a real provider: each container's requests.Session reuses its
            # connection, so the demo measures calls rather than TCP handshakes.
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.read_json()
                key = self.headers.get("Idempotency-Key")
                if not api._answer_ok(key, self.path.endswith(DRAIN_PATH)):
                    self.answer(503, {"error": "service unavailable"})
                    return
                self.answer_charge(body)

        return Handler
