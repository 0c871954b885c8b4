"""One record decoded in one compiled call (``ofindex.decode._plans``, csrc/onerecord.c):
``Decoder(spec)(data)``, ``decode_example(data)``, ``decode_ofrecord(data)`` and
``ofindex.open(..., decode=Decoder(spec))[i]`` give exactly what the careful walk gives (the
pure-Python loops), arrays of the same dtypes, shapes and values, and the same errors for
records the compiled plan leaves to it."""

from __future__ import annotations

import copy
import pickle
import sys

import numpy as np
import pytest

import ofindex
from ofindex.decode import (
    Decoder,
    FixedLen,
    VarLen,
    decode_example,
    decode_ofrecord,
    example,
)
from ofindex.errors import DecodeError
from ofindex.proto import example_pb2, ofrecord_pb2
from tests.kit.helpers import implementation, same, varint

SPECS = {
    "scalars": {"key": FixedLen((), "bytes"), "label": FixedLen((), "int64"),
                "payload": FixedLen((), "bytes")},
    "shapes": {"image": FixedLen((2, 3), "float32"), "pair": FixedLen((1, 2), "bytes"),
               "one": FixedLen((1,), "int64"), "none": FixedLen((0,), "float32")},
    "varlen": {"tokens": VarLen("int64"), "extra": VarLen("float32"), "tags": VarLen("bytes")},
    "defaults": {"label": FixedLen((), "int64"), "gone": FixedLen((2,), "int64", default=[3, 4]),
                 "gone_too": VarLen("bytes"), "weight": FixedLen((), "float32", default=-1)},
    "as stored": ["label", "tokens", "key"],
}


def record(k: int) -> bytes:
    """An Example with every feature the specs above ask for (extremes, NaN, empty lists)."""
    rng = np.random.default_rng(k)
    ex = example_pb2.Example()
    f = ex.features.feature
    f["key"].bytes_list.value.append(b"key-%d" % k)
    f["label"].int64_list.value.append([-(2**63), 2**63 - 1, -1, 0, 300][k % 5])
    f["payload"].bytes_list.value.append(rng.bytes(int(rng.integers(0, 300))))
    f["image"].float_list.value.extend([np.nan, -0.0, np.inf, 1e-45, 3.5, k])
    f["pair"].bytes_list.value.extend([b"", b"x" * k])
    f["one"].int64_list.value.append(k)
    f["none"].float_list.value.extend([])
    f["tokens"].int64_list.value.extend(rng.integers(-3, 70_000, k % 7).tolist())
    if k % 2:
        f["extra"].float_list.value.extend(rng.standard_normal(k % 4).tolist())
    f["tags"].bytes_list.value.extend(rng.bytes(2) for _ in range(k % 3))
    if k % 3 == 0:
        f["weight"].float_list.value.append(k / 7)
    f["unasked"].int64_list.value.extend([5, 6])
    return ex.SerializeToString()


def careful(fn, *args):
    """``fn(*args)`` on the pure-Python loops: its value, or the DecodeError it raises."""
    with implementation("pure-python"):
        try:
            return fn(*args)
        except DecodeError as exc:
            return exc


def same_decoded(got, want) -> bool:
    return list(got) == list(want) and all(same(got[name], want[name]) for name in want)


def refuse_the_walk(monkeypatch) -> None:
    """Fail the test if a record is walked in Python (the earlier path of every record)."""
    def walk(*args):
        raise AssertionError("the record was walked in Python")

    monkeypatch.setattr(example, "walk", walk)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_decoder_equals_the_careful_walk_in_one_compiled_call(monkeypatch, name):
    spec = SPECS[name]
    records = [record(k) for k in range(20)]
    wants = [careful(Decoder(spec), raw) for raw in records]
    refuse_the_walk(monkeypatch)
    decoder = Decoder(spec)
    for raw, want in zip(records, wants, strict=True):
        got = decoder(raw)
        assert same_decoded(got, want), (name, got, want)
        assert all(a.flags.writeable and a.flags.c_contiguous for a in got.values())


def test_every_feature_as_stored_in_one_compiled_call(monkeypatch):
    records = [record(k) for k in range(20)]
    empty = example_pb2.Example()
    empty.features.feature["nothing"].Clear()  # an empty Feature: no float32 values
    records.append(empty.SerializeToString())
    records.append(b"")  # no features at all
    wants = [careful(decode_example, raw) for raw in records]
    refuse_the_walk(monkeypatch)
    for raw, want in zip(records, wants, strict=True):
        assert same_decoded(decode_example(raw), want)


