"""moto's standalone server with DynamoDB writes serialised, as DynamoDB serialises them.

moto runs each HTTP request on its own thread and its DynamoDB backend takes no lock, so two
conditional UpdateItems on one item can both pass their checks: a race real DynamoDB never
allows (conditional writes to an item are linearisable). A global lock around each request
restores that guarantee without changing anything else about moto's wire behaviour.

With FLEETBREAKER_MOTO_VALIDATE_ONCE=1 in its environment it also makes moto's UpdateExpression
checks once per expression (devtools/moto_validation.py) and builds its JSON answers without
its alias search where none can match (devtools/moto_serialize.py), as the test suite's
servers do.

Usage: python devtools/moto_atomic_server.py HOST PORT
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.threaded_moto_server import MotoRequestHandler  # type: ignore[attr-defined]
from moto.server import (  # type: ignore[attr-defined]
    DomainDispatcherApplication,
    create_backend_app,
)
from werkzeug.serving import run_simple

from devtools import moto_serialize, moto_validation


class SerialisedApp:
    """WSGI middleware: one DynamoDB request at a time through moto's backend."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        # Only DynamoDB is serialised: Step Functions executions call back into this server
        # (MOTO_PORT) and must not wait behind their own request.
        if not environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            return self.app(environ, start_response)
        with self.lock:
            # Materialise the body inside the lock: moto may compute it lazily.
            return list(self.app(environ, start_response))


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    os.environ.setdefault("MOTO_PORT", str(port))
    if os.environ.get(moto_validation.ENV) == "1":
        moto_validation.validate_once()
        moto_serialize.serialize_fast()
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(host, port, SerialisedApp(app), threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
