"""Sparse seek-point windows (only the bytes the following data copies, found with marker
windows), ISA-L's inflate next to zlib's, the splice that lets an inflater without
``inflatePrime`` start inside a byte, and the process-wide window cache."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

import ofindex
from ofindex.deflate import fast_inflate, windows
from ofindex.deflate.fast_inflate import lead_in_bytes, splice
from ofindex.deflate.windows import PendingWindow
from ofindex.formats.seekpoints import WindowCache
from ofindex.formats.sidecar import open_local_sidecar
from tests.kit.helpers import implementation, need, sidecar_of

WINDOW = 32768


def _tf_gzip(directory, records: list[bytes]) -> str:
    """A GZIP TFRecord file of ``records`` written by TensorFlow."""
    tf = need("tensorflow")
    path = str(directory / "d.tfrecord.gz")
    with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type="GZIP")) as w:
        for r in records:
            w.write(r)
    return path


def _stream(window: bytes, data: bytes) -> bytes:
    """``data`` as raw deflate that may copy from ``window`` (as after a seek point)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15, zdict=window)
    return c.compress(data) + c.flush()


def _inflate(stream: bytes, window: bytes) -> bytes:
    d = zlib.decompressobj(-15, zdict=window) if window else zlib.decompressobj(-15)
    return d.decompress(stream)


def test_sparse_window_keeps_only_copied_bytes(inflater):
    rng = np.random.default_rng(0)
    window = rng.integers(0, 256, WINDOW, dtype=np.uint8).tobytes()
    data = (window[1000:1100] + rng.bytes(3000) + window[20000:20300] + rng.bytes(40000)
            + window[31000:31050])  # the last copy lies past 32 KiB of output: out of reach
    stream = _stream(window, data)
    pending = PendingWindow(0, WINDOW, 0, window, b"")
    pending.feed(stream, data)
    sparse = pending.shortest()
    assert _inflate(stream, sparse) == data
    cut = WINDOW - len(sparse)
    assert 990 <= cut <= 1000  # cut before the first copied byte
    kept = np.flatnonzero(np.frombuffer(sparse, dtype=np.uint8)) + cut
    # copied: [1000, 1100) and [20000, 20300); a few other 3-byte matches at most
    assert len(kept) < 600
    assert set(range(1000, 1100)) | set(range(20000, 20300)) <= set(kept.tolist()) | {
        int(i) for i in np.flatnonzero(np.frombuffer(window, dtype=np.uint8) == 0)}
    assert len(zlib.compress(sparse)) < len(zlib.compress(window)) // 10


def test_nothing_copied_gives_no_window(inflater):
    rng = np.random.default_rng(1)
    window = rng.bytes(WINDOW)
    data = rng.bytes(50000)  # incompressible: stored blocks copy nothing
    stream = _stream(window, data)
    pending = PendingWindow(0, WINDOW, 0, window, b"")
    pending.feed(stream, data)
    assert pending.shortest() == b""


def test_wrong_markers_keep_the_whole_window(inflater, monkeypatch):
    """The sparse window is checked against the real output: when it does not reproduce it
    (here the markers are broken on purpose), the whole window is kept."""
    rng = np.random.default_rng(2)
    window = rng.bytes(WINDOW)
    data = window[5000:6000] + rng.bytes(1000) + window[100:400]
    stream = _stream(window, data)
    zero = bytes(WINDOW)
    monkeypatch.setattr(windows, "_MARKERS", (zero, zero, zero))  # "nothing is copied"
    pending = PendingWindow(0, WINDOW, 0, window, b"")
    pending.feed(stream, data)
    assert pending.shortest() == window


def test_built_index_windows_are_sparse(tmp_path, inflater, monkeypatch):
    """On compressible data the builder's windows are several times smaller than whole ones,
    and every record reads back."""
    rng = np.random.default_rng(3)
    words = [rng.bytes(int(k)).hex().encode() for k in rng.integers(2, 6, size=500)]
    records = [b" ".join(words[j] for j in rng.integers(0, 500, size=int(rng.integers(5, 40))))
               for _ in range(6000)]
    path = _tf_gzip(tmp_path, records)
    ofindex.build_index(path, seek_spacing=64 << 10)
    sparse = open_local_sidecar(sidecar_of(path)).header.windows_bytes
    ds = ofindex.open(path)
    order = np.random.default_rng(4).permutation(len(records))
    assert ds[order] == [records[i] for i in order]
    ds.close()
    monkeypatch.setattr(PendingWindow, "copies_nothing", lambda self: not self.window)
    monkeypatch.setattr(PendingWindow, "sparse", lambda self: self.window)
    ofindex.build_index(path, seek_spacing=64 << 10, resume=False)
    whole = open_local_sidecar(sidecar_of(path)).header.windows_bytes
    assert 0 < sparse < whole / 2


