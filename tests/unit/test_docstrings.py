"""The package's docstring examples run as doctests: an example that drifts fails here."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from types import ModuleType

import pytest

import fleetbreaker


def _modules() -> list[str]:
    names = [fleetbreaker.__name__]
    for info in pkgutil.walk_packages(fleetbreaker.__path__, prefix="fleetbreaker."):
        names.append(info.name)
    return sorted(names)


def _globs(module: ModuleType) -> dict[str, object]:
    # Examples use the public names as a user would after `from fleetbreaker import ...`.
    names = {name: getattr(fleetbreaker, name) for name in fleetbreaker.__all__}
    return {**names, **vars(module)}


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(
        module, globs=_globs(module), optionflags=doctest.ELLIPSIS, verbose=False
    )
    assert failures == 0


def test_the_package_has_examples_to_run() -> None:
    finder = doctest.DocTestFinder()
    examples = sum(
        len(test.examples)
        for name in _modules()
        for test in finder.find(importlib.import_module(name))
    )
    assert examples >= 10
