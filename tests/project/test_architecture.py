"""The package layout is the architecture: layers import one way, no module imports in a circle,
no function is more complex than the cap ruff enforces, no ``Any`` stands for one of our own
classes, names do not repeat across packages, and tests/ mirrors the packages. The import
graph is read from the sources (every ``import``, including those inside functions), so a lazy
import cannot hide a cycle."""

from __future__ import annotations

import ast
import os

from tests.kit import paths
from tests.kit.complexity import MAX_COMPLEXITY

ROOT = paths.PACKAGE

#: What each layer may import besides itself. ``transport`` (the network: requests, their
#: policy and failures) knows nothing of files or datasets; ``formats`` and ``storage`` (which
#: uses ``transport``) know nothing of the layers above them; ``deflate`` (inflating and
#: deflating for random access) uses both; ``cache`` (the read-through chain of caches, keyed
#: by the data's identity) uses them too and knows nothing of the reads that call it;
#: ``index`` (making indexes) and ``read`` (using them) use those three and not each other
#: (``ofindex.open``, in the top-level ``opening`` module, joins them for ``build_missing``),
#: and both use ``columns`` (the column sidecars one writes and the other queries);
#: ``cli`` and ``integrations`` use everything; ``decode`` and ``shuffle`` stand alone (but for
#: the errors they raise).
ALLOWED = {
    "transport": {"errors"},
    "storage": {"errors", "transport"},
    "formats": {"errors", "storage"},
    "deflate": {"errors", "_accel", "_threads", "storage", "formats"},
    "index": {"errors", "_accel", "_threads", "storage", "formats", "deflate", "columns"},
    "cache": {"errors", "storage", "formats"},
    "read": {"errors", "_accel", "_threads", "storage", "formats", "deflate", "cache",
             "columns"},
    # "columns": the column sidecars and key indexes (what index writes and read queries);
    # their pages inflate through deflate's choice of inflater (ISA-L where installed)
    "columns": {"errors", "_accel", "storage", "formats", "deflate", "decode"},
    "decode": {"errors", "_accel", "_threads", "proto"},
    "encode": {"errors", "_accel", "formats", "decode"},  # framed blocks: formats.crc
    "schema": {"errors", "decode", "proto", "read"},
    "convert": {"errors", "storage", "formats", "index", "read", "decode", "encode", "write",
                "opening"},
    # "write": both writers (one file indexed as it is written, and sharded datasets); a
    # compressed file is deflated as it is written, an appended one indexed first
    "write": {"errors", "storage", "formats", "deflate", "index", "decode", "encode"},
    # "tfds": a TFDS builder directory opened through ofindex.open, decoded by ofindex.decode;
    # its step layout's sums are the index scan's CRCs of spans (index.scan.span_crcs)
    "tfds": {"errors", "_threads", "transport", "decode", "read", "opening", "index"},
    # "events": TensorBoard logs, indexed in the build's scan and read through datasets
    "events": {"errors", "storage", "formats", "index", "read", "decode", "proto", "opening"},
    "shuffle": {"errors"},  # StateError for saved states it refuses
    # "planning": a plan opens the dataset for its shape, and models reads and orders
    "planning": {"errors", "storage", "formats", "read", "cache", "shuffle", "opening"},
    # "opening": an integration that takes paths (Ray's read_ofindex) opens them as the CLI does
    # "encode": the column map's way back (records to the Arrow columns they were written from);
    # "planning": the engines' read tasks are the split planner's partitions; "write": their
    # write transforms stage shards from many tasks and publish them at the end
    "integrations": {"errors", "storage", "formats", "index", "read", "decode", "encode",
                     "shuffle", "opening", "tfds", "planning", "write", "schema"},
    "cli": {"", "errors", "_accel", "transport", "storage", "formats", "index", "read", "decode",
            "shuffle", "proto", "opening", "encode", "write", "schema", "convert", "planning",
            "tfds", "columns", "events"},
    "errors": set(),
    "_accel": {"_native"},
    "_threads": set(),
}
#: The top-level modules that join layers for the public API.
TOP_LEVEL = ("", "__main__", "proto", "opening", "growing")


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


#: Inside ``read``, by wing: the remote wing (``read/remote/``: the rounds that fetch the pieces
#: of index a read lacks, paged sidecars, the files the data cache holds whole) and the
#: sequential read paths (``read/sequential/``: a shard streamed, inflated in one pass or cut
#: out of its map, and the batches they yield) both build on the dataset's core at ``read/``
#: (its shards, shard table and record checks) and know nothing of each other or of the
#: accesses; the accesses (``read/access/``, one per shard) hand a read to either; the core's
#: upper modules (the dataset, opening, iteration) use all three. Imports inside one wing, and
#: the order of the core's own modules, are left to ``test_no_import_cycles``.
READ_WINGS_ALLOWED = {
    "read.remote": {"read"},
    "read.sequential": {"read"},
    "read.access": {"read", "read.remote", "read.sequential"},
}


