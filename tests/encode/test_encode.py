"""Encoding values to Example / SequenceExample / OFRecord bytes: TensorFlow and protobuf parse
what we write and give the input back, our decoders give it back, the batch encoder equals the
single-record one byte for byte, and bad input is an EncodeError naming feature and record."""

from __future__ import annotations

import os
from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ofindex

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from ofindex import EncodeError
from ofindex.decode import (
    BatchDecoder,
    FixedLen,
    Ragged,
    VarLen,
    decode_example,
    decode_ofrecord,
)
from ofindex.encode import (
    BatchEncoder,
    Encoder,
    encode_columns,
    encode_example,
    encode_ofrecord,
    encode_sequence_example,
)
from ofindex.proto import example_pb2, ofrecord_pb2
from tests.kit.helpers import need

I64_EDGES = [-(2**63), 2**63 - 1, -1, 0, 1, 127, 128, 2**31, -(2**31) - 1]
F32_EDGES = np.array([np.inf, -np.inf, -0.0, 1e-45, 3.4028235e38, 0.1], np.float32)


def _values(message_feature):
    kind = message_feature.WhichOneof("kind")
    return None if kind is None else (kind, list(getattr(message_feature, kind).value))


# --- protobuf's own parser (written from the .proto, not from our encoder) -----------------

def test_protobuf_reads_every_type_of_example():
    data = encode_example({
        "int": 7, "bool": True, "ints": I64_EDGES, "float": 0.5, "floats": F32_EDGES,
        "bytes": b"\x00\xff", "str": "grüße", "strs": ["a", "", "ü"], "empty_i": np.array(
            [], np.int64), "empty_f": np.array([], np.float32), "empty_b": np.array([], "S1"),
        "u8": np.arange(250, 256, dtype=np.uint8), "f64": np.array([1.5, -2.25]),
        "img": np.arange(12, dtype=np.float32).reshape(3, 4),
    })
    ex = example_pb2.Example.FromString(data)
    got = {k: _values(v) for k, v in ex.features.feature.items()}
    assert got["int"] == ("int64_list", [7])
    assert got["bool"] == ("int64_list", [1])
    assert got["ints"] == ("int64_list", I64_EDGES)
    assert got["float"] == ("float_list", [0.5])
    np.testing.assert_array_equal(np.float32(got["floats"][1]), F32_EDGES)
    assert got["bytes"] == ("bytes_list", [b"\x00\xff"])
    assert got["str"] == ("bytes_list", ["grüße".encode()])
    assert got["strs"] == ("bytes_list", [b"a", b"", "ü".encode()])
    assert got["empty_i"] == ("int64_list", []) and got["empty_f"] == ("float_list", [])
    assert got["empty_b"] == ("bytes_list", [])
    assert got["u8"] == ("int64_list", [250, 251, 252, 253, 254, 255])
    assert got["f64"] == ("float_list", [1.5, -2.25])
    assert got["img"] == ("float_list", [float(i) for i in range(12)])


def test_protobuf_reads_ofrecord_five_lists():
    data = encode_ofrecord({
        "b": [b"x", b"yz"], "f": np.array([0.5], np.float32), "d": np.array([0.1, 1e300]),
        "i32": np.array([-(2**31), 2**31 - 1], np.int32), "i64": np.array(I64_EDGES),
        "u8": np.array([0, 255], np.uint8), "py_float": 0.25, "py_int": 3,
    })
    rec = ofrecord_pb2.OFRecord.FromString(data)
    got = {k: _values(v) for k, v in rec.feature.items()}
    assert got == {
        "b": ("bytes_list", [b"x", b"yz"]), "f": ("float_list", [0.5]),
        "d": ("double_list", [0.1, 1e300]), "i32": ("int32_list", [-(2**31), 2**31 - 1]),
        "i64": ("int64_list", I64_EDGES), "u8": ("int32_list", [0, 255]),
        "py_float": ("float_list", [0.25]), "py_int": ("int64_list", [3]),
    }


def test_protobuf_reads_sequence_example():
    data = encode_sequence_example(
        {"id": b"s1", "len": 3},
        {"tokens": [[1, 2], [3], []], "frames": np.ones((3, 2), np.float32),
         "words": [["a"], ["b", "c"], []]},
        sequence_spec={"tokens": VarLen("int64"), "frames": FixedLen(2, "float32"),
                       "words": VarLen("bytes")})
    se = example_pb2.SequenceExample.FromString(data)
    assert _values(se.context.feature["id"]) == ("bytes_list", [b"s1"])
    assert _values(se.context.feature["len"]) == ("int64_list", [3])
    steps = se.feature_lists.feature_list["tokens"].feature
    assert [_values(f) for f in steps] == [("int64_list", [1, 2]), ("int64_list", [3]),
                                           ("int64_list", [])]
    words = se.feature_lists.feature_list["words"].feature
    assert [_values(f) for f in words] == [("bytes_list", [b"a"]),
                                          ("bytes_list", [b"b", b"c"]), ("bytes_list", [])]


def test_bytes_equal_protobufs_serialization_for_one_feature():
    """With a single feature (no map-order question), our bytes are protobuf's."""
    for value, fill in [(7, lambda f: f.int64_list.value.append(7)),
                        ([-1, 300], lambda f: f.int64_list.value.extend([-1, 300])),
                        (np.array([0.5, 2], np.float32),
                         lambda f: f.float_list.value.extend([0.5, 2])),
                        ([b"ab", b""], lambda f: f.bytes_list.value.extend([b"ab", b""]))]:
        ex = example_pb2.Example()
        fill(ex.features.feature["x"])
        assert encode_example({"x": value}) == ex.SerializeToString()


