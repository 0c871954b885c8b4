"""The compact manifest (``ofindex-manifest.bin``, issue 32): written and read back on local
disk and ``memory://``, refused when tampered with or truncated, a million shards opened in
the simulated store with global record numbers mapped right and the first batch in two
request rounds, and JSON manifests still opened."""

from __future__ import annotations

import os
import pickle
import struct
import sys

import fsspec
import numpy as np
import pytest

import ofindex
from ofindex import ManifestError, StaleIndexError
from ofindex.formats import compact_manifest, manifest_binary
from ofindex.formats.compact_manifest import COMPACT_NAME, open_compact
from ofindex.formats.framing import RecordFormat
from ofindex.formats.manifest import MANIFEST_NAME
from ofindex.formats.sidecar_header import Compression
from ofindex.index.build_file import BuildResult
from ofindex.index.build_results import BuildResults
from ofindex.shuffle import GlobalShuffleSampler
from ofindex.storage import Storages
from tests.kit import paths
from tests.kit.helpers import index_dir_of

sys.path.insert(0, paths.TOOLS)
import sim_store
from bench_scale import Rounds


def _dataset(root: str, shards: int = 12) -> list[bytes]:
    """``shards`` small TFRecord files (1..7 records each) in ``root``; returns the records."""
    os.makedirs(root)
    records = []
    for k in range(shards):
        with ofindex.Writer(os.path.join(root, f"part-{k:05d}.tfrecord")) as w:
            for i in range(k % 7 + 1):
                w.write(b"shard %d record %d" % (k, i))
                records.append(b"shard %d record %d" % (k, i))
    return records


@pytest.fixture
def built(tmp_path, monkeypatch):
    """A 12-shard dataset with a compact manifest in the default place."""
    monkeypatch.setattr(compact_manifest, "COMPACT_FROM_SHARDS", 10)
    root = str(tmp_path / "data")
    records = _dataset(root)
    ofindex.build_index(root)
    return root, records, os.path.join(index_dir_of(root), COMPACT_NAME)


def test_written_and_read_back_on_local_disk(built):
    root, records, manifest = built
    assert os.path.exists(manifest)
    assert not os.path.exists(os.path.join(index_dir_of(root), MANIFEST_NAME))
    with ofindex.open(root) as ds:
        assert type(ds._table.shards).__name__ == "ManifestShards"
        assert len(ds) == len(records) and ds[:] == records and list(ds) == records
        assert ds[[7, 3, -1, 0]] == [records[i] for i in (7, 3, -1, 0)]
        infos = ds.shards
    with ofindex.open(root, manifest=False) as listed:  # the same shards, listed and stat-ed
        assert infos == listed.shards
    again = pickle.loads(pickle.dumps(ofindex.open(root)))
    assert again[len(records) - 1] == records[-1]
    assert ofindex.open(manifest)[:] == records  # named


def test_round_trip_through_memory_fs():
    fs = fsspec.filesystem("memory")
    root = "memory://compact-rt/data"
    records = []
    for k in range(40):
        payloads = [b"%d:%d" % (k, i) * 40 for i in range(k % 5 + 70)]  # paged sidecars
        with ofindex.Writer(f"{root}/part-{k:05d}.tfrecord") as w:
            for p in payloads:
                w.write(p)
        records += payloads
    try:
        ofindex.build_index(root, manifest=f"{root}.ofindex/{COMPACT_NAME}")
        assert fs.exists(f"/compact-rt/data.ofindex/{COMPACT_NAME}")
        ds = ofindex.open(root)
        assert isinstance(ds._table.shards, ofindex.read.manifest_shards.ManifestShards)
        order = np.random.default_rng(1).permutation(len(records))
        assert ds[order] == [records[i] for i in order.tolist()]
        assert [ds[i] for i in range(0, len(records), 37)] == records[::37]
    finally:
        fs.rm("/compact-rt", recursive=True)


def test_the_default_kind_follows_the_shard_count(tmp_path, monkeypatch):
    root = str(tmp_path / "data")
    records = _dataset(root)
    json_path = os.path.join(index_dir_of(root), MANIFEST_NAME)
    bin_path = os.path.join(index_dir_of(root), COMPACT_NAME)
    ofindex.build_index(root)  # 12 shards: JSON, as earlier releases read
    assert os.path.exists(json_path) and not os.path.exists(bin_path)
    monkeypatch.setattr(compact_manifest, "COMPACT_FROM_SHARDS", 12)
    ofindex.build_index(root)
    assert os.path.exists(bin_path) and not os.path.exists(json_path)  # the JSON one removed
    monkeypatch.setattr(compact_manifest, "COMPACT_FROM_SHARDS", 13)
    ofindex.build_index(root)
    assert os.path.exists(json_path) and not os.path.exists(bin_path)
    assert ofindex.open(root)[:] == records


