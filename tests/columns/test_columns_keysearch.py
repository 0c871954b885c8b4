"""The compiled search of a key index's sorted keys (csrc/keysearch.c: ``key_span``,
``key_find``, ``key_places``, ``key_gather``) and its pure-Python twin (numpy searches and
bisect in columns/sorted_keys.py and columns/key_file.py) give the same places and records,
which a brute-force scan gives, for keys of every kind: bytes ending in zero bytes, empty,
sharing prefixes; int64 at its extremes; float32 and float64 with -0.0, infinities and NaN
searched for. Bad arguments and damaged pages raise errors, never crash."""

from __future__ import annotations

import bisect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ofindex import _accel
from ofindex.columns import key_file, page_codec
from ofindex.columns.key_build import _bytes_order
from ofindex.columns.key_file import KeyIndex, encode_key_index
from ofindex.columns.packed import PackedBytes
from ofindex.columns.sorted_keys import KeyBatch, SortedKeys
from ofindex.columns.value_types import ValueType, query_value
from ofindex.errors import ColumnError, SidecarError
from tests.kit.columns_data import opened_key_index
from tests.kit.helpers import implementation
from tests.kit.key_cases import BYTE_KEYS, NANS, cast_of, key_cases


@pytest.mark.parametrize("name", ["compiled", "pure-python"])
@settings(max_examples=150, deadline=None, derandomize=True)
@given(key_cases())
def test_find_and_find_one_give_what_a_scan_gives_compiled_and_pure(name, case):
    """(The ``impl`` fixture's switch, per example: hypothesis runs a fixture once.) The
    one-key path's leaves are held with fences every 1, 2, 3 or 64 keys."""
    *case, fence_step = case
    with implementation(name), pytest.MonkeyPatch.context() as patch:
        patch.setattr(key_file, "FENCE_STEP", fence_step)
        _find_as_a_scan(*case)


def _caller_keys(vtype, key):
    """A key as callers give it (what a KeyFinder answers itself): ``bytes`` and, when it is
    UTF-8, ``str``; an ``int``; a ``float``."""
    if vtype is not ValueType.BYTES:
        return [key.item()]
    try:
        return [key, key.decode("utf-8")]
    except UnicodeDecodeError:
        return [key]


def _find_as_a_scan(vtype, values, queries, leaf_entries, fanout):
    cast = cast_of(vtype)
    keys = [cast(q) for q in queries]
    if vtype in NANS:
        keys.append(NANS[vtype])  # held by no record: NaN is left out of a key index
    want = [[i for i, v in enumerate(values) if cast(v) == key] for key in keys]
    for _ in range(2):  # the pages read, then kept
        index = opened_key_index(vtype, values, leaf_entries, fanout)
        assert [found.tolist() for found in index.find(keys)] == want
        assert [index.find_one(key).tolist() for key in keys] == want
        for found in index.find(keys) + [index.find_one(key) for key in keys]:
            assert found.dtype == np.int64 and found.flags.writeable
            found[:] = -1  # the caller's: what the index keeps is not changed
        assert [found.tolist() for found in index.find(keys)] == want
        assert [index.find_one(key).tolist() for key in keys] == want
        _finder_as_a_scan(index, vtype, keys, want)


def _finder_as_a_scan(index, vtype, keys, want):
    """The index's compiled finder, given keys as callers give them, finds what find_one
    does: itself for held leaves, through its fallback otherwise (there is none without the
    compiled module, for an index of several levels, or one whose first keys are not a
    fixed-width table: a bytes key ending with a zero byte)."""
    finder = index.finder(lambda key: index.find_one(query_value(vtype, key, "k")))
    if _accel.native is None or index.header.levels > 1 or not index.root.firsts.kind:
        assert finder is None
        return
    for _ in range(2):  # the leaves read through the fallback, then held
        for key, records in zip(keys, want, strict=True):
            for given_key in _caller_keys(vtype, key):
                found = finder(given_key)
                assert found.tolist() == records and found.dtype == np.int64
                found[:] = -1  # the caller's


def _places_by_bisect(items, query):
    return bisect.bisect_left(items, query), bisect.bisect_right(items, query)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(BYTE_KEYS, max_size=40), st.lists(BYTE_KEYS, max_size=12))
