"""Where the lists of named features, and the values of a bytes list, lie in serialized
Examples (ofindex.decode.lists: what the TFDS step layout is built from), checked against
protobuf's own parse of the same records, on the compiled walk and the pure-Python one."""

from __future__ import annotations

import ast
import os

import crc32c
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ofindex.decode import _located, lists
from ofindex.decode.lists import bytes_value_spans, list_bounds, span_sums
from ofindex.proto import example_pb2
from tests.kit import paths
from tests.kit.helpers import cpu_paths, implementation


def _example(features: dict[str, list[bytes] | list[float] | list[int]]) -> bytes:
    """An Example serialized by protobuf (what TensorFlow's writers write)."""
    message = example_pb2.Example()
    for name, values in features.items():
        feature = message.features.feature[name]
        if values and isinstance(values[0], bytes):
            feature.bytes_list.value.extend(values)
        elif values and isinstance(values[0], float):
            feature.float_list.value.extend(values)
        elif values:
            feature.int64_list.value.extend(values)
        else:
            feature.bytes_list.SetInParent()
    return message.SerializeToString()


_BYTES = st.lists(st.binary(max_size=300), max_size=6)
_FLOATS = st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=6)
_INTS = st.lists(st.integers(-2**63, 2**63 - 1), min_size=1, max_size=6)
_RECORD = st.fixed_dictionaries({}, optional={"image": _BYTES, "state": _FLOATS,
                                              "action": _INTS, "other": _BYTES})


def _varints(data: bytes) -> list[int]:
    values, value, shift = [], 0, 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            values.append(value - (1 << 64) if value >= 1 << 63 else value)
            value, shift = 0, 0
    return values


@pytest.mark.parametrize("which", ["compiled", "pure"])
@given(contents=st.lists(_RECORD, max_size=8))
def test_the_bounds_found_hold_what_protobuf_parses(which, contents):
    with implementation(which):
        _check_bounds([_example(features) for features in contents], contents)


def _check_bounds(records: list[bytes], contents: list[dict]) -> None:
    names = ["image", "state", "action", "missing"]
    bounds = list_bounds(records, names)
    assert bounds is not None and bounds.shape == (len(records), len(names), 6)
    for record, features, rows in zip(records, contents, bounds, strict=True):
        parsed = example_pb2.Example.FromString(record).features.feature
        for name, (kind, start, end, run_start, run_end, count) in zip(names, rows.tolist(),
                                                                       strict=True):
            if name not in features:
                assert kind == count == 0
                continue
            which = parsed[name].WhichOneof("kind")
            assert kind == {"bytes_list": 1, "float_list": 2, "int64_list": 3}[which]
            assert count == len(getattr(parsed[name], which).value)
            run = record[run_start:run_end]
            if which == "float_list":
                assert run == np.asarray(parsed[name].float_list.value, "<f4").tobytes()
            elif which == "int64_list":
                assert _varints(run) == list(parsed[name].int64_list.value)
            else:
                assert (run_start, run_end) == (start, end)
    images = bounds[:, 0]
    counts = np.array([len(features.get("image", ())) for features in contents], np.int64)
    spans = bytes_value_spans(records, images[:, 1], images[:, 2], counts)
    assert spans is not None
    got = [record for record, count in zip(records, counts.tolist(), strict=True)
           for _ in range(count)]
    assert [got[k][s:s + n] for k, (s, n) in enumerate(zip(*spans, strict=True))] == [
        value for features in contents for value in features.get("image", [])]


def test_both_walks_find_the_same_bounds():
    """The compiled walk and the pure-Python one, on the same records, agree exactly."""
    rng = np.random.default_rng(3)
    records = [_example({"image": [rng.bytes(int(n)) for n in rng.integers(0, 999, 5)],
                         "state": rng.random(7).astype(np.float32).tolist(),
                         "action": rng.integers(-9, 2**40, 3).tolist()}) for _ in range(20)]
    found = {}
    for which in ("compiled", "pure"):
        with implementation(which):
            bounds = list_bounds(records, ["state", "image", "action"])
            assert bounds is not None
            spans = bytes_value_spans(records, bounds[:, 1, 1], bounds[:, 1, 2],
                                      np.full(20, 5, np.int64))
            assert spans is not None
            found[which] = (bounds, *spans)
    for compiled, pure in zip(found["compiled"], found["pure"], strict=True):
        np.testing.assert_array_equal(compiled, pure)