@pytest.mark.parametrize("where", ["local", "memory"])
def test_a_manifest_named_with_a_standard_name_replaces_the_other_kind(tmp_path, where):
    """``build_index(manifest=...)`` naming ``ofindex-manifest.bin`` or
    ``ofindex-manifest.json`` removes the other kind's file in that directory, as the switch
    at COMPACT_FROM_SHARDS does (the JSON one stayed, and an older compact one beside a new
    JSON manifest was read in its place: readers look for the compact one first)."""
    local = str(tmp_path / "data")
    records = _dataset(local)
    root = local if where == "local" else "memory://named-kinds/data"
    fs = fsspec.filesystem("memory")
    if where == "memory":
        for name in os.listdir(local):
            with open(os.path.join(local, name), "rb") as f:
                fs.pipe(f"/named-kinds/data/{name}", f.read())
    index = f"{root}.ofindex"

    def exists(name: str) -> bool:
        return (os.path.exists(os.path.join(index, name)) if where == "local"
                else fs.exists(f"/named-kinds/data.ofindex/{name}"))

    try:
        ofindex.build_index(root)  # the JSON manifest in the default place
        assert exists(MANIFEST_NAME) and not exists(COMPACT_NAME)
        ofindex.build_index(root, manifest=f"{index}/{COMPACT_NAME}")
        assert exists(COMPACT_NAME) and not exists(MANIFEST_NAME)
        ofindex.build_index(root, manifest=f"{index}/{MANIFEST_NAME}")
        assert exists(MANIFEST_NAME) and not exists(COMPACT_NAME)
        with ofindex.open(root) as ds:
            assert ds[:] == records
        ofindex.build_index(root, manifest=f"{index}/other-name.json")  # not a standard name
        assert exists(MANIFEST_NAME) and exists("other-name.json")
    finally:
        if where == "memory":
            fs.rm("/named-kinds", recursive=True)


def test_json_manifests_still_open(tmp_path):
    root = str(tmp_path / "data")
    records = _dataset(root)
    ofindex.build_index(root)
    ds = ofindex.open(root)
    assert isinstance(ds._table.shards, list) and ds[:] == records


def _flips(size: int) -> list[int]:
    """Byte positions to damage: every field of the header, then spread over the file."""
    return sorted({*range(0, 64, 3), *np.linspace(64, size - 1, 40).astype(int).tolist()})


def _read_all(root: str) -> None:
    ds = ofindex.open(root)
    ds[:]


def test_every_damaged_byte_is_refused(built):
    """Every byte is under a CRC (the head's or a page's): a flipped bit anywhere is a
    ManifestError naming the manifest, at open or when the page is first read."""
    root, _, manifest = built
    with open(manifest, "rb") as f:
        good = f.read()
    for at in _flips(len(good)):
        bad = bytearray(good)
        bad[at] ^= 0x10
        with open(manifest, "wb") as f:
            f.write(bad)
        with pytest.raises(ManifestError, match=r"ofindex-manifest\.bin.*rebuild"):
            _read_all(root)


def test_a_truncated_manifest_is_refused(built):
    root, _, manifest = built
    with open(manifest, "rb") as f:
        good = f.read()
    head = struct.unpack_from("<I", good, 12)[0]
    for cut in sorted({0, 1, 63, 64, 100, head - 1, head, head + 10, len(good) - 1}):
        with open(manifest, "wb") as f:
            f.write(good[:cut])
        with pytest.raises(ManifestError, match=r"ofindex-manifest\.bin.*(truncated|bad magic)"):
            _read_all(root)
    assert issubclass(ManifestError, ofindex.OfindexError) and issubclass(ManifestError,
                                                                          ValueError)


