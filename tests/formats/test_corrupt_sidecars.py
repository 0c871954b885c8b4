"""Corrupt numbers in a sidecar never size a read or an allocation (issue 16's reproducers).

Every read path checks each record's span against the indexed end, which the header keeps
within the data file; the header's own numbers are checked when it is decoded; reads larger
than a few MiB check the file itself first.
"""

import struct

import crc32c
import numpy as np
import pytest

import ofindex
from ofindex import RecordIndexError, SidecarError, _accel
from ofindex.errors import RangeReadError
from ofindex.formats.sidecar import parse_sidecar
from ofindex.formats.sidecar_header import HEADER_SIZE
from tests.kit.helpers import read_bytes, reseal_sidecar, sidecar_of, write_raw

pytestmark = pytest.mark.usefixtures("impl")  # compiled and pure-Python loops

RECORDS = [bytes([i]) * 50 for i in range(10)]
READS = {
    "ds[i]": lambda ds, i: ds[i],
    "ds[[i]]": lambda ds, i: ds[[i]],
    "__getitems__": lambda ds, i: ds.__getitems__([9, i]),
    "slice": lambda ds, i: ds[i : i + 1],
    "iteration": lambda ds, i: list(ds),
    "iter_batches": lambda ds, i: list(ds.iter_batches(3)),
    "record_lengths": lambda ds, i: ds.record_lengths([i]),
}
#: Every way to read records (``record_lengths`` reads none).
RECORD_READS = {**{k: v for k, v in READS.items() if k != "record_lengths"},
                "iter_records": lambda ds, i: list(ds.iter_records(i)),
                "iter_batches(as_buffer)": lambda ds, i: [
                    b.to_list() for b in ds.iter_batches(2, as_buffer=True)]}


