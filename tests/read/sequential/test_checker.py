"""The compiled Checker (a run's TFRecord CRCs checked on a second thread ahead of a
reader), and iter_batches with lists filled ahead on the pool's threads and without: the same
records, the same first bad record, at the same batch, across runs planned ahead."""

import multiprocessing
import os

import numpy as np
import pytest

import ofindex
from ofindex.errors import CorruptRecordError, DataFileNotFoundError
from ofindex.read.sequential import mapped_batches
from tests.kit.helpers import cpu_paths, hardware_crc, ref_tfrecord

native = hardware_crc()

N = 1500  # more than a few of the Checker's chunks of 256 records


@pytest.fixture(scope="module")
def framed():
    rng = np.random.default_rng(11)
    records = [rng.bytes(int(n)) for n in rng.integers(0, 300, N)]
    sizes = np.array([16 + len(r) for r in records], np.int64)
    ends = np.cumsum(sizes)
    return records, bytes(ref_tfrecord(records)), ends - sizes, ends


def corrupted(data, starts, k, where):
    raw = bytearray(data)
    at = {"payload": 12, "length crc": 9, "length": 1, "data crc": -1}[where]
    if where == "payload" and starts[k] + 16 == (starts[k + 1] if k + 1 < N else len(data)):
        at = -1  # an empty payload: its data CRC instead
    pos = int(starts[k]) + at if at >= 0 else int(starts[k + 1] if k + 1 < N else len(raw)) - 1
    raw[pos] ^= 0x20
    return bytes(raw)


def test_checker_passes_good_records_and_clamps_its_bounds(framed):
    _, data, starts, ends = framed
    c = native.Checker(data, starts, ends, 12, 4)
    assert c.wait(0, 0) == -1  # nothing asked for, nothing allowed: returns at once
    assert c.wait(300, 600) == -1
    assert c.wait(N + 50, N + 50) == -1  # clamped to the run
    assert c.wait(-5, -5) == -1


@pytest.mark.parametrize("chunk", [256, 10, 1])  # records per chunk (fewer for big ones)
@pytest.mark.parametrize("where", ["payload", "length crc", "length", "data crc"])
@pytest.mark.parametrize("k", [0, 1, 2, 255, 256, 257, 700, N - 1])
def test_checker_reports_the_first_bad_record_only_once_it_is_asked_for(framed, where, k,
                                                                         chunk):
    _, data, starts, ends = framed
    bad = corrupted(data, starts, k, where)
    c = native.Checker(bad, starts, ends, 12, 4, chunk)
    assert c.wait(k, k) == -1  # the records before it pass
    assert c.wait(k + 1, N) == k
    assert c.wait(N, N) == k
    # the serial check of the same records agrees
    assert native.slices(bad, starts, ends, 12, 4, True, False) == k
    other = native.Checker(bad, starts, ends, 12, 4)
    assert other.wait(N, N) == k  # asked all at once


def test_checker_reports_records_outside_the_buffer(framed):
    _, data, starts, ends = framed
    cut = data[: int(ends[900]) - 1]
    assert native.Checker(cut, starts, ends, 12, 4).wait(N, N) == 900
    assert native.Checker(data, starts, ends + 1, 12, 4).wait(N, N) == 0  # lengths disagree


def test_checker_refuses_what_it_cannot_check(framed):
    _, data, starts, ends = framed
    with pytest.raises(ValueError, match="TFRecords only"):
        native.Checker(data, starts, ends, 8, 0)
    with pytest.raises(ValueError, match="differ in length"):
        native.Checker(data, starts, ends[:-1], 12, 4)
    for chunk in (0, -1, 257):
        with pytest.raises(ValueError, match="chunk"):
            native.Checker(data, starts, ends, 12, 4, chunk)
    with pytest.raises(TypeError):
        native.Checker(data, starts.astype(np.int32), ends, 12, 4)
    with cpu_paths(hw_crc=False), pytest.raises(ValueError, match="CRC32C instruction"):
        native.Checker(data, starts, ends, 12, 4)


def test_a_checker_dropped_while_it_checks_stops(framed):
    _, data, starts, ends = framed
    big = np.tile(starts, 200), np.tile(ends, 200)  # 300,000 records to check
    for _ in range(20):
        c = native.Checker(data, *big, 12, 4)
        c.wait(0, len(big[0]))  # let it run, then drop it at once: dealloc joins the thread
        del c


def _wait_in_child(checker, n, queue):
    queue.put(checker.wait(n, n))


def test_a_forked_child_checks_inline(framed):
    # a fork copies no thread: the child's copy of a Checker checks in its own thread
    _, data, starts, ends = framed
    bad = corrupted(data, starts, 700, "payload")
    c = native.Checker(bad, starts, ends, 12, 4)
    c.wait(10, 20)  # the parent's thread has started
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_wait_in_child, args=(c, N, queue))
    child.start()
    try:
        assert queue.get(timeout=60) == 700
    finally:
        child.join(60)
        queue.close()
        queue.join_thread()
    assert child.exitcode == 0
    assert c.wait(N, N) == 700


