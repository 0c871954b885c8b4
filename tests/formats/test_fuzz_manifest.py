"""Fuzzing the dataset manifest: tampered ``ofindex-manifest.json`` files never make ofindex
read outside the dataset, return records that are not the dataset's, or fail otherwise than
with an OfindexError.

A dataset directory sits beside a decoy: a valid, indexed TFRecord file outside it. Each
example tampers with the dataset's manifest — shard names with ``../``, absolute paths, URLs,
empty parts or NULs; counts and sizes that are negative, huge, floats, strings or booleans;
columns of other lengths or types; other versions, formats, data and index directories;
keys removed; the JSON itself truncated, corrupted, nested thousands deep — then opens the
directory and reads every record. An audit hook sees every file the library opens meanwhile:
none may lie outside the dataset directory. A manifest of a million entries is refused in
bounded time and memory.

The tampering target has a default-tier test (a fixed set of inputs, tests/kit/fuzzkit.py) and a
fuzz-tier twin (``test_explore_*``: fresh inputs, ``bash tools/run-fuzz.sh``). An input is a
list of edits, applied to the manifest when the test runs (indexes taken modulo the lengths
they find), so that its repr is the ``@example`` that pins it.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ofindex
from ofindex.formats.manifest import MANIFEST_NAME
from ofindex.storage import storage_for
from tests.kit.fuzzkit import Tally, budget, explore, guarded
from tests.kit.helpers import copy_dataset, index_dir_of, manifest_of, reseal_manifest

RECORDS = [[b"a" * 5, b"bb"], [b"c" * 30]]
DECOY = [b"SECRET" * 3]
TALLY = Tally("manifest tampering (open + read everything)")
_WATCH: dict[str, object] = {"dataset": None, "seen": []}


def _audit(event: str, args: tuple) -> None:
    if _WATCH["dataset"] is not None and event in ("open", "os.open") and args:
        path = args[0]
        if isinstance(path, (str, bytes, os.PathLike)):
            _WATCH["seen"].append(os.path.abspath(os.fsdecode(path)))


sys.addaudithook(_audit)  # one hook for the session; it records only while a read is watched


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("fuzz-manifest"))
    template = os.path.join(root, "template")
    for k, recs in enumerate(RECORDS):
        with ofindex.Writer(os.path.join(template, f"part-{k}")) as w:
            w.write_many(recs)
    ofindex.build_index(template)
    with ofindex.Writer(os.path.join(root, "secret.tfrecord")) as w:  # the decoy
        w.write_many(DECOY)
    with ofindex.open(template) as ds:  # warm-up: imports and caches are not measured
        list(ds), ds[0], ds.__getitems__([1, 0])
    for url in ("http://127.0.0.1:1/d", "memory://nowhere", "s3://bucket/x"):
        storage_for(url)  # (the filesystem modules of the URLs drawn below)
    return root


#: Files the interpreter itself may open meanwhile (modules imported on first use).
SYSTEM = ("/proc/", "/sys/", "/dev/", sys.prefix, sys.base_prefix, sys.exec_prefix)
NAMES = ["../secret.tfrecord", "/etc/passwd", "secret.tfrecord", "part-0/../../secret.tfrecord",
         "file:///etc/passwd", "s3://bucket/part-0", "http://127.0.0.1:1/x", "", ".", "..",
         "part-0/", "part-0\\..\\x", "part-\x000", "sub/part-0", "part-1", "part-0"]
JUNK = [None, True, -1, 0, 1, 2**62, 2**63, 2**64, 10**30, 1.5, float("inf"), "3", [], {}]


#: Stand-ins, in drawn edits, for paths known when the test runs: the decoy, a path into the
#: directory of the datasets through ``..``, and that directory.
SECRET, THROUGH_PARENT, OUTSIDE = "<decoy>", "<../root/x>", "<root>"
INDEX = st.integers(0, 2**16)  # taken modulo the length it indexes


@st.composite
def tamperings(draw) -> list[tuple]:
    """1-3 edits of a manifest (see :func:`tamper`); a "raw" or "nest" edit ends the list,
    else half the time a "reseal" edit: the manifest's checksum forged over the edits (else
    left stale, as a bad copy leaves it)."""
    edits: list[tuple] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["name", "name", "column", "length", "field", "dirs",
                                     "drop", "raw", "nest"]))
        if kind == "name":
            edits.append(("name", draw(INDEX), draw(st.one_of(
                st.sampled_from([*NAMES, SECRET, THROUGH_PARENT]), st.text(max_size=12)))))
        elif kind == "column":
            key = draw(st.sampled_from(["records", "size", "fingerprint", "name"]))
            edits.append(("column", key, draw(INDEX), draw(st.sampled_from(JUNK))))
        elif kind == "length":
            key = draw(st.sampled_from(["records", "size", "fingerprint", "name"]))
            edits.append(("length", key, draw(st.booleans())))
        elif kind == "field":
            edits.append(("field", draw(st.sampled_from(["ofindex_manifest", "format", "shards"])),
                          draw(st.sampled_from([*JUNK, "ofrecord", "tfrecord", 2, "x"]))))
        elif kind == "dirs":
            edits.append(("field", draw(st.sampled_from(["data_dir", "index_dir"])),
                          draw(st.sampled_from([OUTSIDE, "/", "..", ".", "http://127.0.0.1:1/d",
                                                "memory://nowhere", 5, ""]))))
        elif kind == "drop":
            edits.append(("drop", draw(st.booleans()), draw(INDEX)))
        elif kind == "raw":  # the JSON text truncated, or one of its bytes set
            edits.append(("raw", draw(INDEX), draw(st.none() | st.integers(0, 255))))
            return edits
        else:
            edits.append(("nest", draw(st.sampled_from([50, 5000, 200_000])), draw(st.booleans())))
            return edits
    if draw(st.booleans()):
        edits.append(("reseal",))
    return edits


def tamper(doc: dict, edits: list[tuple], root: str) -> bytes:
    """The manifest ``doc`` after ``edits``, as the bytes of a manifest file."""
    doc, edits = json.loads(json.dumps(doc)), copy.deepcopy(edits)  # (JUNK's lists, dicts)
    known = {SECRET: os.path.join(root, "secret.tfrecord"),
             THROUGH_PARENT: "../" + os.path.basename(root) + "/x", OUTSIDE: root}
    shards = doc["shards"]
    for edit in edits:
        kind = edit[0]
        column = shards.get(edit[1]) if kind in ("column", "length") else shards.get("name")
        if kind in ("name", "column", "length") and not (isinstance(column, list) and column):
            pass
        elif kind == "name":
            column[edit[1] % len(column)] = known.get(edit[2], edit[2])
        elif kind == "column":
            column[edit[2] % len(column)] = edit[3]
        elif kind == "length":
            if edit[2]:
                column.append(column[0])
            else:
                column.pop()
        elif kind == "field":
            doc[edit[1]] = known.get(edit[2], edit[2]) if isinstance(edit[2], str) else edit[2]
        elif kind == "drop":
            where = doc if edit[1] else shards
            if where:
                where.pop(sorted(where)[edit[2] % len(where)])
        elif kind == "reseal":  # a forged checksum: every other check must still hold
            return reseal_manifest(doc)
        elif kind == "raw":
            raw = bytearray(json.dumps(doc).encode())
            at = edit[1] % len(raw)
            if edit[2] is None:
                del raw[at:]
            else:
                raw[at] = edit[2]
            return bytes(raw)
        else:
            depth = edit[1]
            return b"[" * depth + b"]" * depth if edit[2] else (
                b'{"ofindex_manifest": 1, "shards": ' + b"[" * depth + b"]" * depth + b"}")
        shards = doc.get("shards") if isinstance(doc.get("shards"), dict) else {
            "name": [""], "records": [0], "size": [0], "fingerprint": [""]}
    return json.dumps(doc).encode()  # the checksum left stale (a bad copy): refused at once


def _read_all(path: str) -> list[bytes]:
    with ofindex.open(path) as ds:
        got = [ds[i] for i in range(len(ds))]
        assert ds.__getitems__(list(range(len(ds)))) == got and list(ds) == got
        return got


@budget(300)
@given(tamperings())
def test_tampered_manifests_read_only_the_dataset(root, edits):
    check_tampered_manifest(root, edits)


@explore(3000)
@given(tamperings())
def test_explore_tampered_manifests_read_only_the_dataset(root, edits):
    check_tampered_manifest(root, edits)


def check_tampered_manifest(root: str, edits: list[tuple]) -> None:
    TALLY.input()
    d = os.path.join(root, uuid.uuid4().hex[:12])
    copy_dataset(os.path.join(root, "template"), d)
    with open(manifest_of(d), "rb") as f:
        doc = json.load(f)
    raw = tamper(doc, edits, root)
    with open(manifest_of(d), "wb") as f:
        f.write(raw)
    _WATCH["dataset"], _WATCH["seen"] = d, []
    try:
        outcome, got = guarded(lambda: _read_all(d), 4 * len(raw), TALLY)
    finally:
        _WATCH["dataset"] = None
    ours = (d + os.sep, index_dir_of(d) + os.sep)  # the data and its index directory
    outside = [p for p in _WATCH["seen"] if not p.startswith(ours) and p != d
               and not p.endswith((".py", ".pyc", ".so")) and not p.startswith(SYSTEM)]
    assert not outside, f"read outside the dataset: {outside}"
    if outcome == "ok":
        allowed = {r for recs in RECORDS for r in recs}
        assert set(got) <= allowed and DECOY[0] not in got, got


def test_a_million_entries_are_refused_in_bounded_time_and_memory(tmp_path):
    """A manifest listing 1e6 shards in a directory of two: refused after one listing, not a
    million stats; parsing costs Python objects in proportion to the file, nothing more."""
    d = tmp_path / "big"
    for k, recs in enumerate(RECORDS):
        with ofindex.Writer(str(d / f"part-{k}")) as w:
            w.write_many(recs)
    n = 1_000_000
    doc = {"ofindex_manifest": 1, "format": "tfrecord", "data_dir": None, "index_dir": None,
           "shards": {"name": [f"part-{k}" for k in range(n)], "records": [2] * n,
                      "size": [44] * n, "fingerprint": ["mtime_ns:1"] * n}}
    raw = json.dumps(doc).encode()
    (d / MANIFEST_NAME).write_bytes(raw)  # a version 1 manifest, where ofindex 0.2 wrote it
    # the peak resident size of this process image (ru_maxrss would include the parent's:
    # Linux keeps it across exec)
    code = """
