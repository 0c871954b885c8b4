"""ofindex.decode: equality with protobuf's own parse, specs, batches, errors, printing."""

from __future__ import annotations

import math
import os
import pickle
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ofindex.decode import (
    BatchDecoder,
    Decoder,
    FixedLen,
    Ragged,
    VarLen,
    decode_batch,
    decode_example,
    decode_ofrecord,
    decode_sequence_example,
    format_decoded,
    from_message,
    memory_pool,
)
from ofindex.errors import DecodeError, OfindexError
from ofindex.proto import example_pb2, ofrecord_pb2
from tests.kit.helpers import IMPLEMENTATIONS, implementation, same, same_dict, varint

# OFINDEX_HYPOTHESIS_EXAMPLES=5000 for a longer soak run
SETTINGS = settings(max_examples=int(os.environ.get("OFINDEX_HYPOTHESIS_EXAMPLES", 150)),
                    deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
FLOAT32 = st.floats(width=32, allow_nan=True, allow_infinity=True)
FLOAT64 = st.floats(allow_nan=True, allow_infinity=True)
NAMES = st.text(max_size=12)  # unicode, empty included


# ---- helpers ---------------------------------------------------------------------------

def reference_sequence(msg) -> tuple[dict, dict]:
    ctx = from_message(example_pb2.Example(features=msg.context))
    seq = {}
    for name, fl in msg.feature_lists.feature_list.items():
        rows = [from_message(example_pb2.Example(features=example_pb2.Features(
            feature={"x": f})))["x"] for f in fl.feature]
        kinds = {r.dtype for r, f in zip(rows, fl.feature, strict=True) if f.WhichOneof("kind")}
        dtype = kinds.pop() if kinds else np.dtype(np.float32)
        values = np.concatenate([r.astype(dtype) for r in rows]) if rows else np.empty(0, dtype)
        if dtype.kind == "O":
            values = np.array(list(values), dtype=object) if len(values) else np.empty(0, object)
        seq[name] = Ragged(values, [len(r) for r in rows])
    return ctx, seq


def example_bytes(**features) -> bytes:
    ex = example_pb2.Example()
    for name, values in features.items():
        f = ex.features.feature[name]
        if values is None:
            f.SetInParent()
        elif values and isinstance(values[0], bytes):
            f.bytes_list.value.extend(values)
        elif values and isinstance(values[0], float):
            f.float_list.value.extend(values)
        else:
            f.int64_list.value.extend(values)
    return ex.SerializeToString()


# ---- random messages: equality with protobuf's parse -----------------------------------

feature_values = st.one_of(
    st.tuples(st.just("bytes"), st.lists(st.binary(max_size=16), max_size=5)),
    st.tuples(st.just("float"), st.lists(FLOAT32, max_size=40)),
    st.tuples(st.just("int64"), st.lists(INT64, max_size=40)),
    st.tuples(st.just("none"), st.just([])),
)


def _fill(feature, kind: str, values: list) -> None:
    if kind == "bytes":
        feature.bytes_list.value.extend(values)
    elif kind == "float":
        feature.float_list.value.extend(values)
    elif kind == "int64":
        feature.int64_list.value.extend(values)
    else:
        feature.SetInParent()


@SETTINGS
@given(st.dictionaries(NAMES, feature_values, max_size=6))
def test_example_equals_protobuf(features):
    ex = example_pb2.Example()
    for name, (kind, values) in features.items():
        _fill(ex.features.feature[name], kind, values)
    data = ex.SerializeToString()
    expected = from_message(example_pb2.Example.FromString(data))
    assert same_dict(decode_example(data), expected)
    # subsets and explicit VarLen specs
    for name, (kind, _) in features.items():
        got = decode_example(data, [name])
        assert same(got[name], expected[name])
        if kind != "none":
            dtype = {"bytes": bytes, "float": "float32", "int64": "int64"}[kind]
            assert same(decode_example(data, {name: VarLen(dtype)})[name], expected[name])


ofrecord_values = st.one_of(
    st.tuples(st.just("bytes_list"), st.lists(st.binary(max_size=16), max_size=5)),
    st.tuples(st.just("float_list"), st.lists(FLOAT32, max_size=40)),
    st.tuples(st.just("double_list"), st.lists(FLOAT64, max_size=40)),
    st.tuples(st.just("int32_list"), st.lists(INT32, max_size=40)),
    st.tuples(st.just("int64_list"), st.lists(INT64, max_size=40)),
)


@SETTINGS
@given(st.dictionaries(NAMES, ofrecord_values, max_size=6))
def test_ofrecord_equals_protobuf(features):
    rec = ofrecord_pb2.OFRecord()
    for name, (kind, values) in features.items():
        getattr(rec.feature[name], kind).value.extend(values)
    data = rec.SerializeToString()
    expected = from_message(ofrecord_pb2.OFRecord.FromString(data))
    got = decode_ofrecord(data)
    assert same_dict(got, expected)
    for name, (kind, _values) in features.items():
        assert got[name].dtype == {"bytes_list": object, "float_list": np.float32,
                                   "double_list": np.float64, "int32_list": np.int32,
                                   "int64_list": np.int64}[kind]


@SETTINGS
@given(
    st.dictionaries(NAMES, feature_values, max_size=3),
    st.dictionaries(NAMES, st.lists(feature_values, max_size=4), max_size=3),
)
def test_sequence_example_equals_protobuf(context, lists):
    msg = example_pb2.SequenceExample()
    for name, (kind, values) in context.items():
        _fill(msg.context.feature[name], kind, values)
    for name, steps in lists.items():
        fl = msg.feature_lists.feature_list[name]
        fl.SetInParent()
        kinds = {k for k, _ in steps if k != "none"}
        for kind, values in steps:
            if len(kinds) > 1:  # keep one kind per list (mixed kinds are an error)
                kind, values = "none", []
            _fill(fl.feature.add(), kind, values)
    data = msg.SerializeToString()
    exp_ctx, exp_seq = reference_sequence(example_pb2.SequenceExample.FromString(data))
    ctx, seq = decode_sequence_example(data)
    assert same_dict(ctx, exp_ctx)
    assert set(seq) == set(exp_seq)
    for name in seq:
        assert same(seq[name], exp_seq[name]), name


# ---- hand-encoded wire variants: unpacked, split, duplicated, unknown fields ------------



def ld(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def list_message(kind: str, values: list, style: str) -> bytes:
    """FloatList/Int64List/BytesList bytes; style packed, unpacked or split (two packed)."""
    if kind == "bytes":
        return b"".join(ld(1, v) for v in values)
    if kind == "float":
        items = [struct.pack("<f", v) for v in values]
        single = [b"\x0d" + x for x in items]
    else:
        items = [varint(v) for v in values]
        single = [b"\x08" + x for x in items]
    if style == "unpacked":
        return b"".join(single)
    if style == "split":
        half = len(items) // 2
        return ld(1, b"".join(items[:half])) + ld(1, b"".join(items[half:]))
    return ld(1, b"".join(items))


UNKNOWN = st.sampled_from([b"", b"\x50\x07", b"\x5d\x00\x00\x80\x3f", b"\x62\x02ab",
                           b"\x59" + b"\x00" * 8, b"\x6b\x08\x01\x6c"])
raw_feature = st.tuples(
    NAMES,
    st.sampled_from(["bytes", "float", "int64"]),
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=12),
    st.sampled_from(["packed", "unpacked", "split"]),
    UNKNOWN,
    st.booleans(),  # emit the Feature value twice (messages merge)
)


def _raw_values(kind: str, ints: list) -> list:
    if kind == "bytes":
        return [str(i).encode() for i in ints]
    if kind == "float":
        return [struct.unpack("<f", struct.pack("<i", i & 0x7FFFFFFF))[0] for i in ints]
    return ints


@SETTINGS
@given(st.lists(raw_feature, max_size=6), UNKNOWN, st.booleans())
def test_wire_variants_equal_protobuf(features, unknown, split_features):
    entries = []
    for name, kind, ints, style, junk, twice in features:
        values = _raw_values(kind, ints)
        kind_field = {"bytes": 1, "float": 2, "int64": 3}[kind]
        feature = ld(kind_field, list_message(kind, values, style)) + junk
        value = ld(2, feature) + (ld(2, feature) if twice else b"")
        entries.append(ld(1, junk + ld(1, name.encode()) + value))
    if split_features and entries:
        data = ld(1, b"".join(entries[:1])) + unknown + ld(1, b"".join(entries[1:]))
    else:
        data = ld(1, b"".join(entries)) + unknown
    expected = from_message(example_pb2.Example.FromString(data))
    assert same_dict(decode_example(data), expected)


@SETTINGS
@given(st.dictionaries(NAMES, feature_values, min_size=1, max_size=4), st.data())
def test_corrupted_bytes_agree_with_protobuf(features, data):
    ex = example_pb2.Example()
    for name, (kind, values) in features.items():
        _fill(ex.features.feature[name], kind, values)
    raw = bytearray(ex.SerializeToString(deterministic=True))
    if not raw:
        return
    i = data.draw(st.integers(0, len(raw) - 1))
    how = data.draw(st.sampled_from(["flip", "truncate", "insert"]))
    if how == "flip":
        raw[i] = data.draw(st.integers(0, 255))
    elif how == "truncate":
        del raw[i:]
    else:
        raw[i:i] = data.draw(st.binary(min_size=1, max_size=3))
    raw = bytes(raw)
    try:
        expected = from_message(example_pb2.Example.FromString(raw))
    except Exception:
        expected = None
    if expected is None:
        with pytest.raises(DecodeError):
            decode_example(raw)
    else:
        assert same_dict(decode_example(raw), expected)


def test_merges_and_last_key_wins():
    floats = ld(2, ld(1, struct.pack("<2f", 1.0, 2.0)))
    more = ld(2, ld(1, struct.pack("<f", 3.0)))
    ints = ld(3, ld(1, varint(7)))
    data = ld(1, ld(1, ld(1, b"a") + ld(2, floats) + ld(2, more))  # value twice: merged
                 + ld(1, ld(1, b"b") + ld(2, floats + ints))  # other kind replaces
                 + ld(1, ld(1, b"c") + ld(2, floats))
                 + ld(1, ld(1, b"c") + ld(2, ints)))  # duplicate key: last wins
    got = decode_example(data)
    assert same(got["a"], np.array([1, 2, 3], np.float32))
    assert same(got["b"], np.array([7]))
    assert same(got["c"], np.array([7]))
    assert same_dict(got, from_message(example_pb2.Example.FromString(data)))


def test_extremes_nan_inf_and_unicode():
    data = example_bytes(**{
        "ünï😀": [-(2**63), 2**63 - 1, -1, 0],
        "f": [math.nan, math.inf, -math.inf, -0.0, 3.4028234663852886e38],
        "": [b"", b"\x00\xff"],
    })
    got = decode_example(data)
    assert got["ünï😀"].tolist() == [-(2**63), 2**63 - 1, -1, 0]
    f = got["f"]
    assert math.isnan(f[0]) and f[1] == np.inf and f[2] == -np.inf and np.signbit(f[3])
    assert got[""].tolist() == [b"", b"\x00\xff"]


# ---- specs -----------------------------------------------------------------------------

def test_fixedlen_shapes_defaults_and_empty_feature():
    data = example_bytes(img=[float(i) for i in range(6)], label=[3], empty=None,
                         name=[b"x", b"y"])
    got = decode_example(data, {
        "img": FixedLen((2, 3), np.float32),
        "label": FixedLen((), "int64"),
        "name": FixedLen(2, bytes),
        "absent": FixedLen((2,), "float", default=[9, 8]),
        "empty": FixedLen((), int, default=5),  # an empty Feature counts as absent
        "absent_var": VarLen("int64"),
    })
    assert got["img"].shape == (2, 3) and got["img"].dtype == np.float32
    assert got["label"].shape == () and got["label"] == 3
    assert got["name"].tolist() == [b"x", b"y"]
    assert got["absent"].tolist() == [9.0, 8.0]
    assert got["empty"] == 5
    assert got["absent_var"].dtype == np.int64 and got["absent_var"].size == 0
    assert list(got) == ["img", "label", "name", "absent", "empty", "absent_var"]


@pytest.mark.parametrize("spec, message", [
    ({"missing": FixedLen(())}, "feature 'missing' is missing"),
    ({"img": FixedLen((), "int64")}, "feature 'img': asked for int64, but the Example "
                                     "stores it as a float_list (float32)"),
    ({"img": FixedLen((4,))}, "feature 'img': FixedLen shape (4,) needs 4 float32 values, "
                              "the Example has 3"),
    ({"label": VarLen(bytes)}, "feature 'label': asked for bytes"),
    ({"img": FixedLen((3,), "float64")}, "Example features hold bytes, float32, int64"),
])
def test_errors_name_the_feature(spec, message):
    data = example_bytes(img=[1.0, 2.0, 3.0], label=[1])
    with pytest.raises((DecodeError, ValueError)) as info:
        decode_example(data, spec)
    assert message in str(info.value)


def test_not_an_example():
    with pytest.raises(DecodeError, match="not a valid serialized Example") as info:
        decode_example(b"\x0a\x05\x0a\x03")
    assert isinstance(info.value, OfindexError) and isinstance(info.value, ValueError)
    with pytest.raises(DecodeError, match="not valid UTF-8"):
        decode_example(ld(1, ld(1, ld(1, b"\xff"))))
    with pytest.raises(DecodeError):
        decode_example(b"\x0a\x03\x0a\x01\x0a\x0f")  # invalid wire type 7
    with pytest.raises(DecodeError):
        decode_ofrecord(b"\x0a\x02\x0a")


def test_ofrecord_invalid_utf8_key_stays_bytes():
    data = ld(1, ld(1, b"\xff\xfe") + ld(2, ld(5, ld(1, varint(4)))))
    parsed = ofrecord_pb2.OFRecord.FromString(data)
    assert len(parsed.feature) == 1  # protobuf accepts it (proto2: no UTF-8 check)
    assert decode_ofrecord(data)[b"\xff\xfe"].tolist() == [4]


def test_dtype_aliases():
    data = example_bytes(x=[1.5])
    for dt in ("float32", "float", np.float32, float, "tf.float32", np.dtype("<f4")):
        assert decode_example(data, {"x": VarLen(dt)})["x"].dtype == np.float32
    with pytest.raises(ValueError, match="unsupported dtype"):
        VarLen("complex64")
    with pytest.raises(ValueError, match="default has 3 values"):
        FixedLen((2,), default=[1, 2, 3])


# ---- SequenceExample -------------------------------------------------------------------

def _sequence_bytes() -> bytes:
    msg = example_pb2.SequenceExample()
    msg.context.feature["id"].bytes_list.value.append(b"rec-1")
    msg.context.feature["len"].int64_list.value.append(3)
    tok = msg.feature_lists.feature_list["tokens"]
    emb = msg.feature_lists.feature_list["emb"]
    for t in range(3):
        tok.feature.add().int64_list.value.extend(range(t + 1))
        emb.feature.add().float_list.value.extend([t, t + 0.5])
    return msg.SerializeToString()


def test_sequence_specs_and_errors():
    data = _sequence_bytes()
    ctx, seq = decode_sequence_example(
        data, {"len": FixedLen((), "int64")},
        {"emb": FixedLen((2,)), "tokens": VarLen("int64"), "none": VarLen("float32"),
         "gone": FixedLen((2,), allow_missing=True)})
    assert ctx == {"len": 3}
    assert seq["emb"].shape == (3, 2) and seq["emb"][2].tolist() == [2.0, 2.5]
    assert seq["tokens"].row_lengths.tolist() == [1, 2, 3]
    assert seq["tokens"].values.tolist() == [0, 0, 1, 0, 1, 2]
    assert seq["tokens"][2].tolist() == [0, 1, 2]
    assert len(seq["none"]) == 0 and seq["gone"].shape == (0, 2)
    with pytest.raises(DecodeError, match=r"'tokens'.*step 0"):
        decode_sequence_example(data, None, {"tokens": FixedLen((2,), "int64")})
    with pytest.raises(DecodeError, match="feature list 'gone' is missing"):
        decode_sequence_example(data, None, {"gone": FixedLen((2,))})


# ---- batches ---------------------------------------------------------------------------

def _mnist_like(n: int, seed: int = 0, labels=None) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ex = example_pb2.Example()
        ex.features.feature["image"].float_list.value.extend(rng.random(12, np.float32))
        label = int(rng.integers(10)) if labels is None else labels[i]
        ex.features.feature["label"].int64_list.value.append(label)
        out.append(ex.SerializeToString())
    return out


SPEC = {"image": FixedLen((3, 4)), "label": FixedLen((), "int64")}


def _stacked(records, spec) -> dict:
    rows = [decode_example(r, spec) for r in records]
    return {k: np.stack([r[k] for r in rows]) for k in spec}


@pytest.mark.usefixtures("impl")  # compiled and pure-Python loops
@pytest.mark.parametrize("labels", [None, [5, 300, -1, 2**62, 7, 8, 1, 0, 128, 127]])
def test_batch_equals_single_decodes(labels):
    recs = _mnist_like(10, labels=labels)
    got = decode_batch(recs, SPEC)
    assert same_dict(got, _stacked(recs, SPEC))
    assert got["image"].flags.writeable and got["image"].flags.c_contiguous


@SETTINGS
@given(st.lists(st.tuples(st.lists(FLOAT32, min_size=2, max_size=2),
                          st.lists(INT64, max_size=3)), min_size=1, max_size=12),
       st.sampled_from(IMPLEMENTATIONS))
def test_batch_fixed_and_ragged_random(rows, impl):
    recs = [example_bytes(f=vals, v=ints or None) for vals, ints in rows]
    spec = {"f": FixedLen(2), "v": VarLen("int64")}
    with implementation(impl):
        got = decode_batch(recs, spec)
    assert same(got["f"], np.array([r[0] for r in rows], np.float32).reshape(-1, 2))
    assert got["v"].row_lengths.tolist() == [len(r[1]) for r in rows]
    assert got["v"].values.tolist() == [x for r in rows for x in r[1]]
    assert got["v"].values.dtype == np.int64


@pytest.mark.usefixtures("impl")  # compiled and pure-Python loops
def test_batch_errors_name_record_and_feature():
    recs = [*_mnist_like(6), example_bytes(image=[1.0], label=[1])]
    with pytest.raises(DecodeError, match=r"record 6: feature 'image': FixedLen shape"):
        decode_batch(recs, SPEC)
    recs = [*_mnist_like(4), b"\xff"]
    with pytest.raises(DecodeError, match="record 4"):
        decode_batch(recs, SPEC)
    # same layout, but a packed varint list cut mid-varint in one record
    a = example_bytes(v=[1, 2])
    b = bytearray(a)
    b[-1] = 0x82
    with pytest.raises(DecodeError):
        decode_batch([a, a, bytes(b)], {"v": VarLen("int64")})


@pytest.mark.usefixtures("impl")  # compiled and pure-Python loops
def test_batch_natural_and_missing_features():
    recs = [example_bytes(a=[1.0], b=[b"x"]), example_bytes(a=[2.0, 3.0]),
            example_bytes(c=[1, 2])]
    got = decode_batch(recs)
    assert got["a"].row_lengths.tolist() == [1, 2, 0]
    assert got["b"].values.tolist() == [b"x"] and got["b"].row_lengths.tolist() == [1, 0, 0]
    assert got["c"].values.dtype == np.int64
    with pytest.raises(DecodeError, match="record 0 stores float32 values, record 1 stores"):
        decode_batch([example_bytes(a=[1.0]), example_bytes(a=[1])])
    assert decode_batch([], SPEC)["image"].shape == (0, 3, 4)


@pytest.mark.usefixtures("impl")  # compiled and pure-Python loops
def test_batch_ofrecord_and_sequence():
    recs = []
    for i in range(5):
        r = ofrecord_pb2.OFRecord()
        r.feature["d"].double_list.value.extend([i, i + 0.25])
        r.feature["i"].int32_list.value.extend([-i] * i)
        recs.append(r.SerializeToString())
    got = decode_batch(recs, {"d": FixedLen(2, "float64"), "i": VarLen("int32")},
                       kind="ofrecord")
    assert got["d"].dtype == np.float64 and got["d"][4].tolist() == [4, 4.25]
    assert got["i"].values.dtype == np.int32 and got["i"].row_lengths.tolist() == [0, 1, 2, 3, 4]
    ctx, seq = decode_batch([_sequence_bytes()] * 2, kind="sequence_example",
                            context_spec={"id": FixedLen((), bytes)},
                            sequence_spec={"emb": FixedLen(2), "tokens": VarLen("int64")})
    assert ctx["id"].tolist() == [b"rec-1", b"rec-1"]
    assert seq["emb"].values.shape == (6, 2) and seq["emb"].row_lengths.tolist() == [3, 3]
    assert seq["tokens"][1][2].tolist() == [0, 1, 2]


def test_decoders_pickle_and_match():
    recs = _mnist_like(4)
    dec = pickle.loads(pickle.dumps(Decoder(SPEC)))
    assert same_dict(dec(recs[0]), decode_example(recs[0], SPEC))
    bdec = pickle.loads(pickle.dumps(BatchDecoder(SPEC)))
    assert same_dict(bdec(recs), decode_batch(recs, SPEC))
    seq = Decoder(kind="sequence_example", sequence_spec={"emb": FixedLen(2)})
    assert pickle.loads(pickle.dumps(seq))(_sequence_bytes())[1]["emb"].shape == (3, 2)
    ragged = decode_batch(recs, {"label": VarLen("int64")})["label"]
    assert pickle.loads(pickle.dumps(ragged)) == ragged
    with pytest.raises(ValueError, match="unknown record kind"):
        Decoder(kind="csv")
    # a batch decoder is called with a list: it is not a per-record Decoder
    assert not isinstance(BatchDecoder(SPEC), Decoder)
    assert BatchDecoder(SPEC) == BatchDecoder(SPEC) != Decoder(SPEC)
    assert repr(BatchDecoder(SPEC)).startswith("BatchDecoder(")


# ---- printing --------------------------------------------------------------------------

def test_format_decoded():
    data = example_bytes(image=[float(i) for i in range(784)], label=[7],
                         text=[b"a" * 100])
    text = format_decoded(decode_example(data, {"image": FixedLen((28, 28)),
                                                "label": FixedLen((), "int64"),
                                                "text": VarLen(bytes)}))
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["image", "float32", "(28,"]
    assert "[0, 1, 2, ..., 781, 782, 783]" in lines[0]
    assert lines[1].split() == ["label", "int64", "()", "7"]
    assert "(100 bytes)" in lines[2] and len(lines[2]) < 120
    seq_text = format_decoded(decode_sequence_example(_sequence_bytes()))
    assert seq_text.startswith("context:") and "feature_lists:" in seq_text
    assert "row_lengths=[1, 2, 3]" in seq_text


def test_ragged_helpers():
    r = Ragged(np.array([1, 2, 3, 4], np.int64), [1, 0, 3])
    assert r.to_list() == [[1], [], [2, 3, 4]]
    assert r.row_splits.tolist() == [0, 1, 1, 4]
    assert r.to_padded(-1).tolist() == [[1, -1, -1], [-1, -1, -1], [2, 3, 4]]
    assert len(r) == 3 and r[-1].tolist() == [2, 3, 4]
    with pytest.raises(IndexError):
        r[3]


def _flip_one_byte(raw: bytes, data) -> bytes:
    """``raw`` with one byte, drawn by hypothesis, set to a drawn value."""
    out = bytearray(raw)
    out[data.draw(st.integers(0, len(out) - 1))] = data.draw(st.integers(0, 255))
    return bytes(out)


def _parsed_or_refused(message_type, decode, raw: bytes):
    """protobuf's parse of ``raw``; or, when protobuf refuses the bytes, None after checking
    that ``decode`` refuses them too."""
    try:
        return message_type.FromString(raw)
    except Exception:
        with pytest.raises(DecodeError):
            decode(raw)
        return None


@SETTINGS
@given(st.dictionaries(NAMES, ofrecord_values, min_size=1, max_size=4), st.data())
def test_corrupted_ofrecord_agrees_with_protobuf(features, data):
    rec = ofrecord_pb2.OFRecord()
    for name, (kind, values) in features.items():
        getattr(rec.feature[name], kind).value.extend(values)
    raw = _flip_one_byte(rec.SerializeToString(deterministic=True), data)
    parsed = _parsed_or_refused(ofrecord_pb2.OFRecord, decode_ofrecord, raw)
    if parsed is None:
        return
    try:
        got = decode_ofrecord(raw)
    except DecodeError:
        pytest.fail("protobuf parses these bytes, we refused them")
    try:
        expected = from_message(parsed)
    except UnicodeDecodeError:  # a proto2 key that is not UTF-8: upb cannot list the map
        assert any(isinstance(k, bytes) for k in got)
        return
    assert same_dict(got, expected)


@SETTINGS
@given(st.dictionaries(NAMES, st.lists(feature_values, min_size=1, max_size=3),
                       min_size=1, max_size=3), st.data())
def test_corrupted_sequence_example_agrees_with_protobuf(lists, data):
    msg = example_pb2.SequenceExample()
    for name, steps in lists.items():
        fl = msg.feature_lists.feature_list[name]
        for kind, values in steps:
            _fill(fl.feature.add(), kind, values)
    raw = _flip_one_byte(msg.SerializeToString(deterministic=True), data)
    parsed = _parsed_or_refused(example_pb2.SequenceExample, decode_sequence_example, raw)
    if parsed is None:
        return
    try:
        ctx, seq = decode_sequence_example(raw)
    except DecodeError as exc:  # mixed kinds in one list need a spec: not a parse error
        assert "different value types" in str(exc)
        return
    exp_ctx, exp_seq = reference_sequence(parsed)
    assert same_dict(ctx, exp_ctx)
    assert set(seq) == set(exp_seq) and all(same(seq[k], exp_seq[k]) for k in seq)


@pytest.mark.usefixtures("impl")  # compiled and pure-Python loops
def test_same_layout_different_varint_counts():
    """[1, 200] and [1, 2, 3] both pack into 3 bytes: same layout, different counts."""
    a, b = example_bytes(v=[1, 200]), example_bytes(v=[1, 2, 3])
    assert len(a) == len(b)
    got = decode_batch([a, b, a, b], {"v": VarLen("int64")})["v"]
    assert got.row_lengths.tolist() == [2, 3, 2, 3]
    assert got.values.tolist() == [1, 200, 1, 2, 3, 1, 200, 1, 2, 3]
    with pytest.raises(DecodeError, match="record 1: feature 'v': FixedLen shape"):
        decode_batch([a, b], {"v": FixedLen(2, "int64")})
    neg = [example_bytes(v=[-1, -(2**63)]), example_bytes(v=[2**63 - 1, -2])]
    assert decode_batch(neg, {"v": FixedLen(2, "int64")})["v"].tolist() == [
        [-1, -(2**63)], [2**63 - 1, -2]]


def _big_float_records(n: int, floats: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ex = example_pb2.Example()
        ex.features.feature["image"].float_list.value.extend(rng.random(floats, np.float32))
        ex.features.feature["label"].int64_list.value.append(i)
        out.append(ex.SerializeToString())
    return out


@pytest.mark.usefixtures("impl")  # compiled and pure-Python loops
@pytest.mark.parametrize("n, floats", [(3, 5000), (20, 150_528)])  # the second: 12 MB, threads
def test_big_float_batches_equal_protobuf_with_and_without_out(n, floats):
    recs = _big_float_records(n, floats)
    want = np.array([list(example_pb2.Example.FromString(r).features.feature["image"]
                          .float_list.value) for r in recs], np.float32)
    spec = {"image": FixedLen(floats), "label": FixedLen((), "int64")}
    fresh = decode_batch(recs, spec)
    assert np.array_equal(fresh["image"], want) and fresh["label"].tolist() == list(range(n))
    out = {"image": np.full((n, floats), np.nan, np.float32), "label": np.zeros(n, np.int64)}
    got = decode_batch(recs, spec, out=out)
    assert got["image"] is out["image"] and got["label"] is out["label"]
    assert np.array_equal(out["image"], want) and out["label"].tolist() == list(range(n))
    # records that do not share one layout go record by record, still into ``out``
    mixed = [*recs[:-1], example_bytes(image=list(map(float, want[-1])), label=[n - 1])]
    out["image"][:] = 0
    got = BatchDecoder(spec)(mixed, out=out)
    assert got["image"] is out["image"] and np.array_equal(out["image"], want)


@pytest.mark.usefixtures("impl")  # compiled and pure-Python loops
def test_out_arrays_are_checked():
    recs = _mnist_like(4)
    good = {"image": np.empty((4, 3, 4), np.float32)}
    assert decode_batch(recs, SPEC, out=good)["image"] is good["image"]
    for bad, message in [
        ({"image": np.empty((5, 3, 4), np.float32)}, r"shape \(4, 3, 4\)"),
        ({"image": np.empty((4, 3, 4), np.float64)}, "dtype float32"),
        ({"image": np.empty((4, 4, 3), np.float32).transpose(0, 2, 1)}, "C-contiguous"),
        ({"nope": np.empty(4)}, "only FixedLen"),
    ]:
        with pytest.raises(ValueError, match=message):
            decode_batch(recs, SPEC, out=bad)
    with pytest.raises(ValueError, match="out= is supported"):
        decode_batch([_sequence_bytes()], kind="sequence_example", out=good)
    with pytest.raises(ValueError, match="only FixedLen"):  # no spec: nothing is FixedLen
        decode_batch(recs, None, out=good)


def test_parallel_row_copy_matches_a_plain_copy():
    from ofindex.decode._parallel import PARALLEL_COPY_BYTES, copy_rows

    rng = np.random.default_rng(1)
    rows = [rng.random(PARALLEL_COPY_BYTES // 8 // 7 + 1) for _ in range(9)]  # > threshold
    out = np.empty((9, len(rows[0])))
    copy_rows(out, rows)
    assert np.array_equal(out, np.stack(rows))


def test_big_outputs_reuse_only_memory_nothing_holds(empty_pool):
    from ofindex.decode._memory import POOLED_BYTES, empty

    floats = POOLED_BYTES // 4 // 3 + 1
    recs = _big_float_records(3, floats, seed=2)
    want = np.array([list(example_pb2.Example.FromString(r).features.feature["image"]
                          .float_list.value) for r in recs], np.float32)
    spec = {"image": FixedLen(floats), "label": FixedLen((), "int64")}
    kept = decode_batch(recs, spec)["image"]
    row = kept[1]  # a view keeps its memory alive too
    held = decode_batch(recs[::-1], spec)["image"]
    assert not np.shares_memory(held, kept)
    address, size = held.ctypes.data, held.nbytes
    in_pool = memory_pool()[0]
    del held  # nothing refers to it any more: its memory goes to the pool ...
    assert memory_pool()[0] == in_pool + size
    again = decode_batch(recs, spec)["image"]
    assert again.ctypes.data == address  # ... and the next batch of that size takes it
    assert memory_pool()[0] == in_pool
    assert np.array_equal(again, want) and np.array_equal(kept, want)
    assert np.array_equal(row, want[1]) and again.flags.writeable
    del kept
    assert not np.shares_memory(empty(again.shape, np.float32), row)
    held_bytes, limit = memory_pool()
    assert held_bytes > 0 and limit > 0
    assert memory_pool(0) == (0, 0)  # empties the pool and turns it off
    try:
        del again
        assert memory_pool()[0] == 0
        assert np.array_equal(decode_batch(recs, spec)["image"], want)
    finally:
        memory_pool(limit)


@SETTINGS
@given(st.integers(2, 6), st.lists(st.sampled_from(["f", "i", "b"]), min_size=1, unique=True),
       st.data())
def test_batches_with_a_subset_spec_equal_record_by_record_decodes(n, selected, data):
    """Features left out of the spec may differ between records (the batch still takes the
    shared-layout path); a record whose left-out list is corrupt fails as protobuf fails."""
    rows = [{"f": data.draw(st.lists(FLOAT32, min_size=3, max_size=3)),
             "i": data.draw(st.lists(st.integers(0, 127), min_size=2, max_size=2)),
             "b": [data.draw(st.binary(min_size=4, max_size=4))]} for _ in range(n)]
    recs = [example_bytes(**row) for row in rows]
    if data.draw(st.booleans()):  # one byte of one record changed: layout or values
        k = data.draw(st.integers(0, n - 1))
        raw = bytearray(recs[k])
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
        recs[k] = bytes(raw)
    spec = {name: VarLen({"f": "float32", "i": "int64", "b": "bytes"}[name])
            for name in selected}
    try:
        want = [decode_example(r, spec) for r in recs]
    except DecodeError:
        with pytest.raises(DecodeError):
            decode_batch(recs, spec)
        return
    got = decode_batch(recs, spec)
    for name in selected:
        values = [w[name] for w in want]
        assert got[name].row_lengths.tolist() == [len(v) for v in values]
        assert same(got[name].values, np.concatenate(values))


def test_left_out_features_are_not_looked_into_as_tensorflow_does():
    recs = [example_bytes(image=[1.0, 2.0], label=[5, 6]) for _ in range(4)]
    raw = bytearray(recs[2])
    pos = raw.index(bytes([5, 6]))  # the packed label varints
    raw[pos + 1] = 0x86  # the last varint now runs past its packed field
    recs[2] = bytes(raw)
    with pytest.raises(DecodeError, match=r"record 2: .*'label'"):
        decode_batch(recs, {"image": FixedLen(2), "label": VarLen("int64")})
    # tf.io.parse_example with only "image" in its spec accepts record 2 too
    got = decode_batch(recs, {"image": FixedLen(2)})["image"]
    assert got.tolist() == [[1.0, 2.0]] * 4
    assert decode_example(recs[2], {"image": FixedLen(2)})["image"].tolist() == [1.0, 2.0]


# --- a FixedLen no record can hold is refused before anything is allocated for it -------------

def test_a_huge_fixedlen_is_refused_naming_the_feature_before_allocating(impl):
    """FixedLen((2**40,)) made every batch decoder ask numpy for terabytes (MemoryError) and
    FixedLen(shape, default=…) made its default before checking; FixedLen((2**28,)) took
    1 GiB per record before finding that the records hold 3 values. Every decoder now refuses
    such a spec with a DecodeError (an OfindexError) naming the feature, having allocated a
    few KiB at most."""
    import tracemalloc

    from ofindex.decode import decode_sequence_example
    from ofindex.encode import encode_example, encode_sequence_example

    records = [encode_example({"x": np.zeros(3, np.float32), "n": [1, 2]})] * 4
    seq = encode_sequence_example({"x": [1.5]}, {"s": [[1.5]]})
    huge = {"x": FixedLen((2**40,))}
    calls = [lambda: BatchDecoder(huge)(records), lambda: decode_example(records[0], huge),
             lambda: Decoder(huge)(records[0]), lambda: decode_ofrecord(records[0], huge),
             lambda: BatchDecoder({"n": FixedLen((2**20, 2**20), "int64")})(records),
             lambda: decode_sequence_example(seq, huge, {"s": FixedLen(1)}),
             lambda: decode_sequence_example(seq, {}, {"s": FixedLen((1 << 33,))})]
    tracemalloc.start()
    try:
        for call in calls:
            with pytest.raises(DecodeError, match=r"feature '[xns]': FixedLen\(.*\) asks for "
                               r".* values per record.*more than any record holds"):
                call()
        with pytest.raises(DecodeError, match=r"record 0: feature 'x': FixedLen\(268435456,\) "
                           "asks for 268,435,456 float32 values.*no record here is longer than"):
            BatchDecoder({"x": FixedLen((2**28,))})(records)
        with pytest.raises(DecodeError, match="a FixedLen with a default: FixedLen"):
            FixedLen((2**40,), default=0.0)
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()
    assert isinstance(DecodeError("x"), OfindexError)
    ok = BatchDecoder({"x": FixedLen(3), "n": FixedLen(2, "int64", default=0)})(records)
    assert ok["x"].shape == (4, 3) and ok["n"].tolist() == [[1, 2]] * 4
