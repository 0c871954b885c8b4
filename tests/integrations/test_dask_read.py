"""Dask reads ofindex datasets (issue 50) on a real ``LocalCluster`` (two worker processes,
one per module): a DataFrame indexed by record number with known divisions from the split
planner, decoded columns equal to the decoder's, a GZIP file cut inside, a groupby, raw
payloads as a frame and as a Bag."""

from __future__ import annotations

import os

import distributed
import numpy as np
import pytest

import ofindex
from ofindex.decode import FixedLen, VarLen, decode_batch
from ofindex.encode import encode_example
from ofindex.integrations.dask import read, read_bag

SPEC = {"label": FixedLen((), "int64"), "score": FixedLen((2,), "float32"),
        "tokens": VarLen("int64"), "name": FixedLen((), "bytes")}


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                  silence_logs=40) as lc, \
            distributed.Client(lc) as dask_client:
        yield dask_client


def _features(i: int) -> dict:
    return {"label": i % 3, "score": [i / 2, -i], "tokens": list(range(i % 4)),
            "name": f"r{i}".encode()}


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """Two shards of 700 and 300 Examples, the first GZIP-compressed with seek points every
    4 KiB (so it can be cut inside)."""
    d = tmp_path_factory.mktemp("dask") / "ds"
    d.mkdir()
    records = [encode_example(_features(i), SPEC) for i in range(1000)]
    with ofindex.Writer(str(d / "part-00000"), compression="gzip", seek_spacing=4096) as w:
        w.write_many(records[:700])
    with ofindex.Writer(str(d / "part-00001")) as w:
        w.write_many(records[700:])
    ofindex.build_index(str(d), manifest=True)
    return str(d)


def test_frame_has_known_divisions_and_the_decoded_columns(client, examples):
    df = read(examples, SPEC, partitions=5)
    assert df.known_divisions and df.npartitions >= 4  # the 700-record gzip shard is cut
    assert df.divisions[0] == 0 and df.divisions[-1] == 999
    got = df.compute()
    assert list(got.index) == list(range(1000))
    with ofindex.open(examples) as ds:
        expected = decode_batch(ds[0:1000], SPEC)
    assert got["label"].tolist() == expected["label"].tolist()
    assert got["name"].tolist() == list(expected["name"])
    assert np.array_equal(np.stack(got["score"].map(np.stack)), expected["score"])
    assert [list(t) for t in got["tokens"]] == [list(expected["tokens"][i]) for i in range(1000)]
    # each partition holds exactly the records its division says
    for k in range(df.npartitions):
        part = df.get_partition(k).compute()
        assert part.index.min() == df.divisions[k]
        assert part.index.max() < (df.divisions[k + 1] if k + 1 < df.npartitions else 1000)
    # a slice by record number reads only the partitions holding it
    assert df.loc[650:720].npartitions <= 2
    assert df.loc[650:720].compute()["label"].tolist() == [i % 3 for i in range(650, 721)]


def test_groupby_on_a_column(client, examples):
    counts = read(examples, SPEC).groupby("label").size().compute().sort_index()
    assert counts.tolist() == [334, 333, 333]


def test_inferred_spec_raw_frame_and_bag(client, examples):
    df = read(examples, "infer", partitions=3)
    assert set(df.columns) == set(SPEC) and df["label"].sum().compute() == 999
    with ofindex.open(examples) as ds:
        payloads = [bytes(r) for r in ds]
    raw = read(examples, partitions=4).compute()
    assert list(raw.columns) == ["bytes"] and raw["bytes"].tolist() == payloads
    bag = read_bag(examples, partitions=4)
    assert bag.npartitions >= 3 and bag.compute() == payloads


def test_empty_dataset_and_bad_arguments(client, tmp_path):
    d = str(tmp_path / "empty")
    with ofindex.ShardedWriter(d) as w:
        w.write_many([])
    assert len(read(d, SPEC).compute()) == 0
    assert read_bag(d).compute() == []
    with pytest.raises(ValueError, match="spec must be"):
        read(d, "guess")
    with pytest.raises(ValueError, match="at least 1"):
        read(d, partitions=0)
    assert os.path.isdir(d)


@pytest.fixture(scope="module")
def with_columns(tmp_path_factory):
    """The examples' shards (a GZIP one of 700, a plain one of 300), indexed with the columns
    label and name."""
    d = tmp_path_factory.mktemp("dask-columns") / "ds"
    d.mkdir()
    records = [encode_example(_features(i), SPEC) for i in range(1000)]
    with ofindex.Writer(str(d / "part-00000"), compression="gzip", seek_spacing=4096) as w:
        w.write_many(records[:700])
    with ofindex.Writer(str(d / "part-00001")) as w:
        w.write_many(records[700:])
    ofindex.build_index(str(d), manifest=True, columns=["label", "name"], progress=False)
    return str(d), records


def test_where_reads_only_the_matching_records(client, with_columns):
    path, records = with_columns
    expected = [i for i in range(1000) if i % 3 == 2 and i >= 500]
    df = read(path, SPEC, partitions=4, where={"label": 2, "name": [b"r%d" % i for i in
                                                                   range(500, 1000)]})
    assert df.known_divisions and df.npartitions == 4
    assert df.divisions[0] == expected[0] and df.divisions[-1] == expected[-1]
    got = df.compute()
    assert list(got.index) == expected and set(got["label"]) == {2}
    sizes = [len(df.get_partition(k).compute()) for k in range(df.npartitions)]
    assert sum(sizes) == len(expected) and min(sizes) > 0  # no partition without a match
    bag = read_bag(path, partitions=3, where={"label": 0})
    assert bag.compute() == [records[i] for i in range(0, 1000, 3)]
    assert len(read(path, SPEC, where={"label": 9}).compute()) == 0
    with pytest.raises(ofindex.ColumnNotFoundError, match=r"columns=\['score'"):
        read(path, SPEC, where={"score": 1.0})
