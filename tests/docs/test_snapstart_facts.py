"""docs/deploying.md#snapstart: a breaker first built after the handler's import needs no hook.

Two sides. The runtime (the pinned awslambdaric): under SnapStart ``bootstrap.run`` imports the
handler, then runs the registered hooks once (``on_init_complete``: before the snapshot, the
snapshot, after the restore) and only then its invocation loop, so a hook registered later is
never run. The breaker: one first built after a restore (no hook run, the snapshot's pid kept,
as SnapStart keeps it) has a container id and random numbers of its own in each environment,
because nothing of it was in the snapshot.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from typing import Any

from devtools.servers import REPO_ROOT

GUIDE = REPO_ROOT / "docs" / "deploying.md"


def test_the_runtime_reads_the_hooks_once_right_after_the_handlers_import() -> None:
    from awslambdaric import bootstrap

    run = inspect.getsource(bootstrap.run)
    handler_import = run.index("_get_handler(")
    hooks = run.index("on_init_complete(")
    loop = run.index("while True")
    assert handler_import < hooks < loop

    init_complete = inspect.getsource(bootstrap.on_init_complete)
    steps = ["run_before_snapshot()", "restore_next()", "run_after_restore()"]
    assert [init_complete.index(step) for step in steps] == sorted(
        init_complete.index(step) for step in steps
    )


# A Lambda process under SnapStart, in a process of its own (nothing of this test process's
# breakers in it): an init that imports fleetbreaker and builds no breaker, then environments
# restored from it, each a fork that keeps the snapshot's pid (as SnapStart does) and runs no
# hook, whose handler builds its first breaker.
SNAPSHOT = """
import json, os, sys
import fleetbreaker
snapshot_pid = os.getpid()
answers = []
for _ in range(3):
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.getpid = lambda: snapshot_pid
        from fleetbreaker import CircuitBreaker, MemoryStore
        breaker = CircuitBreaker("built-late", store=MemoryStore())
        with os.fdopen(write_end, "w") as out:
            out.write(json.dumps({"id": breaker.container_id, "draw": breaker.rng.random()}))
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as source:
        answers.append(json.loads(source.read()))
    os.waitpid(pid, 0)
print(json.dumps(answers))
"""


def test_a_breaker_first_built_after_the_restore_is_its_environments_own() -> None:
    # GIVEN an init that builds no breaker, WHEN three restored environments each build their
    # first breaker with no hook run
    done = subprocess.run(
        [sys.executable, "-c", SNAPSHOT],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "layer")},
    )
    environments: list[dict[str, Any]] = json.loads(done.stdout.splitlines()[-1])

    # THEN each has a container id and a random stream of its own
    assert len({env["id"] for env in environments}) == 3
    assert len({env["draw"] for env in environments}) == 3


def test_the_guide_says_why_a_breaker_built_later_needs_no_hook() -> None:
    text = " ".join(GUIDE.read_text().split())
    assert "right after it imports the handler's module" in text
    assert "A breaker first built later" in text
