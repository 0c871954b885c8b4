"""Issue 26's reproducers: no record comes back wrong without an error when a data file is
replaced after ``open``, when a manifest's counts are changed, or when a node cache holds pages
of a sidecar that has since been rebuilt for a file of the same size and mtime.

Every read path is tried: ``ds[i]``, slices, ``__getitems__``, ``iter_records``,
``iter_batches`` (lists and buffers), compiled and pure Python, memory maps on and off.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import shutil

import pytest

import ofindex
from ofindex import SidecarError, StaleIndexError
from ofindex.formats.location import resolve
from ofindex.formats.placement import Layout
from ofindex.index.builder import build_location
from tests.kit.helpers import manifest_of, reseal_manifest, sidecar_of

pytestmark = pytest.mark.usefixtures("impl")  # compiled and pure-Python loops

READS = {
    "ds[i]": lambda ds: [ds[3]],
    "slice": lambda ds: ds[2:5],
    "__getitems__": lambda ds: ds.__getitems__([7, 1, 3]),
    "iter_records": lambda ds: list(ds.iter_records(0)),
    "iter_batches": lambda ds: [r for b in ds.iter_batches(4) for r in b],
    "iter_batches(as_buffer)": lambda ds: [r for b in ds.iter_batches(4, as_buffer=True)
                                           for r in b.to_list()],
}


def _write(path: str, tag: bytes, n: int = 10) -> list[bytes]:
    records = [tag + b"%03d" % i for i in range(n)]
    with ofindex.Writer(path) as w:
        w.write_many(records)
    return records


def _replace(path: str, tag: bytes, *, same_mtime: bool) -> None:
    """Replace ``path`` by rename with a file whose records have the same lengths (so the old
    index fits it exactly), as the Writer, a build tool or ``gsutil cp`` does."""
    st = os.stat(path)
    tmp = os.path.join(os.path.dirname(path), "incoming.tmp")
    _write(tmp, tag)
    os.remove(sidecar_of(tmp))
    if same_mtime:  # cp -p, rsync -t: only the inode tells the files apart
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, path)


@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("same_mtime", [True, False])
@pytest.mark.parametrize("read", sorted(READS))
def test_file_replaced_after_open_is_refused(tmp_path, mmap, same_mtime, read):
    p = str(tmp_path / "a.tfrecord")
    _write(p, b"old")
    ds = ofindex.open(p, mmap=mmap)
    _replace(p, b"new", same_mtime=same_mtime)
    with pytest.raises(StaleIndexError, match=r"a.tfrecord: .*since the dataset was opened.*"
                                              r"reopen the dataset"):
        READS[read](ds)
    if same_mtime:  # reopened: checked afresh; the old index fits the new file exactly
        assert ofindex.open(p, mmap=mmap)[3] == b"new003"
    else:  # the index on disk is the old file's: stale, as it should be
        with pytest.raises(StaleIndexError, match="since it was indexed"):
            ofindex.open(p, mmap=mmap)


@pytest.mark.parametrize("mmap", [True, False])
def test_file_replaced_before_a_reopen_is_refused(tmp_path, mmap):
    """Reopening after ``close()``, after ``fork`` and after pickling (spawn) all check."""
    p = str(tmp_path / "a.tfrecord")
    old = _write(p, b"old")
    ds = ofindex.open(p, mmap=mmap)
    assert ds[3] == old[3]
    clone = pickle.loads(pickle.dumps(ds))  # what a spawned DataLoader worker gets
    ds.close()
    _replace(p, b"new", same_mtime=True)
    with pytest.raises(StaleIndexError, match="inode changed"):
        ds[3]
    with pytest.raises(StaleIndexError, match="inode changed"):
        clone.__getitems__([1, 2])
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        outcome = pool.apply(_read_in_child, (ds,))
    assert outcome.startswith("StaleIndexError"), outcome


def _read_in_child(ds: ofindex.Dataset) -> str:
    try:
        return repr(ds[3])
    except ofindex.OfindexError as exc:
        return f"{type(exc).__name__}: {exc}"


def test_handles_evicted_and_reopened_are_checked(tmp_path, monkeypatch):
    """More shards than cached handles: a handle dropped and reopened is checked again."""
    from ofindex.storage import openfiles

    monkeypatch.setattr(openfiles, "limits", lambda: openfiles.FileLimits(256, 2, 2))
    paths = [str(tmp_path / f"part-{k}") for k in range(4)]
    for k, p in enumerate(paths):
        _write(p, b"s%d" % k)
    ds = ofindex.open(paths, mmap=False)
    assert [ds[10 * k] for k in range(4)] == [b"s%d000" % k for k in range(4)]
    _replace(paths[0], b"nn", same_mtime=True)  # its handle was evicted by the others
    with pytest.raises(StaleIndexError, match="part-0: it was replaced"):
        ds[0]


def test_unchanged_files_read_on(tmp_path):
    """The checks cost nothing visible: close, pickle and fork of an unchanged dataset."""
    p = str(tmp_path / "a.tfrecord")
    old = _write(p, b"old")
    ds = ofindex.open(p)
    ds.close()
    assert ds[:] == old and pickle.loads(pickle.dumps(ds))[:] == old


# -- manifests --------------------------------------------------------------------------------

def _dataset(root: str, shards: int = 3, n: int = 20,
             layout: Layout = Layout.SIBLING) -> list[bytes]:
    """``shards`` files of ``n`` records in ``root``, indexed with ``layout`` (the default
    place, or beside the data as ofindex 0.2 did), manifest included."""
    os.makedirs(root, exist_ok=True)
    out = []
    for k in range(shards):
        out += _write(os.path.join(root, f"part-{k}"), b"%d-" % k, n)
    if layout is Layout.SIBLING:
        ofindex.build_index(root)
    else:  # the real build, only the layout chosen
        build_location(resolve(root, manifest=False, layout=layout))
    return out


def _manifest_doc(root: str) -> tuple[str, dict]:
    """The path of ``root``'s manifest and its parsed JSON."""
    manifest = manifest_of(root)
    with open(manifest, "rb") as f:
        return manifest, json.loads(f.read())


