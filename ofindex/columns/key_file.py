"""The key index: one column of a whole dataset sorted by value, to find records by key in
a few page reads (``ds.lookup("image/id", key)``, and ``ds.where(...)`` on the column);
``ofindex-keys.<column>.ofkey`` beside the dataset's manifest (specified in docs/format.md,
"Key index").

Its entries are ``(value, global record number)`` for every record with a value (NaN left
out), in ascending order of value and then record. They are cut into *leaf pages* of
:data:`LEAF_ENTRIES`; a tree of *nodes* above them holds each child's first value and place,
up to :data:`FANOUT` children a node; the top node, the *root*, follows the header. A lookup
reads the header and root once, then one node per level and the leaves that may hold the
value: for a dataset of up to 4096 x 4096 = 16.7 M keyed records, one leaf (a few kB,
deflated) per key; a batch of keys reads each level's pages in one round. The file names the
dataset's identity: a reader uses it only for the dataset it was built for.
"""

from __future__ import annotations

import bisect
import dataclasses
import struct
from collections.abc import Callable, Sequence
from typing import Any

import crc32c as _crc32c
import numpy as np

from .._accel import pooled_array
from ..decode._plans import loops
from ..errors import SidecarError
from . import page_codec
from .column_file import corrupt, name_part, named_header_size, pad8
from .packed import PackedBytes
from .sorted_keys import KeyBatch, SortedKeys
from .value_types import ValueType

MAGIC = b"OFKEYIX\0"
VERSION = 1
#: The key index's name: ``ofindex-keys.<column, percent-encoded>.ofkey``.
PREFIX, SUFFIX = "ofindex-keys.", ".ofkey"
FIXED_HEADER = 72
#: Entries of a leaf page: 4,096 int64 keys and their records are 64 KiB before deflating
#: (a few kB after: the records' deltas are small, equal keys repeat).
LEAF_ENTRIES = 4096
#: Children of a node at most: a root of 4,096 leaves covers 16.7 M entries in one level.
FANOUT = 4096
#: A leaf held for one-key lookups keeps its keys at every FENCE_STEP-th place too (its
#: fences, csrc/keysearch.c): a random key's search then reads 64 keys of its 4,096 beside the
#: fences, which stay in the caches (1.6 % more memory than the keys: 200 kB for a million
#: 13-byte ids).
FENCE_STEP = 64

_HEAD = struct.Struct("<8sHBBHHQQ8sQQIIII")
#: A node's pointer to a child: where it is (from the start of the pages), its stored and
#: raw size, its CRC32C and compression, its own children (a node's; 0 for a leaf) and how
#: many entries lie under it.
POINTER = np.dtype([("offset", "<u8"), ("stored", "<u4"), ("crc", "<u4"), ("raw", "<u4"),
                    ("compression", "u1"), ("reserved", "u1"), ("children", "<u2"),
                    ("entries", "<u8")])
assert _HEAD.size == FIXED_HEADER and POINTER.itemsize == 32
#: Bytes of a query's answer from which it is made on pooled memory (see ``_answer``).
_POOLED_ANSWER = 1 << 20
#: A pointer's fields as Python ints (``pointer.item()``), in :data:`POINTER`'s order.
_Fields = tuple[int, int, int, int, int, int, int, int]

#: A key index's keys: numbers or packed bytes.
Keys = np.ndarray | PackedBytes
#: Reads byte ranges ``(start, end)`` of the key index file, all at once where it can.
ReadRanges = Callable[[Sequence[tuple[int, int]]], list[bytes]]


def key_file_name(column: str) -> str:
    """The key index's name: ``ofindex-keys.<column>.ofkey``, the column written as in column
    sidecars' names (:func:`~.column_file.name_part`)."""
    return f"{PREFIX}{name_part(column)}{SUFFIX}"


@dataclasses.dataclass(frozen=True)
class KeyHeader:
    """A key index's header.

    Attributes:
        name: The column.
        vtype: Its value type.
        levels: Levels of nodes above the leaves (1: the root points at leaves).
        entries: Entries (records with a value, NaN left out).
        records: The dataset's records.
        identity: The dataset's identity (16 hexadecimal digits).
        root_bytes: Bytes of the root.
        pages_bytes: Bytes of the pages after the root (the rest of the file).
        root_children: Children of the root.
        root_crc: CRC32C of the root.
        size: Bytes of the header.
    """

    name: str
    vtype: ValueType
    levels: int
    entries: int
    records: int
    identity: str
    root_bytes: int
    pages_bytes: int
    root_children: int
    root_crc: int
    size: int


# -- writing ------------------------------------------------------------------------------------
def _keys_bytes(keys: Keys, vtype: ValueType) -> bytes:
    if isinstance(keys, PackedBytes):
        return page_codec.pack_bytes_values(keys)
    return page_codec.to_planes(keys.astype(vtype.dtype))