# --- TensorFlow ------------------------------------------------------------------------------

def _tf():
    return need("tensorflow")


def test_tensorflow_parses_every_type():
    tf = _tf()
    rng = np.random.default_rng(3)
    rows = [{
        "image": rng.standard_normal((4, 3)).astype(np.float32),
        "label": int(rng.integers(-(2**40), 2**40)),
        "ids": np.array(I64_EDGES[: i + 1]),
        "name": f"record-{i}-ñ",
        "blob": rng.bytes(int(rng.integers(0, 50))),
        "weights": rng.standard_normal(i).astype(np.float32),
        "edges": F32_EDGES,
        "flag": bool(i % 2),
    } for i in range(6)]
    records = [encode_example(r) for r in rows]
    description = {
        "image": tf.io.FixedLenFeature([4, 3], tf.float32),
        "label": tf.io.FixedLenFeature([], tf.int64),
        "ids": tf.io.VarLenFeature(tf.int64),
        "name": tf.io.FixedLenFeature([], tf.string),
        "blob": tf.io.FixedLenFeature([], tf.string),
        "weights": tf.io.RaggedFeature(tf.float32),
        "edges": tf.io.FixedLenFeature([6], tf.float32),
        "flag": tf.io.FixedLenFeature([], tf.int64),
    }
    parsed = tf.io.parse_example(tf.constant(records), description)
    np.testing.assert_array_equal(parsed["image"].numpy(), np.stack([r["image"] for r in rows]))
    assert parsed["label"].numpy().tolist() == [r["label"] for r in rows]
    ids = tf.sparse.to_dense(parsed["ids"]).numpy()
    for k, r in enumerate(rows):
        assert ids[k, : len(r["ids"])].tolist() == r["ids"].tolist()
        assert parsed["name"].numpy()[k] == r["name"].encode()
        assert parsed["blob"].numpy()[k] == r["blob"]
        np.testing.assert_array_equal(parsed["weights"][k].numpy(), r["weights"])
        np.testing.assert_array_equal(parsed["edges"][k].numpy(), F32_EDGES)
    assert parsed["flag"].numpy().tolist() == [0, 1, 0, 1, 0, 1]


def test_tensorflow_parses_big_arrays_and_empty_lists():
    tf = _tf()
    big = np.arange(300_000, dtype=np.float32)
    data = encode_example({"big": big, "none": np.array([], np.int64), "e": []},
                          spec={"big": FixedLen(300_000), "none": VarLen("int64"),
                                "e": VarLen("bytes")})
    parsed = tf.io.parse_single_example(data, {
        "big": tf.io.FixedLenFeature([300_000], tf.float32),
        "none": tf.io.VarLenFeature(tf.int64), "e": tf.io.VarLenFeature(tf.string)})
    np.testing.assert_array_equal(parsed["big"].numpy(), big)
    assert parsed["none"].values.numpy().size == 0 and parsed["e"].values.numpy().size == 0


def test_tensorflow_parses_sequence_examples():
    tf = _tf()
    data = encode_sequence_example({"id": "a"}, {"x": np.arange(6).reshape(3, 2),
                                                 "w": [[0.5], [1.5, 2.5], []]})
    ctx, seq = tf.io.parse_single_sequence_example(
        data, context_features={"id": tf.io.FixedLenFeature([], tf.string)},
        sequence_features={"x": tf.io.FixedLenSequenceFeature([2], tf.int64),
                           "w": tf.io.RaggedFeature(tf.float32)})
    assert ctx["id"].numpy() == b"a"
    assert seq["x"].numpy().tolist() == [[0, 1], [2, 3], [4, 5]]
    assert seq["w"].to_list() == [[0.5], [1.5, 2.5], []]


# --- our decoders, and the batch encoder against the single one -----------------------------

def test_batch_decoder_gives_the_columns_back():
    rng = np.random.default_rng(0)
    n = 50
    columns = {
        "image": rng.standard_normal((n, 28, 28)).astype(np.float32),
        "label": rng.integers(0, 10, n),
        "big": rng.integers(-(2**62), 2**62, (n, 3)),
        "name": np.array([f"n{i}".encode() for i in range(n)], dtype=object),
        "tags": Ragged(rng.integers(0, 100, 58), [2, 0, 1] * 16 + [10, 0]),
    }
    spec = {"image": FixedLen((28, 28), "float32"), "label": FixedLen((), "int64"),
            "big": FixedLen(3, "int64"), "name": FixedLen((), "bytes"),
            "tags": VarLen("int64")}
    records = BatchEncoder(spec)(columns)
    assert len(records) == n
    back = BatchDecoder(spec)(records)
    for name in ("image", "label", "big"):
        np.testing.assert_array_equal(back[name], columns[name])
    assert back["name"].tolist() == columns["name"].tolist()
    assert back["tags"] == columns["tags"]


def _one_by_one(columns, kind):
    encode = encode_example if kind == "example" else encode_ofrecord
    n = len(next(iter(columns.values())))
    out = []
    for k in range(n):
        features = {}
        for name, col in columns.items():
            features[name] = col[k]
        out.append(encode(features))
    return out