@pytest.mark.parametrize("read", sorted(READS))
def test_a_manifest_with_a_wrong_count_is_refused(tmp_path, read):
    """Issue 26, item 3: shard 0's count raised from 20 to 30 would make ``ds[30]`` shard 1's
    record 10 under the wrong number; the manifest's checksum refuses it before any read."""
    root = str(tmp_path / "d")
    _dataset(root)
    manifest, doc = _manifest_doc(root)
    doc["shards"]["records"][0] = 30
    with open(manifest, "w") as f:
        json.dump(doc, f)
    with pytest.raises(SidecarError, match=r"ofindex-manifest.json: the manifest fails its "
                                           r"checksum.*ofindex build"):
        READS[read](ofindex.open(root))


def test_a_forged_manifest_is_refused_when_the_shard_is_read(tmp_path):
    """A manifest rewritten with a valid checksum but a wrong count: the count is checked
    against the shard's sidecar header whenever that header is loaded."""
    root = str(tmp_path / "d")
    _dataset(root)
    manifest, doc = _manifest_doc(root)
    doc["shards"]["records"][0] = 30
    with open(manifest, "wb") as f:
        f.write(reseal_manifest(doc))
    ds = ofindex.open(root)
    with pytest.raises(StaleIndexError, match=r"part-0\.ofidx: the sidecar does not match "
                                              r"the dataset manifest"):
        ds[25]


def test_old_manifests_without_a_checksum_still_open(tmp_path):
    """Version 1 manifests (ofindex 0.2: in the data directory, sidecars beside the data, no
    checksum) open as before."""
    root = str(tmp_path / "d")
    records = _dataset(root, layout=Layout.BESIDE)
    manifest, doc = _manifest_doc(root)
    assert manifest == os.path.join(root, "ofindex-manifest.json") and "layout" not in doc
    del doc["crc32c"], doc["shards"]["body_crc"]
    doc["ofindex_manifest"] = 1
    with open(manifest, "w") as f:
        json.dump(doc, f)
    assert ofindex.open(root)[:] == records


