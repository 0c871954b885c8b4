"""Incremental indexes (issue 49, item 1): a data file that grew since its sidecar was written
is indexed from where its index ends, and the sidecar grows by appended growth segments
without rewriting what is there (docs/format.md, "Growth segments")."""

import os
import random
import zlib

import numpy as np
import pytest

import ofindex
from ofindex.formats.framing import RecordFormat, encode_record
from ofindex.formats.sidecar import open_local_sidecar
from ofindex.formats.sidecar_growth import MAGIC
from ofindex.index import growth
from ofindex.storage.local import LocalStorage
from tests.kit.helpers import implementation, read_bytes, ref_tfrecord, sidecar_of, write_raw

RNG = random.Random(49)


def _records(n, start=0, size=40):
    return [RNG.randbytes(RNG.randrange(size)) + b"#%d" % (start + i) for i in range(n)]


def _append(path, records, fmt=RecordFormat.TFRECORD):
    with open(path, "ab") as f:
        for r in records:
            f.write(encode_record(r, fmt))


class _Reads:
    """Bytes read from local data files through the storage (every read path of a build)."""

    def __init__(self, monkeypatch, path):
        self.path, self.spans = os.path.abspath(path), []
        for name in ("read", "read_block", "read_into"):  # (read_ranges reads through read)
            monkeypatch.setattr(LocalStorage, name, self._wrap(getattr(LocalStorage, name)))

    def _note(self, path, start, end):
        if os.path.abspath(path) == self.path:
            self.spans.append((start, end))

    def _wrap(self, method):
        def wrapped(storage, path, start, arg):
            got = method(storage, path, start, arg)
            size = arg - start if method.__name__ == "read" else (
                arg if method.__name__ == "read_block" else got)
            self._note(path, start, start + (size if isinstance(size, int) else len(got)))
            return got

        return wrapped

    def before(self, end):
        """Bytes read before ``end``."""
        return sum(min(e, end) - s for s, e in self.spans if s < end)


#: What a build reads of a file whatever its size: its first 16 KiB (its framing), and the
#: regions of two content digests (the indexed part's, and the grown file's), 4 KiB each.
LOOK = 16384 + 6 * 4096


@pytest.mark.usefixtures("impl")
@pytest.mark.parametrize("fmt", ["tfrecord", "ofrecord"])
def test_a_grown_file_is_indexed_from_where_its_index_ends(tmp_path, monkeypatch, fmt):
    framing = RecordFormat.parse(fmt)
    data = tmp_path / "data"
    data.mkdir()
    p = data / "part-0"
    first = _records(20000)
    _append(p, first, framing)
    (built,) = ofindex.build_index(str(data), format=fmt)
    assert not built.appended
    old_size = os.path.getsize(p)
    sidecar_before = read_bytes(sidecar_of(p))
    added = _records(3000, 20000)
    _append(p, added, framing)
    reads = _Reads(monkeypatch, p)
    (grown,) = ofindex.build_index(str(data), format=fmt)
    assert grown.appended and not grown.skipped and grown.records == 23000
    # only the new bytes were scanned: before the old end, a few regions of 4 KiB
    assert old_size > 15 * LOOK and reads.before(old_size) <= LOOK
    assert reads.before(os.path.getsize(p)) >= os.path.getsize(p) - old_size
    # nothing of the sidecar was rewritten: the old bytes, then a growth segment
    after = read_bytes(sidecar_of(p))
    assert after[: len(sidecar_before)] == sidecar_before
    assert MAGIC in after[len(sidecar_before):]
    assert grown.index_bytes == len(after)
    with ofindex.open(str(data)) as ds:  # through the manifest the build rewrote
        assert len(ds) == 23000
        assert ds[:] == first + added
        picks = RNG.sample(range(23000), 300)
        assert ds[picks] == [(first + added)[k] for k in picks]
        assert list(ds.iter_batches(777, as_buffer=True))[-1].to_list()[-1] == added[-1]
    with ofindex.open(str(p)) as ds:  # without it
        assert ds[19999:20001] == [first[-1], added[0]]
    (again,) = ofindex.build_index(str(data), format=fmt)
    assert again.skipped and again.records == 23000


