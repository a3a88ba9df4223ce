"""A fake payment provider: the one ``FakePaymentApi`` of the tests, the bench and the scripts.

``FakePaymentApi`` is a real HTTP server (``http.server`` on a thread), so the functions' HTTP
clients (the payment function's ``requests`` session, the charge step's ``http.client``), their
timeouts and their status handling are exercised over a socket. ``PaymentApiHandler`` is what
every fake provider shares, the demo's scheduled one (bench/demo/provider.py) included.

Modes
-----
ok       200 with a JSON charge, like a healthy provider.
fail     503, like a provider in an outage.
decline  402 with a JSON error: the provider works and refuses the payment.
hold     waits until ``release()`` (or ``hold_timeout``), then answers like ``ok``: a slow
         provider, or a request a test wants to keep in flight.

:meth:`FakePaymentApi.answer` overrides the mode with a fixed status and body until the mode is
set again, and :attr:`FakePaymentApi.on_call` runs in each request's thread before it is
answered (a test can hold the answer back there, or move its clock).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from devtools.servers import LOOPBACK

MODES = ("ok", "fail", "decline", "hold")


class PaymentApiHandler(BaseHTTPRequestHandler):
    """What every fake provider shares: read a JSON body, answer JSON, charge like a provider.

    Also the base of the demo's scheduled provider (bench/demo/provider.py).
    """

    def read_json(self) -> Any:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            return json.loads(raw or b"null")
        except ValueError:
            return None

    def answer_charge(self, body: Any) -> None:
        key = self.headers.get("Idempotency-Key") or "none"
        charge: dict[str, Any] = {"id": f"ch_{key}", "status": "succeeded"}
        if isinstance(body, dict):
            charge.update(amount=body.get("amount"), currency=body.get("currency"))
        self.answer(200, charge)

    def answer(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the caller gave up (its read timeout): nothing to answer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests and the demo report what they need themselves


@dataclass(frozen=True)
class ApiCall:
    """One request that reached the fake provider."""

    path: str
    headers: dict[str, str]
    body: Any

    @property
    def idempotency_key(self) -> str | None:
        return self.headers.get("Idempotency-Key")


class FakePaymentApi:
    """``POST /charges`` on 127.0.0.1:<port> (a free one by default). Use as a context manager."""

    def __init__(self, mode: str = "ok", *, hold_timeout: float = 10.0, port: int = 0) -> None:
        self._lock = threading.Lock()
        self._mode = "ok"
        self._fixed: tuple[int, Any] | None = None
        self.mode = mode
        self.hold_timeout = hold_timeout
        self.requests: list[ApiCall] = []
        self.on_call: Callable[[], None] | None = None
        self.arrived = threading.Event()  # set whenever a request arrives
        self._released = threading.Event()
        self._server = ThreadingHTTPServer((LOOPBACK, port), self._handler_class())
        self._server.daemon_threads = True
        # A short poll interval keeps shutdown() (every test's teardown) quick.
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-payment-api",
            daemon=True,
        )

    @property
    def mode(self) -> str:
        with self._lock:
            return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {value!r}")
        with self._lock:
            self._mode = value
            self._fixed = None

    def answer(self, status: int, body: Any = None) -> None:
        """Answer every request with ``status`` and ``body`` (JSON) until the mode is set."""
        with self._lock:
            self._fixed = (status, body if body is not None else {"error": f"HTTP {status}"})

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/charges"

    @property
    def calls(self) -> int:
        """Requests that reached the API so far."""
        with self._lock:
            return len(self.requests)

    def release(self) -> None:
        """Let requests held by ``hold`` mode answer."""
        self._released.set()

    def start(self) -> FakePaymentApi:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakePaymentApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _record(self, call: ApiCall) -> Callable[[], None] | None:
        with self._lock:
            self.requests.append(call)
            hook = self.on_call
        self.arrived.set()
        return hook

    def _reply(self) -> tuple[str, tuple[int, Any] | None]:
        with self._lock:
            return self._mode, self._fixed

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(PaymentApiHandler):
            def do_POST(self) -> None:
                body = self.read_json()
                hook = api._record(ApiCall(self.path, dict(self.headers), body))
                if hook is not None:
                    hook()
                mode, fixed = api._reply()
                if fixed is not None:
                    self.answer(*fixed)
                    return
                if mode == "hold":
                    api._released.wait(api.hold_timeout)
                if mode == "fail":
                    self.answer(503, {"error": "service unavailable"})
                elif mode == "decline":
                    self.answer(402, {"error": "card_declined"})
                else:
                    self.answer_charge(body)

        return Handler
