"""The data cache (``cache_dir=`` with ``data_cache_bytes=``): later epochs read remote data
from local disk, shared by the processes of a machine, bounded, keyed by each file's version,
never serving a torn, damaged or outdated block, and best effort when the disk or the
directory cannot hold it."""

from __future__ import annotations

import errno
import hashlib
import json
import multiprocessing as mp
import os
import pickle
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import ofindex
from ofindex import _accel
from ofindex.cache import block_file, keys
from ofindex.cache.data import DataCache
from ofindex.cache.dir_files import BLOCK_SUFFIX, file_key
from ofindex.cache.entries_db import DATA_DB_NAME
from ofindex.cli.synthetic import write_dataset
from ofindex.errors import CacheDirWarning, DataCacheWarning
from ofindex.shuffle import GlobalShuffleSampler
from tests.kit.helpers import (
    IMPLEMENTATIONS,
    implementation,
    stamp_as_served,
    without_root_privilege,
)

RECORDS, SHARDS, SIZE = 3000, 3, 300
BUDGET = 64 << 20
_GET = re.compile(r'"GET (\S+) [^"]*" (\d{3}) (\d+)')


@pytest.fixture(scope="module")
def served(nginx_server, tmp_path_factory):
    """A dataset in nginx's document root: (its URL, its local directory, every record)."""
    name = f"dc-{os.getpid()}"
    local = os.path.join(nginx_server.root, name)
    write_dataset(local, RECORDS, SHARDS, kind="random", record_size=SIZE, index=False, seed=5)
    ofindex.build_index(local)
    with ofindex.open(local) as ds:
        expected = [ds[i] for i in range(len(ds))]
    # as if indexed through nginx: the files are checked by their ETags alone (a copy's
    # content check, and what it costs, is tested in test_identity)
    stamp_as_served(local, f"{nginx_server.url}/{name}")
    return f"{nginx_server.url}/{name}", local, expected


def _data_gets(log_path: str, since: int, name: str) -> list[str]:
    """The data files nginx served by GET since byte ``since`` of its log (not sidecars)."""
    with open(log_path, "rb") as f:
        f.seek(since)
        text = f.read().decode()
    return [path for path, _, _ in _GET.findall(text)
            if f"/{name}/" in path and not path.endswith((".ofidx", ".json"))]


def _epoch(n: int, epoch: int) -> np.ndarray:
    sampler = GlobalShuffleSampler(n, seed=1)
    sampler.set_epoch(epoch)
    return np.fromiter(iter(sampler), dtype=np.int64, count=n)


def _read_epoch(ds, order: np.ndarray, expected: list[bytes]) -> None:
    for k in range(0, len(order), 256):
        idx = order[k : k + 256]
        assert ds[idx] == [expected[i] for i in idx]


def _blocks(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(BLOCK_SUFFIX))


def test_epoch_two_makes_no_data_request(served, nginx_server, tmp_path):
    url, local, expected = served
    name = url.rsplit("/", 1)[1]
    cache_dir = tmp_path / "cache"
    ds = ofindex.open(url, cache_dir=str(cache_dir), data_cache_bytes=BUDGET)
    mark = os.path.getsize(nginx_server.log)
    _read_epoch(ds, _epoch(len(ds), 0), expected)
    time.sleep(0.2)  # nginx writes its log line after the response
    first = _data_gets(nginx_server.log, mark, name)
    assert first, "the first epoch fetches data"
    mark = os.path.getsize(nginx_server.log)
    _read_epoch(ds, _epoch(len(ds), 1), expected)
    assert [ds[i] for i in (0, len(ds) - 1)] == [expected[0], expected[-1]]
    assert list(ds.iter_records()) == expected
    # a new open (as the next run, or another process of the machine) is served too
    again = ofindex.open(url, cache_dir=str(cache_dir), data_cache_bytes=BUDGET)
    _read_epoch(again, _epoch(len(ds), 2), expected)
    time.sleep(0.2)
    assert _data_gets(nginx_server.log, mark, name) == []
    total = sum(os.path.getsize(os.path.join(local, f)) for f in os.listdir(local)
                if f.startswith("part-"))
    blocks = _blocks(cache_dir)
    on_disk = sum(os.path.getsize(cache_dir / b) for b in blocks)
    assert on_disk == total + len(blocks) * block_file.HEADER_SIZE  # each byte kept once
    assert again.data_cache.misses == 0 and again.data_cache.hits > 0


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("block", [1 << 20, 1000])  # records inside blocks, and across them
def test_reads_equal_uncached_reads_in_every_path(served, tmp_path, impl, block):
    url, _, expected = served
    rng = np.random.default_rng(3)
    with implementation(impl):  # (opened here: each shard's access is chosen when it is bound)
        plain = ofindex.open(url)
        cached = ofindex.open(url, cache_dir=str(tmp_path), data_cache_bytes=BUDGET)
        cached.data_cache = DataCache(str(tmp_path), BUDGET, block_bytes=block)
        for _ in range(2):  # cold, then from the cache
            idx = rng.integers(0, RECORDS, 500)
            assert cached[idx] == plain[idx] == [expected[i] for i in idx]
            assert cached[100:160] == expected[100:160]
            assert cached.__getitems__([5, 5, RECORDS - 1]) == [expected[5], expected[5],
                                                                expected[-1]]
            assert cached[-1] == expected[-1]
            batches = list(cached.iter_batches(700, start=250, as_buffer=True))
            assert [bytes(r) for b in batches for r in b] == expected[250:]
    assert cached.data_cache.misses and cached.data_cache.hits