def test_compiled_and_pure_place_bytes_keys_as_bisect_does(items, queries):
    """Every search of a fixed-width table of bytes keys (one key's span and bounds, a
    batch's places, a batch gathered) places each key where ``bisect`` over the ``bytes``
    does, compiled and pure; so they agree with each other."""
    items = sorted(item for item in items if not item.endswith(b"\0"))  # a fixed-width page
    keys = SortedKeys(PackedBytes.from_list(items))
    assert keys.items is None and keys.kind == 4
    want = [_places_by_bisect(items, q) for q in queries]
    got = {}
    for name in ("compiled", "pure-python"):
        saved = _accel.native
        _accel.native = saved if name == "compiled" else None
        try:
            got[name] = _all_searches(keys, queries)
        finally:
            _accel.native = saved
    spans = [(lo, hi) for lo, hi in want]
    assert got["compiled"] == got["pure-python"] == (spans, spans, spans)


def _all_searches(keys, queries):
    batch = KeyBatch(queries, None)
    lefts, rights = keys.places(batch, np.arange(len(queries)))
    return ([keys.equal_span(q) for q in queries], [keys.bounds(q) for q in queries],
            list(zip(lefts.tolist(), rights.tolist(), strict=True)))


@pytest.mark.parametrize("vtype", [ValueType.INT64, ValueType.FLOAT32, ValueType.FLOAT64])
def test_compiled_places_numbers_as_numpy_does(vtype):
    """Numbers, with repeats, at the extremes, and NaN searched for (after every number)."""
    native = _accel.native
    assert native is not None
    rng = np.random.default_rng(5)
    pool = {ValueType.INT64: [-(1 << 63), -5, 0, 0, 3, (1 << 63) - 1],
            ValueType.FLOAT32: [-np.inf, -2.5, -0.0, 0.0, 1.0, np.inf],
            ValueType.FLOAT64: [-np.inf, -1e300, -0.0, 1.0, 1.0, np.inf]}[vtype]
    for size in (0, 1, 2, 7, 64, 200):
        table = np.sort(rng.choice(np.array(pool, dtype=vtype.dtype), size))
        queries = np.array([*pool, 0, 2], dtype=vtype.dtype)
        if vtype is not ValueType.INT64:
            queries = np.append(queries, np.array(np.nan, dtype=vtype.dtype))
        lefts = np.empty(len(queries), np.int64)
        rights = np.empty(len(queries), np.int64)
        native.key_places(table, table.itemsize, int(vtype), queries, queries.itemsize,
                          np.arange(len(queries)), lefts, rights)
        assert lefts.tolist() == table.searchsorted(queries, "left").tolist()
        assert rights.tolist() == table.searchsorted(queries, "right").tolist()
        for q, left, right in zip(queries, lefts.tolist(), rights.tolist(), strict=True):
            assert native.key_span(table, table.itemsize, int(vtype), q, False) == (left, right)
            equal = (left, right) if size and left < size and table[left] == q else (left, left)
            assert native.key_span(table, table.itemsize, int(vtype), q, True) == equal
            records = np.arange(size, dtype=np.int64) * 10
            found = native.key_find(table, table.itemsize, int(vtype), q, records)
            assert found.tolist() == records[equal[0]:equal[1]].tolist()


