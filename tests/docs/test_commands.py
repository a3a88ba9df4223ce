"""The `fleetbreaker` commands docs/operations.md shows run as shown, with the exit codes the
page documents (0 ok).

Against a stack named as in the runbook (`fleetbreaker`), created on moto's CloudFormation
with the table output template.yaml gives it, holding a `payment-api` breaker that is open,
as the runbook shows it. The commands run in the runbook's order, each as shown.
"""

from __future__ import annotations

import json
import re
import shlex
import uuid
from collections.abc import Iterator

import boto3
import pytest

from devtools import servers
from devtools.sam_template import table_stack
from fleetbreaker import BreakerConfig, CircuitBreaker, DynamoDBStore, State, cli
from tests.docs.blocks import DOCS, every_block

STACK = "fleetbreaker"
RUNBOOK = [
    line.removeprefix("$ ")
    for block in every_block("console")
    for line in block.code.splitlines()
    if line.startswith("$ fleetbreaker ")
]
# Shown in prose rather than in a console block.
INLINE = sorted(
    {
        command
        for path in DOCS
        for command in re.findall(r"`(fleetbreaker (?:list|watch [a-z-]+))`", path.read_text())
    }
)


@pytest.fixture
def runbook_stack(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The stack the runbook names, its table holding an open payment-api breaker."""
    for service in ("CLOUDFORMATION", "DYNAMODB", "STS"):
        monkeypatch.setenv(f"AWS_ENDPOINT_URL_{service}", moto_server)
    table = f"runbook-{uuid.uuid4().hex[:8]}"
    template = table_stack(table)
    cloudformation = boto3.client("cloudformation", endpoint_url=moto_server)
    cloudformation.create_stack(StackName=STACK, TemplateBody=json.dumps(template))
    store = DynamoDBStore(table, boto3_client=servers.dynamodb_client(moto_server))
    breaker = CircuitBreaker("payment-api", store=store, config=BreakerConfig(), listeners=[])
    for _ in range(BreakerConfig().failure_threshold):
        breaker.check()
        breaker.record(success=False)
    assert breaker.state is State.OPEN  # as the runbook shows it
    try:
        yield table
    finally:
        cloudformation.delete_stack(StackName=STACK)


def test_the_docs_show_the_runbook() -> None:
    verbs = [shlex.split(line)[3] for line in RUNBOOK]
    assert verbs == ["list", "status", "open", "tune", "reset"]
    assert "fleetbreaker watch payment-api" in INLINE


@pytest.mark.usefixtures("runbook_stack")
def test_every_command_shown_exits_0_in_the_runbooks_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for line in RUNBOOK:
        # WHEN each command of the runbook runs as shown, THEN it exits 0
        assert cli.main(shlex.split(line)[1:]) == cli.EXIT_OK, (line, capsys.readouterr())
        out = capsys.readouterr().out
        if " open " in line:
            assert re.search(r"state\s+forced_open", out), out
        if " tune " in line:
            assert "failure_threshold=10, recovery_timeout=60.0" in out
    # AND the commands shown in prose run too, against the same stack (watch once)
    for command in INLINE:
        argv = ["--stack", STACK, *shlex.split(command)[1:]]
        if "watch" in argv:
            argv += ["--count", "1"]
        assert cli.main(argv) == cli.EXIT_OK, (command, capsys.readouterr())