def write_shards(d, counts, rng):
    records = []
    paths = []
    for s, count in enumerate(counts):
        recs = [rng.bytes(int(n)) for n in rng.integers(0, 400, count)]
        path = os.path.join(d, f"part-{s}")
        with open(path, "wb") as f:
            f.write(ref_tfrecord(recs))
        ofindex.build_index(path)
        records += recs
        paths.append(path)
    return paths, records


def flip_byte(path, offset):
    st = os.stat(path)
    with open(path, "r+b") as f:  # same size and mtime: the index still matches the file
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x10]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture(params=[True, False], ids=["spare core", "one core"])
def cores(request, monkeypatch):
    """Iterate with lists filled ahead on the pool's threads (a spare core), and without."""
    if not request.param:
        monkeypatch.setattr(mapped_batches, "executor", lambda: None)
    return request.param


@pytest.mark.parametrize("plan_records", [64, 1 << 16])
def test_iter_batches_through_checkers_equals_the_records(tmp_path, cores, plan_records,
                                                          monkeypatch):
    monkeypatch.setattr(mapped_batches, "_PLAN_RECORDS", plan_records)
    paths, records = write_shards(str(tmp_path), [300, 5, 700], np.random.default_rng(2))
    with ofindex.open(paths) as ds:
        for size, start, stop in [(16, 0, None), (1, 3, 40), (100, 250, 1000), (7, 0, 1005)]:
            got = [r for b in ds.iter_batches(size, start, stop) for r in b]
            assert got == records[start:stop]


@pytest.mark.parametrize("k", [5, 63, 64, 130, 300, 310, 1004])
def test_a_bad_record_in_a_later_run_comes_at_its_own_batch(tmp_path, cores, k, monkeypatch):
    # runs of 64 records are planned (and checked) one ahead of the batches being made
    monkeypatch.setattr(mapped_batches, "_PLAN_RECORDS", 64)
    paths, records = write_shards(str(tmp_path), [300, 5, 700], np.random.default_rng(4))
    s, local = (0, k) if k < 300 else (1, k - 300) if k < 305 else (2, k - 305)
    ofs = len(ref_tfrecord(records[k - local : k]))
    flip_byte(paths[s], ofs + 12 + len(records[k]) // 2 if records[k] else ofs + 9)
    with ofindex.open(paths) as ds:
        with pytest.raises(CorruptRecordError) as single:
            ds[k]
        got = []
        with pytest.raises(CorruptRecordError) as batched:
            for b in ds.iter_batches(16):
                got += b
        assert str(batched.value) == str(single.value)
        assert batched.value.record == single.value.record
        assert got == records[: k // 16 * 16]  # every batch before its own came


def test_a_shard_that_fails_to_open_ahead_fails_at_its_own_batch(tmp_path, cores,
                                                                 monkeypatch):
    # the next run is planned early; an error doing so is raised only at its turn
    monkeypatch.setattr(mapped_batches, "_PLAN_RECORDS", 64)
    paths, records = write_shards(str(tmp_path), [100, 200], np.random.default_rng(6))
    with ofindex.open(paths) as ds:
        os.remove(paths[1])
        got = []
        with pytest.raises(DataFileNotFoundError):
            for b in ds.iter_batches(32):
                got += b
        assert got == records[:96]  # the batches wholly in the first shard


def test_leaving_an_iteration_early_stops_its_checks(tmp_path, cores, monkeypatch):
    monkeypatch.setattr(mapped_batches, "_PLAN_RECORDS", 256)
    paths, records = write_shards(str(tmp_path), [2000], np.random.default_rng(7))
    with ofindex.open(paths) as ds:
        for _ in range(10):
            it = ds.iter_batches(128)
            assert next(it) == records[:128]
            it.close()


def test_readers_on_several_threads_all_get_their_answer(framed):
    # wait() releases the GIL: readers on other threads may wait on the same Checker
    import threading

    _, data, starts, ends = framed
    big = np.tile(starts, 100), np.tile(ends, 100)
    bad = corrupted(data, starts, 700, "payload")
    for buf, want in [(data, -1), (bad, 700)] * 10:
        c = native.Checker(buf, *big, 12, 4)
        got = {}

        def read(upto, c=c, got=got):
            got[upto] = c.wait(upto, upto)

        uptos = [50_000, 150_000, 100_000, len(big[0]), 700]
        threads = [threading.Thread(target=read, args=(u,)) for u in uptos]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert got == {u: want if 0 <= want < u else -1 for u in uptos}
