"""Compressed files gone wrong: flipped and truncated bytes give an error naming the file,
the record and the compressed offset, never wrong bytes; detection tells GZIP/ZLIB from
records whose first bytes look alike; the compiled Inflater refuses bad arguments."""

from __future__ import annotations

import gzip
import os
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ofindex
from ofindex import (
    CorruptRecordError,
    FormatDetectionError,
    SidecarError,
    TruncatedRecordError,
    _accel,
)
from ofindex.formats.sidecar import open_local_sidecar
from ofindex.formats.sidecar_header import layout_of
from ofindex.read import compressed
from tests.kit.helpers import (
    IMPLEMENTATIONS,
    implementation,
    read_bytes,
    ref_ofrecord,
    ref_tfrecord,
    reseal_sidecar,
    sidecar_of,
    write_raw,
)


def _records(n: int = 1500, seed: int = 3) -> list[bytes]:
    rng = np.random.default_rng(seed)
    vocab = [rng.bytes(int(k)) for k in rng.integers(1, 10, size=300)]
    return [b"".join(vocab[j] for j in rng.integers(0, 300, size=int(rng.integers(0, 50))))
            for _ in range(n)]


RECORDS = _records()
RAW = ref_tfrecord(RECORDS)
PACKED = {"gzip": gzip.compress(RAW, mtime=0)}
_z = zlib.compressobj(6, zlib.DEFLATED, 15)
PACKED["zlib"] = _z.compress(RAW) + _z.flush()


def _write_keeping_stamp(path: str, data: bytes) -> None:
    """Replace the bytes of an indexed file, same size and mtime: the index cannot tell."""
    st_ = os.stat(path)
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns))


def _check_error(exc: CorruptRecordError, path: str) -> None:
    text = str(exc)
    assert path in text and f"record {exc.record}" in text
    assert exc.record is not None and 0 <= exc.record <= len(RECORDS)
    assert "compressed byte offset" in text


def _read_all_ways(ds) -> list[CorruptRecordError]:
    """Read every record singly, as batches and by iteration: each either is right or
    raises a corrupt-record error (collected)."""
    errors = []
    order = np.random.default_rng(0).permutation(len(ds))
    for i in order[:150]:
        try:
            assert ds[int(i)] == RECORDS[i]
        except CorruptRecordError as exc:
            errors.append(exc)
    for lo in range(0, len(ds), 500):
        try:
            assert ds[order[lo : lo + 500]] == [RECORDS[i] for i in order[lo : lo + 500]]
        except CorruptRecordError as exc:
            errors.append(exc)
    got: list[bytes] = []
    try:
        got.extend(ds)
    except CorruptRecordError as exc:
        errors.append(exc)
    assert got == RECORDS[: len(got)]
    return errors


@settings(max_examples=30, deadline=None)
@given(compression=st.sampled_from(["gzip", "zlib"]), where=st.floats(0, 1),
       xor=st.integers(1, 255), impl=st.sampled_from(IMPLEMENTATIONS))
def test_flipped_byte_gives_an_error_or_the_right_bytes(tmp_path_factory, compression, where,
                                                        xor, impl):
    d = tmp_path_factory.mktemp("flip")
    packed = PACKED[compression]
    path = write_raw(str(d / "f.tfrecord"), packed)
    with implementation(impl):
        ofindex.build_index(path, seek_spacing=16 << 10)
        bad = bytearray(packed)
        at = min(int(where * len(bad)), len(bad) - 1)
        bad[at] ^= xor
        _write_keeping_stamp(path, bytes(bad))
        for exc in _read_all_ways(ofindex.open(path)):
            assert path in str(exc) and f"record {exc.record}" in str(exc)
            assert "compressed byte offset" in str(exc)
        try:  # the builder inflates everything and checks the trailer: it must notice
            ofindex.build_index(path, resume=False)  # the stamp was kept: force a re-scan
        except FormatDetectionError as exc:  # the magic: no longer a compressed file
            assert at < 3 and path in str(exc)
        except CorruptRecordError as exc:
            _check_error(exc, path)
        else:  # only header fields zlib ignores (gzip MTIME/XFL/OS) may change unnoticed
            assert list(ofindex.open(path)) == RECORDS


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
@pytest.mark.parametrize("keep", [0.999, 0.6, 0.2])
def test_truncated_file(tmp_path, compression, keep, impl):
    packed = PACKED[compression]
    path = write_raw(str(tmp_path / "t.tfrecord"), packed[: int(len(packed) * keep)])
    with pytest.raises(TruncatedRecordError) as err:
        ofindex.build_index(path)
    _check_error(err.value, path)
    assert not os.path.exists(sidecar_of(path))
    with pytest.warns(UserWarning, match="PARTIAL"):
        (res,) = ofindex.build_index(path, allow_partial=True, seek_spacing=16 << 10)
    assert res.partial and res.records == err.value.record
    with pytest.warns(ofindex.PartialIndexWarning, match=f"{res.records} records indexed"):
        ds = ofindex.open(path)
    assert list(ds) == RECORDS[: res.records] and ds[::-1] == RECORDS[: res.records][::-1]


