"""Tests do not skip. A skipped test proves nothing: what a machine lacks (the compiled
module, a CPU instruction, a system tool, a server binary) fails the test saying what to
install (``tests/kit/helpers.require``). The one skip left is issue 31's: run by hand without
an optional Python extra, a test that needs it skips naming the ``pip install``
(``tests/kit/helpers.need``); the test command installs every extra, and in CI a skip fails
the run (``tests/conftest.py``)."""

from __future__ import annotations

import ast
import os

from tests.kit import paths

#: The calls and markers that skip a test or expect it to fail (``pytest.<name>``,
#: ``pytest.mark.<name>``, ``unittest.<name>``).
SKIPPING = {"skip", "skipif", "importorskip", "xfail", "skipTest", "skipUnless", "skipIf"}
#: Whose attributes those are (a ``tf.data`` dataset's ``skip`` is not a test's).
OWNERS = {"pytest", "pytest.mark", "unittest", "self"}


def _skips(source: str) -> list[str]:
    """Each place in ``source`` that skips a test (or marks one to fail), in line order:
    ``"line N in F: text"``, F the top-level function (or class) it is in, or ``module``."""
    found = []
    for top in ast.parse(source).body:
        where = getattr(top, "name", "module")
        found += [(node.lineno, f"line {node.lineno} in {where}: {ast.unparse(node)}")
                  for node in ast.walk(top)
                  if isinstance(node, ast.Attribute) and node.attr in SKIPPING
                  and ast.unparse(node.value) in OWNERS]
    return [text for _, text in sorted(found)]


def test_the_skip_detector_finds_each_kind():
    source = ("import pytest, unittest\n"
              "pytest.importorskip('torch')\n"
              "@pytest.mark.skipif(True, reason='x')\n"
              "def test_a(): pytest.skip('y')\n"
              "@unittest.skip('z')\n"
              "def test_b(self): self.skipTest('w')\n")
    assert [line.split(":")[0] for line in _skips(source)] == [
        "line 2 in module", "line 3 in test_a", "line 4 in test_a", "line 5 in test_b",
        "line 6 in test_b"]
    assert _skips("from tests.kit.helpers import need\nneed('torch')\nds.skip(3)\n") == []


def test_no_test_skips():
    found = {}
    for directory, _, names in os.walk(paths.TESTS):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as f:
                    skips = _skips(f.read())
                skips = [text.split(" ", 2)[2] for text in skips]  # without the line
                if skips:
                    found[os.path.relpath(path, paths.TESTS)] = skips
    # the only one: need's skip of a missing optional extra (issue 31)
    assert found == {os.path.join("kit", "helpers.py"): ["in need: pytest.importorskip"]}
