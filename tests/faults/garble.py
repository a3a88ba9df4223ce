"""Loopback HTTP proxies in front of a DynamoDB endpoint that tamper with its answers.

Each request is forwarded as it is, at once (so a write applies upstream), then:

- GarbleProxy replaces a 200 answer's body by ``garble(body)`` (with a matching
  Content-Length, so the client reads all of it): a middlebox or a broken endpoint that
  answers "200 OK" with something that is not DynamoDB's answer;
- ``delay_first`` holds back the reply to the first request of one operation (UpdateItem)
  past the client's read timeout: the write has applied, the client does not know it;
  ``while_delayed`` runs just before the hold (another container writing meanwhile), and
  requests that come after the delayed one wait until it has run.
"""

from __future__ import annotations

import http.client
import http.server
import threading
from collections.abc import Callable
from typing import Any

LOOPBACK = "127.0.0.1"
Garble = Callable[[bytes], bytes]


class GarbleProxy:
    """Proxies http://127.0.0.1:<port> to ``upstream`` (host, port), garbling 200 bodies."""

    def __init__(
        self,
        upstream: tuple[str, int],
        garble: Garble = lambda body: body,
        *,
        delay_first: tuple[str, float] | None = None,
        while_delayed: Callable[[], object] | None = None,
    ) -> None:
        proxy = self
        self.delay_first = delay_first
        self.while_delayed = while_delayed
        self.seen: dict[str, int] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._meanwhile_done = threading.Event()  # while_delayed has run (or is not due)
        self._meanwhile_done.set()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                operation = self.headers.get("X-Amz-Target", "").rpartition(".")[2]
                with proxy._lock:
                    count = proxy.seen.get(operation, 0)
                    proxy.seen[operation] = count + 1
                    delayed = (
                        proxy.delay_first is not None
                        and count == 0
                        and operation == proxy.delay_first[0]
                    )
                    if delayed and proxy.while_delayed is not None:
                        proxy._meanwhile_done.clear()
                if not delayed:
                    # A request sent after the delayed one (its re-send, a read-back) reaches
                    # the endpoint only once the other container's write has landed, however
                    # slowly that write goes: no race for the test to lose.
                    proxy._meanwhile_done.wait(10)
                connection = http.client.HTTPConnection(*upstream, timeout=10)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                    connection.request("POST", self.path, body=request, headers=headers)
                    answer = connection.getresponse()
                    body = answer.read()
                finally:
                    connection.close()
                if answer.status == 200:
                    body = proxy.garble(body)
                if delayed and proxy.delay_first is not None:
                    if proxy.while_delayed is not None:
                        try:
                            proxy.while_delayed()
                        finally:
                            proxy._meanwhile_done.set()
                    if proxy._closed.wait(proxy.delay_first[1]):
                        return
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", "application/x-amz-json-1.0")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up on this reply (the delayed one)

            def log_message(self, *args: Any) -> None:
                pass

        self.garble = garble
        self._server = http.server.ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"

    def close(self) -> None:
        self._closed.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(2)

    def __enter__(self) -> GarbleProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
