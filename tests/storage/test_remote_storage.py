"""Remote-storage behaviour on real loopback servers: response checks, retries, bounded
concurrency, request counts, the manifest's one-request open, and the sidecar cache."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ofindex
from ofindex.cli.synthetic import write_dataset
from ofindex.errors import RangeReadError, StorageError
from ofindex.formats.sidecar_header import HEADER_SIZE
from ofindex.storage import storage_for
from ofindex.storage.fsspec_storage import FsspecStorage
from ofindex.transport.failures import classify
from ofindex.transport.policy import RequestPolicy, retry_settings
from tests.kit import paths, servers
from tests.kit.datasets import random_dataset
from tests.kit.helpers import (
    copy_dataset,
    index_dir_of,
    manifest_of,
    read_bytes,
    sidecar_of,
    stamp_as_served,
)
from tests.kit.servers import log_lines

#: Retries without waiting: tests of failures stay fast.
QUICK = RequestPolicy(retries=3, base_delay=0.001, throttle_delay=0.001)

SHARDS = 4
RECORDS = 400


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return random_dataset(tmp_path_factory, "remote-ds", RECORDS, SHARDS, record_size=500, seed=3)


@pytest.fixture
def served(nginx_server, dataset):
    """The dataset under nginx: ``(url, expected records, access log path)``."""
    import uuid

    d, expected = dataset
    name = uuid.uuid4().hex[:8]
    copy_dataset(d, os.path.join(nginx_server.root, name))
    # as if indexed through nginx (its ETags): a copy's content check is test_identity's
    stamp_as_served(os.path.join(nginx_server.root, name), f"{nginx_server.url}/{name}")
    return f"{nginx_server.url}/{name}", expected, nginx_server.log


# -- every response is checked ------------------------------------------------------------------
def test_server_ignoring_range_is_an_error(dataset):
    d, _ = dataset
    # the parent is served: the index is in the data directory's sibling, <d>.ofindex/
    with servers.python_http_server(os.path.dirname(d)) as (root_url, _srv):
        url = f"{root_url}/{os.path.basename(d)}"
        storage, path = storage_for(f"{url}/part-00000")
        size = os.path.getsize(os.path.join(d, "part-00000"))
        with pytest.raises(RangeReadError, match="ignores Range"):
            storage.read(path, 10, 100)
        # even a range that happens to be the whole file: a 200 is not a 206
        with pytest.raises(RangeReadError, match="ignores Range"):
            storage.read(path, 0, size)
        # (after the multi-range request, the two ranges are read as one, through the gap)
        with pytest.raises(RangeReadError, match=r"bytes \[(10, 100|200, 300|10, 300)\)"):
            storage.read_ranges([path, path], [10, 200], [100, 300])
        ds = ofindex.open(f"{url}/part-00000", check_stale=False)
        with pytest.raises(RangeReadError, match="ignores Range"):
            ds[3]
        with pytest.raises(RangeReadError):
            ds.__getitems__([1, 5, 9])


def test_short_and_long_reads_are_errors(served):
    url, _, _ = served
    storage, path = storage_for(f"{url}/part-00000")
    size = storage.stamp(path).size
    with pytest.raises(RangeReadError, match="refusing to return wrong data"):
        storage.read(path, size - 10, size + 10)  # past the end: the server sends fewer
    mem, mpath = storage_for("memory://ofindex-short/x")
    mem.write_atomic(mpath, [b"0123456789"])
    assert mem.read(mpath, 2, 5) == b"234"
    with pytest.raises(RangeReadError, match="returned 2 bytes"):
        mem.read(mpath, 8, 12)


# -- retries --------------------------------------------------------------------------------------
def test_transient_errors_are_retried_then_named(dataset):
    d, expected = dataset
    with servers.python_http_server(os.path.dirname(d), honour_range=True, fail_first=2) as (
            root_url, srv), retry_settings(policy=QUICK):
        url = f"{root_url}/{os.path.basename(d)}"
        storage, path = storage_for(f"{url}/part-00000")
        local = read_bytes(os.path.join(d, "part-00000"))
        assert storage.read(path, 100, 250) == local[100:250]  # 2 x 503, then served
        assert srv.gets == 3
        srv.gets, srv.fail_first = 0, 2
        ds = ofindex.open(f"{url}/part-00000", check_stale=False, manifest=False)
        assert ds[7] == expected[7]
    with servers.python_http_server(d, honour_range=True, fail_first=10**6) as (url, srv):
        storage = FsspecStorage("http", policy=RequestPolicy(retries=2, base_delay=0.001,
                                                          throttle_delay=0.001))
        path = f"{url}/part-00001"
        with pytest.raises(RangeReadError) as err:
            storage.read(path, 100, 250)
        msg = str(err.value)
        assert path in msg and "bytes [100, 250)" in msg and "3 attempts" in msg
        assert srv.gets == 3


def test_connection_resets_are_retried(served):
    import sys

    sys.path.insert(0, paths.TOOLS)
    from latency_proxy import LatencyProxy

    url, _, _ = served
    host, port = url.split("//")[1].split("/")[0].split(":")
    rel = url.split("/", 3)[3]
    quick = QUICK
    with LatencyProxy(host, int(port), rtt=0.0, reset_first=2) as proxy:
        path = f"http://127.0.0.1:{proxy.port}/{rel}/part-00000"
        storage = FsspecStorage("http", policy=quick)
        want = storage_for(f"{url}/part-00000")[0].read(f"{url}/part-00000", 10, 400)
        assert storage.read(path, 10, 400) == want
        assert proxy.connections >= 3
    with LatencyProxy(host, int(port), rtt=0.0, reset_first=10**6) as proxy:
        path = f"http://127.0.0.1:{proxy.port}/{rel}/part-00000"
        storage = FsspecStorage("http", policy=RequestPolicy(retries=1, base_delay=0.001))
        with pytest.raises(StorageError, match=r"bytes \[10, 400\).*2 attempts"):
            storage.read(path, 10, 400)


@pytest.mark.parametrize("cap", [{"rate": 20e6}, {"rate_per_connection": 20e6}])
def test_a_bandwidth_capped_proxy_forwards_every_byte(served, cap):
    import sys

    sys.path.insert(0, paths.TOOLS)
    from latency_proxy import LatencyProxy

    url, _, _ = served
    host, port = url.split("//")[1].split("/")[0].split(":")
    rel = url.split("/", 3)[3]
    direct = storage_for(f"{url}/part-00000")[0]
    want = direct.read_all(f"{url}/part-00000")
    size = len(want)
    with LatencyProxy(host, int(port), rtt=0.002, **cap) as proxy:
        path = f"http://127.0.0.1:{proxy.port}/{rel}/part-00000"
        storage = FsspecStorage("http")
        got = storage.read_ranges([path] * 3, [0, 7, size // 2], [size, 300, size])
        assert got == [want, want[7:300], want[size // 2 :]]
        assert proxy.bytes_down >= size


def test_transient_classification():
    assert classify(ConnectionResetError()).transient
    assert classify(TimeoutError()).transient
    err = OSError("boom")
    err.status = 503
    assert classify(err).transient
    err.status = 404
    assert not classify(err).transient
    assert not classify(FileNotFoundError("x")).transient
    assert not classify(RangeReadError("wrong bytes")).transient


# -- concurrency and request counts ----------------------------------------------------------
def counting(storage: FsspecStorage) -> FsspecStorage:
    """``storage``, recording the most requests in flight at once (single- and multi-range)
    as ``storage.peak``."""
    storage.now = storage.peak = 0
    client = storage.client
    for name in ("read_range", "read_spans"):
        real = getattr(client, name)

        async def counted(*args, real=real, **kwargs):
            storage.now += 1
            storage.peak = max(storage.peak, storage.now)
            try:
                return await real(*args, **kwargs)
            finally:
                storage.now -= 1

        setattr(client, name, counted)
    return storage


def test_ranges_run_concurrently_within_bounds(served):
    url, _, _ = served
    path = f"{url}/part-00002"
    storage = counting(FsspecStorage("http", max_concurrency=8))
    size = storage.stamp(path).size
    starts = list(range(0, size - 100, 150))
    ends = [s + 100 for s in starts]
    out = storage.read_ranges([path] * len(starts), starts, ends)
    local = storage.read_all(path)
    assert out == [local[s:e] for s, e in zip(starts, ends, strict=True)]
    assert 2 <= storage.peak <= 8
    tight = counting(FsspecStorage("http", max_concurrency=8, max_inflight_bytes=250))
    buf = tight.read_ranges_concat([path] * len(starts), starts, ends)
    assert bytes(buf) == b"".join(local[s:e] for s, e in zip(starts, ends, strict=True))
    assert tight.peak <= 2  # 250 bytes in flight hold at most two 100-byte ranges


def test_batch_is_few_requests(served):
    url, expected, log = served
    ds = ofindex.open(url)
    ds[0], ds[RECORDS - 1]
    ds.__getitems__([150, 250])  # and the middle ones
    before = len(log_lines(log))
    idx = np.random.default_rng(0).permutation(RECORDS)[:256]
    assert ds.__getitems__(idx.tolist()) == [expected[i] for i in idx]
    assert len(log_lines(log)) - before == SHARDS  # one coalesced read per shard
    before = len(log_lines(log))
    assert ds[40:160] == expected[40:160]
    assert len(log_lines(log)) - before <= 2  # a slice spanning two shards


# -- the manifest ------------------------------------------------------------------------------
def test_open_through_manifest_is_one_round(served):
    """One round: the JSON manifest, and the compact one's name asked for at once (a 404)."""
    url, expected, log = served
    before = len(log_lines(log))
    ds = ofindex.open(url)
    new = log_lines(log)[before:]
    assert len(new) == 2 and sum("ofindex-manifest.json HTTP/1.1\" 200" in x for x in new) == 1
    assert sum("ofindex-manifest.bin HTTP/1.1\" 404" in x for x in new) == 1
    assert len(ds) == RECORDS and [s.records for s in ds.shards] == [100] * SHARDS
    before = len(log_lines(log))
    assert ds[250] == expected[250]  # first touch of shard 2: its sidecar, then the record
    new = log_lines(log)[before:]  # (whose response's ETag and size are its stamp check)
    assert sum(".ofidx" in line for line in new) == 1 and len(new) == 2
    assert not any('"HEAD ' in line for line in new)
    before = len(log_lines(log))
    assert ds[251] == expected[251]
    assert len(log_lines(log)) - before == 1