@pytest.mark.parametrize("kind", ["example", "ofrecord"])
def test_batch_encoder_equals_single_record_encoder(kind):
    rng = np.random.default_rng(1)
    n = 40
    columns = {
        "f": rng.standard_normal((n, 5)).astype(np.float32),
        "d": rng.standard_normal((n, 2)),
        "small": rng.integers(0, 100, n),           # every varint one byte: the 2-D path
        "wide": rng.integers(-(2**63), 2**63 - 1, (n, 2), dtype=np.int64),  # sizes vary
        "i32": rng.integers(-5, 5, (n, 3)).astype(np.int32),
        "txt": [f"t{i}" * (i % 4) for i in range(n)],
        "raw": [bytes(range(i % 7)) for i in range(n)],
        "maybe": [None if i % 3 else [i, i + 1] for i in range(n)],
        "empty": np.zeros((n, 0), np.float32),
    }
    assert encode_columns(columns, kind=kind) == _one_by_one(columns, kind)


def test_batch_encoder_takes_arrow_tables():
    pa = need("pyarrow")
    table = pa.table({"x": pa.array([1.5, 2.5, 3.5], pa.float32()), "n": [1, None, 3],
                      "s": ["a", None, "c"], "l": [[1, 2], [], None],
                      "fixed": pa.array([[1, 2], [3, 4], [5, 6]], pa.list_(pa.int64(), 2))})
    records = encode_columns(table)
    decoded = [decode_example(r) for r in records]
    assert decoded[0]["x"].tolist() == [1.5] and "n" not in decoded[1] and "s" not in decoded[1]
    assert decoded[2]["s"].tolist() == [b"c"] and "l" not in decoded[2]
    assert decoded[1]["l"].tolist() == [] and decoded[2]["fixed"].tolist() == [5, 6]


def test_arrow_binary_and_string_columns_are_encoded_from_their_buffers():
    """Binary and string columns (large ones too, sliced tables whose arrays start at an
    offset, empty values) give the records their values give one by one."""
    pa = need("pyarrow")
    n = 40
    texts = [f"é{k}" * (k % 4) for k in range(n)]
    blobs = [bytes(range(k % 9)) for k in range(n)]
    table = pa.table({"t": pa.array(texts, pa.string()), "lt": pa.array(texts, pa.large_string()),
                      "b": pa.array(blobs, pa.binary()), "lb": pa.array(blobs, pa.large_binary()),
                      "i": pa.array(range(n), pa.int64())})
    for part in (table, table.slice(7, 20), table.slice(39)):
        rows = part.to_pylist()
        assert encode_columns(part) == [encode_example(r) for r in rows]
        assert encode_columns(part, kind="ofrecord") == [encode_ofrecord(r) for r in rows]


def test_arrow_column_that_cannot_be_stored_is_named_before_encoding():
    pa = need("pyarrow")
    # structs, nested lists and maps are mapped (tests/encode/test_hf_lossless.py); an interval not
    interval = pa.array([pa.MonthDayNano([1, 2, 3])] * 2, pa.month_day_nano_interval())
    table = pa.table({"ok": [1, 2], "nested": interval})
    with pytest.raises(EncodeError, match="column 'nested' of Arrow type "
                       "month_day_nano_interval cannot be represented"):
        encode_columns(table)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=8),
       hnp.arrays(np.float32, st.integers(0, 6),
                  elements=st.floats(width=32, allow_nan=False)),
       st.lists(st.binary(max_size=12), max_size=4), st.text(max_size=8))
def test_encode_then_decode_gives_the_values_back(ints, floats, blobs, text):
    spec = {"i": VarLen("int64"), "f": VarLen("float32"), "b": VarLen("bytes"),
            "t": FixedLen((), "bytes")}
    data = encode_example({"i": ints, "f": floats, "b": blobs, "t": text}, spec)
    got = decode_example(data, spec)
    assert got["i"].tolist() == ints and got["b"].tolist() == blobs
    np.testing.assert_array_equal(got["f"], floats)
    assert got["t"].item() == text.encode()
    of = encode_ofrecord({"i": ints, "f": floats, "b": blobs}, {
        "i": VarLen("int64"), "f": VarLen("float32"), "b": VarLen("bytes")})
    back = decode_ofrecord(of)
    assert back.get("i", np.array([], np.int64)).tolist() == ints


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.int64, hnp.array_shapes(min_dims=1, max_dims=2, max_side=6),
                  elements=st.integers(-(2**63), 2**63 - 1)))
def test_batch_equals_single_for_any_int_column(column):
    columns = {"x": column}
    assert encode_columns(columns) == _one_by_one(columns, "example")


# --- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("value,match", [
    ({"a": 1}, "feature 'x' of record 3: a nested mapping"),
    (np.array([object(), 1], dtype=object), "feature 'x' of record 3: an object array"),
    ([1, "a"], "mixing bytes or str"),
    (2**64, "out of the int64 range"),
    (1 + 2j, "a complex value cannot be stored"),
    (np.array([1 + 2j]), "complex128 values cannot be stored"),
    ([[1, 2], [3]], "feature 'x' of record 3"),
    ([], "an empty list has no type"),
    (object(), "a object value cannot be stored"),
    (np.array([1e39]), "beyond the float32 range"),
])
def test_bad_values_name_the_feature_and_record(value, match):
    with pytest.raises(EncodeError, match=match):
        encode_example({"ok": 1, "x": value}, record=3)