def test_ofrecords_of_every_value_type_in_one_compiled_call(monkeypatch):
    rec = ofrecord_pb2.OFRecord()
    rec.feature["b"].bytes_list.value.extend([b"a", b"bc"])
    rec.feature["f"].float_list.value.extend([1.5, np.nan])
    rec.feature["d"].double_list.value.extend([1e300, -0.0])
    rec.feature["i"].int32_list.value.extend([-(2**31), 2**31 - 1, -1])
    rec.feature["l"].int64_list.value.extend([-(2**63), 2**63 - 1])
    raw = rec.SerializeToString()
    spec = {"b": VarLen("bytes"), "f": FixedLen((2,), "float32"), "d": VarLen("float64"),
            "i": FixedLen((3,), "int32"), "l": VarLen("int64")}
    want_all, want_spec = careful(decode_ofrecord, raw), careful(Decoder(spec, "ofrecord"), raw)
    refuse_the_walk(monkeypatch)
    assert same_decoded(decode_ofrecord(raw), want_all)
    assert same_decoded(Decoder(spec, "ofrecord")(raw), want_spec)
    assert want_spec["i"].dtype == np.int32 and want_spec["i"].tolist() == [-(2**31), 2**31 - 1,
                                                                             -1]


def field(number: int, body: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(body)) + body


def entry(key: bytes, feature: bytes) -> bytes:
    return field(1, field(1, key) + field(2, feature))


LABEL = entry(b"label", field(3, field(1, varint(5))))
#: Records the compiled plan leaves to the careful walk, which decodes them or words the error.
LEFT = {
    "missing": field(1, entry(b"key", field(1, field(1, b"k")))),
    "another value type": field(1, entry(b"label", field(2, field(1, bytes(4))))),
    "two values": field(1, entry(b"label", field(3, field(1, varint(1) + varint(2))))),
    "no list set": field(1, entry(b"label", b"")),
    "unpacked": field(1, entry(b"label", field(3, b"\x08" + varint(7)))),
    "a key twice": field(1, LABEL + LABEL),
    "a non-ASCII key": field(1, LABEL + entry("é".encode(), b"")),
    "unknown field": field(1, LABEL) + b"\x10\x01",
    "features twice": field(1, LABEL) + field(1, LABEL),
    "not UTF-8": field(1, LABEL + entry(b"\xff", b"")),
    "cut short": field(1, LABEL)[:-1],
    "garbage": b"\xff\xff\xff",
}


@pytest.mark.parametrize("case", sorted(LEFT))
@pytest.mark.parametrize("spec", [{"label": FixedLen((), "int64")}, None])
def test_records_left_to_the_careful_walk_decode_or_fail_as_it_says(case, spec):
    raw = LEFT[case]
    want = careful(Decoder(spec), raw)
    for decode in (Decoder(spec), lambda raw: decode_example(raw, spec)):
        try:
            got = decode(raw)
        except DecodeError as exc:
            assert isinstance(want, DecodeError) and str(exc) == str(want), (case, exc, want)
        else:
            assert not isinstance(want, DecodeError), (case, got, want)
            assert same_decoded(got, want), (case, got, want)


def test_bytes_like_records_take_the_compiled_path_too(monkeypatch):
    raw = record(3)
    want, want_all = careful(Decoder(SPECS["scalars"]), raw), careful(decode_example, raw)
    refuse_the_walk(monkeypatch)
    for data in (bytearray(raw), memoryview(raw), np.bytes_(raw)):
        assert same_decoded(Decoder(SPECS["scalars"])(data), want)
        assert same_decoded(decode_example(data), want_all)


def test_a_decoder_pickles_copies_and_compares_by_its_spec(monkeypatch):
    decoder = Decoder(SPECS["defaults"])
    raw = record(2)
    want = careful(decoder, raw)
    for other in (pickle.loads(pickle.dumps(decoder)), copy.deepcopy(decoder)):
        assert other == decoder and other is not decoder
        refuse_the_walk(monkeypatch)  # the copy made its own compiled plan
        assert same_decoded(other(raw), want)
    assert Decoder(SPECS["scalars"]) != decoder


def test_a_decoder_made_without_the_compiled_module_walks_in_python():
    with implementation("pure-python"):
        decoder = Decoder(SPECS["scalars"])
    assert decoder._plan is None  # every record goes the careful way


