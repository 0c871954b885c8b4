"""Key lookups in a key index (docs/format.md, "Key index"): a batch of keys
(``KeyIndex.find``, numpy searches of each page for the keys routed to it) and one key
(``KeyIndex.find_one``) give exactly the records a brute-force scan gives, and what the
general ``search`` gives, for keys of every kind a page may hold: bytes ending in zero bytes,
empty, wider than a fixed-width page holds (a list of ``bytes``), equal keys over several
leaves, int64 at the extremes, floats with -0.0 and infinities; in indexes of several
levels (small leaves and nodes)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ofindex.columns.key_build import _bytes_order
from ofindex.columns.key_file import KeyIndex, encode_key_index
from ofindex.columns.packed import PackedBytes
from ofindex.columns.sorted_keys import WIDEST_TABLE, KeyBatch, SortedKeys
from ofindex.columns.value_types import ValueType
from ofindex.errors import SidecarError
from tests.kit.columns_data import opened_key_index

_ALPHABET = st.sampled_from([b"", b"\0", b"a", b"b", b"a\0", b"\0a", b"ab", b"b\0\0",
                             b"a" * (WIDEST_TABLE + 3), b"a" * (WIDEST_TABLE + 3) + b"\0"])
_NUMBERS = {ValueType.INT64: st.sampled_from([-(1 << 63), -1, 0, 1, 7, (1 << 63) - 1]),
            ValueType.FLOAT64: st.sampled_from([-np.inf, -1.5, -0.0, 0.0, 2.0, np.inf])}


@st.composite
def indexes(draw):
    vtype = draw(st.sampled_from([ValueType.BYTES, ValueType.INT64, ValueType.FLOAT64]))
    element = _ALPHABET if vtype is ValueType.BYTES else _NUMBERS[vtype]
    values = draw(st.lists(element, max_size=80))
    queries = draw(st.lists(element, max_size=20))
    return vtype, values, queries, draw(st.integers(1, 5)), draw(st.integers(2, 3))


@settings(max_examples=200, deadline=None)
@given(indexes())
def test_find_and_find_one_give_what_a_scan_gives(case):
    vtype, values, queries, leaf_entries, fanout = case
    index = opened_key_index(vtype, values, leaf_entries, fanout)
    cast = bytes if vtype is ValueType.BYTES else vtype.dtype.type
    keys = [cast(q) for q in queries]
    want = [[i for i, v in enumerate(values) if cast(v) == key] for key in keys]
    assert [found.tolist() for found in index.find(keys)] == want
    assert [index.find_one(key).tolist() for key in keys] == want
    assert [found.tolist() for found in index.search([(k, k, True) for k in keys])] == want
    for found in index.find(keys) + [index.find_one(key) for key in keys]:
        assert found.dtype == np.int64 and found.flags.writeable
        found[:] = -1  # the caller's: what the index keeps is not changed
    assert [found.tolist() for found in index.find(keys)] == want
    assert [index.find_one(key).tolist() for key in keys] == want


def test_equal_keys_over_several_leaves_and_the_first_key_of_a_leaf():
    """Keys equal to a leaf's first key may also end the leaf before: both leaves are read."""
    values = [b"k%02d" % (i // 7) for i in range(70)]
    index = opened_key_index(ValueType.BYTES, values, 4, 3)
    assert index.header.levels >= 2
    for key in sorted(set(values)):
        want = [i for i, v in enumerate(values) if v == key]
        assert index.find_one(key).tolist() == want
        assert index.find([key, b"zz", key])[0].tolist() == want
    assert index.find([]) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(_ALPHABET | st.binary(max_size=6), max_size=30),
       st.lists(_ALPHABET | st.binary(max_size=6), max_size=10))
def test_sorted_bytes_keys_place_a_key_as_bisect_does(items, queries):
    """A page's keys, fixed-width or a list, place any key (one, or a batch) where
    ``bisect`` over the ``bytes`` places it."""
    import bisect

    items = sorted(items)
    keys = SortedKeys(PackedBytes.from_list(items))
    assert keys.ascending()
    assert [keys[k] for k in range(len(keys))] == items
    for query in queries:
        assert keys.left(query) == bisect.bisect_left(items, query)
        assert keys.right(query) == bisect.bisect_right(items, query)
    lefts, rights = keys.places(KeyBatch(queries, None), np.arange(len(queries)))
    assert lefts.tolist() == [bisect.bisect_left(items, q) for q in queries]
    assert rights.tolist() == [bisect.bisect_right(items, q) for q in queries]


def test_which_pages_are_held_fixed_width():
    """Bytes keys without trailing zero bytes and at most WIDEST_TABLE wide are a fixed-width
    array (a few bytes a key); others a list of ``bytes``."""
    assert SortedKeys(PackedBytes.from_list([b"a", b"bc"])).items is None
    assert SortedKeys(PackedBytes.from_list([b"a\0", b"b"])).items == [b"a\0", b"b"]
    wide = b"x" * (WIDEST_TABLE + 1)
    assert SortedKeys(PackedBytes.from_list([b"a", wide])).items == [b"a", wide]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(min_size=3, max_size=3), max_size=60), st.binary(max_size=12),
       st.integers(0, 6))