def test_no_silent_casts_into_int_features():
    spec = {"x": VarLen("int64")}
    with pytest.raises(EncodeError, match="float64 values cannot go into an int64 list"):
        encode_example({"x": np.array([1.0, 2.0])}, spec, record=0)
    with pytest.raises(EncodeError, match=r"\(it holds NaN\)"):
        encode_example({"x": [1.0, float("nan")]}, spec, record=0)
    with pytest.raises(EncodeError, match="out of the int32 range"):
        encode_ofrecord({"x": np.array([2**31])}, {"x": VarLen("int32")}, record=0)
    with pytest.raises(EncodeError, match="integer 33554433: a float32 list cannot hold it "
                       "exactly"):
        encode_example({"x": [2**25 + 1]}, {"x": VarLen("float32")}, record=0)
    with pytest.raises(EncodeError, match="bytes or str values cannot go into a int64"):
        encode_example({"x": "7"}, spec, record=0)
    assert decode_example(encode_example({"x": [2**24]}, {"x": VarLen("float32")}))[
        "x"].tolist() == [2**24]


def test_spec_is_enforced():
    spec = {"image": FixedLen((2, 2)), "label": FixedLen((), "int64")}
    with pytest.raises(EncodeError, match=r"feature 'image' of record 5: FixedLen\(2, 2\) "
                                          "holds 4 values, got 3"):
        encode_example({"image": [1.0, 2.0, 3.0], "label": 1}, spec, record=5)
    with pytest.raises(EncodeError, match="feature 'label' of record 5 is missing"):
        encode_example({"image": np.zeros(4)}, spec, record=5)
    with pytest.raises(EncodeError, match="feature 'other' of record 5 is not in the spec"):
        encode_example({"image": np.zeros(4), "label": 1, "other": 1}, spec, record=5)
    with pytest.raises(EncodeError, match="hold bytes, float32, int64; dtype float64"):
        Encoder({"x": VarLen("float64")})({"x": [1.0]})


def test_batch_errors_name_the_record_of_the_batch():
    column = np.array([1, 2, 2**40, 4])
    with pytest.raises(EncodeError, match="feature 'x' of record 102: value 1099511627776 is "
                                          "out of the int32 range"):
        encode_columns({"x": column}, {"x": FixedLen((), "int32")}, "ofrecord",
                       first_record=100)
    with pytest.raises(EncodeError, match="feature 'x' of record 100: float64 values"):
        encode_columns({"x": column * 1.0}, {"x": FixedLen((), "int64")}, first_record=100)
    with pytest.raises(EncodeError, match="columns of different lengths"):
        encode_columns({"a": np.zeros(3), "b": np.zeros(4)})
    with pytest.raises(EncodeError, match="feature 'b' of record 11: a nested mapping"):
        encode_columns({"b": [1, {"x": 1}]}, first_record=10)
    with pytest.raises(EncodeError, match="feature 'label' has no column"):
        encode_columns({"a": np.zeros(3)}, {"a": VarLen(), "label": FixedLen((), "int64")})


def test_encoder_objects_are_picklable_and_reprs_say_what_they_do():
    import pickle

    enc = Encoder({"x": VarLen("int64")}, kind="ofrecord")
    assert pickle.loads(pickle.dumps(enc)) == enc
    assert enc({"x": [1]}) == encode_ofrecord({"x": [1]})
    batch = pickle.loads(pickle.dumps(BatchEncoder(None, "ofrecord")))
    assert "ofrecord" in repr(batch)
    seq = Encoder(kind="sequence_example")
    assert seq(({"a": 1}, {"b": [[1]]})) == encode_sequence_example({"a": 1}, {"b": [[1]]})


# --- every encoder against protobuf: protobuf's bytes, or a refusal of the same values -------
#
# protobuf stores what it is given in the list it is told (an int into a FloatList is rounded
# to float32, 16777217 -> 16777216.0); we must write its bytes when every value comes back
# exactly (a Python float becomes float32: TensorFlow's rule) and refuse the values otherwise.

def _number(rnd):
    """A Python number, often one a float32 or an int64 cannot hold."""
    kind = rnd.randrange(10)
    sign = rnd.choice([1, -1])
    if kind == 0:
        return rnd.randint(-1000, 1000)
    if kind == 1:
        return sign * (2**24 + rnd.randint(-2, 2))
    if kind == 2:
        return sign * (2**53 + rnd.randint(-2, 2))
    if kind == 3:
        return rnd.choice([2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**64 - 1, 2**64])
    if kind == 4:
        return sign * rnd.choice([2**70, rnd.randint(2**64, 2**80), 10**400])
    if kind == 5:
        return sign * rnd.random() * 10 ** rnd.randint(-3, 8)
    if kind == 6:
        return rnd.choice([0.5, -0.0, 1e39, -1e39, 3.4028234e38, float("inf"), float("nan")])
    if kind == 7:
        return rnd.choice([True, False])
    if kind == 8:
        return float(rnd.randint(-(2**30), 2**30))
    return rnd.randint(-(2**40), 2**40)


