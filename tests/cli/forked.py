"""The CLI in a process of its own, forked from a server that has imported it.

Each `fleetbreaker` command a test runs against a real store is a process: its own argv,
environment, working directory, stdin, stdout, stderr and exit code. Started as the console
script, each also started an interpreter and imported boto3, botocore and the package (and,
under `make test`, coverage): about 0.4 s of CPU before the command's first line ran, hundreds
of times a run. Here one server per test process does that once, and forks a process per
command that runs the console script's own ``fleetbreaker.cli.main`` and exits through the
interpreter's usual way out (atexit handlers, coverage's data saved). What the console script
itself adds (its shim, signals, a terminal) is tested on the script:
tests/cli/test_cli_process.py and tests/cli/test_interrupts.py.

The client side is :func:`run`; ``python -m tests.cli.forked SOCKET`` is the server.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).with_name("fleetbreaker")


def _serve(path: str) -> int:
    """Accept commands on ``path`` until killed; a forked child runs each. In a child,
    returns the command's exit code (the caller exits with it)."""
    import boto3

    from devtools import botocore_data
    from fleetbreaker import cli
    from fleetbreaker.cli import commands  # noqa: F401  (what a command loads: loaded once)
    from fleetbreaker.stores.dynamodb import DynamoDBStore  # noqa: F401
    from fleetbreaker.stores.redis import RedisStore  # noqa: F401

    # botocore imports most of itself on a client's first creation; with the loaders shared
    # (devtools/botocore_data.py), the data files each command's clients need are read here.
    botocore_data.share_loaders()
    for service in ("dynamodb", "sts", "cloudformation"):
        boto3.session.Session().client(
            service, region_name="us-east-1", endpoint_url="http://127.0.0.1:9"
        )
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        if os.fork() == 0:
            server.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            return _command(conn, cli.main)
        conn.close()


def _command(conn: socket.socket, main: object) -> int:
    """In the forked child: become the command the client asked for and run it."""
    chunks = []
    while chunk := conn.recv(65536):
        chunks.append(chunk)
    request = json.loads(b"".join(chunks))
    conn.sendall(f"{os.getpid()}\n".encode())
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    for fd, target, mode in (
        (0, os.devnull, os.O_RDONLY),
        (1, request["out"], os.O_WRONLY),
        (2, request["err"], os.O_WRONLY),
    ):
        opened = os.open(target, mode)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = [str(CLI), *request["argv"]]
    code: object
    try:
        code = main(request["argv"])  # type: ignore[operator]
    except SystemExit as exc:
        code = exc.code
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # The connection closes when this process has exited, atexit handlers and all.
    conn.sendall(f"{code}\n".encode())
    return code


class _Server:
    """This test process's server, started on first use and killed by its PID at exit."""

    _lock = threading.Lock()
    _path: str | None = None
    _process: subprocess.Popen[str] | None = None

    @classmethod
    def path(cls) -> str:
        with cls._lock:
            process = cls._process
            if process is None or process.poll() is not None:
                cls._start()
            assert cls._path is not None
            return cls._path

    @classmethod
    def _start(cls) -> None:
        folder = tempfile.mkdtemp(prefix="fleetbreaker-cli-")
        path = os.path.join(folder, "cli.sock")
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.cli.forked", path],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            process.kill()
            raise RuntimeError(f"the CLI's fork server did not start (exit {process.wait()})")
        cls._path, cls._process = path, process
        atexit.register(_stop, process)


def commands_running() -> list[int]:
    """The PIDs of the commands this test process's server is running now."""
    process = _Server._process
    if process is None:
        return []
    running = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except (OSError, ValueError):
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if entry.name.isdigit() and int(fields[1]) == process.pid and fields[0] != "Z":
            running.append(int(entry.name))
    return running


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()


def run(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[int, str, str]:
    """Run `fleetbreaker ARGV` with environment ``env`` (all of it) in a forked process:
    (exit code, stdout, stderr). Past ``timeout`` seconds the process is killed and
    subprocess.TimeoutExpired raised, as subprocess.run does."""
    with tempfile.TemporaryDirectory(prefix="fleetbreaker-cli-run-") as folder:
        out, err = os.path.join(folder, "out"), os.path.join(folder, "err")
        Path(out).touch()
        Path(err).touch()
        request = {"argv": list(argv), "env": dict(env), "cwd": os.getcwd(), "out": out, "err": err}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(_Server.path())
            conn.sendall(json.dumps(request).encode())
            conn.shutdown(socket.SHUT_WR)
            reply = b""
            try:
                while chunk := conn.recv(64):
                    reply += chunk
            except TimeoutError:
                pid = reply.split(b"\n", 1)[0]
                if pid:
                    os.kill(int(pid), signal.SIGKILL)
                raise subprocess.TimeoutExpired([str(CLI), *argv], timeout) from None
        lines = reply.decode().split()
        if len(lines) != 2:
            raise RuntimeError(f"the forked CLI died without an exit code: {reply!r}")
        return int(lines[1]), Path(out).read_text(), Path(err).read_text()


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1]))
