"""Following (issue 49, item 3): ``ds.refresh()`` takes up appended records in time
proportional to them, ``ds.follow()`` yields records as they are written (a record still
being written is "not yet"), and a file truncated or replaced raises ``NotAppendedError``."""

import os
import pickle
import random
import subprocess
import sys
import threading
import time
import zlib

import pytest

import ofindex
from ofindex.formats.framing import RecordFormat, encode_record
from ofindex.storage.local import LocalStorage
from tests.kit import paths
from tests.kit.helpers import read_bytes, ref_tfrecord, write_raw

RNG = random.Random(4903)
def _batches(ds, picks):
    everything = [r for batch in ds.iter_batches(7) for r in batch]
    return [everything[i] for i in picks]


READS = {
    "ds[i]": lambda ds, picks: [ds[i] for i in picks],
    "ds[list]": lambda ds, picks: ds[picks],
    "__getitems__": lambda ds, picks: ds.__getitems__(picks),
    "slice": lambda ds, picks: [ds[i : i + 1][0] for i in picks],
    "iter_records": lambda ds, picks: [next(iter(ds.iter_records(i, i + 1))) for i in picks],
    "iter_batches": _batches,
}


def _records(n, start=0):
    return [RNG.randbytes(RNG.randrange(80)) + b"#%d" % (start + i) for i in range(n)]


def _framed(records, fmt=RecordFormat.TFRECORD):
    return b"".join(encode_record(r, fmt) for r in records)


@pytest.mark.usefixtures("impl")
@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("read", sorted(READS))
def test_refresh_takes_up_appended_records_on_every_read_path(tmp_path, mmap, read):
    p = str(tmp_path / "a.tfrecord")
    records = _records(400)
    with ofindex.Writer(p) as w:
        w.write_many(records)
    ds = ofindex.open(p, mmap=mmap)
    assert READS[read](ds, [0, 399]) == [records[0], records[399]]  # maps, compiled reader
    more = _records(300, 400)
    with open(p, "ab") as f:
        f.write(_framed(more))
    assert ds.refresh() == 300 and len(ds) == 700
    everything = records + more
    picks = [*sorted(RNG.sample(range(700), 40)), 399, 400, 699]
    assert READS[read](ds, picks) == [everything[k] for k in picks]
    assert ds.refresh() == 0


def test_refresh_reads_only_the_new_bytes(tmp_path, monkeypatch):
    p = str(tmp_path / "a.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many(_records(20000))
    ds = ofindex.open(p)
    ds[0]
    old = os.path.getsize(p)
    with open(p, "ab") as f:
        f.write(_framed(_records(100, 20000)))
    spans = []
    original = LocalStorage.read_into

    def read_into(storage, path, start, buffer):
        spans.append((start, start + len(buffer)))
        return original(storage, path, start, buffer)

    monkeypatch.setattr(LocalStorage, "read_into", read_into)
    original_read = LocalStorage.read

    def read(storage, path, start, end):
        spans.append((start, end))
        return original_read(storage, path, start, end)

    monkeypatch.setattr(LocalStorage, "read", read)
    assert ds.refresh() == 100
    # before the old end: the regions of two content digests (4 KiB each), nothing else
    assert old > 100 * 4096 and sum(min(e, old) - s for s, e in spans if s < old) <= 6 * 4096


def test_a_record_being_written_is_not_yet(tmp_path):
    p = str(tmp_path / "a.tfrecord")
    records = _records(50)
    with ofindex.Writer(p) as w:
        w.write_many(records)
    ds = ofindex.open(p)
    last = encode_record(b"the last record", RecordFormat.TFRECORD)
    for cut in (1, 8, 12, 13, len(last) - 1):  # inside its length, CRC, payload, footer
        with open(p, "ab") as f:
            f.write(last[:cut])
        assert ds.refresh() == 0 and len(ds) == 50
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) - cut)
        ds = ofindex.open(p)
    with open(p, "ab") as f:
        f.write(last[:5])
    assert ds.refresh() == 0
    with open(p, "ab") as f:
        f.write(last[5:])
    assert ds.refresh() == 1 and ds[-1] == b"the last record"


