"""The column sidecar format (docs/format.md, "Column sidecar"): whatever values a column
holds (ints at the extremes, floats with NaN and -0.0, bytes with NUL bytes and empty ones,
nulls anywhere, one distinct value or all distinct), writing and reading it gives them back
exactly, with each page's least and greatest values bounding what it holds; and a file
damaged anywhere is refused."""

from __future__ import annotations

import gzip
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ofindex.columns.column_file import (
    column_path,
    decode_column,
    decode_meta,
    encode_column,
    stat_bounds,
)
from ofindex.columns.packed import PackedBytes
from ofindex.columns.value_types import ValueType
from ofindex.errors import SidecarError

_INT = st.integers(-(1 << 63), (1 << 63) - 1)
_FLOAT = st.floats(allow_nan=True, allow_infinity=True, width=64)
_BYTES = st.binary(max_size=20)


@st.composite
def columns(draw):
    vtype = draw(st.sampled_from([ValueType.INT64, ValueType.FLOAT32, ValueType.FLOAT64,
                                  ValueType.BYTES]))
    few = draw(st.booleans())  # few distinct values: a dictionary pays
    element = {ValueType.INT64: _INT, ValueType.FLOAT32: st.floats(width=32),
               ValueType.FLOAT64: _FLOAT, ValueType.BYTES: _BYTES}[vtype]
    pool = draw(st.lists(element, min_size=1, max_size=4)) if few else None
    n = draw(st.integers(0, 300))
    items = [draw(st.sampled_from(pool)) if pool else draw(element) for _ in range(n)]
    valid = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    if vtype is ValueType.BYTES:
        values = PackedBytes.from_list(
            [v if ok else b"" for v, ok in zip(items, valid, strict=True)])
    else:
        values = np.array(items, dtype=np.float64 if vtype is not ValueType.INT64 else np.int64)
        values = values.astype(vtype.dtype)
    per_page = draw(st.sampled_from([1, 7, 64, 16384]))
    return vtype, values, valid, per_page


def _same(vtype, got, want, valid) -> bool:
    if vtype is ValueType.BYTES:
        return [v for v, ok in zip(got.tolist(), valid, strict=True) if ok] == \
            [v for v, ok in zip(want.tolist(), valid, strict=True) if ok]
    a, b = got[valid], want[valid]
    return a.dtype == b.dtype and a.tobytes() == b.tobytes()  # bit for bit: NaN, -0.0


@settings(max_examples=150)
@given(columns())
def test_a_column_reads_back_exactly(column):
    vtype, values, valid, per_page = column
    raw = b"".join(encode_column("c/é", vtype, values, valid, 0xABCDEF, per_page=per_page))
    meta, got, got_valid = decode_column(raw, "x.ofcol")
    assert meta.header.name == "c/é" and meta.header.body_crc == 0xABCDEF
    assert meta.header.count == len(valid) and got_valid.tolist() == valid.tolist()
    assert _same(vtype, got, values, valid)
    low, high = stat_bounds(meta)  # every page's values lie within its least and greatest
    for k in range(meta.header.pages):
        page = slice(k * per_page, (k + 1) * per_page)
        present = np.flatnonzero(valid[page]) + k * per_page
        if vtype is ValueType.BYTES:
            keys = [int.from_bytes(values.item(i)[:8].ljust(8, b"\0"), "big") for i in present]
        else:
            keys = [v for v in values[present].tolist() if v == v]  # NaN left out
        assert all(low[k] <= key <= high[k] for key in keys)
        if not keys:
            assert low[k] > high[k]


