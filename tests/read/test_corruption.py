"""Bad data never gives a short index or wrong bytes: each case has its documented error."""

import os
import struct
import warnings

import numpy as np
import pytest

import ofindex
from ofindex import (
    CorruptRecordError,
    FormatDetectionError,
    IndexNotFoundError,
    SidecarError,
    StaleIndexError,
    TruncatedRecordError,
)
from ofindex.formats.sidecar import open_local_sidecar
from tests.kit.helpers import (
    read_bytes,
    ref_ofrecord,
    ref_tfrecord,
    reseal_sidecar,
    sidecar_of,
    write_raw,
)

pytestmark = pytest.mark.usefixtures("impl")  # both implementations of the loops

RECORDS = [bytes([i]) * (10 + i) for i in range(20)]


@pytest.fixture
def tf_bytes():
    return bytearray(ref_tfrecord(RECORDS))


def _offset_of(k, overhead=16):
    return sum(len(r) + overhead for r in RECORDS[:k])


def test_truncated_last_record(tmp_path, tf_bytes):
    p = write_raw(str(tmp_path / "t.tfrecord"), bytes(tf_bytes[:-3]))
    with pytest.raises(TruncatedRecordError) as err:
        ofindex.build_index(p)
    assert err.value.record == 19 and err.value.offset == _offset_of(19)
    assert "t.tfrecord" in str(err.value) and "allow_partial=True" in str(err.value)
    assert "`ofindex build --allow-partial`" in err.value.cli_message()  # the CLI's terms
    assert not os.path.exists(sidecar_of(p))  # no short index was written


def test_truncated_inside_header(tmp_path, tf_bytes):
    p = write_raw(str(tmp_path / "t.tfrecord"), bytes(tf_bytes[: _offset_of(7) + 5]))
    with pytest.raises(TruncatedRecordError, match="record 7"):
        ofindex.build_index(p, format="tfrecord")


def test_allow_partial_indexes_valid_prefix_loudly(tmp_path, tf_bytes):
    p = write_raw(str(tmp_path / "t.tfrecord"), bytes(tf_bytes[:-3]))
    with pytest.warns(UserWarning, match="PARTIAL"):
        (res,) = ofindex.build_index(p, allow_partial=True)
    assert res.partial and res.records == 19 and "truncated" in res.problem
    assert open_local_sidecar(sidecar_of(p)).header.partial
    with pytest.warns(ofindex.PartialIndexWarning, match=r"t\.tfrecord \(19 records indexed\)"):
        ds = ofindex.open(p)
    assert list(ds) == RECORDS[:19]
    assert [s.partial for s in ds.shards] == [True]


def test_partial_index_reported_by_open_once_per_dataset_and_through_manifests(tmp_path,
                                                                              tf_bytes):
    d = tmp_path / "d"
    write_raw(str(d / "part-0"), bytes(tf_bytes))
    write_raw(str(d / "part-1"), bytes(tf_bytes[:-3]))
    with pytest.warns(UserWarning):
        ofindex.build_index(str(d), allow_partial=True)  # writes a manifest too
    for manifest in (True, False):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ds = ofindex.open(str(d), manifest=manifest)
        partial = [w for w in caught if issubclass(w.category, ofindex.PartialIndexWarning)]
        assert len(partial) == 1, [str(w.message) for w in caught]
        assert "1 of 2 shards" in str(partial[0].message)
        assert "part-1 (19 records indexed)" in str(partial[0].message)
        assert [s.partial for s in ds.shards] == [False, True]


def test_bad_length_crc(tmp_path, tf_bytes):
    off = _offset_of(5)
    tf_bytes[off + 8] ^= 0xFF  # the length CRC of record 5
    p = write_raw(str(tmp_path / "c.tfrecord"), bytes(tf_bytes))
    with pytest.raises(CorruptRecordError, match="length CRC mismatch") as err:
        ofindex.build_index(p, format="tfrecord")
    assert err.value.record == 5 and err.value.offset == off
    assert isinstance(err.value, ValueError)


def test_corrupt_length_is_never_allocated(tmp_path, tf_bytes):
    off = _offset_of(3)
    tf_bytes[off : off + 8] = struct.pack("<Q", 2**62)  # huge length, CRC now wrong too
    p = write_raw(str(tmp_path / "c.tfrecord"), bytes(tf_bytes))
    with pytest.raises(CorruptRecordError, match="record 3"):
        ofindex.build_index(p, format="tfrecord")