def test_a_file_replaced_by_another_version_is_never_served_from_the_old_blocks(
        nginx_server, tmp_path):
    # version 2 has records of the very same lengths (so the same sidecar offsets) and valid
    # CRCs: blocks of version 1 would pass every record check, only their key tells them apart
    name = f"dc-replaced-{os.getpid()}"
    local = os.path.join(nginx_server.root, name)
    write_dataset(local, 400, 1, kind="random", record_size=200, index=False, seed=1)
    ofindex.build_index(local)
    url = f"{nginx_server.url}/{name}"
    cache_dir = str(tmp_path / "cache")
    with ofindex.open(local) as ds:
        lengths = [len(ds[i]) for i in range(len(ds))]
    old = ofindex.open(url, cache_dir=cache_dir, data_cache_bytes=BUDGET)
    old_records = old[np.arange(400)]
    assert _blocks(cache_dir)
    rng = np.random.default_rng(9)
    new_records = [rng.bytes(n) for n in lengths]
    assert new_records != old_records
    path = os.path.join(local, "part-00000")
    mtime = os.stat(path).st_mtime
    with ofindex.Writer(path + ".new", format="tfrecord", index=False) as writer:
        for record in new_records:
            writer.write(record)
    os.replace(path + ".new", path)
    os.utime(path, (mtime + 10, mtime + 10))  # nginx's ETag: mtime and size
    shutil.rmtree(local + ".ofindex", ignore_errors=True)
    for f in os.listdir(local):
        if f != "part-00000":
            os.remove(os.path.join(local, f))
    ofindex.build_index(local)
    new = ofindex.open(url, cache_dir=cache_dir, data_cache_bytes=BUDGET)
    assert new[np.arange(400)] == new_records
    assert new.data_cache.hits == 0
    assert len(_blocks(cache_dir)) == 2  # one block of each version (the old one ages out)


def test_keys_name_the_file_version():
    from ofindex.storage import FileStamp

    one = keys.block_key("s3://b/part-0", FileStamp(100, "etag:a"), 1 << 20, 0)
    assert one == keys.block_key("s3://b/part-0", FileStamp(100, "etag:a"), 1 << 20, 0)
    for other in (keys.block_key("s3://b/part-0", FileStamp(100, "etag:b"), 1 << 20, 0),
                  keys.block_key("s3://b/part-0", FileStamp(101, "etag:a"), 1 << 20, 0),
                  keys.block_key("s3://b/part-1", FileStamp(100, "etag:a"), 1 << 20, 0),
                  keys.block_key("s3://b/part-0", FileStamp(100, "etag:a"), 1 << 19, 0),
                  keys.block_key("s3://b/part-0", FileStamp(100, "etag:a"), 1 << 20, 1)):
        assert other != one


# -- several processes --------------------------------------------------------------------------
def _epoch_reader(url: str, cache_dir: str, epoch: int) -> tuple[str, int, int]:
    ds = ofindex.open(url, cache_dir=cache_dir, data_cache_bytes=BUDGET)
    digest = hashlib.sha256()
    order = _epoch(len(ds), epoch)
    for k in range(0, len(order), 200):
        for record in ds[order[k : k + 200]]:
            digest.update(record)
    return digest.hexdigest(), ds.data_cache.hits, ds.data_cache.misses