def test_a_dictionary_is_used_where_it_pays_and_not_elsewhere():
    labels = np.arange(10000, dtype=np.int64) % 7
    ids = np.arange(10000, dtype=np.int64) * 7919
    valid = np.ones(10000, dtype=bool)
    small = b"".join(encode_column("label", ValueType.INT64, labels, valid, 1))
    assert decode_meta(small, "x", len(small)).header.dictionary and len(small) < 2000
    sorted_ids = b"".join(encode_column("id", ValueType.INT64, ids, valid, 1))
    meta = decode_meta(sorted_ids, "x", len(sorted_ids))
    assert not meta.header.dictionary and set(meta.directory["encoding"]) == {2}  # deltas
    assert len(sorted_ids) < 10000  # under a byte per record


def test_many_distinct_bytes_values_are_told_without_sorting_them(monkeypatch):
    """A shard of more distinct bytes values than a dictionary holds (ids) is told so from
    their CRCs' low bits, without the sort of the CRCs (12 ms of a shard's 125,000 ids); a
    column of few distinct values among as many records still gets its dictionary."""
    from ofindex.columns import column_file

    n = 70000
    sorts = []
    real = column_file._distinct
    monkeypatch.setattr(column_file, "_distinct", lambda values: sorts.append(len(values))
                        or real(values))
    valid = np.ones(n, dtype=bool)
    ids = PackedBytes.from_list([b"img-%09d" % i for i in range(n)])
    raw = b"".join(encode_column("id", ValueType.BYTES, ids, valid, 1))
    meta, values, _ = decode_column(raw, "x")
    assert not meta.header.dictionary and values.tolist() == ids.tolist()
    assert sorts == []
    few = PackedBytes.from_list([b"class-%d" % (i % 300) for i in range(n)])
    raw = b"".join(encode_column("c", ValueType.BYTES, few, valid, 1))
    meta, values, _ = decode_column(raw, "x")
    assert meta.header.dictionary and meta.header.dictionary_entries == 300
    assert values.tolist() == few.tolist() and sorts == [n]
    crcs = np.arange(n, dtype=np.uint32) * np.uint32(2654435761)  # distinct low bits
    assert column_file._surely_too_many(crcs)
    assert not column_file._surely_too_many(crcs % np.uint32(1000))
    assert not column_file._surely_too_many(crcs[:column_file.MAX_DICTIONARY])


def test_no_value_at_all_is_a_column_of_type_none():
    raw = b"".join(encode_column("x", ValueType.NONE, np.zeros(5, np.int64),
                                 np.zeros(5, bool), 7))
    meta, _, valid = decode_column(raw, "x")
    assert meta.header.vtype is ValueType.NONE and meta.header.nulls == 5 and not valid.any()
    assert len(raw) == 72  # a header, no page


@pytest.mark.parametrize("vtype", [ValueType.INT64, ValueType.BYTES])
def test_every_damaged_byte_is_refused(vtype):
    rng = np.random.default_rng(0)
    n = 200
    valid = rng.random(n) > 0.2
    values = (PackedBytes.from_list([b"v%d" % i for i in rng.integers(0, 1000, n)])
              if vtype is ValueType.BYTES else rng.integers(-5, 5, n))
    raw = b"".join(encode_column("col", vtype, values, valid, 3, per_page=64))
    for at in range(len(raw)):
        broken = bytearray(raw)
        broken[at] ^= 0x01
        with pytest.raises(SidecarError):
            decode_column(bytes(broken), "x.ofcol")
    for cut in (0, 8, 63, 64, 72, len(raw) - 1):
        with pytest.raises(SidecarError):
            decode_column(raw[:cut], "x.ofcol")
    with pytest.raises(SidecarError):
        decode_column(raw + bytes(8), "x.ofcol")


def test_another_version_is_refused_by_name():
    raw = bytearray(b"".join(encode_column("c", ValueType.INT64, np.zeros(3, np.int64),
                                           np.ones(3, bool), 0)))
    struct.pack_into("<H", raw, 8, 2)
    with pytest.raises(SidecarError, match="version 2"):
        decode_column(bytes(raw), "x.ofcol")


