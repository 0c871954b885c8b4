"""Reading the column sidecars of a dataset's shards for a query: each one's header,
dictionary and directory once per process, then only the pages a condition may match.

Local files are read with small reads. Remote ones in rounds over all shards at once (the
storage's concurrent ``fetch_round``): their sizes (a stat each), then their first
:data:`PREFIX` bytes (header, dictionary and directory, almost always), and for a query the
pages it needs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ..decode._plans import loops
from ..errors import ColumnNotFoundError, StaleIndexError, hint
from ..storage import Storage
from .column_file import (
    FIXED_HEADER,
    ColumnMeta,
    column_path,
    decode_column_header,
    decode_meta,
    decode_page,
    header_size_of,
)
from .conditions import Condition
from .packed import PackedBytes
from .value_types import ValueType, joined_type

#: Bytes read first of a remote column sidecar: its header and directory (48 bytes a page of
#: 16,384 records: a million records' directory is 3 kB) and a dictionary of up to a few
#: thousand values.
PREFIX = 64 << 10


@dataclasses.dataclass(frozen=True)
class ShardPlace:
    """Where a shard's column sidecars are, and what they must describe.

    Attributes:
        index_storage: Storage of the shard's sidecar.
        index_path: The sidecar (the column sidecars are beside it).
        records: The shard's record count.
        body_crc: The body CRC of its sidecar, or ``None`` when not known.
        data_url: The data file, for messages.
    """

    index_storage: Storage
    index_path: str
    records: int
    body_crc: int | None
    data_url: str


def _build_hint(shard: ShardPlace, column: str) -> str:
    directory = shard.data_url.rsplit("/", 1)[0] if "/" in shard.data_url else "."
    return hint(f"ofindex.build_index({directory!r}, columns=[{column!r}, ...])",
                f"`ofindex build {directory} --columns {column},...`")


def missing_column(shard: ShardPlace, column: str) -> ColumnNotFoundError:
    """The error for a shard without the column sidecar of ``column``."""
    return ColumnNotFoundError(
        f"{shard.data_url}: has no column {column!r} (its index was built without it); add "
        f"it with {_build_hint(shard, column)}")


def check_meta(meta: ColumnMeta, shard: ShardPlace, column: str) -> None:
    """Refuse a column sidecar that does not describe the shard's records as indexed now.

    Raises:
        StaleIndexError: Another column, record count or sidecar body CRC.
    """
    header = meta.header
    if header.name != column or header.count != shard.records or (
            shard.body_crc is not None and header.body_crc != shard.body_crc):
        raise StaleIndexError(
            f"{meta.url}: the column {column!r} was built for another version of the index of "
            f"{shard.data_url} ({header.count} records, sidecar body CRC {header.body_crc:#x}; "
            f"the index now: {shard.records} records, {shard.body_crc or 0:#x}); rebuild it "
            f"with {_build_hint(shard, column)}")


class ColumnReader:
    """The columns of a dataset's shards, read as queries need them (per process).

    Args:
        shards: The dataset's shards, in order.
    """

    def __init__(self, shards: Sequence[ShardPlace]) -> None:
        self.shards = list(shards)
        counts = np.array([s.records for s in self.shards], dtype=np.int64)
        self.first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._metas: dict[str, list[ColumnMeta]] = {}

    # -- metas ------------------------------------------------------------------------------
    def metas(self, column: str) -> list[ColumnMeta]:
        """Every shard's column sidecar of ``column``: header, dictionary and directory,
        checked (read once per process).

        Raises:
            ColumnNotFoundError: A shard has none.
            StaleIndexError: One describes another version of its shard's index.
            SidecarError: One is damaged.
        """
        if column not in self._metas:
            metas = self._read_metas(column)
            for meta, shard in zip(metas, self.shards, strict=True):
                check_meta(meta, shard, column)
            self._metas[column] = metas
        return self._metas[column]

    def vtype(self, column: str) -> ValueType:
        """The column's type over the dataset (``NONE`` when no record has a value).

        Raises:
            ColumnError: Shards store it as different types.
        """
        metas = self.metas(column)
        return joined_type([m.header.vtype for m in metas], column,
                           [s.data_url for s in self.shards])

    def _read_metas(self, column: str) -> list[ColumnMeta]:
        paths = [column_path(s.index_path, column) for s in self.shards]
        out: list[ColumnMeta | None] = [None] * len(paths)
        remote: dict[int, list[int]] = {}
        for k, shard in enumerate(self.shards):
            if shard.index_storage.is_local:
                out[k] = self._local_meta(shard, paths[k], column)
            else:
                remote.setdefault(id(shard.index_storage), []).append(k)
        for ks in remote.values():
            for k, meta in zip(ks, self._remote_metas(ks, paths, column), strict=True):
                out[k] = meta
        return [m for m in out if m is not None]

    def _local_meta(self, shard: ShardPlace, path: str, column: str) -> ColumnMeta:
        storage = shard.index_storage
        url = storage.url(path)
        try:
            size = storage.stamp(path).size
        except FileNotFoundError:
            raise missing_column(shard, column) from None
        head = storage.read(path, 0, min(size, FIXED_HEADER))
        header_size = header_size_of(head, url)
        head += storage.read(path, len(head), min(size, header_size))
        end = decode_column_header(head, url, size).meta_end
        return decode_meta(head + storage.read(path, len(head), end), url, size)

    def _remote_metas(self, ks: list[int], paths: list[str], column: str) -> list[ColumnMeta]:
        storage = self.shards[ks[0]].index_storage
        _, _, stamps, _ = storage.fetch_round([], stat_paths=[paths[k] for k in ks])
        sizes = []
        for k, stamp in zip(ks, stamps, strict=True):
            if isinstance(stamp, FileNotFoundError):
                raise missing_column(self.shards[k], column) from None
            if isinstance(stamp, BaseException):
                raise stamp
            sizes.append(stamp.size)
        got = read_round(storage, [(paths[k], 0, min(size, PREFIX))
                               for k, size in zip(ks, sizes, strict=True)])
        metas = []
        for k, size, head in zip(ks, sizes, got, strict=True):
            url = storage.url(paths[k])
            end = decode_column_header(head, url, size).meta_end
            if end > len(head):  # a large dictionary: the rest of it
                head += storage.read(paths[k], len(head), end)
            metas.append(decode_meta(head, url, size))
        return metas

    # -- pages ------------------------------------------------------------------------------
    def _pages(self, column: str, wanted: list[tuple[int, int]], *, codes: bool = False
               ) -> list[tuple[np.ndarray | PackedBytes, np.ndarray]]:
        """The values and validity of pages ``(shard, page)``: local ones read one by one,
        remote ones in one round per storage (a dictionary column's codes with ``codes``,
        see :func:`~.column_file.decode_page`)."""
        metas = self.metas(column)
        out: list[tuple[np.ndarray | PackedBytes, np.ndarray] | None] = [None] * len(wanted)
        remote: dict[int, list[int]] = {}
        j = 0
        while j < len(wanted):
            k, page = wanted[j]
            shard = self.shards[k]
            if not shard.index_storage.is_local:
                remote.setdefault(id(shard.index_storage), []).append(j)
                j += 1
                continue
            last = j  # a run of consecutive pages of the shard: one read
            while last + 1 < len(wanted) and wanted[last + 1] == (k, wanted[last][1] + 1):
                last += 1
            start, end = metas[k].page_range(page)[0], metas[k].page_range(wanted[last][1])[1]
            run = memoryview(shard.index_storage.read(column_path(shard.index_path, column),
                                                      start, end))
            for at in range(j, last + 1):
                low, high = metas[k].page_range(wanted[at][1])
                out[at] = decode_page(metas[k], wanted[at][1], run[low - start:high - start],
                                      codes=codes)
            j = last + 1
        for js in remote.values():
            storage = self.shards[wanted[js[0]][0]].index_storage
            ranges = [(column_path(self.shards[wanted[j][0]].index_path, column),
                       *metas[wanted[j][0]].page_range(wanted[j][1])) for j in js]
            for j, stored in zip(js, read_round(storage, ranges), strict=True):
                out[j] = decode_page(metas[wanted[j][0]], wanted[j][1], stored, codes=codes)
        return [p for p in out if p is not None]

    def select(self, condition: Condition) -> np.ndarray:
        """The global record numbers matching ``condition`` (typed), ascending, reading only
        the pages that may hold one.

        Raises:
            ColumnNotFoundError, StaleIndexError, SidecarError: As :meth:`metas`.
        """
        column = condition.column
        metas = self.metas(column)
        wanted, nulls_only = [], []
        for k, meta in enumerate(metas):
            if meta.header.vtype is ValueType.NONE:
                if condition.nulls and meta.header.count:
                    nulls_only.append(k)
                continue
            wanted += [(k, int(page)) for page in np.flatnonzero(condition.pages(meta))]
        found = [self.first[k] + np.arange(self.shards[k].records) for k in nulls_only]
        # a dictionary's pages are matched by their codes: which entries match is decided
        # once per shard (10,000,000 labels: no value decoded, no isin per page)
        tables: dict[int, np.ndarray] = {}
        scratch = np.empty(max((m.header.per_page for m in metas), default=0), np.int64)
        for (k, page), (values, valid) in zip(wanted, self._pages(column, wanted, codes=True),
                                              strict=True):
            base = int(self.first[k]) + page * metas[k].header.per_page
            dictionary = metas[k].dictionary
            if dictionary is None:
                found.append(base + np.flatnonzero(condition.matches(values, valid)))
                continue
            if k not in tables:
                tables[k] = condition.matches(dictionary, np.ones(len(dictionary), bool))
            assert isinstance(values, np.ndarray)
            found.append(_code_hits(condition, values, tables[k], valid, base, scratch))
        if not found:
            return np.zeros(0, dtype=np.int64)
        joined = np.concatenate(found).astype(np.int64, copy=False)
        if len(joined) > 1 and bool((joined[1:] < joined[:-1]).any()):  # nulls-only shards
            joined.sort()
        return joined

    def values(self, column: str, shards: Sequence[int] | None = None
               ) -> tuple[ValueType, np.ndarray | PackedBytes, np.ndarray]:
        """The whole column (of the shards ``shards``, all by default).

        Returns:
            ``(type, values, valid)``, in record order (values of records without one: 0 or
            empty).
        """
        vtype = self.vtype(column)
        metas = self.metas(column)
        chosen = range(len(self.shards)) if shards is None else shards
        wanted = [(k, page) for k in chosen for page in range(metas[k].header.pages)]
        pages = iter(self._pages(column, wanted))
        parts: list[np.ndarray | PackedBytes] = []
        valids = []
        for k in chosen:
            header = metas[k].header
            if header.vtype is ValueType.NONE:
                parts.append(PackedBytes.empty(header.count) if vtype is ValueType.BYTES
                             else np.zeros(header.count, dtype=vtype.dtype))
                valids.append(np.zeros(header.count, dtype=bool))
                continue
            for _ in range(header.pages):
                values, valid = next(pages)
                parts.append(values)
                valids.append(valid)
        valid_all = np.concatenate(valids) if valids else np.zeros(0, dtype=bool)
        if vtype is ValueType.BYTES:
            return vtype, PackedBytes.concat(p for p in parts if isinstance(p, PackedBytes)), \
                valid_all
        numbers = [p for p in parts if isinstance(p, np.ndarray)]
        return vtype, (np.concatenate(numbers) if numbers else np.zeros(0, vtype.dtype)), \
            valid_all


def _code_hits(condition: Condition, codes: np.ndarray, table: np.ndarray, valid: np.ndarray,
               base: int, scratch: np.ndarray) -> np.ndarray:
    """The global numbers of a dictionary page's records that match (their codes' entries
    set in ``table``, ``base`` the page's first record): one compiled pass
    (csrc/codehits.c's ``code_hits``; numpy's indexing, ``&`` and ``flatnonzero`` took ~50 us
    a page of 16,384 labels, 31 ms of where(label=3) over 10 M records) through ``scratch``
    (an int64 array of at least a page's records), or numpy's steps (its pure-Python twin,
    and a condition that also takes records without a value)."""
    native = loops()
    if native is None or condition.nulls or len(scratch) < len(codes) or \
            not codes.dtype.isnative:
        hits: np.ndarray = base + np.flatnonzero(condition.with_nulls(table[codes], valid))
        return hits
    count = native.code_hits(codes, codes.itemsize, table, valid, base, scratch)
    kept: np.ndarray = scratch[:count].copy()
    return kept


def read_round(storage: Storage, ranges: list[tuple[str, int, int]]) -> list[bytes]:
    """Byte ranges read in one concurrent round (the first failure raised).

    Args:
        storage: Where the files are.
        ranges: ``(path, start, end)`` of each range.

    Returns:
        The bytes of each range, in order.

    Raises:
        OSError: The first range that could not be read (a ``StorageError``).
    """
    got, _, _, _ = storage.fetch_round(ranges)
    out = []
    for item in got:
        if isinstance(item, BaseException):
            raise item
        out.append(item)
    return out