def _raw_example(name: bytes, feature: bytes) -> bytes:
    """An Example of one feature whose Feature message body is ``feature`` (hand-written
    wire bytes: layouts protobuf accepts but writers do not produce)."""
    entry = b"\x0a" + bytes([len(name)]) + name + b"\x12" + bytes([len(feature)]) + feature
    features = b"\x0a" + bytes([len(entry)]) + entry
    return b"\x0a" + bytes([len(features)]) + features


def test_an_unpacked_numeric_list_is_refused_by_both_walks(impl):
    """float_list { value: 1.0 value: 2.0 } written unpacked (protobuf reads it; its values
    do not lie in one run): not laid out, the caller parses the record whole."""
    unpacked = b"\x0d" + np.float32(1).tobytes() + b"\x0d" + np.float32(2).tobytes()
    record = _raw_example(b"state", b"\x12" + bytes([len(unpacked)]) + unpacked)
    assert list(example_pb2.Example.FromString(record).features.feature["state"]
                .float_list.value) == [1.0, 2.0]
    assert list_bounds([record], ["state"]) is None


def test_a_bytes_list_of_another_count_or_layout_is_refused(impl):
    record = _example({"image": [b"ab", b"cde"]})
    bounds = list_bounds([record], ["image"])
    assert bounds is not None
    start, end = bounds[:, 0, 1], bounds[:, 0, 2]
    for count in (1, 3):
        assert bytes_value_spans([record], start, end, np.array([count])) is None
    # the list's body cut one byte short: its last value runs past it
    assert bytes_value_spans([record], start, end - 1, np.array([2])) is None
    # a list body that is not bytes values (a packed float run)
    floats = _example({"state": [1.0, 2.0]})
    fbounds = list_bounds([floats], ["state"])
    assert fbounds is not None
    assert bytes_value_spans([floats], fbounds[:, 0, 1], fbounds[:, 0, 2],
                             np.array([2])) is None


def test_spans_outside_their_record_are_an_error_not_a_read(impl):
    record = _example({"image": [b"ab"]})
    with pytest.raises(ValueError, match="outside"):
        bytes_value_spans([record], np.array([0]), np.array([len(record) + 1]), np.array([1]))
    with pytest.raises(ValueError, match="outside"):
        bytes_value_spans([record], np.array([-1]), np.array([2]), np.array([1]))
    with pytest.raises(ValueError, match="outside"):
        bytes_value_spans([record], np.array([0]), np.array([2]), np.array([-1]))


def test_records_in_other_buffers_are_walked_too(impl):
    """Records held as memoryviews (of a memory map, say), not bytes: the same answers."""
    records = [_example({"image": [b"ab", b"cde"], "state": [1.5]}) for _ in range(3)]
    views = [memoryview(bytearray(record)) for record in records]
    bounds = list_bounds(records, ["image", "state"])
    assert bounds is not None
    np.testing.assert_array_equal(list_bounds(views, ["image", "state"]), bounds)
    args = bounds[:, 0, 1], bounds[:, 0, 2], np.full(3, 2, np.int64)
    for got, want in zip(bytes_value_spans(views, *args), bytes_value_spans(records, *args),
                         strict=True):
        np.testing.assert_array_equal(got, want)


def _in_one_buffer(records: list[bytes]) -> tuple[list[memoryview], tuple[np.ndarray, ...]]:
    """The records back to back in two buffers (as in memory maps), with gaps between them,
    and their spans ``(which, starts, ends)``."""
    bufs = [bytearray(b"\xff" * 3), bytearray(b"\xee")]
    which, starts, ends = [], [], []
    for k, record in enumerate(records):
        buf = bufs[k % 2]
        which.append(k % 2)
        starts.append(len(buf))
        buf += record
        ends.append(len(buf))
        buf += b"\x00" * 5
    return ([memoryview(buf) for buf in bufs],
            tuple(np.asarray(part, np.int64) for part in (which, starts, ends)))


