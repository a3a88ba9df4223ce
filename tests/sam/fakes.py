"""Stand-ins for what surrounds the payment function: the provider's API and Lambda's context.

``FakePaymentApi`` is a real HTTP server (``http.server`` on a thread), so the payment
function's ``requests`` session, timeouts and status handling are exercised over a socket.
Also used by ``scripts/invoke_local.py`` for ``make invoke-local``.

Modes
-----
ok       200 with a JSON charge, like a healthy provider.
fail     503, like a provider in an outage.
decline  402 with a JSON error: the provider works and refuses the payment.
hold     waits until ``release()`` (or ``hold_timeout``), then answers like ``ok``: a slow
         provider, or a request a test wants to keep in flight.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOOPBACK = "127.0.0.1"
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

    def answer(self, status: int, payload: dict[str, Any]) -> None:
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


class FakePaymentApi:
    """``POST /charges`` on 127.0.0.1:<port> (a free one by default). Use as a context manager."""

    def __init__(self, mode: str = "ok", *, hold_timeout: float = 10.0, port: int = 0) -> None:
        self._lock = threading.Lock()
        self._mode = "ok"
        self.mode = mode
        self.hold_timeout = hold_timeout
        self.requests: list[dict[str, Any]] = []
        self.arrived = threading.Event()  # set whenever a request arrives
        self._released = threading.Event()
        self._server = ThreadingHTTPServer((LOOPBACK, port), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-payment-api", daemon=True
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

    def _record(self, request: dict[str, Any]) -> str:
        with self._lock:
            self.requests.append(request)
            mode = self._mode
        self.arrived.set()
        return mode

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(PaymentApiHandler):
            def do_POST(self) -> None:
                body = self.read_json()
                mode = api._record(
                    {
                        "path": self.path,
                        "idempotency_key": self.headers.get("Idempotency-Key"),
                        "body": body,
                    }
                )
                if mode == "hold":
                    api._released.wait(api.hold_timeout)
                if mode == "fail":
                    self.answer(503, {"error": "service unavailable"})
                elif mode == "decline":
                    self.answer(402, {"error": "card_declined"})
                else:
                    self.answer_charge(body)

        return Handler


@dataclass
class FakeLambdaContext:
    """The attributes of Lambda's context object that Powertools reads."""

    function_name: str = "fleetbreaker-payment"
    function_version: str = "$LATEST"
    invoked_function_arn: str = (
        "arn:aws:lambda:us-east-1:123456789012:function:fleetbreaker-payment"
    )
    memory_limit_in_mb: int = 256
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = "/aws/lambda/fleetbreaker/payment"
    log_stream_name: str = "local"

    def get_remaining_time_in_millis(self) -> int:
        return 29_000