@pytest.mark.parametrize("length", [-5, 2**62, 10**6])
def test_ofrecord_impossible_length(tmp_path, length):
    data = bytearray(ref_ofrecord(RECORDS))
    off = sum(len(r) + 8 for r in RECORDS[:4])
    data[off : off + 8] = struct.pack("<q", length)
    p = write_raw(str(tmp_path / "o.ofrecord"), bytes(data))
    with pytest.raises(CorruptRecordError) as err:
        ofindex.build_index(p, format="ofrecord")
    assert err.value.record == 4 and err.value.offset == off


def test_bad_data_crc_found_by_verify_and_onread_bytes(tmp_path, tf_bytes):
    off = _offset_of(9)
    tf_bytes[off + 12] ^= 0x01  # first payload byte of record 9
    p = write_raw(str(tmp_path / "d.tfrecord"), bytes(tf_bytes))
    (res,) = ofindex.build_index(p)  # without verify, framing is fine
    assert res.records == 20
    with pytest.raises(CorruptRecordError, match="data CRC mismatch") as err:
        ofindex.build_index(p, verify=True)
    assert err.value.record == 9 and err.value.offset == off
    ds = ofindex.open(p)
    assert ds[8] == RECORDS[8]
    for read in (lambda: ds[9], lambda: ds.__getitems__([1, 9]), lambda: list(ds)):
        with pytest.raises(CorruptRecordError) as err:
            read()
        e = err.value
        assert (e.record, e.offset) == (9, off) and e.stored_crc != e.computed_crc
    assert ofindex.open(p, verify=False)[9] != RECORDS[9]  # the documented opt-out


def test_foreign_file_and_format_detection(tmp_path):
    p = write_raw(str(tmp_path / "x.bin"), np.random.default_rng(1).bytes(1000) + b"\xff" * 8)
    p2 = write_raw(str(tmp_path / "y.bin"), b"\xff" * 100)
    with pytest.raises(FormatDetectionError, match="format="):
        ofindex.build_index(p2)
    with pytest.raises((CorruptRecordError, FormatDetectionError)):
        ofindex.build_index(p, format="tfrecord")


def test_empty_file_takes_siblings_format(tmp_path):
    write_raw(str(tmp_path / "d" / "part-0"), ref_ofrecord(RECORDS))
    write_raw(str(tmp_path / "d" / "part-1"), b"")
    res = ofindex.build_index(str(tmp_path / "d"))
    assert [r.format for r in res] == [ofindex.RecordFormat.OFRECORD] * 2
    write_raw(str(tmp_path / "e" / "only"), b"")  # zero records of either format: no format=
    (r,) = ofindex.build_index(str(tmp_path / "e"))
    assert r.records == 0 and len(ofindex.open(str(tmp_path / "e"))) == 0
    (r,) = ofindex.build_index(str(tmp_path / "e"), format="ofrecord")
    assert r.format is ofindex.RecordFormat.OFRECORD and r.records == 0


def test_missing_stale_foreign_and_truncated_sidecars(tmp_path):
    p = str(tmp_path / "s.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many(RECORDS)
    os.rename(sidecar_of(p), p + ".bak")
    with pytest.raises(IndexNotFoundError, match="ofindex build") as err:
        ofindex.open(p)
    assert isinstance(err.value, FileNotFoundError)
    assert len(ofindex.open(p, build_missing=True)) == 20
    good = read_bytes(sidecar_of(p))

    write_raw(sidecar_of(p), b"not a sidecar at all, just text\n" * 4)
    with pytest.raises(SidecarError, match="not an ofindex sidecar"):
        ofindex.open(p)
    write_raw(sidecar_of(p), good[:-8])
    with pytest.raises(SidecarError, match="truncated"):
        ofindex.open(p)
    bad = bytearray(good)
    bad[20] ^= 1  # inside the header: the header CRC catches it
    write_raw(sidecar_of(p), bytes(bad))
    with pytest.raises(SidecarError, match="header CRC"):
        ofindex.open(p)
    write_raw(sidecar_of(p), good)
    with open(p, "ab") as f:
        f.write(ref_tfrecord([b"appended"]))
    with pytest.raises(StaleIndexError, match=r"ofindex build|build_index") as err:
        ofindex.open(p)
    assert "size changed" in str(err.value)


def test_same_size_rewrite_is_stale_by_content(tmp_path):
    """A new mtime alone (``touch``) leaves the file what it was: its content decides. A
    same-size rewrite with other bytes is stale."""
    p = str(tmp_path / "m.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many(RECORDS)
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with ofindex.open(p) as ds:
        assert ds[19] == RECORDS[19]
    write_raw(p, ref_tfrecord([bytes([255 - i]) * (10 + i) for i in range(20)]))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 2 * 10**9))
    with pytest.raises(StaleIndexError, match="content differs"):
        ofindex.open(p)
    assert len(ofindex.open(p, check_stale=False)) == 20