def _number_lists(seed, count):
    rnd = __import__("random").Random(seed)
    lists = []
    for _ in range(count):
        mode = rnd.random()
        values = [_number(rnd) for _ in range(rnd.randint(1, 4))]
        if mode < 0.35:      # integers (and bools) only
            values = [v if not isinstance(v, float) else rnd.randint(-9, 9) for v in values]
        elif mode < 0.55:    # floats only
            values = [v if isinstance(v, float) else rnd.random() for v in values]
        lists.append(values)
    return lists


def _protobuf_feature(values, list_kind, pb):
    """protobuf's Feature of ``values`` in ``list_kind``, or None when protobuf refuses them
    or stores any of them other than it was given."""
    feature = pb.Feature()
    try:
        if list_kind == "float_list":
            feature.float_list.value.extend(values)
        else:   # TensorFlow's rule stores a bool as 0 / 1 (upb's Int64List refuses bools)
            getattr(feature, list_kind).value.extend(
                [int(v) if isinstance(v, bool) else v for v in values])
    except (TypeError, ValueError, OverflowError):
        return None
    for value, stored in zip(values, getattr(feature, list_kind).value, strict=True):
        if isinstance(value, float):
            if np.isfinite(value) and not np.isfinite(stored):
                return None    # beyond float32: refused rather than stored as inf
        elif stored != value:
            return None
    return feature


def _list_kind(values, spec_dtype, ofrecord):
    if spec_dtype is not None:
        return {"float32": "float_list", "int64": "int64_list"}[spec_dtype]
    if any(isinstance(v, float) for v in values):
        return "float_list"
    if ofrecord and all(isinstance(v, bool) for v in values):
        return "int32_list"   # OFRecord: bool (one byte) is among the small integers
    return "int64_list"


def _expected(values, spec_dtype, what):
    """protobuf's serialized record holding ``values`` as feature 'v' (a SequenceExample: as
    its context and as both steps of feature list 's'), or None: to be refused."""
    pb = ofrecord_pb2 if what == "ofrecord" else example_pb2
    feature = _protobuf_feature(values, _list_kind(values, spec_dtype, what == "ofrecord"), pb)
    if feature is None:
        return None
    if what == "ofrecord":
        record = ofrecord_pb2.OFRecord()
        record.feature["v"].CopyFrom(feature)
    elif what == "sequence_example":
        record = example_pb2.SequenceExample()
        record.context.feature["v"].CopyFrom(feature)
        for _ in range(2):
            record.feature_lists.feature_list["s"].feature.add().CopyFrom(feature)
    else:
        record = example_pb2.Example()
        record.features.feature["v"].CopyFrom(feature)
    return record.SerializeToString()


def _agrees(encode, values, expected, record):
    if expected is None:
        with pytest.raises(EncodeError, match=f"feature '[vs]' of record {record}"):
            encode(values, record)
    else:
        assert encode(values, record) == expected


@pytest.mark.parametrize("spec_dtype", [None, "float32", "int64"])
def test_single_record_encoders_agree_with_protobuf_or_refuse(spec_dtype):
    """2,000 seeded lists of numbers per spec (ints and floats mixed, ints a float32 or an int64
    cannot hold, floats beyond float32), through encode_example, encode_ofrecord,
    encode_sequence_example and Encoder."""
    spec = None if spec_dtype is None else {"v": VarLen(spec_dtype)}
    seq_spec = None if spec_dtype is None else {"s": VarLen(spec_dtype)}
    examples = (lambda values, k: encode_example({"v": values}, spec, record=k),
                lambda values, k: Encoder(spec)({"v": values}, record=k),
                lambda values, k: encode_example({"v": tuple(values)}, spec, record=k))
    ofrecords = (lambda values, k: encode_ofrecord({"v": values}, spec, record=k),
                 lambda values, k: Encoder(spec, "ofrecord")({"v": values}, record=k))

    def sequence(values, k):
        return encode_sequence_example({"v": values}, {"s": [values, values]}, record=k,
                                       context_spec=spec, sequence_spec=seq_spec)

    refused = 0
    for k, values in enumerate(_number_lists(7, 2000)):
        example = _expected(values, spec_dtype, "example")
        refused += example is None
        for encode in examples:
            _agrees(encode, values, example, k)
        for encode in ofrecords:
            _agrees(encode, values, _expected(values, spec_dtype, "ofrecord"), k)
        _agrees(sequence, values, _expected(values, spec_dtype, "sequence_example"), k)
        if len(values) == 1:   # a scalar, as a list of one
            _agrees(lambda values, k: encode_example({"v": values[0]}, spec, record=k),
                    values, example, k)
    assert 200 < refused < 1800   # both outcomes are exercised


def _batches(rows, spec_dtype, what, size=40):
    """Batches of rows every one of which protobuf stores exactly, with their expected records,
    and batches holding one refused row (its place in the batch)."""
    good, bad = [], []
    for start in range(0, len(rows), size):
        part = rows[start:start + size]
        expected = [_expected(row if isinstance(row, list) else [row], spec_dtype, what)
                    for row in part]
        ok = [(row, e) for row, e in zip(part, expected, strict=True) if e is not None]
        rows_ok = [row for row, _ in ok]
        good.append((rows_ok, [e for _, e in ok]))
        for k in [k for k, e in enumerate(expected) if e is None][:3]:
            place = k % (len(ok) + 1)
            bad.append(([*rows_ok[:place], part[k], *rows_ok[place:]], place))
    return good, bad


