"""The machine-wide page cache (``cache_dir``): pages one process fetched serve the others,
concurrent writers are safe, the size stays bounded, and entries are keyed by stamp."""

from __future__ import annotations

import multiprocessing as mp
import os

import numpy as np
import pytest

import ofindex
from ofindex.cache.dir_files import entry_name
from ofindex.cache.keys import sidecar_key
from ofindex.cache.machine import NodeCache
from ofindex.cli.synthetic import write_dataset
from ofindex.storage import FileStamp
from tests.kit.backends import make_backend

RECORDS = 8000


@pytest.fixture(scope="module")
def s3_dataset(request, tmp_path_factory):
    d = str(tmp_path_factory.mktemp("node-ds"))
    write_dataset(d, RECORDS, 4, kind="random", record_size=40, index=False, seed=8)
    ofindex.build_index(d)
    with ofindex.open(d) as ds:
        expected = [ds[i] for i in range(len(ds))]
    backend = make_backend("s3", request, tmp_path_factory)
    url = backend.prefix()
    backend.upload(d, url)
    return url, backend.storage_options, expected


def _reader(url, options, cache_dir, seed):
    ds = ofindex.open(url, storage_options=options, cache_dir=cache_dir)
    idx = np.random.default_rng(seed).integers(0, RECORDS, 256)
    return idx.tolist(), ds[idx], ds._table.storage.requests


def _count_rounds(storage):
    calls = []
    for name in ("fetch_round", "read_ranges_concat"):
        fn = getattr(storage, name)

        def wrapped(*args, _fn=fn, _name=name, **kwargs):
            calls.append((_name, [r[0] for r in args[0]] if _name == "fetch_round" else None,
                          list(args[2]) if _name == "fetch_round" and len(args) > 2 else []))
            return _fn(*args, **kwargs)

        setattr(storage, name, wrapped)
    return calls


@pytest.mark.slow
def test_pages_fetched_by_one_process_serve_the_others(s3_dataset, tmp_path):
    url, options, expected = s3_dataset
    cache_dir = str(tmp_path / "node")
    with mp.get_context("spawn").Pool(3) as pool:  # three processes fill the cache at once
        got = pool.starmap(_reader, [(url, options, cache_dir, seed) for seed in range(3)])
    for idx, records, _ in got:
        assert records == [expected[i] for i in idx]
    assert os.path.exists(os.path.join(cache_dir, "ofindex-pages.sqlite3"))
    batches = [idx for idx, _, _ in got]
    # a new process, the pages on the machine: the data round alone (no staleness stats)
    ds = ofindex.open(url, storage_options=options, cache_dir=cache_dir, check_stale=False)
    calls = _count_rounds(ds._table.storage)
    for idx in batches:
        assert ds[idx] == [expected[i] for i in idx]
    assert [c[0] for c in calls] == ["read_ranges_concat"] * 3
    # with the staleness check, the first touch of a shard still stats its data file, in the
    # same round as nothing else: no sidecar request at all
    ds = ofindex.open(url, storage_options=options, cache_dir=cache_dir)
    calls = _count_rounds(ds._table.storage)
    assert ds[batches[0]] == [expected[i] for i in batches[0]]
    assert [c[0] for c in calls] == ["fetch_round", "read_ranges_concat"]
    assert calls[0][1] == [] and len(calls[0][2]) == 4  # no range, four stats


def _writer(directory, worker, n):
    cache = NodeCache(directory, max_bytes=1 << 30)
    for k in range(n):
        key = b"key-%d" % ((k * 7 + worker) % n)
        cache.put([(key, key * 20)])
    return cache.held_bytes()


def test_concurrent_writers_and_readers(tmp_path):
    directory = str(tmp_path / "node")
    with mp.get_context("spawn").Pool(4) as pool:
        pool.starmap(_writer, [(directory, w, 300) for w in range(4)])
    cache = NodeCache(directory)
    keys = [b"key-%d" % k for k in range(300)]
    found = cache.get(keys)
    assert found == {k: k * 20 for k in keys}  # each stored once, whole
    assert cache.held_bytes() == sum(len(k) * 20 + 64 for k in keys)


def test_size_is_bounded_with_eviction(tmp_path):
    cache = NodeCache(str(tmp_path / "node"), max_bytes=20_000)
    name = entry_name("s3://bucket/whole.tfrecord.ofidx")
    side = tmp_path / "node" / name
    side.write_bytes(b"x" * 3000)
    cache.note_files([(name, 3000)])
    for k in range(100):
        cache.put([(b"page-%03d" % k, bytes(500))])
        assert cache.held_bytes() <= 20_000
    assert not side.exists()  # the oldest entry, a whole-sidecar file, was evicted
    found = cache.get([b"page-%03d" % k for k in range(100)])
    assert b"page-099" in found and b"page-000" not in found
    assert 20 < len(found) < 40


def test_entries_are_keyed_by_url_and_stamp():
    a = sidecar_key("s3://b/p.ofidx", FileStamp(10, "etag:1"))
    assert a == sidecar_key("s3://b/p.ofidx", FileStamp(10, "etag:1"))
    assert a != sidecar_key("s3://b/p.ofidx", FileStamp(10, "etag:2"))
    assert a != sidecar_key("s3://b/p.ofidx", FileStamp(11, "etag:1"))
    assert a != sidecar_key("s3://b/q.ofidx", FileStamp(10, "etag:1"))
