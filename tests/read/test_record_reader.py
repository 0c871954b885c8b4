"""The compiled fast path of ``ds[i]`` (ofindex/read/record_reader.py, csrc/reader.c) gives
exactly what the ordinary path gives — the same payloads, the same errors — on intact files
and on corrupt ones, memory-mapped or read with ``pread``, TFRecord and OFRecord (with and
without sidecar checksums), with and without ``verify``; and it lets go of its maps and
descriptors when the dataset is closed, after ``fork``, and when its checks change.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import re
import subprocess
import sys

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ofindex
from ofindex import RecordIndexError, _accel
from tests.kit.corruption import corrupt, rewrite_in_place, spelled_anywhere, write_parts
from tests.kit.helpers import (
    cpu_paths,
    implementation,
    read_bytes,
)


def _outcome(fn):
    try:
        return "ok", fn()
    except Exception as exc:
        return type(exc).__name__, str(exc)


@settings(max_examples=80, deadline=None)
@given(
    shards=st.lists(st.lists(st.binary(max_size=48), max_size=5), min_size=1, max_size=3),
    fmt=st.sampled_from(["tfrecord", "ofrecord"]),
    checksums=st.booleans(),
    mmap=st.booleans(),
    verify=st.booleans(),
    how=st.sampled_from(["none", "data byte", "shifted offset", "checksum", "truncated"]),
    after_open=st.booleans(),
    where=st.integers(0, 10_000),
    data=st.data(),
)
def test_the_fast_path_gives_what_the_ordinary_path_gives(tmp_path_factory, shards, fmt,
                                                          checksums, mmap, verify, how,
                                                          after_open, where, data):
    """Both ways over the same files, corrupted before the dataset is opened or after every
    record was read once (its shards bound to the reader). A file truncated while it is
    memory-mapped kills the process (SIGBUS) as every mmap reader's does: that one is tried
    with ``mmap=False`` only."""
    after_open = after_open and (how != "truncated" or not mmap)
    n = sum(map(len, shards))
    keys = data.draw(st.lists(st.integers(-n - 1, n), max_size=12)) + list(range(n)) * 2

    def reads():
        paths = write_parts(str(tmp_path_factory.mktemp("reader")), shards, fmt, checksums)
        if not after_open:
            corrupt(paths, shards, how, where)
        try:
            ds = ofindex.open(paths, mmap=mmap, verify=verify)
            out = [_outcome(lambda key=key: ds[key]) for key in keys]
        except Exception as exc:  # a truncated file is refused at open
            ds, out = None, [(type(exc).__name__, str(exc))]
        if after_open and ds is not None:
            corrupt(paths, shards, how, where)
            out += [_outcome(lambda key=key: ds[key]) for key in keys]
        # each way reads its own copy: its directory, mtimes and inodes differ
        here = os.path.dirname(paths[0])
        return [(kind, re.sub(r"\d{7,}", "N", spelled_anywhere(str(v), here)))
                for kind, v in out], ds

    with implementation("compiled"):
        fast, ds = reads()
    with implementation("pure-python"):
        ordinary, _ = reads()
    assert fast == ordinary
    if how == "none" and n:  # every record is good: the reader served the second pass
        assert ds is not None and ds._reader is not None
        assert [ds._reader.get(i) for i in range(n)] == [r for s in shards for r in s]


@pytest.fixture
def dataset(tmp_path):
    p = str(tmp_path / "a.tfrecord")
    records = [b"rec%03d" % i for i in range(20)]
    with ofindex.Writer(p) as w:
        w.write_many(records)
    return p, records


@pytest.mark.parametrize("mmap", [True, False])
def test_closing_lets_go_of_the_maps_and_descriptors(dataset, mmap):
    p, records = dataset
    ds = ofindex.open(p, mmap=mmap)
    assert ds[3] == records[3] and ds._reader is not None and ds._reader.bound == 1
    ds.close()
    assert ds._reader.bound == 0
    assert ds[4] == records[4] and ds._reader.bound == 1  # reopened (and checked) on use


def test_changing_verify_makes_a_new_reader(dataset):
    p, _ = dataset
    ds = ofindex.open(p)
    ds[0]
    ds[1]
    reader = ds._reader
    ds.verify = False
    assert ds._reader is None and reader is not None and reader.bound == 0
    raw = bytearray(read_bytes(p))
    raw[12] ^= 1  # record 0's first payload byte: its data CRC fails
    rewrite_in_place(p, bytes(raw))
    fresh = ofindex.open(p, verify=False)
    assert fresh[0] == bytes(raw[12:18]) and fresh[0] == bytes(raw[12:18])  # not checked
    checked = ofindex.open(p)
    for _ in range(2):
        with pytest.raises(ofindex.CorruptRecordError, match="record 0"):
            checked[0]


def _read_in_child(ds, queue) -> None:
    try:
        queue.put(("ok", ds._reader.bound, ds[3]))
    except ofindex.OfindexError as exc:
        queue.put((type(exc).__name__, ds._reader.bound, str(exc)))


@pytest.mark.parametrize("mmap", [True, False])
def test_a_forked_child_opens_and_checks_its_own_files(dataset, mmap):
    """What the parent bound is not served in a child: it opens the file again, and finds
    it replaced."""
    p, records = dataset
    ds = ofindex.open(p, mmap=mmap)
    assert ds[3] == ds[3] == records[3] and ds._reader.bound == 1
    st_ = os.stat(p)
    tmp = p + ".new"
    with ofindex.Writer(tmp, index=False) as w:
        w.write_many([b"new%03d" % i for i in range(20)])
    os.utime(tmp, ns=(st_.st_atime_ns, st_.st_mtime_ns))
    os.replace(tmp, p)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_read_in_child, args=(ds, queue))
    child.start()
    kind, bound, what = queue.get(timeout=60)
    child.join(60)
    assert (kind, bound) == ("StaleIndexError", 0) and "replaced" in what
    assert ds[3] == records[3]  # the parent's map or descriptor is the old file's


def test_sidecar_checksums_are_checked_on_the_fast_path(tmp_path):
    p = str(tmp_path / "a.ofrecord")
    records = [b"payload-%d" % i for i in range(8)]
    with ofindex.Writer(p, "ofrecord") as w:  # checksums by default for OFRecord
        w.write_many(records)
    ds = ofindex.open(p)
    assert ds[0] == records[0] and ds._reader.bound == 1
    raw = bytearray(read_bytes(p))
    at = 8 * 3 + sum(len(r) for r in records[:2])  # record 2's first payload byte
    assert bytes(raw[at:at + len(records[2])]) == records[2]
    raw[at] ^= 1
    assert ds._reader.get(2) == records[2]
    rewrite_in_place(p, bytes(raw))  # the map shows it
    assert ds._reader.get(2) is None  # its sidecar checksum disagrees
    with pytest.raises(ofindex.CorruptRecordError, match=r"record 2.*CRC32C mismatch"):
        ds[2]
    assert crc32c.crc32c(records[2]) == int(ds._table.shards[0].sidecar.checksums[2])


def test_record_numbers_of_other_types_go_the_ordinary_way(dataset):
    p, records = dataset
    ds = ofindex.open(p)
    ds[0]
    assert ds._reader.get(np.int64(5)) is None and ds[np.int64(5)] == records[5]
    assert ds._reader.get(True) is None
    with pytest.raises(TypeError):
        ds[True]
    assert ds._reader.get(2**70) is None
    with pytest.raises(IndexError, match="out of range"):
        ds[2**70]
    assert ds._reader.get(-1) == ds[-1] == records[-1]
    assert ds._reader.get(20) is None
    with pytest.raises(RecordIndexError, match="record index 20 is out of range"):
        ds[20]


@pytest.mark.parametrize("hw", [True, False])
@pytest.mark.parametrize("mmap", [True, False])
def test_big_records_are_checked_as_the_ordinary_path_checks_them(tmp_path, hw, mmap):
    """Payloads of 4 KiB and more go through the crc32c package (smaller ones through the
    CPU's instruction, or the package without it): the same results."""
    native = _accel.native
    assert native is not None
    records = [bytes([i]) * n for i, n in enumerate([4095, 4096, 70_000, 5, 200_000])]
    with cpu_paths(hw_crc=hw):
        outcomes = {}
        for impl in ("compiled", "pure-python"):
            p = str(tmp_path / impl / "a.tfrecord")
            os.makedirs(os.path.dirname(p))
            with ofindex.Writer(p) as w:
                w.write_many(records)
            raw = bytearray(read_bytes(p))
            raw[12 + 4095 + 16 + 12 + 100] ^= 2  # record 1's payload
            with implementation(impl):
                ds = ofindex.open(p, mmap=mmap)
                first = [_outcome(lambda i=i, ds=ds: ds[i]) for i in range(5)]
                rewrite_in_place(p, bytes(raw))
                later = [_outcome(lambda i=i, ds=ds: ds[i]) for i in range(5)]
                outcomes[impl] = [(kind, v.replace(impl, "X") if isinstance(v, str) else v)
                                  for kind, v in first + later]
        assert outcomes["compiled"] == outcomes["pure-python"]
        assert outcomes["compiled"][:5] == [("ok", r) for r in records]
        assert outcomes["compiled"][6][0] == "CorruptRecordError"


_FRESH_THREADS = r"""
import pickle, random, sys, threading
ds = pickle.loads(sys.stdin.buffer.read())
expected = [f"{s}/{i}".encode() for s, c in enumerate([9, 14, 7]) for i in range(c)]
barrier, wrong = threading.Barrier(16), []
def work(k):
    barrier.wait()
    rng = random.Random(k)
    for _ in range(50):
        i = rng.randrange(30)
        if ds[i] != expected[i]:
            wrong.append(i)
threads = [threading.Thread(target=work, args=(k,)) for k in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
sys.exit(3 if wrong else 0)
"""


@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.slow
def test_threads_reading_a_fresh_dataset_at_once(tmp_path, mmap):
    """16 threads reading a dataset just unpickled in a new process (a Grain worker's read
    threads): the first reads of a shard race to bind it, and rebinding released the slot's
    buffers while another thread could still read through them; 1 process in 6 crashed with
    SIGSEGV (found as a Grain worker's 'exit code -11' in a CI run)."""
    for s, c in enumerate([9, 14, 7]):
        with ofindex.Writer(str(tmp_path / f"g-{s}.tfrecord")) as w:
            for i in range(c):
                w.write(f"{s}/{i}".encode())
    blob = pickle.dumps(ofindex.open(str(tmp_path / "g-*.tfrecord"), mmap=mmap))
    codes = [subprocess.run([sys.executable, "-c", _FRESH_THREADS], input=blob,
                            capture_output=True, timeout=120).returncode for _ in range(12)]
    assert codes == [0] * 12