@pytest.mark.parametrize("spec_dtype", [None, "float32", "int64"])
@pytest.mark.parametrize("what", ["example", "ofrecord"])
def test_batch_encoders_agree_with_protobuf_or_refuse(impl, spec_dtype, what):
    """encode_columns and BatchEncoder (compiled and pure-Python block encoders) on columns of
    seeded lists and of seeded scalars (one number per record: a column numpy would promote to
    one dtype), and on Arrow int64 / float64 columns: protobuf's bytes for every record, or a
    refusal naming the first record protobuf cannot store exactly."""
    pa = need("pyarrow")
    spec = None if spec_dtype is None else {"v": VarLen(spec_dtype)}
    lists = _number_lists(11, 1200)
    scalars = [values[0] for values in lists]
    same_type = [v for v in scalars if isinstance(v, float)] + [
        v for v in scalars if isinstance(v, int) and not isinstance(v, bool)]
    for rows in (lists, scalars, same_type):
        good, bad = _batches(rows, spec_dtype, what)
        for batch, expected in good:
            if batch:
                assert encode_columns({"v": batch}, spec, what) == expected
                assert BatchEncoder(spec, what)({"v": batch}) == expected
        for batch, place in bad:
            with pytest.raises(EncodeError, match=f"feature 'v' of record {place + 5}"):
                encode_columns({"v": batch}, spec, what, first_record=5)
    # Arrow float64 in an Example is stored exactly (raw doubles, tests/encode/test_hf_lossless.py)
    # unless float64="float32" asks for TensorFlow's rule, which is what protobuf is held to
    for arrow_type, python_type in ((pa.int64(), int), (pa.float64(), float)):
        if python_type is float and what == "ofrecord" and spec is None:
            continue   # typed float64 values: an OFRecord's double_list (no Python float)
        typed = [v for v in scalars if type(v) is python_type and (
            python_type is float or -(2**63) <= v < 2**63)]
        good, bad = _batches(typed, spec_dtype, what)
        for batch, expected in good + [(b, None) for b, _ in bad]:
            table = pa.table({"v": pa.array(batch, arrow_type)})
            nested = pa.table({"v": pa.array([[v] for v in batch], pa.list_(arrow_type))})
            for columns in (table, nested):
                if expected is None:
                    with pytest.raises(EncodeError, match="feature 'v' of record"):
                        encode_columns(columns, spec, what, float64="float32")
                elif batch:
                    assert encode_columns(columns, spec, what, float64="float32") == expected


# --- nulls: one policy in every encoder ----------------------------------------------------

_NULL_CASES = [([1.5, None, 2.5], [1.5, 2.5], [1.5, -1, 2.5]),
               ([True, None], [True], [True, False]),
               ([7, None, None, 8], [7, 8], [7, 0, 0, 8]),
               (["a", None], ["a"], ["a", ""]),
               ([None, 3], [3], [0, 3])]


def _null_records(encode, policy, k):
    """What ``encode(features, record, nulls)`` makes of the null cases, and the records the
    cleaned values make (None: refused)."""
    fills = {"v0": -1, "v1": False, "v2": 0, "v3": "", "v4": 0}
    nulls = {"drop": "drop", "fill": ("fill", fills)}.get(policy, "refuse")
    given = {f"v{n}": case[0] for n, case in enumerate(_NULL_CASES)}
    given["cell"] = None   # a null cell: the feature is left out under every policy
    if policy == "refuse":
        return lambda: encode(given, k, nulls), None
    clean = {f"v{n}": case[1 if policy == "drop" else 2]
             for n, case in enumerate(_NULL_CASES)}
    return lambda: encode(given, k, nulls), encode(clean, k, "refuse")


@pytest.mark.parametrize("policy", ["refuse", "drop", "fill"])
def test_null_elements_follow_one_policy_in_every_single_record_encoder(policy):
    """None inside a list (and a masked element of an array): refused naming feature, record
    and element (it was an 'object array holding a NoneType', or numpy's TypeError), left out,
    or filled: encode_example, encode_ofrecord, Encoder, encode_sequence_example."""
    encoders = {
        "example": lambda f, k, nulls: encode_example(f, record=k, nulls=nulls),
        "ofrecord": lambda f, k, nulls: encode_ofrecord(f, record=k, nulls=nulls),
        "Encoder": lambda f, k, nulls: Encoder(None, nulls=nulls)(f, record=k),
        "Encoder-of": lambda f, k, nulls: Encoder(None, "ofrecord", nulls=nulls)(f, record=k),
        "sequence": lambda f, k, nulls: encode_sequence_example(
            f, {name: [v] for name, v in f.items() if v is not None}, record=k, nulls=nulls),
    }
    for what, encode in encoders.items():
        call, expected = _null_records(encode, policy, 9)
        if expected is None:
            with pytest.raises(EncodeError, match=r"feature 'v0' of record 9: element 1 of its "
                               r"list is null.*nulls='drop'"):
                call()
        else:
            assert call() == expected, what
    masked = np.ma.array([1.5, 9.0, 2.5], mask=[0, 1, 0])
    want = {"refuse": None, "drop": [1.5, 2.5], "fill": [1.5, -1, 2.5]}[policy]
    nulls = {"drop": "drop", "fill": ("fill", -1)}.get(policy, "refuse")
    if want is None:
        with pytest.raises(EncodeError, match="feature 'm' of record 2: element 1 of its list"):
            encode_example({"m": masked}, record=2, nulls=nulls)
    else:   # the masked 9.0 is never written
        assert encode_example({"m": masked}, nulls=nulls) == encode_example(
            {"m": np.array(want)})
    with pytest.raises(EncodeError, match=r"the fill value 0\.5 does not fit its int64 values"):
        encode_example({"m": np.ma.array([1, 2], mask=[0, 1])}, nulls=("fill", 0.5))
    with pytest.raises(EncodeError, match="feature 'e' of record 1: an empty list has no type"):
        encode_example({"e": [None]}, record=1, nulls="drop")   # nothing left says its type