def test_compiled_searches_refuse_bad_arguments():
    """A table whose size is not a whole number of keys, an unknown kind, a batch member out
    of range, records that do not match their keys: an exception, never a crash or a read
    outside the buffers."""
    native = _accel.native
    assert native is not None
    table = np.array([b"ab", b"cd"], dtype="S2")
    with pytest.raises(ValueError, match="cannot hold"):
        native.key_span(table.tobytes()[:3], 2, 4, b"ab", True)
    with pytest.raises(ValueError, match="cannot hold"):
        native.key_span(table, 2, 9, b"ab", True)
    with pytest.raises(ValueError, match="cannot hold"):
        native.key_span(table, 0, 4, b"ab", True)
    with pytest.raises(ValueError, match="cannot hold"):
        native.key_span(np.arange(3, dtype=np.int64), 4, 1, 1, True)
    with pytest.raises(TypeError):
        native.key_span(np.arange(3, dtype=np.int64), 8, 1, b"x", True)
    with pytest.raises(ValueError, match="records"):
        native.key_find(table, 2, 4, b"ab", np.zeros(3, dtype=np.int64))
    out = [np.empty(1, np.int64) for _ in range(3)]
    with pytest.raises(IndexError):
        native.key_places(table, 2, 4, table, 2, np.array([2]), out[0], out[1])
    with pytest.raises(IndexError):
        native.key_gather([table], np.array([2]), [np.zeros(2, np.int64)], 4, table, 2,
                          np.array([-1]), np.array([0, 1]), *out)
    with pytest.raises(ValueError, match="disagree"):
        native.key_gather([table], np.array([2]), [np.zeros(2, np.int64)], 4, table, 2,
                          np.array([0]), np.array([0, 2]), *out)
    with pytest.raises(ValueError, match="records"):
        native.key_gather([table], np.array([2]), [np.zeros(5, np.int64)], 4, table, 2,
                          np.array([0]), np.array([0, 1]), *out)
    with pytest.raises(ValueError, match="cannot hold"):
        native.key_gather([table], np.array([3]), [np.zeros(2, np.int64)], 4, table, 2,
                          np.array([0]), np.array([0, 1]), *out)
    with pytest.raises(TypeError, match="list"):
        native.key_lookup(table, 2, 4, b"ab", (None, None))
    with pytest.raises(ValueError, match="slots"):
        native.key_lookup(table, 2, 4, b"ab", [None])
    with pytest.raises(ValueError, match="slot is"):
        native.key_lookup(table, 2, 4, b"ab", [(table, 2), None])
    with pytest.raises(ValueError, match="records"):
        native.key_lookup(table, 2, 4, b"ab", [(table, 2, np.zeros(1, np.int64)), None])
    with pytest.raises(ValueError, match="cannot hold"):
        native.key_lookup(table, 2, 4, b"ab", [(table.tobytes()[:3], 2, np.zeros(1)), None])
    assert native.key_lookup(table, 2, 4, b"ab", [None, None]) == 0  # its leaf is not held
    assert native.key_lookup(table, 2, 4, b"ab", [(table, 2, np.array([5, 6])), None]
                             ).tolist() == [5]
    assert native.key_lookup(np.array([b"a", b"a"]), 1, 4, b"a", [None, None]) == -2
    assert native.key_lookup(np.zeros(0, "S1"), 1, 4, b"a", []) == -1
    leaf, records = np.array([b"ab", b"ac", b"ad"]), np.array([4, 5, 6])
    every_other = leaf[::2].copy()
    for fences, step in ((every_other, 1), (every_other, 3), (every_other, 0), (leaf, -1)):
        with pytest.raises(ValueError, match="fences"):
            native.key_lookup(table, 2, 4, b"ac", [(leaf, 2, records, fences, step), None])
    with pytest.raises(ValueError, match="cannot hold"):
        native.key_lookup(table, 2, 4, b"ac", [(leaf, 2, records, b"abc", 2), None])
    with pytest.raises(ValueError, match="slot is"):
        native.key_lookup(table, 2, 4, b"ac", [(leaf, 2, records, every_other), None])
    assert native.key_lookup(table, 2, 4, b"ac", [(leaf, 2, records, every_other, 2),
                                                  None]).tolist() == [5]


def test_a_key_finder_refuses_bad_arguments():
    native = _accel.native
    assert native is not None
    table = np.array([b"ab", b"cd"], dtype="S2")
    with pytest.raises(ValueError, match="cannot hold"):
        native.KeyFinder(table.tobytes()[:3], 2, 4, [None, None], bytes)
    with pytest.raises(ValueError, match="cannot hold"):
        native.KeyFinder(table, 2, 9, [None, None], bytes)
    with pytest.raises(TypeError):
        native.KeyFinder(table, 2, 4, (None, None), bytes)
    with pytest.raises(TypeError, match="callable"):
        native.KeyFinder(table, 2, 4, [None, None], 3)
    finder = native.KeyFinder(table, 2, 4, [None], bytes)
    with pytest.raises(ValueError, match="slots"):
        finder(b"ab")
    finder = native.KeyFinder(table, 2, 4, [(table, 2, np.zeros(1, np.int64)), None], bytes)
    with pytest.raises(ValueError, match="records"):
        finder(b"ab")
    for args, kwargs in (((), {}), ((b"ab", b"cd"), {}), ((), {"key": b"ab"})):
        with pytest.raises(TypeError, match="one key"):
            finder(*args, **kwargs)


@pytest.mark.parametrize("vtype", [ValueType.BYTES, ValueType.INT64, ValueType.FLOAT32,
                                   ValueType.FLOAT64])
