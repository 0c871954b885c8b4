"""Batched reading: iter_batches (lists and RecordBatch buffers) equals iteration, and the big
batches checked on threads report a corrupt record exactly as the serial path does."""

import os
import platform

import crc32c
import numpy as np
import pytest

import ofindex
from ofindex import _accel
from ofindex.errors import CorruptRecordError, RecordIndexError
from ofindex.read import mapped_gather
from ofindex.read.sequential import mapped_batches
from ofindex.read.sequential.record_batch import RecordBatch
from tests.kit import paths
from tests.kit.helpers import (
    compiled_module,
    cpu_paths,
    empty_block_pool,
    ref_tfrecord,
    require,
)

SIZES = [300, 1, 450]


def payload(s, i, size=None):
    n = size if size is not None else 50 + (i * 37) % 300
    return (f"{s}/{i}/".encode() * (n // 4 + 2))[:n]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("small")
    records = []
    for s, c in enumerate(SIZES):
        recs = [payload(s, i) for i in range(c)]
        with ofindex.Writer(os.path.join(d, f"part-{s}")) as w:
            w.write_many(recs)
        records += recs
    return str(d), records


@pytest.mark.parametrize("plan_records", [1 << 16, 25])  # spans planned for many batches, few
@pytest.mark.parametrize("mmap", [True, False])
def test_iter_batches_equals_iteration(small, impl, mmap, plan_records, monkeypatch):
    monkeypatch.setattr(mapped_batches, "_PLAN_RECORDS", plan_records)
    d, records = small
    ds = ofindex.open(d, mmap=mmap)
    assert list(ds) == records
    for size, start, stop in [(64, 0, None), (1000, 0, None), (7, 295, 310), (1, 300, 302),
                              (100, 751, None)]:
        want = records[start:stop]
        lists = list(ds.iter_batches(size, start, stop))
        assert [r for b in lists for r in b] == want
        assert all(len(b) == size for b in lists[:-1])
        bufs = list(ds.iter_batches(size, start, stop, as_buffer=True))
        assert all(isinstance(b, RecordBatch) for b in bufs)
        assert [r for b in bufs for r in b] == want
        assert [b.first for b in bufs] == list(range(start, start + len(want), size))
        if bufs:
            b = bufs[-1]
            assert b.to_list() == want[b.first - start:]
            assert bytes(b.view(-1)) == want[-1] and b[0] == want[b.first - start]
            assert b.lengths.tolist() == [len(r) for r in b]
    assert list(ds.iter_batches(10, 5, 5)) == []
    with pytest.raises(ValueError, match="batch_size"):
        next(ds.iter_batches(0))
    with pytest.raises(RecordIndexError):
        next(ds.iter_batches(10, 9, 3))


def test_iter_batches_applies_decode_to_lists_only(small):
    d, records = small
    ds = ofindex.open(d, decode=len)
    assert next(ds.iter_batches(5)) == [len(r) for r in records[:5]]
    assert next(ds.iter_batches(5, as_buffer=True)).to_list() == records[:5]


def corrupt_copy(tmp_path, records, record, where):
    """A one-shard dataset whose record ``record`` has one byte flipped (payload, length CRC
    or stored length)."""
    path = str(tmp_path / "bad.tfrecord")
    with ofindex.Writer(path) as w:
        w.write_many(records)
    st = os.stat(path)
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    offset = len(ref_tfrecord(records[:record]))
    at = {"payload": 12 + len(records[record]) // 2, "length crc": 9, "length": 1}[where]
    raw[offset + at] ^= 0x40
    with open(path, "r+b") as f:  # same size and mtime: the index still matches the file
        f.write(raw)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return path, offset


@pytest.mark.parametrize("where", ["payload", "length crc"])
def test_iter_batches_names_a_corrupt_record_as_ds_i_does(tmp_path, impl, where):
    records = [payload(0, i) for i in range(40)]
    path, offset = corrupt_copy(tmp_path, records, 23, where)
    ds = ofindex.open(path)
    with pytest.raises(CorruptRecordError) as single:
        ds[23]
    for as_buffer in (False, True):
        with pytest.raises(CorruptRecordError) as batched:
            list(ds.iter_batches(16, as_buffer=as_buffer))
        assert str(batched.value) == str(single.value)
        assert (batched.value.record, batched.value.offset) == (23, offset)
    assert len(next(ds.iter_batches(16, 0, 20))) == 16  # the records before it read fine


def test_big_batches_on_threads_equal_the_serial_path(tmp_path, monkeypatch, crc_path):
    rng = np.random.default_rng(3)
    records = [rng.bytes(int(n)) for n in rng.integers(20_000, 60_000, 150)]
    for s in range(2):
        with ofindex.Writer(str(tmp_path / f"p{s}.tfrecord")) as w:
            w.write_many(records[s * 75:(s + 1) * 75])
    ds = ofindex.open(str(tmp_path / "p*.tfrecord"))
    idx = rng.integers(0, 150, 200)
    threaded = []
    copies = mapped_gather.threaded_copies
    monkeypatch.setattr(mapped_gather, "threaded_copies",
                        lambda *args: threaded.append(1) or copies(*args))
    got = ds.__getitems__(idx)
    assert got == [records[i] for i in idx]
    if _accel.native is not None and mapped_gather.executor() is not None:
        # 200 x ~40 KB: the threaded path served it when the CRC instruction checks the
        # copies (else the compiled gather, whose copies the crc32c package checks: CRCs read
        # with numpy out of the maps could not be guarded against a file that shrank)
        assert threaded == ([1] if _accel.native.hw_crc() else [])
    monkeypatch.setattr(mapped_gather, "PARALLEL_BYTES", 1 << 62)
    served = len(threaded)
    assert ds.__getitems__(idx) == got
    assert len(threaded) == served  # (small batches: the compiled gather)


@pytest.fixture(params=["crc instruction", "crc32c package"])
def crc_path(request):
    """Run a test with the CPU's CRC32C instruction on, and off (the crc32c package)."""
    with cpu_paths(hw_crc=request.param == "crc instruction"):
        yield request.param


@pytest.mark.parametrize("where", ["payload", "length crc"])
def test_big_batch_on_threads_reports_the_corrupt_record_as_serially(tmp_path, monkeypatch,
                                                                      where, crc_path):
    rng = np.random.default_rng(4)
    records = [rng.bytes(int(n)) for n in rng.integers(40_000, 60_000, 120)]
    path, offset = corrupt_copy(tmp_path, records, 77, where)
    ds = ofindex.open(path)
    batch = [5, 90, 77, 3, 77, *range(100, 120)]  # > 1 MB: the threaded path
    monkeypatch.setattr(mapped_gather, "PARALLEL_BYTES", 1 << 20)
    with pytest.raises(CorruptRecordError) as threaded:
        ds.__getitems__(batch)
    monkeypatch.setattr(mapped_gather, "PARALLEL_BYTES", 1 << 62)
    with pytest.raises(CorruptRecordError) as serial:
        ds.__getitems__(batch)
    assert str(threaded.value) == str(serial.value)
    assert (threaded.value.record, threaded.value.offset) == (77, offset)
    assert (threaded.value.stored_crc, threaded.value.computed_crc) == (
        serial.value.stored_crc, serial.value.computed_crc)
    ok = [i for i in range(120) if i != 77]
    monkeypatch.setattr(mapped_gather, "PARALLEL_BYTES", 1 << 20)
    assert ds.__getitems__(ok) == [records[i] for i in ok]


@pytest.mark.parametrize("where", ["payload", "length crc", "length"])
@pytest.mark.parametrize("position", range(5))
def test_big_batch_reports_a_corrupt_record_at_any_place_as_serially(
        tmp_path, monkeypatch, where, position, crc_path):
    # the corrupt record at several places of a batch of records of mixed sizes (tiny to
    # big) is reported as the serial path reports it, by either CRC path
    rng = np.random.default_rng(6)
    sizes = [0, 3, 7, 8, 9, 15, 16, 17, 33_000, 40_001, 50_007, 64_000]
    records = [rng.bytes(sizes[i % len(sizes)]) for i in range(60)]
    path, _ = corrupt_copy(tmp_path, records, 44, where)  # 44: a 33,000-byte record
    ds = ofindex.open(path)
    batch = [*[8, 9, 10, 11, 20][:position], 44, *[41, 40, 10][position % 3:]]
    monkeypatch.setattr(mapped_gather, "PARALLEL_BYTES", 1 << 10)
    with pytest.raises(ofindex.OfindexError) as threaded:
        ds.__getitems__(batch)
    monkeypatch.setattr(mapped_gather, "PARALLEL_BYTES", 1 << 62)
    with pytest.raises(ofindex.OfindexError) as serial:
        ds.__getitems__(batch)
    assert type(threaded.value) is type(serial.value)
    assert str(threaded.value) == str(serial.value)
    assert "record 44" in str(threaded.value)
    good = [i for i in range(60) if i != 44]
    monkeypatch.setattr(mapped_gather, "PARALLEL_BYTES", 1 << 10)
    assert ds.__getitems__(good) == [records[i] for i in good]
    assert ds.__getitems__(good[::-1]) == [records[i] for i in good[::-1]]


@pytest.mark.parametrize("where", ["payload", "length crc", "length"])
def test_compiled_fill_names_the_first_bad_record_at_every_position(tmp_path, where):
    compiled_module()
    native = _accel.native
    rng = np.random.default_rng(7)
    sizes = [0, 3, 7, 8, 9, 15, 16, 17, 1000, 4097, 5]
    records = [rng.bytes(sizes[i % len(sizes)]) for i in range(22)]
    starts = np.cumsum([0] + [16 + len(r) for r in records[:-1]]).astype(np.int64)
    which = np.zeros(len(records), np.int64)
    checks = [True, False] if native.hw_crc() else [False]
    for verify in checks:
        good = bytes(ref_tfrecord(records))
        outs = native.blank(np.array([len(r) for r in records], np.int64))
        assert native.fill([good], which, starts, outs, 0, len(records), 12, 4, verify) == -1
        assert outs == records
        for k in range(len(records)):
            path, _ = corrupt_copy(tmp_path, records, k, where)
            with open(path, "rb") as f:
                bad = f.read()
            outs = native.blank(np.array([len(r) for r in records], np.int64))
            caught = where == "length" or verify
            for lo in (0, max(k - 1, 0)):
                got = native.fill([bad], which, starts, outs, lo, len(records), 12, 4, verify)
                assert got == (k if caught else -1), (verify, k, lo)
                # a range that ends before it is whole
                assert native.fill([bad], which, starts, outs, lo, k, 12, 4, verify) == -1
    outs = native.blank(np.array([len(records[0]) + 1], np.int64))  # past its buffer
    assert native.fill([b"x" * 16], which, starts, outs, 0, 1, 12, 4, False) == 0


@pytest.mark.parametrize("where", ["payload", "length crc", "length"])
def test_list_batches_checked_on_a_second_thread_name_the_first_bad_record(tmp_path, where):
    compiled_module()
    # slices(parallel=True) checks a big batch on a compiled thread while this one makes the
    # objects: it must return the same list, or the same first bad record, as the serial pass
    native = _accel.native
    rng = np.random.default_rng(8)
    records = [rng.bytes(int(n)) for n in rng.integers(0, 300, 1500)]
    good = bytes(ref_tfrecord(records))
    starts = np.cumsum([0] + [16 + len(r) for r in records[:-1]]).astype(np.int64)
    ends = starts + np.array([16 + len(r) for r in records], np.int64)
    if not native.hw_crc():  # pragma: no cover (a CPU without the CRC32C instruction)
        with pytest.raises(ValueError, match="CRC32C instruction"):
            native.slices(good, starts, ends, 12, 4, True, True)  # iter_batches uses cut()
    else:
        for parallel in (False, True):
            assert native.slices(good, starts, ends, 12, 4, True, parallel) == records
        for k in (0, 1, 2, 700, 1499):
            path, _ = corrupt_copy(tmp_path, records, k, where)
            with open(path, "rb") as f:
                bad = f.read()
            assert native.slices(bad, starts, ends, 12, 4, True, True) == k
            assert native.slices(bad, starts, ends, 12, 4, True, False) == k
        cut = good[:int(ends[900]) - 1]  # records 900.. lie past the end of the buffer
        assert native.slices(cut, starts, ends, 12, 4, True, True) == 900
    ds = ofindex.open(corrupt_copy(tmp_path, records, 1100, where)[0])
    with pytest.raises(CorruptRecordError) as single:
        ds[1100]
    with pytest.raises(CorruptRecordError) as batched:
        list(ds.iter_batches(1024))
    assert str(batched.value) == str(single.value)


def test_cpu_crc_instruction_agrees_with_the_crc32c_package(small):
    compiled_module()
    native = _accel.native
    rng = np.random.default_rng(5)
    data = rng.bytes(5000)
    has_instruction = native.hw_crc32c(b"") is not None
    if not has_instruction:  # pragma: no cover (a CPU without it: it cannot be switched on)
        was = native.hw_crc()
        assert not native.hw_crc(True)
        native.hw_crc(was)
    for n in [*range(40), 255, 256, 257, 4095, 4096]:
        for off in (0, 1, 7):
            view = memoryview(data)[off:off + n]
            want = crc32c.crc32c(view) if has_instruction else None
            assert native.hw_crc32c(view) == want
    d, records = small
    ds = ofindex.open(d)
    was = native.hw_crc()
    try:
        native.hw_crc(False)  # the crc32c package checks every record instead
        assert not native.hw_crc()
        assert [r for b in ds.iter_batches(100) for r in b] == records
        assert [r for b in ds.iter_batches(100, as_buffer=True) for r in b] == records
        assert ds.__getitems__([5, 400, 2]) == [records[5], records[400], records[2]]
    finally:
        native.hw_crc(was)


_FAULTS_SCRIPT = """
import os, resource, sys
if sys.argv[2] == "one core":  # a process held to one core (a pinned worker's child)
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
else:  # every core of the machine, whatever the test process was held to
    os.sched_setaffinity(0, range(os.cpu_count() or 1))
import numpy as np, ofindex
ds = ofindex.open(sys.argv[1])
rng = np.random.default_rng(1)
batches = [rng.integers(0, len(ds), 64).tolist() for _ in range(21)]
want = {i: ds[i] for b in batches for i in b}
got = ds.__getitems__(batches[0])  # the first big batch (its memory is new either way)
del got
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for b in batches[1:]:
    got = ds.__getitems__(b)
    assert got == [want[i] for i in b]
    del got
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""


@pytest.mark.parametrize("cores", ["its cores", "one core"])
def test_big_batches_keep_their_memory_between_batches(tmp_path, cores):
    compiled_module()
    require(platform.libc_ver()[0] == "glibc", "glibc, whose heap trimming this test measures",
            "run it on a glibc Linux")
    # a fresh process: glibc handed a freed batch's heap back to the system, and the next
    # batch took a page fault per 4 KiB (1,600 here for 64 x 100 KB; measured 6,185 and 5x
    # slower for 256 x 100 KB); blank() makes glibc keep it
    import subprocess
    import sys

    rng = np.random.default_rng(9)
    path = str(tmp_path / "big.tfrecord")
    with ofindex.Writer(path) as w:
        w.write_many([rng.bytes(100_000) for _ in range(300)])
    # a fresh process that inherits nothing of this one but the interpreter, the path to
    # ofindex and where the file's index went (a test process's environment and directory
    # are other tests' too)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": paths.pythonpath(),
           "OFINDEX_INDEX_CACHE": os.environ["OFINDEX_INDEX_CACHE"]}
    out = subprocess.run([sys.executable, "-c", _FAULTS_SCRIPT, path, cores],
                         capture_output=True, text=True, check=False, timeout=120, env=env,
                         cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    faults_per_batch = float(out.stdout)
    assert faults_per_batch < 200, (faults_per_batch, sorted(os.environ),
                                    os.sched_getaffinity(0), os.getcwd())


def test_big_buffer_batches_reuse_the_memory_of_released_ones(tmp_path):
    compiled_module()
    # a batch of payloads over 32 MiB is fresh memory from the kernel each time in glibc
    # (page faults and zeroing cost more than the copy); it comes from the pool instead
    rng = np.random.default_rng(4)
    records = [rng.bytes(100_000 + k) for k in range(1000)]
    path = str(tmp_path / "big.tfrecord")
    with ofindex.Writer(path) as w:
        w.write_many(records)
    with ofindex.open(path) as ds, empty_block_pool():
        batches = ds.iter_batches(400, as_buffer=True)  # 40 MB each
        first = next(batches)
        assert first.data.nbytes > _accel.POOLED_BYTES
        assert first.to_list() == records[:400]
        address, pooled = first.data.ctypes.data, _accel.native.pool()[0]
        del first
        assert _accel.native.pool()[0] > pooled  # waits in the pool for the next batch
        second = next(batches)
        assert second.data.ctypes.data == address
        third = next(batches)  # the second is still held: the third has its own memory
        assert not np.shares_memory(second.data, third.data)
        assert second.to_list() == records[400:800] and third.to_list() == records[800:]