def test_stale_manifest_points_at_build(served, nginx_server, dataset):
    url, _, _ = served
    d, _ = dataset
    root = os.path.join(nginx_server.root, url.rsplit("/", 1)[1])
    # a sidecar rebuilt for changed data while the manifest stayed old
    data = read_bytes(os.path.join(d, "part-00001"))
    with open(os.path.join(root, "part-00001"), "ab") as f:
        f.write(data[:600])
    os.remove(sidecar_of(os.path.join(root, "part-00001")))
    with pytest.warns(UserWarning, match="PARTIAL"):
        ofindex.build_index(os.path.join(root, "part-00001"), allow_partial=True,
                            manifest=False)
    ds = ofindex.open(url)
    assert len(ds) == RECORDS
    with pytest.raises(ofindex.StaleIndexError, match=r"manifest is out of date.*ofindex build"):
        ds[120]
    with pytest.raises(ofindex.StaleIndexError, match=r"ofindex build|build_index"):
        ofindex.open(root)  # locally the listing and stamps are checked at open


def test_sidecar_cache_is_bounded_and_cached_on_disk(served, tmp_path):
    url, expected, log = served
    one = 8 * 100 + HEADER_SIZE  # about one sidecar: 100 offsets + header
    ds = ofindex.open(url, cache_bytes=one + 100)
    idx = np.random.default_rng(5).permutation(RECORDS)[:200]
    assert ds.__getitems__(idx.tolist()) == [expected[i] for i in idx]
    assert [ds[i] for i in range(0, RECORDS, 7)] == expected[::7]
    cache = ds._table.shards[0].cache
    assert len(cache.memory) == 1 and cache.memory.held_bytes <= one + 100
    assert sum(s.loaded for s in ds._table.shards) == 1

    cdir = str(tmp_path / "sidecars")
    ds = ofindex.open(url, cache_dir=cdir, check_stale=False)
    assert list(ds) == expected
    assert sum(f.endswith(".ofidx") for f in os.listdir(cdir)) == SHARDS
    before = len(log_lines(log))
    ds = ofindex.open(url, cache_dir=cdir, check_stale=False)
    assert list(ds) == expected
    new = log_lines(log)[before:]
    assert not any(".ofidx" in line for line in new)  # all sidecars from the disk cache