@pytest.mark.parametrize("vtype", [ValueType.INT64, ValueType.FLOAT32, ValueType.BYTES])
def test_a_key_index_finds_every_key_and_refuses_every_damaged_byte(vtype):
    from ofindex.columns.key_file import KeyIndex, encode_key_index

    rng = np.random.default_rng(1)
    n = 300
    if vtype is ValueType.BYTES:
        items = sorted((b"k%d" % v, i) for i, v in enumerate(rng.integers(0, 90, n)))
        keys = PackedBytes.from_list([k for k, _ in items])
    else:
        raw = rng.integers(-40, 40, n).astype(vtype.dtype)
        order = np.argsort(raw, kind="stable")
        items = [(raw[i], int(i)) for i in order]
        keys = raw[order]
    records = np.array([i for _, i in items], dtype=np.int64)
    raw_file = b"".join(encode_key_index("k", vtype, keys, records, n, "00ff" * 4,
                                         leaf_entries=16, fanout=3))

    def opened(data):
        return KeyIndex.open(lambda ranges: [data[a:b] for a, b in ranges], "x.ofkey",
                             len(data))

    index = opened(raw_file)
    assert index.header.levels == 3  # 19 leaves, 7 nodes, 3 nodes, the root
    for value in {v for v, _ in items}:
        want = sorted(i for v, i in items if v == value)
        assert index.search([(value, value, True)])[0].tolist() == want
    assert index.search([(None, None, False)])[0].tolist() == list(range(n))
    for at in range(len(raw_file)):
        broken = bytearray(raw_file)
        broken[at] ^= 0x01
        with pytest.raises(SidecarError):
            opened(bytes(broken)).search([(None, None, False)])


@settings(max_examples=100)
@given(st.lists(st.binary(max_size=19), max_size=60), st.booleans())
def test_bytes_keys_sort_as_python_sorts_bytes(items, one_length):
    """The key index's order of bytes values: Python's (a value before a longer one it
    starts, even one that adds only zero bytes), ties in their order."""
    from ofindex.columns.key_build import _bytes_order

    if one_length:
        items = [bytes(v).ljust(7, b"\0")[:7] for v in items]
    order = _bytes_order(PackedBytes.from_list(items)).tolist()
    assert order == sorted(range(len(items)), key=items.__getitem__)


@settings(max_examples=100)
@given(st.lists(st.binary(max_size=9), min_size=1, max_size=40), st.booleans(), st.data())
def test_packed_bytes_take_slice_and_compare(items, one_length, data):
    if one_length:
        items = [bytes(v).ljust(4, b"\0")[:4] for v in items]
    packed = PackedBytes.from_list(items)
    picks = data.draw(st.lists(st.integers(0, len(items) - 1), max_size=30))
    assert packed.take(np.array(picks, dtype=np.int64)).tolist() == [items[i] for i in picks]
    lo, hi = sorted(data.draw(st.lists(st.integers(0, len(items)), min_size=2, max_size=2)))
    part = packed[lo:hi]
    assert part.tolist() == items[lo:hi]
    assert part.take(np.arange(hi - lo)).tolist() == items[lo:hi]
    bound = data.draw(st.binary(max_size=10))
    assert packed.compare(bound).tolist() == [(v > bound) - (v < bound) for v in items]
    assert packed.equal_to([bound]).tolist() == [v == bound for v in items]


@settings(max_examples=200, derandomize=True)
@given(st.sampled_from(["equal", "byte", "short", "wide", "full"]), st.integers(0, 400),
       st.data())