def _read_wing(module: str) -> str:
    """``read.<wing>`` for a wing of ``ofindex.read`` or one of its modules, ``read`` for the
    core."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "read" and f"read.{parts[2]}" in READ_WINGS_ALLOWED:
        return f"read.{parts[2]}"
    return "read"


def _against_the_read_wings(graph: dict[str, set[str]]) -> list[str]:
    """The imports between ``ofindex.read``'s wings against :data:`READ_WINGS_ALLOWED`."""
    bad = []
    for module, targets in graph.items():
        wing = _read_wing(module)
        if _layer(module) != "read" or wing not in READ_WINGS_ALLOWED:
            continue
        bad += [f"{module} -> {target}" for target in targets
                if _layer(target) == "read" and _read_wing(target) != wing
                and _read_wing(target) not in READ_WINGS_ALLOWED[wing]]
    return sorted(bad)


def test_the_read_wings_import_one_way():
    assert _against_the_read_wings(_graph()) == [], "imports against the read wings"


def test_the_read_wing_rule_finds_an_import_the_wrong_way():
    graph = {"ofindex.read.remote.pages": {"ofindex.read.sequential.streaming",
                                           "ofindex.read.shards", "ofindex.read.access"},
             "ofindex.read.sequential.streaming": {"ofindex.read.access.maps"},
             "ofindex.read.access.maps": {"ofindex.read.remote.pages",
                                          "ofindex.read.sequential.streaming"},
             "ofindex.read.dataset": {"ofindex.read.access"}}
    assert _against_the_read_wings(graph) == [
        "ofindex.read.remote.pages -> ofindex.read.access",
        "ofindex.read.remote.pages -> ofindex.read.sequential.streaming",
        "ofindex.read.sequential.streaming -> ofindex.read.access.maps"]


#: The libraries that speak to the network: only ``ofindex/transport/`` imports them (the rest
#: of the library reaches a store through it), so that the requests, their policy and the
#: libraries' options are decided in one layer.
NETWORK_LIBRARIES = ("fsspec", "s3fs", "gcsfs", "adlfs", "aiohttp", "botocore", "aiobotocore",
                     "yarl", "google.auth", "azure", "requests", "urllib3", "obstore")


def test_only_the_transport_imports_the_network_libraries():
    bad = []
    for module, path in _modules().items():
        if _layer(module) == "transport":
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        bad += [f"{module}:{node.lineno}: {name}" for node in ast.walk(tree)
                for name in _imported(node)
                if any(name == lib or name.startswith(lib + ".") for lib in NETWORK_LIBRARIES)]
    assert bad == [], "network libraries imported outside ofindex/transport/:\n" + "\n".join(bad)


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
    from tests.kit.helpers import need

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
    database's ``Unusable``, the transport's ``RequestFailure``, which hands a failure past
    gcsfs's retry loop to our policy) and the CLI's own ``UsageError`` are the exceptions."""
    import ofindex
    from ofindex import errors

    internal = {"WireError", "InflateFailure", "Unusable", "UsageError", "RequestFailure"}
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


# -- private names and the compiled module -----------------------------------------------------
#: Names with a leading underscore that are public API of the standard library's named tuples.
#: namedtuple's API, and fsspec's: ``_strip_protocol`` is the classmethod its filesystems
#: document for turning a URL into a path
_PUBLIC_UNDERSCORED = {"_replace", "_asdict", "_fields", "_make", "_field_defaults",
                       "_strip_protocol"}


def _owned_names(tree: ast.AST) -> set[str]:
    """Every name a module defines or assigns (functions, classes, variables, attributes it
    sets, strings such as ``__slots__`` entries): its own private names."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    return names


