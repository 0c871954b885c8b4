"""Every public function and class of the library's modules has a docstring (the public API's
full Args/Returns/Raises convention is checked by tests/docs/test_api_docs.py). Methods are
left out: an override is documented by the method it overrides."""

from __future__ import annotations

import ast
import os

from tests.kit import paths


def _undocumented(source: str) -> list[str]:
    """The top-level public functions and classes of ``source`` without a docstring (an
    ``@overload`` stub and a class that takes its ``__doc__`` from another are documented)."""
    found = []
    for node in ast.parse(source).body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if node.name.startswith("_") or ast.get_docstring(node) is not None:
            continue
        if any(ast.unparse(d).endswith("overload") for d in node.decorator_list):
            continue
        if isinstance(node, ast.ClassDef) and any(
                isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "__doc__"
                for s in node.body):
            continue
        found.append(f"line {node.lineno}: {node.name}")
    return found


def test_the_detector_finds_one():
    source = ('def a():\n    """Doc."""\n\ndef b():\n    pass\n\nclass C:\n    x = 1\n\n'
              'class D:\n    __doc__ = C.__doc__\n\ndef _e():\n    pass\n')
    assert _undocumented(source) == ["line 4: b", "line 7: C"]


def test_every_public_function_and_class_is_documented():
    library = os.path.join(paths.ROOT, "ofindex")
    found = {}
    for directory, _, names in os.walk(library):
        inside = os.path.relpath(directory, library)
        if any(part.startswith("_") for part in inside.split(os.sep) if part != "."):
            continue
        for name in names:
            if not name.endswith(".py") or name.endswith("_pb2.py") or (
                    name.startswith("_") and name not in ("__init__.py", "__main__.py")):
                continue
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                missing = _undocumented(f.read())
            if missing:
                found[os.path.join(inside, name)] = missing
    assert found == {}