def test_ids_of_one_length_sharing_a_prefix_sort_as_python_sorts_them(tails, prefix, pad):
    """The one-word sort of ids that share their leading bytes (``img-000...``): Python's
    order, equal ids in their order (ties there or not)."""
    items = [prefix + tail + bytes(pad) for tail in tails]
    items += items[: len(items) // 3]  # equal ids, the later after the earlier
    order = _bytes_order(PackedBytes.from_list(items)).tolist()
    assert order == sorted(range(len(items)), key=items.__getitem__)


@settings(max_examples=200, deadline=None)
@given(indexes(), st.data())
def test_a_range_search_gives_what_a_scan_gives(case, data):
    """Ranges over small leaves: leaves wholly within the range give their records without
    their keys being searched; the others are searched."""
    vtype, values, _, leaf_entries, fanout = case
    index = opened_key_index(vtype, values, leaf_entries, fanout)
    cast = bytes if vtype is ValueType.BYTES else vtype.dtype.type
    element = _ALPHABET if vtype is ValueType.BYTES else _NUMBERS[vtype]
    low, high = (data.draw(st.none() | element.map(cast)) for _ in range(2))
    included = data.draw(st.booleans())
    want = [i for i, v in enumerate(values)
            if (low is None or cast(v) >= low) and
            (high is None or (cast(v) <= high if included else cast(v) < high))]
    for _ in range(2):  # the leaves read, then kept
        found = index.search([(low, high, included)])[0]
        assert found.tolist() == want
        found[:] = -1  # a copy: what the index keeps is not changed


@pytest.mark.parametrize("vtype", [ValueType.BYTES, ValueType.INT64])
@pytest.mark.parametrize("how", ["find_one", "find", "range"])
def test_a_leaf_whose_keys_decrease_is_refused_when_searched(vtype, how):
    """A leaf written with its keys out of order (its CRC right): every search of its keys
    refuses it, batch or one key (a query taking all its records reads only them, as
    docs/format.md says)."""
    items = [b"b", b"a"] if vtype is ValueType.BYTES else [5, 2]
    keys = PackedBytes.from_list(items) if vtype is ValueType.BYTES else np.array(items)
    raw = b"".join(encode_key_index("k", vtype, keys, np.array([0, 1], np.int64), 2,
                                    "00ff" * 4))
    index = KeyIndex.open(lambda ranges: [raw[a:b] for a, b in ranges], "x.ofkey", len(raw))
    first = items[0] if vtype is ValueType.BYTES else np.int64(items[0])
    with pytest.raises(SidecarError, match="not in ascending order"):
        if how == "find_one":
            index.find_one(first)
        elif how == "find":
            index.find([first])
        else:
            index.search([(None, first, True)])
    again = KeyIndex.open(lambda ranges: [raw[a:b] for a, b in ranges], "x.ofkey", len(raw))
    assert again.search([(None, None, False)])[0].tolist() == [0, 1]


@pytest.mark.parametrize("kept", [2, 5, 256])
@pytest.mark.parametrize("vtype", [ValueType.BYTES, ValueType.INT64])
def test_leaves_read_in_one_call_each_give_their_own_records(monkeypatch, vtype, kept):
    """The leaves a query reads at once (full ones and the short last one) each give their
    own records, whether they are searched, taken whole (decoded into the answer, or copied
    from a leaf a lookup holds) or read again after they were let go."""
    monkeypatch.setattr(KeyIndex, "KEPT_LEAVES", kept)
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 4, 4 * 37 + 3)
    values = [b"L%d" % v for v in labels] if vtype is ValueType.BYTES else labels.tolist()
    index = opened_key_index(vtype, values, 4, 4096)
    assert index.header.root_children == 38
    cast = bytes if vtype is ValueType.BYTES else np.int64
    for _ in range(2):
        for label in range(4):
            key = cast(b"L%d" % label if vtype is ValueType.BYTES else label)
            want = np.flatnonzero(labels == label).tolist()
            assert index.search([(key, key, True)])[0].tolist() == want
            assert index.find([key])[0].tolist() == want
        assert index.search([(None, None, False)])[0].tolist() == list(range(len(labels)))
        assert len(index.leaves) <= kept