def test_corrupt_record_inside_the_stream(tmp_path, impl, monkeypatch):
    """A TFRecord CRC error in the decompressed data names the record and where the stream
    was inflated from; batches inflated on threads report the first bad record too."""
    k = next(i for i in range(700, len(RECORDS)) if len(RECORDS[i]) > 4)
    raw = bytearray(RAW)
    raw[len(ref_tfrecord(RECORDS[:k])) + 14] ^= 1  # a payload byte of record k
    path = write_raw(str(tmp_path / "c.gz"), gzip.compress(bytes(raw)))
    with pytest.raises(CorruptRecordError, match=f"record {k}.*data CRC"):
        ofindex.build_index(path, verify=True)
    ofindex.build_index(path)
    ds = ofindex.open(path)
    with pytest.raises(CorruptRecordError, match=f"record {k}.*compressed byte offset") as err:
        ds[k]
    assert err.value.record == k
    monkeypatch.setattr(compressed, "PARALLEL_INFLATE_BYTES", 0)
    ofindex.build_index(path, seek_spacing=8 << 10)
    ds = ofindex.open(path)
    fine = [i for i in range(len(RECORDS)) if i != k]
    assert ds[fine[::-1]] == [RECORDS[i] for i in fine[::-1]]
    with pytest.raises(CorruptRecordError, match=f"record {k}"):
        ds[list(range(len(RECORDS)))[::-1]]
    assert ofindex.open(path, verify=False)[k] != RECORDS[k]
    with pytest.raises(CorruptRecordError, match=f"record {k}"):
        list(ds)


def test_ofrecord_stream_checked_by_the_gzip_crc(tmp_path):
    """OFRecords have no CRC: a full pass still fails on the member's CRC32."""
    raw = ref_ofrecord(RECORDS)
    good = gzip.compress(raw, compresslevel=0)  # stored blocks: the bytes as they are
    packed = bytearray(good)
    packed[_payload_byte_at(good, raw)] ^= 0x40
    path = write_raw(str(tmp_path / "o.gz"), bytes(packed))
    with pytest.raises(CorruptRecordError, match="incorrect data check"):
        ofindex.build_index(path)
    write_raw(path, good)
    ofindex.build_index(path, checksums=False)
    _write_keeping_stamp(path, bytes(packed))
    with pytest.raises(CorruptRecordError, match=r"compressed byte offset.*incorrect data"):
        list(ofindex.open(path))
    write_raw(path, good)  # with the default checksums, the record itself is named
    ofindex.build_index(path, resume=False)
    _write_keeping_stamp(path, bytes(packed))
    with pytest.raises(CorruptRecordError, match=r"record \d+ at byte offset .*CRC32C mismatch"):
        list(ofindex.open(path))


