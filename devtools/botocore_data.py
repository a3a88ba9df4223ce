"""botocore's data files read once per test process, not once per botocore session.

A botocore session makes a loader of its own, and its first client of a service has that
loader read and parse the JSON the client needs: the service's model, its endpoint rule set,
the partitions and endpoints (tens of milliseconds of CPU, most of it ``json.loads``). A
Lambda function or a CLI command makes one session in its life. The tests make hundreds: moto's
``mock_aws`` gives every test a new default session, the deploy rehearsal and the CLI's own
clients a new session each (the CLI's tests: 100 sessions and 7 s of CPU in json.loads).

:func:`share_loaders` has every session of the process take one loader per data path (the
``AWS_DATA_PATH`` it is made with), so each file is read once. A loader keeps what it read
and hands the same objects to every client that asks, as it already does within a session;
a session's other parts (credentials, config, event handlers, clients) stay its own.
Applied by tests/conftest.py to every test process, and by the CLI tests' fork server
before it forks a command; the functions the rehearsal runs as deployed, the demo and the
benchmarks keep botocore as it is.
"""

from __future__ import annotations

import threading
from typing import Any

_LOCK = threading.Lock()


def share_loaders() -> None:
    """Have botocore sessions made from now on in this process share their data loaders
    (idempotent)."""
    from botocore import session

    create = session.create_loader
    if hasattr(create, "__wrapped__"):
        return
    loaders: dict[str | None, Any] = {}

    def shared_loader(search_path_string: str | None = None) -> Any:
        with _LOCK:
            loader = loaders.get(search_path_string)
            if loader is None:
                loader = loaders[search_path_string] = create(search_path_string)
            return loader

    shared_loader.__wrapped__ = create  # type: ignore[attr-defined]
    session.create_loader = shared_loader
