"""GZIP and ZLIB TFRecord files: written by TensorFlow and read by index, written by ofindex
and read by TensorFlow, locally and from the storage servers, in both implementations."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import ofindex
from ofindex import SidecarError
from ofindex.formats.seekpoints import SeekKind
from ofindex.formats.sidecar import open_local_sidecar
from ofindex.formats.sidecar_header import Compression
from tests.kit import paths
from tests.kit.helpers import (
    implementation,
    need,
    ref_ofrecord,
    ref_tfrecord,
    sidecar_of,
    write_raw,
)

tf = need("tensorflow")

KINDS = ["GZIP", "ZLIB"]
SPACING = 8 << 10  # small: many seek points in a small file


def make_records(n: int, seed: int) -> list[bytes]:
    """Payloads of varied sizes (empty ones included) that compress about 2:1."""
    rng = np.random.default_rng(seed)
    words = [bytes(rng.integers(97, 123, size=int(k), dtype=np.uint8))
             for k in rng.integers(2, 9, size=300)]
    out = []
    for i in range(n):
        k = int(rng.integers(0, 40)) if i % 11 else 0
        noise = rng.bytes(int(rng.integers(0, 30)))
        out.append(noise + b" ".join(words[j] for j in rng.integers(0, len(words), size=k)))
    return out


RECORDS = make_records(2500, 0)


def tf_write(path: str, records: list[bytes], kind: str) -> str:
    with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type=kind)) as w:
        for r in records:
            w.write(r)
    return path


def tf_read(path: str, kind: str) -> list[bytes]:
    return [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type=kind)]


@pytest.fixture(scope="module")
def tf_files(tmp_path_factory):
    """A GZIP and a ZLIB file written by TensorFlow, with what TensorFlow reads back."""
    d = tmp_path_factory.mktemp("tf")
    out = {}
    for kind in KINDS:
        path = tf_write(str(d / f"data-{kind}.tfrecord"), RECORDS, kind)
        out[kind] = (path, tf_read(path, kind))
    return out


def _fresh_copy(src: str, directory) -> str:
    dst = os.path.join(str(directory), os.path.basename(src))
    shutil.copy(src, dst)
    return dst


@pytest.mark.parametrize("kind", KINDS)
def test_tf_files_read_by_index(tf_files, tmp_path, kind, impl, inflater):
    path, expected = tf_files[kind]
    assert expected == RECORDS
    path = _fresh_copy(path, tmp_path)
    (res,) = ofindex.build_index(path, seek_spacing=SPACING)
    assert res.compression is Compression[kind] and res.records == len(RECORDS)
    assert res.uncompressed_size == sum(len(r) + 16 for r in RECORDS)
    assert 0 < res.index_fraction == res.index_bytes / os.path.getsize(path)
    sc = open_local_sidecar(sidecar_of(path))
    if impl == "compiled":  # deflate block boundaries, with windows
        assert (sc.seek_points["kind"] == SeekKind.PRIMED).sum() >= 3
    ds = ofindex.open(path)
    order = np.random.default_rng(1).permutation(len(ds))
    assert [ds[int(i)] for i in order[:400]] == [expected[i] for i in order[:400]]
    assert ds[order] == [expected[i] for i in order]
    assert ds.__getitems__(order[:256].tolist()) == [expected[i] for i in order[:256]]
    assert ds[300:900] == expected[300:900] and ds[-5:] == expected[-5:]
    assert list(ds) == expected
    assert list(ds.iter_records(1234, 2001, block_bytes=4096)) == expected[1234:2001]


def test_pread_and_decode(tf_files, tmp_path):
    """Without memory maps (``mmap=False``) and with ``decode=``, as for plain files."""
    path = _fresh_copy(tf_files["GZIP"][0], tmp_path)
    ofindex.build_index(path, seek_spacing=SPACING)
    ds = ofindex.open(path, mmap=False, decode=len)
    idx = np.random.default_rng(7).permutation(len(ds))[:400]
    assert ds[idx] == [len(RECORDS[i]) for i in idx] and ds[int(idx[0])] == len(RECORDS[idx[0]])
    assert list(ds) == [len(r) for r in RECORDS]
    assert ds.compressions == [Compression.GZIP]
    assert list(ds.record_lengths(idx)) == [len(RECORDS[i]) for i in idx]


@pytest.mark.parametrize("kind", KINDS)
def test_reads_across_implementations(tf_files, tmp_path, kind):
    """A sidecar built with the compiled inflater (primed points) serves pure-Python reads,
    and one built without it (member starts only) serves compiled reads."""
    path, expected = tf_files[kind]
    path = _fresh_copy(path, tmp_path)
    for build, read in (("compiled", "pure-python"), ("pure-python", "compiled")):
        with implementation(build):
            ofindex.build_index(path, seek_spacing=SPACING)
        with implementation(read):
            ds = ofindex.open(path)
            idx = np.random.default_rng(2).permutation(len(ds))[:300]
            assert ds[idx] == [expected[i] for i in idx]
            assert list(ds.iter_records(1000)) == expected[1000:]


@pytest.mark.parametrize("kind", KINDS)
def test_tf_reads_what_our_writer_wrote(tmp_path, kind, impl):
    path = str(tmp_path / "ours.tfrecord")
    with ofindex.Writer(path, compression=kind.lower(), seek_spacing=SPACING) as w:
        w.write_many(RECORDS)
    assert tf_read(path, kind) == RECORDS
    written = open_local_sidecar(sidecar_of(path))
    points = written.seek_points
    assert len(points) > 5 and set(points["kind"][1:].tolist()) == {SeekKind.ALIGNED}
    assert written.header.windows_bytes == 0  # full flushes: no window needed
    ds = ofindex.open(path)
    idx = np.random.default_rng(3).permutation(len(ds))
    assert ds[idx] == [RECORDS[i] for i in idx] and list(ds) == RECORDS
    offsets = np.array(written.offsets)
    os.remove(sidecar_of(path))
    ofindex.build_index(path, seek_spacing=SPACING)
    assert np.array_equal(open_local_sidecar(sidecar_of(path)).offsets, offsets)


def test_multi_member_gzip(tf_files, tmp_path, impl, inflater):
    """Concatenated gzip files (``cat a.gz b.gz``) are one stream of records, as for tf.data."""
    path, _ = tf_files["GZIP"]
    first = tf_write(str(tmp_path / "part.gz"), RECORDS[:700], "GZIP")
    multi = str(tmp_path / "multi.tfrecord.gz")
    with open(multi, "wb") as f:
        for p in (first, path, first):
            with open(p, "rb") as g:
                f.write(g.read())
    expected = tf_read(multi, "GZIP")
    assert expected == RECORDS[:700] + RECORDS + RECORDS[:700]
    ofindex.build_index(multi, seek_spacing=SPACING)
    sc = open_local_sidecar(sidecar_of(multi))
    assert (sc.seek_points["kind"] == SeekKind.GZIP_MEMBER).sum() >= 2
    ds = ofindex.open(multi)
    idx = np.random.default_rng(4).permutation(len(ds))
    assert ds[idx] == [expected[i] for i in idx]
    assert [ds[int(i)] for i in idx[:300]] == [expected[i] for i in idx[:300]]
    assert list(ds) == expected


def test_ofrecord_inside_gzip(tmp_path, impl):
    """OFRecord framing in a compressed stream; a full pass checks the gzip CRC32."""
    raw = ref_ofrecord(RECORDS)
    path = write_raw(str(tmp_path / "of.gz"), gzip.compress(raw, mtime=0))
    (res,) = ofindex.build_index(path, seek_spacing=SPACING)
    assert res.format is ofindex.RecordFormat.OFRECORD and res.compression is Compression.GZIP
    ds = ofindex.open(path)
    idx = np.random.default_rng(5).permutation(len(ds))
    assert ds[idx] == [RECORDS[i] for i in idx] and list(ds) == RECORDS
    w = str(tmp_path / "w.gz")
    with ofindex.Writer(w, "ofrecord", compression="gzip", seek_spacing=SPACING) as out:
        out.write_many(RECORDS)
    with open(w, "rb") as f:
        assert gzip.decompress(f.read()) == raw


def _uploaded(path: str, remote_backend, tmp_path) -> str:
    """A directory holding a copy of ``path``, indexed (a manifest with compression) and
    uploaded to ``remote_backend``; returns its URL."""
    local = tmp_path / "d"
    local.mkdir()
    _fresh_copy(path, local)
    ofindex.build_index(str(local), seek_spacing=SPACING)
    url = remote_backend.prefix()
    remote_backend.upload(str(local), url)
    return url


def _requests_of_singles(ds, expected, *, seed: int, batch: int, singles: int) -> int:
    """Check a random batch and then ``singles`` records read one by one; returns the
    requests the single records took."""
    idx = np.random.default_rng(seed).permutation(len(ds))
    assert ds[idx[:batch]] == [expected[i] for i in idx[:batch]]
    before = ds._table.storage.requests
    assert [ds[int(i)] for i in idx[:singles]] == [expected[i] for i in idx[:singles]]
    return int(ds._table.storage.requests - before)


@pytest.mark.parametrize("kind", KINDS)
def test_remote_reads(tf_files, remote_backend, tmp_path, kind):
    """Through S3 (moto), GCS (fake-gcs-server) and HTTP (nginx): batches, single records
    (one range request each, from the record's seek point), iteration."""
    path, expected = tf_files[kind]
    url = _uploaded(path, remote_backend, tmp_path)
    ds = ofindex.open(url, storage_options=remote_backend.storage_options)
    assert _requests_of_singles(ds, expected, seed=6, batch=500, singles=20) == 20
    assert ds[100:400] == expected[100:400]
    assert list(ds) == expected


def test_remote_reads_fetch_the_rest_when_the_estimate_falls_short(tf_files, remote_backend,
                                                                  tmp_path, monkeypatch):
    """Remote reads fetch up to an estimate of where a record's compressed data ends; when it
    ends later, the rest of the span is fetched and the records still come out right."""
    from ofindex.formats.seekpoints import SeekTable

    path, expected = tf_files["GZIP"]
    url = _uploaded(path, remote_backend, tmp_path)
    monkeypatch.setattr(SeekTable, "estimated_ends", lambda self, ks, out_ends: np.minimum(
        self.compressed_starts(ks) + 40, self.compressed_ends(out_ends)))
    ds = ofindex.open(url, storage_options=remote_backend.storage_options)
    # each single record: the estimate, then the rest
    assert _requests_of_singles(ds, expected, seed=8, batch=300, singles=10) == 20


def test_estimated_end_margins():
    """Between points whose data compresses, the estimate adds a quarter of the span and
    16 KiB; between points whose data hardly compresses (stored blocks), 2% and 1 KiB; never
    past the next point."""
    from ofindex.formats.seekpoints import SeekKind, SeekTable, make_table

    out = [0, 100_000, 200_000, 300_000]
    in_ = [0, 50_000, 149_500, 249_000]  # 2:1, then 99.5% as many bytes in as out
    kinds = [int(SeekKind.GZIP_MEMBER)] + [int(SeekKind.ALIGNED)] * 3
    table = make_table(out, in_, [0] * 4, kinds, [0] * 4, [0] * 4)
    seeks = SeekTable(table, b"", 400_000, 400_000, "x.ofidx")
    at = 25_000  # out 50,000 lies halfway between points 0 and 1
    assert seeks.estimated_end(0, 50_000) == at + at // 4 + (16 << 10)
    assert seeks.estimated_end(0, 99_000) == 50_000  # capped at point 1
    at = 50_000 + 99_500 // 2  # out 150,000, between points 1 and 2
    assert seeks.estimated_end(1, 150_000) == at + 100_000 // 50 + 1024
    assert seeks.estimated_end(1, 199_900) == 149_500
    # many at once, as batches ask
    got = seeks.estimated_ends(np.array([0, 0, 1, 1]), np.array([50_000, 99_000, 150_000,
                                                                  199_900]))
    assert got.tolist() == [seeks.estimated_end(0, 50_000), 50_000,
                            seeks.estimated_end(1, 150_000), 149_500]


def test_estimated_end_with_fetch_bounds():
    """A point's fetch bound, where the builder stored one, replaces the margin when it is
    smaller: interpolation plus the bound plus FETCH_SLACK; 0 (sidecars before bounds, writer
    points) keeps the margin."""
    from ofindex.formats.seekpoints import (
        FETCH_SLACK,
        FETCH_UNIT,
        SeekKind,
        SeekTable,
        fetch_field,
        make_table,
    )

    out = [0, 100_000, 200_000]
    in_ = [0, 50_000, 100_000]
    kinds = [int(SeekKind.GZIP_MEMBER)] + [int(SeekKind.ALIGNED)] * 2
    table = make_table(out, in_, [0] * 3, kinds, [0] * 3, [0] * 3,
                       [fetch_field(1000), 0, fetch_field(10 ** 9)])
    seeks = SeekTable(table, b"", 300_000, 300_000, "x.ofidx")
    assert fetch_field(1000) == 1 + 16 and fetch_field(0) == 1 and fetch_field(None) == 0
    assert fetch_field(10 ** 9) == 0  # too large to store: no bound
    at = 25_000
    assert seeks.estimated_end(0, 50_000) == at + 16 * FETCH_UNIT + FETCH_SLACK
    at = 75_000  # point 1 has no bound: the margin
    assert seeks.estimated_end(1, 150_000) == at + (at - 50_000) // 4 + (16 << 10)


def test_writer_to_a_bucket(bucket_backend):
    url = bucket_backend.prefix() + "/w.tfrecord.gz"
    opts = bucket_backend.storage_options
    with ofindex.Writer(url, compression="gzip", seek_spacing=SPACING,
                        storage_options=opts) as w:
        w.write_many(RECORDS[:800])
    ds = ofindex.open(url, storage_options=opts)
    assert ds[::-1] == RECORDS[:800][::-1] and list(ds) == RECORDS[:800]


def test_compression_argument(tf_files, tmp_path):
    path, expected = tf_files["ZLIB"]
    path = _fresh_copy(path, tmp_path)
    ofindex.build_index(path, compression="zlib")
    assert ofindex.open(path, compression="ZLIB")[7] == expected[7]
    with pytest.raises(SidecarError, match="compression="):
        ofindex.open(path, compression="gzip")
    with pytest.raises(SidecarError, match="compression="):
        ofindex.open(path, compression=None)
    with pytest.raises(ofindex.FormatDetectionError, match="not gzip data"):
        ofindex.build_index(path, compression="gzip")
    with pytest.raises(ValueError, match="unknown compression"):
        ofindex.open(path, compression="bz2")
    plain = write_raw(str(tmp_path / "plain.tfrecord"), ref_tfrecord(RECORDS[:9]))
    ofindex.build_index(plain, compression=None)
    assert ofindex.open(plain, compression=None)[:] == RECORDS[:9]
    (tmp_path / "sub").mkdir()
    missing = _fresh_copy(tf_files["GZIP"][0], tmp_path / "sub")
    ds = ofindex.open(missing, build_missing=True, compression="gzip")
    assert ds[-1] == expected[-1]


def test_compressed_and_plain_shards_in_one_dataset(tmp_path):
    """A directory of GZIP, ZLIB and uncompressed shards of one framing reads as one dataset
    (also after pickling, as in DataLoader workers)."""
    import pickle
    import zlib

    parts = [RECORDS[:900], RECORDS[900:1500], RECORDS[1500:]]
    write_raw(str(tmp_path / "part-0"), gzip.compress(ref_tfrecord(parts[0])))
    write_raw(str(tmp_path / "part-1"), ref_tfrecord(parts[1]))
    write_raw(str(tmp_path / "part-2"), zlib.compress(ref_tfrecord(parts[2])))
    ofindex.build_index(str(tmp_path), seek_spacing=SPACING)
    for ds in (ofindex.open(str(tmp_path)), ofindex.open(str(tmp_path), manifest=False)):
        ds = pickle.loads(pickle.dumps(ds))
        assert [c.name for c in ds.compressions] == ["GZIP", "NONE", "ZLIB"]
        idx = np.random.default_rng(8).permutation(len(ds))
        assert ds[idx] == [RECORDS[i] for i in idx]
        assert [ds[int(i)] for i in idx[:200]] == [RECORDS[i] for i in idx[:200]]
        assert list(ds) == RECORDS and ds[850:1600] == RECORDS[850:1600]


def test_stale_compressed_file(tf_files, tmp_path):
    path = _fresh_copy(tf_files["GZIP"][0], tmp_path)
    ofindex.build_index(path)
    with open(path, "ab") as f:
        f.write(gzip.compress(ref_tfrecord([b"more"])))
    with pytest.raises(ofindex.StaleIndexError, match="rebuild"):
        ofindex.open(path)


def test_cli(tf_files, tmp_path):
    d = tmp_path / "cli"
    d.mkdir()
    _fresh_copy(tf_files["GZIP"][0], d)
    _fresh_copy(tf_files["ZLIB"][0], d)

    def run(*args):
        done = subprocess.run([sys.executable, "-m", "ofindex", *args], capture_output=True,
                              env={**os.environ, "PYTHONPATH": paths.ROOT})
        return done.returncode, done.stdout, done.stderr.decode()

    code, out, err = run("build", str(d), "--seek-spacing", "16K")
    assert code == 0, err
    assert b"2 compressed" in out and b"% of the data" in out
    code, out, err = run("info", str(d))
    assert b"compression: gzip, zlib" in out
    code, out, err = run("verify", str(d), "--compression", "auto")
    assert code == 0 and f"{2 * len(RECORDS)} records verified".encode() in out, err
    code, out, err = run("get", str(d / "data-GZIP.tfrecord"), "3", "--raw", "--compression",
                         "gzip")
    assert code == 0 and out == RECORDS[3], err
    code, out, err = run("export-index", str(d / "data-ZLIB.tfrecord"))
    assert code == 1 and "compressed" in err


def test_readme_example(tmp_path, monkeypatch):
    """The "Compressed files" example of the documentation runs as written."""
    page = os.path.join(paths.DOCS, "reading.md")
    with open(page, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## Compressed files") :]
    code = section[section.index("```python") + len("```python") : section.index("```\n", 10)]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/reading.md", "exec"), {})
    assert os.path.exists(sidecar_of("train.tfrecord.gz"))
