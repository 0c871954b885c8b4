"""Packed record offsets (sidecar version 3, compressed data files only): round trips, a real
build, the version 2 sidecars earlier releases wrote for compressed files, and corruption —
every inconsistency is a SidecarError naming the sidecar, never a crash or wrong offsets."""

from __future__ import annotations

import gzip
import os
import struct
import tracemalloc
import uuid
import zlib

import crc32c
import fsspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ofindex
from ofindex import SidecarError
from ofindex.formats.framing import RecordFormat
from ofindex.formats.packed_offsets import pack_offsets, unpack_offsets
from ofindex.formats.seekpoints import make_table
from ofindex.formats.sidecar import encode_sidecar, open_local_sidecar, parse_sidecar
from ofindex.formats.sidecar_header import (
    HEADER_SIZE,
    MAX_DATA_BYTES,
    VERSION_PACKED,
    Compression,
    SidecarHeader,
    decode_header,
    encode_header,
    layout_of,
)
from ofindex.storage import FileStamp
from tests.kit.helpers import (
    read_bytes,
    ref_offsets,
    ref_tfrecord,
    reseal_sidecar,
    sidecar_of,
    write_raw,
)

#: A compressed file large enough that deflate could inflate it to MAX_DATA_BYTES (a header
#: claiming more than 1032x its file is refused as corrupt).
STAMP = FileStamp(MAX_DATA_BYTES // 1032 + 1, "etag:x")
TABLE = make_table([0], [0], [0], [1], [0], [0])  # one seek point: the start of the stream
REBUILD = r"rebuild it with `ofindex build`"


def _encode(offsets, end: int = MAX_DATA_BYTES, **kw) -> bytes:
    header, body = encode_sidecar(
        RecordFormat.TFRECORD, np.asarray(offsets, dtype=np.uint64), STAMP, end,
        compression=Compression.GZIP, seek_points=TABLE, uncompressed_size=end, **kw)
    return header + body


def _words(rng: np.random.Generator) -> list[bytes]:
    return [bytes(rng.integers(97, 123, size=int(k), dtype=np.uint8))
            for k in rng.integers(2, 9, size=400)]


def make_records(n: int, seed: int) -> list[bytes]:
    """~200-byte records of random lengths 100-300 that compress about 2:1 (words, some noise)."""
    rng = np.random.default_rng(seed)
    words = _words(rng)
    out = []
    for length in rng.integers(100, 301, size=n):
        text = b" ".join(words[j] for j in rng.integers(0, len(words), size=60))
        out.append((rng.bytes(20) + text)[: int(length)])
    return out


# -- round trips -----------------------------------------------------------------------------

offsets_st = st.lists(
    st.one_of(st.integers(0, 2000), st.integers(0, MAX_DATA_BYTES),
              st.integers(MAX_DATA_BYTES - 2**16, MAX_DATA_BYTES)),
    max_size=300, unique=True,
).map(sorted)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("packed")


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(offsets=offsets_st, packed=st.booleans())
def test_offsets_round_trip_exactly(scratch, offsets, packed):
    raw = _encode(offsets, packed=packed)
    path = str(scratch / f"{uuid.uuid4().hex}.ofidx")
    write_raw(path, raw)
    want = np.array(offsets, dtype=np.uint64)
    for sc in (parse_sidecar(raw, path="mem"), open_local_sidecar(path)):
        assert sc.header.version == (3 if packed else 2)
        assert sc.offsets.dtype == np.uint64 and np.array_equal(sc.offsets, want)
        assert not sc.offsets.flags.writeable and len(sc) == len(offsets)
        n = len(offsets)
        for i in {0, 1, n // 2, n - 2, n - 1} & set(range(n)):
            assert sc.span(i) == (offsets[i], offsets[i + 1] if i + 1 < n else MAX_DATA_BYTES)
        assert sc.decoded_bytes == (8 * n if packed else 0)
        sc.check_offsets()
    os.remove(path)


@pytest.mark.parametrize("offsets", [
    [], [0], [2**62], [0, 2**62], [5, 5, 5],  # equal offsets: deltas of 0
    list(range(0, 16 * 100_000, 16)),
])
def test_pack_unpack(offsets):
    blob = pack_offsets(np.array(offsets, dtype=np.uint64))
    got = unpack_offsets(blob, len(offsets), MAX_DATA_BYTES, path="p")
    assert got.dtype == np.uint64 and got.tolist() == offsets
    assert unpack_offsets(memoryview(blob), len(offsets), MAX_DATA_BYTES, path="p").tolist() \
        == offsets


def test_uncompressed_files_keep_version_2(tmp_path):
    p = str(tmp_path / "plain.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many([b"a", b"bb"])
    raw = read_bytes(sidecar_of(p))
    assert struct.unpack_from("<H", raw, 8)[0] == 2 and len(raw) == HEADER_SIZE + 16
    header, body = encode_sidecar(RecordFormat.TFRECORD, np.array([0, 17], np.uint64),
                                  FileStamp(34), 34, packed=True)  # no effect: not compressed
    assert decode_header(header, path="x").version == 2 and len(body) == 16
    with pytest.raises(ValueError, match="compressed data files only"):
        encode_header(SidecarHeader(RecordFormat.TFRECORD, 1, FileStamp(34), 34,
                                    version=VERSION_PACKED, packed_bytes=8))


# -- a real compressed file ------------------------------------------------------------------

N = 20_000


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A gzip TFRecord file of ~200-byte records, indexed by ``build_index``."""
    records = make_records(N, 1)
    path = write_raw(str(tmp_path_factory.mktemp("gz") / "data.tfrecord.gz"),
                     gzip.compress(ref_tfrecord(records), compresslevel=6, mtime=0))
    (res,) = ofindex.build_index(path)
    assert res.compression is Compression.GZIP and res.records == N
    return path, records, read_bytes(sidecar_of(path))


def test_build_writes_packed_offsets(built):
    path, records, raw = built
    sc = open_local_sidecar(sidecar_of(path))
    lay = layout_of(sc.header)
    assert sc.header.version == 3 and lay.end == len(raw)
    assert np.array_equal(sc.offsets, ref_offsets(records, 16))
    # the deltas take 201 values about equally often: log2(201) bits = 0.96 bytes a record is
    # the entropy; zlib measured 1.13 on a million of them. 8 bytes a record unpacked.
    per_record = (lay.offsets[1] - lay.offsets[0]) / N
    assert per_record < 1.5, per_record
    assert sc.header.packed_bytes <= lay.offsets[1] - lay.offsets[0] < sc.header.packed_bytes + 8


def test_every_record_reads_back(built, impl):
    path, records, _ = built
    ds = ofindex.open(path)
    order = np.random.default_rng(2).permutation(N)[:3000]
    assert ds[order] == [records[i] for i in order]
    assert [ds[int(i)] for i in order[:300]] == [records[i] for i in order[:300]]
    assert ds[N - 5 :] == records[N - 5 :] and ds[-1] == records[-1]
    assert list(ds) == records
    assert ds.record_lengths(np.arange(N)).tolist() == [len(r) for r in records]


def test_remote_packed_sidecar_reads_back(built):
    path, records, raw = built
    fs = fsspec.filesystem("memory")
    url = f"memory://packed/{uuid.uuid4().hex[:12]}/data.tfrecord.gz"
    fs.pipe_file(url, read_bytes(path))
    fs.pipe_file(url + ".ofidx", raw)
    ds = ofindex.open(url)
    idx = np.random.default_rng(3).integers(0, N, 300)
    assert ds[idx] == [records[i] for i in idx]


def test_writer_writes_packed_offsets(tmp_path):
    records = make_records(500, 4)
    p = str(tmp_path / "w.tfrecord.zz")
    with ofindex.Writer(p, compression="zlib") as w:
        w.write_many(records)
    sc = open_local_sidecar(sidecar_of(p))
    assert sc.header.version == 3 and sc.header.compression is Compression.ZLIB
    assert list(ofindex.open(p)) == records


def test_version_2_compressed_sidecars_still_open(built, tmp_path):
    """What earlier releases wrote for a compressed file: the same sections, offsets plain."""
    path, records, _ = built
    sc = open_local_sidecar(sidecar_of(path))
    h = sc.header
    header, body = encode_sidecar(
        h.format, sc.offsets, h.stamp, h.indexed_end, h.partial, compression=h.compression,
        seek_points=sc.seek_points, windows=bytes(sc.windows), spacing=h.spacing,
        uncompressed_size=h.uncompressed_size, packed=False)
    old = layout_of(decode_header(header, path="x"))
    assert old.offsets == (HEADER_SIZE, HEADER_SIZE + 8 * N)
    copy = write_raw(str(tmp_path / "data.tfrecord.gz"), read_bytes(path))
    os.utime(copy, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns))
    write_raw(sidecar_of(copy), header + body)
    v2 = open_local_sidecar(sidecar_of(copy))
    assert v2.header.version == 2 and v2.decoded_bytes == 0
    assert np.array_equal(v2.offsets, sc.offsets)
    new = layout_of(sc.header)  # only the offsets section differs
    assert (len(header) + len(body) - new.end
            == 8 * N - (new.offsets[1] - new.offsets[0]) > 6 * N)
    ds = ofindex.open(copy)
    idx = np.random.default_rng(5).integers(0, N, 500)
    assert ds[idx] == [records[i] for i in idx] and list(ds) == records


# -- corruption ------------------------------------------------------------------------------

SMALL = make_records(300, 6)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = write_raw(str(tmp_path_factory.mktemp("small") / "s.gz"),
                     gzip.compress(ref_tfrecord(SMALL), mtime=0))
    ofindex.build_index(path)
    raw = read_bytes(sidecar_of(path))
    assert struct.unpack_from("<H", raw, 8)[0] == 3
    return path, raw


def _q(raw: bytes) -> int:
    return struct.unpack_from("<Q", raw, 88)[0]


def _forge(raw: bytes | bytearray, fields: dict[int, tuple[str, int]] | None = None,
           body: bool = False) -> bytes:
    """Set header fields (``{offset: (format, value)}``), then recompute the header CRC, and
    with ``body`` the body CRC first: only the decoder's own checks are left to catch it."""
    out = bytearray(raw)
    for at, (fmt, value) in (fields or {}).items():
        struct.pack_into(fmt, out, at, value)
    if body:
        struct.pack_into("<I", out, 40, crc32c.crc32c(bytes(out[HEADER_SIZE:])))
    struct.pack_into("<I", out, 44, 0)
    struct.pack_into("<I", out, 44, crc32c.crc32c(bytes(out[:HEADER_SIZE])))
    return bytes(out)


def _with_blob(raw: bytes, blob: bytes) -> bytes:
    """The sidecar with another packed blob (its length in the header, both CRCs recomputed)."""
    end = HEADER_SIZE + (_q(raw) + 7) // 8 * 8
    body = blob + bytes(-len(blob) % 8) + raw[end:]
    return _forge(raw[:HEADER_SIZE] + body, {88: ("<Q", len(blob))}, body=True)


def _refused(path: str, raw: bytes, match: str = "") -> None:
    """Opening ``raw`` as the sidecar at ``path`` — memory-mapped, fetched whole, and through
    a dataset — raises a SidecarError naming it and saying to rebuild."""
    write_raw(sidecar_of(path), raw)
    name = os.path.basename(path) + ".ofidx"
    for opener in (lambda: open_local_sidecar(sidecar_of(path)),
                   lambda: parse_sidecar(raw, path=sidecar_of(path)),
                   lambda: ofindex.open(path, check_stale=False)[0]):
        with pytest.raises(SidecarError, match=f"{name}.*{match}.*rebuild") as info:
            opener()
        assert "ofindex build" in str(info.value)


@pytest.fixture
def victim(small, tmp_path):
    path, raw = small
    copy = write_raw(str(tmp_path / "s.gz"), read_bytes(path))
    return copy, raw


def test_every_flipped_byte_of_the_blob_is_refused(victim):
    """A bit flipped anywhere in the blob or its padding: the zlib stream's checks (its
    header, the deflate codes, the Adler-32 of the output) and the length check refuse it, or
    it changes nothing the stream decodes to (a match copying the zero bytes of the high byte
    planes from another distance, unused bits): then the offsets are exactly right."""
    path, raw = victim
    q = _q(raw)
    want = ref_offsets(SMALL, 16)
    write_raw(sidecar_of(path), raw)
    assert open_local_sidecar(sidecar_of(path)).offsets.tolist() == want
    unused, tried = [], 0
    for at in range(HEADER_SIZE, HEADER_SIZE + (q + 7) // 8 * 8):  # padding included
        for bit in (0x01, 0x10, 0x80):
            tried += 1
            bad = bytearray(raw)
            bad[at] ^= bit
            write_raw(sidecar_of(path), bytes(bad))  # bit rot: the body CRC refuses it first
            with pytest.raises(SidecarError, match="fails its CRC"):
                open_local_sidecar(sidecar_of(path))
            # the CRCs rewritten over the flip: the blob's own checks must still hold
            write_raw(sidecar_of(path), reseal_sidecar(bytes(bad)))
            try:
                sc = open_local_sidecar(sidecar_of(path))
            except SidecarError as exc:
                assert "s.gz.ofidx" in str(exc) and "rebuild it with `ofindex build`" in str(exc)
            else:
                assert sc.offsets.tolist() == want
                unused.append((at - HEADER_SIZE, bit))
            with pytest.raises(SidecarError, match="fails its CRC"):
                parse_sidecar(bytes(bad), path="s3://b/s.gz.ofidx")  # fetched: body CRC first
    assert len(unused) < tried // 20, unused


def test_truncated_sidecars_are_refused(victim):
    path, raw = victim
    for size in (HEADER_SIZE, HEADER_SIZE + 3, HEADER_SIZE + _q(raw) - 1, len(raw) - 1):
        _refused(path, raw[:size], "truncated or corrupt")


@pytest.mark.parametrize("delta, why", [
    (-1, "padding .* not zero"), (-3, "padding .* not zero"), (-8, ""), (0, ""),  # 0: intact
    (1, "bytes after the zlib stream"), (8, ""), (2**40, ""),
])
def test_a_wrong_blob_length_in_the_header_is_refused(victim, delta, why):
    """``why``: the error while the section keeps its padded length; else the file's length
    disagrees with the header."""
    path, raw = victim
    q = _q(raw)
    forged = _forge(raw, {88: ("<Q", q + delta)})
    if delta == 0:
        assert open_local_sidecar(write_raw(sidecar_of(path), forged)).header.version == 3
        return
    if (q + delta + 7) // 8 != (q + 7) // 8:
        # bytes past the body the header promises are what a growth segment would be
        # (issue 49): refused as no such segment; a body cut short, as a truncated sidecar
        why = "not a growth segment" if delta < 0 else "promises .* truncated or corrupt"
    # the body CRC is not what catches it (it covers the same bytes): forge it anyway
    _refused(path, forged, why)
    _refused(path, _forge(forged, body=True), why)


def test_impossible_blob_lengths_are_refused_at_the_header(victim):
    _, raw = victim
    for q in (MAX_DATA_BYTES + 1, 2**64 - 1):
        with pytest.raises(SidecarError, match="packed offsets is impossible"):
            decode_header(_forge(raw, {88: ("<Q", q)}), path="x")


def _shuffled(deltas: list[int]) -> bytes:
    d = np.array(deltas, dtype="<u8")
    return np.ascontiguousarray(d.view(np.uint8).reshape(-1, 8).T).tobytes()


@pytest.mark.parametrize("make, why", [
    (lambda good: zlib.compress(good + bytes(8)), "more than"),          # one record too many
    (lambda good: zlib.compress(good + b"x"), "more than"),              # one byte too many
    (lambda good: zlib.compress(good[:-8]), "not 2400"),                 # one record too few
    (lambda good: zlib.compress(b""), "not 2400"),
    (lambda good: zlib.compress(good)[:-4], "cut short"),                # no Adler-32
    (lambda good: zlib.compress(good)[:-1], "cut short"),
    (lambda good: zlib.compress(good) + b"\x00", "after the zlib stream"),
    (lambda good: zlib.compress(good) + zlib.compress(b""), "after the zlib stream"),
    (lambda good: zlib.compress(good, wbits=-15), "not a zlib stream"),  # raw deflate
    (lambda good: gzip.compress(good), "not a zlib stream"),
    (lambda good: b"", "cut short"),
    (lambda good: bytes(64), "not a zlib stream"),
    (lambda good: zlib.compress(bytearray(good)[:-1] + b"\x01"), "past the indexed end"),
    (lambda good: zlib.compress(_shuffled([0] * 298 + [2**63, 2**63])), "deltas overflow"),
    (lambda good: zlib.compress(_shuffled([16] * 298 + [2**64 - 1, 20])), "deltas overflow"),
])
def test_forged_blobs_are_refused(victim, make, why):
    path, raw = victim
    good = _shuffled(np.diff(ref_offsets(SMALL, 16), prepend=0).tolist())
    assert len(good) == 8 * 300
    assert open_local_sidecar(write_raw(sidecar_of(path), _with_blob(raw, zlib.compress(good)))
                              ).offsets.tolist() == ref_offsets(SMALL, 16)
    _refused(path, _with_blob(raw, make(good)), why)


def test_nonzero_padding_is_refused(victim):
    path, raw = victim
    q = _q(raw)
    if q % 8 == 0:  # no padding: make some
        raw = _with_blob(raw, zlib.compress(
            _shuffled(np.diff(ref_offsets(SMALL, 16), prepend=0).tolist()), 1))
        q = _q(raw)
    assert q % 8
    bad = bytearray(raw)
    bad[HEADER_SIZE + q] = 1
    _refused(path, _forge(bad, body=True), "padding")


def test_a_huge_count_never_sizes_an_allocation(victim):
    """A header claiming 2**50 records (consistent: a 2**62-byte stream) with the real blob,
    and a small blob inflating to far more than a record's 8 bytes: the output is bounded by
    what the blob holds and by the count, never allocated from the count."""
    _, raw = victim
    forged = _forge(raw, {16: ("<Q", 2**50), 24: ("<Q", 2**62 // 1032 + 1), 32: ("<Q", 2**62),
                          80: ("<Q", 2**62)}, body=True)
    bomb = zlib.compress(bytes(64 << 20), 9)  # 64 MiB of zeros in ~64 KiB
    tracemalloc.start()
    try:
        with pytest.raises(SidecarError, match=f"not {8 * 2**50} for"):
            parse_sidecar(forged, path="x")
        with pytest.raises(SidecarError, match="more than 8 bytes"):
            unpack_offsets(bomb, 1, 100, path="x")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


def test_version_3_headers_are_for_compressed_files_only(victim):
    # a consistent header of an uncompressed file but for its version
    raw = encode_header(SidecarHeader(RecordFormat.TFRECORD, 3, FileStamp(100), 100,
                                      compression=Compression.GZIP, version=VERSION_PACKED,
                                      packed_bytes=8))
    assert decode_header(raw, path="x").packed
    plain = _forge(raw, {11: ("<B", raw[11] & ~4), 48: ("<B", 0)})
    with pytest.raises(SidecarError, match="packed offsets for a data file that is not comp"):
        decode_header(plain, path="x")


def test_unsupported_versions_name_the_supported_ones(victim):
    _, raw = victim
    with pytest.raises(SidecarError, match=r"version 4 is not supported.*versions 1, 2 and 3"):
        decode_header(_forge(raw, {8: ("<H", 4)}), path="x")


def test_a_stream_larger_than_deflate_can_make_of_the_file_is_refused(victim):
    """Issue 26, found by the fuzz tier: a forged uncompressed size and indexed end (CRCs
    recomputed) sized the buffer a read inflates into. One compressed byte inflates to at most
    1032 bytes, so a header claiming more than that of its file is refused when decoded."""
    _, raw = victim
    size = struct.unpack_from("<Q", raw, 24)[0]
    at_most = _forge(raw, {32: ("<Q", 1032 * size), 80: ("<Q", 1032 * size)}, body=True)
    assert parse_sidecar(at_most, path="x").header.uncompressed_size == 1032 * size
    forged = _forge(raw, {32: ("<Q", 1032 * size + 1), 80: ("<Q", 1032 * size + 1)}, body=True)
    with pytest.raises(SidecarError, match=r"more than \d+ compressed bytes can inflate to"):
        parse_sidecar(forged, path="x")
