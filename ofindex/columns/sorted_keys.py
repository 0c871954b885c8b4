"""Sorted keys as a key index searches them: a node's first keys or a leaf's keys, held
compactly and searched with numpy, one key or a batch of keys at once.

Numbers are a numpy array. Bytes are a fixed-width numpy bytes array (``S<width>``) when no
key ends with a zero byte and the widest is at most :data:`WIDEST_TABLE` bytes: numpy
compares such arrays as zero-padded strings, which orders keys without trailing zero bytes
exactly as ``bytes`` compare. A leaf of 4,096 13-byte ids then takes 53 kB (as ``bytes``
objects, 230 kB) and a batch of keys is searched in one call. Other bytes keys are a list of
``bytes``, searched with :mod:`bisect`.

A key searched for that ends with zero bytes (``b"a\\0"``) has no equal among keys without
trailing zero bytes, and sorts right after the keys up to its stripped form (``b"a"``):
both its left and its right place are the stripped form's right place.

Where ``ofindex._native`` is built, a fixed-width table is searched by its ``key_span`` and
``key_places`` (csrc/keysearch.c: a binary search in C, ~0.1 us, where one numpy
``searchsorted`` call costs 1-2 us of setup); the numpy searches below are their pure-Python
twin, giving the same places.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..decode._plans import loops
from .packed import PackedBytes

#: Widest bytes key held in a fixed-width array: a leaf of 4,096 keys takes at most 256 kB
#: so; a leaf holding a wider key is held as a list of ``bytes``.
WIDEST_TABLE = 64


def _table_of(keys: PackedBytes) -> np.ndarray | None:
    """``keys`` as a fixed-width bytes array, or ``None`` when one ends with a zero byte or
    is wider than :data:`WIDEST_TABLE`."""
    count = len(keys)
    lengths = keys.lengths
    widest = int(lengths.max()) if count else 0
    if widest > WIDEST_TABLE:
        return None
    present = lengths > 0
    if bool((keys.data[keys.offsets[1:][present] - 1] == 0).any()):
        return None
    if widest == 0:
        return np.zeros(count, dtype="S1")
    base = int(keys.offsets[0])
    if keys.width() == widest:
        table = keys.data[base:base + widest * count].reshape(count, widest).copy()
    else:
        table = np.zeros((count, widest), dtype=np.uint8)
        columns = np.arange(widest)
        inside = columns < lengths[:, None]
        table[inside] = keys.data[(keys.offsets[:-1, None] + columns)[inside]]
    fixed: np.ndarray = table.view(f"S{widest}").reshape(count)
    return fixed


def _kind_of(table: np.ndarray) -> int:
    """The code csrc/keysearch.c names a table's keys by (a value type's: 1 int64, 2 float32,
    3 float64, 4 bytes), or 0 for a table it does not search (another dtype, another byte
    order, not contiguous)."""
    dtype = table.dtype
    if not table.flags.c_contiguous or not dtype.isnative:
        return 0
    if dtype.kind == "S":
        return 4
    if dtype.kind == "i" and dtype.itemsize == 8:
        return 1
    if dtype.kind == "f":
        return {4: 2, 8: 3}.get(dtype.itemsize, 0)
    return 0


class SortedKeys:
    """Keys in ascending order, searched for the places of a key.

    Args:
        keys: The keys: a numpy array of numbers, or packed bytes.
    """

    __slots__ = ("items", "kind", "table")

    def __init__(self, keys: np.ndarray | PackedBytes) -> None:
        self.items: list[bytes] | None = None
        if isinstance(keys, PackedBytes):
            table = _table_of(keys)
            if table is None:
                self.items = keys.tolist()
                table = np.zeros(0, dtype="S1")
            self.table: np.ndarray = table
        else:
            self.table = keys
        #: The table's code for csrc/keysearch.c (0: searched with numpy or bisect only).
        self.kind = 0 if self.items is not None else _kind_of(self.table)

    def __len__(self) -> int:
        return len(self.items) if self.items is not None else len(self.table)

    def __getitem__(self, place: int) -> Any:
        """The key at ``place`` (``bytes`` for bytes keys)."""
        if self.items is not None:
            return self.items[place]
        item = self.table[place]
        return bytes(item) if isinstance(item, np.bytes_) else item

    def as_list(self) -> list[Any]:
        """The keys as Python objects (``bytes``, ``int`` or ``float``), in order."""
        if self.items is not None:
            return list(self.items)
        if self.table.dtype.kind == "S":
            return [bytes(item) for item in self.table]
        items: list[Any] = self.table.tolist()
        return items

    def ascending(self) -> bool:
        """Whether the keys never decrease (what a binary search over them needs)."""
        if self.items is not None:
            return all(a <= b for a, b in itertools.pairwise(self.items))
        keys = self.table
        if keys.dtype.kind == "f" and bool(np.isnan(keys).any()):
            return False
        return not bool((keys[1:] < keys[:-1]).any())

    def bounds(self, value: Any) -> tuple[int, int]:
        """:meth:`left` and :meth:`right` of ``value``, in one search where it can."""
        native = loops()
        if native is not None and self.kind:
            places: tuple[int, int] = native.key_span(self.table, self.table.itemsize,
                                                      self.kind, value, False)
            return places
        return self.left(value), self.right(value)

    def left(self, value: Any) -> int:
        """The first place holding ``value`` or more."""
        if self.items is not None:
            return bisect.bisect_left(self.items, value)
        if isinstance(value, bytes) and value.endswith(b"\0"):
            return int(self.table.searchsorted(value, "right"))
        return int(self.table.searchsorted(value, "left"))

    def right(self, value: Any) -> int:
        """The first place holding more than ``value``."""
        if self.items is not None:
            return bisect.bisect_right(self.items, value)
        return int(self.table.searchsorted(value, "right"))

    def equal_span(self, value: Any) -> tuple[int, int]:
        """The places holding ``value``: ``(left, right)``, each searched once at most (a
        key held once, as an id: one search and two comparisons)."""
        if self.items is not None:
            return bisect.bisect_left(self.items, value), bisect.bisect_right(self.items, value)
        table = self.table
        native = loops()
        if native is not None and self.kind:
            span: tuple[int, int] = native.key_span(table, table.itemsize, self.kind, value,
                                                    True)
            return span
        if isinstance(value, bytes) and value.endswith(b"\0"):
            start = int(table.searchsorted(value, "right"))  # no key ends with zero bytes
            return start, start
        start = int(table.searchsorted(value, "left"))
        count = len(table)
        if start == count or table[start] != value:
            return start, start
        if start + 1 == count or table[start + 1] != value:
            return start, start + 1
        return start, int(table.searchsorted(value, "right"))

    def places(self, queries: KeyBatch, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The left and right places (see :meth:`left`, :meth:`right`) of the queries
        ``members`` of a batch, as int64 arrays."""
        if self.items is not None or queries.items is not None:
            values = queries.values
            chosen = [values[k] for k in members.tolist()]
            return (np.array([self.left(v) for v in chosen], dtype=np.int64),
                    np.array([self.right(v) for v in chosen], dtype=np.int64))
        native = loops()
        if native is not None and self.kind and queries.kind == self.kind:
            lefts = np.empty(len(members), dtype=np.int64)
            rights = np.empty(len(members), dtype=np.int64)
            native.key_places(self.table, self.table.itemsize, self.kind, queries.table,
                              queries.table.itemsize, members.astype(np.int64, copy=False),
                              lefts, rights)
        else:
            wanted = queries.table[members]
            rights = self.table.searchsorted(wanted, "right").astype(np.int64, copy=False)
            lefts = self.table.searchsorted(wanted, "left").astype(np.int64, copy=False)
        if queries.trailing_zero is not None and queries.any_trailing_zero:
            zero = queries.trailing_zero[members]
            lefts[zero] = rights[zero]
        return lefts, rights