def test_build_streams_each_remote_file_once(nginx_server, tmp_path):
    """A 3 MB shard is indexed with one large GET (8 MiB chunks), not one per block."""
    import uuid

    name = uuid.uuid4().hex[:8]
    root = os.path.join(nginx_server.root, name)
    write_dataset(root, 3000, 1, kind="random", record_size=1000, index=False)
    url = f"{nginx_server.url}/{name}/part-00000"
    before = len(log_lines(nginx_server.log))
    (res,) = ofindex.build_index(url, index_dir=str(tmp_path / "idx"))
    new = log_lines(nginx_server.log)[before:]
    assert res.records == 3000
    gets = [line for line in new if '"GET ' in line and "part-00000" in line]
    assert len(gets) == 1, new
    ds = ofindex.open(url, index_dir=str(tmp_path / "idx"))
    assert len(ds) == 3000 and ds[2999] == ofindex.open(os.path.join(root, "part-00000"),
                                                         build_missing=True)[2999]


def test_read_only_web_data_with_index_in_another_store(served):
    """Data on a read-only web server, sidecars and manifest in another (memory://) store."""
    import uuid

    url, expected, log = served
    index_dir = f"memory://ofindex-idx-{uuid.uuid4().hex[:8]}"
    ofindex.build_index(url + "/", index_dir=index_dir)
    before = len(log_lines(log))
    ds = ofindex.open(url, index_dir=index_dir)
    assert len(log_lines(log)) == before  # the manifest comes from the index store
    assert ds.shards[1].index_url.startswith("memory://")
    idx = np.random.default_rng(9).permutation(RECORDS)[:100]
    assert ds.__getitems__(idx.tolist()) == [expected[i] for i in idx]
    assert list(ds) == expected


