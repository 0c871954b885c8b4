"""Batches of records whose byte layouts differ (a JPEG of another size per record, token lists
of other lengths): located in compiled code (``ofindex.decode._located``), each feature's
values read straight out of the records, ``FixedLen`` and ``VarLen`` alike. Expected values
come from protobuf's own parser; records laid out otherwise, or not matching the spec, go to
the careful path, which decodes them or reports them as before; ``pack_bytes`` batches copy
each value once into their buffer."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import ofindex
from ofindex import _accel
from ofindex.decode import (
    BatchDecoder,
    Decoder,
    FixedLen,
    Ragged,
    VarLen,
    _located,
    batch,
    decode_batch,
    decode_example,
)
from ofindex.errors import CorruptRecordError, DecodeError
from ofindex.integrations._fetch import BatchFetch
from ofindex.proto import example_pb2, ofrecord_pb2
from tests.kit.fuzzkit import guarded
from tests.kit.helpers import implementation, same, varint

SPEC = {"jpeg": FixedLen((), "bytes"), "label": FixedLen((), "int64"),
        "box": FixedLen((2, 2), "float32"), "one": FixedLen((1,), "int64")}


def example(k: int) -> bytes:
    rng = np.random.default_rng(k)
    ex = example_pb2.Example()
    f = ex.features.feature
    f["jpeg"].bytes_list.value.append(rng.bytes(int(rng.integers(0, 5000))))
    f["label"].int64_list.value.append(int(rng.integers(-(2**63), 2**63 - 1)))
    f["box"].float_list.value.extend(rng.standard_normal(4).astype(np.float32).tolist())
    f["one"].int64_list.value.append(k)
    f["other"].bytes_list.value.extend([b"x", b"yz"])  # not asked for
    return ex.SerializeToString()


def from_protobuf(records: list[bytes]) -> dict:
    """The spec's features of each record, parsed by protobuf."""
    feats = [example_pb2.Example.FromString(r).features.feature for r in records]
    return {
        "jpeg": [f["jpeg"].bytes_list.value[0] for f in feats],
        "label": np.array([f["label"].int64_list.value[0] for f in feats], np.int64),
        "box": np.array([list(f["box"].float_list.value) for f in feats],
                        np.float32).reshape(-1, 2, 2),
        "one": np.array([[f["one"].int64_list.value[0]] for f in feats], np.int64),
    }


def careful_only(monkeypatch) -> None:
    monkeypatch.setattr(batch, "decode_located", lambda *a: None)


def no_other_path(monkeypatch) -> None:
    def refuse(*a):
        raise AssertionError("another path was taken")

    monkeypatch.setattr(batch, "decode_parsed", refuse)
    monkeypatch.setattr(batch, "_per_record", refuse)




def test_varied_layouts_are_located_and_equal_protobuf(monkeypatch):
    records = [example(k) for k in range(60)]
    assert len(set(map(len, records))) > 50  # no shared layout
    no_other_path(monkeypatch)
    got = decode_batch(records, SPEC)
    want = from_protobuf(records)
    assert got["jpeg"].dtype == object and got["jpeg"].shape == (60,)
    assert list(got["jpeg"]) == want["jpeg"]
    for name in ("label", "box", "one"):
        assert same(got[name], want[name]), name


def test_ofrecords_of_every_value_type_are_located():
    spec = {"img": FixedLen((), "bytes"), "f": FixedLen((3,), "float32"),
            "d": FixedLen((2,), "float64"), "i": FixedLen((), "int32"),
            "l": FixedLen((), "int64")}
    records = []
    for k in range(20):
        rec = ofrecord_pb2.OFRecord()
        rec.feature["img"].bytes_list.value.append(bytes([k]) * (k * 37))
        rec.feature["f"].float_list.value.extend([k, -k, 0.5])
        rec.feature["d"].double_list.value.extend([k / 3, -1e300])
        rec.feature["i"].int32_list.value.append(-k * 1000)
        rec.feature["l"].int64_list.value.append(2**40 + k)
        records.append(rec.SerializeToString())
    located = _located.decode_located(records, batch.normalize_spec(
        spec, batch._FAMILIES["ofrecord"][2], "OFRecord"), "ofrecord", _accel.native)
    assert located is not None and list(located[0]) == list(range(20))
    got = decode_batch(records, spec, kind="ofrecord")
    assert list(got["img"]) == [bytes([k]) * (k * 37) for k in range(20)]
    assert same(got["f"], np.array([[k, -k, 0.5] for k in range(20)], np.float32))
    assert same(got["d"], np.array([[k / 3, -1e300] for k in range(20)], np.float64))
    assert got["i"].dtype == np.int32 and got["i"].tolist() == [-k * 1000 for k in range(20)]
    assert got["l"].tolist() == [2**40 + k for k in range(20)]