def test_data_changed_under_same_size_is_caught_onread_bytes(tmp_path):
    p = str(tmp_path / "r.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many(RECORDS)
    data = bytearray(read_bytes(p))
    # swap two records of different size: same file size, different layout
    other = ref_tfrecord([RECORDS[1], RECORDS[0], *RECORDS[2:]])
    assert len(other) == len(data)
    write_raw(p, other)
    ds = ofindex.open(p, check_stale=False)
    with pytest.raises(CorruptRecordError, match="rebuild"):
        ds[0]


@pytest.mark.parametrize("fmt", ["tfrecord", "ofrecord"])
def test_large_records_stream_and_report_corruption(tmp_path, fmt):
    big = [bytes([i]) * (70_000 + 1000 * i) for i in range(6)]  # read one by one when streaming
    p = str(tmp_path / "big")
    with ofindex.Writer(p, format=fmt) as w:
        w.write_many(big)
    ds = ofindex.open(p)
    assert list(ds) == big and ds.__getitems__([5, 0, 5]) == [big[5], big[0], big[5]]
    if fmt == "ofrecord":
        return
    data = bytearray(read_bytes(p))
    off = sum(len(r) + 16 for r in big[:4])
    data[off + 12 + 500] ^= 0x10
    write_raw(p, bytes(data))
    ds = ofindex.open(p, check_stale=False)
    for read in (lambda: list(ds), lambda: ds.__getitems__([1, 4])):
        with pytest.raises(CorruptRecordError, match="data CRC mismatch") as err:
            read()
        assert (err.value.record, err.value.offset) == (4, off)
    assert list(ofindex.open(p, verify=False, check_stale=False))[4] != big[4]
    data[off + 3] ^= 0x01  # now the length itself disagrees with the index
    write_raw(p, bytes(data))
    with pytest.raises(CorruptRecordError, match="rebuild"):
        list(ofindex.open(p, verify=False, check_stale=False))


@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("size", [50, 70_000])  # small records, and large ones read directly
def test_corrupt_offsets_in_a_sidecar_are_a_clear_error(tmp_path, mmap, size):
    p = str(tmp_path / "a.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many([bytes([i]) * size for i in range(10)])
    raw = bytearray(read_bytes(sidecar_of(p)))
    hs = len(raw) - 8 * 10
    offsets = np.frombuffer(raw, "<u8", 10, hs).copy()
    offsets[[3, 4]] = offsets[[4, 3]]  # record 3 now "ends" before it starts
    raw[hs:] = offsets.tobytes()
    write_raw(sidecar_of(p), raw)  # the header (and its CRC) is intact, the body's is stale
    ds = ofindex.open(p, mmap=mmap)
    for read in (lambda: ds[3], lambda: ds.__getitems__([0, 3]), lambda: ds[2:5], lambda: list(ds)):
        with pytest.raises(ofindex.SidecarError, match=r"a.tfrecord.ofidx: .* fails its CRC"):
            read()
    write_raw(sidecar_of(p), reseal_sidecar(bytes(raw)))  # forged: CRCs over the swap
    ds = ofindex.open(p, mmap=mmap)
    for read in (lambda: ds[3], lambda: ds.__getitems__([0, 3]), lambda: ds[2:5], lambda: list(ds)):
        with pytest.raises(ofindex.SidecarError, match=r"record 3: .*offsets are corrupt"):
            read()
    assert ds[0] == bytes([0]) * size  # records the corruption does not touch still read
