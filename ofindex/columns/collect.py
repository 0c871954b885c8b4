"""A shard's columns gathered as its records come, and written as column sidecars.

The build hooks in where it holds the records: the scan of a remote or compressed file hands
each block's whole records to :meth:`ColumnCollector.add` as it goes (the data crosses the
network, or is inflated, once); a local uncompressed file, whose scan reads only headers, is
memory-mapped afterwards and cut into blocks of whole records (:func:`collect_mapped`), as its
payload checksums are. Adding columns to a shard indexed without them reads its records once
more the same ways, and leaves its sidecar as it is.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ColumnError, TruncatedRecordError, hint
from ..formats.framing import RecordFormat
from ..storage import Storage
from ..storage.ranges import plan_blocks
from .column_file import column_path, encode_column
from .extract import Extracted, extract
from .packed import PackedBytes
from .value_types import ValueType

#: Records times columns extracted at once: the extraction's working arrays (64 bytes a
#: cell) stay within 2 MiB, memory the allocator hands back to the next run, where a shard's
#: 125,000 records at once took fresh memory the kernel zeroes page by page (label and id of
#: 125,000 small Examples, CPU of the extraction: 28 ms at once, 13 ms in runs of 16,384).
RUN_CELLS = 32768


def family_of(fmt: RecordFormat) -> str:
    """The record family a framing holds (Examples, or SequenceExamples read by their context,
    in TFRecord files; OFRecords in OFRecord files)."""
    return "ofrecord" if fmt is RecordFormat.OFRECORD else "example"


def check_names(columns: Sequence[str]) -> tuple[str, ...]:
    """The columns asked for, checked: names of features, each once.

    Raises:
        ColumnError: A name is empty, not a string, too long, or given twice.
    """
    names = tuple(columns)
    for name in names:
        if not isinstance(name, str) or not name or len(name.encode("utf-8")) > 1024:
            raise ColumnError(f"a column is named by its feature (a string of 1 to 1024 UTF-8 "
                              f"bytes), not {name!r}")
    if len(set(names)) != len(names):
        raise ColumnError(f"columns {list(names)} name a feature twice; give each once "
                          f"({hint('columns=[...]', '--columns a,b')})")
    return names


def keyed_columns(columns: Sequence[str], keys: bool | Sequence[str]) -> tuple[str, ...]:
    """The columns whose key index a build writes: every one of ``columns`` for ``True``,
    none for ``False``, else those named (a string is one name).

    Raises:
        ColumnError: ``keys`` names a column that ``columns`` does not.
    """
    if isinstance(keys, bool):
        return tuple(columns) if keys else ()
    named = (keys,) if isinstance(keys, str) else tuple(keys)
    stray = [name for name in named if name not in columns]
    if stray:
        raise ColumnError(f"keys {stray} are not among the columns built {list(columns)}: a "
                          f"key index is built from its column; add them to "
                          f"{hint('columns=[...]', '--columns a,b')}")
    return tuple(dict.fromkeys(named))


class ColumnCollector:
    """The columns ``names`` of one shard, gathered run by run in record order.

    Args:
        names: The features.
        fmt: The shard's framing.
        url: The data file, for messages.
    """

    def __init__(self, names: tuple[str, ...], fmt: RecordFormat, url: str) -> None:
        self.names, self.fmt, self.url = names, fmt, url
        self.family = family_of(fmt)
        self.parts: list[list[Extracted]] = []
        self.count = 0

    def add(self, buffer: Any, starts: np.ndarray, ends: np.ndarray) -> None:
        """The next records: payloads ``buffer[starts[i]:ends[i]]``.

        Raises:
            ColumnError, DecodeError: As :func:`~ofindex.columns.extract.extract`.
        """
        step = max(1, RUN_CELLS // len(self.names))
        for lo in range(0, len(starts), step):
            hi = min(len(starts), lo + step)
            self.parts.append(extract(buffer, starts[lo:hi], ends[lo:hi], self.names,
                                      self.family, url=self.url, first=self.count))
            self.count += hi - lo

    def finish(self, count: int) -> list[Extracted]:
        """Every column of the first ``count`` records (fewer than were added when a partial
        index keeps only a prefix).

        Raises:
            ColumnError: Runs store a feature as different types.
        """
        out = []
        for j, name in enumerate(self.names):
            runs = [part[j] for part in self.parts]
            out.append(_joined(runs, name, self.url, count))
        return out


def _joined(runs: list[Extracted], name: str, url: str, count: int) -> Extracted:
    """The runs of one column as one, cut to ``count`` records."""
    vtype = ValueType.NONE
    first = 0
    for run in runs:
        if run.vtype is not ValueType.NONE and vtype is not ValueType.NONE and \
                run.vtype is not vtype:
            record = first + int(np.flatnonzero(run.valid)[0])
            raise ColumnError(
                f"{url}: record {record}: feature {name!r} is stored as {run.vtype.label}, "
                f"earlier records store it as {vtype.label}; a column has one type: leave "
                f"{name!r} out of {hint('columns=', '--columns')}")
        if run.vtype is not ValueType.NONE:
            vtype = run.vtype
        first += len(run.valid)
    if not runs:
        return Extracted(vtype, np.zeros(0, dtype=vtype.dtype), np.zeros(0, dtype=bool))
    valid = np.concatenate([run.valid for run in runs])[:count]
    values: np.ndarray | PackedBytes
    if vtype is ValueType.BYTES:
        values = PackedBytes.concat(
            run.values if isinstance(run.values, PackedBytes) else PackedBytes.empty(
                len(run.valid)) for run in runs)[:count]
    else:
        values = np.concatenate([run.values if run.vtype is vtype else
                                 np.zeros(len(run.valid), vtype.dtype) for run in runs])[:count]
    return Extracted(vtype, values, valid)


def collect_mapped(path: str, url: str, fmt: RecordFormat, offsets: np.ndarray,
                   indexed_end: int, names: tuple[str, ...], *,
                   block_bytes: int = 16 << 20) -> list[Extracted]:
    """The columns of a local uncompressed file, read from a memory map of it.

    Args:
        path: The local data file.
        url: The file, for messages.
        fmt: Its framing.
        offsets: Where each record starts (its sidecar's, or the scan's).
        indexed_end: Where the last record ends.
        names: The features.
        block_bytes: About how many bytes each run of records handed to the extraction
            holds (bounds the memory of a run's values).

    Returns:
        One :class:`Extracted` per name.

    Raises:
        TruncatedRecordError: The file is shorter than its index says.
        ColumnError, DecodeError: As :func:`~ofindex.columns.extract.extract`.
    """
    collector = ColumnCollector(names, fmt, url)
    if len(offsets) == 0:
        return collector.finish(0)
    starts = offsets.astype(np.int64)
    ends = np.append(starts[1:], indexed_end)
    first, last = starts + fmt.header_size, ends - fmt.footer_size
    fd = os.open(path, os.O_RDONLY)
    try:
        if os.fstat(fd).st_size < indexed_end:
            raise TruncatedRecordError(
                f"{url}: the file is shorter than its index says ({indexed_end} bytes); run "
                f"`ofindex build {url}` again once writing has finished",
                path=url, offset=indexed_end)
        mapped = mmap.mmap(fd, indexed_end, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    try:
        for lo, hi in plan_blocks(offsets, 0, len(offsets), block_bytes):
            collector.add(mapped, first[lo:hi], last[lo:hi])
    finally:
        mapped.close()
    return collector.finish(len(offsets))


def write_columns(index_storage: Storage, index_path: str, names: tuple[str, ...],
                  columns: list[Extracted], body_crc: int) -> int:
    """Write a shard's column sidecars (each under a temporary name, then renamed).

    Args:
        index_storage: Storage of the shard's sidecar.
        index_path: The shard's sidecar (the column sidecars go beside it).
        names: The columns.
        columns: Their values.
        body_crc: The body CRC of the shard's sidecar.

    Returns:
        The bytes written.
    """
    written = 0
    for name, column in zip(names, columns, strict=True):
        parts = encode_column(name, column.vtype, column.values, column.valid, body_crc)
        index_storage.write_atomic(column_path(index_path, name), list(parts))
        written += sum(map(len, parts))
    return written