def _leaf(keys: Keys, records: np.ndarray, vtype: ValueType) -> bytes:
    deltas = np.diff(records.astype(np.int64), prepend=np.int64(0))
    return _keys_bytes(keys, vtype) + page_codec.to_planes(deltas)


def _node(pointers: np.ndarray, firsts: Keys, vtype: ValueType) -> bytes:
    return pointers.tobytes() + _keys_bytes(firsts, vtype)


def _first_keys(keys: Keys, starts: np.ndarray) -> Keys:
    if isinstance(keys, PackedBytes):
        return keys.take(starts)
    firsts: np.ndarray = keys[starts]
    return firsts


class _Pages:
    """Pages as they are written after the header and root: each deflated where it pays."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.parts: list[bytes] = []

    def add(self, raw: bytes, entries: int,
            children: int = 0) -> tuple[int, int, int, int, int, int, int, int]:
        stored, compression = page_codec.deflate(raw)
        pointer = (self.at, len(stored), _crc32c.crc32c(stored), len(raw), compression, 0,
                   children, entries)
        self.parts.append(stored)
        self.at += len(stored)
        return pointer


def encode_key_index(name: str, vtype: ValueType, keys: Keys, records: np.ndarray,
                     total_records: int, identity: str, *, leaf_entries: int = LEAF_ENTRIES,
                     fanout: int = FANOUT) -> list[bytes]:
    """A key index's bytes.

    Args:
        name: The column.
        vtype: Its value type (``NONE`` for a column without values: no entries).
        keys: The values, ascending (ties in ascending order of record).
        records: Their global record numbers.
        total_records: The dataset's records.
        identity: The dataset's identity (16 hexadecimal digits).
        leaf_entries: Entries per leaf page.
        fanout: Children per node at most (2 to 65,535).

    Returns:
        The file's parts, in order.
    """
    encoded_name = name.encode("utf-8")
    entries = len(records)
    starts = np.arange(0, entries, leaf_entries, dtype=np.int64)
    pages = _Pages(0)  # offsets count from where the pages start, after the root
    pointers = np.array([pages.add(_leaf(keys[a:a + leaf_entries], records[a:a + leaf_entries],
                                         vtype), min(leaf_entries, entries - a))
                         for a in starts.tolist()], dtype=POINTER)
    firsts = _first_keys(keys, starts)
    levels = 1
    while len(pointers) > fanout:
        groups = np.arange(0, len(pointers), fanout)
        upper = []
        for a in groups.tolist():
            part = pointers[a:a + fanout]
            raw = _node(part, _first_keys(firsts, np.arange(a, a + len(part))), vtype)
            upper.append(pages.add(raw, int(part["entries"].sum()), len(part)))
        pointers, firsts = np.array(upper, dtype=POINTER), _first_keys(firsts, groups)
        levels += 1
    root = pad8(_node(pointers, firsts, vtype))
    fields = [MAGIC, VERSION, int(vtype), 0, len(encoded_name), levels, entries,
              total_records, bytes.fromhex(identity), len(root), pages.at, len(pointers),
              _crc32c.crc32c(root), 0]
    head = _HEAD.pack(*fields, 0) + pad8(encoded_name)
    head = _HEAD.pack(*fields, _crc32c.crc32c(head)) + head[FIXED_HEADER:]
    return [head, root, *pages.parts]


# -- reading ------------------------------------------------------------------------------------
def _corrupt(url: str, why: str) -> SidecarError:
    return corrupt(url, "key index", why)


def header_size_of(prefix: bytes | memoryview, url: str) -> int:
    """The header's size, from its first :data:`FIXED_HEADER` bytes.

    Raises:
        SidecarError: Not a key index (too short, another magic).
    """
    return named_header_size(prefix, url, magic=MAGIC, fixed=FIXED_HEADER, what="key index")


def decode_key_header(raw: bytes | memoryview, url: str) -> KeyHeader:
    """Decode and check a key index's header.

    Args:
        raw: At least the header's bytes (see :func:`header_size_of`).
        url: The file, for messages.

    Returns:
        The header.

    Raises:
        SidecarError: Another magic, version or flags, a header CRC that fails, a name that
            is not UTF-8, or impossible numbers.
    """
    size = header_size_of(raw, url)
    if len(raw) < size:
        raise _corrupt(url, f"the header needs {size} bytes, the file has {len(raw)}")
    (_magic, version, type_code, flags, name_length, levels, entries, records, identity,
     root_bytes, pages_bytes, children, root_crc, reserved, header_crc) = _HEAD.unpack_from(
        raw, 0)
    if version != VERSION:
        raise SidecarError(f"{url}: key index version {version}, this ofindex reads version "
                           f"{VERSION}; upgrade ofindex, or rebuild the columns")
    zeroed = bytes(raw[:FIXED_HEADER - 4]) + bytes(4) + bytes(raw[FIXED_HEADER:size])
    if _crc32c.crc32c(zeroed) != header_crc:
        raise _corrupt(url, "its header CRC does not match")
    try:
        vtype = ValueType(type_code)
        name = bytes(raw[FIXED_HEADER:FIXED_HEADER + name_length]).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise _corrupt(url, "an unknown value type or a name that is not UTF-8") from None
    if flags or reserved or not name_length or any(raw[FIXED_HEADER + name_length:size]):
        raise _corrupt(url, "unknown flags or reserved bytes set")
    if not levels or entries > records or root_bytes % 8 or (entries and not children) or \
            children > FANOUT or (not entries and (children or pages_bytes)):
        raise _corrupt(url, "impossible levels, entries or root")
    return KeyHeader(name, vtype, levels, entries, records, identity.hex(), root_bytes,
                     pages_bytes, children, root_crc, size)


def _decode_keys(raw: bytes | memoryview, count: int, vtype: ValueType, url: str,
                 where: str) -> Keys:
    """A page's ``count`` keys of ``vtype`` from their bytes."""
    if vtype is ValueType.BYTES:
        return page_codec.unpack_bytes_values(raw, count, where)
    if vtype is ValueType.NONE or len(raw) != vtype.width * count:
        raise _corrupt(url, f"{where} holds {len(raw)} bytes of keys for {count}")
    return page_codec.from_planes(raw, count, vtype.dtype)