def test_many_growths_then_a_compaction(tmp_path):
    p = tmp_path / "a.tfrecord"
    records = _records(50)
    _append(p, records)
    ofindex.build_index(str(p))
    for k in range(growth.MAX_SEGMENTS + 2):
        more = _records(7, len(records))
        _append(p, more)
        records += more
        (r,) = ofindex.build_index(str(p))
        assert r.appended and r.records == len(records)
        sidecar = open_local_sidecar(sidecar_of(p))
        # segments pile up to the bound, then the sidecar is written whole again
        assert len(sidecar.segments) == (k + 1 if k < growth.MAX_SEGMENTS else
                                         k - growth.MAX_SEGMENTS)
        assert ofindex.open(str(p))[:] == records


def test_a_replaced_file_is_indexed_whole(tmp_path):
    p = tmp_path / "a.tfrecord"
    _append(p, _records(100))
    ofindex.build_index(str(p))
    other = _records(150, 1000)
    write_raw(str(p), ref_tfrecord(other))  # longer, but other first bytes
    (r,) = ofindex.build_index(str(p))
    assert not r.appended and r.records == 150
    assert open_local_sidecar(sidecar_of(p)).segments == []
    assert ofindex.open(str(p))[:] == other
    shorter = other[:10]
    write_raw(str(p), ref_tfrecord(shorter))
    (r,) = ofindex.build_index(str(p))
    assert not r.appended and ofindex.open(str(p))[:] == shorter


def test_force_and_partial_builds_index_whole(tmp_path):
    p = tmp_path / "a.tfrecord"
    _append(p, _records(100))
    ofindex.build_index(str(p))
    _append(p, _records(10, 100))
    (r,) = ofindex.build_index(str(p), resume=False)
    assert not r.appended and r.records == 110
    _append(p, _records(10, 110))
    (r,) = ofindex.build_index(str(p), verify=True)  # a verifying build reads every byte
    assert not r.appended and r.records == 120


@pytest.mark.usefixtures("impl")
@pytest.mark.parametrize("how", ["member", "stream"])
@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_compressed_files_grow(tmp_path, monkeypatch, compression, how):
    """GZIP/ZLIB: a new member (stream) appended after the end, or a stream that goes on
    after a flush (written by a writer still running, indexed with growing=True)."""
    wbits = 31 if compression == "gzip" else 15
    records = [os.urandom(RNG.randrange(200)) + b"#%d" % i for i in range(40000)]
    framed = b"".join(encode_record(r, RecordFormat.TFRECORD) for r in records)
    cut = len(framed) // 2 + 5  # inside a record
    p = tmp_path / "a.tfrecord.gz"
    deflate = zlib.compressobj(6, zlib.DEFLATED, wbits)
    if how == "member":
        head = b"".join(encode_record(r, RecordFormat.TFRECORD) for r in records[:20000])
        write_raw(str(p), deflate.compress(head) + deflate.flush())
        tail = framed[len(head):]
        later = zlib.compressobj(6, zlib.DEFLATED, wbits)
        more = later.compress(tail) + later.flush()
    else:
        write_raw(str(p), deflate.compress(framed[:cut]) + deflate.flush(zlib.Z_SYNC_FLUSH))
        more = deflate.compress(framed[cut:]) + deflate.flush()
    compiled = ofindex._accel.native is not None  # (else seek points at member starts only)
    (first,) = ofindex.build_index(str(p), growing=True, seek_spacing=64 << 10)
    assert first.open_tail == (how == "stream") and (first.seek_points > 3 or not compiled)
    old_size = os.path.getsize(p)
    with open(p, "ab") as f:
        f.write(more)
    reads = _Reads(monkeypatch, p)
    (grown,) = ofindex.build_index(str(p), seek_spacing=64 << 10)
    assert grown.appended and not grown.open_tail and grown.records == 40000
    assert grown.seek_points > first.seek_points or (not compiled and how == "stream")
    if compiled:  # from the last seek point, not the file's start
        assert reads.before(old_size) < old_size // 2
    with ofindex.open(str(p)) as ds:
        assert list(ds) == records
        picks = RNG.sample(range(40000), 200)
        assert ds[picks] == [records[k] for k in picks]