def test_a_dataset_decodes_its_records_in_one_compiled_call(tmp_path, monkeypatch):
    records = [record(k) for k in range(30)]
    with ofindex.Writer(str(tmp_path / "part-0")) as writer:
        writer.write_many(records)
    spec = SPECS["scalars"]
    wants = [careful(Decoder(spec), raw) for raw in records]
    refuse_the_walk(monkeypatch)
    with ofindex.open(str(tmp_path), decode=Decoder(spec)) as ds:
        for i, want in enumerate(wants):
            assert same_decoded(ds[i], want)
        assert all(same_decoded(got, want) for got, want in zip(ds[[4, 2]], [wants[4], wants[2]],
                                                                strict=True))


# ---- one record without a Python frame of ours -------------------------------------------

def python_calls(fn, *args) -> list[str]:
    """The Python functions that ``fn(*args)`` runs (their names, in order; ``fn`` itself
    when it is one)."""
    seen: list[str] = []

    def profile(frame, event, arg):
        if event == "call":
            seen.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return seen


def test_one_decoded_record_runs_no_python_frame_but_the_public_call(tmp_path):
    # Decoder's Python __call__ (and decode_example's lookup of its plan) took a third of a
    # record's decode, whose whole is as long as protobuf's Example.FromString
    records = [record(k) for k in range(3)]
    spec = SPECS["scalars"]
    decoder = Decoder(spec)
    assert python_calls(decoder, records[1]) == []
    assert python_calls(decode_example, records[1]) == ["decode_example"]
    rec = ofrecord_pb2.OFRecord()
    rec.feature["label"].int64_list.value.append(3)
    assert python_calls(decode_ofrecord, rec.SerializeToString()) == ["decode_ofrecord"]
    with ofindex.Writer(str(tmp_path / "part-0")) as writer:
        writer.write_many(records)
    with ofindex.open(str(tmp_path), decode=Decoder(spec)) as ds:
        ds[0]  # (the first read loads the shard's index)
        assert python_calls(ds.__getitem__, 2) == ["__getitem__"]
        assert same_decoded(ds[2], careful(Decoder(spec), records[2]))


def test_a_decoder_pickles_with_every_protocol_and_decodes_compiled(monkeypatch):
    decoder = Decoder(SPECS["varlen"])
    raw = record(5)
    want = careful(decoder, raw)
    refuse_the_walk(monkeypatch)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        other = pickle.loads(pickle.dumps(decoder, protocol=protocol))
        assert type(other) is Decoder and other == decoder, protocol
        assert same_decoded(other(raw), want), protocol
        assert python_calls(other, raw) == [], protocol
    for other in (copy.copy(decoder), copy.deepcopy(Decoder(SPECS["varlen"], "ofrecord"))):
        assert other._plan is not None and other.spec == decoder.spec


def test_records_of_other_names_and_orders_in_turn_decode_as_the_careful_walk(monkeypatch):
    # the compiled plans remember each map entry's name (and the asked-for feature it
    # matched) from the record before: records that differ must not be read as the one before
    def example(pairs: list[tuple[str, int]]) -> bytes:
        ex = example_pb2.Example()
        for name, value in pairs:
            ex.features.feature[name].int64_list.value.append(value)
        return ex.SerializeToString()

    records = [example([("ab", 1), ("cd", 2)]), example([("cd", 3), ("ab", 4)]),
               example([("ab", 5), ("xy", 6)]), example([("xy", 7), ("ab", 12)]),
               example([("ab", 8)]), example([("ba", 9), ("ab", 10), ("cd", 11)])] * 2
    spec = {"ab": FixedLen((), "int64"), "cd": FixedLen((), "int64", default=-1)}
    wants = [(careful(decode_example, raw), careful(Decoder(spec), raw)) for raw in records]
    refuse_the_walk(monkeypatch)
    decoder = Decoder(spec)
    for raw, (want_all, want) in zip(records, wants, strict=True):
        got_all, got = decode_example(raw), decoder(raw)
        assert same_decoded(got_all, want_all), (got_all, want_all)
        assert same_decoded(got, want), (got, want)


def test_ofindex_get_decode_decodes_in_one_compiled_call(tmp_path, monkeypatch, capsys):
    from ofindex.cli import EXIT_OK, main

    records = [record(k) for k in range(4)]
    with ofindex.Writer(str(tmp_path / "part-0")) as writer:
        writer.write_many(records)
    with implementation("pure-python"):
        assert main(["get", str(tmp_path), "1", "3", "--decode"]) == EXIT_OK
    want = capsys.readouterr().out
    refuse_the_walk(monkeypatch)
    assert main(["get", str(tmp_path), "1", "3", "--decode"]) == EXIT_OK
    got = capsys.readouterr().out
    assert got == want and "# record 3 " in got and "label" in got
