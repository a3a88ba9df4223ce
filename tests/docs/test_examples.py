"""Every Python example in README.md and docs/*.md runs as written.

Each block runs as a module of its own in the world tests/docs/conftest.py describes (a local
DynamoDB with the tables the examples name, CIRCUIT_BREAKER_TABLE, the reader's `myapp`).
A block that defines `lambda_handler` is then invoked once, as Lambda would. A block that is
deliberately a fragment says so on its first line (`# fragment: <why>`), visible to readers;
it must still parse. The migration guide's blocks have a test of their own.
"""

from __future__ import annotations

import ast

import pytest

from devtools.lambda_context import FakeLambdaContext
from tests.docs.blocks import DOCS, Block, every_block
from tests.docs.conftest import run_block

GUIDE = "migrating-from-powertools.md"
GUIDE_PATH = DOCS[0].parent / "docs" / GUIDE
EXAMPLES = [block for block in every_block("python") if block.path.name != GUIDE]
RUNNABLE = [block for block in EXAMPLES if block.fragment is None]
FRAGMENTS = [block for block in EXAMPLES if block.fragment is not None]


def test_the_docs_have_examples_and_most_run() -> None:
    assert len(RUNNABLE) >= 6
    assert len(FRAGMENTS) <= len(RUNNABLE)


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda block: block.where)
@pytest.mark.usefixtures("doc_world")
def test_the_example_runs_as_written(block: Block) -> None:
    # GIVEN the example, WHEN it runs as written, THEN it raises nothing
    module = run_block(block)
    # AND its handler, if it has one, answers an invocation
    handler = module.get("lambda_handler")
    if handler is not None:
        handler({"sku": "A-1"}, FakeLambdaContext())


def test_every_fragment_says_why_and_parses() -> None:
    for block in FRAGMENTS:
        assert block.fragment is not None, block.where
        assert len(block.fragment) > 10, f"{block.where}: say why it cannot run"
        ast.parse(block.code, block.where)


def test_a_fragment_is_known_by_its_first_line() -> None:
    # GIVEN a block whose first line says it is a fragment, and one that says so later
    marked = Block(GUIDE_PATH, 1, "python", "# fragment: needs your VPC's cache\nstore.load()\n")
    later = Block(GUIDE_PATH, 1, "python", "x = 1\n# fragment: too late\n")

    # THEN only the first is a fragment, with its reason
    assert marked.fragment == "needs your VPC's cache"
    assert later.fragment is None
