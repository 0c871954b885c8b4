"""Fuzzing the decoders (``ofindex.decode``) over mutated payloads, compared with protobuf.

tests/decode/test_decode.py flips one byte of small messages; here payloads take several
mutations at once — bytes set, runs deleted or duplicated, truncation, and fields whose length
varint claims 2**31, 2**40 or 2**63 bytes ("length bombs") inserted anywhere — and batches of
MNIST-like records with some records mutated go through ``decode_batch``'s shared-layout fast
path (compiled and pure Python). The property: protobuf's parse when protobuf accepts the
bytes, ``DecodeError`` when it refuses them; a batch equals its records decoded one by one;
never another exception, and no allocation beyond a few times the payload.

Every target has a default-tier test (a fixed set of inputs, tests/kit/fuzzkit.py) and a fuzz-tier
twin (``test_explore_*``: fresh inputs, ``bash tools/run-fuzz.sh``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ofindex.decode import (
    FixedLen,
    VarLen,
    decode_batch,
    decode_example,
    decode_ofrecord,
    decode_sequence_example,
    from_message,
)
from ofindex.errors import DecodeError
from ofindex.proto import example_pb2, ofrecord_pb2
from tests.kit.fuzzkit import Tally, budget, explore, guarded
from tests.kit.helpers import implementation, same, same_dict, varint

TALLY_SINGLE = Tally("decoders, mutated payloads vs protobuf")
TALLY_BATCH = Tally("decode_batch, batches with mutated records")
BOMBS = [2**31, 2**32 + 5, 2**40, 2**63 - 1, 2**64 - 1]
SPEC = {"image": FixedLen((2, 3)), "label": FixedLen((), "int64"), "tags": VarLen("bytes")}
#: Bytes and integer features only: records of different layouts go through protobuf's
#: compiled parser first (ofindex.decode._protobuf), then the careful walk.
PARSED_SPEC = {"label": FixedLen((), "int64"), "tags": VarLen("bytes")}




def message(rng: np.random.Generator, kind: str) -> bytes:
    """A valid message of ``kind`` with a few features of every value type, its map entries
    in a fixed order (upb serializes maps in an order that changes from one process to the
    next: the mutations would hit other bytes on every run)."""
    if kind == "ofrecord":
        rec = ofrecord_pb2.OFRecord()
        rec.feature["img"].float_list.value.extend(rng.random(int(rng.integers(0, 6))))
        rec.feature["id"].int32_list.value.extend(rng.integers(-9, 9, int(rng.integers(0, 4))))
        rec.feature["raw"].bytes_list.value.append(rng.bytes(int(rng.integers(0, 9))))
        return rec.SerializeToString(deterministic=True)
    ex = example_pb2.Example()
    ex.features.feature["f"].float_list.value.extend(rng.random(int(rng.integers(0, 6))))
    ex.features.feature["i"].int64_list.value.extend(
        rng.integers(-(2**62), 2**62, int(rng.integers(0, 4))).tolist())
    ex.features.feature["b"].bytes_list.value.append(rng.bytes(int(rng.integers(0, 9))))
    if kind == "example":
        return ex.SerializeToString(deterministic=True)
    seq = example_pb2.SequenceExample(context=ex.features)
    for _ in range(int(rng.integers(0, 3))):
        seq.feature_lists.feature_list["s"].feature.add().int64_list.value.extend(
            rng.integers(0, 99, int(rng.integers(0, 3))).tolist())
    return seq.SerializeToString(deterministic=True)


@st.composite
def mutated(draw, raw: bytes) -> bytes:
    buf = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["set", "set", "delete", "duplicate", "truncate", "bomb"]))
        at = draw(st.integers(0, len(buf)))
        if kind == "set" and at < len(buf):
            buf[at] = draw(st.integers(0, 255))
        elif kind == "delete":
            del buf[at : at + draw(st.integers(1, 4))]
        elif kind == "duplicate":
            buf[at:at] = buf[at : at + draw(st.integers(1, 8))]
        elif kind == "truncate":
            del buf[at:]
        elif kind == "bomb":  # a length-delimited field claiming a huge length
            field = draw(st.integers(1, 4))
            buf[at:at] = varint(field << 3 | 2) + varint(draw(st.sampled_from(BOMBS)))
    return bytes(buf)


PARSERS = {
    "example": (example_pb2.Example, decode_example),
    "sequence": (example_pb2.SequenceExample, decode_sequence_example),
    "ofrecord": (ofrecord_pb2.OFRecord, decode_ofrecord),
}


def expected(kind: str, parsed):
    if kind == "sequence":
        ctx = from_message(example_pb2.Example(features=parsed.context))
        return ctx, None  # feature lists: compared through their row lengths below
    return from_message(parsed)


@st.composite
def mutated_messages(draw) -> tuple[str, bytes]:
    """``(kind, payload)``: a valid message of a kind, mutated."""
    kind = draw(st.sampled_from(sorted(PARSERS)))
    seed = draw(st.integers(0, 2**32 - 1))
    return kind, draw(mutated(message(np.random.default_rng(seed), kind)))


@budget(1200)
@given(mutated_messages())
def test_single_decoders_agree_with_protobuf(case):
    check_single_decoder(*case)


@explore(12000)
@given(mutated_messages())
def test_explore_single_decoders_agree_with_protobuf(case):
    check_single_decoder(*case)


def check_single_decoder(kind: str, raw: bytes) -> None:
    TALLY_SINGLE.input()
    message_type, decode = PARSERS[kind]
    outcome, got = guarded(lambda: decode(raw), 8 * len(raw), TALLY_SINGLE, kind)
    try:
        parsed = message_type.FromString(raw)
    except Exception:
        assert outcome == "DecodeError", (kind, raw, got)  # protobuf refuses: so must we
        return
    if outcome != "ok":  # protobuf accepts; we may refuse only what a spec-less decode cannot
        assert isinstance(got, DecodeError) and "different value types" in str(got), got
        return
    try:
        want = expected(kind, parsed)
    except UnicodeDecodeError:  # a proto2 map key that is not UTF-8: protobuf cannot list it
        return
    if kind == "sequence":
        ctx, lists = got
        assert same_dict(ctx, want[0])
        for name, fl in parsed.feature_lists.feature_list.items():
            assert lists[name].row_lengths.tolist() == [
                len(getattr(f, f.WhichOneof("kind")).value) if f.WhichOneof("kind") else 0
                for f in fl.feature]
    else:
        assert same_dict(got, want)


def _batch_record(rng: np.random.Generator) -> bytes:
    ex = example_pb2.Example()
    ex.features.feature["image"].float_list.value.extend(rng.random(6, np.float32))
    ex.features.feature["label"].int64_list.value.append(int(rng.integers(0, 300)))
    ex.features.feature["tags"].bytes_list.value.extend(
        [b"t" * int(rng.integers(0, 4))] * int(rng.integers(0, 3)))
    return ex.SerializeToString(deterministic=True)


@st.composite
def mutated_batches(draw) -> list[bytes]:
    """1-12 records of one layout, up to 3 of them mutated."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    records = [_batch_record(rng) for _ in range(draw(st.integers(1, 12)))]
    for k in sorted(draw(st.sets(st.integers(0, len(records) - 1), max_size=3))):
        records[k] = draw(mutated(records[k]))
    return records