@pytest.mark.parametrize("compact", [False, True], ids=["json", "compact"])
@pytest.mark.slow
def test_ten_thousand_shards_open_with_one_round(nginx_server, tmp_path, compact):
    """A 10,000-shard dataset opens through its manifest with one round of requests (a
    compact one: three, reading a part of it), and a read touches only its own shard's
    sidecar (and, compact, one stamps page of the manifest)."""
    import shutil
    import uuid

    from ofindex.formats.compact_manifest import COMPACT_NAME, CompactManifestFile
    from ofindex.formats.framing import RecordFormat
    from ofindex.formats.manifest import write_manifest
    from ofindex.formats.sidecar import open_local_sidecar
    from ofindex.storage import LocalStorage, Storages

    name = uuid.uuid4().hex[:8]
    root = os.path.join(nginx_server.root, name)
    os.makedirs(root)
    src = os.path.join(root, "shard-00000")
    with ofindex.Writer(src, index_dir=index_dir_of(root)) as w:  # the dataset's index dir
        for i in range(3):
            w.write(b"record %d" % i)
    n = 10_000
    files = [src]
    for k in range(1, n):
        dst = os.path.join(root, f"shard-{k:05d}")
        shutil.copy2(src, dst)  # same mtime: the copied sidecar stays valid
        shutil.copy2(sidecar_of(src), sidecar_of(dst))
        files.append(dst)
    h = open_local_sidecar(sidecar_of(src)).header
    if compact:
        out = CompactManifestFile(os.path.join(index_dir_of(root), COMPACT_NAME),
                                  RecordFormat.TFRECORD, LocalStorage(), root,
                                  index_dir_of(root), Storages(), n)
        for f in files:
            out.add(f, h.count, h.stamp.size, h.stamp.fingerprint, h.body_crc)
        out.close()
    else:
        write_manifest(manifest_of(root), RecordFormat.TFRECORD,
                       LocalStorage(), files, root, index_dir_of(root), [h.count] * n,
                       [h.stamp.size] * n, [h.stamp.fingerprint] * n, Storages())
    before = len(log_lines(nginx_server.log))
    ds = ofindex.open(f"{nginx_server.url}/{name}")
    opened = log_lines(nginx_server.log)[before:]
    assert len(opened) == (4 if compact else 2)  # the other kind's name: a 404
    assert sum(" 404 " in line for line in opened) == 1
    assert len(ds) == 3 * n
    before = len(log_lines(nginx_server.log))
    assert ds[3 * 7777 + 2] == b"record 2"
    new = log_lines(nginx_server.log)[before:]
    # its sidecar (and its stamps page) and, its index a local one served as copied, its
    # data file's content check (one GET: the file is smaller than three regions) in the same
    # round, then the record; no HEAD
    assert len(new) == (4 if compact else 3)
    assert not any('"HEAD ' in line for line in new)
    assert sum("shard-07777.ofidx" in line for line in new) == 1
    assert sum(COMPACT_NAME in line for line in new) == int(compact)
    assert sum(s.loaded for s in ds._table.held()) == 1


