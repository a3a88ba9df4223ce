"""One Lambda execution environment ("container") as a child process: init once, then invoke.

Started by :class:`devtools.rehearsal.LambdaContainer` with exactly the environment the
function's stack gives it (plus what Lambda's runtime adds: region, function name, the role's
credentials). Like Lambda it imports the handler module named by ``_HANDLER`` from
``LAMBDA_TASK_ROOT``'s stand-in (the function's code directory, plus functions/shared, which
the functions' Makefiles copy beside ``app.py``), once; its module-level code runs then. Then it
serves invocations one at a time, as a warm container does.

With ``AWS_LAMBDA_INITIALIZATION_TYPE=snap-start`` (a function with SnapStart) the init is
followed by the runtime's SnapStart hooks: those run before the snapshot, then those run
after a restore, which here resumes in this same process.

Protocol: one JSON request per line on stdin (``{"event": ..., "context": {...}}``), one JSON
answer per line on the file descriptor given as the second argument: ``{"result": ...}`` or
``{"error": {"type", "message", "traceback"}}``; before the first request, ``{"ready": true}``
or ``{"init_error": {...}}`` (then the process exits, as a failed init does in Lambda).
Everything the function prints or logs goes to the process's stdout/stderr, which the parent
keeps as the function's log.

One thing differs from Lambda, and not through the environment: the package's store clients
get the patient timeouts of the tests' own clients (devtools.servers.patient_store_clients),
as every test process does. The stores' 0.2 s and 0.3 s are made for DynamoDB and
ElastiCache; the rehearsal's local servers share two cores with the rest of the suite, and a
late answer would put the function on its local breaker, which the rehearsal reports as a
failure of the stack. The timeouts themselves are tested in tests/faults and tests/redis.

Nor are two packages of the dev venv: the AWS Common Runtime (awscrt) and pyOpenSSL, which the
SAM CLI brings. Lambda's Python runtimes have neither, so botocore and urllib3 find neither
here; where both are installed, each container spent a tenth of a second of CPU importing
them.

Usage: python -m devtools.lambda_runtime CODE_DIR ANSWER_FD
"""

from __future__ import annotations

import sys

# Absent, as in Lambda: `import awscrt` and `import OpenSSL` raise ModuleNotFoundError.
ABSENT_IN_LAMBDA = ("awscrt", "OpenSSL")
for _name in ABSENT_IN_LAMBDA:
    sys.modules.setdefault(_name, None)  # type: ignore[arg-type]

import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import traceback  # noqa: E402
from typing import Any  # noqa: E402

from devtools.lambda_context import FakeLambdaContext  # noqa: E402
from devtools.servers import REPO_ROOT, patient_store_clients  # noqa: E402

SHARED_DIR = REPO_ROOT / "functions" / "shared"


def _error(exc: BaseException) -> dict[str, Any]:
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
    }


def _answer(channel: Any, payload: dict[str, Any]) -> None:
    channel.write(json.dumps(payload, default=str) + "\n")
    channel.flush()


def _snapshot_and_restore() -> None:
    """SnapStart, as the runtime's bootstrap (awslambdaric) does once init is complete: the
    before-snapshot hooks, then, restored here in the same process (the snapshot's memory
    and pid), the after-restore hooks, with awslambdaric's own runner and in its order. The
    log gets a line naming the hooks, as Lambda's log gets its RESTORE_REPORT line."""
    from awslambdaric.lambda_runtime_hooks_runner import run_after_restore, run_before_snapshot
    from snapshot_restore_py import get_after_restore, get_before_snapshot

    before = [_named(hook) for hook, _, _ in get_before_snapshot()]
    run_before_snapshot()
    run_after_restore()
    after = [_named(hook) for hook, _, _ in get_after_restore()]
    print(f"RESTORE_REPORT before-snapshot hooks: {before} after-restore hooks: {after}")
    sys.stdout.flush()


def _named(hook: Any) -> str:
    return f"{getattr(hook, '__module__', '?')}.{getattr(hook, '__qualname__', repr(hook))}"


def main() -> None:
    code_dir, answer_fd = sys.argv[1], int(sys.argv[2])
    channel = os.fdopen(answer_fd, "w", encoding="utf-8")
    sys.path[:0] = [code_dir, str(SHARED_DIR)]
    patient_store_clients()
    module_name, _, function_name = os.environ["_HANDLER"].rpartition(".")
    try:
        handler = getattr(importlib.import_module(module_name), function_name)
    except BaseException as exc:  # an init failure is the answer, as in Lambda
        _answer(channel, {"init_error": _error(exc)})
        return
    if os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE") == "snap-start":
        try:
            _snapshot_and_restore()
        except BaseException as exc:  # Lambda: the snapshot (exit 64) or restore (65) fails
            _answer(channel, {"init_error": _error(exc)})
            return
    _answer(channel, {"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        context = FakeLambdaContext(**request.get("context", {}))
        try:
            result = handler(request["event"], context)
        except Exception as exc:
            _answer(channel, {"error": _error(exc)})
            continue
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        _answer(channel, {"result": result})


if __name__ == "__main__":
    main()