@pytest.mark.parametrize("vtype", [ValueType.BYTES, ValueType.INT64])
@pytest.mark.parametrize("leaf", [0, 5, 9])
@pytest.mark.parametrize("record", [-1, 41])
def test_a_leaf_naming_a_record_outside_the_dataset_is_refused_by_its_place(vtype, leaf,
                                                                             record):
    """A leaf (its CRC right) naming a record below 0 or past the dataset's is refused, in
    a read of many leaves at once, by the page that does (the first, one in the middle, or
    the short last one)."""
    n = 4 * 9 + 2
    records = np.arange(n, dtype=np.int64)
    records[4 * leaf + 1] = record
    values = [b"k%03d" % i for i in range(n)]
    keys = PackedBytes.from_list(values) if vtype is ValueType.BYTES else np.arange(n)
    raw = b"".join(encode_key_index("k", vtype, keys, records, 41, "00ff" * 4,
                                    leaf_entries=4))
    index = KeyIndex.open(lambda ranges: [raw[a:b] for a, b in ranges], "x.ofkey", len(raw))
    at = index.base + int(index.root.pointers[leaf]["offset"])
    with pytest.raises(SidecarError, match=f"page at byte {at} names a record outside"):
        index.search([(None, None, False)])


@pytest.mark.parametrize("vtype", [ValueType.BYTES, ValueType.INT64])
def test_a_leaf_taken_whole_is_decoded_into_the_answer_and_not_kept(vtype):
    """Leaves whose keys all lie within a query's bounds are decoded straight into its
    answer and let go of: what the index holds after the query is the one leaf it searched
    and little more (neither their inflated keys nor their records); a later search of
    those leaves' keys reads them again and finds what a scan finds."""
    import tracemalloc

    n, leaf_entries = 64 * 512, 512
    values = [b"same-key-%04d" % (i // (n // 2)) for i in range(n)] \
        if vtype is ValueType.BYTES else [i // (n // 2) for i in range(n)]
    index = opened_key_index(vtype, values, leaf_entries, 4096)
    first = values[0] if vtype is ValueType.BYTES else np.int64(values[0])
    last = values[-1] if vtype is ValueType.BYTES else np.int64(values[-1])
    assert index.search([(last, last, True)])[0].tolist() == list(range(n // 2, n))  # warm
    held_leaves = set(index.leaves)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        found = index.search([(first, first, True)])[0]
        assert found.tolist() == list(range(n // 2))
        del found
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    records = 8 * n // 2  # the leaves of the first key, all but one wholly within
    assert held < records // 8
    assert len(set(index.leaves) - held_leaves) <= 1  # the leaf where the key ends
    assert index.find_one(first).tolist() == list(range(n // 2))
    assert index.find([first, last])[1].tolist() == list(range(n // 2, n))
    assert index.search([(None, first, False)])[0].tolist() == []


@pytest.mark.parametrize("vtype", [ValueType.BYTES, ValueType.INT64])
def test_answers_on_pooled_memory_stay_as_given(monkeypatch, vtype):
    """A query's answer made on the compiled module's pooled memory (every answer here) is
    its own: answers held keep their records while later queries are answered, and memory
    an answer let go of serves the next one."""
    from ofindex.columns import key_file

    monkeypatch.setattr(key_file, "_POOLED_ANSWER", 0)
    labels = np.random.default_rng(3).integers(0, 3, 3000)
    values = [b"L%d" % v for v in labels] if vtype is ValueType.BYTES else labels.tolist()
    index = opened_key_index(vtype, values, 64, 4096)
    cast = bytes if vtype is ValueType.BYTES else np.int64
    key = [cast(b"L%d" % k if vtype is ValueType.BYTES else k) for k in range(3)]
    want = [np.flatnonzero(labels == k).tolist() for k in range(3)]
    held = [index.search([(key[k], key[k], True)])[0] for k in range(3)]
    for _ in range(3):
        for k in range(3):
            again = index.search([(key[k], key[k], True)])[0]
            assert again.tolist() == want[k]
            del again
    assert [answer.tolist() for answer in held] == want
    assert index.search([(None, None, False)])[0].tolist() == list(range(len(labels)))
