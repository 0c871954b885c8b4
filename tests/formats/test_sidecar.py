"""The sidecar file: header round trip, memory-mapped opening, atomic writes."""

import os
import resource

import numpy as np
import pytest

import ofindex
from ofindex.formats.framing import RecordFormat
from ofindex.formats.sidecar import decode_header, encode_sidecar, open_local_sidecar
from ofindex.storage import FileStamp, write_local_atomic
from tests.kit.helpers import read_bytes, ref_offsets, ref_tfrecord, sidecar_of, write_raw
from tests.kit.old_sidecars import version_1_sidecar


def test_header_round_trip():
    offs = np.array([0, 20, 45], dtype=np.uint64)
    header, body = encode_sidecar(RecordFormat.OFRECORD, offs, FileStamp(60, "etag:abc"), 60)
    h = decode_header(header, path="x")
    assert (h.format, h.count, h.stamp, h.indexed_end, h.partial) == (
        RecordFormat.OFRECORD, 3, FileStamp(60, "etag:abc"), 60, False)
    assert len(header) % 8 == 0 and body == offs.astype("<u8").tobytes()


def test_stamp_comparison_by_kind():
    a = FileStamp(10, "mtime_ns:1")
    assert a.mismatch(FileStamp(10, "mtime_ns:1")) is None
    assert "mtime_ns changed" in a.mismatch(FileStamp(10, "mtime_ns:2"))
    assert "size changed" in a.mismatch(FileStamp(11, "mtime_ns:1"))
    # a local index stays valid for the same bytes uploaded to a bucket
    assert a.mismatch(FileStamp(10, "etag:xyz")) is None


