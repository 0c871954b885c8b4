"""A dataset's queries: which records meet conditions, and which hold a key.

A condition on a column with a key index for this dataset (built with the manifest, and
naming this dataset's identity) is answered from the key index: a few page reads, whatever
the dataset's size. Otherwise (no key index, one of another dataset, or a condition on
records without a value, which a key index does not list) the shards' column sidecars are
scanned, reading only the pages whose least and greatest values may match. Both give the
same records (the tests check them against a scan of the records themselves).

A build writes key indexes only when asked (``build_index(keys=...)``): a lookup of a column
without one writes it first (:meth:`DatasetColumns.lookup_index`) where the dataset's index
directory is local and writable; a remote dataset's lookup asks for the build that writes it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ColumnError, StorageError, hint
from ..storage import Storage
from .conditions import Condition, parse_conditions
from .key_build import build_key_index
from .key_file import KeyIndex, key_file_name
from .packed import PackedBytes
from .shard_reader import ColumnReader, ShardPlace, read_round
from .value_types import ValueType, key_bytes, query_value


class DatasetColumns:
    """The columns of one dataset, for its queries (held per process).

    Args:
        shards: Makes the places of the dataset's shards, in order, when a query first reads
            column sidecars (a lookup through a key index makes none: a dataset of a million
            shards opened through a compact manifest makes no shard for it).
        total: The dataset's records.
        identity: The dataset's identity (a key index must name it).
        key_home: Where the dataset's key indexes are looked for: a storage and directory
            (the directory of its first shard's sidecar, where the build writes them
            beside the manifest), or ``None``.
    """

    def __init__(self, shards: Callable[[], Sequence[ShardPlace]], total: int, identity: str,
                 key_home: tuple[Storage, str] | None) -> None:
        self._shards = shards
        self._reader: ColumnReader | None = None
        self.identity = identity
        self.total = total
        self.key_home = key_home
        self._keys: dict[str, KeyIndex | None] = {}
        self._unwritable: set[str] = set()  # columns whose key index could not be written
        self._others: dict[str, int] = {}  # record counts of other datasets' key indexes

    @property
    def reader(self) -> ColumnReader:
        """The shards' column sidecars (their places made on first use)."""
        if self._reader is None:
            self._reader = ColumnReader(self._shards())
        return self._reader

    # -- key indexes ------------------------------------------------------------------------
    def key_index(self, column: str) -> KeyIndex | None:
        """The key index of ``column`` for this dataset, or ``None`` (none there, or one of
        another dataset: another identity or record count, or another column).

        Raises:
            SidecarError: The key index is damaged.
        """
        if column in self._keys:
            return self._keys[column]
        found = None
        if self.key_home is not None:
            storage, directory = self.key_home
            path = storage.join(directory, key_file_name(column))
            try:
                size = storage.stamp(path).size
            except FileNotFoundError:
                size = -1
            if size >= 0:
                url = storage.url(path)

                def read(ranges: Sequence[tuple[int, int]]) -> list[bytes]:
                    return _read(storage, path, ranges)

                index = KeyIndex.open(read, url, size)
                header = index.header
                if (header.identity == self.identity and header.records == self.total
                        and header.name == column):
                    found = index
                else:
                    self._others[column] = header.records
        self._keys[column] = found
        return found

    def lookup_index(self, column: str) -> KeyIndex | None:
        """The key index a lookup of ``column`` goes through: :meth:`key_index`, or, when this
        dataset has none (never built, or built before records were added), one written now
        where the build writes them, when that is a local directory (the sort of the
        column's values, once: 1 M 13-byte ids, about 0.3 s). ``None`` when that directory
        cannot be written, or holds the key index of a larger dataset (this one is a part of
        it, say one shard opened alone: its key index is left as it is): a lookup then reads
        the column sidecars.

        Raises:
            ColumnError: The dataset's index is remote and has no key index of ``column``
                for this dataset (a lookup would read every shard's column): the message
                names the build that writes one.
            ColumnNotFoundError, StaleIndexError, SidecarError: As reading the column
                sidecars.
        """
        index = self.key_index(column)
        if index is not None or self.key_home is None or column in self._unwritable or \
                self._others.get(column, -1) > self.total:
            return index
        storage, directory = self.key_home
        path = storage.join(directory, key_file_name(column))
        if not storage.is_local:
            step = hint(f"build_index(..., columns=[...], keys=[{column!r}])",
                        f"ofindex build ... --columns ... --keys {column}")
            raise ColumnError(
                f"{storage.url(path)}: no key index of column {column!r} for this dataset, "
                f"which a lookup reads a few pages of (without it, every shard's column "
                f"sidecar); write it with the build: {step}")
        try:
            build_key_index(self.reader.shards, column, self.identity, storage, path)
        except StorageError:  # a read-only directory: the lookups read the column sidecars
            self._unwritable.add(column)
            return None
        del self._keys[column]
        return self.key_index(column)

    def vtype(self, column: str) -> ValueType:
        """The column's value type (from its key index when there is one, else from the shards'
        column sidecars).

        Raises:
            ColumnError, ColumnNotFoundError, StaleIndexError, SidecarError: As reading them.
        """
        index = self.key_index(column)
        if index is not None and index.header.vtype is not ValueType.NONE:
            return index.header.vtype
        return self.reader.vtype(column)

    # -- queries ----------------------------------------------------------------------------
    def positions(self, conditions: Mapping[str, object]) -> np.ndarray:
        """The global record numbers meeting every condition (see :mod:`.conditions`),
        ascending.

        Raises:
            ColumnError: A condition of no known form, or a value the column cannot compare
                with.
            ColumnNotFoundError: A shard has no column sidecar of a column named.
            StaleIndexError, SidecarError: A column sidecar or key index is stale or damaged.
        """
        found: np.ndarray | None = None
        for condition in parse_conditions(conditions):
            hits = self._matching(condition)
            found = hits if found is None else np.intersect1d(found, hits, assume_unique=True)
        assert found is not None
        return found

    def _matching(self, condition: Condition) -> np.ndarray:
        typed = condition.typed(self.vtype(condition.column))
        index = None if typed.nulls else self.key_index(typed.column)
        if index is None:
            return self.reader.select(typed)
        parts = index.search(typed.key_bounds())
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return np.unique(np.concatenate(parts)) if len(parts) > 1 else parts[0]

    def lookup(self, column: str, values: Sequence[object]) -> list[np.ndarray]:
        """The records holding each of ``values`` in ``column``, one batch of page reads
        per level of its key index (or one scan of the column without one).

        Raises:
            ColumnError: A value the column cannot compare with.
            ColumnNotFoundError, StaleIndexError, SidecarError: As :meth:`positions`.
        """
        index = self.lookup_index(column)
        if index is not None and index.header.vtype is not ValueType.NONE:
            keyed = index.header.vtype
            if keyed is ValueType.BYTES:  # str keys encoded at once, others checked
                return index.find([v.encode("utf-8") if type(v) is str else
                                   query_value(keyed, v, column) for v in values])
            return index.find([query_value(keyed, v, column) for v in values])
        vtype = self.vtype(column)
        if index is not None:  # a key index without entries: no record holds a value
            return [np.zeros(0, dtype=np.int64) for v in values
                    if query_value(vtype, v, column) is not None]
        typed = [Condition(column, values=(v,)).typed(vtype) for v in values]
        if not typed:
            return []
        _, column_values, valid = self.reader.values(column)
        return [np.flatnonzero(t.matches(column_values, valid)).astype(np.int64)
                for t in typed]

    def lookup_one(self, column: str, value: object) -> np.ndarray:
        """The records holding ``value`` in ``column``: :meth:`lookup` of one value, through
        the key index's one-key search when there is one.

        Raises:
            ColumnError, ColumnNotFoundError, StaleIndexError, SidecarError: As
                :meth:`lookup`.
        """
        index = self._keys.get(column) or self.lookup_index(column)
        if index is None or index.header.vtype is ValueType.NONE:
            return self.lookup(column, [value])[0]
        vtype = index.header.vtype
        if vtype is ValueType.BYTES and type(value) is str:  # what query_value does, at once
            return index.find_one(value.encode("utf-8"))
        return index.find_one(query_value(vtype, value, column))

    def groups(self, column: str) -> tuple[list[Any], list[np.ndarray]]:
        """The records of each distinct value of ``column`` (records without one left out).

        Returns:
            ``(values, positions)``: the distinct values ascending (Python ints, floats or
            bytes) and, for each, its records' global numbers ascending.

        Raises:
            ColumnError, ColumnNotFoundError, StaleIndexError, SidecarError: As reading the
                column.
        """
        vtype, values, valid = self.reader.values(column)
        present = np.flatnonzero(valid)
        if vtype is ValueType.BYTES:
            assert isinstance(values, PackedBytes)
            items = values.take(present).tolist()
            distinct = sorted(set(items))
            code_of = {value: k for k, value in enumerate(distinct)}
            codes = np.fromiter((code_of[v] for v in items), dtype=np.int64, count=len(items))
        else:
            assert isinstance(values, np.ndarray)
            numbers = values[present]
            keep = numbers == numbers  # NaN is in no class
            present, numbers = present[keep], numbers[keep]
            unique, codes = np.unique(numbers, return_inverse=True)
            distinct = unique.tolist()
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(distinct) + 1))
        members = present[order]
        return distinct, [members[bounds[k]:bounds[k + 1]].astype(np.int64)
                          for k in range(len(distinct))]

    def split(self, column: str, fractions: Mapping[str, float]) -> dict[str, np.ndarray]:
        """The records of each part of a split by a stable hash of ``column`` (see
        :func:`stable_fractions`): a record's part depends on its value alone.

        Raises:
            ColumnError: Fractions that are not positive or do not add up to 1.
        """
        names, edges = _edges(fractions)
        vtype, values, valid = self.reader.values(column)
        where = stable_fractions(vtype, values, valid)
        part = np.searchsorted(edges, where, side="right")
        return {name: np.flatnonzero(valid & (part == k)).astype(np.int64)
                for k, name in enumerate(names)}