# -- the node cache after a rebuild --------------------------------------------------------

def test_node_cache_after_a_same_stamp_rebuild(nginx_server, tmp_path):
    """Issue 26, item 9: a warm node cache, then the data file replaced by one of the same
    size and mtime (nginx's ETag is mtime and size: unchanged too) and the index rebuilt.
    The cached pages belong to the old sidecar: they must not be used."""
    root = os.path.join(nginx_server.root, "same-stamp")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    p = os.path.join(root, "a.tfrecord")
    sizes = [50 + (i % 7) for i in range(3000)]  # paged: many offsets
    old = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    with ofindex.Writer(p) as w:
        w.write_many(old)
    ofindex.build_index(root)
    url = nginx_server.url + "/same-stamp/"
    cache = str(tmp_path / "cache")
    picks = [5, 1500, 2999, 700]
    ds = ofindex.open(url, cache_dir=cache)
    assert ds.__getitems__(picks) == [old[i] for i in picks]
    ds.close()
    st = os.stat(p)
    new = [bytes([(i + 3) % 251]) * n for i, n in enumerate(reversed(sizes))]  # same total
    tmp = os.path.join(root, "incoming.tmp")
    with ofindex.Writer(tmp) as w:
        w.write_many(new)
    os.remove(sidecar_of(tmp))
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, p)
    assert os.stat(p).st_size == st.st_size
    ofindex.build_index(root, resume=False)  # the index (and manifest) rebuilt
    ds = ofindex.open(url, cache_dir=cache)
    assert ds.__getitems__(picks) == [new[i] for i in picks]


def test_damaged_node_cache_entries_are_misses(nginx_server, tmp_path):
    """Pages and headers found in the node cache are checked like fetched ones: a damaged or
    tampered entry is fetched again, never read through and never an error."""
    import sqlite3

    root = os.path.join(nginx_server.root, "damaged-cache")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    records = [bytes([i % 251]) * (50 + i % 7) for i in range(3000)]
    with ofindex.Writer(os.path.join(root, "a.tfrecord")) as w:
        w.write_many(records)
    ofindex.build_index(root)
    url, cache = nginx_server.url + "/damaged-cache/", str(tmp_path / "cache")
    picks = [5, 1500, 2999, 700]
    with ofindex.open(url, cache_dir=cache) as ds:
        assert ds.__getitems__(picks) == [records[i] for i in picks]
    db = sqlite3.connect(os.path.join(cache, "ofindex-pages.sqlite3"))
    with db:
        changed = db.execute("UPDATE entries SET data = zeroblob(length(data))").rowcount
    db.close()
    assert changed >= 2  # a header and pages
    with ofindex.open(url, cache_dir=cache) as ds:
        assert ds.__getitems__(picks) == [records[i] for i in picks]


# -- OFRecord payloads: checksums by default -------------------------------------------------

OF_RECORDS = [bytes([65 + i % 26]) * (30 + 7 * i) for i in range(60)]


