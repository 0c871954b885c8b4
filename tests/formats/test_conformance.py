"""The conformance suite of docs/format.md (tests/conformance/, written once by
tools/make_conformance.py; its README.md says how another implementation uses it).

Every case is read twice: by ``tests/conformance/spec_reader.py``, a reader written from
docs/format.md alone (the standard library, numpy, zlib and crc32c; no ofindex), which proves
the page complete, and by ofindex itself. Both must read every valid case as ``expected.json``
says and refuse every damaged one as it says, with the data files' times as a checkout
leaves them (the content digest decides) and set to the times they were indexed at (the
fingerprint decides).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import struct
import sys
import warnings
from typing import Any
from urllib.parse import quote_from_bytes, unquote

import crc32c
import fsspec
import pytest

import ofindex
from ofindex import (
    CorruptRecordError,
    IncompleteDatasetError,
    ManifestError,
    OfindexError,
    PartialIndexWarning,
    SidecarError,
    StaleIndexError,
    UnverifiedIndexWarning,
)
from tests.conformance import spec_reader
from tests.kit import paths

CORPUS = paths.CONFORMANCE
with open(os.path.join(CORPUS, "expected.json"), encoding="utf-8") as _f:
    EXPECTED = json.load(_f)
CASES = EXPECTED["cases"]
INDEX_NAMES = ("ofindex-manifest.json", "ofindex-manifest.bin")


def categories(exc: BaseException) -> set[str]:
    """The refusal categories of expected.json an ofindex error belongs to."""
    found = set()
    if isinstance(exc, StaleIndexError):
        found.add("stale")
    if isinstance(exc, ManifestError):
        found.add("manifest")
    if isinstance(exc, SidecarError) and not isinstance(exc, (StaleIndexError, ManifestError)):
        found.add("sidecar")
    if isinstance(exc, CorruptRecordError):
        found.add("record")
    if isinstance(exc, IncompleteDatasetError):
        found.add("incomplete")
    return found


def copied(case: dict[str, Any], tmp_path: Any, times: str) -> str:
    """A copy of the case's directory; with ``times == "indexed"`` its data files get the
    modification time they were indexed at (unless the case must not)."""
    root = str(tmp_path / case["name"])
    shutil.copytree(os.path.join(CORPUS, "cases", case["name"]), root)
    for folder, _, files in os.walk(root):  # names stored percent-encoded (README.md)
        for name in files:
            if "%" in name:
                os.rename(os.path.join(folder, name), os.path.join(folder, unquote(name)))
    if times == "indexed" and case["set_times"]:
        t = EXPECTED["data_mtime_ns"]
        for folder, _, files in os.walk(root):
            if folder.endswith(".ofindex"):
                continue
            for name in files:
                if not name.endswith(".ofidx") and name not in INDEX_NAMES:
                    os.utime(os.path.join(folder, name), ns=(t, t))
    return root


def record_of(payload: bytes) -> dict[str, int]:
    return {"length": len(payload), "crc32c": crc32c.crc32c(payload)}


def judge(case: dict[str, Any], opened: set[str] | None, got: list[Any]) -> None:
    """Check a reading: ``opened`` is the categories of a refusal at open (``None``: it
    opened), ``got`` each record read (or the categories of its refusal)."""
    name, expected, refuse = case["name"], case["records"], case["refuse"] or []
    if opened is not None:
        assert opened & set(refuse), f"{name}: refused at open as {opened}, expected {refuse}"
        return
    if expected is None:
        assert got and isinstance(got[0], set) and got[0] & set(refuse), (
            f"{name}: read {got[:1]}, expected a refusal as {refuse}")
        return
    assert len(got) == len(expected), f"{name}: {len(got)} records, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        if "refused" in e:
            assert isinstance(g, set) and g & set(e["refused"]), (
                f"{name}: record {i} read as {g}, expected a refusal as {e['refused']}")
        elif isinstance(g, set):
            assert g & set(e.get("or_refused", [])), f"{name}: record {i} refused as {g}"
        else:
            assert g == {"length": e["length"], "crc32c": e["crc32c"]}, (
                f"{name}: record {i} read as {g}, expected {e}")


def read_with_ofindex(path: str, manifest: bool) -> tuple[set[str] | None, list[Any]]:
    """Open with ofindex and read every record one by one."""
    try:
        ds = ofindex.open(path, manifest=manifest)
    except OfindexError as exc:
        return categories(exc), []
    got: list[Any] = []
    with ds:
        for i in range(len(ds)):
            try:
                got.append(record_of(ds[i]))
            except OfindexError as exc:
                got.append(categories(exc))
    return None, got


def ofindex_reads(case: dict[str, Any], path: str) -> None:
    """Read a case at ``path`` with ofindex as it says (with and without its manifest, its
    identity, its records by slices and iteration) and judge the reading."""
    modes = [(case["manifest"], case["identity"])]
    if case["also_without_manifest"]:
        modes.append((False, case["identity_listed"]))
    for manifest, identity in modes:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore" if case["partial"] else "error", PartialIndexWarning)
            # an index without a content digest (version 1) is checked by size, with a warning
            warnings.simplefilter("ignore", UnverifiedIndexWarning)
            opened, got = read_with_ofindex(path, manifest)
            judge(case, opened, got)
            if identity is not None:
                with ofindex.open(path, manifest=manifest) as ds:
                    assert ds.identity == identity
                    assert ds[:] == list(ds)  # slices and iteration agree with ds[i]
                    assert [record_of(p) for p in ds[:]] == case["records"]


@pytest.mark.parametrize("times", ["checkout", "indexed"])
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_ofindex_reads_the_case_as_expected(case, times, tmp_path, impl, inflater):
    root = copied(case, tmp_path, times)
    ofindex_reads(case, os.path.join(root, case["open"]))


REMOTE = [c for c in CASES if not c["local_only"]]


@pytest.mark.parametrize("case", REMOTE, ids=[c["name"] for c in REMOTE])
def test_ofindex_reads_the_case_from_a_bucket(case):
    """The same from ``memory://``: sidecars by their headers and pages, manifests in rounds,
    each data file checked by its digest (the store's fingerprints are of another kind)."""
    fs = fsspec.filesystem("memory")
    base = f"/conformance/{case['name']}"
    source = os.path.join(CORPUS, "cases", case["name"])
    for folder, _, files in os.walk(source):
        for name in files:
            stored = os.path.relpath(os.path.join(folder, name), source)
            with open(os.path.join(folder, name), "rb") as f:
                fs.pipe(f"{base}/{unquote(stored)}", f.read())  # names decoded (README.md)
    try:
        ofindex_reads(case, f"memory://{base}/{case['open']}")
    finally:
        fs.rm(base, recursive=True)


def read_with_spec_reader(path: str, manifest: bool) -> tuple[set[str] | None, list[Any]]:
    """Open with the reader written from docs/format.md and read every record."""
    try:
        ds = spec_reader.open_dataset(path, manifest)
    except spec_reader.Refused as exc:
        return {exc.category}, []
    got: list[Any] = []
    for i in range(len(ds)):
        try:
            got.append(record_of(ds[i]))
        except spec_reader.Refused as exc:
            got.append({exc.category})
    return None, got


@pytest.mark.parametrize("times", ["checkout", "indexed"])
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_reader_written_from_the_page_reads_the_case_as_expected(case, times, tmp_path):
    root = copied(case, tmp_path, times)
    path = os.path.join(root, case["open"])
    modes = [(case["manifest"], case["identity"])]
    if case["also_without_manifest"]:
        modes.append((False, case["identity_listed"]))
    for manifest, identity in modes:
        opened, got = read_with_spec_reader(path, manifest)
        judge(case, opened, got)
        if identity is not None:
            assert spec_reader.open_dataset(path, manifest).identity() == identity


def test_a_sidecar_in_the_per_user_index_cache_is_found(tmp_path, monkeypatch):
    """`single` with its sidecar moved to the directory's entry of the per-user index cache,
    named as the page says: both readers find it there."""
    monkeypatch.setenv("OFINDEX_INDEX_CACHE", str(tmp_path / "index-cache"))
    case = next(c for c in CASES if c["name"] == "single")
    root = copied(case, tmp_path, "checkout")
    data_dir = os.path.join(root, "data")
    entry = tmp_path / "index-cache" / quote_from_bytes(os.fsencode(os.path.realpath(data_dir)),
                                                        safe="")
    os.makedirs(entry)
    shutil.move(os.path.join(root, "data.ofindex", "records.tfrecord.ofidx"), entry)
    os.rmdir(os.path.join(root, "data.ofindex"))
    path = os.path.join(root, case["open"])
    for read in (read_with_ofindex, read_with_spec_reader):
        opened, got = read(path, False)
        judge(case, opened, got)


def test_the_reader_written_from_the_page_uses_no_ofindex():
    """spec_reader.py imports the standard library, numpy, zlib and crc32c only."""
    with open(spec_reader.__file__, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported - set(sys.stdlib_module_names) == {"numpy", "crc32c"}


KEYS = EXPECTED["cache_keys"]
BLOCKS = EXPECTED["blocks"]


def ofindex_cache_entry(v: dict[str, Any]) -> dict[str, Any]:
    """What ofindex gives for a cache vector."""
    from types import SimpleNamespace

    from ofindex.cache import dir_files, keys
    from ofindex.formats.compact_manifest import CompactManifest
    from ofindex.formats.index_cache import cached_index_dir
    from ofindex.read.remote import pages
    from ofindex.storage import FileStamp

    kind = v["entry"]
    if kind == "index cache":
        return {"name": os.path.basename(cached_index_dir(v["directory"]))}
    if kind in ("header", "page"):
        pager = pages.Pager(v.get("records_per_page", 16), keys.sidecar_key(
            v["index_url"], FileStamp(v["size"], v["fingerprint"]), v["body_crc"]), False, True)
        key = pager.header_key if kind == "header" else pager.page_key(v["page"])
        return {"key": key.hex()}
    if kind == "whole sidecar":
        name = dir_files.entry_name(v["index_url"])
        return {"file": name, "key": dir_files.file_key(name).hex()}
    if kind == "identity":
        key = keys.identity_key(v["url"], FileStamp(v["size"], v["fingerprint"]),
                                v["digest"])
        return {"key": key.hex(), "data": keys.identity_entry(key).hex()}
    if kind == "compact stamps":
        manifest = SimpleNamespace(url=v["manifest_url"], head=SimpleNamespace(crc=v["head_crc"]))
        return {"key": CompactManifest.node_key(manifest, v["page"]).hex()}
    if kind == "block":
        key = keys.block_key(v["url"], FileStamp(v["size"], v["fingerprint"]),
                             v["block_bytes"], v["block"])
        return {"key": key.hex(), "file": dir_files.block_name(key)}
    return {"records_per_page": pages.page_records_for(v["records"], v["size"])}


@pytest.mark.parametrize("reader", ["ofindex", "page"])
@pytest.mark.parametrize("vector", KEYS, ids=[f"{v['entry']}-{k}" for k, v in enumerate(KEYS)])
def test_cache_keys(vector, reader):
    got = (ofindex_cache_entry if reader == "ofindex" else spec_reader.cache_entry)(vector)
    assert got == {k: vector[k] for k in got}


@pytest.mark.parametrize("reader", ["ofindex", "page"])
@pytest.mark.parametrize("block", BLOCKS, ids=[b["name"] for b in BLOCKS])
def test_cache_blocks(block, reader, tmp_path):
    from ofindex.cache import block_file

    path = os.path.join(CORPUS, "cases", block["file"])
    key = bytes.fromhex(block["key"])
    if reader == "ofindex":
        got = block_file.map_block(os.path.dirname(path), os.path.basename(path), key,
                                   block["length"], block["check_data"])
        payload = None if got is None else bytes(got)
    else:
        payload = spec_reader.read_block(path, key, block["length"], block["check_data"])
    want = block["payload_crc32c"]
    assert (None if payload is None else crc32c.crc32c(payload)) == want


TEXTS = EXPECTED["text_indexes"]


def ofindex_text_spans(data: str, text: str) -> list[list[int]] | set[str]:
    """The spans ofindex's import takes from a text index, or the categories of its refusal."""
    from ofindex.index.textimport import read_text_index, sidecar_from_text
    from ofindex.storage import LocalStorage

    storage = LocalStorage()
    try:
        raw = read_text_index(storage, text, os.path.getsize(data), data_url=data)
        header, body, count = sidecar_from_text(storage, data, raw, text_url=text)
    except OfindexError as exc:
        return categories(exc)
    offsets = struct.unpack_from(f"<{count}Q", body)
    end = struct.unpack_from("<Q", header, 32)[0]
    ends = [*offsets[1:], end][:count]
    return [[a, b - a] for a, b in zip(offsets, ends, strict=True)]


def page_text_spans(data: str, text: str) -> list[list[int]] | set[str]:
    """The same by the reader written from the page."""
    try:
        return [list(span) for span in spec_reader.read_text_index(data, text)]
    except spec_reader.Refused as exc:
        return {exc.category}


@pytest.mark.parametrize("reader", ["ofindex", "page"])
@pytest.mark.parametrize("vector", TEXTS, ids=[t["name"] for t in TEXTS])
def test_text_indexes(vector, reader):
    data, text = (os.path.join(CORPUS, "cases", vector[k]) for k in ("data", "text"))
    got = (ofindex_text_spans if reader == "ofindex" else page_text_spans)(data, text)
    if "spans" in vector:
        assert got == vector["spans"]
    else:
        assert isinstance(got, set) and vector["refused"] in got, got