def test_damage_after_the_indexed_end_is_not_taken_for_a_record_being_written(tmp_path):
    p = str(tmp_path / "a.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many(_records(10))
    ds = ofindex.open(p)
    bad = bytearray(encode_record(b"damaged", RecordFormat.TFRECORD))
    bad[9] ^= 1  # its length's CRC: whole, and wrong
    with open(p, "ab") as f:
        f.write(bytes(bad))
    with pytest.raises(ofindex.CorruptRecordError):
        ds.refresh()


def test_a_file_truncated_or_replaced_while_followed_is_refused(tmp_path):
    p = str(tmp_path / "a.tfrecord")
    records = _records(100)
    with ofindex.Writer(p) as w:
        w.write_many(records)
    ds = ofindex.open(p)
    follower = ds.follow(poll_interval=0.01, idle_timeout=0.05)
    assert [next(follower) for _ in range(100)] == records
    other = str(tmp_path / "other")
    write_raw(other, ref_tfrecord(_records(200, 5000)))  # longer, other first bytes
    os.replace(other, p)
    with pytest.raises(ofindex.NotAppendedError, match="replaced"):
        next(follower)
    (rebuilt,) = ofindex.build_index(p)  # another file: indexed whole
    assert not rebuilt.appended
    ds = ofindex.open(p)
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) - 100)
    with pytest.raises(ofindex.NotAppendedError, match="shrank"):
        ds.refresh()
    ofindex.build_index(p, growing=True)  # (cut inside a record)
    ds = ofindex.open(p)
    data = bytearray(read_bytes(p))
    data[100] ^= 1  # the same size, another content (rewritten in place)
    write_raw(p, bytes(data))
    with pytest.raises(ofindex.NotAppendedError, match="content changed"):
        ds.refresh()


