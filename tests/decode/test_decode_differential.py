"""The decoders accept exactly the bytes protobuf's own parser accepts, and decode them to the
values protobuf gives; they refuse (``DecodeError``) exactly the bytes protobuf refuses.

The reference is ``ParseFromString`` of protobuf 7 (upb; tests/kit/protobuf_oracle.py asks it in
a process of its own when the installed protobuf is older). Records are written by
hand (tests/kit/wiregen.py: unknown fields of every wire type at every nesting level, groups in
groups, overlong tags and lengths, repeated and merged messages, packed and unpacked lists)
and mutated byte by byte. Single records go through ``decode_example``,
``decode_sequence_example`` and ``decode_ofrecord`` with every feature decoded; batches go
through ``decode_batch`` on the compiled and the pure-Python loops (with a spec, features left
out of it are not looked into, as in TensorFlow's parser: there only the asked-for features
are held to protobuf's answer).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ofindex.decode import (
    Decoder,
    FixedLen,
    VarLen,
    decode_batch,
    decode_example,
    decode_ofrecord,
    decode_sequence_example,
)
from ofindex.errors import DecodeError
from tests.kit.fuzzkit import Tally, guarded
from tests.kit.helpers import implementation, same, same_dict
from tests.kit.protobuf_oracle import DTYPES, MESSAGES, protobuf_answer
from tests.kit.wiregen import (
    EGROUP,
    LEN,
    MAX_DEPTH,
    RECORDS,
    SGROUP,
    VARINT,
    mutated,
    records,
    varint,
)

TALLY_SINGLE = Tally("decoders vs protobuf, hand-written and mutated records")
TALLY_BATCH = Tally("decode_batch vs protobuf, hand-written and mutated records")
#: deterministic: the same inputs on every run (failures found are kept as @example below)
SETTINGS = settings(max_examples=600, derandomize=True, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))
DECODERS = {"example": decode_example, "sequence": decode_sequence_example,
            "ofrecord": decode_ofrecord}


# ---- protobuf's answer: tests/kit/protobuf_oracle.py ----------------------------------------

def _plain(answer: dict[Any, tuple[str | None, np.ndarray]]) -> dict[Any, np.ndarray]:
    return {name: values for name, (_, values) in answer.items()}


def _check_sequence(got: Any, want: Any) -> None:
    context, lists = got
    assert same_dict(context, _plain(want[0]))
    assert set(lists) == set(want[1])
    for name, steps in want[1].items():
        kinds = {which for which, _ in steps if which is not None}
        assert len(kinds) <= 1  # mixed value types: refused (checked by the caller)
        dtype = DTYPES[kinds.pop()] if kinds else np.dtype(np.float32)
        values = [v.astype(dtype) for _, v in steps]
        flat = np.concatenate(values) if values else np.empty(0, dtype)
        assert same(lists[name].values, flat), name
        assert lists[name].row_lengths.tolist() == [len(v) for v in values], name


def check_single(kind: str, raw: bytes) -> str:
    """Decode ``raw`` with every feature and compare with protobuf; returns the outcome."""
    want = protobuf_answer(kind, raw)
    outcome, got = guarded(lambda: DECODERS[kind](raw), 8 * len(raw), TALLY_SINGLE, kind)
    if want is None:
        assert outcome == "DecodeError", (kind, raw.hex(), got)
        return outcome
    if kind == "sequence" and outcome != "ok":  # the one refusal of a spec-less decode
        assert isinstance(got, DecodeError) and "different value types" in str(got), got
        return outcome
    assert outcome == "ok", (kind, raw.hex(), got)
    if kind == "sequence":
        _check_sequence(got, want)
    else:
        assert same_dict(got, _plain(want)), (kind, raw.hex())
    return outcome


# ---- the rules, one by one (each was broken once: regression tests) ------------------------

def ld(field: int, body: bytes, pad: int = 0) -> bytes:
    """A length-delimited field whose length has ``pad`` redundant bytes."""
    return varint(field << 3 | LEN) + varint(len(body), pad) + body


def group(field: int, inside: bytes = b"", end: int | None = None, pad: int = 0) -> bytes:
    """An unknown group; ``pad`` redundant bytes in its end tag."""
    return (varint(field << 3 | SGROUP) + inside
            + varint((field if end is None else end) << 3 | EGROUP, pad))


def nested_groups(depth: int) -> bytes:
    return (b"".join(varint(7 << 3 | SGROUP) for _ in range(depth))
            + b"".join(varint(7 << 3 | EGROUP) for _ in range(depth)))


def _in_list(kind: str, body: bytes) -> bytes:
    """``body`` placed inside an int64 list message of a record of ``kind``."""
    feature = ld(3 if kind != "ofrecord" else 5, body)
    entry = ld(1, ld(1, b"k") + ld(2, feature))
    if kind == "ofrecord":
        return entry
    if kind == "example":
        return ld(1, entry)
    return ld(2, ld(1, ld(1, b"k") + ld(2, ld(1, feature))))  # a feature list's step


#: nesting level of a list message: OFRecord 3, Example 4, a feature list's step 5
LIST_LEVEL = {"ofrecord": 3, "example": 4, "sequence": 5}
UNKNOWN_VARINT = varint(3 << 3 | VARINT)  # field 3 of an OFRecord: unknown
EDGES = {
    # tags: at most 5 bytes, below 2**32 (a tag of 6 bytes was taken)
    "tag of 5 bytes": varint(3 << 3 | VARINT, 4) + b"\x01",
    "tag of 6 bytes": varint(3 << 3 | VARINT, 5) + b"\x01",
    "tag of 2**32 and more": varint(2**32 + (3 << 3 | VARINT)) + b"\x01",
    "start-group tag of 6 bytes": varint(3 << 3 | SGROUP, 5) + varint(3 << 3 | EGROUP),
    "end-group tag of 5 bytes": group(3, pad=4),
    "end-group tag of 6 bytes": group(3, pad=5),
    "tag of 6 bytes inside a group": group(3, varint(5 << 3 | VARINT, 5) + b"\x00"),
    "tag of 6 bytes in a map entry": ld(1, varint(3 << 3 | VARINT, 5) + b"\x00"),
    # field number 0: refused in a message, taken inside a group (it was refused there)
    "field 0 in the record": b"\x00\x01",
    "field 0 in a map entry": ld(1, b"\x00\x01"),
    "field 0 in a Feature": ld(1, ld(2, b"\x00\x01")),
    "field 0 varint inside a group": group(3, b"\x00\x01"),
    "field 0 length-delimited inside a group": group(3, b"\x02\x01x"),
    "field 0 fixed32 inside a group": group(3, b"\x05abcd"),
    "field 0 group inside a group": group(3, group(0)),
    "field 0 inside a group in a map entry": ld(1, group(3, b"\x00\x01")),
    "field 0 group in the record": group(0),
    "group closed by another field": group(3, end=4),
    "group closed by field 0": group(3, end=0),
    # lengths: at most 5 bytes (a length of 6 to 10 bytes was taken)
    "length of 5 bytes": ld(3, b"xy", pad=4),
    "length of 6 bytes": ld(3, b"xy", pad=5),
    "length of 10 bytes": ld(3, b"", pad=9),
    "length of 6 bytes inside a group": group(3, ld(5, b"", pad=5)),
    "map entry length of 6 bytes": ld(1, ld(1, b"k"), pad=5),
    "key length of 6 bytes": ld(1, ld(1, b"k", pad=5)),
    "key length of 5 bytes": ld(1, ld(1, b"k", pad=4)),
    "list length of 10 bytes": ld(1, ld(2, ld(5, ld(1, b"\x01"), pad=9))),
    "packed run length of 6 bytes": ld(1, ld(2, ld(5, ld(1, b"\x01", pad=5)))),
    "bytes value length of 6 bytes": ld(1, ld(2, ld(1, ld(1, b"v", pad=5)))),
    "length 2**31 - 1": varint(3 << 3 | LEN) + varint(2**31 - 1) + b"x",
    # varints: at most 10 bytes, bits past the 64th dropped
    "varint of 10 bytes, high bits set": UNKNOWN_VARINT + b"\xff" * 9 + b"\x7f",
    "varint of 11 bytes": UNKNOWN_VARINT + b"\x80" * 10 + b"\x00",
    "varint of 10 bytes inside a group": group(3, varint(5 << 3) + varint(0, 9)),
    # groups: closed, and nested no deeper than protobuf's limit counting the messages around
    "group left open": varint(3 << 3 | SGROUP),
    "end-group tag in the record": varint(3 << 3 | EGROUP),
    "end-group tag in a map entry": ld(1, varint(3 << 3 | EGROUP)),
    "wire type 6 inside a group": group(3, varint(5 << 3 | 6)),
}
for _depth in (MAX_DEPTH, MAX_DEPTH + 1):
    EDGES[f"{_depth} groups in the record"] = nested_groups(_depth)
    EDGES[f"{_depth - 1} groups in a map entry"] = ld(1, nested_groups(_depth - 1))
    EDGES[f"{_depth - 2} groups in a Feature"] = ld(1, ld(2, nested_groups(_depth - 2)))



@pytest.mark.parametrize("name", sorted(EDGES))
def test_wire_rules_match_protobuf_ofrecord(name):
    check_single("ofrecord", EDGES[name])


@pytest.mark.parametrize("kind", sorted(LIST_LEVEL))
@pytest.mark.parametrize("extra", [0, 1])
def test_group_depth_inside_lists_matches_protobuf(kind, extra):
    depth = MAX_DEPTH - LIST_LEVEL[kind] + extra  # the deepest protobuf takes, and one more
    outcome = check_single(kind, _in_list(kind, ld(1, b"\x05") + nested_groups(depth)))
    assert outcome == ("ok" if not extra else "DecodeError")


@pytest.mark.usefixtures("impl")  # compiled and pure-Python loops
@pytest.mark.parametrize("pad", [4, 5, 9])
def test_batches_refuse_the_lengths_protobuf_refuses(pad):
    # records laid out as writers lay them out, but with an overlong length: the compiled
    # walk of such records took lengths of 6 to 10 bytes
    def record(label: int, key_pad: int = 0, list_pad: int = 0) -> bytes:
        label_entry = ld(1, ld(1, b"label", key_pad) + ld(2, ld(3, ld(1, varint(label)))))
        image_entry = ld(1, ld(1, b"img") + ld(2, ld(2, ld(1, b"\0" * 8, list_pad))))
        return ld(1, label_entry + image_entry)

    spec = {"label": FixedLen((), "int64"), "img": FixedLen((2,), "float32")}
    for label, key_pad, list_pad in ((200, pad, 0), (3000000, 0, pad)):
        batch = [record(1), record(label, key_pad, list_pad), record(2**40)]
        accepted = protobuf_answer("example", batch[1]) is not None
        assert accepted == (pad <= 4)
        outcome, got = guarded(lambda batch=batch: decode_batch(batch, spec), 1 << 20)
        assert outcome == ("ok" if accepted else "DecodeError"), got
        if accepted:
            assert got["label"].tolist() == [1, label, 2**40]


# ---- properties ----------------------------------------------------------------------------

CASES = st.sampled_from(sorted(RECORDS)).flatmap(
    lambda kind: st.tuples(st.just(kind), records(kind)))


@SETTINGS
# found before the fix (by this test, and by a scratch run of the same generator): a tag of
# 6 bytes in a map entry; a group in a map entry closed by an end-group tag of 6 bytes
@example(case=("ofrecord", b"\n\x16\t" + bytes(8) + b"\n\x01a\n\x01a\x8a\x80\x80\x80\x80\x00\x00"))
@example(case=("ofrecord", bytes.fromhex("0a160a02fffefbffffff0f2df62ffc67fcffffff8f001200")))
@given(case=CASES)
@pytest.mark.slow
def test_decoders_match_protobuf(case):
    kind, raw = case
    TALLY_SINGLE.input()
    check_single(kind, raw)


#: per family: list kind -> (spec dtype, protobuf's list name)
FAMILY_KINDS = {
    "example": {"bytes": "bytes_list", "float32": "float_list", "int64": "int64_list"},
    "ofrecord": {"bytes": "bytes_list", "float32": "float_list", "float64": "double_list",
                 "int32": "int32_list", "int64": "int64_list"},
}


@st.composite
def batch_case(draw: st.DrawFn, kind: str) -> tuple[dict[str, Any], list[bytes]]:
    """A spec and records written for it by protobuf's serializer (values of random widths:
    records of one layout and of several), some then mutated or given an unknown field."""
    names = draw(st.lists(st.sampled_from(["a", "b", "img", "label"]), min_size=1,
                          max_size=3, unique=True))
    kinds = FAMILY_KINDS[kind]
    layout = {name: (draw(st.sampled_from(sorted(kinds))), draw(st.integers(1, 3)))
              for name in names}
    spec: dict[str, Any] = {}
    for name, (dtype, count) in layout.items():
        if not draw(st.booleans()):
            spec[name] = VarLen(dtype)
        elif draw(st.booleans()):  # a default for records that lack the feature
            spec[name] = FixedLen((count,), dtype, default=b"d" if dtype == "bytes" else 7)
        else:
            spec[name] = FixedLen((count,), dtype)
    out = []
    for _ in range(draw(st.integers(1, 6))):
        message = MESSAGES[kind]()
        features = message.features.feature if kind == "example" else message.feature
        for name, (dtype, count) in layout.items():
            if draw(st.integers(0, 7)) == 0:
                continue  # this record lacks the feature
            values = getattr(features[name], kinds[dtype]).value
            for _ in range(count if isinstance(spec[name], FixedLen) else draw(
                    st.integers(0, count))):
                if dtype == "bytes":
                    values.append(draw(st.binary(max_size=4)))
                elif dtype.startswith("float"):
                    values.append(draw(st.floats(width=int(dtype[5:]))))
                else:
                    bits = int(dtype[3:])
                    values.append(draw(st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)))
        raw = message.SerializeToString(deterministic=True)  # (upb: map order per process)
        how = draw(st.integers(0, 9))
        if how == 0:
            raw = draw(mutated(raw))
        elif how == 1:
            raw += draw(st.sampled_from([ld(5, b""), group(9, b"\x00\x01"), group(9, pad=5),
                                         ld(6, b"", pad=5)]))
        out.append(raw)
    return spec, out


def _expected_column(answers: list[Any], name: str, fs: Any) -> Any:
    """The batch column protobuf's answers give, or ``None`` when the spec does not fit."""
    dtype = np.dtype(object if fs.dtype == "bytes" else fs.dtype)
    rows = []
    for answer in answers:
        which, values = answer.get(name, (None, None))
        if which is None and isinstance(fs, VarLen):  # absent, or no list set: no values
            which, values = next(k for k, v in DTYPES.items() if v == dtype), np.empty(0, dtype)
        elif which is None and isinstance(fs, FixedLen) and fs.default is not None:
            which, values = next(k for k, v in DTYPES.items() if v == dtype), fs.default
        if which is None or DTYPES[which] != dtype:
            return None
        if isinstance(fs, FixedLen) and len(values) != fs.size:
            return None
        rows.append(values)
    if isinstance(fs, FixedLen):
        return np.stack(rows).reshape(len(rows), *fs.shape)
    return rows