def _digest(expected: list[bytes], order: np.ndarray) -> str:
    digest = hashlib.sha256()
    for i in order.tolist():
        digest.update(expected[i])
    return digest.hexdigest()


def test_processes_share_the_blocks_and_write_them_concurrently(served, tmp_path):
    url, _, expected = served
    cache_dir = str(tmp_path / "cache")
    with mp.get_context("spawn").Pool(4) as pool:  # four processes fill the cache at once
        got = pool.starmap(_epoch_reader, [(url, cache_dir, epoch) for epoch in range(4)])
    for epoch, (digest, _, _) in enumerate(got):
        assert digest == _digest(expected, _epoch(RECORDS, epoch))
    blocks = _blocks(cache_dir)
    cache = DataCache(cache_dir, BUDGET)
    on_disk = sum(os.path.getsize(os.path.join(cache_dir, b)) for b in blocks)
    assert cache.held_bytes() == on_disk + 64 * len(blocks)  # every file counted, once
    assert not [n for n in os.listdir(cache_dir) if n.endswith(".tmp")]
    digest, hits, misses = _epoch_reader(url, cache_dir, 7)  # a fifth: served from disk
    assert digest == _digest(expected, _epoch(RECORDS, 7)) and misses == 0 and hits > 0


_KILLED_WRITER = """
import os, sys, time
import ofindex
from ofindex.cache import data
url, cache_dir = sys.argv[1:3]
real = data.write_local_atomic

def slow(path, parts, durable=True, owned=False):
    # the temporary file half written, then stopped: the parent kills this process here
    import tempfile
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp",
                               dir=os.path.dirname(path))
    os.write(fd, b"".join(bytes(p) for p in parts)[: 1000])
    print("writing", flush=True)
    time.sleep(600)

data.write_local_atomic = slow
ds = ofindex.open(url, cache_dir=cache_dir, data_cache_bytes=64 << 20)
ds[[0, 1, 2]]
"""


def test_a_writer_killed_mid_write_leaves_nothing_served(served, tmp_path):
    url, _, expected = served
    cache_dir = tmp_path / "cache"
    with subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, url, str(cache_dir)],
                          stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": _root()}) as child:
        try:
            assert child.stdout.readline().strip() == "writing"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(30)
    temporary = [n for n in os.listdir(cache_dir) if n.endswith(".tmp")]
    assert len(temporary) == 1 and _blocks(cache_dir) == []
    # the block registered but never written is a miss; a reader gets the right records
    ds = ofindex.open(url, cache_dir=str(cache_dir), data_cache_bytes=BUDGET)
    assert ds[[0, 1, 2]] == expected[:3]
    assert ds.data_cache.misses >= 1 and len(_blocks(cache_dir)) >= 1
    # the dead writer's temporary file is swept once it is old (a live writer's is young)
    old = time.time() - 2 * block_file.STALE_TEMPORARY
    os.utime(cache_dir / temporary[0], (old, old))
    DataCache(str(cache_dir), BUDGET)
    assert (cache_dir / temporary[0]).exists()  # swept less than an hour ago: not again yet
    os.utime(cache_dir / block_file.SWEPT_MARKER, (old, old))
    DataCache(str(cache_dir), BUDGET)
    assert not (cache_dir / temporary[0]).exists()


def _root() -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(ofindex.__file__)))
    return os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_torn_or_damaged_block_is_never_served(served, tmp_path, impl):
    with implementation(impl):
        _torn_or_damaged(served, tmp_path)


