"""A loopback TCP proxy that counts the connections it accepts.

Put in front of a store's server, it tells how many connections the store's clients opened:
a restored environment that reuses the snapshot's pooled connection opens none.
"""

from __future__ import annotations

import contextlib
import socket
import threading

LOOPBACK = "127.0.0.1"


class CountingProxy:
    """Forwards 127.0.0.1:<port> to ``upstream`` both ways, and counts accepted connections."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server((LOOPBACK, 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._accepted = 0
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    @property
    def accepted(self) -> int:
        with self._lock:
            return self._accepted

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def tls_redis_url(self) -> str:
        return f"rediss://{LOOPBACK}:{self.port}/0"

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            with self._lock:
                self._accepted += 1
                self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
        self._thread.join(timeout=2)