def test_stats_and_ranged_reads_share_one_pool_of_connections(tmp_path):
    """fsspec's HTTP filesystem (stats, listings, whole files) takes our HTTP client's session
    through its public ``get_client`` option: a stat and then a ranged read of the same
    server go over one kept-alive connection, not one pool of connections each."""
    (tmp_path / "blob").write_bytes(bytes(range(256)) * 64)

    class KeepAlive(servers._RangeHandler):
        protocol_version = "HTTP/1.1"  # connections kept alive

        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def setup(self):
            super().setup()
            with self.server.lock:
                self.server.connections += 1

    with servers.serve_http(KeepAlive, gets=0, fail_first=0, connections=0) as (base, srv):
        storage, path = storage_for(f"{base}/blob")
        assert storage.exists(path)
        assert storage.read(path, 100, 300) == (bytes(range(256)) * 64)[100:300]
        assert storage.read(path, 1000, 1010) == (bytes(range(256)) * 64)[1000:1010]
        assert srv.connections == 1


def test_a_not_found_answer_is_final_and_not_classified(monkeypatch):
    """Our clients' "no such file" (a 404, a missing key) is the store's answer: raised as it
    is, without classifying it as a failure (an open probes for its binary manifest first: a
    miss there renders no message and retries nothing)."""
    import asyncio

    from ofindex.errors import DataFileNotFoundError
    from ofindex.transport import policy

    def classify_nothing(exc):
        raise AssertionError(f"classified: {exc!r}")

    monkeypatch.setattr(policy, "classify", classify_nothing)
    attempts = []

    async def attempt():
        attempts.append(1)
        raise DataFileNotFoundError("http://host/ds/ofindex-manifest.bin: data file not found")

    with pytest.raises(DataFileNotFoundError, match=r"ofindex-manifest\.bin"):
        asyncio.run(QUICK.run(attempt, "http://host/ds/ofindex-manifest.bin: whole file"))
    assert attempts == [1]