class _Leaf:
    """A decoded leaf: its records, and its keys decoded when first searched.

    Args:
        records: Its records (global numbers).
        raw_keys: Its keys' bytes (bytes keys unpacked, their lengths checked).
        vtype: Their type.
        url: The key index, for messages.
        where: The page, for messages.
    """

    __slots__ = ("_keys", "_raw_keys", "_vtype", "_where", "records")

    def __init__(self, records: np.ndarray, raw_keys: memoryview | PackedBytes,
                 vtype: ValueType, url: str, where: str) -> None:
        self.records = records
        self._raw_keys, self._vtype, self._where = raw_keys, vtype, (url, where)
        self._keys: SortedKeys | None = None

    @property
    def keys(self) -> SortedKeys:
        """Its keys, ascending.

        Raises:
            SidecarError: They are damaged or not in ascending order.
        """
        if self._keys is None:
            url, where = self._where
            raw = self._raw_keys
            keys = SortedKeys(raw if isinstance(raw, PackedBytes) else
                              _decode_keys(raw, len(self.records), self._vtype, url, where))
            if not keys.ascending():
                raise _corrupt(url, f"{where}'s keys are not in ascending order")
            self._keys, self._raw_keys = keys, memoryview(b"")
        return self._keys


@dataclasses.dataclass(frozen=True)
class _Node:
    """A decoded node: its children's pointers and first keys."""

    pointers: np.ndarray
    firsts: SortedKeys
    offsets: list[int]  # the pointers' offsets as ints (read once, not per lookup)
    #: The first keys as Python objects, searched with bisect for one key (a node holds at
    #: most FANOUT of them: bisect takes 0.3 us where a numpy search takes 1-2 us a call).
    first_items: list[Any]
    #: Per child that is a leaf held (and whose keys are a table of the node's kind), its
    #: keys' table, their width and its records: what the compiled one-key lookup searches
    #: (csrc/keysearch.c's ``key_lookup``); ``None`` for the others.
    slots: list[Any]