#: Bytes read at once at most from a local file for ranges that touch (a query's leaves lie
#: one after the other: the 209 of ``where(label=3)`` over 10 M records are 0.6 MB).
_RUN_BYTES = 4 << 20


def _read(storage: Storage, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
    """Byte ranges of one file: local ones read a run of touching ranges at a time (up to
    :data:`_RUN_BYTES`; the 209 leaves of ``where(label=3)`` over 10 M records in one read
    where 209 took ~0.6 ms of calls), remote ones in one round."""
    if not storage.is_local:
        return read_round(storage, [(path, a, b) for a, b in ranges])
    out: list[bytes] = []
    first = 0
    while first < len(ranges):
        start = ranges[first][0]
        last = first
        while last + 1 < len(ranges) and ranges[last + 1][0] == ranges[last][1] and \
                ranges[last + 1][1] - start <= _RUN_BYTES:
            last += 1
        if last == first:
            out.append(storage.read(path, *ranges[first]))
        else:
            run = storage.read(path, start, ranges[last][1])
            out += [run[a - start:b - start] for a, b in ranges[first:last + 1]]
        first = last + 1
    return out


def _edges(fractions: Mapping[str, float]) -> tuple[list[str], np.ndarray]:
    """The parts' names and the upper edge of each in ``[0, 1)``."""
    names = list(fractions)
    shares = np.array([float(fractions[n]) for n in names], dtype=np.float64)
    if not names or bool((shares <= 0).any()) or not np.isfinite(shares).all() or \
            abs(float(shares.sum()) - 1.0) > 1e-9:
        raise ColumnError(f"split fractions must be positive and add up to 1, not "
                          f"{dict(fractions)!r}")
    edges = np.cumsum(shares)
    edges[-1] = 1.0
    return names, edges[:-1]


def stable_fractions(vtype: ValueType, values: np.ndarray | PackedBytes,
                     valid: np.ndarray) -> np.ndarray:
    """Each record's place in ``[0, 1)`` by a stable hash of its value: the first 8 bytes of
    the BLAKE2b digest (8-byte digest) of :func:`~.value_types.key_bytes` of the value, as a
    little-endian integer over 2**64. The same value has the same place in any dataset, in
    any order, before or after records are added.

    Returns:
        float64 places (1.0 for records without a value, which are in no part).
    """
    out = np.ones(len(valid), dtype=np.float64)
    present = np.flatnonzero(valid)
    items: list[Any] = (values.take(present).tolist() if isinstance(values, PackedBytes)
                        else values[present].tolist())
    cache: dict[Any, float] = {}
    places = np.empty(len(items), dtype=np.float64)
    for k, item in enumerate(items):
        place = cache.get(item)
        if place is None:
            digest = hashlib.blake2b(key_bytes(vtype, item), digest_size=8).digest()
            place = cache[item] = int.from_bytes(digest, "little") / 2.0**64
        places[k] = place
    out[present] = places
    return out