def _payload_byte_at(packed: bytes, raw: bytes) -> int:
    """A position in the middle of stored-block gzip data whose byte is an OFRecord payload
    byte (not a length), found by inflating raw deflate with no check."""
    starts = set()
    pos = 0
    for r in RECORDS:
        starts.update(range(pos, pos + 8))
        pos += 8 + len(r)
    for p in range(len(packed) // 2, len(packed)):
        bad = bytearray(packed)
        bad[p] ^= 0x40
        try:
            out = zlib.decompressobj(-15).decompress(bytes(bad[10:-8]))
        except zlib.error:
            continue
        diff = [i for i in range(min(len(out), len(raw))) if out[i] != raw[i]]
        if len(out) == len(raw) and len(diff) == 1 and diff[0] not in starts:
            return p
    raise AssertionError("no payload byte found")


def test_corrupt_seek_points(tmp_path):
    path = write_raw(str(tmp_path / "s.gz"), PACKED["gzip"])
    ofindex.build_index(path, seek_spacing=16 << 10)
    sidecar = sidecar_of(path)
    lay = layout_of(open_local_sidecar(sidecar).header)
    blob = bytearray(read_bytes(sidecar))
    blob[lay.seek_points[0] + 17] = 9  # the first point's kind
    write_raw(sidecar, bytes(blob))  # as bit rot leaves it: the body CRC no longer matches
    with pytest.raises(SidecarError, match="fails its CRC"):
        ofindex.open(path)[3]
    write_raw(sidecar, reseal_sidecar(bytes(blob)))  # CRCs rewritten: the points are checked
    with pytest.raises(SidecarError, match="seek points are corrupt"):
        ofindex.open(path)[3]


# -- detection ---------------------------------------------------------------------------

def test_gzip_is_not_taken_for_ofrecord(tmp_path):
    """TensorFlow's GZIP header read as an int64 is a plausible OFRecord length."""
    rng = np.random.default_rng(1)
    big = gzip.compress(ref_tfrecord([rng.bytes(1000) for _ in range(600)]), mtime=0)
    path = write_raw(str(tmp_path / "g"), big)
    assert struct.unpack("<q", big[:8])[0] + 8 <= len(big)
    (res,) = ofindex.build_index(path)
    assert res.compression.name == "GZIP" and res.format.name == "TFRECORD"
    zpath = write_raw(str(tmp_path / "z"), PACKED["zlib"])
    (res,) = ofindex.build_index(zpath)
    assert res.compression.name == "ZLIB" and res.format.name == "TFRECORD"


def test_records_that_start_like_compressed_data(tmp_path):
    gzip_like = b"x" * 0x8B1F  # TFRecord: length bytes 1f 8b 00 …
    zlib_like = b"y" * 0x9C78  # TFRecord: length bytes 78 9c: a valid zlib header
    for name, payload in (("g", gzip_like), ("z", zlib_like)):
        path = write_raw(str(tmp_path / name), ref_tfrecord([payload, b"tail"]))
        (res,) = ofindex.build_index(path)
        assert res.compression.name == "NONE" and res.format.name == "TFRECORD"
        assert ofindex.open(path)[0] == payload
    of = ref_ofrecord([bytes(0x088B1F), b"tail"])  # 1f 8b 08 00 00 00 00 00: a gzip header
    assert of[:4] == b"\x1f\x8b\x08\x00"
    path = write_raw(str(tmp_path / "o"), of)
    (res,) = ofindex.build_index(path)
    assert res.compression.name == "NONE" and res.format.name == "OFRECORD"


def test_compressed_non_record_data(tmp_path):
    path = write_raw(str(tmp_path / "n.gz"), gzip.compress(b"\xff" * 64 + b"not records"))
    with pytest.raises(FormatDetectionError, match="gzip file whose decompressed bytes"):
        ofindex.build_index(path)


def test_empty_compressed_streams(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    write_raw(str(d / "a.gz"), gzip.compress(b""))
    write_raw(str(d / "b.gz"), gzip.compress(ref_tfrecord(RECORDS[:3])))
    results = ofindex.build_index(str(d))
    assert [r.records for r in results] == [0, 3]
    assert all(r.compression.name == "GZIP" for r in results)
    assert ofindex.open(str(d))[:] == RECORDS[:3]


# -- the compiled Inflater ---------------------------------------------------------------

def test_inflater_refuses_bad_arguments():
    native = _accel.native
    assert native is not None, "the compiled module is not built"
    with pytest.raises(ValueError, match="wbits"):
        native.Inflater(9)
    raw = native.Inflater(-15)
    with pytest.raises(ValueError, match="prime"):
        raw.prime(3, 8)
    with pytest.raises(ValueError, match="prime"):
        raw.prime(-1, 0)
    with pytest.raises(ValueError, match="32768"):
        raw.set_dictionary(bytes(40000))
    with pytest.raises(ValueError, match="track"):
        raw.window(1)
    with pytest.raises(TypeError):
        raw.inflate(b"\x00", b"immutable")
    with pytest.raises(ValueError, match="wbits"):
        raw.reset(0)
    z = native.Inflater(15, track=True)
    out = bytearray(100)
    status = z.inflate(b"\x78\x9c\xff\xff\xff", out)[2]
    assert status == -3 and z.message
    z.reset(31)
    packed = gzip.compress(b"hello" * 10)
    assert z.inflate(packed, out)[:3] == (len(packed), 50, 1)
    assert z.window(5) == b"hello"
    with pytest.raises(ValueError):
        z.window(40000)
