"""Manifest format and rules, and the builder's read-ahead view, without servers."""

from __future__ import annotations

import json
import os

import crc32c
import numpy as np
import pytest

import ofindex
from ofindex.cli.synthetic import write_dataset
from ofindex.formats.framing import RecordFormat
from ofindex.formats.manifest import decode_manifest, encode_manifest, read_manifest
from ofindex.storage import Storages, storage_for
from ofindex.storage.readahead import ReadAhead
from tests.kit.helpers import manifest_of


def test_manifest_roundtrip_and_relative_data_dir():
    raw = encode_manifest(RecordFormat.OFRECORD, "s3://b/ds/ofindex-manifest.json", "s3://b/ds",
                          None, ["p0", "p1"], [3, 4], [30, 40], ["etag:a", "etag:b"])
    doc = json.loads(raw)
    assert doc["data_dir"] is None and doc["shards"]["name"] == ["p0", "p1"]
    # copied elsewhere, the manifest still names its own directory's files
    m = decode_manifest(raw, "gs://other/copy/ofindex-manifest.json")
    assert m.data_dir == "gs://other/copy" and m.format is RecordFormat.OFRECORD
    assert (m.records, m.sizes, m.fingerprints) == ([3, 4], [30, 40], ["etag:a", "etag:b"])


@pytest.mark.parametrize("mutate", [
    lambda d: d.pop("shards"),
    lambda d: d["shards"]["records"].pop(),
    lambda d: d["shards"]["name"].__setitem__(1, "p0"),
    lambda d: d.__setitem__("ofindex_manifest", 99),
    lambda d: d.__setitem__("format", "parquet"),
])
def test_bad_manifests_say_rebuild(mutate):
    doc = json.loads(encode_manifest(RecordFormat.TFRECORD, "/d/m.json", "/d", None,
                                     ["p0", "p1"], [1, 2], [10, 20], ["", ""]))
    mutate(doc)
    with pytest.raises(ofindex.SidecarError, match=r"ofindex|manifest"):
        decode_manifest(json.dumps(doc).encode(), "/d/m.json")


def test_manifest_rules_for_directories_globs_and_lists(tmp_path):
    d = str(tmp_path / "ds")
    write_dataset(d, 30, 3, kind="random", record_size=50, index=False)
    ofindex.build_index(os.path.join(d, "part-*"))
    assert not os.path.exists(manifest_of(d))  # a glob: none by default
    ofindex.build_index(os.path.join(d, "part-*"), manifest=True)
    assert os.path.exists(manifest_of(d))
    os.remove(manifest_of(d))
    ofindex.build_index([d])  # the CLI's one-element list of a directory
    m = read_manifest(manifest_of(d), Storages())
    assert m.names == ["part-00000", "part-00001", "part-00002"] and sum(m.records) == 30
    elsewhere = str(tmp_path / "m.json")
    ofindex.build_index(d, manifest=elsewhere, index_dir=str(tmp_path / "idx"))
    ds = ofindex.open(elsewhere)
    assert len(ds) == 30 and ds.shards[0].index_url.startswith(str(tmp_path / "idx"))
    assert list(ds) == list(ofindex.open(d, manifest=False))
    with pytest.raises(ofindex.DataFileNotFoundError):
        ofindex.open(str(tmp_path / "nope.json"))


def test_local_manifest_checks_listing_at_open(tmp_path):
    d = str(tmp_path / "ds")
    write_dataset(d, 20, 2, kind="random", record_size=50)
    ofindex.build_index(d)
    with ofindex.Writer(os.path.join(d, "part-00002")) as w:
        w.write(b"new shard")
    with pytest.raises(ofindex.StaleIndexError, match=r"not in the manifest.*ofindex build"):
        ofindex.open(d)
    assert len(ofindex.open(d, manifest=False)) == 21


def test_local_manifest_names_a_shard_in_a_subdirectory(tmp_path):
    """A JSON manifest may name a shard below its data directory (``sub/deep``); opening it
    locally lists the directory's own files and looks for such a shard on its own (it was
    refused as missing, the listing holding no subdirectory's files)."""
    d = str(tmp_path / "ds")
    for name in ("top", os.path.join("sub", "deep")):
        with ofindex.Writer(os.path.join(d, name), index=False) as w:
            w.write(name.encode())
    index = d + ".ofindex"
    ofindex.build_index(os.path.join(d, "top"))
    ofindex.build_index(os.path.join(d, "sub", "deep"), index_dir=index)
    m = manifest_of(d)
    ofindex.build_index(os.path.join(d, "top"), manifest=m)  # then list both by hand
    with open(m, "rb") as f:
        doc = json.loads(f.read())
    del doc["crc32c"]
    deep = os.stat(os.path.join(d, "sub", "deep"))
    doc["shards"] = {"name": ["top", "sub/deep"], "records": [1, 1],
                     "size": [doc["shards"]["size"][0], deep.st_size],
                     "fingerprint": [doc["shards"]["fingerprint"][0],
                                     f"mtime_ns:{deep.st_mtime_ns}"]}
    text = json.dumps(doc, separators=(",", ":")).encode()
    with open(m, "wb") as f:
        f.write(text[:-1] + b',"crc32c":%d}' % crc32c.crc32c(text))
    assert ofindex.open(d)[:] == [b"top", os.path.join("sub", "deep").encode()]
    os.remove(os.path.join(d, "sub", "deep"))
    with pytest.raises(ofindex.StaleIndexError, match=r"missing: \['sub/deep'\]"):
        ofindex.open(d)


def test_readahead_serves_any_access_pattern():
    storage, path = storage_for("memory://ofindex-readahead/blob")
    data = np.random.default_rng(0).bytes(1_000_003)
    storage.write_atomic(path, [data])
    rng = np.random.default_rng(1)
    with ReadAhead(storage, path, len(data), chunk=1 << 16) as ra:
        pos = 0
        buf = bytearray(40_000)
        while pos < len(data):  # the scanner's pattern: forward, sometimes re-reading a tail
            n = ra.read_into(path, pos, memoryview(buf))
            assert bytes(buf[:n]) == data[pos : pos + n]
            pos += max(1, n - int(rng.integers(0, 5000)))
        for _ in range(50):  # and arbitrary jumps, backwards too
            a = int(rng.integers(0, len(data)))
            b = min(len(data), a + int(rng.integers(0, 200_000)))
            assert ra.read(path, a, b) == data[a:b]
        assert ra.read_block(path, len(data) - 10, 100) == data[-10:]