def test_points_need_no_window_where_data_is_incompressible(tmp_path, inflater):
    """Incompressible records copy nothing from before a seek point: such points cost 32
    bytes, so the builder places them every ``dense_spacing`` instead of every spacing, and
    goes back to the spacing where the data compresses again."""
    rng = np.random.default_rng(8)
    noisy = [rng.bytes(int(rng.integers(5_000, 20_000))) for _ in range(300)]  # ~3.7 MB
    words = [rng.bytes(int(k)).hex().encode() for k in rng.integers(2, 6, size=500)]
    text = [b" ".join(words[j] for j in rng.integers(0, 500, size=40)) for _ in range(8000)]
    records = noisy + text
    path = _tf_gzip(tmp_path, records)
    spacing = 256 << 10
    ofindex.build_index(path, seek_spacing=spacing)
    sc = open_local_sidecar(sidecar_of(path))
    points = sc.seek_points
    noisy_end = sum(len(r) + 16 for r in noisy)
    in_noise = points[points["out"] < noisy_end - spacing]
    gaps = np.diff(in_noise["out"].astype(np.int64))
    floor = windows.DENSE_FLOOR
    assert windows.dense_spacing(spacing) == floor >= WINDOW
    assert len(gaps) > 25 and (gaps >= floor).all() and np.median(gaps) < 3 * floor
    assert (in_noise["window_len"][1:] == 0).all()
    later = np.diff(points[points["out"] > noisy_end + spacing]["out"].astype(np.int64))
    assert len(later) and (later >= spacing).all()  # compressible: back to the spacing
    ds = ofindex.open(path)
    order = np.random.default_rng(9).permutation(len(records))
    assert ds[order] == [records[i] for i in order]
    assert [ds[int(i)] for i in order[:300]] == [records[i] for i in order[:300]]
    ds.close()


def _stored_block_at(bits: int, data: bytes) -> bytes:
    """Bytes whose first byte's top ``bits`` bits start a last stored block holding ``data``
    (its low bits are junk, as before a seek point)."""
    stream = [1, 0, 0]  # BFINAL, BTYPE 00: stored
    pos = 8 - bits + len(stream)
    stream += [0] * (-pos % 8)  # to the next byte boundary of the file
    for byte in len(data).to_bytes(2, "little") + (len(data) ^ 0xFFFF).to_bytes(2, "little") + data:
        stream += [(byte >> j) & 1 for j in range(8)]
    bitlist = [1, 0, 1, 1, 0, 1, 0][: 8 - bits] + stream  # junk, then the block
    bitlist += [0] * (-len(bitlist) % 8)
    return bytes(sum(bitlist[i + j] << j for j in range(8)) for i in range(0, len(bitlist), 8))


@pytest.mark.parametrize("bits", range(1, 8))
def test_splice_starts_inside_a_byte_and_keeps_stored_blocks_aligned(bits):
    """A stored block pads to the file's byte boundaries: the lead-in keeps them where they
    were (shifting the bits into alignment, as before, gave wrong bytes here)."""
    src = _stored_block_at(bits, b"hello, world")
    spliced = splice(src, bits)
    assert len(spliced) == len(src) - 1 + lead_in_bytes(bits)
    assert zlib.decompressobj(-15).decompress(spliced) == b"hello, world"
    assert fast_inflate.ISAL.decompressobj(-15).decompress(spliced) == b"hello, world"


@pytest.mark.parametrize("reader", ["compiled", "pure-python"])
def test_stored_blocks_after_primed_points(tmp_path, inflater, reader):
    """Incompressible records between compressible ones: deflate stores them, right after
    primed seek points; every reader gives the records back."""
    rng = np.random.default_rng(6)
    records = [rng.bytes(int(rng.integers(1, 3000))) if i % 3 else b"abc " * int(
        rng.integers(0, 500)) for i in range(1500)]
    path = _tf_gzip(tmp_path, records)
    ofindex.build_index(path, seek_spacing=4 << 10)
    sc = open_local_sidecar(sidecar_of(path))
    assert len(set(sc.seek_points["bits"].tolist()) - {0}) >= 5
    with implementation(reader):
        ds = ofindex.open(path)
        order = np.random.default_rng(7).permutation(len(records))
        assert [ds[int(i)] for i in order[:500]] == [records[i] for i in order[:500]]
        assert ds[order] == [records[i] for i in order]
        ds.close()


def test_isal_and_zlib_read_the_same(tmp_path):
    """A span served by ISA-L equals zlib's, from every kind of seek point."""
    from ofindex.deflate.inflate import InflateFailure, inflate_span

    rng = np.random.default_rng(5)
    records = [rng.bytes(int(rng.integers(0, 50))) * 3 for _ in range(5000)]
    path = _tf_gzip(tmp_path, records)
    ofindex.build_index(path, seek_spacing=16 << 10)
    sc = open_local_sidecar(sidecar_of(path))
    seeks = sc.seeks
    with open(path, "rb") as f:
        raw = f.read()
    assert fast_inflate.ISAL is not None
    kinds = set()
    for k in range(len(seeks)):
        a = seeks.compressed_start(k)
        want = min(40000, seeks.file_size)  # may cross later points
        args = (raw[a:], a, int(seeks.kind[k]), int(seeks.bits[k]), seeks.window(k))
        fast = fast_inflate.fast_inflate(args[0], args[2], args[3], args[4], sc.compression,
                                         want)
        saved, fast_inflate.ISAL = fast_inflate.ISAL, None
        try:
            slow = inflate_span(*args, sc.compression, want)
        except InflateFailure:
            slow = None  # past the end of the stream
        finally:
            fast_inflate.ISAL = saved
        if slow is not None:
            assert fast == slow
            kinds.add(int(seeks.kind[k]))
    assert len(kinds) >= 2


def test_window_cache_stays_within_its_budget():
    cache = WindowCache(budget=100)
    for k in range(10):
        cache.put((1, k), bytes(30))
    assert cache.get((1, 9)) == bytes(30) and cache.get((1, 0)) is None
    assert sum(cache.get((1, k)) is not None for k in range(10)) == 3
    cache.get((1, 7))
    cache.put((2, 0), bytes(30))  # drops the least recently used: (1, 8)
    assert cache.get((1, 7)) is not None and cache.get((1, 8)) is None


def test_isal_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("OFINDEX_INFLATE", "zlib")
    assert fast_inflate._load() is None
    monkeypatch.delenv("OFINDEX_INFLATE")
    assert fast_inflate._load() is not None


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