def field(number: int, body: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(body)) + body


def entry(key: bytes, feature: bytes) -> bytes:
    return field(1, field(1, key) + field(2, feature))


def odd_layouts() -> list[bytes]:
    """Records protobuf parses like the others, laid out as no writer lays them out."""
    base = example(7)
    unpacked_label = entry(b"label", field(3, b"\x08" + varint(5)))  # an unpacked int64 list
    features = example_pb2.Example.FromString(base).features
    features.feature["label"].Clear()
    rest = b"".join(entry(k.encode(), v.SerializeToString())
                    for k, v in features.feature.items() if k != "label")
    return [
        base + b"\x10\x01",  # an unknown field after the features
        field(1, rest + unpacked_label),
        field(1, rest + entry(b"label", field(3, field(1, varint(9))))
              + entry("é".encode(), b"")),  # a non-ASCII key
        base + field(1, entry(b"label", field(3, field(1, varint(4))))),  # features twice
        field(1, example_pb2.Example.FromString(base).features.SerializeToString()
              + entry(b"label", field(3, field(1, varint(8))))),  # a key twice: the last wins
    ]


def test_records_laid_out_otherwise_are_decoded_on_the_careful_path(monkeypatch):
    good = [example(k) for k in range(6)]
    odd = odd_layouts()
    records = [good[0], odd[0], good[1], odd[1], good[2], odd[2], odd[3], *good[3:], odd[4]]
    rows = np.zeros(len(records) * 4 * _located.SLOTS, np.int64)
    names = tuple(n.encode() for n in SPEC)
    handled = _accel.native.locate(records, names, b".b4v", True, rows)
    left = np.flatnonzero(rows.reshape(len(records), 4, _located.SLOTS)[:, 0, 0] == -1).tolist()
    assert handled == 6 and left == [1, 3, 5, 6, 10]
    got = decode_batch(records, SPEC)
    want = from_protobuf(records)
    assert want["label"][[3, 6, 10]].tolist() == [5, 4, 8]  # what protobuf makes of them
    assert list(got["jpeg"]) == want["jpeg"]
    for name in ("label", "box", "one"):
        assert same(got[name], want[name]), name


@pytest.mark.parametrize("change, match", [
    (lambda f: f["label"].int64_list.value.append(3), "label"),        # two values
    (lambda f: f["jpeg"].Clear(), "jpeg"),                             # no list set
    (lambda f: f["one"].float_list.value.append(1.0), "one"),          # another value type
    (lambda f: f.pop("box"), "box"),                                   # missing
])
def test_a_record_that_does_not_fit_the_spec_is_reported_as_before(monkeypatch, change, match):
    records = [example(k) for k in range(8)]
    ex = example_pb2.Example.FromString(records[5])
    change(ex.features.feature)
    records[5] = ex.SerializeToString()
    with pytest.raises(DecodeError, match=f"record 5.*{match}") as fast:
        decode_batch(records, SPEC)
    careful_only(monkeypatch)
    with pytest.raises(DecodeError) as careful:
        decode_batch(records, SPEC)
    assert str(fast.value) == str(careful.value)


def test_a_missing_feature_with_a_default_is_filled():
    spec = {"jpeg": FixedLen((), "bytes"), "gone": FixedLen((), "int64", default=-7)}
    records = [example(k) for k in range(5)]
    got = decode_batch(records, spec)
    assert got["gone"].tolist() == [-7] * 5
    assert list(got["jpeg"]) == from_protobuf(records)["jpeg"]


