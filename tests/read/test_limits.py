"""Limits and crashes on the read side (issue 43): ``close()`` while other threads read,
descriptors bounded by the process's limit whatever the number of shards, a data file
rewritten in place under a memory map."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest

import ofindex


def _record(k: int, i: int) -> bytes:
    """Record ``i`` of shard ``k``: its numbers, then a byte pattern of its own (a record read
    through another descriptor, or at another offset, cannot pass for it)."""
    return b"%03d:%05d:" % (k, i) + bytes([(7 * k + i) % 251]) * (40 + (i * 37) % 900)


@pytest.fixture(scope="module", params=[None, "gzip"], ids=["plain", "gzip"])
def shards(request, tmp_path_factory):
    """Eight shards of 300 records of 50-950 bytes (plain or gzip), and their records."""
    directory = tmp_path_factory.mktemp(f"close-{request.param}") / "data"
    records = []
    with ofindex.ShardedWriter(directory, shard_records=300, compression=request.param) as w:
        for k in range(8):
            for i in range(300):
                records.append(_record(k, i))
                w.write(records[-1])
    return str(directory), records


def _reads(ds: ofindex.Dataset, records: list[bytes], seed: int, rounds: int,
           problems: list[str]) -> None:
    """Read through every path, ``rounds`` times, recording what went wrong."""
    rng = np.random.default_rng(seed)
    n = len(records)
    for r in range(rounds):
        way = (seed + r) % 5
        try:
            if way == 0:
                i = int(rng.integers(n))
                got, want = [ds[i]], [records[i]]
            elif way == 1:
                a = int(rng.integers(n - 40))
                got, want = ds[a : a + 40], records[a : a + 40]
            elif way == 2:
                picks = rng.integers(0, n, 32).tolist()
                got, want = ds.__getitems__(picks), [records[i] for i in picks]
            elif way == 3:
                a = int(rng.integers(n - 60))
                got, want = list(ds.iter_records(a, a + 60)), records[a : a + 60]
            else:
                a = int(rng.integers(n - 60))
                got = [x for b in ds.iter_batches(16, a, a + 60) for x in b]
                want = records[a : a + 60]
            if got != want:
                problems.append(f"way {way}: wrong records")
        except Exception as exc:  # every failure is one: close() must never show
            problems.append(f"way {way}: {type(exc).__name__}: {str(exc)[:200]}")


@pytest.mark.parametrize("mapped", [False, True], ids=["pread", "mmap"])
@pytest.mark.slow
def test_close_while_other_threads_read(shards, impl, mapped, tmp_path):
    """``ds.close()`` again and again while four threads read through every path (with
    ``mmap=False`` or maps) and a fifth opens and closes other files (which then get the descriptor
    numbers close() freed): every read completes with the right records. Reads that took a
    descriptor, let go of it, then used its number gave EBADF, RangeReadError, corruption
    errors, and records of whatever file had just reused it."""
    root, records = shards
    decoy = tmp_path / "decoy"
    decoy.write_bytes(bytes(range(256)) * 4096)
    ds = ofindex.open(root, mmap=mapped)
    problems: list[str] = []
    done = threading.Event()

    def closer() -> None:
        while not done.is_set():
            ds.close()

    def reuser() -> None:
        while not done.is_set():
            for fd in [os.open(decoy, os.O_RDONLY) for _ in range(8)]:
                os.close(fd)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: between a descriptor's use and reuse
    try:
        others = [threading.Thread(target=closer), threading.Thread(target=reuser)]
        readers = [threading.Thread(target=_reads, args=(ds, records, seed, 300, problems))
                   for seed in range(4)]
        for t in others + readers:
            t.start()
        for t in readers:
            t.join()
    finally:
        done.set()
        for t in others:
            t.join()
        sys.setswitchinterval(old)
        ds.close()
    assert problems == []


# -- open files: any number of shards under a small limit -------------------------------------

def _tiny_shards(directory, count: int, gzipped=lambda k: False) -> str:
    """``count`` shards of one record each (``b"%05d" % k``, shard ``k`` gzipped when
    ``gzipped(k)``), indexed (their sidecars written without ``fsync``: 20,000 of them take
    minutes to flush, and the files are thrown away)."""
    import gzip
    from unittest import mock

    from tests.kit.helpers import ref_tfrecord

    os.makedirs(directory)
    for k in range(count):
        raw = ref_tfrecord([b"%05d" % k])
        with open(os.path.join(directory, f"part-{k:05d}"), "wb") as f:
            f.write(gzip.compress(raw, mtime=0) if gzipped(k) else raw)
    with mock.patch.object(os, "fsync", lambda fd: None):
        ofindex.build_index(str(directory))
    return str(directory)


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory):
    """20,000 shards of one record (a compact manifest) and 1,500 of which every third is
    gzipped (a JSON manifest); in memory where the machine has ``/dev/shm`` (creating 20,000
    files in one directory took 10 s of a 14 s build on the test machine's disk)."""
    import shutil
    import tempfile

    shm = "/dev/shm"
    root = (tempfile.mkdtemp(prefix="ofindex-many-", dir=shm)
            if os.path.isdir(shm) and os.access(shm, os.W_OK)
            else str(tmp_path_factory.mktemp("many")))
    try:
        yield (_tiny_shards(os.path.join(root, "plain"), 20_000),
               _tiny_shards(os.path.join(root, "mixed"), 1_500, lambda k: k % 3 == 0))
    finally:
        shutil.rmtree(root, ignore_errors=True)


#: Reads every way under a soft limit of 256 open files, in a process of its own.
_UNDER_A_LIMIT = r"""
import os, resource, sys
import numpy as np
resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
import ofindex
from ofindex import _accel

root, impl, mapped, manifest = sys.argv[1], sys.argv[2], sys.argv[3] == "mmap", sys.argv[4]
if impl == "pure-python":
    _accel.native = None
ds = ofindex.open(root, mmap=mapped, manifest=manifest == "manifest")
n = len(ds)
want = [b"%05d" % k for k in range(n)]
most = 0

def check(got, expect, what):
    global most
    most = max(most, len(os.listdir("/proc/self/fd")))
    assert got == expect, what

check([ds[i] for i in range(0, n, 7)], want[::7], "ds[i]")
check([ds[np.int64(i)] for i in range(3, n, 101)], want[3::101], "ds[np.int64]")
a = n // 3
check(ds[a : a + 1200], want[a : a + 1200], "slice")
picks = np.random.default_rng(43).permutation(n)[:1500]
check(ds[picks], [want[k] for k in picks.tolist()], "array")
check(ds.__getitems__(picks[:700].tolist()), [want[k] for k in picks[:700].tolist()],
      "__getitems__")
check(list(ds.iter_records(a, a + 1200)), want[a : a + 1200], "iter_records")
check([r for b in ds.iter_batches(256, a, a + 1200) for r in b], want[a : a + 1200],
      "iter_batches")
batches = list(ds.iter_batches(500, 0, 1200, as_buffer=True))
check([r for b in batches for r in b.to_list()], want[:1200], "as_buffer")
ds.close()
print(n, most)
"""


@pytest.mark.parametrize("mapped", ["mmap", "pread"])
@pytest.mark.parametrize("which", ["plain", "mixed"])
@pytest.mark.slow
def test_any_number_of_shards_reads_under_a_limit_of_256_files(many_shards, impl, mapped,
                                                               which):
    """20,000 shards (and 1,500 of which a third are gzipped) read through every path under a
    soft limit of 256 open files: each touched shard kept its sidecar mapped (a descriptor
    each, without a bound) beside 256 cached data files, and reading failed with "Too many
    open files" after about 120 shards."""
    import subprocess

    root = many_shards[0 if which == "plain" else 1]
    done = subprocess.run([sys.executable, "-c", _UNDER_A_LIMIT, root, impl, mapped,
                           "manifest"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stderr[-3000:]
    shards, most = map(int, done.stdout.split())
    assert shards == (20_000 if which == "plain" else 1_500) and most < 256


@pytest.mark.slow
def test_opening_20000_shards_without_a_manifest_under_a_limit_of_256_files(many_shards):
    """Without a manifest every sidecar is opened at open (for its header): they are let go
    of as others are opened, and their headers kept."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", _UNDER_A_LIMIT, many_shards[0], "compiled",
                           "mmap", "listed"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[0] == "20000"


@pytest.mark.parametrize("mapped", [True, False], ids=["mmap", "pread"])
def test_a_batch_read_in_parts_reports_its_first_bad_record(tmp_path, impl, mapped,
                                                           monkeypatch):
    """A batch over more shards than a read may hold is read in parts, in the order asked
    for: the record reported bad is still the first bad one in that order, and the records
    come back in that order."""
    from ofindex.storage import openfiles

    root = _tiny_shards(tmp_path / "data", 12)
    monkeypatch.setattr(openfiles, "limits", lambda: openfiles.FileLimits(256, 4, 2))
    ds = ofindex.open(root, mmap=mapped)
    order = [11, 3, 7, 0, 5, 9, 1, 10]
    assert ds[order] == [b"%05d" % k for k in order]
    for k in (7, 1):  # a data byte of shards 7 and 1 changed in place (same size and mtime)
        path = os.path.join(root, f"part-{k:05d}")
        st = os.stat(path)
        with open(path, "r+b") as f:
            f.seek(12)
            f.write(b"X")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    ds.close()
    with pytest.raises(ofindex.CorruptRecordError, match="part-00007"):
        ds[order]


# -- a data file truncated or rewritten in place under its memory map -------------------------

#: Reads one way in a thread, again and again, while the main thread truncates the data file
#: in place; the thread's error is raised in the main thread (the process's last words).
_UNDER_A_SHRINKING_MAP = r"""
import os, sys, threading, time
import numpy as np
import ofindex
from ofindex import _accel

path, way, impl = sys.argv[1], sys.argv[2], sys.argv[3]
if impl == "pure-python":
    _accel.native = None
ds = ofindex.open(path)  # memory-mapped (the default)
n = len(ds)
rng = np.random.default_rng(0)
read_once = {
    "ds[i]": lambda: [ds[int(i)] for i in rng.integers(0, n, 64)],
    "ds[np.int64]": lambda: [ds[i] for i in rng.integers(0, n, 64)],
    "slice": lambda: ds[0 : n // 2],
    "__getitems__": lambda: ds.__getitems__(rng.integers(0, n, 256).tolist()),
    # ~6 MB: copied and checked on threads
    "big batch": lambda: ds.__getitems__(rng.integers(0, n, 6000).tolist()),
    # checked in place for decoders that read the maps (as the integrations do, the records
    # read as bytes where there are no maps to read)
    "mapped_spans": lambda: (ds.mapped_spans(rng.integers(0, n, 256))
                             or ds.__getitems__(rng.integers(0, n, 256).tolist())),
    "iter_records": lambda: list(ds.iter_records()),
    "iter_batches": lambda: list(ds.iter_batches(32)),
    "as_buffer": lambda: list(ds.iter_batches(32, as_buffer=True)),
}[way]
read_once()  # the maps made, the shard bound to the compiled reader
shrunk = threading.Event()
failure = []

def reader():
    passes = 0
    while passes < 50:
        try:
            read_once()
        except BaseException as exc:
            failure.append(exc)
            return
        passes += shrunk.is_set()

thread = threading.Thread(target=reader)
thread.start()
time.sleep(0.05)
with open(path, "r+b") as f:  # in place: the same inode, every page of its map gone
    f.truncate(0)
shrunk.set()
thread.join()
if not failure:
    print("read 50 times after the file shrank, without an error")
    sys.exit(3)
raise failure[0]
"""


@pytest.mark.parametrize("way", ["ds[i]", "ds[np.int64]", "slice", "__getitems__",
                                 "big batch", "mapped_spans", "iter_records", "iter_batches",
                                 "as_buffer"])
def test_a_file_truncated_under_its_map_raises_an_error_naming_it(tmp_path, impl, way):
    """A data file truncated in place while another thread reads it through its memory map
    (the default): the process ends with an OfindexError naming the file, raised in Python
    (StaleIndexError from the compiled reads, which copy out of maps in guarded calls; the
    pure-Python reads use pread, which a shrunk file answers short), never killed by SIGBUS
    without a word, as every read through a map was."""
    import subprocess

    path = str(tmp_path / "shrinking.tfrecord")
    with ofindex.Writer(path) as w:  # 2,000 records of 100-2,100 bytes: a few MB, many pages
        for i in range(2000):
            w.write(_record(i % 7, i)[:100 + (i * 53) % 2000] * 2)
    done = subprocess.run([sys.executable, "-c", _UNDER_A_SHRINKING_MAP, path, way, impl],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr[-3000:])
    assert last.startswith("ofindex.errors.") and path in last, done.stderr[-3000:]
    if impl == "compiled":
        assert last.startswith("ofindex.errors.StaleIndexError: ") and (
            "changed while it was read" in last)


#: Every compiled function that reads a memory map, called on the map of a file truncated
#: since (a fault in any of them killed the process): each must raise StaleIndexError naming
#: the file. (In a process of its own: a failing guard kills it, not the test run.)
_EVERY_COMPILED_READ = r"""
import mmap, os, sys
import crc32c
import numpy as np
from ofindex import StaleIndexError, _accel
from ofindex.formats.crc import LENGTH_CRCS
from ofindex.storage.mapped import DataMap

native = _accel.native
path, n = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDONLY)
buf = DataMap(fd, 0, access=mmap.ACCESS_READ)
os.close(fd)
buf.path = path
size = len(buf) // n  # n records of the same size, back to back
starts = np.arange(n, dtype=np.int64) * size
ends = starts + size
offsets = starts.astype(np.uint64)
which, local = np.zeros(n, np.int64), np.arange(n, dtype=np.int64)
payloads = np.full(n, size - 16, np.int64)
assert native.hw_crc(), "these checks use the CRC instruction"
reader = native.Reader(np.array([n], np.int64), 12, 4, True, False, crc32c.crc32c, {}, 8)
reader.bind_map(0, buf, offsets, len(buf), None)
crc = crc32c.crc32c
calls = {
    "copy_out": lambda: native.copy_out(buf, 0, len(buf)),
    "record": lambda: native.record(buf, offsets, len(buf), n - 1, 12, 4, True, crc, LENGTH_CRCS),
    "Reader.get": lambda: reader.get(n - 1),
    "gather": lambda: native.gather([buf], [offsets], [len(buf)], which, local, 12, 4, True,
                                    crc, LENGTH_CRCS),
    "cut": lambda: native.cut(buf, starts, ends, 12, 4, True, crc, LENGTH_CRCS),
    "slices": lambda: native.slices(buf, starts, ends, 12, 4, False),
    "slices, CRCs": lambda: native.slices(buf, starts, ends, 12, 4, True),
    "slices, parallel": lambda: native.slices(buf, starts, ends, 12, 4, True, True),
    "pack": lambda: native.pack(buf, starts, ends, 12, 4, True, np.empty(len(buf), np.uint8),
                                np.empty(n + 1, np.int64), 0),
    "fill": lambda: native.fill([buf], which, starts, native.blank(payloads), 0, n, 12, 4,
                                True),
    "fill in place": lambda: native.fill([buf], which, starts, payloads, 0, n, 12, 4, True),
    "Checker": lambda: native.Checker(buf, starts, ends, 12, 4).wait(n, n),
    "locate": lambda: native.locate([buf], (b"x",), b".b4v", True,
                                    np.empty(n * 7, np.int64), (which, starts + 12, ends - 4)),
    "gather_spans": lambda: native.gather_spans([buf], np.zeros(n, np.int64), payloads,
                                                np.empty(int(payloads.sum()), np.uint8),
                                                (which, starts + 12, ends - 4)),
    "byte_spans": lambda: native.byte_spans([buf], np.zeros(n, np.int64), payloads,
                                            np.zeros(n, np.int64), np.empty(0, np.int64),
                                            np.empty(0, np.int64),
                                            (which, starts + 12, ends - 4)),
    "span_sums": lambda: native.span_sums([buf], np.ones(n, np.int64), np.zeros(n, np.int64),
                                          payloads, np.empty(n, np.uint32),
                                          (which, starts + 12, ends - 4)),
}
for name, call in calls.items():  # all read fine first
    call()
os.truncate(path, 0)
for name, call in calls.items():
    try:
        call()
    except StaleIndexError as exc:
        assert str(exc).startswith(path + ": the data file changed while it was read"), exc
        continue
    print(f"{name}: no error")
    sys.exit(3)
print("all raised")
"""


def test_every_compiled_read_of_a_shrunk_map_raises_an_error_naming_the_file(tmp_path):
    """Each compiled function that reads a memory map (one guarded copy per record, or one
    guarded loop per call, on this thread or a helper thread), on the map of a file
    truncated since it was mapped: StaleIndexError naming the file, never SIGBUS."""
    import subprocess

    path = str(tmp_path / "shrinking.tfrecord")
    n = 600  # 600 records of 5,000 bytes: 3 MB, every page of it gone
    with ofindex.Writer(path) as w:
        for i in range(n):
            w.write(bytes([i % 251]) * (5000 - 16))
    done = subprocess.run([sys.executable, "-c", _EVERY_COMPILED_READ, path, str(n)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0 and done.stdout.strip() == "all raised", (
        done.returncode, done.stdout, done.stderr[-3000:])


_IN_A_DATALOADER_WORKER = r"""
import os, sys
import torch.utils.data
import ofindex
from ofindex import _accel

path, impl = sys.argv[1], sys.argv[2]
if impl == "pure-python":
    _accel.native = None
ds = ofindex.open(path)


class Records(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 30

    def __getitem__(self, k):
        if k == 20:  # the worker's own reads are under way: the file shrinks in place
            os.truncate(path, 0)
        return len(ds[k % len(ds)])


loader = torch.utils.data.DataLoader(Records(), batch_size=10, num_workers=1,
                                     multiprocessing_context="fork")
for k, batch in enumerate(loader):
    if k > 100:
        print("no error")
        sys.exit(3)
"""


def test_a_file_truncated_under_a_dataloader_worker_raises_in_the_main_process(tmp_path, impl):
    """PyTorch's DataLoader workers install their own SIGBUS handler when they start (which
    reports "killed by signal: Bus error" and dies): ofindex installs its own again before
    its reads, so a file truncated under a worker's maps is a StaleIndexError naming it,
    raised in the main process, not a dead worker."""
    import subprocess

    from tests.kit.helpers import need

    need("torch", "torch")
    path = str(tmp_path / "shrinking.tfrecord")
    with ofindex.Writer(path) as w:
        for i in range(2000):
            w.write(_record(i % 7, i))
    done = subprocess.run([sys.executable, "-c", _IN_A_DATALOADER_WORKER, path, impl],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr[-3000:])
    assert "Bus error" not in done.stderr and path in done.stderr, done.stderr[-3000:]
    want = "StaleIndexError" if impl == "compiled" else "RangeReadError"
    assert f"ofindex.errors.{want}: {path}" in done.stderr, done.stderr[-3000:]


def test_the_count_of_open_files_lets_go_of_the_oldest(monkeypatch):
    """The process-wide count: beyond the bound the oldest holdings are let go of, in order,
    a holding held again is the newest, one let go of by its holder stops counting, and a
    holder garbage collected (its files closed with it) is skipped."""
    import gc

    from ofindex.storage import openfiles

    monkeypatch.setattr(openfiles, "limits", lambda: openfiles.FileLimits(256, 4, 2))
    count = openfiles.OpenFiles()
    released: list[tuple[str, object]] = []

    class Holder:
        def __init__(self, name: str) -> None:
            self.name = name

        def release_held(self, key: object) -> None:
            released.append((self.name, key))

    a, b, gone = Holder("a"), Holder("b"), Holder("gone")
    count.hold(gone, "x")
    for key in ("1", "2"):
        count.hold(a, key)
    del gone
    gc.collect()
    count.hold(b, "pair", 2)  # 5 > 4: the oldest goes (a collected holder's: nothing to do)
    assert released == [] and len(count) == 4
    count.hold(a, "1")  # again: now the newest
    count.hold(b, "3")
    assert released == [("a", "2")] and len(count) == 4
    count.drop(b, "pair")
    count.hold(a, "4")
    assert released == [("a", "2")] and len(count) == 3
    count.drop_all(a)
    assert len(count) == 1
