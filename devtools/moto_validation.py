"""moto's UpdateExpression checks, made once per expression instead of once per action, and
each expression's text read (tokens, lexical nodes, the update's tree) once per process
instead of once per request.

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

The reading: on every request moto splits an UpdateExpression into tokens, and a
ConditionExpression into lexical nodes, character by character with regular expressions, and
parses the update twice (once to check it, once to apply it). The store sends the same few
expressions again and again (its values travel apart, in ExpressionAttributeValues), and
that reading was most of an UpdateItem's cost: a census write on moto in-process took 20 ms
of CPU, 13 ms with each text read once. :func:`validate_once` also keeps what each text was
read into (a text moto refuses is read, and refused, every time) and hands each request its
own: a list over the same tokens and nodes (moto's parsers build their trees from them and
never change one), and a tree of its own for the update (moto's validator rewrites it).

The walk: moto's validator walks the update's tree once per check (ten of them), and for
each node it rebuilds the check's table of node types and handlers; then it deep-copies the
tree it was handed, which is already a copy of its own. :func:`validate_once` has each check
build its table once, walks the tree for the two checks made at the root only (above) not at
all, and copies the tree with pickle, as :func:`_parse_once` does. UpdateItem on moto
in-process: 13.5 ms of CPU, 7 ms after (224 of them in the store and report contracts).
"""

from __future__ import annotations

import functools
import pickle
from collections import deque
from collections.abc import Callable
from typing import Any

ENV = "FLEETBREAKER_MOTO_VALIDATE_ONCE"  # set to "1" in a moto server's environment


def _at_the_root(check: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def checked(self: Any, node: Any) -> Any:
        return node if node.parent is not None else check(self, node)

    checked.__wrapped__ = check  # type: ignore[attr-defined]
    return checked


READ_CACHE_SIZE = 4096  # distinct expression texts kept per process


def _read_once(make_list: Callable[[str], list[Any]]) -> Callable[[str], list[Any]]:
    """An UpdateExpression tokenizer that reads each text once."""
    read = functools.lru_cache(maxsize=READ_CACHE_SIZE)(lambda text: tuple(make_list(text)))

    def tokens(text: str) -> list[Any]:
        return list(read(text))

    tokens.__wrapped__ = make_list  # type: ignore[attr-defined]
    tokens.cache_info = read.cache_info  # type: ignore[attr-defined]
    return tokens


def _lex_once(lex: Callable[[Any], deque[Any]]) -> Callable[[Any], deque[Any]]:
    """A ConditionExpression lexer that reads each text once (its nodes are namedtuples)."""
    nodes_of: dict[str, tuple[Any, ...]] = {}

    def lexed(parser: Any) -> deque[Any]:
        text = parser.condition_expression
        nodes = nodes_of.get(text)
        if nodes is None:
            nodes = tuple(lex(parser))
            if len(nodes_of) < READ_CACHE_SIZE:
                nodes_of[text] = nodes
        return deque(nodes)

    lexed.__wrapped__ = lex  # type: ignore[attr-defined]
    return lexed


def _parse_once(make: Callable[[str], Any]) -> Callable[[str], Any]:
    """An UpdateExpression parser that parses each text once and hands each request a tree
    of its own (moto's validator rewrites the tree it is given): the tree is kept pickled,
    and unpickled per request at a fifth of a parse's cost."""
    trees: dict[str, bytes] = {}

    def parsed(text: str) -> Any:
        kept = trees.get(text)
        if kept is not None:
            return pickle.loads(kept)  # bytes this function pickled
        tree = make(text)
        if len(trees) < READ_CACHE_SIZE:
            trees[text] = pickle.dumps(tree)
        return tree

    parsed.__wrapped__ = make  # type: ignore[attr-defined]
    return parsed


def _table(traverser: Any) -> tuple[dict[type, Callable[[Any], Any]], tuple[type, ...]]:
    """The traverser's node types and their handlers, built once per traverser (moto built
    them for every node it visited: each check's table is fixed when the check is made)."""
    table = traverser.__dict__.get("_handlers_by_type")
    if table is None:
        handlers = traverser._processing_map()
        table = traverser.__dict__["_handlers_by_type"] = (handlers, tuple(handlers))
    return table  # type: ignore[no-any-return]


def _nodes_to_be_processed(self: Any) -> tuple[type, ...]:
    return _table(self)[1]


def _process(self: Any, node: Any) -> Any:
    for node_type, handler in _table(self)[0].items():
        if isinstance(node, node_type):
            return handler(node)
    return None


def _root_only(self: Any, node: Any) -> Any:
    """A check made at the root only (:func:`_at_the_root`): the root, processed; no walk
    through nodes where it does nothing."""
    return self.process(node) if isinstance(node, self.nodes_to_be_processed()) else node


def _copied_by_pickle(init: Callable[..., None]) -> Callable[..., None]:
    """moto's Validator.__init__, copying the tree by pickle (a fifth of deepcopy's cost):
    the copy is as deep, and the validator rewrites it as before."""

    def __init__(self: Any, expression: Any, *args: Any, **kwargs: Any) -> None:
        init(self, None, *args, **kwargs)
        self.node_to_validate = pickle.loads(pickle.dumps(expression))

    __init__.__wrapped__ = init  # type: ignore[attr-defined]
    return __init__


def validate_once() -> None:
    """Patch moto's two UpdateExpression checks, and its reading of UpdateExpression and
    ConditionExpression texts, in this process (idempotent)."""
    from moto.dynamodb import comparisons
    from moto.dynamodb.parsing import ast_nodes, expressions, tokens, validators

    readers: list[tuple[Any, str, Callable[[Any], Any]]] = [
        (tokens.ExpressionTokenizer, "make_list", _read_once),
        (vars(expressions)["UpdateExpressionParser"], "make", _parse_once),
    ]
    for owner, name, wrap in readers:
        # Class methods: the class's own function, replaced by a static one that wraps it.
        if not hasattr(vars(owner)[name].__func__, "__wrapped__"):
            setattr(owner, name, staticmethod(wrap(getattr(owner, name))))
    owner, name = comparisons.ConditionExpressionParser, "_lex_condition_expression"
    if not hasattr(vars(owner)[name], "__wrapped__"):
        setattr(owner, name, _lex_once(vars(owner)[name]))

    for owner, name in (
        (validators.ActionCountValidator, "verify_action_counts"),
        (validators.OverlappingPathsValidator, "check_for_overlapping_paths"),
    ):
        check = vars(owner)[name]
        if not hasattr(check, "__wrapped__"):
            setattr(owner, name, _at_the_root(check))
            owner.traverse = _root_only

    traverser = ast_nodes.DepthFirstTraverser  # type: ignore[attr-defined]
    if vars(traverser)["process"] is not _process:
        traverser.nodes_to_be_processed = _nodes_to_be_processed
        traverser.process = _process
    init = vars(validators.Validator)["__init__"]
    if not hasattr(init, "__wrapped__"):
        validators.Validator.__init__ = _copied_by_pickle(init)  # type: ignore[method-assign]