def test_a_forged_count_is_refused_when_its_shard_is_read(built):
    """A manifest rewritten whole with shard 2's count raised (every CRC valid): the count is
    checked against the shard's sidecar header before a record is read through it."""
    root, records, manifest = built
    storage, path = Storages().for_url(manifest)
    m = open_compact(storage, path)
    stamps = [m.stamp(k) for k in range(len(m))]
    writer = manifest_binary.CompactWriter(RecordFormat.TFRECORD, len(m), None, None, True)
    writer.add(manifest_binary.Row(m.name(k), int(m.records[k]) + (k == 2), int(m.sizes[k]),
                                   stamps[k][0], stamps[k][1]) for k in range(len(m)))
    with open(manifest, "wb") as f:
        f.write(b"".join(writer.finish()))
    ds = ofindex.open(root)
    assert len(ds) == len(records) + 1
    assert ds[0] == records[0]  # shard 0 is what the manifest says
    with pytest.raises(StaleIndexError, match=r"part-00002\.tfrecord\.ofidx: the sidecar does "
                                              r"not match the dataset manifest"):
        ds[4]


def test_a_million_shards_in_the_simulated_store():
    """1e11 records in 1e6 shards: opened by three requests that read a fraction of the
    manifest, global numbers mapped as the store's own counts say, the first batch of 256
    globally shuffled records in two rounds (the stamps pages ride with the sidecar pages)."""
    records, shards = 10**11, 10**6
    url = sim_store.dataset_url(records, shards, 200)
    sim = sim_store.dataset_named(url.split("://", 1)[1])
    size = len(sim_store.served_manifest(sim, "bin"))
    sim_store.STATS.reset()
    ds = ofindex.open(url)
    # the default index directory has none (two misses), then the data directory: the compact
    # manifest's header (its JSON: a miss), head and the columns read whole
    assert len(ds) == records and sim_store.STATS.requests == {"compact": 3, "missing": 3}
    assert sim_store.STATS.bytes["compact"] < size // 2  # the stamps stay in the bucket
    assert len(ds._table.held()) == 0
    counts = ds.cumulative_counts
    rng = np.random.default_rng(32)
    for k in [0, 1, shards // 2, shards - 1, *rng.integers(0, shards, 60).tolist()]:
        assert counts[k] == sim.first(k + 1)
        inside = int(rng.integers(0, sim.count(k)))
        assert ds.locate(sim.first(k) + inside) == (k, inside)
    rounds = Rounds(ds._table.storage, sim_store.STATS)
    batch = np.fromiter(iter(GlobalShuffleSampler(len(ds), seed=0)),
                        dtype=np.int64, count=256)
    sim_store.STATS.reset()
    got = ds[batch]
    assert [struct.unpack_from("<Q", g)[0] for g in got] == batch.tolist()
    assert len(rounds.log) == 2 and sim_store.STATS.requests["compact"] <= 256
    assert ds[int(batch[0])] == got[0] and ds[-1][:8] == struct.pack("<Q", records - 1)


def test_stamps_pages_are_shared_through_the_node_cache(tmp_path):
    """A second process of the machine (here a second open) finds the stamps pages, headers
    and sidecar pages the first one fetched in ``cache_dir``: only data is fetched."""
    url = sim_store.dataset_url(10**8, 10**4, 200)
    batch = np.random.default_rng(3).integers(0, 10**8, 64)
    first = ofindex.open(url, cache_dir=str(tmp_path))
    sim_store.STATS.reset()
    expected = first[batch]
    assert sim_store.STATS.requests["compact"] > 0
    second = ofindex.open(url, cache_dir=str(tmp_path))
    sim_store.STATS.reset()
    assert second[batch] == expected
    assert set(sim_store.STATS.requests) == {"data"}


def test_build_results_keep_every_field():
    results = [
        BuildResult("s3://b/d/part-0", "s3://b/d.ofindex/part-0.ofidx", RecordFormat.OFRECORD,
                    12, 3400, fingerprint="etag:\"ab\"", body_crc=0, index_bytes=620),
        BuildResult("/d/p-1", "/d.ofindex/p-1.ofidx", None, 0, 0, skipped=True),
        BuildResult("/d/p-2.gz", "/d.ofindex/p-2.gz.ofidx", RecordFormat.TFRECORD, 7, 99,
                    partial=True, problem="bad CRC at 880", fingerprint="mtime_ns:1",
                    compression=Compression.GZIP, uncompressed_size=400, seek_points=3,
                    body_crc=2**32 - 1),
    ]
    table = BuildResults()
    for r in results:
        table.append(r)
    assert list(table) == results and table == results and table[-1] == results[-1]
    assert table[1:] == results[1:] and len(table) == 3


def test_the_writer_holds_at_most_a_page_of_rows():
    """Rows streamed in (a million-file build's results) are encoded a page at a time."""
    n, eager, stamp = 5000, 1024, 16
    writer = manifest_binary.CompactWriter(RecordFormat.TFRECORD, n, None, None, False,
                                           eager_rows=eager, stamp_rows=stamp)
    for lo in range(0, n, 300):
        writer.add(manifest_binary.Row(f"f{k}", k, 10 * k, f"fp{k}", k) for k in
                   range(lo, min(lo + 300, n)))
        held = {size: sum(len(p) for p in pending) for size, pending in writer.pending.items()}
        assert held[eager] < eager and held[stamp] < stamp
    fs = fsspec.filesystem("memory")
    fs.pipe("/compact-writer/ofindex-manifest.bin", b"".join(writer.finish()))
    try:
        storage, path = Storages().for_url("memory://compact-writer/ofindex-manifest.bin")
        m = open_compact(storage, path)
        assert m.records.tolist() == list(range(n)) and m.sizes[4999] == 49990
        assert [m.name(k) for k in (0, 1023, 1024, 4999)] == ["f0", "f1023", "f1024", "f4999"]
        assert m.stamp(4097) == ("fp4097", 4097) and m.data_dir == m.url.rsplit("/", 1)[0]
    finally:
        fs.rm("/compact-writer", recursive=True)


def test_small_shards_read_whole_in_two_rounds_too():
    """Shards of a few pages have their sidecars fetched whole: their stamps come in the same
    round (no round of its own), and the records are right."""
    url = sim_store.dataset_url(4000, 200, 200)  # 20 records a shard: sidecars read whole
    ds = ofindex.open(url)
    rounds = Rounds(ds._table.storage, sim_store.STATS)
    batch = np.random.default_rng(5).permutation(4000)[:64]
    got = ds[batch]
    assert [struct.unpack_from("<Q", g)[0] for g in got] == batch.tolist()
    assert len(rounds.log) == 2


@pytest.mark.parametrize("column", ["records", "sizes"])
def test_totals_past_2_64_are_refused_not_wrapped(built, column):
    """Counts (or sizes) of 2^62 in four shards add up past 2^64, which wraps to a few in
    64 bits: a header claiming the wrapped total is refused at open, as a ManifestError naming
    the manifest (a plain ValueError came from ``ds[i]`` once it passed)."""
    root, _, manifest = built
    storage, path = Storages().for_url(manifest)
    m = open_compact(storage, path)
    stamps = [m.stamp(k) for k in range(len(m))]
    big = 1 << 62
    rows = [manifest_binary.Row(m.name(k), big if column == "records" and k < 4 else
                                int(m.records[k]), big if column == "sizes" and k < 4 else
                                int(m.sizes[k]), stamps[k][0], stamps[k][1])
            for k in range(len(m))]
    writer = manifest_binary.CompactWriter(RecordFormat.TFRECORD, len(m), None, None, True)
    writer.add(rows)
    true_records = sum(r.records for r in rows)
    true_bytes = sum(r.size for r in rows)
    assert writer.total_records == true_records and writer.total_bytes == true_bytes
    assert max(true_records, true_bytes) > 1 << 64
    writer.total_records, writer.total_bytes = true_records % (1 << 64), true_bytes % (1 << 64)
    with open(manifest, "wb") as f:  # the header's totals wrapped, every CRC valid
        f.write(b"".join(writer.finish()))
    with pytest.raises(ManifestError, match=r"ofindex-manifest\.bin: its columns do not add up"):
        ofindex.open(root)


def test_a_dataset_whose_counts_add_up_past_2_64_is_refused():
    """Record counts that add up past what a dataset can hold are refused whatever their
    sum wraps to in 64 bits (here to 0)."""
    from ofindex.read.shards import Shard
    from ofindex.read.table import ShardTable
    from ofindex.storage.local import LocalStorage

    storage = LocalStorage()
    shards = [Shard(f"/nowhere/{k}", storage, f"/nowhere/{k}.ofidx", 1 << 61, 10)
              for k in range(8)]
    with pytest.raises(ofindex.SidecarError, match="claim 18446744073709551616 records"):
        ShardTable(storage, shards)


def _forged_manifest(shards: int, rows: int = 1 << 16) -> bytes:
    """A compact manifest claiming ``shards`` shards whose every page holds zeros (empty
    names and fingerprints), deflated as far as zlib goes, every CRC valid: a few bytes per
    thousand rows."""
    import zlib

    import crc32c

    order = [*manifest_binary.EAGER, manifest_binary.STAMPS]
    width = {manifest_binary.RECORDS: 8, manifest_binary.SIZES: 8, manifest_binary.FLAGS: 1,
             manifest_binary.NAMES: 4, manifest_binary.STAMPS: 8}
    pages = -(-shards // rows)
    dirs = struct.pack("<II", 0xFFFFFFFF, 0xFFFFFFFF)
    size = 64 + 16 * len(order) + 16 * pages * len(order) + len(dirs)
    size += -size % 8
    columns, table, body, at = b"", [], [], size
    for k, column in enumerate(order):
        columns += struct.pack("<BBHIII", column, 1, 0, rows, k * pages, pages)
        for p in range(pages):
            n = min(rows, shards - p * rows)
            extra = 4 if column in (manifest_binary.NAMES, manifest_binary.STAMPS) else 0
            stored = zlib.compress(bytes(width[column] * n + extra), 9)
            table.append(struct.pack("<QII", at, len(stored), crc32c.crc32c(stored)))
            body.append(stored)
            at += len(stored)
    head = bytearray(struct.pack("<8sHBBIQQQII16x", manifest_binary.MAGIC, 1, 1, 1, size,
                                 shards, 0, 0, len(order), 0))
    head += columns + b"".join(table) + dirs
    head += bytes(size - len(head))
    struct.pack_into("<I", head, 44, crc32c.crc32c(bytes(head)))
    return bytes(head) + b"".join(body)


_PEAK = """
import sys, tracemalloc
import ofindex
tracemalloc.start()
try:
    ofindex.open(sys.argv[1])
    outcome = "opened"
except ofindex.ManifestError as e:
    outcome = "refused" if "claims 67108864 shards" in str(e) else repr(e)
print(outcome, tracemalloc.get_traced_memory()[1])
"""


def test_a_manifest_bomb_is_refused_before_it_is_inflated(tmp_path):
    """A 1.9 MB manifest with valid CRCs claiming 2^26 shards (its pages deflated zeros)
    inflated about 2 GiB at open before anything refused it: it is refused from its head,
    and opening it allocates a few MB (run in a process of its own: the old code's 2 GiB
    stay out of this one)."""
    import subprocess

    forged = _forged_manifest(1 << 26)
    assert len(forged) < 2 << 20
    path = tmp_path / COMPACT_NAME
    path.write_bytes(forged)
    done = subprocess.run([sys.executable, "-c", _PEAK, str(path)], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stderr[-3000:]
    outcome, peak = done.stdout.split()
    assert outcome == "refused" and int(peak) < 16 << 20, done.stdout


def test_a_page_of_strings_inflates_no_further_than_its_size_allows():
    """A names or stamps page is inflated at most MAX_EXPANSION times its stored bytes (and
    a little): one page claiming 16384 names of 4 KB each (64 MB of zeros, deflated to 63 kB)
    is refused once it passes that bound, never inflated whole."""
    import tracemalloc
    import zlib

    import crc32c

    rows = 1 << 14
    deflater = zlib.compressobj(9)
    parts = [deflater.compress(bytes(4 * (rows + 1)))]
    parts += [deflater.compress(bytes(4096 << 10)) for _ in range(rows // 1024)]
    stored = b"".join([*parts, deflater.flush()])
    entry = np.zeros(1, dtype=manifest_binary._PAGE)
    entry[0] = (0, len(stored), crc32c.crc32c(stored))
    column = manifest_binary.Column(manifest_binary.ZLIB, rows, entry)
    head = manifest_binary.Head(RecordFormat.TFRECORD, True, 64, rows, 0, 0,
                                {manifest_binary.NAMES: column}, None, None)
    tracemalloc.start()
    try:
        with pytest.raises(ManifestError, match="does not inflate to its rows"):
            manifest_binary.check_page(head, manifest_binary.NAMES, 0, stored, "m.bin")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    bound = manifest_binary.MAX_EXPANSION * len(stored) + manifest_binary.PAGE_SLACK
    # (zlib grows its output by doubling: the peak is up to twice the bound)
    assert 4 * (rows + 1) + 4096 * rows > 3 * bound and peak < 2.5 * bound