class KeyBatch:
    """Keys looked up together, made once for every page searched.

    Args:
        values: The keys, of the key index's type (numpy numbers, or ``bytes``).
        dtype: The numbers' dtype, or ``None`` for bytes.
    """

    __slots__ = ("any_trailing_zero", "items", "kind", "table", "trailing_zero", "values")

    def __init__(self, values: Sequence[Any], dtype: np.dtype[Any] | None) -> None:
        self.values = values
        self.items: list[bytes] | None = None
        self.trailing_zero: np.ndarray | None = None
        self.any_trailing_zero = False
        self.kind = 0
        if dtype is not None:
            self.table: np.ndarray = np.array(values, dtype=dtype).reshape(len(values))
            self.kind = _kind_of(self.table)
            return
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        widest = int(lengths.max()) if len(values) else 0
        if widest > WIDEST_TABLE:
            self.items = list(values)
            self.table = np.zeros(0, dtype="S1")
            return
        self.table = np.array(values, dtype=f"S{max(widest, 1)}").reshape(len(values))
        self.kind = _kind_of(self.table)
        # a fixed-width array drops trailing zero bytes: the keys it shortened end with them
        self.trailing_zero = np.char.str_len(self.table) != lengths
        self.any_trailing_zero = bool(self.trailing_zero.any())

    def __len__(self) -> int:
        return len(self.values)
