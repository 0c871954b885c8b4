"""Files without an index: ``ofindex.read.sequential.peek`` reads the first records of a file
from its start (checked as a scan checks them), and ``ofindex schema``, ``head`` and ``info`` use it
where the files were never indexed: no index is read or written. The files are framed here
from the format description, so the expected records do not come from the code under test."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import struct
import zlib

import numpy as np
import pytest

from ofindex.cli.main import main
from ofindex.cli.unindexed import spread
from ofindex.encode import encode_example
from ofindex.errors import CorruptRecordError, FormatDetectionError, TruncatedRecordError
from ofindex.formats.framing import RecordFormat
from ofindex.formats.sidecar_header import Compression
from ofindex.read.sequential.peek import PIECE, RecordStream, peek_file
from ofindex.storage.registry import Storages
from tests.kit.helpers import ref_ofrecord as ofrecords
from tests.kit.helpers import ref_tfrecord as tfrecords


def _storage(tmp_path):
    return Storages().for_url(str(tmp_path))[0]


@pytest.mark.parametrize("how", ["none", "gzip", "zlib"])
def test_the_first_records_of_a_file_from_its_start(tmp_path, how):
    records = [bytes([k]) * (k * 97 % 5000) for k in range(40)] + [b"x" * (3 * PIECE + 5)]
    raw = tfrecords(records)
    data = {"none": raw, "gzip": gzip.compress(raw), "zlib": zlib.compress(raw)}[how]
    path = tmp_path / "f.tfrecord"
    path.write_bytes(data)
    got = peek_file(_storage(tmp_path), str(path), 5)
    assert got.records == records[:5] and got.format is RecordFormat.TFRECORD
    assert got.compression is Compression[how.upper()] and got.size == len(data)
    whole = peek_file(_storage(tmp_path), str(path), 1000)  # past the end: all of them
    assert whole.records == records
    assert peek_file(_storage(tmp_path), str(path), 0).records == []


def test_ofrecord_and_empty_files(tmp_path):
    records = [b"", b"abc", b"\x00" * 300]
    (tmp_path / "of").write_bytes(ofrecords(records))
    got = peek_file(_storage(tmp_path), str(tmp_path / "of"), 10)
    assert got.records == records and got.format is RecordFormat.OFRECORD
    (tmp_path / "empty").write_bytes(b"")
    empty = peek_file(_storage(tmp_path), str(tmp_path / "empty"), 10)
    assert empty.records == [] and empty.format is None


def test_damage_is_named_and_nothing_is_allocated_from_a_bad_length(tmp_path):
    raw = bytearray(tfrecords([b"a" * 100, b"b" * 100]))
    raw[12 + 50] ^= 1  # record 0's payload
    (tmp_path / "crc").write_bytes(bytes(raw))
    with pytest.raises(CorruptRecordError, match="record 0 at byte offset 0: data CRC"):
        peek_file(_storage(tmp_path), str(tmp_path / "crc"), 2)
    assert peek_file(_storage(tmp_path), str(tmp_path / "crc"), 2, verify=False).records[1] \
        == b"b" * 100
    # an OFRecord length of 2**39 inside a gzip stream of a few bytes: no CRC guards it, and
    # the stream's size is not known until it is inflated
    forged = gzip.compress(struct.pack("<q", 1 << 39) + b"z" * 64)
    (tmp_path / "forged").write_bytes(forged)
    with pytest.raises(TruncatedRecordError, match="ends inside record 0"):
        peek_file(_storage(tmp_path), str(tmp_path / "forged"), 1, fmt=RecordFormat.OFRECORD)
    (tmp_path / "cut").write_bytes(tfrecords([b"c" * 100])[:60])
    with pytest.raises(TruncatedRecordError, match="claims 100 payload bytes"):
        peek_file(_storage(tmp_path), str(tmp_path / "cut"), 1)


def test_files_are_spread_from_the_first_to_the_last():
    assert spread(5, 16) == [0, 1, 2, 3, 4]
    assert spread(1000, 4) == [0, 333, 666, 999]
    assert spread(0, 16) == []


@pytest.fixture
def given(tmp_path):
    """Four gzip files of Examples, never indexed, in a directory we may not write to."""
    root = tmp_path / "given"
    root.mkdir()
    expected = []
    for shard in range(4):
        records = [encode_example({"image": np.full(3, 10 * shard + k, np.float32),
                                   "label": 10 * shard + k}) for k in range(10)]
        expected += records
        (root / f"part-{shard}.gz").write_bytes(gzip.compress(tfrecords(records)))
    (root / "notes").write_bytes(b"how these files were made\n")  # a stray, as a build sees it
    os.chmod(root, 0o555)
    yield str(root), expected
    os.chmod(root, 0o755)


def test_schema_head_and_info_of_files_never_indexed(given, capsys):
    root, expected = given
    assert main(["schema", root, "--json"]) == 0
    out, err = capsys.readouterr()
    schema = json.loads(out)
    assert schema["kind"] == "example" and schema["records"] is None
    assert schema["sampled"] == 40  # 64 asked for per file of 10: every record
    assert schema["sampled_from"] == "from the start of each of the 4 files"
    image = schema["features"]["image"]
    assert image["min_count"] == image["max_count"] == 3 and image["dtype"] == "float32"
    assert image["present"] == 40
    assert f"4 of 4 shards have no index ({root}/part-0.gz" in err
    assert err.count("WARNING: skipped 1 file that is not TFRecord/OFRecord: ") == 1
    assert f"{root}/notes" in err
    assert f"build them with `ofindex build {root}`. Sampled the first records" in err
    assert main(["schema", root, "--style", "tf", "--sample", "8"]) == 0
    out, _ = capsys.readouterr()
    assert "# example: 8 records sampled by ofindex from the start of each of the 4 files" in out
    assert "'image': tf.io.FixedLenFeature([3], tf.float32)" in out
    assert main(["head", root, "-n", "12"]) == 0
    out, _ = capsys.readouterr()
    assert out.count("--- record") == 12
    assert f"--- record 11 ({len(expected[11])} bytes)" in out
    assert "label  int64    (1,)  [11]" in out  # the second file's second record
    assert main(["info", root]) == 0
    out, _ = capsys.readouterr()
    assert "records: unknown: not indexed" in out and "4 of 4 shards have no index" in out
    assert "shards:  4\n" in out and "notes" not in out
    assert "compression: gzip (first file)" in out and "format:  tfrecord (first file)" in out
    assert main(["info", root, "--json", "--schema", "4"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["records"] is None and len(info["shards"]) == 4
    assert info["schema"]["sampled"] == 4 and f"`ofindex build {root}`" in info["index"]
    assert sorted(os.listdir(os.path.dirname(root))) == ["given"]  # nothing written


def test_a_damaged_file_without_an_index_is_one_line_and_exit_1(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    raw = bytearray(tfrecords([b"a" * 100]))
    raw[3] ^= 1  # the length: its CRC no longer matches
    (tmp_path / "d" / "f.tfrecord").write_bytes(bytes(raw))
    assert main(["head", str(tmp_path / "d"), "--format", "tfrecord"]) == 1
    err = capsys.readouterr().err
    assert "f.tfrecord: record 0 at byte offset 0: length CRC mismatch" in err
    assert "Traceback" not in err


# -- converting files that have no index -------------------------------------------------------
def _source(root, records_per_file=(5, 0, 7)):
    """Plain and gzip TFRecord files never indexed, and a stray beside them."""
    root.mkdir()
    expected = []
    for k, n in enumerate(records_per_file):
        records = [f"file {k} record {j}".encode() * (j + 1) for j in range(n)]
        expected += records
        data = tfrecords(records)
        (root / f"part-{k}").write_bytes(gzip.compress(data) if k % 2 else data)
    (root / "README.md").write_text("how these files were made\n")
    return expected


def test_converting_local_files_without_an_index_writes_nothing_beside_them(
        tmp_path, monkeypatch):
    import tempfile

    import ofindex

    expected = _source(tmp_path / "src")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with pytest.warns(ofindex.SkippedFilesWarning, match="README.md"):
        ofindex.convert(str(tmp_path / "src"), tmp_path / "out", shard_records=5)
    with ofindex.open(str(tmp_path / "out")) as ds:
        assert ds[:] == expected and len(ds.shards) == 3
    assert sorted(os.listdir(tmp_path)) == ["out", "out.ofindex", "src", "tmp"]
    assert os.listdir(scratch) == []  # the source's scratch index is gone


def test_converting_remote_files_without_an_index_reads_them_once(nginx_server, tmp_path):
    import uuid

    import ofindex

    name = uuid.uuid4().hex[:8]
    from pathlib import Path

    expected = _source(Path(nginx_server.root) / name)
    url = f"{nginx_server.url}/{name}/"
    with pytest.warns(ofindex.SkippedFilesWarning, match="README.md"):
        summary = ofindex.convert(url, tmp_path / "out", shard_records=4)
    assert summary.records == len(expected)
    with ofindex.open(str(tmp_path / "out")) as ds:
        assert ds[:] == expected and ds.format is RecordFormat.TFRECORD
    assert sorted(os.listdir(nginx_server.root + "/" + name)) == [
        "README.md", "part-0", "part-1", "part-2"]
    assert not os.path.exists(nginx_server.root + f"/{name}.ofindex")
    (Path(nginx_server.root) / name / "part-3").write_bytes(ofrecords([b"x"]))
    with pytest.raises(FormatDetectionError, match="part-3 holds OFRECORD records but "):
        ofindex.convert(url, tmp_path / "out2")


@pytest.mark.parametrize("seed", range(4))
def test_damaged_bytes_give_the_records_before_them_or_an_error(tmp_path, seed):
    """Bytes changed, cut or added anywhere (plain and gzip): every record read is the one
    written at its place (TFRecord's CRCs), or an OfindexError says where it breaks; nothing
    hangs or allocates from a forged length."""
    import random

    from ofindex.errors import OfindexError

    rng = random.Random(seed)
    records = [rng.randbytes(rng.choice([0, 1, 7, 100, 3000])) for _ in range(30)]
    good = tfrecords(records)
    for case in range(60):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data))
            how = rng.random()
            if how < 0.6:
                data[at] = rng.randrange(256)
            elif how < 0.8:
                del data[at:at + rng.randint(1, 40)]
            else:
                data[at:at] = rng.randbytes(rng.randint(1, 40))
        blob = gzip.compress(bytes(data)) if case % 2 else bytes(data)
        if case % 4 == 3:  # damage the compressed bytes themselves
            blob = bytearray(blob)
            blob[rng.randrange(10, len(blob))] ^= 1 << rng.randrange(8)
        path = tmp_path / f"c{case}"
        path.write_bytes(bytes(blob))
        got: list[bytes] = []
        with contextlib.suppress(OfindexError):  # the records before the error are kept
            got.extend(RecordStream(_storage(tmp_path), str(path),
                                    fmt=RecordFormat.TFRECORD).records())
        assert got == records[: len(got)], (seed, case)


def test_an_empty_first_file_does_not_decide_the_framing(nginx_server, tmp_path):
    import uuid
    from pathlib import Path

    import ofindex

    root = Path(nginx_server.root) / uuid.uuid4().hex[:8]
    root.mkdir()
    (root / "part-0").write_bytes(b"")
    (root / "part-1").write_bytes(ofrecords([b"a", b"bb"]))
    (root / "part-2").write_bytes(gzip.compress(ofrecords([b"ccc"])))
    ofindex.convert(f"{nginx_server.url}/{root.name}/", tmp_path / "out", format="ofrecord")
    with ofindex.open(str(tmp_path / "out")) as ds:
        assert ds[:] == [b"a", b"bb", b"ccc"] and ds.format is RecordFormat.OFRECORD