def test_stable_order_is_numpys_stable_argsort(spread, n, data):
    """The key index's sort of 64-bit words (radix, packed with positions, or numpy's
    argsort, as their range allows) orders them as numpy's stable argsort does: ties
    keep their order."""
    from ofindex.columns.key_build import _number_order, stable_order

    top = {"equal": 0, "byte": 9, "short": 70_000, "wide": 1 << 40, "full": (1 << 64) - 1}
    base = data.draw(st.integers(0, (1 << 64) - 1 - top[spread]))
    shift = data.draw(st.integers(0, 3))
    draws = data.draw(st.lists(st.integers(0, top[spread] >> shift), min_size=n, max_size=n))
    words = np.array([base + (d << shift) for d in draws], dtype=np.uint64)
    assert stable_order(words).tolist() == np.argsort(words, kind="stable").tolist()
    numbers = words.view(np.int64)
    assert _number_order(numbers).tolist() == np.argsort(numbers, kind="stable").tolist()


@settings(max_examples=100, derandomize=True)
@given(st.integers(8, 16), st.lists(st.binary(min_size=16, max_size=16), max_size=40))
def test_prefixes_of_values_of_one_length(width, items):
    """Each value's first 8 bytes as a big-endian number, values of one length of 8 bytes
    or more (read as rows of a table) as any others."""
    items = [v[:width] for v in items]
    packed = PackedBytes.from_list([b"xy", *items])[1:]  # not from the data's start
    assert packed.prefixes().tolist() == [int.from_bytes(v[:8], "big") for v in items]


@settings(max_examples=100, derandomize=True)
@given(st.sampled_from(["u1", "<u2", "<i4", "<i8", "<f4", "<f8"]), st.binary(max_size=200))
def test_byte_planes_round_trip(dtype, raw):
    """Byte planes hold byte ``j`` of every value in plane ``j`` and read back bit for bit."""
    from ofindex.columns import page_codec

    dtype = np.dtype(dtype)
    width = dtype.itemsize
    count = len(raw) // width
    values = np.frombuffer(raw[:count * width], dtype=dtype)
    planes = page_codec.to_planes(values)
    assert planes == bytes(raw[k * width + j] for j in range(width) for k in range(count))
    back = page_codec.from_planes(planes, count, dtype)
    assert back.dtype == dtype and back.tobytes() == values.tobytes()


@st.composite
def shard_columns(draw):
    """Int64 columns of a few shards, as a build writes them: some with a dictionary (few
    values), some without (many), some holding no value at all, pages of a few records."""
    shards = []
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, 40))
        shape = draw(st.sampled_from(["few", "many", "none"]))
        pool = list(range(-3, 4)) if shape == "few" else list(range(-1000, 1000))
        items = [draw(st.sampled_from(pool)) for _ in range(n)]
        valid = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        shards.append((None if shape == "none" else items,
                       [False] * n if shape == "none" else valid))
    return shards


_CONDITION = st.one_of(st.integers(-4, 4), st.none(),
                       st.lists(st.one_of(st.integers(-4, 4), st.none()), max_size=3),
                       st.tuples(st.one_of(st.none(), st.integers(-4, 4)),
                                 st.one_of(st.none(), st.integers(-4, 4))))


@settings(max_examples=120, derandomize=True)
@given(shard_columns(), _CONDITION)
def test_a_scan_of_column_sidecars_finds_what_a_scan_of_the_values_finds(
        tmp_path_factory, shards, given):
    """The column scan of a query (pages of dictionary codes matched by their codes, others
    by their values, shards without a value matching nulls only) against a brute-force
    scan of the values."""
    from ofindex.columns.conditions import parse_conditions
    from ofindex.columns.shard_reader import ColumnReader, ShardPlace
    from ofindex.storage.local import LocalStorage

    root = tmp_path_factory.mktemp("scan")
    storage = LocalStorage()
    places, truth = [], []
    for k, (items, valid) in enumerate(shards):
        index_path = str(root / f"part-{k}.ofidx")
        mask = np.array(valid, dtype=bool)
        vtype = ValueType.NONE if items is None else ValueType.INT64
        values = np.array(items or [0] * len(valid), dtype=np.int64)
        storage.write_atomic(column_path(index_path, "c"), list(encode_column(
            "c", vtype, values, mask, 7, per_page=4)))
        places.append(ShardPlace(storage, index_path, len(valid), 7, f"part-{k}"))
        truth += [None if not ok else v for v, ok in zip(values.tolist(), valid, strict=True)]
    reader = ColumnReader(places)
    condition = parse_conditions({"c": given})[0].typed(reader.vtype("c"))
    if isinstance(given, tuple):
        want = [i for i, v in enumerate(truth) if v is not None and
                (given[0] is None or v >= given[0]) and (given[1] is None or v < given[1])]
    else:
        items = given if isinstance(given, list) else [given]
        want = [i for i, v in enumerate(truth) if v in items]
    got = reader.select(condition)
    assert got.tolist() == want and got.dtype == np.int64