def _private_reads(source: str) -> list[str]:
    """``something._name`` in ``source`` where ``_name`` is private (one leading underscore,
    not a dunder) and defined nowhere in that module, and ``something`` is not ``self`` or
    ``cls``: a read of another module's (or library's) private field."""
    tree = ast.parse(source)
    own = _owned_names(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if (not name.startswith("_") or name.startswith("__") or name in _PUBLIC_UNDERSCORED
                or (name.endswith("_") and len(name) > 2) or name in own):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reads_another_module_s_private_names():
    """Nowhere in the library (the modules protoc generates, ``*_pb2``, are not ours to change
    and are not counted)."""
    found = {}
    for module, path in _modules().items():
        if module.endswith("_pb2"):
            continue
        with open(path, encoding="utf-8") as f:
            reads = _private_reads(f.read())
        if reads:
            found[module] = reads
    assert found == {}


def test_the_private_read_detector_finds_one():
    assert _private_reads("def f(ds):\n    return ds._table.storage\n") == [
        "line 2: ds._table"]
    assert _private_reads("class A:\n    def f(self, o):\n        self._x = o._x\n") == []
    assert _private_reads("import sys\nsys._getframe(1)\n") == ["line 2: sys._getframe"]


#: The modules that hold the choice between the compiled module (``ofindex._native``) and the
#: pure-Python loops: the read path's accesses, and the entry points of decoding, encoding,
#: inflating and index scanning (``ofindex._accel`` itself holds the module).
NATIVE_HOLDERS = {"ofindex.read.access", "ofindex.decode._plans", "ofindex.encode.framed",
                  "ofindex.deflate.inflate", "ofindex.index.scan"}


def _refers_to_native(source: str) -> bool:
    """Whether a module refers to the compiled module: ``_accel.native``, ``from … _accel
    import native`` or an import of ``_native``."""
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Attribute) and node.attr == "native"
                and isinstance(node.value, ast.Name) and node.value.id == "_accel"):
            return True
        if isinstance(node, ast.ImportFrom) and (
                ((node.module or "").endswith("_accel")
                 and any(alias.name == "native" for alias in node.names))
                or (node.module or "").endswith("_native")
                or any(alias.name == "_native" for alias in node.names)):
            return True
        if isinstance(node, ast.Import) and any(a.name.endswith("_native") for a in node.names):
            return True
    return False


def test_the_compiled_module_is_chosen_in_a_few_named_modules():
    users = set()
    for module, path in _modules().items():
        with open(path, encoding="utf-8") as f:
            if module != "ofindex._accel" and _refers_to_native(f.read()):
                users.add(module)
    assert users <= NATIVE_HOLDERS and len(NATIVE_HOLDERS) <= 5, sorted(users - NATIVE_HOLDERS)


def test_the_compiled_module_detector_finds_each_way():
    assert _refers_to_native("from .. import _accel\nx = _accel.native\n")
    assert _refers_to_native("from .._accel import native\n")
    assert _refers_to_native("from . import _native\n")
    assert not _refers_to_native("from .. import _accel\nx = _accel.pooled_bytes(4)\n")


#: The dependencies whose private names the library must not use: their internals change
#: without notice (zarr's ``storage/_fsspec.py`` keeps to the same public surface).
DEPENDENCIES = ("fsspec", "s3fs", "gcsfs", "adlfs", "azure.storage.blob", "aiohttp")
#: Names of theirs that are public in form but not documented as API.
UNDOCUMENTED = {"set_session", "encode_url", "__wrapped__", "fs.kwargs"}


