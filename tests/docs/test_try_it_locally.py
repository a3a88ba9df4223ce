"""docs/operations.md's "Try it locally" runs as written: its first block (moto's server) in
the background, its second (the exports and the commands) in bash, with nothing from the
test's own environment that the page does not set."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.servers import COVERAGE_CHILD_PREFIX, LOOPBACK, REPO_ROOT
from tests.docs.blocks import blocks
from tests.support import wait_for

PAGE = REPO_ROOT / "docs" / "operations.md"
SECTION = "### Try it locally"
TIMEOUT_S = 120


def section_blocks() -> list[str]:
    """The sh blocks of the section, in order."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.index("\n### ", start + len(SECTION))
    first, last = text.count("\n", 0, start) + 1, text.count("\n", 0, end) + 1
    return [b.code for b in blocks(PAGE, "sh") if first < b.line < last]


def reader_env() -> dict[str, str]:
    """A reader's shell: the venv's commands on PATH, and no AWS or store setting of ours."""
    ours = ("AWS_", "CIRCUIT_BREAKER_", "BREAKER_", "FLEETBREAKER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    # No credentials or config files of the machine's own (a reader's could hold anything:
    # the page must set what it needs); no instance metadata lookups.
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = "/nonexistent"
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    return env


def port_of(server_block: str) -> int:
    found = re.search(r"-p (\d+)", server_block)
    assert found, server_block
    return int(found.group(1))


@pytest.fixture
def moto_as_written() -> Iterator[str]:
    """The page's first block, running in the background until the test ends."""
    server_block = section_blocks()[0]
    port = port_of(server_block)
    # The page's own command, run by a shell as a reader runs it; moto runs none of the
    # measured code, so coverage does not follow it (the commands it serves are measured).
    unmeasured = {k: v for k, v in reader_env().items() if not k.startswith(COVERAGE_CHILD_PREFIX)}
    server = subprocess.Popen(
        server_block,
        shell=True,
        executable="/bin/bash",
        env=unmeasured,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:

        def up() -> bool:
            assert server.poll() is None, f"moto_server exited: {server.stderr.read()!r}"  # type: ignore[union-attr]
            return _answers(port)

        wait_for(up, f"the page's moto_server answering on port {port}")
        yield server_block
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def _answers(port: int) -> bool:
    """True once anything answers HTTP on the port (any status: the server is up)."""
    import http.client

    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=1.0)
    try:
        conn.request("GET", "/")
        conn.getresponse().read()
        return True
    except OSError:
        return False
    finally:
        conn.close()


def test_the_section_has_the_server_then_the_commands() -> None:
    server, commands = section_blocks()

    assert server.strip().startswith("moto_server -H 127.0.0.1 -p ")
    assert "AWS_ACCESS_KEY_ID=testing" in commands
    assert "AWS_REGION=" in commands
    assert f"http://127.0.0.1:{port_of(server)}" in commands


def test_try_it_locally_runs_as_written(moto_as_written: str) -> None:
    # GIVEN moto's server started as the page starts it
    commands = section_blocks()[1]

    # WHEN the page's commands run in a shell that stops at the first failure
    done = subprocess.run(
        ["/bin/bash", "-e", "-c", commands],
        env=reader_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )

    # THEN every command succeeded, and they did what the page says
    assert done.returncode == 0, done.stderr
    assert "created table 'CircuitBreakers'" in done.stdout
    assert re.search(r"^state\s+forced_open$", done.stdout, re.M), done.stdout
    assert re.search(r"^payment-api\s+forced_open\s", done.stdout, re.M), done.stdout
    assert re.search(r"^last action\s+reset by .*: done$", done.stdout, re.M), done.stdout
