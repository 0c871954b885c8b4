"""Helpers shared by the core tests (framing written independently of ofindex.formats.framing)."""

from __future__ import annotations

import contextlib
import importlib
import itertools
import os
import shutil
import struct
import zlib

import crc32c
import numpy as np


def ref_masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC32C, written from the format description, not from ofindex."""
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def ref_tfrecord(records: list[bytes]) -> bytes:
    out = bytearray()
    for r in records:
        n = struct.pack("<Q", len(r))
        out += n + struct.pack("<I", ref_masked_crc(n)) + r + struct.pack("<I", ref_masked_crc(r))
    return bytes(out)


def ref_ofrecord(records: list[bytes]) -> bytes:
    return b"".join(struct.pack("<q", len(r)) + r for r in records)


def ref_offsets(records: list[bytes], overhead: int) -> list[int]:
    out, pos = [], 0
    for r in records:
        out.append(pos)
        pos += len(r) + overhead
    return out


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write_raw(path: str, data: bytes) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def zlib_pack(raw: bytes, compression: str, level: int, members: int) -> bytes:
    """``raw`` as ``members`` concatenated gzip members or zlib streams (``compression``
    "gzip" or "zlib"), compressed by zlib at ``level``."""
    wbits = 31 if compression == "gzip" else 15
    cuts = np.linspace(0, len(raw), members + 1).astype(int).tolist()
    out = b""
    for a, b in itertools.pairwise(cuts):
        c = zlib.compressobj(level, zlib.DEFLATED, wbits)
        out += c.compress(raw[a:b]) + c.flush()
    return out


def split(records: list[bytes], sizes: list[int]) -> list[list[bytes]]:
    """Cut ``records`` into consecutive shards of the given sizes (the rest goes last)."""
    out, pos = [], 0
    for s in sizes:
        out.append(records[pos : pos + s])
        pos += s
    out.append(records[pos:])
    return out


IMPLEMENTATIONS = ("compiled", "pure-python")


@contextlib.contextmanager
def implementation(name: str):
    """Run the block on the compiled loops (which must have been built) or the pure-Python
    ones, then restore whatever ran before."""
    from ofindex import _accel

    saved = _accel.native
    if name == "compiled":
        assert saved is not None, (
            "ofindex._native was not built: install a C compiler and the Python headers, then "
            "reinstall (pip install -e .)")
    else:
        _accel.native = None
    try:
        yield
    finally:
        _accel.native = saved


@contextlib.contextmanager
def cpu_paths(**switches: bool):
    """The compiled module's CPU paths (its switches ``hw_crc``, ``wide_varints``) set as
    ``switches`` say for the block, and put back as they were after it, whatever it raised;
    nothing is switched without the compiled module (and a path the CPU lacks stays off)."""
    from ofindex import _accel

    native = _accel.native
    if native is None:
        yield
        return
    was = {name: getattr(native, name)() for name in switches}
    try:
        for name, on in switches.items():
            getattr(native, name)(on)
        yield
    finally:
        for name, on in was.items():
            getattr(native, name)(on)


# -- decoded values -----------------------------------------------------------------------
def same(a, b) -> bool:
    """Exact equality of decoded values (NaN == NaN, -0.0 != 0.0, dtypes and shapes)."""
    if hasattr(a, "row_lengths") or hasattr(b, "row_lengths"):
        return hasattr(a, "row_lengths") and hasattr(b, "row_lengths") and same(
            a.values, b.values) and np.array_equal(a.row_lengths, b.row_lengths)
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        return bool(np.array_equal(a, b, equal_nan=True)
                    and np.array_equal(np.signbit(a), np.signbit(b)))
    return bool(np.array_equal(a, b))


def same_dict(a: dict, b: dict) -> bool:
    return (list(a) == list(b) and all(same(a[k], b[k]) for k in a)) or (
        set(a) == set(b) and all(same(a[k], b[k]) for k in a))


# -- small datasets -------------------------------------------------------------------------
def write_shards(directory, sizes, record, name="part-{}.tfrecord") -> str:
    """Write ``len(sizes)`` shards with ofindex.Writer; shard ``s`` holds ``record(s, i)`` for
    ``i < sizes[s]``. Returns the directory."""
    import ofindex

    for s, count in enumerate(sizes):
        with ofindex.Writer(os.path.join(directory, name.format(s))) as w:
            for i in range(count):
                w.write(record(s, i))
    return str(directory)


def varint(n: int) -> bytes:
    """``n`` as a protobuf varint (negative numbers as their 64-bit two's complement)."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def reseal_sidecar(raw: bytes) -> bytes:
    """A sidecar's bytes with its body and header CRCs recomputed over whatever they hold
    now: what a buggy or hostile writer leaves (bit rot and bad copies leave them stale)."""
    import crc32c

    buf = bytearray(raw)
    struct.pack_into("<I", buf, 40, crc32c.crc32c(bytes(buf[512:])))
    struct.pack_into("<I", buf, 44, 0)
    struct.pack_into("<I", buf, 44, crc32c.crc32c(bytes(buf[:512])))
    return bytes(buf)


def reseal_manifest(doc: dict) -> bytes:
    """A manifest document (as ``json.loads`` gives it) written back with its ``crc32c``
    member recomputed over whatever it holds now: a hostile or buggy writer."""
    import json

    import crc32c

    body = {k: v for k, v in doc.items() if k != "crc32c"}
    text = json.dumps(body, separators=(",", ":")).encode()
    return text[:-1] + b',"crc32c":%d}' % crc32c.crc32c(text)


def sidecar_of(data_path) -> str:
    """Where ``data_path``'s sidecar is, by the documented placement rule (docs: "Where
    index files go"): ``<data dir>.ofindex/<name>.ofidx`` (a hidden ``.ofindex/`` at a
    filesystem root), else the per-user index cache's (:func:`cached_index_dir_of`: a file
    named on its own, whose directory has no index directory), else the legacy
    ``<data path>.ofidx`` beside the data; the first place when none holds one. Tests use it
    rather than spelling a location."""
    data_path = os.fspath(data_path)
    directory, name = os.path.split(os.path.abspath(data_path))
    sibling = os.path.join(index_dir_of(directory), name + ".ofidx")
    cached = os.path.join(cached_index_dir_of(directory), name + ".ofidx")
    legacy = data_path + ".ofidx"
    return next((p for p in (sibling, cached, legacy) if os.path.exists(p)), sibling)


def index_dir_of(data_dir) -> str:
    """The directory the default build writes a data directory's index files to (see
    :func:`sidecar_of`)."""
    data_dir = os.path.abspath(os.fspath(data_dir))
    parent, base = os.path.split(data_dir)
    if not base:  # a filesystem root: a hidden directory inside it
        return os.path.join(data_dir, ".ofindex")
    return os.path.join(parent, base + ".ofindex")


def cached_index_dir_of(data_dir) -> str:
    """The per-user index cache's directory for the files of ``data_dir``, as docs/placement.md
    spells it: ``$OFINDEX_INDEX_CACHE`` (this test session's, see conftest.py), then the
    data directory's canonical path, percent-encoded."""
    from urllib.parse import quote_from_bytes

    canonical = os.fsencode(os.path.realpath(os.fspath(data_dir)))
    return os.path.join(os.environ["OFINDEX_INDEX_CACHE"], quote_from_bytes(canonical, safe=""))


def manifest_of(data_dir) -> str:
    """Where the default build put a data directory's manifest (see :func:`sidecar_of`): its
    index directory's, else the per-user index cache's, else (legacy) its own; the first
    place when none holds one."""
    places = [os.path.join(where, "ofindex-manifest.json")
              for where in (index_dir_of(data_dir), cached_index_dir_of(data_dir),
                            os.fspath(data_dir))]
    return next((p for p in places if os.path.exists(p)), places[0])


def copy_dataset(source, target) -> str:
    """Copy a data directory and its index directory (the default place, see
    :func:`sidecar_of`) to ``target`` and ``target``'s own index directory; returns
    ``target``."""
    shutil.copytree(source, target)
    if os.path.isdir(index_dir_of(source)):
        shutil.copytree(index_dir_of(source), index_dir_of(target))
    return os.fspath(target)


#: The optional dependencies tests import, with what installs each (an ofindex extra, or a
#: pip requirement). The test command (``bash tools/run-tests.sh``) installs every one.
OPTIONAL_MODULES = {
    "aiohttp": "http", "s3fs": "s3", "botocore": "s3", "gcsfs": "gcs", "adlfs": "azure",
    "azure": "azure", "obstore": "obstore", "torch": "torch",
    "torchdata": "torchdata", "grain": "grain", "tensorflow": "tf", "keras": "keras",
    "datasets": "hf", "pyarrow": "hf", "ray": "ray", "dask": "dask", "distributed": "dask",
    "moto": "moto[server]", "mkdocs": "docs", "playwright": "docs", "build": "dist",
    "auditwheel": "dist", "ruff": "dev", "mypy": "dev", "PIL": "bench", "matplotlib": "bench",
    "tfrecord": "test", "array_record": "bench", "lance": "bench", "isal": "isal",
    "simplejpeg": "images", "tensorflow_datasets": "test", "pandas": "events",
    "tensorboard": "test", "tensorboardX": "test",
}


def install_of(module: str) -> str:
    """The pip command that installs optional ``module`` (``"pyarrow.parquet"`` counts as
    ``pyarrow``).

    Raises:
        KeyError: ``module`` is not in :data:`OPTIONAL_MODULES`.
    """
    install = OPTIONAL_MODULES[module.split(".")[0]]
    return (f"pip install 'ofindex[{install}]'" if install.isidentifier()
            else f"pip install '{install}'")


def need(module: str, install: str | None = None):
    """Import an optional test dependency, or say what installs it: in CI (``CI=true``) the
    test fails, since the test command installs every extra and nothing may be skipped there;
    run by hand, it skips (issue 31), the one skip the suite has.

    Args:
        module: The module to import, e.g. ``"s3fs"`` or ``"pyarrow.parquet"``.
        install: What installs it, when not the one :data:`OPTIONAL_MODULES` names: an
            ofindex extra (``"s3"``) or a pip requirement (``"moto[server]"``).

    Returns:
        The imported module.
    """
    import pytest

    how = (install_of(module) if install is None
           else f"pip install 'ofindex[{install}]'" if install.isidentifier()
           else f"pip install '{install}'")
    reason = f"{module} is not installed: {how} (bash tools/run-tests.sh installs it)"
    if os.environ.get("CI"):
        try:
            return importlib.import_module(module)
        except ImportError:
            pytest.fail(reason, pytrace=False)
    return pytest.importorskip(module, reason=reason)


def without_root_privilege(command: list[str]) -> list[str]:
    """``command`` run without root's power to write anywhere when this process is root
    (through ``setpriv``, which drops CAP_DAC_OVERRIDE), else as it is: for tests of
    directories that cannot be written.

    Returns:
        The command to run.
    """
    if os.geteuid() != 0:
        return command
    setpriv = shutil.which("setpriv")
    require(setpriv is not None, "setpriv (util-linux) to run its child as root without "
            "CAP_DAC_OVERRIDE", "apt-get install util-linux (bash tools/run-tests.sh "
            "installs it)")
    assert setpriv is not None
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--", *command]


def require(available: bool, what: str, how: str) -> None:
    """Fail the test, naming what to install or enable, when something it tests is not
    available on this machine (the compiled module, a CPU instruction, a system tool): a
    test that cannot run here fails, saying why, rather than skip.

    Args:
        available: Whether the thing is there.
        what: What the test needs, e.g. ``"the compiled module"``.
        how: The step that provides it, e.g. ``"apt-get install util-linux"``.
    """
    import pytest

    if not available:
        pytest.fail(f"this test needs {what}: {how}", pytrace=False)


def compiled_module():
    """The compiled module ``ofindex._native``, or fail the test saying how to get it (for
    tests of what only the compiled loops do).

    Returns:
        The module.
    """
    from ofindex import _accel

    require(_accel.native is not None, "the compiled module (ofindex._native)",
            "build it with `python setup.py build_ext --inplace` and leave "
            "OFINDEX_PURE_PYTHON unset (bash tools/run-tests.sh does both)")
    return _accel.native


def hardware_crc():
    """The compiled module, failing the test unless the CPU's CRC32C instruction is there (for
    tests of what the compiled module does with it).

    Returns:
        The module.
    """
    native = compiled_module()
    require(native.hw_crc(), "the CPU's CRC32C instruction",
            "run it on an x86-64 CPU with SSE4.2 or an ARMv8 CPU with the CRC extension")
    return native


def memfd(available: bool) -> None:
    """Fail the test unless ``memfd_create`` (Linux), which the shared ring is built on, is
    ``available``."""
    require(available, "memfd_create (Linux), which the shared ring is built on",
            "run it on Linux")


def sigint_as_a_terminal() -> None:
    """A ``preexec_fn``: the child gets SIGINT as a terminal leaves it (its default action,
    so that Python turns it into KeyboardInterrupt). A test run started in the background
    (``cmd &``, nohup, some CI runners) ignores SIGINT, and its children inherit that: an
    interrupt the test sends would then be ignored."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def empty_block_pool():
    """The compiled module's pool of released Block memory emptied (other tests' buffers may
    wait there), its bound kept, and restored afterwards."""
    from ofindex import _accel

    native = _accel.native
    assert native is not None
    _, limit = native.pool()
    native.pool(0)  # empties it
    native.pool(limit)
    try:
        yield native
    finally:
        native.pool(limit)


def stamp_as_served(data_dir, url: str) -> None:
    """Re-stamp a local dataset's sidecars and manifest with the stamps a web server serving
    ``data_dir`` at ``url`` reports (its ETags), as if it had been indexed through that
    server: reads of it then take the fingerprint's fast path (no content regions read)."""
    import dataclasses
    import json

    from ofindex.formats.sidecar import restamped
    from ofindex.formats.sidecar_header import decode_header
    from ofindex.storage.fsspec_storage import FsspecStorage

    http = FsspecStorage("http")
    manifest = manifest_of(data_dir)
    with open(manifest, "rb") as f:
        doc = json.load(f)
    for k, name in enumerate(doc["shards"]["name"]):
        served = http.stamp(f"{url}/{name}")
        path = sidecar_of(os.path.join(data_dir, name))
        raw = read_bytes(path)
        header = decode_header(raw[:512], path=path)
        stamp = dataclasses.replace(served, content=header.stamp.content)
        write_raw(path, restamped(raw, stamp, path=path))
        doc["shards"]["fingerprint"][k] = stamp.fingerprint
    write_raw(manifest, reseal_manifest(doc))