import sys, time
import ofindex

def peak():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))

before = peak()
t = time.perf_counter()
try:
    ofindex.open(sys.argv[1])
    outcome = "opened"
except ofindex.StaleIndexError as e:
    outcome = "stale" if "does not list the data files" in str(e) else str(e)
print(outcome, time.perf_counter() - t, peak() - before)
"""
    done = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd()}, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    outcome, seconds, grown = done.stdout.split()
    TALLY.add(f"1e6 entries: {outcome} in {float(seconds):.1f} s, {int(grown) >> 20} MiB")
    assert outcome == "stale", done.stdout
    # Python objects for a parsed JSON list entry cost ~10x its bytes (measured: 377 MiB for
    # this 34 MiB manifest): proportional to the file, nothing sized by a number inside it
    assert float(seconds) < 60 and int(grown) < 16 * len(raw), done.stdout


@pytest.mark.parametrize("where", ["local", "memory"])
@pytest.mark.parametrize("name", ["../secret.tfrecord", "<abs>", "<url>",
                                  "part-0/../../secret.tfrecord"])
def test_a_manifest_cannot_name_a_file_outside_its_directory(tmp_path, where, name):
    """The decoy is a valid, indexed file and the manifest's counts, size and fingerprint match
    it, so only the name check stands between the reader and the decoy's records (remote
    datasets have no directory listing to guard them)."""
    import fsspec

    from ofindex.formats.sidecar import load_sidecar

    base = (str(tmp_path) if where == "local" else f"memory://fuzzm/{uuid.uuid4().hex[:8]}")
    secret = f"{base}/secret.tfrecord"
    for k, recs in enumerate(RECORDS):
        with ofindex.Writer(f"{base}/data/part-{k}") as w:
            w.write_many(recs)
    with ofindex.Writer(secret, index_dir=f"{base}.ofindex") as w:  # its directory's index
        w.write_many(DECOY)
    ofindex.build_index(f"{base}/data")
    fs = fsspec.filesystem("file" if where == "local" else "memory")
    manifest = f"{base}/data.ofindex/{MANIFEST_NAME}"  # the default places of index files
    doc = json.loads(fs.cat_file(manifest))
    storage, path = storage_for(f"{base}.ofindex/secret.tfrecord.ofidx")
    header = load_sidecar(storage, path).header
    shards = doc["shards"]
    secret_storage, secret_path = storage_for(secret)
    shards["name"][0] = {"<abs>": secret_storage.url(secret_path).split("://")[-1],
                         "<url>": secret}.get(name, name)
    shards["records"][0], shards["size"][0] = header.count, header.stamp.size
    shards["fingerprint"][0] = header.stamp.fingerprint
    shards["body_crc"][0] = header.body_crc
    fs.pipe_file(manifest, json.dumps(doc).encode())  # checksum stale
    with pytest.raises(ofindex.SidecarError, match="fails its checksum"):
        _read_all(f"{base}/data/")
    fs.pipe_file(manifest, reseal_manifest(doc))  # checksum forged too
    with pytest.raises(ofindex.SidecarError, match="not a file of the data directory"):
        _read_all(f"{base}/data/")