def test_a_key_finder_answers_held_leaves_and_defers_the_rest(vtype, monkeypatch):
    """A KeyFinder answers from the root and the leaves held (records, or none when no leaf
    may hold the key) without calling its fallback; it calls the fallback with the caller's
    own key for a leaf not held, keys over several leaves, and keys of other types (which
    the fallback converts or refuses)."""
    monkeypatch.setattr(key_file, "FENCE_STEP", 3)
    numbers = [float(i // 2) if vtype in NANS else i // 2 for i in range(40)]  # pairs
    numbers[20:26] = [numbers[20]] * 6  # a key over several leaves of 4
    values = [b"k%03d" % v for v in numbers] if vtype is ValueType.BYTES else numbers
    index = opened_key_index(vtype, values, 4, 4096)
    deferred = []

    def fallback(key):
        deferred.append(key)
        return index.find_one(query_value(vtype, key, "k"))

    finder = index.finder(fallback)
    cast = cast_of(vtype)
    mine = [b"k%03d" % 3, "k003"] if vtype is ValueType.BYTES else [numbers[6]]
    for key in mine:  # its leaf read through the fallback, then held
        assert finder(key).tolist() == [6, 7]
    assert deferred == mine[:1]
    index.find_one(cast(values[30]))  # held by find_one too
    deferred.clear()
    for key in mine:
        assert finder(key).tolist() == [6, 7]
    low = b"a" if vtype is ValueType.BYTES else -5 if vtype is ValueType.INT64 else -5.0
    assert finder(low).tolist() == []  # before the first leaf: no leaf may hold it
    assert finder(_caller_keys(vtype, cast(values[31]))[0]).tolist() == [30, 31]
    assert deferred == []
    assert finder(_caller_keys(vtype, cast(values[21]))[0]).tolist() == list(range(20, 26))
    others = [bytearray(b"k003"), np.bytes_(b"k003")] if vtype is ValueType.BYTES else \
        [np.int64(3), 3.0] if vtype is ValueType.INT64 else [3, np.float64(3.0)]
    for key in others:
        assert finder(key).tolist() == [6, 7]
    assert len(deferred) == 1 + len(others)
    with pytest.raises(ColumnError):
        finder(True)  # a bool: refused by the fallback, as by query_value
    big = "\ud800" if vtype is ValueType.BYTES else 1 << 70 if vtype is ValueType.INT64 \
        else None
    if big is not None:  # not UTF-8 / out of int64's range: the fallback's own error
        with pytest.raises((UnicodeEncodeError, ColumnError)):
            finder(big)


@pytest.mark.parametrize("damage", ["longer", "huge", "short"])
@pytest.mark.parametrize("how", ["find_one", "find"])
def test_a_leaf_whose_key_lengths_are_wrong_is_refused(impl, damage, how, monkeypatch):
    """A leaf whose bytes keys' lengths do not add up to its keys' bytes (written so, its CRCs
    right): SidecarError naming the key index, compiled and pure, one key or a batch."""
    values = [b"k%03d" % i for i in range(40)]
    packs = []
    real = page_codec.pack_bytes_values

    def damaged(keys):
        raw = bytearray(real(keys))
        packs.append(len(packs))
        if len(packs) == 2:  # the second leaf
            first = int.from_bytes(raw[:4], "little")
            if damage == "longer":
                raw[:4] = (first + 3).to_bytes(4, "little")
            elif damage == "huge":
                raw[:4] = (0xFFFFFFFF).to_bytes(4, "little")
            else:
                raw = raw[:2]
        return bytes(raw)

    monkeypatch.setattr(key_file.page_codec, "pack_bytes_values", damaged)
    packed = PackedBytes.from_list(values)
    order = _bytes_order(packed)
    raw = b"".join(encode_key_index("k", ValueType.BYTES, packed.take(order),
                                    order.astype(np.int64), len(values), "00ff" * 4,
                                    leaf_entries=8, fanout=8))
    monkeypatch.undo()
    index = KeyIndex.open(lambda ranges: [raw[a:b] for a, b in ranges], "x.ofkey", len(raw))
    assert index.find_one(b"k001").tolist() == [1]  # the first leaf is whole
    with pytest.raises(SidecarError, match=r"x\.ofkey"):
        if how == "find_one":
            index.find_one(b"k009")
        else:
            index.find([b"k001", b"k009"])


def test_one_key_lookups_hold_no_more_leaves_than_kept(impl, monkeypatch):
    """The one-key path's slots (the leaves it searches in one compiled call) let go of a
    leaf when the index lets go of it: memory stays within KEPT_LEAVES leaves, and every
    key is still found after its leaf was dropped and read again."""
    monkeypatch.setattr(KeyIndex, "KEPT_LEAVES", 3)
    values = [b"id-%04d" % (i * 7 % 100) for i in range(100)]
    index = opened_key_index(ValueType.BYTES, values, 4, 4096)
    assert index.header.levels == 1 and index.header.root_children == 25
    finder = index.finder(index.find_one)  # (None on the pure-Python loops)
    for _ in range(2):
        for i, value in enumerate(values):
            assert index.find_one(value).tolist() == [i]
            assert len(index.leaves) <= 3
            assert sum(slot is not None for slot in index.root.slots) <= 3
            if finder is not None:  # it reads the same slots
                assert finder(values[-1 - i]).tolist() == [len(values) - 1 - i]
                assert len(index.leaves) <= 3
                assert sum(slot is not None for slot in index.root.slots) <= 3