@pytest.mark.parametrize("policy", ["refuse", "drop", "fill"])
@pytest.mark.parametrize("kind", ["example", "ofrecord"])
def test_null_elements_and_cells_in_columns_equal_each_row_on_its_own(impl, tmp_path, policy,
                                                                       kind):
    """encode_columns, BatchEncoder and ShardedWriter.write_columns on dict columns (lists
    holding None, None cells, masked arrays: 1-D masked entries are null cells, 2-D masked
    elements null elements) and on Arrow tables (null cells and null elements of every value
    type): each record is what the single-record encoder makes of its row, under each policy;
    'refuse' names the column and the row."""
    pa = need("pyarrow")
    n = 30
    nulls = {"drop": "drop", "fill": ("fill", {"f": -1, "i": 0, "b": False, "s": "",
                                               "m2": 0})}.get(policy, "refuse")
    f = [[k + 0.5, None][: 1 + (k % 3 == 2)] if k % 5 else None for k in range(n)]
    i = [[k, None, k] if k == 17 else [k] * (k % 3 + 1) for k in range(n)]
    b = [None if k % 4 == 1 else [k % 2 == 0] for k in range(n)]
    s = [["x", None] if k == 20 else [f"t{k}"] for k in range(n)]
    m1 = np.ma.array(np.arange(n, dtype=np.float64), mask=[k % 6 == 0 for k in range(n)])
    m2 = np.ma.array(np.arange(2 * n).reshape(n, 2), mask=[[k == 11, False] for k in range(n)])
    scalars = [None if k % 7 == 0 else k for k in range(n)]
    columns = {"f": f, "i": i, "b": b, "s": s, "m1": m1, "m2": m2, "n": scalars}
    table = pa.table({"f": pa.array(f, pa.list_(pa.float32())), "i": i, "b": b, "s": s,
                      "m1": pa.array(m1.data.astype(np.float32), mask=m1.mask), "n": scalars})
    first = 100
    for source in (columns, table):
        rows = [{name: (column[k] if not isinstance(column, pa.ChunkedArray) else
                        column[k].as_py()) for name, column in (
                            source.items() if isinstance(source, dict) else
                            zip(source.column_names, source.columns, strict=True))}
                for k in range(n)]
        if source is table:   # a null cell of an Arrow list also writes its '/null' mark
            rows = [_marked(row, ("f", "i", "b", "s")) for row in rows]
        one = Encoder(None, "ofrecord" if kind == "ofrecord" else "example", nulls=nulls)
        if policy == "refuse":   # the first null element: column f, row 2
            for encode in (partial(encode_columns, source, kind=kind, first_record=first),
                           partial(BatchEncoder(None, kind), source, first_record=first),
                           partial(one, rows[2], record=first + 2)):
                with pytest.raises(EncodeError, match="feature 'f' of record 102: element 1 "
                                   "of its list is null"):
                    encode()
            continue
        expected = [one(row, record=first + k) for k, row in enumerate(rows)]
        assert encode_columns(source, kind=kind, first_record=first, nulls=nulls) == expected
        assert BatchEncoder(None, kind, nulls=nulls)(source, first_record=first) == expected
        out = tmp_path / f"{policy}-{kind}-{isinstance(source, dict)}"
        with ofindex.ShardedWriter(out, kind.replace("example", "tfrecord"),
                                   nulls=nulls) as writer:
            writer.write_columns(source)
            writer.write(rows[3])
        with ofindex.open(str(out)) as ds:
            assert ds[:] == [*expected, expected[3]]


def _marked(row: dict, lists: tuple[str, ...]) -> dict:
    """A row of an Arrow table as the mapping writes it: a null list cell is left out and
    marked by ``<column>/null`` (an int64 1) where the column stands."""
    out: dict = {}
    for name, value in row.items():
        if name in lists and value is None:
            out[f"{name}/null"] = 1
        out[name] = value
    return out


# --- lone surrogates and empty batches: an EncodeError or records, never a raw exception ----