@pytest.mark.parametrize("module, what, magic", [
    ("column_file", "column sidecar", "OFCOLMN"), ("key_file", "key index", "OFKEYIX")])
def test_a_file_of_another_kind_or_too_short_is_named_and_refused(module, what, magic):
    """The column sidecar's and the key index's headers are checked alike: another magic or
    fewer bytes than the fixed header is a SidecarError naming the file, what it should be
    and the command that builds it again."""
    import importlib

    from ofindex.errors import SidecarError

    header_size_of = importlib.import_module(f"ofindex.columns.{module}").header_size_of
    for prefix in (b"OFINDEX\0" + bytes(100), magic.encode() + b"\0"):
        with pytest.raises(SidecarError) as caught:
            header_size_of(prefix, "/data/x.col")
        assert str(caught.value) == (
            f"/data/x.col: the {what} is corrupt (not a {what}: it does not start with "
            f"{magic}); rebuild it with `ofindex build --columns ...`")


@pytest.mark.parametrize("inflater", ["isal", "zlib"])
@pytest.mark.parametrize("make, why", [
    (lambda good: zlib.compress(good), None),
    (lambda good: zlib.compress(good + b"x"), "exactly"),  # a byte too many
    (lambda good: zlib.compress(bytes(1 << 22)), "exactly"),  # far more: never inflated
    (lambda good: zlib.compress(good[:-1]), "exactly"),  # a byte too few
    (lambda good: zlib.compress(good)[:-1], "exactly"),  # cut short
    (lambda good: zlib.compress(good) + b"\0", "exactly"),  # bytes after the stream
    (lambda good: zlib.compress(good, wbits=-15), "not a zlib stream"),  # raw deflate
    (lambda good: gzip.compress(good), "not a zlib stream"),
    (lambda good: bytes(64), "not a zlib stream"),
])
def test_a_page_inflates_to_exactly_its_size_with_either_inflater(monkeypatch, inflater, make,
                                                                   why):
    """A deflated page inflates through ISA-L where it is installed, else zlib: either gives
    the page, and refuses one that is not a zlib stream or inflates to another size
    (inflating no more than one byte past it)."""
    from isal import isal_zlib

    from ofindex.columns import page_codec
    from ofindex.deflate import fast_inflate

    monkeypatch.setattr(fast_inflate, "ISAL", isal_zlib if inflater == "isal" else None)
    good = bytes(range(256)) * 40
    stored = make(good)
    if why is None:
        assert page_codec.inflate_exact(stored, page_codec.DEFLATED, len(good), "p") == good
        return
    with pytest.raises(SidecarError, match=why):
        page_codec.inflate_exact(stored, page_codec.DEFLATED, len(good), "p")