@pytest.fixture
def data(tmp_path):
    p = str(tmp_path / "a.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many(RECORDS)
    return p, read_bytes(sidecar_of(p))


def _offsets(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, "<u8", len(RECORDS), HEADER_SIZE).copy()


def _with_offsets(raw: bytes, offsets: np.ndarray, *, reseal: bool = True) -> bytes:
    """The sidecar with other offsets; ``reseal`` rewrites its CRCs over them (a forged or
    buggy sidecar, which only the read paths' span checks can catch), else they are left
    stale (bit rot, a bad copy: the body CRC catches it before any read)."""
    out = bytearray(raw)
    out[HEADER_SIZE : HEADER_SIZE + 8 * len(offsets)] = offsets.astype("<u8").tobytes()
    return reseal_sidecar(bytes(out)) if reseal else bytes(out)


def _with_header_field(raw: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(raw)
    struct.pack_into(fmt, out, at, value)
    struct.pack_into("<I", out, 44, 0)
    struct.pack_into("<I", out, 44, crc32c.crc32c(bytes(out[:HEADER_SIZE])))
    return bytes(out)


@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("read", sorted(READS))
@pytest.mark.parametrize("values", [
    {1: 2**40, 2: 2**63},            # a span running to 2**63 (int64: negative)
    {2: 2**64 - 1},                 # the largest offset
    {2: "flip62"},                  # one high bit flipped
])
def test_corrupt_offsets_are_a_sidecar_error_naming_the_record(data, mmap, read, values):
    p, raw = data
    offsets = _offsets(raw)
    for k, v in values.items():
        offsets[k] = int(offsets[k]) | (1 << 62) if v == "flip62" else v
    write_raw(sidecar_of(p), _with_offsets(raw, offsets))
    ds = ofindex.open(p, mmap=mmap)
    with pytest.raises(SidecarError, match=r"a.tfrecord.ofidx: record [0-2]: .*offsets are corr"):
        READS[read](ds, 2)
    assert ds[9] == RECORDS[9]  # records the corruption does not touch still read
    if read == "iter_batches" and mmap and _accel.native and 1 not in values:
        assert next(ds.iter_batches(1)) == [RECORDS[0]]  # the batch before it (streamed: a
        # block at a time)


@pytest.mark.parametrize("field, at, fmt, value, why", [
    ("indexed end", 32, "<Q", 2**63, "impossible"),
    ("indexed end", 32, "<Q", 600, "complete index ends at 600"),
    ("data size", 24, "<Q", 2**61, "not at the end of the data"),
    ("record count", 16, "<Q", 2**40, "cannot fit"),
    ("seek points", 56, "<Q", 1, "not compressed"),
])
def test_impossible_header_numbers_are_refused_at_open(data, field, at, fmt, value, why):
    p, raw = data
    write_raw(sidecar_of(p), _with_header_field(raw, at, fmt, value))
    with pytest.raises(SidecarError, match=f"corrupt.*{why}"):
        ofindex.open(p, check_stale=False)


@pytest.mark.parametrize("mmap", [True, False])
def test_a_header_lying_about_the_file_never_sizes_a_read(data, mmap):
    """A consistent header claiming a 2 TiB file (CRC recomputed) and an offset at 1 TiB:
    with the staleness check off, reads hit the file's real size before allocating."""
    p, raw = data
    for at in (24, 32, 80):  # data size, indexed end, uncompressed size
        raw = _with_header_field(raw, at, "<Q", 2**41)
    offsets = _offsets(raw)
    offsets[3] = 2**40
    write_raw(sidecar_of(p), _with_offsets(raw, offsets))
    with pytest.raises(ofindex.StaleIndexError, match="size changed"):
        ofindex.open(p, mmap=mmap)
    ds = ofindex.open(p, mmap=mmap, check_stale=False)
    for read in (lambda: ds[2], lambda: ds[9], lambda: ds.__getitems__([2, 9])):
        with pytest.raises(RangeReadError, match="file has 660 bytes"):
            read()
    with pytest.raises(SidecarError, match="record 3"):
        list(ds)


def test_record_numbers_beyond_int64_are_out_of_range(data):
    ds = ofindex.open(data[0])
    for bad in ([2**70], [1, -(2**70)], np.array([2**64 - 1], np.uint64)):
        with pytest.raises(RecordIndexError):
            ds.__getitems__(bad)
        with pytest.raises(RecordIndexError):
            ds[bad]
        with pytest.raises(RecordIndexError):
            ds.record_lengths(bad)
    with pytest.raises(RecordIndexError):
        ds[2**70]


def test_remote_sidecars_are_checked_whole_when_fetched(data):
    # fetched sidecars are in memory anyway: their body CRC is checked at once, so a byte
    # flipped in transit is refused instead of cached
    _, raw = data
    bad = bytearray(raw)
    bad[HEADER_SIZE + 8 * 4 + 1] ^= 0x10
    with pytest.raises(SidecarError, match="fails its CRC"):
        parse_sidecar(bytes(bad), path="s3://b/a.tfrecord.ofidx")
    assert len(parse_sidecar(raw, path="s3://b/a.tfrecord.ofidx")) == len(RECORDS)


def _duplicated(raw: bytes) -> bytes:
    """Offsets ``[o0, o0, o1, o1, …]`` with the body CRC left as it was: what bit rot or a
    bad copy leaves. Each span is a real record whose CRCs pass (``ds[1]`` would be record 0)."""
    offsets = _offsets(raw)
    return _with_offsets(raw, np.repeat(offsets[: len(offsets) // 2], 2), reseal=False)


@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("read", sorted(RECORD_READS))
@pytest.mark.parametrize("index", [1, 3, 5])
def test_duplicated_offsets_are_never_read(data, mmap, read, index):
    """Issue 26, item 2: no read path returns another record through a corrupt sidecar."""
    p, raw = data
    write_raw(sidecar_of(p), _duplicated(raw))
    ds = ofindex.open(p, mmap=mmap)  # opening reads the header only
    assert len(ds) == len(RECORDS)
    with pytest.raises(SidecarError, match=r"a.tfrecord.ofidx: .*fails its CRC.*ofindex build"):
        RECORD_READS[read](ds, index)
    write_raw(sidecar_of(p), raw)  # rebuilt: reads work again once reopened
    assert ofindex.open(p, mmap=mmap)[index] == RECORDS[index]


@pytest.mark.parametrize("read", sorted(RECORD_READS))
def test_duplicated_offsets_over_http(nginx_server, tmp_path, read):
    """The same sidecar served by nginx, read by pages (through the manifest or not) or
    whole (iteration)."""
    import os
    import shutil

    root = os.path.join(nginx_server.root, f"dup-{sorted(RECORD_READS).index(read)}")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    p = os.path.join(root, "a.tfrecord")
    records = [bytes([i % 251]) * 50 for i in range(2000)]  # enough offsets for paged reads
    with ofindex.Writer(p) as w:
        w.write_many(records)
    ofindex.build_index(root)  # writes the manifest: pages are read through it
    raw = read_bytes(sidecar_of(p))
    offsets = np.frombuffer(raw, "<u8", len(records), HEADER_SIZE).copy()
    write_raw(sidecar_of(p), _with_offsets(raw, np.repeat(offsets[:1000], 2), reseal=False))
    base = nginx_server.url + "/" + os.path.basename(root)
    ds = ofindex.open(base + "/")  # through the manifest: pages (runs of offsets checked as
    # they arrive), or whole sidecars for iteration (body CRC checked)
    with pytest.raises(SidecarError, match=r"a.tfrecord.ofidx: (record \d+|.*fails its CRC)"
                                           r".*corrupt.*ofindex build http"):
        RECORD_READS[read](ds, 1001)
    # a single file without the manifest: paged as well (its header pinned at open)
    with pytest.raises(SidecarError, match=r"a.tfrecord.ofidx: (record \d+|.*fails its CRC)"
                                           r".*corrupt.*ofindex build http"):
        RECORD_READS[read](ofindex.open(base + "/a.tfrecord"), 1001)