def _flip_payload_in_place(path: str, packed: bytes, raw: bytes) -> int:
    """Flip one bit of ``path`` (a stored-block gzip file of OFRecords ``raw``, or the raw
    file itself) that lands in a payload byte, keeping size and mtime; returns the record."""
    from tests.kit.helpers import ref_offsets

    bounds = [*ref_offsets(OF_RECORDS, 8), len(raw)]
    for at in range(len(packed) // 3, len(packed)):
        bad = bytearray(packed)
        bad[at] ^= 0x08
        if packed is raw:
            out = bytes(bad)
        else:
            import zlib
            try:
                out = zlib.decompressobj(-15).decompress(bytes(bad[10:-8]))
            except zlib.error:
                continue
        diff = [i for i in range(min(len(out), len(raw))) if out[i] != raw[i]]
        if len(out) == len(raw) and len(diff) == 1:
            record = max(k for k, b in enumerate(bounds) if b <= diff[0])
            if diff[0] >= bounds[record] + 8:  # a payload byte, not the length
                st = os.stat(path)
                with open(path, "r+b") as f:
                    f.write(bytes(bad))
                os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
                return record
    raise AssertionError("no payload byte found")


@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("read", ["ds[i]", "__getitems__", "slice", "iter_records",
                                  "iter_batches", "iter_batches(as_buffer)"])
def test_ofrecord_payload_changed_after_indexing_is_refused(tmp_path, gz, read):
    """Issue 26, items 4 and 5: OFRecord files built with the defaults carry payload CRC32Cs
    in their sidecars (GZIP ones too), so a flipped bit is an error on every read path."""
    import gzip

    from tests.kit.helpers import ref_ofrecord, write_raw

    raw = ref_ofrecord(OF_RECORDS)
    packed = gzip.compress(raw, compresslevel=0, mtime=0) if gz else raw
    path = write_raw(str(tmp_path / ("o.gz" if gz else "o.ofrecord")), packed)
    (result,) = ofindex.build_index(path)  # the defaults: no checksums= asked for
    assert result.format is ofindex.RecordFormat.OFRECORD
    assert ofindex.open(path).shards_without_checksums() == []
    k = _flip_payload_in_place(path, packed, raw)
    ds = ofindex.open(path)
    reads = {
        "ds[i]": lambda: ds[k],
        "__getitems__": lambda: ds.__getitems__([0, k]),
        "slice": lambda: ds[k - 1 : k + 1],
        "iter_records": lambda: list(ds.iter_records(0)),
        "iter_batches": lambda: list(ds.iter_batches(8)),
        "iter_batches(as_buffer)": lambda: [b.to_list() for b in ds.iter_batches(8,
                                                                           as_buffer=True)],
    }
    # a pass that reaches the end of a gzip member may meet its CRC32 first
    want = (f"record ({k} .*CRC32C mismatch|\\d+: .*incorrect data check)"
            if gz and read.startswith("iter") else f"record {k} .*CRC32C mismatch")
    with pytest.raises(ofindex.CorruptRecordError, match=want):
        reads[read]()
    assert ds[k + 1] == OF_RECORDS[k + 1]  # the others read on


def test_gzip_stream_check_does_not_depend_on_verify(tmp_path):
    """A whole pass over a GZIP file checks the member's CRC32 even with verify=False (the
    payload checksums are then not checked)."""
    import gzip

    from tests.kit.helpers import ref_ofrecord, write_raw

    raw = ref_ofrecord(OF_RECORDS)
    packed = gzip.compress(raw, compresslevel=0, mtime=0)
    path = write_raw(str(tmp_path / "o.gz"), packed)
    ofindex.build_index(path, checksums=False)
    _flip_payload_in_place(path, packed, raw)
    with pytest.raises(ofindex.CorruptRecordError, match="incorrect data check"):
        list(ofindex.open(path, verify=False))


def test_ofrecord_over_http_with_a_flipping_proxy(nginx_server):
    """Issue 26, item 5: OFRecords read over HTTP through a proxy that flips bits are
    checked against the sidecar's checksums (the default for OFRecord builds)."""
    from tests.kit.faultproxy import FaultProxy

    root = os.path.join(nginx_server.root, "of-flip")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    records = [bytes([i % 251]) * 300 for i in range(400)]
    with ofindex.Writer(os.path.join(root, "part-0"), format="ofrecord", checksums=False) as w:
        w.write_many(records)
    os.remove(sidecar_of(os.path.join(root, "part-0")))
    ofindex.build_index(root)  # a build with the defaults
    wrong, refused = 0, 0
    with FaultProxy(nginx_server.url, flip=0.5, seed=7) as proxy:
        for round_ in range(20):
            picks = [(round_ * 37 + j * 11) % len(records) for j in range(16)]
            try:
                got = ofindex.open(f"{proxy.url}/of-flip/", cache_bytes=0).__getitems__(picks)
            except ofindex.OfindexError:
                refused += 1
                continue
            wrong += sum(g != records[i] for g, i in zip(got, picks, strict=True))
        assert proxy.counts["flip"] > 0
    assert wrong == 0 and refused > 0
