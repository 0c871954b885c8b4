"""Appending (issue 49, item 2): ``Writer(path, append=True)`` adds records to an existing
file and grows its sidecar by a segment; ``ShardedWriter(directory, append=True)`` adds shards
to a published dataset and writes its manifest again. Readers that opened before read on as
before."""

import os
import random

import pytest

import ofindex
from ofindex.formats.sidecar import open_local_sidecar
from tests.kit.backends import make_backend
from tests.kit.helpers import read_bytes, ref_tfrecord, sidecar_of, write_raw

RNG = random.Random(4902)


def _records(n, start=0):
    return [RNG.randbytes(RNG.randrange(60)) + b"#%d" % (start + i) for i in range(n)]


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
@pytest.mark.parametrize("fmt", ["tfrecord", "ofrecord"])
def test_append_adds_records_and_a_growth_segment(tmp_path, fmt, compression):
    p = str(tmp_path / "a.rec")
    first = _records(3000)
    with ofindex.Writer(p, fmt, compression=compression, seek_spacing=16 << 10) as w:
        w.write_many(first)
    before = read_bytes(sidecar_of(p))
    reader = ofindex.open(p)  # opened before: reads on as it was
    assert reader[2999] == first[2999]
    more = _records(1000, 3000)
    with ofindex.Writer(p, fmt, append=True, seek_spacing=16 << 10) as w:
        assert len(w) == 0
        w.write_many(more[:400])
        w.flush()
        w.write_many(more[400:])
    after = read_bytes(sidecar_of(p))
    assert after[: len(before)] == before and len(after) > len(before)
    sidecar = open_local_sidecar(sidecar_of(p))
    assert len(sidecar.segments) == 1 and len(sidecar) == 4000
    assert (sidecar.checksums is not None) == (fmt == "ofrecord")
    with ofindex.open(p) as ds:
        assert ds[:] == first + more
        picks = RNG.sample(range(4000), 200)
        assert ds[picks] == [(first + more)[k] for k in picks]
        assert ds.compressions[0].name.lower() == (compression or "none")
    (build,) = ofindex.build_index(p)  # the grown sidecar is fresh
    assert build.skipped and build.records == 4000
    assert len(reader) == 3000 and reader[:] == first


def test_append_to_a_file_without_index_or_that_is_missing(tmp_path):
    p = str(tmp_path / "new.tfrecord")
    with ofindex.Writer(p, append=True) as w:  # missing: made, empty, then appended to
        w.write(b"a")
    with ofindex.Writer(p, append=True) as w:
        w.write(b"b")
    assert ofindex.open(p)[:] == [b"a", b"b"]
    q = str(tmp_path / "plain.tfrecord")
    records = _records(50)
    write_raw(q, ref_tfrecord(records))  # written by another program, never indexed
    with ofindex.Writer(q, append=True) as w:
        w.write(b"c")
    assert ofindex.open(q)[:] == [*records, b"c"]