def test_a_file_name_that_is_not_utf8_is_stored_as_its_bytes_in_every_encoder(tmp_path):
    """os.fsdecode(b'caf\\xe9') is 'caf\\udce9': every encoder raised UnicodeEncodeError. A
    value holding U+DC80..U+DCFF is stored as the bytes it stands for (os.fsencode gives the
    same bytes); another lone surrogate, or one in a feature's name (a protobuf string), is an
    EncodeError naming the feature and the record."""
    pa = need("pyarrow")
    name = os.fsdecode(b"caf\xe9.jpg")
    stored = encode_example({"f": b"caf\xe9.jpg"})
    ofrecord = encode_ofrecord({"f": b"caf\xe9.jpg"})
    sequence = encode_sequence_example({"f": b"caf\xe9.jpg"}, {"s": [[b"caf\xe9.jpg"]]})
    values = (name, [name], (name,), np.array([name]), np.array([name], dtype=object))
    for value in values:
        assert encode_example({"f": value}, record=3) == stored
        assert Encoder()({"f": value}) == stored
        assert encode_ofrecord({"f": value}) == ofrecord
        assert encode_sequence_example({"f": value}, {"s": [[name]]}) == sequence
    for column in ([name, name], np.array([name, name]), [[name], [name]]):
        assert encode_columns({"f": column}) == [stored, stored]
        assert BatchEncoder(None, "ofrecord")({"f": column}) == [ofrecord, ofrecord]
    with ofindex.ShardedWriter(tmp_path / "w") as writer:
        writer.write({"f": name})
        writer.write_columns({"f": [name]})
    with ofindex.open(str(tmp_path / "w")) as ds:
        assert ds[:] == [stored, stored]
        assert os.fsdecode(decode_example(ds[0])["f"][0]) == name
    bad = "x\ud800y"
    for encode in (lambda: encode_example({"f": bad}, record=4),
                   lambda: encode_example({"f": [b"ok", bad]}, record=4),
                   lambda: encode_ofrecord({"f": np.array([bad])}, record=4),
                   lambda: encode_sequence_example({}, {"f": [[bad]]}, record=4),
                   lambda: encode_columns({"f": ["ok"] * 4 + [bad]}),
                   lambda: encode_columns({"f": [["ok"]] * 4 + [[bad]]})):
        with pytest.raises(EncodeError, match=r"feature 'f' of record 4: 'x\\ud800y' holds a "
                           r"lone surrogate \(U\+D800 at 1\)"):
            encode()
    for encode in (lambda: encode_example({name: 1}, record=5),
                   lambda: encode_sequence_example({}, {name: [[1]]}, record=5),
                   lambda: encode_columns({name: np.zeros(6)}, first_record=5),
                   lambda: encode_columns({name: [b"a"] * 6}, first_record=5)):
        with pytest.raises(EncodeError, match=r"feature 'caf\\udce9.jpg'( of record 5)?: the "
                           "name holds a lone surrogate"):
            encode()
    assert pa.array([name.encode("utf-8", "surrogateescape")]).to_pylist() == [b"caf\xe9.jpg"]


def test_a_batch_of_no_rows_is_no_records(impl, tmp_path):
    """A 0-row numeric column raised numpy's 'cannot reshape array of size 0' in the batch
    encoder (numpy arrays, Arrow tables, empty Parquet files, empty npz arrays, a Hugging
    Face dataset selected down to nothing); it is now 0 records, and a writer goes on."""
    pa = need("pyarrow")
    datasets = need("datasets")
    empties = [{"x": np.zeros((0, 3), np.float32)}, {"x": np.zeros(0)},
               {"x": np.zeros((0, 2), np.int64), "y": []},
               pa.table({"x": pa.array([], pa.int64()),
                         "v": pa.array([], pa.list_(pa.float32(), 3)),
                         "s": pa.array([], pa.string())}),
               datasets.Dataset.from_dict({"x": [[1.0, 2.0]]}).select([])]
    for columns in empties:
        for kind in ("example", "ofrecord"):
            assert encode_columns(columns, kind=kind) == []
            assert BatchEncoder(None, kind)(columns) == []
    with ofindex.ShardedWriter(tmp_path / "w", shard_records=2) as writer:
        for columns in empties:
            assert writer.write_columns(columns) == 0
        writer.write_columns({"x": np.ones((3, 3), np.float32)})
    assert writer.summary.records == 3


@pytest.mark.parametrize("column,spec,kind,bad", [
    (np.array([1, 2**63], np.uint64), None, "example", "value 9223372036854775808 is out of "
     "the int64 range"),
    (np.array([[1, 2**40]], np.int64), "int32", "ofrecord", "value 1099511627776 is out of "
     "the int32 range"),
    (np.array([[1, 2**31]], np.uint32), "int32", "ofrecord", "value 2147483648 is out of "
     "the int32 range"),
    (np.array([[-(2**63), 2**63 - 1]], np.int64), None, "example", None),
    (np.array([[0, 2**32 - 1]], np.uint32), None, "example", None),
    (np.array([[-(2**31), 2**31 - 1]], np.int32), "int32", "ofrecord", None),
])
def test_integers_beyond_their_list_are_refused_and_the_rest_kept(impl, column, spec, kind,
                                                                  bad):
    """An integer column whose type holds values its list cannot (uint64 in int64, int64 and
    uint32 in int32) is checked value by value and refused naming the value; one whose type's
    every value fits is written as it is, its extremes included (protobuf's parse)."""
    spec_of = None if spec is None else {"x": VarLen(spec)}
    if bad is not None:
        with pytest.raises(EncodeError, match=bad):
            encode_columns({"x": column}, spec_of, kind=kind)
        return
    records = encode_columns({"x": column}, spec_of, kind=kind)
    parse = (example_pb2.Example if kind == "example" else ofrecord_pb2.OFRecord).FromString
    got = [parse(record) for record in records]
    lists = [(g.features if kind == "example" else g).feature["x"] for g in got]
    values = [list((f.int64_list if spec is None else f.int32_list).value) for f in lists]
    assert values == column.reshape(len(column), -1).tolist()
