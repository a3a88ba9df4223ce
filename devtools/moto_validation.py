"""moto's UpdateExpression checks, made once per expression instead of once per action.

moto 5.2 checks an UpdateItem's expression (at most one SET, ADD, REMOVE and DELETE clause;
no two paths overlapping) at every node of the parsed expression that is an
UpdateExpression, and each action list is one: every check walks the whole subtree below
its node, so the cost grows with the square of the actions. The store's writes set tens of
attributes, and moto spent most of an UpdateItem there (31 contract tests on moto
in-process: 12.0 s of CPU, 9.3 s with the checks made once).

:func:`validate_once` makes each check at the root only, where every action of the
expression is in view: an expression that fails a check at some node fails it at the root.
The error raised can differ only in which of several violations it names. Applied by the
test suite to moto in-process and to the moto servers its fixtures start (``MotoServer(
validate_once=True)``); the demo and the benchmarks run moto as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ENV = "FLEETBREAKER_MOTO_VALIDATE_ONCE"  # set to "1" in a moto server's environment


def _at_the_root(check: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def checked(self: Any, node: Any) -> Any:
        return node if node.parent is not None else check(self, node)

    checked.__wrapped__ = check  # type: ignore[attr-defined]
    return checked


def validate_once() -> None:
    """Patch moto's two UpdateExpression checks in this process (idempotent)."""
    from moto.dynamodb.parsing import validators

    for owner, name in (
        (validators.ActionCountValidator, "verify_action_counts"),
        (validators.OverlappingPathsValidator, "check_for_overlapping_paths"),
    ):
        check = vars(owner)[name]
        if not hasattr(check, "__wrapped__"):
            setattr(owner, name, _at_the_root(check))