class KeyIndex:
    """A key index opened for lookups: its header and root held, its other pages read as
    lookups need them (each level's pages of a batch of lookups in one call of ``read``),
    nodes and recent leaves kept.

    Args:
        header: The decoded header.
        root: The root's bytes.
        read: Reads byte ranges of the file.
        url: The file, for messages.

    Raises:
        SidecarError: The root is damaged.
    """

    #: Leaves kept (each a few kB to a few hundred kB decoded).
    KEPT_LEAVES = 256

    def __init__(self, header: KeyHeader, root: bytes, read: ReadRanges, url: str) -> None:
        self.header, self.read, self.url = header, read, url
        self.base = header.size + header.root_bytes  # where the pages start
        if len(root) != header.root_bytes or _crc32c.crc32c(root) != header.root_crc:
            raise _corrupt(url, "its root's CRC does not match")
        self.root = self._decode_node(root, header.root_children, "its root", padded=True)
        if int(self.root.pointers["entries"].sum()) != header.entries:
            raise _corrupt(url, "the entries under its root do not add up")
        self.nodes: dict[int, _Node] = {}
        self.leaves: dict[int, _Leaf] = {}
        self._slot_of: dict[int, tuple[list[Any], int]] = {}  # a held leaf's node slot

    @classmethod
    def open(cls, read: ReadRanges, url: str, size: int, *, guess: int = 1 << 16) -> KeyIndex:
        """Read a key index's header and root (one read when they fit in ``guess`` bytes).

        Args:
            read: Reads byte ranges of the file.
            url: The file, for messages.
            size: The file's size.
            guess: Bytes read first.

        Returns:
            The opened key index.

        Raises:
            SidecarError: The header or root is damaged.
        """
        prefix = read([(0, min(size, guess))])[0]
        header = decode_key_header(prefix, url)
        end = header.size + header.root_bytes
        if end + header.pages_bytes != size:
            raise _corrupt(url, f"it has {size} bytes, its header says "
                                f"{end + header.pages_bytes}")
        if len(prefix) < end:
            prefix += read([(len(prefix), end)])[0]
        return cls(header, bytes(prefix[header.size:end]), read, url)

    # -- pages ------------------------------------------------------------------------------
    def _keys(self, raw: bytes, count: int, where: str) -> Keys:
        return _decode_keys(raw, count, self.header.vtype, self.url, where)

    def _decode_node(self, raw: bytes, count: int, where: str, *, padded: bool = False
                     ) -> _Node:
        """A node's pointers and first keys (the root is padded to 8 bytes with zeros)."""
        size = POINTER.itemsize * count
        if len(raw) < size:
            raise _corrupt(self.url, f"{where} is too short for its {count} children")
        pointers = np.frombuffer(raw, dtype=POINTER, count=count)
        body = raw[size:]
        vtype = self.header.vtype
        if vtype is ValueType.BYTES:
            head = 4 * count
            used = head + (int(np.frombuffer(body, "<u4", count).astype(np.int64).sum())
                           if len(body) >= head else 0)
        else:
            used = vtype.width * count
        rest = body[used:]
        if len(body) < used or (rest and not padded) or len(rest) >= 8 or any(rest):
            raise _corrupt(self.url, f"{where}'s keys do not fill it")
        firsts = SortedKeys(self._keys(body[:used], count, where))
        if not firsts.ascending():
            raise _corrupt(self.url, f"{where}'s keys are not in ascending order")
        ends = pointers["offset"].astype(np.int64) + pointers["stored"].astype(np.int64)
        if count and (int(ends.max()) > self.header.pages_bytes or
                      bool(pointers["compression"].max() > 1) or
                      bool(pointers["reserved"].any())):
            raise _corrupt(self.url, f"{where} points past the pages or holds bad fields")
        return _Node(pointers, firsts, pointers["offset"].astype(np.int64).tolist(),
                     firsts.as_list(), [None] * count)

    def _stored(self, fields: list[_Fields]) -> list[bytes]:
        """The stored bytes of pages (their pointers' fields), read in one call, their CRCs
        checked."""
        ranges = [(self.base + offset, self.base + offset + size)
                  for offset, size, *_ in fields]
        stored = self.read(ranges) if ranges else []
        crc32c = _crc32c.crc32c
        for (offset, size, crc, *_), data in zip(fields, stored, strict=True):
            if len(data) != size or crc32c(data) != crc:
                where = f"page at byte {self.base + offset}"
                raise _corrupt(self.url, f"the CRC of its {where} does not match")
        return stored

    def _inflated(self, fields: _Fields, data: bytes, where: str) -> bytes:
        """A page's raw bytes from its stored bytes (checked: exactly its raw size)."""
        _, _, _, raw, compression, *_ = fields
        return page_codec.inflate_exact(data, compression, raw, f"{self.url}: {where}")

    def _leaf_parts(self, raw: bytes, count: int, where: str
                    ) -> tuple[memoryview, memoryview | PackedBytes]:
        """A leaf's record planes and keys (bytes keys unpacked), their lengths checked (the
        keys' order is checked when they are searched)."""
        if len(raw) < 8 * count:
            raise _corrupt(self.url, f"{where} is too short for {count} records")
        view = memoryview(raw)
        keys_end = len(raw) - 8 * count
        vtype = self.header.vtype
        if vtype is ValueType.BYTES:
            return view[keys_end:], page_codec.unpack_bytes_values(raw[:keys_end], count,
                                                                   f"{self.url}: {where}")
        if vtype is ValueType.NONE or keys_end != vtype.width * count:
            raise _corrupt(self.url, f"{where} holds {keys_end} bytes of keys for {count}")
        return view[keys_end:], view[:keys_end]

    def _leaf_page(self, fields: _Fields, data: bytes, where: str
                   ) -> tuple[bytes, int, memoryview | PackedBytes]:
        """A leaf's raw page, entry count and keys (see :meth:`_leaf_parts`), from its
        pointer's fields and stored bytes.

        Raises:
            SidecarError: The page is damaged.
        """
        count = fields[-1]
        raw = self._inflated(fields, data, where)
        _, keys = self._leaf_parts(raw, count, where)
        return raw, count, keys

    def _records_into(self, raw: bytes, count: int, out: np.ndarray, at: int,
                      where: str) -> None:
        """A leaf's records (its raw page's last ``8 * count`` bytes) into
        ``out[at:at + count]``.

        Raises:
            SidecarError: The leaf names a record outside the dataset.
        """
        if not page_codec.deltas_into(raw, count, out, at, self.header.records):
            raise _corrupt(self.url, f"{where} names a record outside the dataset")

    def _leaves(self, pages: list[tuple[_Fields, bytes, str]]) -> list[_Leaf]:
        """Decoded leaves from their pointers' fields and stored bytes, each inflated in
        turn."""
        out = []
        for fields, data, where in pages:
            raw, count, keys = self._leaf_page(fields, data, where)
            records = np.empty(count, dtype=np.int64)
            self._records_into(raw, count, records, 0, where)
            out.append(_Leaf(records, keys, self.header.vtype, self.url, where))
        return out

    # -- lookups ----------------------------------------------------------------------------
    def search(self, bounds: Sequence[Bounds]) -> list[np.ndarray]:
        """The records whose key lies within each of ``bounds``.

        Args:
            bounds: Per query, ``(low, high, high_included)``: keys of the column's type
                (``bytes`` for bytes), ``None`` for no bound.

        Returns:
            Per query, the records found, ascending (int64).

        Raises:
            SidecarError: A page read is damaged.
        """
        found: list[list[_Run]] = [[] for _ in bounds]
        frontier = [(k, self.root) for k in range(len(bounds))]
        for level in range(self.header.levels, 0, -1):
            wanted: dict[int, np.void] = {}
            visits: list[tuple[int, int, bool]] = []  # (query, page offset, all within)
            for k, node in frontier:
                lo, hi = _child_range(node.firsts, bounds[k])
                first, end = _children_within(node.firsts, bounds[k])
                for j in range(lo, hi):
                    offset = node.offsets[j]
                    if offset not in wanted:
                        wanted[offset] = node.pointers[j]
                    visits.append((k, offset, first <= j < end))
            if level > 1:
                pages = self._pages(level, wanted)
                frontier = [(k, pages[offset]) for k, offset, _ in visits]
                continue
            searched = {offset for _, offset, within in visits if not within}
            streamed = frozenset(offset for offset in wanted
                                 if offset not in searched and offset not in self.leaves)
            pages = self._pages(level, wanted, streamed)
            for k, offset, within in visits:
                page = pages[offset]
                if within:
                    found[k].append(page if offset in streamed else page.records)
                    continue
                start, end = _span(page.keys, bounds[k])
                if end > start:
                    found[k].append(page.records[start:end])
        return [self._answer(runs, bound) for runs, bound in zip(found, bounds, strict=True)]

    def _answer(self, runs: list[_Run], bounds: Bounds) -> np.ndarray:
        """A query's records, ascending, from its runs in the leaves: one value's runs are
        its answer as they are (entries of equal keys are in ascending order of record, leaf
        after leaf), a range's are sorted. Runs held are copied in; a leaf taken whole and
        not held is inflated and its records decoded straight into the answer, then let go
        of (neither its keys nor its records kept: ``where(label=3)`` over 10 M records
        takes 209 such leaves, 13.7 MB inflated, 6.8 MB of records)."""
        sizes = [len(run) if isinstance(run, np.ndarray) else run[0][-1] for run in runs]
        # memory a released answer left mapped (the compiled module's pool of blocks): a
        # fresh 6.8 MB answer cost ~600 page faults, 3-5 ms of system time, after other work
        # had churned the heap
        out = pooled_array((sum(sizes),), np.int64, _POOLED_ANSWER)
        at = 0
        for run, size in zip(runs, sizes, strict=True):
            if isinstance(run, np.ndarray):
                out[at:at + size] = run
            else:
                fields, data, where = run
                raw, count, _ = self._leaf_page(fields, data, where)
                self._records_into(raw, count, out, at, where)
            at += size
        low, high, included = bounds
        if not (included and low is not None and low == high):
            out.sort()
        return out

    def find_one(self, key: Any) -> np.ndarray:
        """The records whose key equals ``key``: :meth:`search` of one value, without its
        per-call lists and dicts (a key found in one leaf: a search per level).

        Args:
            key: A key of the column's type (``bytes`` for bytes).

        Returns:
            The records found, ascending (int64).

        Raises:
            SidecarError: A page read is damaged.
        """
        native = loops()
        node = self.root
        if native is not None and self.header.levels == 1 and node.firsts.kind:
            firsts = node.firsts  # the common index (up to 16.7 M keys): one compiled call
            quick: np.ndarray | int = native.key_lookup(firsts.table, firsts.table.itemsize,
                                                        firsts.kind, key, node.slots)
            if not isinstance(quick, int):
                return quick
            if quick == -1:  # no child may hold it
                return np.zeros(0, dtype=np.int64)
        probe = key.item() if isinstance(key, np.number) else key  # as first_items hold it
        for level in range(self.header.levels, 0, -1):
            firsts = node.firsts
            if native is not None and firsts.kind:  # compiled searches, csrc/keysearch.c
                slotted = self._slotted(node, key) if level == 1 else None
                if slotted is not None:
                    return slotted
                start, end = native.key_span(firsts.table, firsts.table.itemsize, firsts.kind,
                                             key, False)
                start = max(start - 1, 0)
            else:
                items = node.first_items
                start, end = max(bisect.bisect_left(items, probe) - 1, 0), \
                    bisect.bisect_right(items, probe)
            if end - start != 1:  # none, or equal keys over several children
                return self.search([(key, key, True)])[0] if end > start else _NONE.copy()
            offset = node.offsets[start]
            if level > 1:
                kept = self.nodes.get(offset)
                node = kept if kept is not None else \
                    self._pages(level, {offset: node.pointers[start]})[offset]
                continue
            leaf = self.leaves.get(offset)
            if leaf is None:
                leaf = self._pages(level, {offset: node.pointers[start]})[offset]
            return _equal_records(leaf, key)
        raise AssertionError("a key index has at least one level")  # pragma: no cover

    def _slotted(self, node: _Node, key: Any) -> np.ndarray | None:
        """:meth:`find_one`'s last step, from a node whose children are leaves, in one
        compiled call once the leaf is held (csrc/keysearch.c's ``key_lookup``: a one-key
        lookup took ~2.8 us of CPU in Python steps and searches, ~1.8 us of it the searches
        of random keys, on a loaded 2-core VM); ``None`` where the general steps answer (keys
        over several children, a leaf whose keys are not a table)."""
        native = loops()
        assert native is not None
        firsts = node.firsts
        for _ in range(2):  # the leaf read and slotted, then searched
            found: np.ndarray | int = native.key_lookup(firsts.table, firsts.table.itemsize,
                                                        firsts.kind, key, node.slots)
            if not isinstance(found, int):
                return found
            if found < 0:  # -1: no child may hold it; -2: several may
                return _NONE.copy() if found == -1 else None
            offset = node.offsets[found]
            leaf = self.leaves.get(offset)
            if leaf is None:
                leaf = self._pages(1, {offset: node.pointers[found]})[offset]
            keys = leaf.keys
            if keys.kind != firsts.kind:
                return None
            node.slots[found] = (keys.table, keys.table.itemsize, leaf.records,
                                 np.ascontiguousarray(keys.table[::FENCE_STEP]), FENCE_STEP)
            self._slot_of[offset] = (node.slots, found)
        return None  # pragma: no cover (a slot just filled is searched)

    def finder(self, fallback: Callable[[Any], np.ndarray]) -> Callable[[Any], np.ndarray] | None:
        """:meth:`find_one` of a caller's key in one compiled call (csrc/keysearch.c's
        ``KeyFinder``), for an index of one level (up to 16.7 M keyed records).

        Args:
            fallback: What answers a key the compiled call does not (another type than
                ``str``/``bytes``, ``int`` or ``float`` as the index holds, or a leaf not held
                yet): the caller's key to its records, checking and converting it.

        Returns:
            The finder (``finder(key)``: the records, ascending, int64), or ``None`` where
            there is none (the compiled module is not in use, or the index has more levels
            or keys the compiled searches do not read).
        """
        native = loops()
        firsts = self.root.firsts
        if native is None or self.header.levels != 1 or not firsts.kind:
            return None
        found: Callable[[Any], np.ndarray] = native.KeyFinder(
            firsts.table, firsts.table.itemsize, firsts.kind, self.root.slots, fallback)
        return found

    def find(self, keys: Sequence[Any]) -> list[np.ndarray]:
        """The records whose key equals each of ``keys``: :meth:`search` of values, each
        level's pages searched once for all the keys routed to them (numpy searches, no
        Python step per key and page).

        Args:
            keys: Keys of the column's type (``bytes`` for bytes).

        Returns:
            Per key, the records found, ascending (int64).

        Raises:
            SidecarError: A page read is damaged.
        """
        batch = KeyBatch(keys, None if self.header.vtype is ValueType.BYTES
                         else self.header.vtype.dtype)
        found: list[np.ndarray] = [_NONE] * len(keys)
        several: list[int] = []  # keys equal to children's first keys: searched one by one
        routes: list[tuple[_Node, np.ndarray]] = [(self.root, np.arange(len(keys)))]
        for level in range(self.header.levels, 0, -1):
            wanted: dict[int, np.void] = {}
            visits: list[tuple[int, np.ndarray]] = []  # (page offset, its keys)
            for node, members in routes:
                lefts, rights = node.firsts.places(batch, members)
                starts = np.maximum(lefts - 1, 0)
                several += members[rights - starts > 1].tolist()
                alone = rights - starts == 1
                for child, group in _grouped(starts[alone], members[alone]):
                    offset = node.offsets[child]
                    wanted[offset] = node.pointers[child]
                    visits.append((offset, group))
            pages = self._pages(level, wanted)
            if level > 1:
                routes = [(pages[offset], group) for offset, group in visits]
                continue
            leaves = [(pages[offset], group) for offset, group in visits]
            if not _gathered(leaves, batch, found):
                _searched(leaves, batch, found)
        if several:
            for k, records in zip(several, self.search([(keys[k], keys[k], True)
                                                         for k in several]), strict=True):
                found[k] = records
        return [records if records is not _NONE else _NONE.copy() for records in found]

    def _pages(self, level: int, wanted: dict[int, np.void],
               streamed: frozenset[int] = frozenset()) -> dict[int, Any]:
        """The decoded pages at ``wanted`` (nodes at ``level`` > 1, else leaves): kept ones,
        and the others read in one call; the leaves at ``streamed`` (none kept) are given
        as read, ``(pointer's fields, stored bytes, where)``, neither decoded nor kept (see
        :meth:`search`)."""
        kept: dict[int, Any] = self.nodes if level > 1 else self.leaves
        out = {offset: kept[offset] for offset in wanted if offset in kept}
        missing = [_fields(pointer) for offset, pointer in wanted.items() if offset not in kept]
        leaf_pages: list[tuple[_Fields, bytes, str]] = []
        for fields, data in zip(missing, self._stored(missing), strict=True):
            offset, *_, children, count = fields
            where = f"page at byte {self.base + offset}"
            if (children > 0) != (level > 1):
                raise _corrupt(self.url, f"its {where} is not of the level that points at it")
            if level > 1:
                node = self._decode_node(self._inflated(fields, data, where), children, where)
                if int(node.pointers["entries"].sum()) != count:
                    raise _corrupt(self.url, f"the entries under its {where} do not add up")
                out[offset] = self.nodes[offset] = node
            elif offset in streamed:
                out[offset] = (fields, data, where)
            else:
                leaf_pages.append((fields, data, where))
        for (fields, _, _), leaf in zip(leaf_pages, self._leaves(leaf_pages), strict=True):
            offset = fields[0]
            out[offset] = leaf
            if len(self.leaves) >= self.KEPT_LEAVES:
                evicted = next(iter(self.leaves))
                del self.leaves[evicted]
                slots, child = self._slot_of.pop(evicted, (None, 0))
                if slots is not None:
                    slots[child] = None
            self.leaves[offset] = leaf
        return out


