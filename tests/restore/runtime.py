"""A Lambda process under SnapStart, as the restore tests run it: init, snapshot, restores.

``python -m tests.restore.runtime JOB.json`` reads a job, runs it, and writes what happened to
the job's ``"out"`` file (stdout stays the function's own, as in Lambda: EMF lands there):

1. **init**: :mod:`tests.restore.scenarios` (importing fleetbreaker, as a function's module
   does) and the scenario's ``init()``: the breaker built at module level, a call or two;
2. **the snapshot**: the Lambda runtime's own ``run_before_snapshot()`` (awslambdaric's
   ``lambda_runtime_hooks_runner``: the ``snapshot_restore_py`` hooks, in the reverse order
   of their registration), then the scenario's ``snapshotted()`` (what time does to the
   world meanwhile: an IAM token expires);
3. **the restores**, ``environments`` of them, one after another: each a fork of this
   process in which ``os.getpid`` answers this process's pid (a restored snapshot keeps it)
   and the ``random`` module has this process's state back (a fork reseeds it; a restored
   snapshot does not), the clocks moved to the restore (``wake()``), the runtime's own
   ``run_after_restore()`` (the hooks in registration order), then ``invoke(index)``;
4. **the snapshot's continuation**: ``snapshot()`` in this process, afterwards: what an
   environment restored without its hooks would draw and show.

Where a fork is not a SnapStart restore: the child has only the thread that forked (SnapStart
resumes every thread), and shares this process's open sockets with it (a restored
environment's are dead ends). With the hooks, both make a missed restart show sooner, never
later: the after-restore hook starts the process's store workers and slow-call watcher anew.

With ``"hooks": false`` steps 2 and 3 run no hook: the package as it was before it had any,
the control that shows a test can fail. The child then gets new store workers and a new
slow-call watcher from this runtime itself, standing in for the threads SnapStart would have
resumed, so that a control fails as SnapStart would, not for want of a thread.
"""

from __future__ import annotations

import json
import os
import random
import sys
import traceback
from pathlib import Path
from typing import Any


def main(job_path: str) -> int:
    job: dict[str, Any] = json.loads(Path(job_path).read_text())
    from tests.restore.scenarios import scenario_for

    scenario = scenario_for(job)
    init = scenario.init()
    hooks = bool(job.get("hooks", True))
    if hooks:
        from awslambdaric.lambda_runtime_hooks_runner import run_before_snapshot

        run_before_snapshot()
    scenario.snapshotted()
    restored = [_restore(scenario, index, hooks) for index in range(job["environments"])]
    result = {"init": init, "restored": restored, "snapshot": scenario.snapshot()}
    Path(job["out"]).write_text(json.dumps(result))
    return 0


def _restore(scenario: Any, index: int, hooks: bool) -> dict[str, Any]:
    """One environment restored from this process: forked, run, its answer read back."""
    snapshot_pid = os.getpid()
    random_state = random.getstate()
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the restored environment
        os.close(read_end)
        status = 1
        try:
            os.getpid = lambda: snapshot_pid
            random.setstate(random_state)
            scenario.wake()
            if hooks:
                from awslambdaric.lambda_runtime_hooks_runner import run_after_restore

                run_after_restore()
            else:
                _resume_threads()
            answer: dict[str, Any] = {"answer": scenario.invoke(index)}
            status = 0
        except BaseException:
            answer = {"error": traceback.format_exc()}
        finally:
            with os.fdopen(write_end, "w") as out:
                out.write(json.dumps(answer))
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as source:
        text = source.read()
    _, status = os.waitpid(pid, 0)
    answer = json.loads(text) if text else {"error": f"no answer (wait status {status})"}
    if "error" in answer:
        raise RuntimeError(f"restored environment {index} failed:\n{answer['error']}")
    result: dict[str, Any] = answer["answer"]
    return result


def _resume_threads() -> None:
    """What SnapStart keeps and a fork loses: running store workers and slow-call watcher."""
    from fleetbreaker.stores.deadline import restart_workers
    from fleetbreaker.watcher import restart_watch

    restart_workers()
    restart_watch()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
