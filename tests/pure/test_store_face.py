"""The store's two faces, checked over its source: the engine's statements are ``Store``'s own
methods, the operator's reads (what the command line, the panel and the views show) are
``store.reads`` (``OperatorReads``); each operation has one name on one face, and the engine
(worker, GPU side, services) never reads through the operator's face.

Parses the source (imports the classes only to list their methods); no database.
"""

from __future__ import annotations

import ast
import inspect
import pathlib
import textwrap
import unittest

from rowfleet.store.base import Store
from rowfleet.store.core import StoreCore
from rowfleet.store.reads import OperatorReads
from support import ROOT

ENGINE = ("worker", "gpu", "services")


def public_methods(cls: type) -> dict[str, ast.FunctionDef]:
    """The public methods ``cls`` defines or inherits from rowfleet's store parts, by name, as
    syntax; the transaction interface every part builds on (``StoreCore``) is no operation."""
    found: dict[str, ast.FunctionDef] = {}
    for owner in reversed(cls.__mro__):
        if not owner.__module__.startswith("rowfleet.") or owner is StoreCore:
            continue
        for name, value in vars(owner).items():
            if not name.startswith("_") and inspect.isfunction(value):
                found[name] = ast.parse(textwrap.dedent(inspect.getsource(value))).body[0]
    return found


def wrapped(method: ast.FunctionDef, face: set[str]) -> str | None:
    """The public method of ``face`` that ``method`` only hands on to (its body, past the
    docstring, one ``return`` of a call of it, maybe indexed), or None."""
    body = [node for node in method.body
            if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    value = body[0].value
    value = value.value if isinstance(value, ast.Subscript) else value
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
        return None
    target = value.func
    receiver = target.value
    on_self = isinstance(receiver, ast.Name) and receiver.id == "self"
    on_store = isinstance(receiver, ast.Attribute) and receiver.attr == "_store"
    return target.attr if (on_self or on_store) and target.attr in face and target.attr != method.name else None


class StoreFaceTest(unittest.TestCase):
    def test_each_operation_has_one_name_on_one_face(self):
        engine, operator = public_methods(Store), public_methods(OperatorReads)
        self.assertEqual(sorted(set(engine) & set(operator)), [], "a name on both faces")
        names = set(engine) | set(operator)
        for face in (engine, operator):
            for name, method in sorted(face.items()):
                with self.subTest(method=name):
                    self.assertIsNone(wrapped(method, names),
                                      f"{name} only hands on to another public method: one operation, two names")

    def test_a_wrapper_beside_its_step_is_found(self):
        source = '''
class Part:
    def switch_in_force(self, project, host, queue):
        """One queue's switch."""
        return self.switches_in_force(project, host, (queue,))[queue]
'''
        method = ast.parse(source).body[0].body[0]
        self.assertEqual(wrapped(method, {"switch_in_force", "switches_in_force"}), "switches_in_force")
        self.assertIsNone(wrapped(method, {"switch_in_force"}), "a private or unknown target is no second name")

    def test_the_engine_reads_nothing_through_the_operators_face(self):
        package = pathlib.Path(ROOT, "src", "rowfleet")
        for folder in ENGINE:
            for path in sorted((package / folder).glob("*.py")):
                for node in ast.walk(ast.parse(path.read_text())):
                    with self.subTest(path=path.name):
                        self.assertFalse(isinstance(node, ast.Attribute) and node.attr == "reads",
                                         f"{folder}/{path.name}:{getattr(node, 'lineno', '?')} reads the operator's face")


if __name__ == "__main__":
    unittest.main()