def _private_names_of(package: str) -> set[str]:
    """Every single-underscore name a dependency defines (a function, a class, an assigned
    name or attribute), read from its sources (not imported: its optional modules need not
    import)."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, package
    names = set()
    for directory, _, files in os.walk(spec.submodule_search_locations[0]):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(directory, name), encoding="utf-8") as f:
                    tree = ast.parse(f.read())
                names.update(found for node in ast.walk(tree) for found in _defined(node)
                             if _single_underscore(found))
    return names


def _single_underscore(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and len(name) > 1


def _references(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, name)`` of every attribute read, ``getattr``-style string and name imported
    from another module in ``tree``, the method names handed to our fsspec call helpers
    (:func:`ofindex.transport.clients.call`: ``call(fs, "info")``, ``client.call(path,
    action, "info")``) as ``"method:<name>"``, and a filesystem's undocumented ``kwargs`` as
    ``"fs.kwargs"``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            out.append((node.lineno, node.attr))
            if node.attr == "kwargs" and ast.unparse(node.value).endswith("fs"):
                out.append((node.lineno, "fs.kwargs"))
        elif isinstance(node, ast.ImportFrom):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            literals = [a.value for a in node.args
                        if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if func in ("getattr", "setattr", "hasattr", "delattr"):
                out.extend((node.lineno, name) for name in literals)
                if literals[:1] == ["kwargs"] and ast.unparse(node.args[0]).endswith("fs"):
                    out.append((node.lineno, "fs.kwargs"))
            elif func == "call" and literals[:1] == [ast.unparse(node.args[1])[1:-1]]:
                out.append((node.lineno, f"method:{literals[0]}"))
            elif func.endswith("client.call") and len(literals) > 1:
                out.append((node.lineno, f"method:{literals[1]}"))
    return out


def test_only_public_apis_of_the_storage_libraries():
    """No reference to a private name of fsspec, s3fs, gcsfs, adlfs, the Azure SDK's blob
    client or aiohttp (one of theirs, not one of ours), to names they do not document
    (``set_session``, ``encode_url``, a filesystem's ``kwargs``, ``__wrapped__``), or to their
    settings in the process environment. fsspec's async filesystems' coroutines (``_info``,
    ``_cat_file`` … for each public method) are its documented async API; the method names
    our call helper prefixes with ``_`` must be public methods of ``AbstractFileSystem``."""
    from fsspec.spec import AbstractFileSystem

    methods = {m for m in dir(AbstractFileSystem) if not m.startswith("_")}
    theirs = set().union(*(_private_names_of(p) for p in DEPENDENCIES))
    trees = {}
    for module, path in _modules().items():
        with open(path, encoding="utf-8") as f:
            trees[module] = ast.parse(f.read(), path)
    ours = {name for tree in trees.values() for node in ast.walk(tree)
            for name in _defined(node) if _single_underscore(name)}
    forbidden = (theirs - ours - {"_" + m for m in methods}) | UNDOCUMENTED
    # the modules that hold their objects: transport and storage, and any that imports them
    # (elsewhere a private name is another library's: torch's, grain's)
    holding = {module for module, tree in trees.items()
               if _layer(module) in ("transport", "storage") or any(
                   name.split(".")[0] in DEPENDENCIES for node in ast.walk(tree)
                   for name in _imported(node))}
    bad = [f"{module}:{line}: {name}" for module, tree in trees.items() if module in holding
           for line, name in _references(tree)
           if name in forbidden
           or (name.startswith("method:") and name.removeprefix("method:") not in methods)]
    bad += [f"{module}:{node.lineno}: {node.value}" for module, tree in trees.items()
            for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and node.value.startswith("GCSFS_")]
    assert bad == [], "\n".join(bad)


def _defined(node: ast.AST) -> list[str]:
    """The names ``node`` defines: a function, a class, an assigned name or attribute."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    targets: list[ast.expr] = []
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    names = []
    for target in targets:
        for sub in ast.walk(target):
            if isinstance(sub, ast.Name):
                names.append(sub.id)
            elif isinstance(sub, ast.Attribute) and ast.unparse(sub.value) in ("self", "cls"):
                names.append(sub.attr)  # (an attribute set on another object is not defined)
    return names


def _imported(node: ast.AST) -> list[str]:
    """The modules ``node`` imports."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and not node.level:
        return [node.module or ""]
    return []


#: Directories of tests/ for the project as a whole rather than one package: its documentation
#: (README, the site, the API docs), the project itself (the layers, the wheel, the C's
#: complexity, what a new user meets) and the scripts of tools/.
PROJECT_WIDE = ("docs", "project", "tools")


def _mirrors_the_package(parts: list[str], package: str) -> bool:
    """Whether tests/<parts...>/ is named after a package or module of ``package``
    (tests/read/remote/ for ofindex/read/remote/, tests/growing/ for ofindex/growing.py,
    tests/native/ for the compiled ofindex/_native)."""
    where = os.path.join(package, *parts[:-1])
    last = parts[-1]
    return (os.path.isfile(os.path.join(where, last, "__init__.py"))
            or any(os.path.isfile(os.path.join(where, name))
                   for name in (f"{last}.py", f"_{last}.py", f"_{last}.pyi")))


def _placed(parts: list[str], package: str) -> bool:
    if not parts:  # tests/ itself holds conftest.py and no test file
        return False
    if parts[0] in PROJECT_WIDE:
        return len(parts) == 1
    return _mirrors_the_package(parts, package)


def _misplaced_tests(tests: str, package: str) -> list[str]:
    """The test files (``test_*.py``) of ``tests`` outside the directory of a package of
    ``package`` and outside the project-wide ones, and those in a directory without the
    ``__init__.py`` files that name two ``test_x.py`` of two directories apart."""
    found = []
    for directory, subdirectories, files in os.walk(tests):
        subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
        relative = os.path.relpath(directory, tests)
        parts = [] if relative == os.curdir else relative.split(os.sep)
        for name in sorted(f for f in files if f.startswith("test_") and f.endswith(".py")):
            shown = "/".join([*parts, name])
            if not _placed(parts, package):
                found.append(f"{shown}: in neither the directory of an ofindex package "
                             f"(tests/read/remote/ for ofindex/read/remote/) nor tests/"
                             f"{{{','.join(PROJECT_WIDE)}}}/")
            elif not all(os.path.isfile(os.path.join(tests, *parts[:depth], "__init__.py"))
                         for depth in range(len(parts) + 1)):
                found.append(f"{shown}: add an empty __init__.py to tests/ and each directory "
                             "down to it")
    return found


def test_each_test_file_is_in_the_directory_of_what_it_tests():
    """tests/ mirrors the packages (tests/read/remote/ tests ofindex/read/remote/); what tests
    the project as a whole is in tests/docs/, tests/project/ or tests/tools/; tests/kit/ holds
    what they share, and no tests."""
    assert _misplaced_tests(paths.TESTS, ROOT) == []


def test_the_layout_rule_finds_misplaced_test_files(tmp_path):
    package, tests = tmp_path / "pkg", tmp_path / "tests"
    for module in ("read/remote/__init__.py", "read/__init__.py", "growing.py", "_native.pyi"):
        (package / module).parent.mkdir(parents=True, exist_ok=True)
        (package / module).write_text("")
    for test in ("test_root.py", "read/remote/test_ok.py", "growing/test_ok.py",
                 "native/test_ok.py", "docs/test_ok.py", "kit/test_in_kit.py",
                 "elsewhere/test_no_package.py", "read/shards/test_no_module.py",
                 "docs/deeper/test_too_deep.py"):
        (tests / test).parent.mkdir(parents=True, exist_ok=True)
        (tests / test).write_text("")
    for directory in ("", "read", "read/remote", "growing", "docs", "kit", "elsewhere",
                      "read/shards", "docs/deeper"):  # native/ has none
        (tests / directory / "__init__.py").write_text("")
    found = _misplaced_tests(str(tests), str(package))
    assert [line.split(":")[0] for line in found] == [
        "test_root.py", "docs/deeper/test_too_deep.py", "elsewhere/test_no_package.py",
        "kit/test_in_kit.py", "native/test_ok.py", "read/shards/test_no_module.py"]
    assert "__init__.py" in found[4] and "neither" in found[0]


def _test_modules_imported(node: ast.AST) -> list[str]:
    """The test modules (``test_*``) and ``conftest`` that ``node`` imports from, spelled as
    written (``.test_x`` for a relative import)."""
    if isinstance(node, ast.Import):
        named = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = "." * node.level + (node.module or "")
        named = [base] + [f"{base.rstrip('.')}.{alias.name}" if node.module else
                          f"{base}{alias.name}" for alias in node.names]
    else:
        return []
    return [name for name in named
            if any(part.startswith("test_") or part == "conftest" for part in name.split("."))]


def _imports_between_tests(tests: str) -> list[str]:
    """``file:line: module`` for each import, in any module under ``tests``, from a test
    module or from ``conftest``: what test modules share lives in tests/kit/."""
    found = []
    for directory, subdirectories, files in os.walk(tests):
        subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            shown = os.path.relpath(path, tests).replace(os.sep, "/")
            found += [f"{shown}:{node.lineno}: {target}" for node in ast.walk(tree)
                      for target in _test_modules_imported(node)[:1]]
    return found


def test_test_modules_share_only_through_the_kit():
    """No test module imports from another one or from tests/conftest.py (fixtures come to a
    test by name): a constant, helper or class two test modules use is in tests/kit/ under a
    public name."""
    found = _imports_between_tests(paths.TESTS)
    assert found == [], "move what these share to tests/kit/:\n" + "\n".join(found)


def test_the_kit_rule_finds_imports_between_test_modules(tmp_path):
    sources = {
        "read/test_a.py": "from tests.read.test_b import _helper\nimport os\n",
        "read/test_b.py": "def f():\n    from tests.conftest import BUCKET\n",
        "read/test_c.py": "from tests.read import test_b\nfrom . import test_a\n",
        "read/test_d.py": "from .test_b import f\nimport tests.read.test_a as a\n",
        "read/test_ok.py": "from tests.kit.helpers import need\nfrom tests.kit import paths\n"
                           "import pytest\nfrom hypothesis import strategies\n",
        "kit/helpers.py": "from tests.read.test_a import x\n",
    }
    for name, source in sources.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(source)
    assert _imports_between_tests(str(tmp_path)) == [
        "kit/helpers.py:1: tests.read.test_a",
        "read/test_a.py:1: tests.read.test_b",
        "read/test_b.py:2: tests.conftest",
        "read/test_c.py:1: tests.read.test_b",
        "read/test_c.py:2: .test_a",
        "read/test_d.py:1: .test_b",
        "read/test_d.py:2: tests.read.test_a"]
