"""Where things are, for every test and kit module: the repository, its tests, their data.

Paths are built here alone, never from a test file's own location, so a test file works
wherever it sits under tests/ (and moves without edits).
"""

from __future__ import annotations

import os

KIT = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(KIT)
ROOT = os.path.dirname(TESTS)
PACKAGE = os.path.join(ROOT, "ofindex")
TOOLS = os.path.join(ROOT, "tools")
DOCS = os.path.join(ROOT, "docs")
CONFORMANCE = os.path.join(TESTS, "conformance")
GOLDEN = os.path.join(TESTS, "golden")


def pythonpath(*first: str) -> str:
    """The ``PYTHONPATH`` of a child Python that imports this tree's ofindex and the kit
    (``from tests.kit import ...``).

    Args:
        first: directories searched before the repository, in this order.

    Returns:
        ``first``, the repository root, then the caller's own ``PYTHONPATH`` if it has one.
    """
    inherited = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join([*first, ROOT, *([inherited] if inherited else [])])