def _equal_records(leaf: _Leaf, key: Any) -> np.ndarray:
    """The records of a leaf whose key equals ``key`` (a copy)."""
    keys = leaf.keys
    native = loops()
    if native is not None and keys.kind:  # the span and its records' copy at once
        held: np.ndarray = native.key_find(keys.table, keys.table.itemsize, keys.kind, key,
                                           leaf.records)
        return held
    start, end = keys.equal_span(key)
    found: np.ndarray = leaf.records[start:end].copy()
    return found


def _searched(leaves: list[tuple[_Leaf, np.ndarray]], batch: KeyBatch,
              found: list[np.ndarray]) -> None:
    """The records of the keys ``group`` of each leaf into ``found`` (numpy searches per leaf;
    the pure-Python twin of :func:`_gathered`)."""
    alone_keys, alone_records = [], []  # keys held by one record: gathered at once
    for leaf, group in leaves:
        lefts, rights = leaf.keys.places(batch, group)
        one = rights - lefts == 1
        if one.all():  # ids: every key of the leaf held once
            alone_keys.append(group)
            alone_records.append(leaf.records[lefts])
            continue
        alone_keys.append(group[one])
        alone_records.append(leaf.records[lefts[one]])
        _several_into(found, leaf.records, group[~one], lefts[~one], rights[~one])
    if alone_keys:
        rows = list(np.concatenate(alone_records).reshape(-1, 1))  # views, made in C
        for k, row in zip(np.concatenate(alone_keys).tolist(), rows, strict=True):
            found[k] = row


