"""A loopback TCP proxy that forwards requests at once and replies one byte at a time.

Stands in for a store whose answer trickles in: every socket read gets a byte well within
any per-read timeout, so only a total deadline on the operation bounds it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

LOOPBACK = "127.0.0.1"


class TrickleProxy:
    """Proxies 127.0.0.1:<port> to ``upstream``; each reply byte waits ``interval_s``."""

    def __init__(self, upstream: tuple[str, int], interval_s: float = 0.1) -> None:
        self.upstream = upstream
        self.interval_s = interval_s
        self._listener = socket.create_server((LOOPBACK, 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept_loop, daemon=True)]
        self._threads[0].start()

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def redis_url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            for source, sink, paced in ((client, server, False), (server, client, True)):
                thread = threading.Thread(
                    target=self._pump, args=(source, sink, paced), daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def _pump(self, source: socket.socket, sink: socket.socket, paced: bool) -> None:
        try:
            while not self._closed.is_set():
                data = source.recv(65536)
                if not data:
                    break
                if not paced:
                    sink.sendall(data)
                    continue
                for offset in range(len(data)):
                    # The fault itself: the reply arrives one byte per interval.
                    if self._closed.wait(self.interval_s):
                        return
                    sink.sendall(data[offset : offset + 1])
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        for sock in self._sockets:
            sock.close()
        deadline = time.monotonic() + 2
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> TrickleProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