def _row(column: Any, i: int, fs: Any) -> np.ndarray:
    """Record ``i``'s values in a batch column (an array, or a Ragged for VarLen)."""
    if isinstance(fs, FixedLen):
        return np.asarray(column[i])
    start = int(column.row_lengths[:i].sum())
    return np.asarray(column.values[start : start + int(column.row_lengths[i])])


#: an Example whose feature "a" is an empty bytes list
_FEATURE_A = b"\n\x0b\n\t\n\x01a\x12\x04\n\x02\n\x00"
BATCH_CASES = st.sampled_from(sorted(FAMILY_KINDS)).flatmap(
    lambda kind: st.tuples(st.just(kind), batch_case(kind)))


@SETTINGS
# found by this test before the fix: a group closed by an end-group tag of 6 bytes, field
# number 0 inside a group
@example(case=("example", ({"a": VarLen("bytes")}, [_FEATURE_A + b"K\xcc\x80\x80\x80\x80\x00"])))
@example(case=("example", ({"a": VarLen("bytes")}, [_FEATURE_A + b"K\x00\x01L"])))
@given(case=BATCH_CASES)
@pytest.mark.slow
def test_batches_match_protobuf(impl, case):
    TALLY_BATCH.input()
    kind, (spec, batch) = case
    answers = [protobuf_answer(kind, raw) for raw in batch]
    limit = 16 * sum(map(len, batch)) + 64 * len(batch)
    outcome, got = guarded(lambda: decode_batch(batch, spec, kind), limit, TALLY_BATCH, impl)
    if any(answer is None for answer in answers):
        # protobuf refuses a record: so does the batch, unless the flaw lies only in lists
        # of features left out of the spec (not looked into), which a full decode refuses
        for raw, answer in zip(batch, answers, strict=True):
            if answer is None and outcome == "ok":
                with pytest.raises(DecodeError):
                    DECODERS[kind](raw)
        if outcome == "ok":  # and equals the records decoded one by one
            for i, raw in enumerate(batch):
                single = DECODERS[kind](raw, spec)
                for name, fs in spec.items():
                    assert same(_row(got[name], i, fs), single[name]), name
        else:
            assert outcome == "DecodeError", got
        for raw, answer in zip(batch, answers, strict=True):
            _check_one(kind, spec, raw, answer is None)
        return
    columns = {name: _expected_column(answers, name, fs) for name, fs in spec.items()}
    if any(column is None for column in columns.values()):
        assert outcome == "DecodeError", got  # a record does not fit the spec
        return
    assert outcome == "ok", got
    for name, column in columns.items():
        if isinstance(spec[name], FixedLen):
            assert same(got[name], column), name
        else:
            assert got[name].row_lengths.tolist() == [len(row) for row in column], name
            flat = np.concatenate([np.asarray(row, got[name].values.dtype) for row in column])
            assert same(got[name].values, flat), name
    for i, raw in enumerate(batch):  # one record at a time: the same values
        single = Decoder(spec, kind)(raw)
        for name, fs in spec.items():
            assert same(single[name], _row(got[name], i, fs)), name


def _check_one(kind: str, spec: dict[str, Any], raw: bytes, refused: bool) -> None:
    """``Decoder(spec, kind)(raw)`` (compiled when it can) against ``decode_*(raw, spec)`` on
    the careful walk: the same values or the same error; only a record protobuf refuses
    (``refused``) may decode where the walk fails, its flaw in a list left out of the spec."""
    outcome, got = guarded(lambda: Decoder(spec, kind)(raw), 16 * len(raw) + 4096)
    with implementation("pure-python"):
        want_outcome, want = guarded(lambda: DECODERS[kind](raw, spec), 16 * len(raw) + 4096)
    if outcome == want_outcome == "ok":
        for name in spec:
            assert same(got[name], want[name]), name
    elif outcome == want_outcome:
        assert str(got) == str(want)
    else:
        assert refused and outcome == "ok", (outcome, got, want)