def test_opening_a_100m_record_sidecar_reads_only_its_header(tmp_path):
    n = 100_000_000
    header, _ = encode_sidecar(RecordFormat.TFRECORD, np.empty(0, np.uint64), FileStamp(1, ""), 1)
    # patch the count into a real header for n records, then make a sparse 800 MB file
    from ofindex.formats.sidecar import SidecarHeader, encode_header

    header = encode_header(SidecarHeader(RecordFormat.TFRECORD, n, FileStamp(10**12, ""),
                                         10**12))
    path = str(tmp_path / "big.ofidx")
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(len(header) + 8 * n)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sc = open_local_sidecar(path)
    assert len(sc) == n and sc.span(n // 2) == (0, 0)
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kb < 50_000, f"opening grew RSS by {grown_kb} KB"


def test_atomic_write_keeps_old_file_on_crash(tmp_path, monkeypatch):
    path = str(tmp_path / "a.ofidx")
    write_local_atomic(path, [b"old"])

    class Boom(Exception):
        pass

    def parts():
        yield b"new-partial"
        raise Boom

    with pytest.raises(Boom):
        write_local_atomic(path, parts())
    assert read_bytes(path) == b"old"
    assert os.listdir(tmp_path) == ["a.ofidx"]  # no temporary left behind


def test_writer_that_dies_leaves_the_previous_file_and_sidecar(tmp_path):
    p = str(tmp_path / "w.tfrecord")
    with ofindex.Writer(p) as w:
        w.write(b"first version")
    assert os.path.exists(sidecar_of(p))
    with pytest.raises(RuntimeError), ofindex.Writer(p) as w:
        w.write(b"a")
        # written under a hidden temporary name
        assert [n for n in os.listdir(tmp_path) if n.startswith(f".ofindex-{os.getpid()}-")]
        raise RuntimeError("crash while writing")
    assert sorted(os.listdir(tmp_path)) == ["w.tfrecord"]  # no temporary
    assert os.listdir(os.path.dirname(sidecar_of(p))) == ["w.tfrecord.ofidx"]
    assert list(ofindex.open(p)) == [b"first version"]


def test_rewrite_while_a_reader_has_the_file_mapped(tmp_path):
    p = str(tmp_path / "r.tfrecord")
    old = [bytes([k]) * 300 for k in range(50)]
    with ofindex.Writer(p) as w:
        w.write_many(old)
    ds = ofindex.open(p)  # memory-mapped: a truncation in place would kill it with SIGBUS
    assert ds[49] == old[49]
    with ofindex.Writer(p) as w:
        w.write(b"short")  # replaces the file by rename: the old inode stays mapped
    assert ds[49] == old[49] and ds.__getitems__([0, 49]) == [old[0], old[49]]
    assert list(ofindex.open(p)) == [b"short"]


def test_writer_accepts_protobuf_messages(tmp_path):
    from ofindex.proto import example_pb2

    ex = example_pb2.Example()
    ex.features.feature["label"].int64_list.value.append(7)
    p = str(tmp_path / "m.tfrecord")
    with ofindex.Writer(p) as w:
        assert w.write(ex) == 0
        with pytest.raises(TypeError):
            w.write(12)
    assert ofindex.open(p)[0] == ex.SerializeToString()


def test_check_offsets_detects_corruption(tmp_path):
    p = str(tmp_path / "c.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many([b"a", b"bb", b"ccc"])
    sc = open_local_sidecar(sidecar_of(p))
    sc.check_offsets()
    raw = bytearray(read_bytes(sidecar_of(p)))
    raw[-1] ^= 1
    write_raw(sidecar_of(p), raw)
    with pytest.raises(ofindex.SidecarError, match="fails its CRC"):
        open_local_sidecar(sidecar_of(p)).check_offsets()


def test_version_1_sidecars_still_open(tmp_path):
    records = [b"a", b"bb", b"", b"dddd"]
    p = write_raw(str(tmp_path / "old.tfrecord"), ref_tfrecord(records))
    st = os.stat(p)
    offsets = ref_offsets(records, 16)
    write_raw(sidecar_of(p), version_1_sidecar(1, offsets, st.st_size, st.st_size,
                                               f"mtime_ns:{st.st_mtime_ns}"))
    sc = open_local_sidecar(sidecar_of(p))
    assert sc.header.version == 1 and list(sc.offsets) == offsets
    sc.check_offsets()
    with ofindex.open(p) as ds:
        assert list(ds) == records and ds[3] == b"dddd"


def test_version_2_sections_round_trip(tmp_path):
    from ofindex.formats.seekpoints import SEEK_DTYPE, make_table
    from ofindex.formats.sidecar import parse_sidecar
    from ofindex.formats.sidecar_header import HEADER_SIZE, Compression, body_layout

    offs = np.array([0, 30, 70], dtype=np.uint64)
    sums = np.array([1, 2, 0xFFFFFFFF], dtype=np.uint32)
    table = make_table([0, 1000], [0, 333], [0, 5], [1, 0], [0, 11], [0, 0])
    header, body = encode_sidecar(
        RecordFormat.TFRECORD, offs, FileStamp(900, "etag:x"), 1200, checksums=sums,
        compression=Compression.GZIP, seek_points=table, windows=b"W" * 11, spacing=1000,
        uncompressed_size=1200, packed=False)  # what earlier releases wrote (now version 3)
    assert len(header) == HEADER_SIZE
    sc = parse_sidecar(header + body, path="mem")
    h = sc.header
    assert (h.version, h.count, h.checksums, h.compression, h.seek_points, h.spacing,
            h.uncompressed_size) == (2, 3, True, Compression.GZIP, 2, 1000, 1200)
    assert list(sc.offsets) == [0, 30, 70] and list(sc.checksums) == [1, 2, 0xFFFFFFFF]
    assert sc.seek_points.dtype == SEEK_DTYPE and list(sc.seek_points["in"]) == [0, 333]
    assert bytes(sc.windows) == b"W" * 11
    lay = body_layout(HEADER_SIZE, 3, checksums=True, seek_points=2, windows_bytes=11)
    # offsets, then 3 checksums padded to 16 bytes, then 2 x 32-byte points, then the blob
    assert (lay.offsets, lay.checksums, lay.seek_points, lay.windows) == (
        (512, 536), (536, 552), (552, 616), (616, 627))
    assert lay.end == len(header) + len(body)
    sc.check_offsets()


def test_page_of_a_record_follows_from_its_number_alone(tmp_path):
    """Version 2 headers have one size, so offset i lies at HEADER_SIZE + 8 i in any sidecar
    (paged remote reads need no header first)."""
    from ofindex.formats.sidecar_header import HEADER_SIZE

    for fp in ("", "mtime_ns:1", "etag:" + "e" * 300):
        header, body = encode_sidecar(RecordFormat.TFRECORD, np.arange(5, dtype=np.uint64) * 20,
                                      FileStamp(100, fp), 100)
        raw = header + body
        assert len(header) == HEADER_SIZE
        assert int.from_bytes(raw[HEADER_SIZE + 8 * 3 : HEADER_SIZE + 8 * 4], "little") == 60


def test_corrupt_v2_header_fields_are_refused():
    import struct

    import crc32c

    from ofindex.formats.sidecar_header import decode_header as dh

    header, _ = encode_sidecar(RecordFormat.TFRECORD, np.zeros(1, np.uint64), FileStamp(16), 16)
    assert dh(header, path="x").count == 1  # the fields below make it corrupt, nothing else
    for at, value in ((11, 0x80), (48, 9), (11, 4)):  # unknown flag, unknown codec, flag alone
        bad = bytearray(header)
        bad[at] = value
        struct.pack_into("<I", bad, 44, 0)
        struct.pack_into("<I", bad, 44, crc32c.crc32c(bytes(bad)))
        with pytest.raises(ofindex.SidecarError, match="corrupt"):
            dh(bytes(bad), path="x")
