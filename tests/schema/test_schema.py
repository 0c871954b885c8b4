"""infer_spec / spec_from_tf: the kind, types, lengths and presence of features from a
bounded sample; the inferred spec decodes every sampled record, and TensorFlow parsing with the
printed feature_description gives what we decode. Checked on files we write and, when present,
on the real-world files of ../shared/real-world/."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import ofindex
from ofindex.decode import FixedLen, VarLen, decode_batch, decode_sequence_example
from ofindex.encode import encode_sequence_example
from ofindex.errors import DecodeError
from ofindex.schema import infer_spec, spec_from_tf, to_python, to_tf
from ofindex.write import ShardedWriter
from tests.kit import paths
from tests.kit.helpers import need

REAL = os.path.join(os.path.dirname(paths.ROOT), "shared", "real-world")


def _written(tmp_path, n=200):
    with ShardedWriter(tmp_path / "d", shard_records=37) as w:
        for k in range(n):
            features = {"image": np.full(6, k, np.float32), "label": k, "name": f"n{k}",
                        "tags": np.array([b"t"] * (k % 4), dtype="S1")}
            if k % 5:
                features["sometimes"] = [1.5, 2.5]
            w.write(features)
    return ofindex.open(str(tmp_path / "d"))


def test_infers_types_lengths_and_presence(tmp_path):
    ds = _written(tmp_path)
    schema = infer_spec(ds, sample=100)
    assert schema.kind == "example" and schema.sampled == 100 and schema.records == 200
    assert schema.spec == {"image": FixedLen((6,), "float32"), "label": FixedLen((), "int64"),
                           "name": FixedLen((), "bytes"), "tags": VarLen("bytes"),
                           "sometimes": VarLen("float32")}
    assert 0 < schema.features["sometimes"].present < 100
    decoded = decode_batch(ds.__getitems__(list(range(200))), schema.spec)
    assert decoded["label"].tolist() == list(range(200))
    assert schema.decoder()(ds[7])["name"].item() == b"n7"


def test_sample_is_bounded_and_spread_over_shards(tmp_path):
    ds = _written(tmp_path)
    seen = []
    real = ds.__getitems__

    def counting(indices):
        seen.append(list(indices))
        return real(indices)

    ds.__getitems__ = counting
    infer_spec(ds, sample=20, seed=3)
    (indices,) = seen
    assert len(indices) == 20 == len(set(indices))
    assert len({ds.locate(i)[0] for i in indices}) >= 3   # several of the 6 shards


@pytest.mark.parametrize("manifest", ["json", "bin"])
def test_schema_of_a_huge_remote_dataset_reads_only_the_sampled_pages(manifest, monkeypatch):
    """On the scale simulation store (1e9 records in 1e4 remote shards), sampling 64 records
    reads the manifest (the JSON one whole; the compact one by the pages of the sampled
    shards' rows), the sampled shards' sidecar headers and one page each, their records and
    their data files' stamps: requests bounded by the sample, not the dataset."""
    import sys

    sys.path.insert(0, paths.TOOLS)
    import sim_store

    monkeypatch.setenv(sim_store.KIND_ENV, manifest)
    url = sim_store.dataset_url(10**9, 10**4, 200)
    sim_store.STATS.reset()
    schema = infer_spec(ofindex.open(url), sample=64, seed=1)
    stats = sim_store.STATS
    assert schema.kind == "raw" and schema.sampled == 64 and schema.records == 10**9
    if manifest == "json":
        assert stats.requests["manifest"] == 1 and "compact" not in stats.requests
    else:  # its header and footer, then at most a page per sampled shard
        assert "manifest" not in stats.requests and 1 <= stats.requests["compact"] <= 64 + 2
        assert stats.bytes["compact"] < 64 * 4096
    assert stats.requests["sidecar"] <= 2 * 64 and stats.requests["data"] <= 64
    assert stats.infos <= 64
    assert stats.bytes["sidecar"] < 64 * 4096  # headers and pages, not whole sidecars


def test_printed_python_runs_and_tf_description_parses_like_we_decode(tmp_path):
    tf = need("tensorflow")
    ds = _written(tmp_path)
    schema = infer_spec(ds, sample=200)
    space: dict = {}
    exec(to_python(schema), space)
    assert space["spec"] == schema.spec
    description = to_tf(schema)
    assert description == {"image": tf.io.FixedLenFeature([6], tf.float32),
                           "label": tf.io.FixedLenFeature([], tf.int64),
                           "name": tf.io.FixedLenFeature([], tf.string),
                           "sometimes": tf.io.VarLenFeature(tf.float32),
                           "tags": tf.io.VarLenFeature(tf.string)}
    assert spec_from_tf(description) == schema.spec
    records = ds[:]
    parsed = tf.io.parse_example(tf.constant(records), description)
    ours = decode_batch(records, schema.spec)
    np.testing.assert_array_equal(parsed["image"].numpy(), ours["image"])
    assert parsed["label"].numpy().tolist() == ours["label"].tolist()
    assert tf.sparse.to_dense(parsed["tags"]).numpy().shape[0] == 200
    code = to_tf(schema, as_code=True)  # what `ofindex schema --style tf` prints
    assert "# 1 value, in 100% of records" in code
    exec(code, space)
    assert space["feature_description"] == description


def test_cli_style_tf_prints_the_description_as_code(tmp_path, capsys):
    """``ofindex schema --style tf`` prints code (to_tf(..., as_code=True)) whose
    ``feature_description`` is the one ``to_tf`` returns."""
    tf = need("tensorflow")
    from ofindex.cli.main import main

    ds = _written(tmp_path)
    assert main(["schema", str(tmp_path / "d"), "--style", "tf", "--sample", "200"]) == 0
    code = capsys.readouterr().out
    assert code.startswith("# example: 200 of 200 records sampled") and "import tensorflow" in code
    space: dict = {}
    exec(code, space)
    assert space["feature_description"] == to_tf(infer_spec(ds, sample=200))
    assert space["feature_description"]["image"] == tf.io.FixedLenFeature([6], tf.float32)


def _parse_sequence_examples_like_we_decode(tf, records, schema) -> None:
    """TensorFlow's parse of each SequenceExample with ``to_tf(schema)`` equals our decode
    with the schema's specs, feature by feature and list by list."""
    description = to_tf(schema)
    for record in records:
        context, lists = tf.io.parse_single_sequence_example(record, **description)
        ours_context, ours_lists = decode_sequence_example(record, schema.spec,
                                                           schema.sequence_spec)
        for theirs, ours, spec in [(context, ours_context, schema.spec),
                                   (lists, ours_lists, schema.sequence_spec)]:
            assert set(theirs) == set(spec)
            for name, fs in spec.items():
                if isinstance(fs, VarLen):
                    values = np.asarray(ours[name].values if hasattr(ours[name], "values")
                                        else ours[name])
                    assert theirs[name].values.numpy().tolist() == values.tolist(), name
                else:  # a scalar tf.string comes back as bytes, not an array
                    assert (np.asarray(theirs[name].numpy()).tolist()
                            == np.asarray(ours[name]).tolist()), name


def test_sequence_examples_and_ofrecords(tmp_path):
    tf = need("tensorflow")
    with ofindex.Writer(tmp_path / "s.tfrecord") as w:
        for k in range(5):
            w.write(encode_sequence_example({"id": k, "tags": np.array([b"t"] * k, "S1")},
                                            {"x": np.ones((k + 1, 3)),
                                             "w": [[1]] * k if k else None}))
    ds = ofindex.open(str(tmp_path / "s.tfrecord"))
    schema = infer_spec(ds)
    assert schema.kind == "sequence_example"
    assert schema.spec == {"id": FixedLen((), "int64"), "tags": VarLen("bytes")}
    assert schema.sequence_spec == {"x": FixedLen((3,), "float32"),
                                    "w": FixedLen((), "int64", allow_missing=True)}
    assert to_tf(schema) == {
        "context_features": {"id": tf.io.FixedLenFeature([], tf.int64),
                             "tags": tf.io.VarLenFeature(tf.string)},
        "sequence_features": {
            "x": tf.io.FixedLenSequenceFeature([3], tf.float32),
            "w": tf.io.FixedLenSequenceFeature([], tf.int64, allow_missing=True)}}
    _parse_sequence_examples_like_we_decode(tf, ds[:], schema)
    space: dict = {}
    exec(to_tf(schema, as_code=True), space)
    assert {"context_features": space["context_features"],
            "sequence_features": space["sequence_features"]} == to_tf(schema)
    with ShardedWriter(tmp_path / "of", "ofrecord") as w:
        w.write({"d": np.array([0.5]), "i": np.array([1, 2], np.int32)})
    schema = infer_spec(ofindex.open(str(tmp_path / "of")))
    assert schema.kind == "ofrecord"
    assert schema.spec == {"d": FixedLen((), "float64"), "i": FixedLen((2,), "int32")}
    assert "no parser" in to_tf(schema, as_code=True)
    with pytest.raises(DecodeError, match="OFRecords, which TensorFlow has no parser for"):
        to_tf(schema)


def test_raw_records(tmp_path):
    with ofindex.Writer(tmp_path / "raw.tfrecord") as w:
        w.write(b"\xff\xff not a message")
    schema = infer_spec(ofindex.open(str(tmp_path / "raw.tfrecord")))
    assert schema.kind == "raw" and "not an Example" in schema.failure
    with pytest.raises(ValueError, match="nothing to decode"):
        schema.decoder()
    with pytest.raises(DecodeError, match=r"not Examples .*tf\.io has nothing to parse"):
        to_tf(schema)
    assert "no parser" in to_tf(schema, as_code=True)


def test_spec_from_tf():
    tf = need("tensorflow")
    spec = spec_from_tf({
        "a": tf.io.FixedLenFeature([2, 2], tf.float32, default_value=[0.0] * 4),
        "b": tf.io.VarLenFeature(tf.string), "c": tf.io.RaggedFeature(tf.int64),
        "d": tf.io.FixedLenSequenceFeature([3], tf.int64, allow_missing=True)})
    assert spec == {"a": FixedLen((2, 2), "float32", default=0.0), "b": VarLen("bytes"),
                    "c": VarLen("int64"), "d": FixedLen((3,), "int64", allow_missing=True)}
    with pytest.raises(ValueError, match="SparseFeature has no ofindex spec"):
        spec_from_tf({"s": tf.io.SparseFeature("i", "v", tf.float32, 3)})


def _real_files(kinds):
    path = os.path.join(REAL, "manifest.json")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        files = json.load(f)["files"]
    return [f for f in files if f["kind"] in kinds]


#: Files other projects wrote (../shared/real-world/, never copied into this repository): run
#: by `pytest -m realworld` where they are, deselected by default (a fresh clone has none).
REAL_ENTRIES = _real_files({"example", "sequence_example", "ofrecord", "raw"}) or [None]


@pytest.mark.realworld
@pytest.mark.parametrize("entry", REAL_ENTRIES,
                         ids=lambda e: e["file"] if e else "real-world-files-missing")
def test_real_world_files(entry, tmp_path):
    """The kind is the one recorded for the file, and for Examples and SequenceExamples
    TensorFlow's parse with ``to_tf(schema)`` equals our decode with the inferred spec, record
    for record."""
    assert entry is not None, f"{REAL}/manifest.json not found: the realworld tier needs it"
    tf = need("tensorflow")
    with ofindex.open(os.path.join(REAL, entry["file"]), index_dir=str(tmp_path),
                      build_missing=True, format=entry["format"]) as ds:
        schema = infer_spec(ds, sample=64)
        records = ds.__getitems__(list(range(min(len(ds), 64))))
    assert schema.kind == entry["kind"]
    if schema.kind == "sequence_example":
        _parse_sequence_examples_like_we_decode(tf, records, schema)
        return
    if schema.kind != "example":
        return
    parsed = tf.io.parse_example(tf.constant(records), to_tf(schema))
    ours = decode_batch(records, schema.spec)
    for name, fs in schema.spec.items():
        theirs = parsed[name]
        if isinstance(fs, VarLen):
            assert theirs.values.numpy().tolist() == np.asarray(ours[name].values).tolist()
        else:
            assert theirs.numpy().tolist() == ours[name].tolist(), name