def _torn_writer(path, records, flush_every, pause):
    """Write framed records in pieces cut anywhere, flushing after each: followers see
    records half written."""
    framed = _framed(records)
    cuts = sorted(RNG.sample(range(1, len(framed)), len(framed) // flush_every))
    with open(path, "ab", buffering=0) as f:
        at = 0
        for cut in [*cuts, len(framed)]:
            f.write(framed[at:cut])
            at = cut
            time.sleep(pause)


def test_appends_racing_a_follower_thread(tmp_path):
    p = str(tmp_path / "log.tfrecord")
    first = _records(30)
    with ofindex.Writer(p) as w:
        w.write_many(first)
    more = _records(1500, 30)
    done = threading.Event()

    def write():
        try:
            _torn_writer(p, more, 300, 0.0005)
        finally:
            done.set()

    ds = ofindex.open(p)
    thread = threading.Thread(target=write)
    thread.start()
    got = list(ds.follow(poll_interval=0.002, stop=done))
    thread.join()
    assert got == first + more  # each record once, in order, none torn


_PROCESS_WRITER = """
import random, sys, time
from ofindex.formats.framing import RecordFormat, encode_record
rng = random.Random(7)
records = [rng.randbytes(rng.randrange(200)) + b"#%d" % i for i in range({n})]
framed = b"".join(encode_record(r, RecordFormat.TFRECORD) for r in records)
with open({path!r}, "ab", buffering=0) as f:
    at = 0
    while at < len(framed):
        step = rng.randrange(1, 700)
        f.write(framed[at : at + step])
        at += step
        time.sleep(0.0002)
"""


def test_appends_racing_a_follower_in_another_process(tmp_path):
    p = str(tmp_path / "log.tfrecord")
    with ofindex.Writer(p):  # an empty file and its index
        pass
    n = 3000
    script = _PROCESS_WRITER.format(n=n, path=p)
    proc = subprocess.Popen([sys.executable, "-c", script],
                            env={**os.environ, "PYTHONPATH": paths.pythonpath()})
    try:
        ds = ofindex.open(p)
        got = list(ds.follow(poll_interval=0.005, stop=lambda: proc.poll() is not None))
    finally:
        proc.wait(timeout=120)
    rng = random.Random(7)
    expected = [rng.randbytes(rng.randrange(200)) + b"#%d" % i for i in range(n)]
    assert proc.returncode == 0 and got == expected


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_following_a_compressed_file(tmp_path, compression):
    """Members appended by Writer(append=True), and a stream that goes on after sync
    flushes (a writer still running): both followed record by record."""
    p = str(tmp_path / "a.tfrecord.gz")
    first = _records(500)
    with ofindex.Writer(p, compression=compression) as w:
        w.write_many(first)
    ds = ofindex.open(p)
    follower = ds.follow(poll_interval=0.01, idle_timeout=0.05)
    assert [next(follower) for _ in range(500)] == first
    for k in range(3):
        batch = _records(200, 500 + 200 * k)
        with ofindex.Writer(p, append=True) as w:
            w.write_many(batch)
        assert [next(follower) for _ in range(200)] == batch
    q = str(tmp_path / "stream.tfrecord.gz")
    wbits = 31 if compression == "gzip" else 15
    deflate = zlib.compressobj(6, zlib.DEFLATED, wbits)
    records = _records(3000, 10000)
    framed = _framed(records)
    with open(q, "wb") as f:
        f.write(deflate.compress(framed[:1000]) + deflate.flush(zlib.Z_SYNC_FLUSH))
    ofindex.build_index(q, growing=True, compression=compression)
    stream = ofindex.open(q, growing=True)
    follow = stream.follow(poll_interval=0.01, idle_timeout=0.05)
    got = list(follow)
    at = 1000
    while at < len(framed):
        step = RNG.randrange(1, 20000)
        with open(q, "ab") as f:
            f.write(deflate.compress(framed[at : at + step]) + deflate.flush(zlib.Z_SYNC_FLUSH))
        at += step
        got += list(stream.follow(poll_interval=0.01, idle_timeout=0.02, start=len(got)))
    with open(q, "ab") as f:
        f.write(deflate.flush())
    got += list(stream.follow(poll_interval=0.01, idle_timeout=0.02, start=len(got)))
    assert got == records


def test_stop_yields_what_was_written_before(tmp_path):
    p = str(tmp_path / "a.tfrecord")
    with ofindex.Writer(p) as w:
        w.write(b"first")
    ds = ofindex.open(p)
    stop = threading.Event()
    with open(p, "ab") as f:
        f.write(_framed([b"second"]))
    stop.set()  # set after the write: the record is yielded, then following ends
    assert list(ds.follow(poll_interval=10, stop=stop)) == [b"first", b"second"]
    assert list(ds.follow(stop=lambda: True, start=-1)) == [b"second"]
    with pytest.raises(ValueError, match="poll_interval"):
        next(ds.follow(poll_interval=0))


def test_new_shards_join_the_dataset(tmp_path):
    out = str(tmp_path / "ds")
    first = _records(100)
    with ofindex.ShardedWriter(out, shard_records=40) as w:
        w.write_many(first)
    ds = ofindex.open(out)
    follower = ds.follow(poll_interval=0.01, idle_timeout=0.05)
    assert [next(follower) for _ in range(100)] == first
    more = _records(90, 100)
    with ofindex.ShardedWriter(out, shard_records=40, append=True) as w:
        w.write_many(more)
    assert [next(follower) for _ in range(90)] == more
    assert len(ds.shards) == 6 and ds[:] == first + more
    # a shard that grows in the middle: its new records are yielded once too
    with ofindex.Writer(os.path.join(out, "part-00000-of-00003"), append=True) as w:
        w.write(b"late")
    assert list(follower) == [b"late"]
    assert ds[39:41] == [first[39], b"late"]
    os.remove(os.path.join(out, "part-00004"))
    with pytest.raises(ofindex.DataFileNotFoundError, match="part-00004"):
        ds.refresh()


def test_new_files_without_an_index_are_indexed(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    write_raw(str(logs / "a.tfrecord"), ref_tfrecord([b"a0", b"a1"]))
    ds = ofindex.open(str(logs), build_missing=True, growing=True)
    assert ds[:] == [b"a0", b"a1"]
    framed = ref_tfrecord([b"b0", b"b1"])
    write_raw(str(logs / "b.tfrecord"), framed[:-3])  # a new file, its last record unfinished
    assert ds.refresh() == 1 and ds[-1] == b"b0"
    write_raw(str(logs / "b.tfrecord"), framed)
    assert ds.refresh() == 1 and ds[:] == [b"a0", b"a1", b"b0", b"b1"]


def test_opened_as_growing_after_the_file_grew_past_its_index(tmp_path):
    p = str(tmp_path / "a.tfrecord")
    records = _records(60)
    with ofindex.Writer(p) as w:
        w.write_many(records)
    more = _records(5, 60)
    with open(p, "ab") as f:
        f.write(_framed(more))
    with pytest.raises(ofindex.StaleIndexError):
        ofindex.open(p)
    ds = ofindex.open(p, growing=True)
    assert len(ds) == 60 and ds[:] == records  # the indexed part, checked by its digest
    assert ds.refresh() == 5 and ds[-5:] == more
    with open(p, "r+b") as f:
        f.truncate(30)
    with pytest.raises(ofindex.NotAppendedError):
        ofindex.open(p, growing=True)


def test_a_refreshed_dataset_pickles_with_its_records(tmp_path):
    p = str(tmp_path / "a.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many(_records(10))
    ds = ofindex.open(p)
    with open(p, "ab") as f:
        f.write(_framed([b"eleventh"]))
    ds.refresh()
    clone = pickle.loads(pickle.dumps(ds))
    assert len(clone) == 11 and clone[10] == b"eleventh"
    with open(p, "ab") as f:
        f.write(_framed([b"twelfth"]))
    assert clone.refresh() == 1 and clone[11] == b"twelfth"
    ds.close()  # a grown sidecar is held in memory: nothing to reopen
    assert ds[10] == b"eleventh"


def test_following_remote_files(remote_backend, tmp_path):
    """Over HTTP, S3 and GCS a refresh polls the files' sizes; each new version of the object
    (uploaded again, longer) is checked by its first bytes and its new records read."""
    local = tmp_path / "data"
    local.mkdir()
    records = _records(200)
    write_raw(str(local / "log.tfrecord"), _framed(records))
    url = remote_backend.prefix() + "/data"
    opts = remote_backend.storage_options
    index_dir = None if remote_backend.writable else str(tmp_path / "idx")
    remote_backend.upload(str(local), url, sidecars=False)
    ofindex.build_index(url + "/", storage_options=opts, index_dir=index_dir)
    ds = ofindex.open(url + "/", storage_options=opts, index_dir=index_dir)
    follower = ds.follow(poll_interval=0.01, idle_timeout=0.1)
    got = [next(follower) for _ in range(200)]
    for k in range(3):
        batch = _records(50, 200 + 50 * k)
        framed = read_bytes(local / "log.tfrecord") + _framed(batch)
        write_raw(str(local / "log.tfrecord"), framed)
        remote_backend.put_bytes(url + "/log.tfrecord", framed[:-5])  # the last one unfinished
        got += [next(follower) for _ in range(49)]
        remote_backend.put_bytes(url + "/log.tfrecord", framed)
        got.append(next(follower))
        records += batch
    assert got == records
    assert ds[[0, 250, 349]] == [records[0], records[250], records[349]]
    remote_backend.put_bytes(url + "/log.tfrecord", _framed(_records(400, 9000)))
    with pytest.raises(ofindex.NotAppendedError):
        ds.refresh()