def test_records_lying_in_buffers_with_spans_are_walked_in_place(impl):
    """Records given as spans of shared buffers (memory maps): the same answers as for the
    records themselves, positions within each record."""
    rng = np.random.default_rng(5)
    records = [_example({"image": [rng.bytes(int(n)) for n in rng.integers(0, 99, 3)],
                         "state": [1.5, 2.5]}) for _ in range(5)]
    bufs, spans = _in_one_buffer(records)
    names = ["state", "image"]
    bounds = list_bounds(records, names)
    assert bounds is not None
    np.testing.assert_array_equal(list_bounds(bufs, names, spans), bounds)
    args = bounds[:, 1, 1], bounds[:, 1, 2], np.full(5, 3, np.int64)
    for got, want in zip(bytes_value_spans(bufs, *args, spans=spans),
                         bytes_value_spans(records, *args), strict=True):
        np.testing.assert_array_equal(got, want)


def _spans_of(records: list[bytes], counts: list[int], seed: int
              ) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """``counts[i]`` random spans of each record: their starts, ends (within the record)
    and the crc32c package's CRC of each."""
    rng = np.random.default_rng(seed)
    starts, ends, want = [], [], []
    for record, count in zip(records, counts, strict=True):
        for start, end in np.sort(rng.integers(0, len(record) + 1, (count, 2)), axis=1):
            starts.append(int(start))
            ends.append(int(end))
            want.append(crc32c.crc32c(record[start:end]))
    return np.asarray(starts, np.int64), np.asarray(ends, np.int64), want


@pytest.mark.parametrize("hw", [True, False])
def test_span_sums_are_each_spans_crc32c_in_one_call(impl, hw):
    """One call sums every span of a batch (records as bytes, or lying in buffers with
    spans), each against the crc32c package's CRC of the same bytes (three spans at a time
    and the rest one by one on the compiled path; with the CPU's CRC instruction off, the
    package sums them)."""
    with cpu_paths(hw_crc=hw):
        rng = np.random.default_rng(11)
        records = [rng.bytes(int(n)) for n in (0, 40, 9000, 7, 300, 1)]
        counts = [0, 4, 7, 1, 2, 3]
        starts, ends, want = _spans_of(records, counts, 12)
        got = span_sums(records, np.asarray(counts), starts, ends)
        assert got.dtype == np.uint32 and got.tolist() == want
        bufs, spans = _in_one_buffer(records)
        assert span_sums(bufs, np.asarray(counts), starts, ends, spans).tolist() == want
        assert span_sums([], np.zeros(0, np.int64), starts[:0], ends[:0]).tolist() == []


def test_span_sums_refuse_spans_outside_their_record(impl):
    record = b"0123456789"
    one = np.array([1], np.int64)
    for start, end in ((0, 11), (-1, 2), (5, 4)):
        with pytest.raises(ValueError, match="outside"):
            span_sums([record], one, np.array([start]), np.array([end]))
    with pytest.raises(ValueError, match="negative"):
        span_sums([record], np.array([-1]), np.zeros(0, np.int64), np.zeros(0, np.int64))
    with pytest.raises(ValueError, match="spans"):  # more spans than the counts say
        span_sums([record], one, np.array([0, 1]), np.array([1, 2]))


def test_the_lists_walk_shares_locates_tables_instead_of_copying_them():
    """ofindex.decode.lists reads ``locate``'s output with the one definition of its row's
    columns and of an Example's list kinds, in ofindex.decode._located: a copy of them
    could drift from the compiled module's layout unnoticed."""
    source = os.path.join(paths.PACKAGE, "decode", "lists.py")
    with open(source, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    assigned = {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                for target in ast.walk(node) if isinstance(target, ast.Name)
                and isinstance(target.ctx, ast.Store)}
    copies = {name for name in assigned
              if name.lstrip("_") in {"KIND", "COUNT", "START", "END", "VALUE", "LIST_START",
                                      "LIST_END", "SLOTS", "EXAMPLE_KINDS"}}
    assert not copies, f"lists.py defines {sorted(copies)} again"
    literals = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)}
    assert _located.EXAMPLE_LOCATE_KINDS not in literals
    assert lists.EXAMPLE_LOCATE_KINDS is _located.EXAMPLE_LOCATE_KINDS
    assert _located._FAMILIES["example"][0] is _located.EXAMPLE_LOCATE_KINDS