def _torn_or_damaged(served, tmp_path):
    url, _, expected = served
    cache_dir = tmp_path / "cache"
    ds = ofindex.open(url, cache_dir=str(cache_dir), data_cache_bytes=BUDGET)
    assert ds[np.arange(RECORDS)] == expected
    blocks = _blocks(cache_dir)
    first = cache_dir / blocks[0]
    whole = first.read_bytes()
    first.write_bytes(whole[: len(whole) // 2])  # torn (a copy cut short, a full disk)
    fresh = ofindex.open(url, cache_dir=str(cache_dir), data_cache_bytes=BUDGET)
    assert fresh[np.arange(RECORDS)] == expected
    assert first.read_bytes() == whole  # fetched again and kept whole
    # bit rot inside a record: its CRC fails in the cached bytes, so the batch is read again
    # from the server (no error, no wrong record) and the damaged block is dropped
    damaged = bytearray(whole)
    damaged[block_file.HEADER_SIZE + 100] ^= 0x40
    first.write_bytes(bytes(damaged))
    fresh = ofindex.open(url, cache_dir=str(cache_dir), data_cache_bytes=BUDGET)
    assert fresh[np.arange(RECORDS)] == expected
    assert not first.exists() or first.read_bytes() == whole
    # reads whose records carry no CRC (verify=False) check the block's own CRC instead
    first.write_bytes(bytes(damaged))
    unverified = ofindex.open(url, cache_dir=str(cache_dir), data_cache_bytes=BUDGET,
                              verify=False)
    assert unverified[np.arange(RECORDS)] == expected
    assert first.read_bytes() == whole


def test_a_link_at_a_block_name_is_never_followed(served, tmp_path):
    url, _, expected = served
    cache_dir = tmp_path / "cache"
    ds = ofindex.open(url, cache_dir=str(cache_dir), data_cache_bytes=BUDGET)
    ds[np.arange(RECORDS)]
    name = _blocks(cache_dir)[0]
    target = tmp_path / "elsewhere"
    target.write_bytes((cache_dir / name).read_bytes())
    os.unlink(cache_dir / name)
    os.symlink(target, cache_dir / name)
    fresh = ofindex.open(url, cache_dir=str(cache_dir), data_cache_bytes=BUDGET)
    assert fresh[np.arange(RECORDS)] == expected
    assert fresh.data_cache.misses == 1  # the link is a miss; its block is fetched again
    assert not os.path.islink(cache_dir / name)  # replaced by the rename, not written through
    assert target.read_bytes() == (cache_dir / name).read_bytes()


def test_eviction_deletes_only_blocks_named_by_their_keys(tmp_path):
    cache = DataCache(str(tmp_path), 3 * (1 << 12))
    outside = tmp_path / "keep.ofidx"
    outside.write_bytes(b"a sidecar of the page cache")
    digest = hashlib.sha256(b"x").digest()[:16]
    db = sqlite3.connect(tmp_path / DATA_DB_NAME)
    db.execute("INSERT INTO entries VALUES (?, NULL, 10, 0, ?)",
               (file_key("0" * 32 + ".ofidx"), str(outside)))
    db.execute("INSERT INTO entries VALUES (?, NULL, 10, 0, ?)",
               (file_key(digest.hex() + BLOCK_SUFFIX), str(outside)))
    db.commit()
    db.close()
    cache.index.note_files([(f"{k:032x}{BLOCK_SUFFIX}", 1 << 12) for k in range(4)])
    assert outside.exists()  # rows of another kind, or naming another path, delete nothing


# -- a cache that cannot hold the data ------------------------------------------------------------
def test_a_full_disk_costs_one_warning_and_reads_on(served, tmp_path, monkeypatch):
    url, _, expected = served

    def full(path, parts, durable=True, owned=False):
        raise OSError(errno.ENOSPC, "No space left on device")

    from ofindex.cache import data

    monkeypatch.setattr(data, "write_local_atomic", full)
    cache_dir = tmp_path / "cache"
    ds = ofindex.open(url, cache_dir=str(cache_dir), data_cache_bytes=BUDGET)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            assert ds[np.arange(0, RECORDS, 3)] == expected[::3]
    (message,) = [str(w.message) for w in caught if issubclass(w.category, CacheDirWarning)]
    assert "No space left on device" in message and "data_cache_bytes=" in message
    assert _blocks(cache_dir) == [] and ds.data_cache.held_bytes() == 0  # nothing counted


def test_a_budget_smaller_than_one_block_keeps_nothing(served, tmp_path):
    url, _, expected = served
    cache = DataCache(str(tmp_path), 10_000, block_bytes=1 << 20)
    ds = ofindex.open(url)
    ds.data_cache = cache
    for _ in range(2):
        assert ds[np.arange(RECORDS)] == expected
    assert _blocks(tmp_path) == [] and cache.held_bytes() == 0 and cache.hits == 0


def test_a_dataset_larger_than_the_budget_is_read_without_the_cache(served, tmp_path):
    url, _, expected = served
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = ofindex.open(url, cache_dir=str(tmp_path), data_cache_bytes=100_000)
    (message,) = [str(w.message) for w in caught if issubclass(w.category, DataCacheWarning)]
    assert "data_cache_bytes=100000" in message and "larger data_cache_bytes=" in message
    assert ds.data_cache is None
    assert ds[np.arange(RECORDS)] == expected
    assert _blocks(tmp_path) == []


def test_the_bound_holds_with_eviction(served, tmp_path):
    url, _, expected = served
    cache = DataCache(str(tmp_path), 40_000, block_bytes=8192)  # about 4 blocks of ~100
    ds = ofindex.open(url)
    ds.data_cache = cache
    for epoch in range(2):
        _read_epoch(ds, _epoch(RECORDS, epoch), expected)
        on_disk = sum(os.path.getsize(tmp_path / b) for b in _blocks(tmp_path))
        assert on_disk <= 40_000 and cache.held_bytes() <= 40_000
        assert _blocks(tmp_path)


_READ_ONLY_CHILD = """
import json, sys, warnings, hashlib
import numpy as np
import ofindex
url, cache_dir = json.loads(sys.argv[1])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ds = ofindex.open(url, cache_dir=cache_dir, data_cache_bytes=64 << 20)
    got = b"".join(ds[np.arange(len(ds))])
print(json.dumps({"digest": hashlib.sha256(got).hexdigest(), "cache": repr(ds.data_cache),
                  "warnings": [str(w.message) for w in caught]}))
"""


def test_a_read_only_cache_dir_reads_without_cache_with_one_warning(served, tmp_path):
    url, _, expected = served
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    os.chmod(cache_dir, 0o555)
    command = [sys.executable, "-c", _READ_ONLY_CHILD, json.dumps([url, str(cache_dir)])]
    command = without_root_privilege(command)  # root writes anywhere
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": _root()})
    finally:
        os.chmod(cache_dir, 0o755)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["digest"] == hashlib.sha256(b"".join(expected)).hexdigest()
    (message,) = result["warnings"]
    assert str(cache_dir) in message and "cannot write" in message
    assert result["cache"] == "None" and os.listdir(cache_dir) == []


def test_data_cache_bytes_needs_a_cache_dir(served):
    with pytest.raises(ValueError, match="cache_dir="):
        ofindex.open(served[0], data_cache_bytes=BUDGET)
    with pytest.raises(ValueError, match="data_cache_bytes"):
        DataCache("/tmp", -1)


def test_the_dataset_pickles_with_its_cache(served, tmp_path):
    url, _, expected = served
    ds = ofindex.open(url, cache_dir=str(tmp_path), data_cache_bytes=BUDGET)
    ds[np.arange(RECORDS)]
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.data_cache is not None and clone.data_cache.hits == 0
    assert clone[np.arange(RECORDS)] == expected and clone.data_cache.misses == 0


def _forked_read(ds, indices, queue) -> None:
    queue.put(ds[indices])


def test_a_forked_worker_reads_through_the_parent_s_cache(served, tmp_path):
    url, _, expected = served
    ds = ofindex.open(url, cache_dir=str(tmp_path), data_cache_bytes=BUDGET)
    assert ds[np.arange(RECORDS)] == expected  # the parent maps every block
    context = mp.get_context("fork")
    queue = context.Queue()
    with ds.data_cache._lock:  # held at the fork, as by another thread of the parent
        child = context.Process(target=_forked_read, args=(ds, list(range(0, RECORDS, 5)),
                                                           queue))
        child.start()
    try:
        assert queue.get(timeout=120) == expected[::5]
    finally:
        child.join(60)
    assert child.exitcode == 0


def test_a_mixture_of_datasets_on_one_cache_reads_through_it(served, tmp_path):
    from ofindex.read.concat import concatenated

    url, _, expected = served
    one = ofindex.open(url, cache_dir=str(tmp_path), data_cache_bytes=BUDGET)
    two = ofindex.open(url, cache_dir=str(tmp_path), data_cache_bytes=BUDGET)
    both = concatenated([one, two])
    assert both is not None and both.data_cache is one.data_cache
    assert both[[0, RECORDS, 2 * RECORDS - 1]] == [expected[0], expected[0], expected[-1]]
    alone = concatenated([one, ofindex.open(url)])
    assert alone is not None and alone.data_cache is None


def test_eviction_takes_the_least_recently_used_blocks(tmp_path):
    cache = DataCache(str(tmp_path), 4 * (1000 + 64))
    names = [f"{k:032x}{BLOCK_SUFFIX}" for k in range(5)]
    for name in names[:4]:
        (tmp_path / name).write_bytes(b"x" * 1000)
        cache.index.note_files([(name, 1000)])
        time.sleep(0.01)  # distinct last uses
    cache.index.note_files([(names[0], 1000)])  # the oldest used again
    (tmp_path / names[4]).write_bytes(b"x" * 1000)
    evicted = cache.index.note_files([(names[4], 1000)])
    assert names[1] in evicted and names[0] not in evicted and names[4] not in evicted
    assert not (tmp_path / names[1]).exists() and (tmp_path / names[0]).exists()
    assert cache.held_bytes() <= 4 * (1000 + 64)


def test_a_dataset_behind_a_compact_manifest_is_cached_too(nginx_server, tmp_path):
    """The two #32 parts together: a compact manifest (stamps read lazily, by pages) and the
    data cache (sidecars read whole): epoch 2 is served from the cache, records equal."""
    from ofindex.formats.compact_manifest import COMPACT_NAME

    name = f"dc-compact-{os.getpid()}"
    local = os.path.join(nginx_server.root, name)
    write_dataset(local, 1200, 4, kind="random", record_size=200, index=False, seed=9)
    ofindex.build_index(local, manifest=f"{local}.ofindex/{COMPACT_NAME}")
    assert os.path.exists(os.path.join(f"{local}.ofindex", COMPACT_NAME))
    with ofindex.open(local) as ds:
        expected = [ds[i] for i in range(len(ds))]
    url = f"{nginx_server.url}/{name}"
    cache_dir = str(tmp_path / "cache")
    ds = ofindex.open(url, cache_dir=cache_dir, data_cache_bytes=BUDGET)
    _read_epoch(ds, _epoch(len(ds), 0), expected)
    mark = os.path.getsize(nginx_server.log)
    again = ofindex.open(url, cache_dir=cache_dir, data_cache_bytes=BUDGET)
    _read_epoch(again, _epoch(len(ds), 1), expected)
    time.sleep(0.2)
    assert _data_gets(nginx_server.log, mark, name) == []
    assert again.data_cache.misses == 0 and again.data_cache.hits > 0


# -- files held whole: later batches cut by one compiled pass (RESIDENT_BLOCKS) -------------
def _epochs_through(ds, expected, epochs=(0,)) -> None:
    for epoch in epochs:
        _read_epoch(ds, _epoch(len(ds), epoch), expected)


@pytest.fixture(params=[False, True], ids=["one pass", "on threads"])
def threaded(request, monkeypatch):
    """Batches of files held whole copied in one pass, or in shares on the pool's threads
    (as batches of several MB are)."""
    if request.param:
        from ofindex.read.remote import resident_gather

        monkeypatch.setattr(resident_gather, "PARALLEL_BYTES", 1)
    return request.param


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("block", [1 << 20, 1000])  # records inside blocks, and across them
def test_later_epochs_read_the_files_mapped_whole(served, tmp_path, impl, block, threaded):
    from ofindex.read.access import CachedAccess
    from ofindex.read.remote.resident_gather import ResidentShards

    url, _, expected = served
    with implementation(impl):  # (opened here: each shard's access is chosen when it is bound)
        ds = ofindex.open(url, cache_dir=str(tmp_path), data_cache_bytes=BUDGET)
        ds.data_cache = DataCache(str(tmp_path), BUDGET, block_bytes=block)
        assert ds._accesses.uniform == CachedAccess(_accel.native, ds.data_cache)
        _epochs_through(ds, expected)  # the planned reads fetch and see every block
        idx = _epoch(RECORDS, 1)[:256]
        compiled = impl == "compiled"
        if compiled:  # every file the batch touches is held whole: one compiled pass
            assert ResidentShards.of(ds._table, idx, ds.data_cache, ds._checks,
                                     _accel.native) is not None
        hits, before = ds.data_cache.hits, ds.data_cache.resident_batches
        _epochs_through(ds, expected, (1,))
        assert ds[100:160] == expected[100:160]
        assert ds.__getitems__([5, 5, RECORDS - 1]) == [expected[5], expected[5], expected[-1]]
        assert ds[np.arange(1000, 1200)] == expected[1000:1200]  # one shard
        batches = -(-RECORDS // 256) + 3
        if compiled:  # every batch by the one compiled pass, none planned block by block
            assert ds.data_cache.resident_batches - before == batches
            assert ds.data_cache.hits == hits
        else:
            assert ds.data_cache.resident_batches == before == 0


def _resident_batch(served, tmp_path):
    """A dataset whose files are held whole, a batch over every shard and its spans."""
    from ofindex.read.remote.resident_gather import ResidentShards

    url, _, expected = served
    ds = ofindex.open(url, cache_dir=str(tmp_path), data_cache_bytes=BUDGET)
    _epochs_through(ds, expected)
    idx = _epoch(RECORDS, 1)[:256]
    shards = ResidentShards.of(ds._table, idx, ds.data_cache, ds._checks, _accel.native)
    assert shards is not None and len(shards.touched) == SHARDS
    return ds, idx, shards, expected


def test_corrupt_offsets_of_a_file_held_whole_are_named_as_every_read_names_them(
        served, tmp_path):
    from ofindex.errors import SidecarError
    from ofindex.read.remote.resident_gather import resident_gather

    ds, _, shards, _ = _resident_batch(served, tmp_path)
    j = 1
    sidecar = shards.sidecars[j]
    record = int(shards.local[np.flatnonzero(shards.which == j)[0]])
    bad = sidecar.offsets.copy()
    bad[record + 1] = bad[record] + 3  # a span too short for any record's framing
    sidecar.offsets = bad
    with pytest.raises(SidecarError, match=f"record {record}"):
        resident_gather(ds._table, ds._checks, shards, ds.data_cache, _accel.native)


def test_a_span_past_the_end_of_a_file_held_whole_goes_to_the_planned_reads(
        served, tmp_path, monkeypatch):
    import dataclasses

    from ofindex.read.remote import resident_gather as module

    ds, idx, shards, expected = _resident_batch(served, tmp_path)
    short = dataclasses.replace(shards.files[2], size=shards.files[2].size // 2)
    shards = dataclasses.replace(shards, files=[*shards.files[:2], short])
    assert module.resident_gather(ds._table, ds._checks, shards, ds.data_cache,
                                  _accel.native) is None
    monkeypatch.setattr(module.ResidentShards, "of", lambda *args: shards)
    assert ds[idx] == [expected[i] for i in idx.tolist()]  # read by the planned reads


def _damage_in_place(path, at: int) -> bytes:
    """Flip a bit of a block file in place (its maps see it); the bytes before."""
    whole = path.read_bytes()
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(bytes([whole[at] ^ 0x40]))
    return whole


def test_a_record_damaged_in_a_file_held_whole_is_read_again_from_the_store(served, tmp_path,
                                                                           threaded):
    url, _, expected = served
    cache_dir = tmp_path / "cache"
    ds = ofindex.open(url, cache_dir=str(cache_dir), data_cache_bytes=BUDGET)
    _epochs_through(ds, expected)
    before = ds.data_cache.resident_batches
    assert ds[np.arange(RECORDS)] == expected
    assert ds.data_cache.resident_batches == before + 1
    first = cache_dir / _blocks(cache_dir)[0]
    whole = _damage_in_place(first, block_file.HEADER_SIZE + 100)  # after its checks
    assert ds[np.arange(RECORDS)] == expected  # the CRC fails: no error, no wrong record
    assert ds.data_cache.resident_batches == before + 1
    assert not first.exists() or first.read_bytes() == whole  # the damaged copy dropped
    _epochs_through(ds, expected, (1,))  # fetched again, then held whole again
    assert first.read_bytes() == whole
    assert ds.data_cache.resident_batches > before + 1


def test_without_record_crcs_a_file_is_held_whole_only_from_checked_blocks(served, tmp_path):
    url, _, expected = served
    cache_dir = tmp_path / "cache"
    ds = ofindex.open(url, cache_dir=str(cache_dir), data_cache_bytes=BUDGET)
    _epochs_through(ds, expected)
    first = cache_dir / _blocks(cache_dir)[0]
    whole = _damage_in_place(first, block_file.HEADER_SIZE + 100)
    # a reader that checks no record CRC (verify=False) maps blocks with their CRC checked
    unverified = ofindex.open(url, cache_dir=str(cache_dir), data_cache_bytes=BUDGET,
                              verify=False)
    _epochs_through(unverified, expected, (1, 2))
    assert first.read_bytes() == whole  # refused, fetched again, kept whole
    assert unverified.data_cache.resident_batches > 0


def test_files_held_whole_register_their_use_once_a_minute(served, tmp_path, monkeypatch):
    from ofindex.cache import data as datacache
    from ofindex.cache.machine import TOUCH_AFTER

    url, _, expected = served
    ds = ofindex.open(url, cache_dir=str(tmp_path), data_cache_bytes=BUDGET)
    _epochs_through(ds, expected)
    cache = ds.data_cache
    calls: list[list[tuple[str, int]]] = []
    note_files = cache.index.note_files

    def counted(items):
        calls.append(list(items))
        return note_files(items)

    monkeypatch.setattr(cache.index, "note_files", counted)
    _epochs_through(ds, expected, (1,))
    assert cache.resident_batches >= 2
    names = set(_blocks(tmp_path))
    assert len(calls) <= 1  # each file's blocks registered at most once in the minute
    assert {name for call in calls for name, _ in call} <= names
    now = time.time()
    monkeypatch.setattr(datacache.time, "time", lambda: now + TOUCH_AFTER + 1)
    calls.clear()
    _epochs_through(ds, expected, (2,))
    assert len(calls) == 1 and {name for name, _ in calls[0]} == names  # a minute on: again
    database = sqlite3.connect(str(tmp_path / DATA_DB_NAME))
    used = [row[0] for row in database.execute("SELECT used FROM entries")]
    database.close()
    assert used and min(used) >= now + TOUCH_AFTER


def test_a_forgotten_block_lets_go_of_its_file(served, tmp_path):
    url, _, expected = served
    ds = ofindex.open(url, cache_dir=str(tmp_path), data_cache_bytes=BUDGET)
    _epochs_through(ds, expected)
    shard = ds._table.shards[0]
    cache, storage = ds.data_cache, ds._table.storage
    held = cache.resident(storage, shard.path, False)
    assert held is not None and cache.resident(storage, shard.path, False) is held
    cache.forget(held.names[:1])
    assert cache.resident(storage, shard.path, False) is None
    assert not (tmp_path / held.names[0]).exists()
    _epochs_through(ds, expected, (1,))  # fetched again by the planned reads, then held
    assert cache.resident(storage, shard.path, False) is not None


def test_neighbouring_blocks_are_fetched_in_runs():
    from ofindex.cache.block_plan import Block, runs

    def block(path: str, start: int, end: int) -> Block:
        return Block(f"{path}{start}".encode(), path, start, end)

    a0, a1, a2, a4 = (block("a", 0, 10), block("a", 10, 20), block("a", 20, 30),
                      block("a", 40, 50))
    b0, b1 = block("b", 0, 10), block("b", 10, 15)
    assert runs([a2, b1, a0, a4, a1, b0], 30) == [[a0, a1, a2], [a4], [b0, b1]]
    assert runs([a2, a0, a1], 20) == [[a0, a1], [a2]]  # at most max_bytes a run
    assert runs([a0], 5) == [[a0]] and runs([], 5) == []  # a block larger: a run of its own


def test_a_first_batch_fetches_each_file_s_blocks_in_one_request(served, nginx_server,
                                                                  tmp_path):
    url, _, expected = served
    name = url.rsplit("/", 1)[1]
    ds = ofindex.open(url, cache_dir=str(tmp_path), data_cache_bytes=BUDGET)
    ds.data_cache = DataCache(str(tmp_path), BUDGET, block_bytes=1000)  # ~320 blocks a file
    mark = os.path.getsize(nginx_server.log)
    assert ds[np.arange(RECORDS)] == expected
    time.sleep(0.2)  # nginx writes its log line after the response
    assert len(_data_gets(nginx_server.log, mark, name)) == SHARDS
    assert ds.data_cache.misses == len(_blocks(tmp_path)) > 3 * SHARDS


def test_files_beyond_the_bound_of_maps_are_read_by_the_planned_reads(served, tmp_path,
                                                                       monkeypatch):
    from ofindex.cache import data as datacache

    url, _, expected = served
    ds = ofindex.open(url, cache_dir=str(tmp_path), data_cache_bytes=BUDGET)
    monkeypatch.setattr(datacache, "MAX_RESIDENT_BLOCKS", 2)  # one block a file: two of three
    _epochs_through(ds, expected, (0, 1))
    cache, storage, shards = ds.data_cache, ds._table.storage, ds._table.shards
    held = [cache.resident(storage, shard.path, False) for shard in shards]
    assert [h is not None for h in held] == [True, True, False]  # admitted while they fit
    hits, batches = cache.hits, cache.resident_batches
    _epochs_through(ds, expected, (2,))  # every batch touches the third: planned reads
    assert cache.resident_batches == batches and cache.hits > hits
    assert [cache.resident(storage, shard.path, False) for shard in shards] == held  # kept
    first = int(ds.cumulative_counts[0])
    assert ds[np.arange(first)] == expected[:first]  # a batch of held files alone: by maps
    assert cache.resident_batches == batches + 1
