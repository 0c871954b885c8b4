"""Conformance with TensorFlow: records written by TF, decoded by us == tf.io.parse_*."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.kit.helpers import need

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = need("tensorflow")

from ofindex.decode import (  # noqa: E402
    Decoder,
    FixedLen,
    VarLen,
    decode_batch,
    decode_example,
    decode_sequence_example,
)
from ofindex.errors import DecodeError  # noqa: E402

I64_EDGES = [-(2**63), 2**63 - 1, -1, 0, 1, 127, 128, 2**31, -(2**31) - 1]
F_EDGES = [np.nan, np.inf, -np.inf, -0.0, 1e-45, 3.4028235e38]


def _feature(values) -> tf.train.Feature:
    values = list(values)
    if values and isinstance(values[0], bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
    if values and isinstance(values[0], (float, np.floating)):
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


def _records(n: int = 24, seed: int = 1) -> list[bytes]:
    """TF-written Examples: fixed image + label, ragged ints/floats/bytes, sometimes
    missing features, extremes and non-finite floats."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        feats = {
            "image": _feature(rng.standard_normal(6).astype(np.float32).tolist()),
            "label": _feature([int(rng.integers(-5, 1000))]),
            "name": _feature([f"r{i}-ü".encode()]),
        }
        k = int(rng.integers(0, 5))
        if i % 5 != 3:
            feats["ids"] = _feature([I64_EDGES[int(j)] for j in rng.integers(0, 9, k)])
            if k == 0:
                feats["ids"] = tf.train.Feature(int64_list=tf.train.Int64List())
        if i % 4 != 1:
            feats["w"] = _feature([float(F_EDGES[int(j)]) for j in rng.integers(0, 6, k + 1)])
            feats["tags"] = _feature([bytes([65 + j]) * j for j in range(k + 1)])
        if i % 3 == 0:
            feats["opt"] = _feature([float(i), float(i) + 0.5])
        ex = tf.train.Example(features=tf.train.Features(feature=feats))
        out.append(ex.SerializeToString())
    return out


TF_SPEC = {
    "image": tf.io.FixedLenFeature([2, 3], tf.float32),
    "label": tf.io.FixedLenFeature([], tf.int64),
    "name": tf.io.FixedLenFeature([], tf.string),
    "opt": tf.io.FixedLenFeature([2], tf.float32, default_value=[-1.0, -2.0]),
    "ids": tf.io.RaggedFeature(tf.int64),
    "w": tf.io.RaggedFeature(tf.float32),
    "tags": tf.io.VarLenFeature(tf.string),
}
OUR_SPEC = {
    "image": FixedLen((2, 3), np.float32),
    "label": FixedLen((), np.int64),
    "name": FixedLen((), bytes),
    "opt": FixedLen((2,), np.float32, default=[-1.0, -2.0]),
    "ids": VarLen(np.int64),
    "w": VarLen(np.float32),
    "tags": VarLen(bytes),
}


