"""The package layout is the architecture: layers import one way, no module imports in a circle,
and modules stay small. The import graph is read from the sources (every ``import``, including
those inside functions), so a lazy import cannot hide a cycle."""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ofindex")

#: What each layer may import besides itself. ``formats`` and ``storage`` know nothing of the
#: layers above them; ``index`` and ``read`` use both (``read`` also builds missing indexes);
#: ``cli`` and ``integrations`` use everything; ``decode`` and ``shuffle`` stand alone.
ALLOWED = {
    "storage": {"errors"},
    "formats": {"errors", "storage"},
    "index": {"errors", "_accel", "_threads", "storage", "formats"},
    "read": {"errors", "_accel", "_threads", "storage", "formats", "index"},
    "decode": {"errors", "_accel", "_threads", "proto"},
    "shuffle": set(),
    "integrations": {"errors", "storage", "formats", "index", "read", "decode", "shuffle"},
    "cli": {"", "errors", "_accel", "storage", "formats", "index", "read", "decode", "shuffle",
            "proto"},
    "errors": set(),
    "_accel": {"_native"},
    "_threads": set(),
}
MAX_LINES = 400


def _modules() -> dict[str, str]:
    """Module name -> file, for every Python module of the package."""
    out = {}
    for directory, _, files in os.walk(ROOT):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
            out[rel.removesuffix(".__init__")] = path
    return out


def _imports(module: str, path: str, known: set[str]) -> set[str]:
    """Modules of the package that ``module`` imports, anywhere in its source."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
    return {m for m in found if m in known or m == "ofindex._native"}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods) | {"ofindex._native"}  # the compiled module
    return {m: _imports(m, p, known) - {m} for m, p in mods.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_layers_import_one_way():
    bad = []
    for module, targets in _graph().items():
        layer = _layer(module)
        if layer in ("", "__main__", "proto"):
            continue  # the public API, `python -m ofindex` and generated code
        for t in targets:
            other = _layer(t)
            if other != layer and other not in ALLOWED[layer]:
                bad.append(f"{module} -> {t}")
    assert not bad, "imports against the layering:\n" + "\n".join(sorted(bad))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_cycle_detector_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("module", sorted(_modules()))
def test_modules_stay_small(module):
    path = _modules()[module]
    if os.sep + "proto" + os.sep in path:
        return  # generated code
    with open(path, encoding="utf-8") as f:
        n = sum(1 for _ in f)
    assert n <= MAX_LINES, f"{path} has {n} lines: split it (one concept per module)"


def test_public_api_names():
    import ofindex
    import ofindex.decode
    import ofindex.integrations.torch
    import ofindex.shuffle

    for name in ("open", "build_index", "Writer", "Dataset", "OfindexError", "RecordFormat"):
        assert name in ofindex.__all__ and hasattr(ofindex, name)
    assert callable(ofindex.decode.BatchDecoder)
    assert callable(ofindex.shuffle.GlobalShuffleSampler)
    assert callable(ofindex.integrations.torch.TorchDataset)
