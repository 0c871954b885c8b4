"""Batches of records with different byte layouts (a JPEG of varying size per record):
decoded through protobuf's compiled parser (``ofindex.decode._protobuf``) when every record
plainly fits the spec, through the careful walk otherwise; either way the batch equals its
records decoded one by one, and a record that does not fit is reported as before."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from ofindex.decode import (
    FixedLen,
    VarLen,
    _protobuf,
    batch,
    decode_batch,
    decode_example,
    decode_ofrecord,
)
from ofindex.errors import DecodeError
from ofindex.proto import example_pb2, ofrecord_pb2
from tests.kit.helpers import same

SPEC = {"jpeg": FixedLen((), "bytes"), "label": FixedLen((), "int64"),
        "size": FixedLen((2,), "int64"), "tags": VarLen("bytes")}


def example(k: int, **drop: bool) -> bytes:
    rng = np.random.default_rng(k)
    ex = example_pb2.Example()
    f = ex.features.feature
    f["jpeg"].bytes_list.value.append(rng.bytes(int(rng.integers(10, 3000))))
    if not drop.get("label"):
        f["label"].int64_list.value.append(int(rng.integers(-(2**62), 2**62)))
    f["size"].int64_list.value.extend(rng.integers(1, 5000, 2).tolist())
    f["box"].float_list.value.extend(rng.random(4).astype(np.float32).tolist())
    f["tags"].bytes_list.value.extend(rng.bytes(3) for _ in range(int(rng.integers(0, 4))))
    return ex.SerializeToString()


def singles(records: list[bytes], spec: dict) -> dict:
    rows = [decode_example(r, spec) for r in records]
    return {name: [row[name] for row in rows] for name in spec}


def test_varied_layouts_take_the_compiled_parser_and_equal_single_decodes(monkeypatch):
    records = [example(k) for k in range(40)]
    assert len(set(map(len, records))) > 5  # no shared layout to decode together
    calls = []
    real = _protobuf.decode_parsed
    # records laid out as writers lay them out are located in compiled code first: the
    # parser is for the records that stage leaves (and for builds without the compiled module)
    monkeypatch.setattr(batch, "decode_located", lambda *a: None)
    monkeypatch.setattr("ofindex.decode.batch.decode_parsed",
                        lambda *a: calls.append(1) or real(*a))
    got = decode_batch(records, SPEC)
    assert calls, "the compiled parser was not tried"
    want = singles(records, SPEC)
    assert got["jpeg"].dtype == object and list(got["jpeg"]) == [x.item() if hasattr(
        x, "item") else x for x in want["jpeg"]]
    assert same(got["label"], np.stack(want["label"]))
    assert same(got["size"], np.stack(want["size"]))
    assert got["tags"].row_lengths.tolist() == [len(t) for t in want["tags"]]
    assert list(got["tags"].values) == [t for row in want["tags"] for t in row]


def test_a_record_missing_a_feature_gets_its_default_through_the_careful_path():
    records = [example(k) for k in range(10)] + [example(99, label=True)]
    spec = dict(SPEC, label=FixedLen((), "int64", default=-7))
    got = decode_batch(records, spec)
    assert got["label"][-1] == -7
    assert same(got["label"][:-1], np.stack(singles(records[:-1], spec)["label"]))


@pytest.mark.parametrize("case", ["missing", "kind", "count", "garbage"])
def test_records_that_do_not_fit_are_reported_as_before(case):
    records = [example(k) for k in range(10)]
    spec = dict(SPEC)
    if case == "missing":
        records.append(example(50, label=True))
        want = "record 10: feature 'label' is missing"
    elif case == "kind":
        spec["label"] = FixedLen((), "float32")
        want = "record 0: feature 'label': asked for float32"
    elif case == "count":
        spec["size"] = FixedLen((3,), "int64")
        want = "record 0: feature 'size': FixedLen shape (3,) needs 3"
    else:
        records.insert(3, b"\xff\xff\xff")
        want = "record 3"
    with pytest.raises(DecodeError, match=want.replace("(", r"\(").replace(")", r"\)")):
        decode_batch(records, spec)


def test_ofrecord_records_of_varied_layouts():
    records = []
    for k in range(20):
        rng = np.random.default_rng(k)
        rec = ofrecord_pb2.OFRecord()
        rec.feature["raw"].bytes_list.value.append(rng.bytes(int(rng.integers(1, 500))))
        rec.feature["id"].int32_list.value.append(int(rng.integers(-(2**31), 2**31)))
        rec.feature["w"].double_list.value.extend(rng.random(2).tolist())
        records.append(rec.SerializeToString())
    spec = {"raw": FixedLen((), "bytes"), "id": FixedLen((), "int32")}
    got = decode_batch(records, spec, kind="ofrecord")
    rows = [decode_ofrecord(r, spec) for r in records]
    assert list(got["raw"]) == [r["raw"].item() if hasattr(r["raw"], "item") else r["raw"]
                                for r in rows]
    assert same(got["id"], np.stack([r["id"] for r in rows]))


def test_float_nan_payloads_come_back_bit_exact():
    """Float features stay on the careful path: a signalling NaN's bits are kept."""
    snan = struct.unpack("<f", struct.pack("<I", 0x7F800001))[0]
    records = []
    for k in range(12):
        ex = example_pb2.Example()
        ex.features.feature["jpeg"].bytes_list.value.append(b"j" * (10 + 17 * k))
        ex.features.feature["x"].float_list.value.append(1.5)
        raw = bytearray(ex.SerializeToString())
        at = raw.index(struct.pack("<f", 1.5))
        raw[at:at + 4] = struct.pack("<I", 0x7F800001 + k)  # NaNs with payloads, signalling
        records.append(bytes(raw))
    got = decode_batch(records, {"jpeg": FixedLen((), "bytes"), "x": FixedLen((), "float32")})
    assert got["x"].view(np.uint32).tolist() == [0x7F800001 + k for k in range(12)]
    assert np.isnan(snan)


def test_long_numeric_and_float_features_stay_on_the_careful_path():
    assert _protobuf.eligible({"a": FixedLen((64,), "int64")})
    assert not _protobuf.eligible({"a": FixedLen((65,), "int64")})
    assert not _protobuf.eligible({"a": FixedLen((), "float32")})
    assert not _protobuf.eligible({"a": VarLen("int64")})
    assert _protobuf.eligible({"a": VarLen("bytes")})
    assert not _protobuf.eligible({"a": None})