def _ordered_spans(records: list[bytes], counts: list[int], rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``counts[i]`` spans of record ``i`` in order, not overlapping: gaps before, between
    and after them, empty spans and spans of a few bytes and of several KB among them."""
    starts, ends = [], []
    for record, count in zip(records, counts, strict=True):
        cuts = np.sort(rng.integers(0, len(record) + 1, size=2 * count))
        starts += cuts[0::2].tolist()
        ends += cuts[1::2].tolist()
    return np.asarray(starts, np.int64), np.asarray(ends, np.int64)


@pytest.mark.parametrize("hw", [True, False])
def test_record_span_sums_give_the_spans_and_each_whole_records_crc32c(impl, hw):
    """The spans' CRC-32Cs and each record's own, from one pass over the record (its gaps
    summed, its long spans' sums joined in, its short ones summed again), against the
    crc32c package's CRCs of the same bytes: records as bytes and lying in one buffer, the
    compiled pass with and without the CPU's CRC instruction (without it, the package)."""
    with cpu_paths(hw_crc=hw):
        rng = np.random.default_rng(5)
        records = [rng.bytes(int(n)) for n in (0, 3, 40, 9000, 70001, 2048, 1500)]
        counts = [0, 1, 3, 5, 9, 2, 1]
        starts, ends = _ordered_spans(records, counts, rng)
        starts[-1], ends[-1] = 0, 1500  # a span the whole record
        # spans of 3 bytes of length (joined by two products) and of more (by its bits)
        records += [rng.bytes(100_000), bytes(range(256)) * (1 << 16) + b"tail"]
        counts += [1, 1]
        starts = np.append(starts, [1, 2])
        ends = np.append(ends, [99_999, (1 << 24) + 3])
        want = [crc32c.crc32c(records[i][s:e]) for i, n in enumerate(counts)
                for s, e in zip(starts[sum(counts[:i]):sum(counts[:i + 1])],
                                ends[sum(counts[:i]):sum(counts[:i + 1])], strict=True)]
        wholes = [crc32c.crc32c(record) for record in records]
        got, whole = lists.record_span_sums(records, np.asarray(counts), starts, ends)
        assert got.dtype == whole.dtype == np.uint32
        assert got.tolist() == want and whole.tolist() == wholes
        bufs, spans = _in_one_buffer(records)
        got, whole = lists.record_span_sums(bufs, np.asarray(counts), starts, ends, spans)
        assert got.tolist() == want and whole.tolist() == wholes


def test_record_span_sums_refuse_spans_out_of_order_or_outside(impl):
    """A record's spans must lie in order without overlapping (the gaps between them are
    summed), and inside the record: ValueError, nothing read past the record."""
    record = bytes(range(100))
    two = np.array([2], np.int64)
    for starts, ends in (([10, 5], [20, 30]), ([0, 19], [20, 30])):
        with pytest.raises(ValueError, match="before the one before it ends"):
            lists.record_span_sums([record], two, np.array(starts), np.array(ends))
    with pytest.raises(ValueError, match="outside"):
        lists.record_span_sums([record], two, np.array([0, 50]), np.array([10, 101]))
    # the spans of one record may follow the last of the record before in any order
    got, whole = lists.record_span_sums([record, record], np.array([1, 1]), np.array([50, 0]),
                                        np.array([60, 10]))
    assert got.tolist() == [crc32c.crc32c(record[50:60]), crc32c.crc32c(record[:10])]
    assert whole.tolist() == [crc32c.crc32c(record)] * 2