def _several_into(found: list[np.ndarray], records: np.ndarray, keys: np.ndarray,
                  lefts: np.ndarray, rights: np.ndarray) -> None:
    """The records of keys held by no record or several into ``found``."""
    for k, start, end in zip(keys.tolist(), lefts.tolist(), rights.tolist(), strict=True):
        if end > start:
            found[k] = records[start:end].copy()


def _gathered(leaves: list[tuple[_Leaf, np.ndarray]], batch: KeyBatch,
              found: list[np.ndarray]) -> bool:
    """:func:`_searched` in one compiled call for all the leaves (csrc/keysearch.c's
    ``key_gather``: per leaf, numpy's searches and gathers cost ~10 us of calls, as much as
    the searches of 2,000 keys in C); ``False`` when it cannot (not built, keys that are not
    a table of the batch's kind), having changed nothing."""
    native = loops()
    if native is None or not leaves or batch.kind == 0:
        return False
    tables, records, groups = [], [], []
    for leaf, group in leaves:
        keys = leaf.keys
        if keys.kind != batch.kind:
            return False
        tables.append(keys.table)
        records.append(leaf.records)
        groups.append(group)
    members = np.concatenate(groups).astype(np.int64, copy=False)
    cuts = np.zeros(len(groups) + 1, dtype=np.int64)
    np.cumsum([len(g) for g in groups], out=cuts[1:])
    lefts, rights, hits = (np.empty(len(members), dtype=np.int64) for _ in range(3))
    native.key_gather(tables, np.array([t.itemsize for t in tables], dtype=np.int64), records,
                      batch.kind, batch.table, batch.table.itemsize, members, cuts, lefts,
                      rights, hits)
    if batch.any_trailing_zero:  # no key of a table equals them (see sorted_keys)
        zero = batch.trailing_zero[members] if batch.trailing_zero is not None else None
        lefts[zero] = rights[zero]
        hits[zero] = -1
    one = hits >= 0
    if len(members) == len(found) and one.all():  # ids: every key found once, at once
        by_key = np.empty(len(found), dtype=np.int64)
        by_key[members] = hits
        found[:] = list(by_key.reshape(-1, 1))  # views, made in C
        return True
    rows = list(hits[one].reshape(-1, 1))
    for k, row in zip(members[one].tolist(), rows, strict=True):
        found[k] = row
    if not one.all():
        many = ~one
        for leaf_records, group, start, end in zip(records, groups, cuts[:-1].tolist(),
                                                   cuts[1:].tolist(), strict=True):
            part = many[start:end]
            if part.any():
                _several_into(found, leaf_records, group[part], lefts[start:end][part],
                              rights[start:end][part])
    return True