def test_pack_bytes_copies_each_value_once_into_its_buffer(monkeypatch):
    records = [example(k) for k in range(30)]
    want = from_protobuf(records)
    made_for: list[str] = []

    def allocate(layout):
        made_for.extend(layout)
        return {name: np.full(shape, 99, dtype) for name, (shape, dtype) in layout.items()}

    fetch = BatchFetch(records, BatchDecoder(SPEC), pack_bytes=True)
    monkeypatch.setattr(batch, "decode_records", lambda *a, **k: pytest.fail("unpacked"))
    got, made = fetch(list(range(30)), allocate)
    assert isinstance(got["jpeg"], Ragged)
    assert got["jpeg"].values.dtype == np.uint8
    assert [bytes(got["jpeg"][i]) for i in range(30)] == want["jpeg"]
    assert got["jpeg"].values is made["jpeg"]  # written straight into the allocated buffer
    assert sorted(made_for) == sorted(SPEC)
    for name in ("label", "box", "one"):
        assert got[name] is made[name] and same(got[name], want[name]), name


def test_pack_bytes_of_records_laid_out_otherwise_packs_after_decoding():
    records = [example(0), *odd_layouts(), example(1)]
    fetch = BatchFetch(records, BatchDecoder(SPEC), pack_bytes=True)
    got, _ = fetch(list(range(len(records))))
    assert [bytes(got["jpeg"][i]) for i in range(len(records))] == \
        from_protobuf(records)["jpeg"]
    assert same(got["label"], from_protobuf(records)["label"])


def test_without_the_compiled_module_the_batch_is_the_same(monkeypatch):
    records = [example(k) for k in range(12)]
    monkeypatch.setattr(_accel, "native", None)
    got = decode_batch(records, SPEC)
    assert list(got["jpeg"]) == from_protobuf(records)["jpeg"]
    assert same(got["box"], from_protobuf(records)["box"])
    packed, _ = BatchFetch(records, BatchDecoder(SPEC), pack_bytes=True)(list(range(12)))
    assert bytes(packed["jpeg"].values) == b"".join(from_protobuf(records)["jpeg"])


def test_float_values_keep_their_bits():
    """A signalling NaN comes out with its bits (a Python float would quiet it)."""
    ex = example_pb2.Example()
    ex.features.feature["box"].float_list.value.extend([0.0] * 4)
    raw = bytearray(ex.SerializeToString())
    at = raw.index(b"\x00" * 16)
    raw[at:at + 4] = b"\x01\x00\x80\x7f"
    records = [bytes(raw), bytes(raw) + b""]
    ex2 = example_pb2.Example.FromString(records[0])
    ex2.features.feature["jpeg"].bytes_list.value.append(b"j")
    spec = {"box": FixedLen((4,), "float32")}
    got = decode_batch([records[0], ex2.SerializeToString()], spec)
    assert got["box"][:, 0].view(np.uint32).tolist() == [0x7F800001] * 2


# -- batches decoded straight out of memory-mapped shards ---------------------------------------

