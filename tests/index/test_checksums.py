"""OFRecord has no CRC: the sidecar's optional per-payload CRC32C stands in, written by the
Writer (default for OFRecord) and ``build --checksums``, checked by reads with verify=True."""

import os

import crc32c
import pytest

import ofindex
from ofindex import CorruptRecordError
from ofindex.cli.exitcodes import EXIT_ERROR, EXIT_OK
from ofindex.cli.main import main
from ofindex.formats.sidecar import load_sidecar, open_local_sidecar
from ofindex.storage import storage_for
from tests.kit.helpers import read_bytes, ref_ofrecord, ref_tfrecord, sidecar_of, write_raw

RECORDS = [bytes([i]) * (20 + 7 * i) for i in range(12)]
BIG = [bytes([i]) * (70_000 + i) for i in range(4)]  # read one by one (direct reads)
READS = {
    "ds[i]": lambda ds, k: ds[k],
    "batch": lambda ds, k: ds.__getitems__([0, k]),
    "slice": lambda ds, k: ds[k - 1 : k + 1],
    "iteration": lambda ds, k: list(ds),
}


def _flip_payload_byte(path: str, records: list[bytes], k: int) -> int:
    """Change one byte of record k's payload in place (same size); returns its offset."""
    offset = sum(len(r) + 8 for r in records[:k])
    data = bytearray(read_bytes(path))
    data[offset + 8 + len(records[k]) // 2] ^= 0x20
    write_raw(path, bytes(data))
    return offset


def test_the_writer_stores_checksums_for_ofrecord_by_default(tmp_path):
    of, tf = str(tmp_path / "a.ofrecord"), str(tmp_path / "a.tfrecord")
    with ofindex.Writer(of, format="ofrecord") as w:
        w.write_many(RECORDS)
    with ofindex.Writer(tf) as w:
        w.write_many(RECORDS)
    sums = open_local_sidecar(sidecar_of(of)).checksums
    assert sums is not None and sums.tolist() == [crc32c.crc32c(r) for r in RECORDS]
    assert open_local_sidecar(sidecar_of(tf)).checksums is None  # TFRecord has its CRCs
    with ofindex.Writer(tf, checksums=True) as w:
        w.write_many(RECORDS)
    assert open_local_sidecar(sidecar_of(tf)).checksums.tolist() == [crc32c.crc32c(r)
                                                                    for r in RECORDS]
    with ofindex.Writer(of, format="ofrecord", checksums=False) as w:
        w.write_many(RECORDS)
    assert open_local_sidecar(sidecar_of(of)).checksums is None


@pytest.mark.usefixtures("impl")  # compiled and pure-Python loops
@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("read", sorted(READS))
@pytest.mark.parametrize("records", [RECORDS, BIG], ids=["small", "big"])
def test_a_payload_changed_in_place_is_caught_on_every_read_path(tmp_path, mmap, read, records):
    p = str(tmp_path / "c.ofrecord")
    with ofindex.Writer(p, format="ofrecord") as w:
        w.write_many(records)
    k = len(records) - 2
    offset = _flip_payload_byte(p, records, k)
    ds = ofindex.open(p, mmap=mmap, check_stale=False)
    with pytest.raises(CorruptRecordError, match="payload CRC32C mismatch") as err:
        READS[read](ds, k)
    e = err.value
    assert (e.path, e.offset, e.record) == (p, offset, k)
    assert e.stored_crc == crc32c.crc32c(records[k]) and e.computed_crc != e.stored_crc
    assert ds[0] == records[0]
    changed = ofindex.open(p, mmap=mmap, check_stale=False, verify=False)[k]
    assert len(changed) == len(records[k]) and changed != records[k]  # the documented opt-out


def test_build_checksums_locally_and_remotely(tmp_path):
    p = write_raw(str(tmp_path / "d" / "part-0"), ref_ofrecord(RECORDS))
    write_raw(str(tmp_path / "d" / "part-1"), ref_ofrecord(BIG))
    ofindex.build_index(str(tmp_path / "d"), checksums=False)
    assert open_local_sidecar(sidecar_of(p)).checksums is None  # opted out
    ofindex.build_index(str(tmp_path / "d"))  # the default for OFRecord; fresh: kept as is
    assert open_local_sidecar(sidecar_of(p)).checksums is None
    ofindex.build_index(str(tmp_path / "d"), checksums=True)  # asked for: rebuilt with them
    for name, recs in (("part-0", RECORDS), ("part-1", BIG)):
        sums = open_local_sidecar(sidecar_of(str(tmp_path / "d" / name))).checksums
        assert sums.tolist() == [crc32c.crc32c(r) for r in recs]
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe_file("/ck/part-1", ref_ofrecord(BIG))
    ofindex.build_index("memory:///ck/part-1")  # remote: summed in the one pass that reads it
    storage, path = storage_for("memory:///ck/.ofindex/part-1.ofidx")  # a top-level dir: a root
    assert load_sidecar(storage, path).checksums.tolist() == [crc32c.crc32c(r) for r in BIG]
    fs.pipe_file("/ck/part-1", ref_ofrecord([BIG[0], BIG[1][:-1] + b"!", *BIG[2:]]))
    ds = ofindex.open("memory:///ck/part-1", check_stale=False)
    with pytest.raises(CorruptRecordError, match="record 1 at byte offset 70008"):
        list(ds)


@pytest.mark.usefixtures("impl")
def test_shards_with_and_without_checksums_in_one_dataset(tmp_path):
    d = tmp_path / "m"
    with ofindex.Writer(str(d / "part-0"), format="ofrecord") as w:
        w.write_many(RECORDS)
    with ofindex.Writer(str(d / "part-1"), format="ofrecord", checksums=False) as w:
        w.write_many(RECORDS)
    ds = ofindex.open(str(d))
    assert ds.shards_without_checksums() == [str(d / "part-1")]
    n = len(RECORDS)
    assert ds[list(range(2 * n))] == RECORDS * 2
    _flip_payload_byte(str(d / "part-1"), RECORDS, 3)  # no checksum: read back as data
    _flip_payload_byte(str(d / "part-0"), RECORDS, 5)
    ds = ofindex.open(str(d), check_stale=False)
    assert ds[n + 3] != RECORDS[3]
    with pytest.raises(CorruptRecordError, match="part-0: record 5 "):
        ds.__getitems__([n + 3, 5, 0])


def test_cli_build_checksums_and_verify(tmp_path, capsys):
    d = str(tmp_path / "v")
    write_raw(os.path.join(d, "part-0"), ref_ofrecord(RECORDS))
    assert main(["build", d, "--no-checksums", "--no-progress"]) == EXIT_OK
    assert main(["verify", d]) == EXIT_OK
    assert "have no checksums" in capsys.readouterr().out
    assert main(["build", d, "--checksums", "--no-progress"]) == EXIT_OK
    assert main(["verify", d]) == EXIT_OK
    assert "no checksums" not in capsys.readouterr().out
    st = os.stat(os.path.join(d, "part-0"))
    _flip_payload_byte(os.path.join(d, "part-0"), RECORDS, 7)
    os.utime(os.path.join(d, "part-0"), ns=(st.st_atime_ns, st.st_mtime_ns))  # not stale
    assert main(["verify", d]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert "part-0: record 7 " in err and "payload CRC32C mismatch" in err


def test_ofrecord_builds_store_checksums_by_default(tmp_path, capsys):
    """Issue 26, item 5: OFRecord files get payload checksums unless asked not to, on the
    command line and in Python, locally, remotely and compressed."""
    import gzip

    import fsspec

    d = str(tmp_path / "dflt")
    write_raw(os.path.join(d, "part-0"), ref_ofrecord(RECORDS))
    write_raw(os.path.join(d, "part-1.gz"), gzip.compress(ref_ofrecord(BIG), mtime=0))
    assert main(["build", d, "--no-progress"]) == EXIT_OK
    want = {"part-0": RECORDS, "part-1.gz": BIG}
    for name, recs in want.items():
        sums = open_local_sidecar(sidecar_of(os.path.join(d, name))).checksums
        assert sums is not None and sums.tolist() == [crc32c.crc32c(r) for r in recs]
    fs = fsspec.filesystem("memory")
    fs.pipe_file("/dflt/part-1.gz", gzip.compress(ref_ofrecord(BIG), mtime=0))
    ofindex.build_index("memory:///dflt/part-1.gz")
    storage, path = storage_for("memory:///dflt/.ofindex/part-1.gz.ofidx")
    assert load_sidecar(storage, path).checksums.tolist() == [crc32c.crc32c(r) for r in BIG]
    tf = write_raw(str(tmp_path / "t.tfrecord"), ref_tfrecord(RECORDS))
    ofindex.build_index(tf)  # TFRecord: its own CRCs cover its payloads
    assert open_local_sidecar(sidecar_of(tf)).checksums is None