def _grouped(children: np.ndarray, members: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """The keys ``members`` grouped by the child each goes to (``children``, alike)."""
    if not len(children):
        return []
    order = np.argsort(children, kind="stable")
    children, members = children[order], members[order]
    cuts = (np.flatnonzero(np.diff(children)) + 1).tolist()
    bounds = [0, *cuts, len(members)]
    return [(child, members[start:end]) for child, start, end in zip(
        children[bounds[:-1]].tolist(), bounds[:-1], bounds[1:], strict=True)]


#: No records (copied before it is handed out).
_NONE = np.zeros(0, dtype=np.int64)

#: A query's bounds: ``(low, high, high_included)``, ``None`` for an open end.
Bounds = tuple[Any, Any, bool]
#: A query's run of records in a leaf: an array (of a leaf held), or a leaf taken whole as it
#: was read, ``(pointer's fields, stored bytes, where)``.
_Run = np.ndarray | tuple["_Fields", bytes, str]


def _child_range(firsts: SortedKeys, bounds: Bounds) -> tuple[int, int]:
    """The children of a node (by their first keys) that may hold keys within ``bounds``."""
    low, high, included = bounds
    start = 0 if low is None else max(firsts.left(low) - 1, 0)
    end = len(firsts) if high is None else (
        firsts.right(high) if included else firsts.left(high))
    return start, end


def _fields(pointer: np.void) -> _Fields:
    """A pointer's fields as Python ints, in one call (a field at a time took ~1 us each)."""
    fields = pointer.item()
    assert isinstance(fields, tuple)
    return fields


def _children_within(firsts: SortedKeys, bounds: Bounds) -> tuple[int, int]:
    """The children ``first <= child < end`` of a node whose keys all lie within ``bounds``,
    in two searches of its first keys (ascending, none NaN): a child's keys lie between its
    first key and the next child's (equal keys may cross into it), so its keys all lie within
    when its first key is at least ``low`` and the next child's is at most ``high`` (below it
    when ``high`` is excluded); the last child's only when there is no ``high``. (Asked per
    child, 209 times, it took 0.5 ms of where(label=3) over 10 M records.)"""
    low, high, included = bounds
    first = 0 if low is None else firsts.left(low)
    if high is None:
        return first, len(firsts)
    if high != high:  # NaN: no key is at most NaN or below it
        return first, first
    return first, (firsts.right(high) if included else firsts.left(high)) - 1


def _span(keys: SortedKeys, bounds: Bounds) -> tuple[int, int]:
    """The entries of a leaf (its keys sorted) within ``bounds``: ``keys[start:end]``."""
    low, high, included = bounds
    start = 0 if low is None else keys.left(low)
    end = len(keys) if high is None else (
        keys.right(high) if included else keys.left(high))
    return start, max(start, end)