def write_shards_of(directory, records: list[bytes], shards: int) -> str:
    per = -(-len(records) // shards)
    for s in range(shards):
        with ofindex.Writer(str(directory / f"part-{s}.tfrecord")) as w:
            for r in records[s * per:(s + 1) * per]:
                w.write(r)
    return str(directory)


def in_maps_only(monkeypatch) -> None:
    monkeypatch.setattr(BatchFetch, "records", lambda *a: pytest.fail("read as bytes"))


@pytest.mark.parametrize("size", [3000, 60_000])  # small batches; big ones checked on threads
def test_a_batch_of_mapped_records_is_decoded_in_the_maps(tmp_path, monkeypatch, size):
    records = [example_sized(k, size) for k in range(90)]
    ds = ofindex.open(write_shards_of(tmp_path, records, 3))
    fetch = BatchFetch(ds, BatchDecoder(SPEC), pack_bytes=True)
    in_maps_only(monkeypatch)
    idx = [int(i) for i in np.random.default_rng(size).integers(0, 90, 80)]  # duplicates too
    got, _ = fetch(idx)
    want = from_protobuf([records[i] for i in idx])
    assert [bytes(got["jpeg"][i]) for i in range(80)] == want["jpeg"]
    for name in ("label", "box", "one"):
        assert same(got[name], want[name]), name


def example_sized(k: int, size: int) -> bytes:
    ex = example_pb2.Example.FromString(example(k))
    ex.features.feature["jpeg"].bytes_list.value[0] = bytes([k % 256]) * (size + 17 * k)
    return ex.SerializeToString()


@pytest.mark.parametrize("size", [3000, 60_000])
def test_a_corrupt_record_in_the_maps_is_reported_as_getitems_reports_it(tmp_path, size):
    records = [example_sized(k, size) for k in range(90)]
    path = tmp_path / "one.tfrecord"
    with ofindex.Writer(str(path)) as w:
        for r in records:
            w.write(r)
    raw = bytearray(path.read_bytes())
    jpeg = example_pb2.Example.FromString(records[61]).features.feature["jpeg"]
    at = raw.index(jpeg.bytes_list.value[0]) + 40  # in record 61's JPEG: its CRC is wrong
    raw[at] ^= 0xFF
    stamp = os.stat(path)
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # the index stays fresh
    ds = ofindex.open(str(path))
    fetch = BatchFetch(ds, BatchDecoder(SPEC), pack_bytes=True)
    idx = [5, 80, 61, 3, 61]
    with pytest.raises(CorruptRecordError) as in_maps:
        fetch(idx)
    with pytest.raises(CorruptRecordError) as as_bytes:
        ds.__getitems__(idx)
    assert "record 61" in str(in_maps.value) and str(in_maps.value) == str(as_bytes.value)
    unchecked = ofindex.open(str(path), verify=False)  # the bytes as stored, as __getitems__
    got, _ = BatchFetch(unchecked, BatchDecoder(SPEC), pack_bytes=True)(idx)
    want = from_protobuf(unchecked.__getitems__(idx))
    assert [bytes(got["jpeg"][i]) for i in range(5)] == want["jpeg"]


# ---- VarLen features (token lists, optional floats): located too --------------------------

VARLEN_SPEC = {"tokens": VarLen("int64"), "extra": VarLen("float32"), "tags": VarLen("bytes"),
               "label": FixedLen((), "int64"), "mask": FixedLen((2, 2), "int64"),
               "lang": FixedLen((), "bytes"), "weight": FixedLen((), "float32", default=0.5)}


def tokens_example(k: int) -> bytes:
    """Token ids of 1-3 byte varints and negative ones of 10; features present or not."""
    rng = np.random.default_rng(1000 + k)
    ex = example_pb2.Example()
    f = ex.features.feature
    f["tokens"].int64_list.value.extend(
        rng.integers(-(2**63), 50_000, int(rng.integers(0, 40))).clip(-5, None).tolist())
    if k % 3:
        f["extra"].float_list.value.extend(rng.standard_normal(int(rng.integers(0, 4)))
                                           .astype(np.float32).tolist())
    if k % 4 == 1:
        f["tags"].bytes_list.value.extend(rng.bytes(int(j)) for j in range(k % 5))
    f["label"].int64_list.value.append(int(rng.integers(-(2**63), 2**63 - 1)))
    f["mask"].int64_list.value.extend(rng.integers(0, 300, 4).tolist())
    f["lang"].bytes_list.value.append(b"en" if k % 2 else b"")
    if k % 5 != 2:
        f["weight"].float_list.value.append(float(k))
    f["other"].int64_list.value.extend([1, 2, 3])  # not asked for
    return ex.SerializeToString()


def careful(records: list[bytes], spec: dict) -> dict:
    """The batch decoded without the compiled module (the careful walk)."""
    with implementation("pure-python"):
        return decode_batch(records, spec)


def test_varlen_batches_are_located_and_equal_protobuf_and_the_careful_path(monkeypatch):
    records = [tokens_example(k) for k in range(50)]
    want = careful(records, VARLEN_SPEC)
    no_other_path(monkeypatch)  # the earlier code walked every record in Python
    got = decode_batch(records, VARLEN_SPEC)
    for name in VARLEN_SPEC:
        assert same(got[name], want[name]), name
    feats = [example_pb2.Example.FromString(r).features.feature for r in records]
    tokens = [list(f["tokens"].int64_list.value) for f in feats]
    assert got["tokens"].row_lengths.tolist() == [len(t) for t in tokens]
    assert got["tokens"].values.tolist() == [t for row in tokens for t in row]
    assert list(got["tags"].values) == [t for f in feats for t in f["tags"].bytes_list.value]
    assert got["weight"].tolist() == [0.5 if k % 5 == 2 else k for k in range(50)]
    assert got["mask"].shape == (50, 2, 2) and list(got["lang"]) == [
        b"en" if k % 2 else b"" for k in range(50)]


def test_big_varlen_batches_on_threads_equal_the_careful_path(monkeypatch):
    records = [tokens_example(k) for k in range(300)]
    monkeypatch.setattr(_located, "PARALLEL_RECORDS", 2)  # every batch on the threads
    monkeypatch.setattr(_located, "PARALLEL_VALUE_BYTES", 1)
    got = decode_batch(records, VARLEN_SPEC)
    want = careful(records, VARLEN_SPEC)
    for name in VARLEN_SPEC:
        assert same(got[name], want[name]), name


def test_varlen_batches_mixing_every_stage_equal_the_careful_path():
    # 70 records of one length take their template, odd layouts the careful walk, the
    # others are located: the parts are put back in the records' order
    uniform = example_pb2.Example()
    uniform.features.feature["tokens"].int64_list.value.extend([7, 8, 9])
    uniform.features.feature["label"].int64_list.value.append(1)
    uniform.features.feature["mask"].int64_list.value.extend([1, 2, 3, 4])
    uniform.features.feature["lang"].bytes_list.value.append(b"xx")
    same_length = uniform.SerializeToString()
    odd = tokens_example(3) + b"\x10\x01"  # an unknown field: the careful walk
    records = [tokens_example(k) for k in range(30)] + [same_length] * 70 + [odd]
    records = [records[i] for i in np.random.default_rng(5).permutation(len(records))]
    got = decode_batch(records, VARLEN_SPEC)
    want = careful(records, VARLEN_SPEC)
    for name in VARLEN_SPEC:
        assert same(got[name], want[name]), name


def _token_record(packed: bytes) -> bytes:
    """An Example whose feature "tokens" is the int64 list message ``packed``."""
    return field(1, entry(b"tokens", field(3, packed)))


@pytest.mark.usefixtures("impl")  # compiled and pure-Python loops
@pytest.mark.parametrize("flawed, match", [
    # a varint cut short at the end of its list
    (_token_record(field(1, b"\x01\x02\xac\xff")), "record 4: feature 'tokens': bad Example "
                                                    "bytes: truncated varint"),
    # a list claiming 2**31 - 2 bytes in a record of a few: checked before anything is made
    (_token_record(b"\x0a" + varint(2**31 - 2) + b"\x01\x02"),
     "record 4: feature 'tokens': bad Example bytes: length-delimited field runs past the end"),
])
def test_malformed_token_lists_are_reported_naming_record_and_feature(flawed, match):
    records = [tokens_example(k) for k in range(8)]
    records[4] = flawed
    limit = 16 * sum(map(len, records)) + (1 << 16)
    outcome, got = guarded(lambda: decode_batch(records, VARLEN_SPEC), limit)
    assert outcome == "DecodeError", got
    assert str(got).startswith(match), got


#: Varints of every length protobuf reads (1 to 10 bytes, the 10th holding the 64th bit), and
#: the ways a packed list of them is malformed.
_VARINTS = [varint(2 ** (7 * n)) for n in range(9)] + [varint(2**63), b"\x80" * 9 + b"\x01",
                                                          b"\x80\x00", b"\xff" * 7 + b"\x7f"]
#: Lists of varints read another way than by the count (the careful path decides).
_ODD_LISTS = {"11 bytes": b"\x80" * 10 + b"\x01\x05",
              "10th byte over the 64th bit": b"\x80" * 9 + b"\x02\x05",
              "cut short": b"\x05\x06\x85\x81"}


def _outcome(records: list[bytes]) -> object:
    try:
        return decode_batch(records, {"tokens": VarLen("int64")})["tokens"].values.tolist()
    except DecodeError as exc:
        return str(exc)


def test_token_lists_are_counted_at_every_alignment_as_protobuf_reads_them():
    # the packed lists are counted 8 bytes at a time: every varint length, at every place in
    # those 8 bytes, with runs of continuation bytes across them
    rng = np.random.default_rng(8)
    records, want = [], []
    for shift in range(8):
        for _ in range(6):
            runs = [_VARINTS[i] for i in rng.integers(0, len(_VARINTS), int(rng.integers(1, 9)))]
            packed = b"\x01" * shift + b"".join(runs)
            records.append(_token_record(field(1, packed)))
            want.append([1] * shift + [example_pb2.Feature.FromString(field(3, field(
                1, run))).int64_list.value[0] for run in runs])
    got = decode_batch(records, {"tokens": VarLen("int64")})["tokens"]
    assert got.row_lengths.tolist() == [len(w) for w in want]
    assert got.values.tolist() == [v for w in want for v in w]
    for name, odd in _ODD_LISTS.items():
        for shift in range(9):
            records = [_token_record(field(1, b"\x07")),
                       _token_record(field(1, b"\x01" * shift + odd))]
            with implementation("pure-python"):
                want = _outcome(records)
            assert _outcome(records) == want, (name, shift)


@pytest.mark.parametrize("width", ["v", "i"])
def test_packed_varints_are_read_at_every_alignment_and_room_as_protobuf_reads_them(width):
    # values() reads 8 bytes at a time: lists of every varint length (1 to 10 bytes) at every
    # offset in a record, each read into exactly its room, and refused with one value less
    # or more room
    native = _accel.native
    assert native is not None
    rng = np.random.default_rng(21)
    bits = rng.integers(0, 64, 400)
    numbers = [int(rng.integers(0, 1 << int(b), dtype=np.uint64)) - (1 << 63) * int(b == 63)
               for b in bits] + [-1, 0, 1 << 62, -(1 << 63)]
    dtype = np.int64 if width == "v" else np.int32
    for shift in range(9):
        for count in (1, 3, 7, 8, 9, 17, 100, len(numbers)):
            chosen = [numbers[int(k)] for k in rng.integers(0, len(numbers), count)]
            packed = b"".join(varint(v) for v in chosen)
            record = bytes(range(shift)) + packed + b"\xff" * int(rng.integers(0, 9))
            want = np.array(example_pb2.Feature.FromString(field(3, field(1, packed)))
                            .int64_list.value, np.int64).astype(dtype)  # int32: the low bits
            spans = (np.array([shift], np.int64), np.array([shift + len(packed)], np.int64))
            out = np.zeros(count, dtype)
            assert native.values([record], *spans, width, out) is None
            assert out.tolist() == want.tolist(), (shift, chosen)
            for wrong in (count - 1, count + 1):
                with pytest.raises(ValueError, match="another number of values"):
                    native.values([record], *spans, width, np.zeros(wrong, dtype))


def test_layout_groups_are_the_records_of_each_length_in_order():
    rng = np.random.default_rng(3)
    for _ in range(300):
        base = int(rng.choice([0, 0, 0, 65_530]))  # lengths around 2**16 too
        bufs = [bytes(base + int(n)) for n in rng.integers(0, int(rng.choice([2, 4, 30])),
                                                           int(rng.integers(0, 40)))]
        most, smallest = int(rng.integers(1, 12)), int(rng.choice([1, 2, 3, 64]))
        by_length: dict[int, list[int]] = {}
        for i, b in enumerate(bufs):
            by_length.setdefault(len(b), []).append(i)
        if len(bufs) < 2:
            want = []
        elif len(by_length) == 1:
            want = [list(range(len(bufs)))]
        elif len(by_length) > most:
            want = []
        else:
            want = [by_length[n] for n in sorted(by_length) if len(by_length[n]) >= smallest]
        assert batch._layout_groups(bufs, most, smallest) == want, (bufs, most, smallest)


# ---- what is decoded owns its values: the records may go, or change, right after ---------

def _decoded_and_dropped(n: int) -> dict:
    """VARLEN_SPEC decoded from records that nothing refers to once this returns."""
    records = [tokens_example(k) for k in range(n)]
    return decode_batch(records, VARLEN_SPEC)


def _reuse_freed_memory() -> list[bytes]:
    """Objects of the records' sizes, made once they are collected, so that values still read
    from the records' memory would read these bytes instead."""
    gc.collect()
    return [b"\xaa" * size for size in range(1, 2000, 3) for _ in range(8)]


@pytest.mark.parametrize("threads", [False, True])
def test_decoded_batches_outlive_their_records(monkeypatch, threads):
    # the compiled calls hold the records by reference while they read them: what they return
    # is values of its own (numpy arrays, bytes objects), whatever becomes of the records
    if threads:
        monkeypatch.setattr(_located, "PARALLEL_RECORDS", 2)
        monkeypatch.setattr(_located, "PARALLEL_VALUE_BYTES", 1)
    no_other_path(monkeypatch)
    got = _decoded_and_dropped(300)
    monkeypatch.undo()  # the careful walk makes the expected values
    junk = _reuse_freed_memory()
    records = [tokens_example(k) for k in range(300)]
    want = careful(records, VARLEN_SPEC)
    for name in VARLEN_SPEC:
        assert same(got[name], want[name]), name
    feats = [example_pb2.Example.FromString(r).features.feature for r in records]
    assert got["tokens"].values.tolist() == [t for f in feats for t in f["tokens"].int64_list.value]
    assert list(got["tags"].values) == [t for f in feats for t in f["tags"].bytes_list.value]
    assert list(got["lang"]) == [f["lang"].bytes_list.value[0] for f in feats]
    assert len(junk)


def test_decoded_values_stay_when_the_record_buffers_are_overwritten(monkeypatch):
    records = [tokens_example(k) for k in range(60)]
    want = careful(records, VARLEN_SPEC)
    buffers = [bytearray(r) for r in records]
    got = decode_batch(buffers, VARLEN_SPEC)
    one = [Decoder(VARLEN_SPEC)(buffers[k]) for k in range(60)]
    every = [decode_example(memoryview(buffers[k])) for k in range(60)]
    for buf in buffers:
        buf[:] = b"\xaa" * len(buf)
    for name in VARLEN_SPEC:
        assert same(got[name], want[name]), name
    for k, record in enumerate(records):
        feats = example_pb2.Example.FromString(record).features.feature
        assert one[k]["tokens"].tolist() == list(feats["tokens"].int64_list.value)
        assert list(one[k]["tags"]) == list(feats["tags"].bytes_list.value)
        assert same(one[k]["extra"], np.array(feats["extra"].float_list.value, np.float32))
        assert same(every[k]["mask"], np.array(feats["mask"].int64_list.value, np.int64))
        assert list(every[k]["lang"]) == list(feats["lang"].bytes_list.value)
        assert every[k]["other"].tolist() == [1, 2, 3]


def test_a_batch_decoded_in_the_maps_outlives_the_dataset_and_its_files(tmp_path, monkeypatch):
    records = [example_sized(k, 3000) for k in range(90)]
    ds = ofindex.open(write_shards_of(tmp_path, records, 3))
    in_maps_only(monkeypatch)
    idx = [int(i) for i in np.random.default_rng(4).integers(0, 90, 80)]
    got, _ = BatchFetch(ds, BatchDecoder(SPEC), pack_bytes=True)(idx)
    ds.close()  # the maps are let go of (a map a value still viewed would refuse to close)
    del ds
    for shard in tmp_path.glob("part-*"):
        shard.unlink()
    junk = _reuse_freed_memory()
    want = from_protobuf([records[i] for i in idx])
    assert [bytes(got["jpeg"][i]) for i in range(80)] == want["jpeg"]
    for name in ("label", "box", "one"):
        assert same(got[name], want[name]), name
    assert len(junk)
