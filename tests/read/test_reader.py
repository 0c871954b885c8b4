"""The dataset API: indexing rules, metadata, pickling and use from other processes."""

import multiprocessing as mp
import os
import pickle

import numpy as np
import pytest

import ofindex
from ofindex import RecordIndexError

pytestmark = pytest.mark.usefixtures("impl")  # both implementations of the loops

RECORDS = [f"record-{i}".encode() * (i % 5) for i in range(100)]
SIZES = [0, 30, 0, 45, 25]  # uneven shards, empty ones included


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("ds")
    pos = 0
    for k, n in enumerate(SIZES):
        with ofindex.Writer(str(d / f"part-{k}.tfrecord")) as w:
            w.write_many(RECORDS[pos : pos + n])
        pos += n
    return str(d)


def test_order_len_and_metadata(dataset_dir):
    ds = ofindex.open(dataset_dir)
    assert len(ds) == 100 and list(ds) == RECORDS
    assert [s.records for s in ds.shards] == SIZES
    assert [os.path.basename(s.url) for s in ds.shards] == [f"part-{k}.tfrecord" for k in range(5)]
    assert ds.shards[1].bytes == sum(len(r) + 16 for r in RECORDS[:30])
    assert ds.locate(0) == (1, 0) and ds.locate(30) == (3, 0) and ds.locate(-1) == (4, 24)
    assert ds.cumulative_counts.tolist() == [0, 30, 30, 75, 100]
    assert "5 shards, 100 records" in repr(ds)


def test_index_errors(dataset_dir):
    ds = ofindex.open(dataset_dir)
    for bad in (100, -101, 10**12):
        with pytest.raises(IndexError, match=r"valid: -100 to 99"):
            ds[bad]
    with pytest.raises(RecordIndexError):
        ds.__getitems__([1, 2, 100])
    with pytest.raises(TypeError):
        ds["a"]
    with pytest.raises(TypeError):
        ds[np.array([True, False])]
    assert ds[np.int64(-1)] == RECORDS[-1]
    assert ds[5:5] == [] and ds.__getitems__([]) == []


def test_natural_order_of_part_files(tmp_path):
    for n in (10, 2, 1):
        with ofindex.Writer(str(tmp_path / f"part-{n}")) as w:
            w.write(str(n).encode())
    (tmp_path / "_SUCCESS").write_bytes(b"")
    assert list(ofindex.open(str(tmp_path))) == [b"1", b"2", b"10"]
    assert list(ofindex.open(str(tmp_path / "part-*"))) == [b"1", b"2", b"10"]
    explicit = [str(tmp_path / "part-10"), str(tmp_path / "part-1")]
    assert list(ofindex.open(explicit)) == [b"10", b"1"]
    with pytest.raises(FileNotFoundError, match="no data files"):
        ofindex.open(str(tmp_path / "nothing-*"))


def test_decode_hook(dataset_dir):
    ds = ofindex.open(dataset_dir, decode=len)
    assert ds[7] == len(RECORDS[7]) and ds[1:4] == [len(r) for r in RECORDS[1:4]]


def test_pickle_has_no_handles(dataset_dir):
    ds = ofindex.open(dataset_dir)
    ds[3], ds[50]
    blob = pickle.dumps(ds)
    assert len(blob) < 4000
    clone = pickle.loads(blob)
    assert clone[50] == RECORDS[50] and list(clone) == RECORDS


def _read_all(ds, indices):
    return [ds[i] for i in indices] + ds.__getitems__(indices[::-1])


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocess(dataset_dir, method):
    ds = ofindex.open(dataset_dir)
    ds[0], ds[99]  # open handles in the parent first
    chunks = [list(range(k, 100, 4)) for k in range(4)]
    with mp.get_context(method).Pool(2) as pool:
        results = pool.starmap(_read_all, [(ds, c) for c in chunks])
    for c, got in zip(chunks, results, strict=True):
        assert got == [RECORDS[i] for i in c] + [RECORDS[i] for i in c[::-1]]
    assert ds[42] == RECORDS[42]  # the parent still works


def test_format_mismatch_is_refused(tmp_path):
    with ofindex.Writer(str(tmp_path / "a"), format="tfrecord") as w:
        w.write(b"x")
    with ofindex.Writer(str(tmp_path / "b"), format="ofrecord") as w:
        w.write(b"y")
    with pytest.raises(ofindex.SidecarError, match=r"b: indexed as ofrecord, but .*a is "
                                                   r"tfrecord; .*open each kind as its own"):
        ofindex.open(str(tmp_path))
    with pytest.raises(ofindex.SidecarError):
        ofindex.open(str(tmp_path / "a"), format="ofrecord")


def test_index_dir_for_read_only_data(tmp_path):
    data = tmp_path / "data"
    with ofindex.Writer(str(data / "x.tfrecord"), index=False) as w:
        w.write_many(RECORDS)
    assert not os.path.exists(str(data / "x.tfrecord.ofidx"))
    os.chmod(data, 0o555)
    try:
        ofindex.build_index(str(data), index_dir=str(tmp_path / "idx"))
        ds = ofindex.open(str(data), index_dir=str(tmp_path / "idx"))
        assert list(ds) == RECORDS
        assert ds.shards[0].index_url == str(tmp_path / "idx" / "x.tfrecord.ofidx")
    finally:
        os.chmod(data, 0o755)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_memory_mapped_reads_match(dataset_dir, method):
    ds = ofindex.open(dataset_dir, mmap=True)
    assert "Mapped" in repr(ds._table.storage)
    assert [ds[i] for i in range(100)] == RECORDS and list(ds) == RECORDS
    assert ds.__getitems__([99, 0, 50, 50]) == [RECORDS[99], RECORDS[0], RECORDS[50], RECORDS[50]]
    assert ds[3:90:7] == RECORDS[3:90:7]
    with mp.get_context(method).Pool(2) as pool:
        got = pool.starmap(_read_all, [(ds, list(range(k, 100, 3))) for k in range(3)])
    for k, g in enumerate(got):
        c = list(range(k, 100, 3))
        assert g == [RECORDS[i] for i in c] + [RECORDS[i] for i in c[::-1]]


def test_memory_mapped_truncated_file_is_an_error_not_a_crash(tmp_path):
    p = str(tmp_path / "t.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many(RECORDS)
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(size - 100)  # at rest, before the dataset maps it
    ds = ofindex.open(p, mmap=True, check_stale=False)
    assert ds[0] == RECORDS[0]
    with pytest.raises(ofindex.OfindexError):
        ds[99]
    with pytest.raises(ofindex.OfindexError):
        ds.__getitems__([0, 99])