def test_a_record_cut_short_is_not_yet_written(tmp_path):
    p = tmp_path / "a.tfrecord"
    records = _records(1000)
    framed = ref_tfrecord(records)
    write_raw(str(p), framed[:-7])
    with pytest.raises(ofindex.TruncatedRecordError):
        ofindex.build_index(str(p))
    (r,) = ofindex.build_index(str(p), growing=True)
    assert r.open_tail and r.records == 999
    assert ofindex.open(str(p))[:] == records[:999]
    write_raw(str(p), framed)
    (r,) = ofindex.build_index(str(p))
    assert r.appended and not r.open_tail and r.records == 1000
    assert ofindex.open(str(p))[-1] == records[-1]


def test_a_segment_being_appended_is_not_read(tmp_path):
    p = tmp_path / "a.tfrecord"
    records = _records(100)
    _append(p, records)
    ofindex.build_index(str(p))
    base = read_bytes(sidecar_of(p))
    more = _records(10, 100)
    _append(p, more)
    ofindex.build_index(str(p))
    grown = read_bytes(sidecar_of(p))
    for cut in (len(base) + 3, len(base) + 100, len(grown) - 8):  # a segment cut short
        write_raw(sidecar_of(p), grown[:cut])
        sidecar = open_local_sidecar(sidecar_of(p))
        assert len(sidecar) == 100 and sidecar.segments == []
    # the next build drops the unfinished segment and appends a whole one
    (r,) = ofindex.build_index(str(p))
    assert r.appended and ofindex.open(str(p))[:] == records + more
    write_raw(sidecar_of(p), grown + b"garbage!")  # bytes that are no segment: refused
    with pytest.raises(ofindex.SidecarError, match="not a growth segment"):
        ofindex.open(str(p))[0]


def test_a_corrupt_segment_is_refused(tmp_path):
    p = tmp_path / "a.tfrecord"
    _append(p, _records(100))
    ofindex.build_index(str(p))
    base = len(read_bytes(sidecar_of(p)))
    _append(p, _records(10, 100))
    ofindex.build_index(str(p))
    grown = bytearray(read_bytes(sidecar_of(p)))
    body = bytearray(grown)
    body[-3] ^= 1  # an offset of the segment's body
    write_raw(sidecar_of(p), bytes(body))
    with pytest.raises(ofindex.SidecarError, match="fails its CRC"):
        ofindex.open(str(p))[105]
    head = bytearray(grown)
    head[base + 20] ^= 1  # its header's record count
    write_raw(sidecar_of(p), bytes(head))
    with pytest.raises(ofindex.SidecarError, match="header fails its CRC"):
        ofindex.open(str(p))


def test_a_reader_opened_before_the_growth_reads_as_before(tmp_path):
    """A dataset opened through the manifest before a build grew a shard: a reload of the
    sidecar (after close(), in a worker) takes it as the manifest describes it."""
    data = tmp_path / "data"
    data.mkdir()
    records = _records(500)
    _append(data / "part-0", records)
    ofindex.build_index(str(data))
    ds = ofindex.open(str(data), check_stale=False)
    assert ds[499] == records[499]
    _append(data / "part-0", _records(20, 500))
    ofindex.build_index(str(data))
    ds.close()  # the sidecar is reopened: grown, read as of the manifest's state
    assert len(ds) == 500 and ds[:] == records