def _eq(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return a.dtype == b.dtype and a.shape == b.shape and bool(
            np.array_equal(a, b, equal_nan=True))
    return a.shape == b.shape and a.tolist() == b.tolist()


def test_batch_equals_tf_parse_example():
    recs = _records()
    theirs = tf.io.parse_example(tf.constant(recs), TF_SPEC)
    ours = decode_batch(recs, OUR_SPEC)
    for name in ("image", "label", "name", "opt"):
        assert _eq(ours[name], theirs[name].numpy()), name
    for name in ("ids", "w"):
        assert _eq(ours[name].values, theirs[name].values.numpy()), name
        assert _eq(ours[name].row_lengths, theirs[name].row_lengths().numpy()), name
    sparse = theirs["tags"]
    assert _eq(ours["tags"].values, sparse.values.numpy())
    rows = np.bincount(sparse.indices.numpy()[:, 0], minlength=len(recs))
    assert _eq(ours["tags"].row_lengths, rows)


def test_single_equals_tf_parse_single_example():
    for rec in _records(8, seed=7):
        theirs = tf.io.parse_single_example(rec, TF_SPEC)
        ours = decode_example(rec, OUR_SPEC)
        for name in ("image", "label", "name", "opt", "ids", "w"):
            assert _eq(ours[name], theirs[name].numpy()), name
        assert _eq(ours["tags"], theirs["tags"].values.numpy())


def test_uniform_batch_equals_tf():
    """The vectorised same-layout path, on TF-written MNIST-like records."""
    rng = np.random.default_rng(3)
    recs = [tf.train.Example(features=tf.train.Features(feature={
        "image": _feature(rng.random(784, np.float32)),
        "label": _feature([int(rng.integers(10))]),
    })).SerializeToString() for _ in range(64)]
    theirs = tf.io.parse_example(tf.constant(recs), {
        "image": tf.io.FixedLenFeature([28, 28], tf.float32),
        "label": tf.io.FixedLenFeature([], tf.int64)})
    ours = decode_batch(recs, {"image": FixedLen((28, 28)), "label": FixedLen((), "int64")})
    assert _eq(ours["image"], theirs["image"].numpy())
    assert _eq(ours["label"], theirs["label"].numpy())


@pytest.mark.parametrize("our, theirs", [
    (FixedLen((3,)), tf.io.FixedLenFeature([3], tf.float32)),  # wrong length
    (FixedLen((), "int64"), tf.io.FixedLenFeature([], tf.int64)),  # wrong kind
    (FixedLen(()), tf.io.FixedLenFeature([], tf.float32)),  # missing ("gone")
])
def test_errors_where_tf_errors(our, theirs):
    rec = tf.train.Example(features=tf.train.Features(feature={
        "x": _feature([1.0, 2.0])})).SerializeToString()
    name = "gone" if our.dtype == "float32" and our.shape == () else "x"
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.parse_single_example(rec, {name: theirs})
    with pytest.raises(DecodeError, match=repr(name)):
        decode_example(rec, {name: our})


def _sequence_records(n: int = 6) -> list[bytes]:
    rng = np.random.default_rng(5)
    out = []
    for i in range(n):
        steps = int(rng.integers(0, 5))
        lists = {
            "emb": tf.train.FeatureList(feature=[
                _feature(rng.standard_normal(2).astype(np.float32).tolist())
                for _ in range(steps)]),
            "tok": tf.train.FeatureList(feature=[
                _feature([int(x) for x in rng.integers(-(2**40), 2**40, int(rng.integers(0, 4)))])
                if rng.random() < 0.8 else tf.train.Feature(int64_list=tf.train.Int64List())
                for _ in range(steps)]),
        }
        seq = tf.train.SequenceExample(
            context=tf.train.Features(feature={
                "id": _feature([f"s{i}".encode()]), "len": _feature([steps])}),
            feature_lists=tf.train.FeatureLists(feature_list=lists))
        out.append(seq.SerializeToString())
    return out


def test_sequence_equals_tf_parse_sequence_example():
    recs = _sequence_records()
    tf_ctx = {"id": tf.io.FixedLenFeature([], tf.string),
              "len": tf.io.FixedLenFeature([], tf.int64)}
    tf_seq = {"emb": tf.io.FixedLenSequenceFeature([2], tf.float32),
              "tok": tf.io.VarLenFeature(tf.int64)}
    ctx_spec = {"id": FixedLen((), bytes), "len": FixedLen((), "int64")}
    seq_spec = {"emb": FixedLen((2,)), "tok": VarLen("int64")}
    for rec in recs:  # single
        t_ctx, t_seq = tf.io.parse_single_sequence_example(rec, tf_ctx, tf_seq)
        o_ctx, o_seq = decode_sequence_example(rec, ctx_spec, seq_spec)
        assert o_ctx["id"] == t_ctx["id"].numpy() and o_ctx["len"] == t_ctx["len"].numpy()
        assert _eq(o_seq["emb"], t_seq["emb"].numpy())
        tok = t_seq["tok"]
        assert _eq(o_seq["tok"].values, tok.values.numpy())
        rows = np.bincount(tok.indices.numpy()[:, 0], minlength=len(o_seq["tok"]))
        assert _eq(o_seq["tok"].row_lengths, rows)
    # batched: tf gives dense padded (batch, max_steps, 2) plus lengths
    t_ctx, t_seq, t_len = tf.io.parse_sequence_example(tf.constant(recs), tf_ctx, tf_seq)
    o_ctx, o_seq = decode_batch(recs, kind="sequence_example", context_spec=ctx_spec,
                                sequence_spec=seq_spec)
    assert o_ctx["id"].tolist() == t_ctx["id"].numpy().tolist()
    assert _eq(o_ctx["len"], t_ctx["len"].numpy())
    assert _eq(o_seq["emb"].row_lengths, t_len["emb"].numpy())
    padded = t_seq["emb"].numpy()
    steps = o_seq["emb"].row_lengths
    expected = np.concatenate([padded[i, :steps[i]] for i in range(len(recs))])
    assert _eq(o_seq["emb"].values, expected)
    # tok: sparse (batch, step, position) in TF; ours Ragged(records -> steps -> values)
    tok = t_seq["tok"]
    assert _eq(o_seq["tok"].row_lengths, o_ctx["len"])
    assert _eq(o_seq["tok"].values.values, tok.values.numpy())
    idx = tok.indices.numpy()
    per_step = np.zeros((len(recs), tok.dense_shape.numpy()[1]), np.int64)
    np.add.at(per_step, (idx[:, 0], idx[:, 1]), 1)
    expected_steps = np.concatenate([per_step[i, :n] for i, n in enumerate(o_ctx["len"])])
    assert _eq(o_seq["tok"].values.row_lengths, expected_steps)


# ---- random specs and records: compiled, pure Python and TensorFlow agree -----------------

_TF_DTYPES = {"bytes": tf.string, "float32": tf.float32, "int64": tf.int64}


def _random_case(seed: int) -> tuple[dict, dict, list[bytes]]:
    """A random spec (FixedLen of random shapes with and without defaults, VarLen of each
    type) as ours and as TF's, and TF-written records for it: features missing where the
    spec allows, empty lists, extremes and non-finite floats, records of many layouts."""
    rng = np.random.default_rng(seed)
    ours: dict = {}
    theirs: dict = {}
    for j in range(int(rng.integers(1, 7))):
        name, dtype = f"f{j}", str(rng.choice(sorted(_TF_DTYPES)))
        kind = int(rng.integers(3))
        if kind == 0:
            ours[name] = VarLen(dtype)
            theirs[name] = (tf.io.RaggedFeature(_TF_DTYPES[dtype]) if rng.random() < 0.5
                            else tf.io.VarLenFeature(_TF_DTYPES[dtype]))
            continue
        shape = [int(d) for d in rng.integers(1, 4, int(rng.integers(0, 3)))]
        size = int(np.prod(shape))
        default = None
        if kind == 2:
            default = [b"d"] * size if dtype == "bytes" else [7] * size
        ours[name] = FixedLen(tuple(shape), dtype, default=default)
        theirs[name] = tf.io.FixedLenFeature(shape, _TF_DTYPES[dtype], default_value=default)
    records = []
    for _ in range(int(rng.integers(1, 40))):
        feats = {}
        for name, fs in ours.items():
            missing_ok = isinstance(fs, VarLen) or fs.default is not None
            if missing_ok and rng.random() < 0.2:
                continue
            count = fs.size if isinstance(fs, FixedLen) else int(rng.integers(0, 6))
            if fs.dtype == "bytes":
                values = [rng.bytes(int(rng.integers(0, 9))) for _ in range(count)]
                feats[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
            elif fs.dtype == "float32":
                values = [float(F_EDGES[int(i)]) if rng.random() < 0.3 else float(x)
                          for i, x in zip(rng.integers(0, 6, count),
                                          rng.standard_normal(count), strict=True)]
                feats[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
            else:
                values = [I64_EDGES[int(i)] if rng.random() < 0.3 else int(x)
                          for i, x in zip(rng.integers(0, 9, count),
                                          rng.integers(-70_000, 70_000, count), strict=True)]
                feats[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        records.append(tf.train.Example(
            features=tf.train.Features(feature=feats)).SerializeToString())
    return ours, theirs, records


def _tf_column(value, n: int):
    """TF's batch column as ours: a dense array, or (values, row lengths)."""
    if isinstance(value, tf.RaggedTensor):
        return value.flat_values.numpy(), value.row_lengths().numpy()
    if isinstance(value, tf.SparseTensor):
        rows = np.bincount(value.indices.numpy()[:, 0], minlength=n)
        return value.values.numpy(), rows
    return value.numpy()


@pytest.mark.parametrize("seed", range(40))
def test_random_specs_compiled_pure_and_tf_agree(seed):
    from tests.kit.helpers import implementation, same

    ours, theirs, records = _random_case(seed)
    compiled = decode_batch(records, ours)
    with implementation("pure-python"):
        pure = decode_batch(records, ours)
        pure_single = [Decoder(ours)(raw) for raw in records]
    tf_out = tf.io.parse_example(tf.constant(records), theirs)
    for name, fs in ours.items():
        assert same(compiled[name], pure[name]), name
        want = _tf_column(tf_out[name], len(records))
        if isinstance(fs, FixedLen):
            assert _eq(compiled[name], want), name
        else:
            assert _eq(compiled[name].values, want[0]), name
            assert _eq(compiled[name].row_lengths, want[1]), name
    for raw, other in zip(records, pure_single, strict=True):
        single = Decoder(ours)(raw)
        assert list(single) == list(ours)
        assert all(same(single[name], other[name]) for name in ours)
    for raw in records[:3]:
        want_single = tf.io.parse_single_example(raw, theirs)
        for name, fs in ours.items():
            if isinstance(fs, FixedLen):
                assert _eq(Decoder(ours)(raw)[name], want_single[name].numpy()), name


@pytest.mark.parametrize("seed", range(12))
def test_random_malformed_records_fail_in_tf_and_here_naming_the_record(seed):
    from tests.kit.helpers import implementation

    ours, theirs, records = _random_case(100 + seed)
    rng = np.random.default_rng(seed)
    bad = int(rng.integers(len(records)))
    raw = tf.train.Example.FromString(records[bad])
    name = sorted(ours)[0]
    fs = ours[name]
    if isinstance(fs, FixedLen):  # a value too many
        feature = raw.features.feature[name]
        getattr(feature, {"bytes": "bytes_list", "float32": "float_list",
                          "int64": "int64_list"}[fs.dtype]).value.extend(
            [b"x"] if fs.dtype == "bytes" else [1])
        records[bad] = raw.SerializeToString()
        expect = f"record {bad}: feature {name!r}"
    else:  # the record cut inside its last byte's field
        records[bad] = records[bad][:-1] if records[bad] else b"\xff"
        expect = f"record {bad}: "
    # TF refuses the batch (its message quotes the record: bytes that are not UTF-8 make its
    # own error fail to decode)
    with pytest.raises((tf.errors.InvalidArgumentError, UnicodeDecodeError)):
        tf.io.parse_example(tf.constant(records), theirs)
    messages = []
    for impl in ("compiled", "pure-python"):
        with implementation(impl), pytest.raises(DecodeError) as caught:
            decode_batch(records, ours)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] and messages[0].startswith(expect), messages
