"""The examples in the package's docstrings, every module's: a module that gains a ``>>>``
is run here without a test naming it, so an example cannot go stale unread."""

from __future__ import annotations

import doctest
import importlib
import os
import pkgutil

import rowfleet

PACKAGE = os.path.dirname(rowfleet.__file__)


def modules_with_examples() -> list[str]:
    """Every module of the package whose source holds an example (``>>>``), by name."""
    names = []
    for found in pkgutil.walk_packages([PACKAGE], prefix="rowfleet."):
        path = os.path.join(PACKAGE, *found.name.split(".")[1:])
        path = os.path.join(path, "__init__.py") if found.ispkg else path + ".py"
        with open(path, encoding="utf-8") as handle:
            if ">>>" in handle.read():
                names.append(found.name)
    return sorted(names)


def load_tests(loader, tests, pattern):
    for name in modules_with_examples():
        tests.addTests(doctest.DocTestSuite(importlib.import_module(name)))
    return tests