@pytest.mark.parametrize("inflater", ["isal", "zlib"])
def test_a_page_s_adler_32_is_left_to_its_crc32c(monkeypatch, inflater):
    """A deflated page's Adler-32 is not computed (the page's CRC32C, which every reader
    checks first, covers the stream): a page whose Adler-32 alone is wrong inflates, with
    either inflater; its zlib header and the deflate data's end are still checked."""
    from isal import isal_zlib

    from ofindex.columns import page_codec
    from ofindex.deflate import fast_inflate

    monkeypatch.setattr(fast_inflate, "ISAL", isal_zlib if inflater == "isal" else None)
    good = bytes(range(256)) * 40
    stored = zlib.compress(good)
    wrong = stored[:-4] + bytes(b ^ 0xFF for b in stored[-4:])
    assert page_codec.inflate_exact(wrong, page_codec.DEFLATED, len(good), "p") == good
    for bad_header in (b"\x79" + stored[1:], stored[:1] + b"\xbb" + stored[2:]):
        with pytest.raises(SidecarError, match="not a zlib stream"):
            page_codec.inflate_exact(bad_header, page_codec.DEFLATED, len(good), "p")


def test_pages_inflate_through_isal_where_it_is_installed(monkeypatch):
    """Where ISA-L is installed (fast_inflate.ISAL), a key index's and a column sidecar's
    pages inflate through it (twice as fast as zlib on a key index's leaves)."""
    from ofindex.columns import page_codec
    from ofindex.columns.key_file import KeyIndex, encode_key_index
    from ofindex.deflate import fast_inflate

    calls = []
    raw_inflate = fast_inflate.IGZIP  # what pages inflate through (raw deflate) with ISA-L

    class RawSpy:
        DECOMP_DEFLATE, IsalError = raw_inflate.DECOMP_DEFLATE, raw_inflate.IsalError

        @staticmethod
        def IgzipDecompressor(flag):
            calls.append(1)
            return raw_inflate.IgzipDecompressor(flag)

    monkeypatch.setattr(fast_inflate, "IGZIP", RawSpy)
    n = 64
    raw = b"".join(encode_key_index("k", ValueType.INT64, np.zeros(n, np.int64),
                                    np.arange(n, dtype=np.int64), n, "00ff" * 4,
                                    leaf_entries=16))
    index = KeyIndex.open(lambda ranges: [raw[a:b] for a, b in ranges], "x.ofkey", len(raw))
    assert index.search([(0, 0, True)])[0].tolist() == list(range(n))
    assert len(calls) == 4  # the four leaves, each deflated
    good = bytes(4096)
    assert page_codec.inflate_exact(zlib.compress(good), page_codec.DEFLATED, 4096, "p") == good
    assert len(calls) == 5


@pytest.mark.parametrize("deflater", ["isal", "zlib"])
def test_pages_deflate_through_isal_where_it_is_installed(monkeypatch, deflater):
    """Pages are deflated by ISA-L where it is installed (3-7 times faster than zlib's level 1,
    no larger), else by zlib: either writes a zlib stream that both inflaters read back, and a
    page that does not pay is stored as it is."""
    from isal import isal_zlib

    from ofindex.columns import page_codec
    from ofindex.deflate import fast_inflate

    calls = []

    class Spy:
        error = isal_zlib.error
        decompressobj = staticmethod(isal_zlib.decompressobj)

        @staticmethod
        def compress(raw, level):
            calls.append(level)
            return isal_zlib.compress(raw, level)

    monkeypatch.setattr(fast_inflate, "ISAL", Spy if deflater == "isal" else None)
    raw = np.random.default_rng(5).integers(0, 10, 16384).astype(np.uint8).tobytes()
    stored, code = page_codec.deflate(raw)
    assert code == page_codec.DEFLATED and len(stored) < len(raw) * 0.6  # ~3.3 bits a byte
    assert calls == ([page_codec.LEVEL] if deflater == "isal" else [])
    assert zlib.decompress(stored) == raw
    for inflater in (isal_zlib, None):
        monkeypatch.setattr(fast_inflate, "ISAL", inflater)
        assert page_codec.inflate_exact(stored, code, len(raw), "p") == raw
    monkeypatch.setattr(fast_inflate, "ISAL", Spy if deflater == "isal" else None)
    noise = np.random.default_rng(6).bytes(4096)
    assert page_codec.deflate(noise) == (noise, page_codec.STORED)