def test_the_pure_python_build_grows_a_gzip_file_from_a_member_start(tmp_path):
    p = tmp_path / "a.tfrecord.gz"
    records = _records(3000)
    with implementation("pure-python"):
        write_raw(str(p), _gzip(ref_tfrecord(records)))
        ofindex.build_index(str(p))
        more = _records(500, 3000)
        with open(p, "ab") as f:
            f.write(_gzip(ref_tfrecord(more)))
        (r,) = ofindex.build_index(str(p))
        assert r.appended and ofindex.open(str(p))[:] == records + more


def _gzip(raw):
    deflate = zlib.compressobj(6, zlib.DEFLATED, 31)
    return deflate.compress(raw) + deflate.flush()


def test_remote_files_grow(backend, tmp_path):
    """A data file that grows in a bucket or on a web server (an object replaced by a longer
    one with the same first bytes): the build streams only the new bytes, and the sidecar
    (rewritten whole on an object store, which cannot append) keeps its old bytes first."""
    local = tmp_path / "data"
    local.mkdir()
    records = _records(5000)
    _append(local / "part-0.tfrecord", records)
    url = backend.prefix() + "/data"
    index_dir = None if backend.writable else str(tmp_path / "idx")
    backend.upload(str(local), url, sidecars=False)
    ofindex.build_index(url + "/", storage_options=backend.storage_options,
                        index_dir=index_dir)
    more = _records(700, 5000)
    _append(local / "part-0.tfrecord", more)
    backend.put_bytes(url + "/part-0.tfrecord", read_bytes(local / "part-0.tfrecord"))
    (r,) = ofindex.build_index(url + "/", storage_options=backend.storage_options,
                               index_dir=index_dir)
    assert r.appended and r.records == 5700
    for manifest in (True, False):
        with ofindex.open(url + "/", storage_options=backend.storage_options,
                          index_dir=index_dir, manifest=manifest) as ds:
            assert len(ds) == 5700
            picks = RNG.sample(range(5700), 100)
            assert ds[picks] == [(records + more)[k] for k in picks]
            assert list(ds) == records + more


def test_the_sidecar_is_read_by_readers_that_know_no_growth_only_as_far_as_its_body(tmp_path):
    """The base header is left as it was: what it states (and its body CRC) is the index as
    first written, so the bytes a reader of the base alone relies on never change."""
    p = tmp_path / "a.tfrecord"
    _append(p, _records(64))
    ofindex.build_index(str(p))
    before = open_local_sidecar(sidecar_of(p))
    _append(p, _records(64, 64))
    ofindex.build_index(str(p))
    after = open_local_sidecar(sidecar_of(p))
    assert after.base == before.header and len(after) == 128
    assert after.header.body_crc != before.header.body_crc
    assert np.array_equal(after.offsets[:64], before.offsets)


def test_a_remote_file_that_grew_without_its_index_is_stale_at_open(remote_backend, tmp_path):
    """Opening without a manifest fetches the headers: a data file longer than its header
    says is read whole (a sidecar may have grown with it), and still refused at open when
    the sidecar did not grow."""
    local = tmp_path / "data"
    local.mkdir()
    records = _records(300)
    _append(local / "part-0.tfrecord", records)
    url = remote_backend.prefix() + "/data"
    index_dir = None if remote_backend.writable else str(tmp_path / "idx")
    remote_backend.upload(str(local), url, sidecars=False)
    opts = remote_backend.storage_options
    ofindex.build_index(url + "/", storage_options=opts, index_dir=index_dir)
    _append(local / "part-0.tfrecord", _records(5, 300))
    remote_backend.put_bytes(url + "/part-0.tfrecord", read_bytes(local / "part-0.tfrecord"))
    with pytest.raises(ofindex.StaleIndexError, match="size changed"):
        ofindex.open(url + "/part-0.tfrecord", storage_options=opts, index_dir=index_dir)