BATCHES = (mutated_batches(), st.sampled_from(["compiled", "pure-python"]),
           st.sampled_from([SPEC, PARSED_SPEC]))


@budget(300)
@given(*BATCHES)
def test_batches_with_mutated_records_equal_single_decodes(records, impl, spec):
    check_batch(records, impl, spec)


@explore(3000)
@given(*BATCHES)
def test_explore_batches_with_mutated_records_equal_single_decodes(records, impl, spec):
    check_batch(records, impl, spec)


def check_batch(records: list[bytes], impl: str, spec: dict) -> None:
    TALLY_BATCH.input()
    n = len(records)
    limit = 16 * sum(len(r) for r in records) + 64 * n
    with implementation(impl):
        outcome, got = guarded(lambda: decode_batch(records, spec), limit, TALLY_BATCH, impl)
        singles = []
        for r in records:
            try:
                singles.append(decode_example(r, spec))
            except DecodeError:
                singles.append(None)
    if any(s is None for s in singles):
        assert outcome == "DecodeError", got  # a record refused alone is refused in a batch
        return
    assert outcome == "ok", got
    for name in ("image", "label") if spec is SPEC else ("label",):
        assert same(got[name], np.stack([s[name] for s in singles]))
    assert got["tags"].row_lengths.tolist() == [len(s["tags"].values if hasattr(
        s["tags"], "values") else s["tags"]) for s in singles]
    assert [bytes(x) for x in got["tags"].values] == [bytes(x) for s in singles
                                                      for x in s["tags"]]


@pytest.mark.parametrize("bomb", BOMBS)
@pytest.mark.parametrize("kind", sorted(PARSERS))
def test_length_bombs_are_refused_without_allocating(kind, bomb):
    # a length-delimited field claiming more bytes than the payload holds
    raw = message(np.random.default_rng(1), kind) + varint(1 << 3 | 2) + varint(bomb) + b"x"
    outcome, _ = guarded(lambda: PARSERS[kind][1](raw), 8 * len(raw), TALLY_SINGLE, "bomb")
    assert outcome == "DecodeError"
