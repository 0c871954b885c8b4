"""The package layout is the architecture: layers import one way, no module imports in a circle,
no function is more complex than the cap ruff enforces, no ``Any`` stands for one of our own
classes, and names do not repeat across packages. The import graph is read from the sources
(every ``import``, including those inside functions), so a lazy import cannot hide a cycle."""

from __future__ import annotations

import ast
import os

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ofindex")

#: What each layer may import besides itself. ``formats`` and ``storage`` know nothing of the
#: layers above them; ``deflate`` (inflating and deflating for random access) uses both;
#: ``index`` (making indexes) and ``read`` (using them) use those three and not each other
#: (``ofindex.open``, in the top-level ``opening`` module, joins them for ``build_missing``);
#: ``cli`` and ``integrations`` use everything; ``decode`` and ``shuffle`` stand alone (but for
#: the errors they raise).
ALLOWED = {
    "storage": {"errors"},
    "formats": {"errors", "storage"},
    "deflate": {"errors", "_accel", "_threads", "storage", "formats"},
    "index": {"errors", "_accel", "_threads", "storage", "formats", "deflate"},
    "read": {"errors", "_accel", "_threads", "storage", "formats", "deflate"},
    "decode": {"errors", "_accel", "_threads", "proto"},
    "encode": {"errors", "_accel", "formats", "decode"},  # framed blocks: formats.crc
    "schema": {"errors", "decode", "proto", "read"},
    "convert": {"errors", "storage", "formats", "index", "read", "decode", "encode", "write",
                "opening"},
    "write": {"errors", "storage", "formats", "index", "decode", "encode"},
    # "events": TensorBoard logs, indexed in the build's scan and read through datasets
    "events": {"errors", "storage", "formats", "index", "read", "decode", "proto", "opening"},
    "shuffle": {"errors"},  # StateError for saved states it refuses
    # "planning": a plan opens the dataset for its shape, and models reads and orders
    "planning": {"errors", "storage", "formats", "read", "shuffle", "opening"},
    # "opening": an integration that takes paths (Ray's read_ofindex) opens them as the CLI does
    "integrations": {"errors", "storage", "formats", "index", "read", "decode", "shuffle",
                     "opening"},
    "cli": {"", "errors", "_accel", "storage", "formats", "index", "read", "decode", "shuffle",
            "proto", "opening", "encode", "write", "schema", "convert", "planning", "events"},
    "errors": set(),
    "_accel": {"_native"},
    "_threads": set(),
}
#: The top-level modules that join layers for the public API.
TOP_LEVEL = ("", "__main__", "proto", "opening", "growing")
#: The complexity cap (ruff's C901); the suite runs ruff, this keeps the setting in place.
MAX_COMPLEXITY = 15


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
        if layer in TOP_LEVEL:
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


def test_the_complexity_cap_is_configured_and_kept():
    """ruff enforces C901 (max-complexity in pyproject.toml) when the suite runs it; here the
    setting itself is checked, and the code against it with ruff's own counter."""
    import subprocess
    import sys

    import tomllib

    root = os.path.dirname(ROOT)
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        lint = tomllib.load(f)["tool"]["ruff"]["lint"]
    assert "C901" in lint["select"] and lint["mccabe"]["max-complexity"] == MAX_COMPLEXITY
    from helpers import need

    need("ruff", "dev")
    ruff = os.path.join(os.path.dirname(sys.executable), "ruff")
    done = subprocess.run([ruff, "check", "--select", "C901", "--output-format", "concise",
                           ROOT], capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stdout


def _any_standing_for_ours() -> list[str]:
    """Module-level aliases of ``Any`` and parameters typed ``Any`` whose names say they are
    one of our classes (a dataset, a storage, a shard, a sidecar, a table …)."""
    ours = {"ds", "dataset", "reads", "src", "source", "table", "storage", "shard", "sidecar",
            "sc", "storages", "location"}
    bad = []
    for module, path in _modules().items():
        if ".proto" in module:
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                    and node.value.id == "Any"):
                bad.append(f"{module}: {ast.unparse(node)}")
            elif isinstance(node, ast.arg) and node.annotation is not None and (
                    ast.unparse(node.annotation) == "Any" and node.arg in ours):
                bad.append(f"{module}: parameter {node.arg}: Any")
    return bad


def test_no_any_stands_for_our_classes():
    assert _any_standing_for_ours() == []


def test_module_names_do_not_repeat_across_packages():
    seen: dict[str, str] = {}
    clashes = []
    for module in sorted(_modules()):
        name = module.rsplit(".", 1)[-1]
        if name in ("__init__", "__main__") or ".proto" in module or module.count(".") < 2:
            continue
        if name in seen:
            clashes.append(f"{seen[name]} and {module}")
        seen[name] = module
    assert clashes == []


def test_private_helpers_have_telling_names():
    """No two modules define a private function of the same vague name (``_plan``, ``_take``,
    ``_run`` …): a name says what it plans or takes."""
    vague = {"_plan", "_take", "_run", "_do", "_go", "_handle", "_process", "_place"}
    found: dict[str, list[str]] = {}
    for module, path in _modules().items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in vague:
                found.setdefault(node.name, []).append(module)
    assert found == {}


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


def test_every_error_and_warning_is_in_errors_and_exported():
    """Every exception or warning class the library defines lives in ``ofindex.errors`` (one
    place a caller looks), derives from ``OfindexError`` or ``OfindexWarning`` (one ``except``
    or one warnings filter catches them all), and is exported from ``ofindex`` (``StateError``,
    ``ClusterError`` and four warnings were defined but not exported). Classes private to a
    module (a leading underscore, or internal signals caught by their callers and never
    raised to a user: the decoder's ``WireError``, inflating's ``InflateFailure``, the cache
    database's ``Unusable``) and the CLI's own ``UsageError`` are the exceptions."""
    import ofindex
    from ofindex import errors

    internal = {"WireError", "InflateFailure", "Unusable", "UsageError"}
    misplaced = []
    for module, path in _modules().items():
        with open(path, encoding="utf-8") as source:
            tree = ast.parse(source.read())
        for node in tree.body:
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                continue
            bases = {ast.unparse(base) for base in node.bases}
            if any(b.endswith(("Error", "Exception", "Warning")) for b in bases) and \
                    module != "ofindex.errors" and node.name not in internal:
                misplaced.append(f"{module}.{node.name}")
    assert not misplaced, f"define these in ofindex/errors.py: {misplaced}"
    for name, value in vars(errors).items():
        if isinstance(value, type) and issubclass(value, BaseException) and \
                value.__module__ == "ofindex.errors":
            assert issubclass(value, (errors.OfindexError, errors.OfindexWarning)), name
            assert getattr(ofindex, name, None) is value and name in ofindex.__all__, \
                f"ofindex.{name} is not exported"