def test_appends_are_refused_when_they_cannot_be_right(tmp_path):
    p = str(tmp_path / "a.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many(_records(10))
    with ofindex.Writer(p, append=True) as w:
        w.write(b"one")
        with pytest.raises(ofindex.OfindexError, match="another writer is appending"):
            ofindex.Writer(p, append=True)
    with pytest.raises(ofindex.OfindexError, match=r"ofrecord|tfrecord"):
        ofindex.Writer(p, "ofrecord", append=True)
    raw = read_bytes(p)
    write_raw(p, raw[:-5])  # a writer that died inside a record
    with pytest.raises(ofindex.OfindexError, match="ends inside a record"):
        ofindex.Writer(p, append=True)


def test_an_aborted_append_leaves_the_file_as_it_was(tmp_path):
    p = str(tmp_path / "a.tfrecord")
    records = _records(20)
    with ofindex.Writer(p) as w:
        w.write_many(records)
    size = os.path.getsize(p)
    with pytest.raises(KeyError), ofindex.Writer(p, append=True) as w:
        w.write_many(_records(30))
        w.flush()
        raise KeyError("interrupted")
    assert os.path.getsize(p) == size and ofindex.open(p)[:] == records
    with ofindex.Writer(p, append=True) as w:  # the lock was let go
        w.write(b"after")
    assert ofindex.open(p)[-1] == b"after"


@pytest.mark.parametrize("name", ["memory", "s3", "gcs"])  # (a web server takes no uploads)
def test_append_to_a_remote_file(name, request, tmp_path_factory):
    backend = make_backend(name, request, tmp_path_factory)
    url = backend.prefix() + "/a.tfrecord"
    opts = backend.storage_options
    first = _records(500)
    with ofindex.Writer(url, storage_options=opts) as w:
        w.write_many(first)
    more = _records(70, 500)
    with ofindex.Writer(url, storage_options=opts, append=True) as w:
        w.write_many(more)
    with ofindex.open(url, storage_options=opts) as ds:
        assert ds[:] == first + more


def test_sharded_writer_adds_shards_to_a_published_dataset(tmp_path):
    out = str(tmp_path / "ds")
    first = _records(250)
    with ofindex.ShardedWriter(out, shard_records=100) as w:
        w.write_many(first)
    before = ofindex.open(out)
    assert len(before) == 250
    more = _records(170, 250)
    with ofindex.ShardedWriter(out, shard_records=100, append=True) as w:
        w.write_many(more)
    assert w.summary.shards == 2 and w.summary.records == 170
    assert sorted(os.listdir(out)) == ["part-00000-of-00003", "part-00001-of-00003",
                                       "part-00002-of-00003", "part-00003", "part-00004"]
    with ofindex.open(out) as ds:  # through the manifest written again
        assert ds[:] == first + more
    with ofindex.open(out, manifest=False) as ds:  # listed: the same order
        assert ds[:] == first + more
    assert len(before) == 250 and before[:] == first  # a reader that opened before
    with pytest.raises(ValueError, match="cannot count the shards"):
        ofindex.ShardedWriter(out, append=True, pattern="part-{shard:05d}-of-{count:05d}")
    with pytest.raises(ValueError, match="does not sort after"), \
            ofindex.ShardedWriter(out, append=True, pattern="a-{shard}") as w:
        w.write(b"x")
    assert sorted(os.listdir(out))[-1] == "part-00004"  # nothing of it published
    with pytest.raises(ValueError, match="tfrecord dataset"):
        ofindex.ShardedWriter(out, "ofrecord", append=True)


def test_sharded_append_to_a_bucket(bucket_backend):
    url = bucket_backend.prefix() + "/ds"
    opts = bucket_backend.storage_options
    first = _records(120)
    with ofindex.ShardedWriter(url, shard_records=50, storage_options=opts) as w:
        w.write_many(first)
    more = _records(60, 120)
    with ofindex.ShardedWriter(url, shard_records=50, storage_options=opts, append=True) as w:
        w.write_many(more)
    with ofindex.open(url, storage_options=opts) as ds:
        assert len(ds.shards) == 5 and ds[:] == first + more


def test_shards_another_writer_added_meanwhile_are_not_overwritten(tmp_path):
    out = str(tmp_path / "ds")
    with ofindex.ShardedWriter(out, shard_records=10) as w:
        w.write_many(_records(10))
    late = ofindex.ShardedWriter(out, append=True)
    late.write(b"late")
    with ofindex.ShardedWriter(out, append=True) as w:
        w.write(b"early")
    with pytest.raises(ofindex.DatasetExistsError):
        late.close()
    assert ofindex.open(out)[-1] == b"early"


def test_appending_to_a_dataset_named_by_a_relative_path(tmp_path, monkeypatch):
    """The dataset's shards as its location spells them, and the new ones as the writer
    does: one directory for the manifest (a relative path made them two)."""
    monkeypatch.chdir(tmp_path)
    with ofindex.ShardedWriter("ds", shard_records=5) as w:
        w.write_many(_records(7))
    with ofindex.ShardedWriter("ds", shard_records=5, append=True) as w:
        w.write(b"more")
    assert ofindex.open("ds")[-1] == b"more" and len(ofindex.open("ds").shards) == 3
