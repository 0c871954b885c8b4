"""Records encoded from laid-out columns straight into framed bytes: the batch encoder's loop.

:mod:`ofindex.encode.columns` checks a batch of columns and lays each out as a
:class:`PlannedColumn` (numbers converted by numpy, values that need Python made into whole
map entries); :func:`encode_block` then writes rows of the batch as records, back to back
into a caller's buffer, each framed as a TFRecord (length, its CRC, payload, the payload's
CRC), an OFRecord (length, payload) or not at all, and gives each record's framed size and
payload CRC32C (what a writer's sidecar keeps). It fills as many rows as fit, so a writer
reuses one buffer and cuts shards at record boundaries.

Two implementations give the same bytes: the compiled ``ofindex._native.encode`` (one pass
per record, no object per record, the GIL released while bytes are copied) and
:func:`encode_block_py`, its pure-Python twin (used without the compiled module; tests hold
them equal).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import crc32c
import numpy as np

from ofindex import _accel
from ofindex.encode.varints import tag, varint, varints
from ofindex.formats.crc import masked_crc32c

#: How a column's values become each record's map entry (csrc/encode.c has the same modes):
#: a packed list of fixed-size numbers (each row's bytes as they are), a packed list of
#: varints (int64 values), a bytes list of one value (each row's bytes object), the whole
#: map entry made beforehand (``b""``: the feature is absent from that record), or a bytes
#: list of one value cut from one buffer (an Arrow binary or string column, not copied), a
#: packed list of any length cut from one buffer (a ragged column: floats as they are,
#: integers already made varints), or a value list's whole content cut from one buffer (a
#: bytes list of any number of values, each with its key and length), or a packed list of
#: varints of any length (int64 values; its bounds count values, the others' bytes), or
#: whole map entries made once per distinct value and chosen per row by an index (a
#: dictionary column's: its dictionary encoded once, not decoded per row), or a bytes list
#: of any number of values cut from one buffer (an Arrow list of binary or string: each
#: row's items by an index, each item's bytes by bounds; keys and lengths written as the
#: record is). Any of them may leave the feature out of some rows (``present``: null cells).
(PACKED, VARINT, ONE_BYTES, ENTRIES, SPANS, PACKED_SPANS, LIST_SPANS, VARINT_SPANS, GATHER,
 BYTES_LISTS) = range(10)
#: The modes whose data is ``(bounds, values)``.
SPAN_MODES = (SPANS, PACKED_SPANS, LIST_SPANS, VARINT_SPANS)
#: The modes whose data is ``(index, bounds, values)``: ``GATHER``'s row ``r`` is
#: ``values[bounds[index[r]]:bounds[index[r] + 1]]``; ``BYTES_LISTS``' row ``r`` holds items
#: ``index[r]`` to ``index[r + 1]``, item ``i`` being ``values[bounds[i]:bounds[i + 1]]``.
INDEXED_MODES = (GATHER, BYTES_LISTS)
#: ``(header, footer)`` bytes around each payload: TFRecord, OFRecord, none.
TFRECORD_FRAMING, OFRECORD_FRAMING, NO_FRAMING = (12, 4), (8, 0), (0, 0)


@dataclasses.dataclass(frozen=True)
class PlannedColumn:
    """One column of a batch, laid out for :func:`encode_block`.

    Attributes:
        key: The feature's name (UTF-8).
        field: The field of its value list in a ``Feature`` (which list it is).
        mode: :data:`PACKED`, :data:`VARINT`, :data:`ONE_BYTES`, :data:`ENTRIES`,
            :data:`SPANS`, :data:`PACKED_SPANS`, :data:`LIST_SPANS`, :data:`VARINT_SPANS`,
            :data:`GATHER` or :data:`BYTES_LISTS`.
        data: ``PACKED``: a C-contiguous ``(rows, width)`` uint8 array; ``VARINT``: a
            C-contiguous ``(rows, count)`` int64 array; the span modes: ``(bounds,
            values)``, ``rows + 1`` int64 bounds and a buffer, row ``r`` being
            ``values[bounds[r]:bounds[r + 1]]``; the indexed modes: ``(index, bounds,
            values)`` (see :data:`INDEXED_MODES`); otherwise a list of ``bytes``.
        present: One uint8 per row, 0 where the feature is absent from the row (a null
            cell: that row's data is not written), or ``None``: present in every row.
    """

    key: bytes
    field: int
    mode: int
    data: np.ndarray | list[bytes] | tuple[np.ndarray, Any] | tuple[np.ndarray, np.ndarray, Any]
    present: np.ndarray | None = None

    @property
    def rows(self) -> int:
        """Rows of the column."""
        if self.mode in SPAN_MODES or self.mode == BYTES_LISTS:
            return len(self.data[0]) - 1
        return len(self.data[0]) if self.mode == GATHER else len(self.data)


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """A batch of columns laid out for :func:`encode_block`.

    Attributes:
        columns: The columns, in the order their entries go into each record.
        rows: Records in the batch.
        wrap: The entries go inside an Example's ``Features`` (``False``: an OFRecord).
    """

    columns: tuple[PlannedColumn, ...]
    rows: int
    wrap: bool

    def as_tuples(self) -> tuple[tuple[bytes, int, int, Any, np.ndarray | None], ...]:
        """The columns as the compiled encoder takes them."""
        return tuple((c.key, c.field, c.mode, c.data, c.present) for c in self.columns)


def entry_prefix(key: bytes, field: int, size: int, one_value: bool) -> bytes:
    """A map entry's bytes up to its values (``size`` bytes of them): a packed list's
    payload (no list at all when empty), or one bytes value (``one_value``)."""
    inner = (tag(1) + varint(size)) if size or one_value else b""
    feature = tag(field) + varint(len(inner) + size) + inner
    entry = tag(1) + varint(len(key)) + key + tag(2) + varint(len(feature) + size) + feature
    return tag(1) + varint(len(entry) + size) + entry


def _list_entry(key: bytes, field: int, content: bytes) -> bytes:
    """A map entry whose value list's content is ``content``, as it is."""
    feature = tag(field) + varint(len(content)) + content
    entry = tag(1) + varint(len(key)) + key + tag(2) + varint(len(feature)) + feature
    return tag(1) + varint(len(entry)) + entry


def _indexed_entry(column: PlannedColumn, row: int) -> bytes:
    """Row ``row``'s map entry of a :data:`GATHER` or :data:`BYTES_LISTS` column."""
    index, bounds, values = column.data  # type: ignore[misc]
    view = memoryview(values).cast("B")
    if column.mode == GATHER:
        item = int(index[row])
        return bytes(view[int(bounds[item]):int(bounds[item + 1])])
    content = b"".join(tag(1) + varint(int(bounds[item + 1] - bounds[item]))
                       + bytes(view[int(bounds[item]):int(bounds[item + 1])])
                       for item in range(int(index[row]), int(index[row + 1])))
    return _list_entry(column.key, column.field, content)


def _row_entry(column: PlannedColumn, row: int) -> bytes:
    if column.present is not None and not column.present[row]:
        return b""
    data: Any = column.data
    if column.mode in INDEXED_MODES:
        return _indexed_entry(column, row)
    if column.mode == VARINT_SPANS:
        bounds, values = data
        ints = np.frombuffer(values, np.int64)[int(bounds[row]):int(bounds[row + 1])]
        raw = bytes(varints(ints.view(np.uint64))[0].tobytes())
        return entry_prefix(column.key, column.field, len(raw), False) + raw
    if column.mode in SPAN_MODES:
        bounds, values = data
        value = bytes(memoryview(values)[int(bounds[row]):int(bounds[row + 1])])
        if column.mode == LIST_SPANS:
            return _list_entry(column.key, column.field, value)
        one = column.mode == SPANS
        return entry_prefix(column.key, column.field, len(value), one) + value
    if column.mode == ENTRIES or column.mode == ONE_BYTES:
        value = data[row]
        if not isinstance(value, bytes):
            raise TypeError(f"row {row}: not bytes")
        if column.mode == ENTRIES:
            return value
        return entry_prefix(column.key, column.field, len(value), True) + value
    assert isinstance(data, np.ndarray)
    if column.mode == PACKED:
        raw = bytes(data[row].tobytes())
    else:
        raw = bytes(varints(data[row].view(np.uint64))[0].tobytes())
    return entry_prefix(column.key, column.field, len(raw), False) + raw


def _frame(payload: bytes, framing: tuple[int, int]) -> bytes:
    if framing == TFRECORD_FRAMING:
        head = len(payload).to_bytes(8, "little")
        return b"".join((head, masked_crc32c(head).to_bytes(4, "little"), payload,
                         masked_crc32c(payload).to_bytes(4, "little")))
    if framing == OFRECORD_FRAMING:
        return len(payload).to_bytes(8, "little") + payload
    return payload


def _bad_bounds(bounds: np.ndarray, size: int) -> bool:
    """Whether bounds are none, lie outside ``[0, size]`` or go backwards."""
    return len(bounds) < 1 or bool((bounds < 0).any() | (bounds > size).any()
                                   | (np.diff(bounds) < 0).any())


def _check_columns(plan: BatchPlan) -> None:
    """The compiled ``encode``'s checks of the span and indexed columns' data."""
    for column in plan.columns:
        if column.mode in SPAN_MODES or column.mode in INDEXED_MODES:
            bounds = np.asarray(column.data[-2])
            size = memoryview(column.data[-1]).nbytes // (8 if column.mode == VARINT_SPANS
                                                           else 1)
            if _bad_bounds(bounds, size):
                raise ValueError("a column's bounds lie outside its values or go backwards")
        if column.mode == GATHER:
            index = np.asarray(column.data[0])
            if bool((index < 0).any() | (index >= len(bounds) - 1).any()):
                raise ValueError("a column's index lies outside its entries")
        elif column.mode == BYTES_LISTS and _bad_bounds(np.asarray(column.data[0]),
                                                        len(bounds) - 1):
            raise ValueError("a column's index lies outside its items or goes backwards")


def _check_block_args(plan: BatchPlan, start: int, stop: int, framing: tuple[int, int],
                      limit: int, sizes: np.ndarray, crcs: np.ndarray | None) -> None:
    """The compiled ``encode``'s checks of its arguments, in its order."""
    if framing not in (TFRECORD_FRAMING, OFRECORD_FRAMING, NO_FRAMING):
        raise ValueError("framing is (12, 4), (8, 0) or (0, 0)")
    _check_columns(plan)
    for column in plan.columns:
        present = column.present
        if present is not None and (present.ndim != 1 or present.itemsize != 1
                                    or len(present) != column.rows):
            raise ValueError("a column's present is one byte per row")
    counts = {c.rows for c in plan.columns}
    if len(counts) > 1:
        raise ValueError("columns of different row counts")
    if not counts:
        raise ValueError("no columns")
    rows = counts.pop()
    if start < 0 or stop < start or stop > rows or limit < 0:
        raise ValueError(f"rows [{start}, {stop}) or limit {limit} out of range ({rows} rows)")
    if len(sizes) < stop - start or (crcs is not None and len(crcs) < stop - start):
        raise ValueError("sizes or crcs is shorter than the rows")


def encode_block_py(plan: BatchPlan, start: int, stop: int, framing: tuple[int, int],
                    limit: int, out: bytearray | np.ndarray, sizes: np.ndarray,
                    crcs: np.ndarray | None) -> tuple[int, int]:
    """The pure-Python twin of the compiled ``encode`` (see :func:`encode_block`)."""
    _check_block_args(plan, start, stop, framing, limit, sizes, crcs)
    room = min(limit, len(out))
    view = memoryview(out).cast("B")  # type: ignore[arg-type]
    used = 0
    for k, row in enumerate(range(start, stop)):
        entries = b"".join(_row_entry(column, row) for column in plan.columns)
        payload = (tag(1) + varint(len(entries)) + entries) if plan.wrap else entries
        record = _frame(payload, framing)
        if len(record) > room - used:
            return (0, len(record)) if k == 0 else (k, used)
        view[used:used + len(record)] = record
        sizes[k] = len(record)
        if crcs is not None:
            crcs[k] = crc32c.crc32c(payload)
        used += len(record)
    return stop - start, used


def encode_block(plan: BatchPlan, start: int, stop: int, framing: tuple[int, int],
                 limit: int, out: bytearray | np.ndarray, sizes: np.ndarray,
                 crcs: np.ndarray | None = None) -> tuple[int, int]:
    """Encode rows ``[start, stop)`` of a batch as framed records into ``out``.

    Records go back to back from ``out[0]``, as many whole ones as fit in
    ``min(limit, len(out))`` bytes.

    Args:
        plan: The batch's columns (see :mod:`ofindex.encode.columns`).
        start: The first row.
        stop: The row after the last.
        framing: :data:`TFRECORD_FRAMING`, :data:`OFRECORD_FRAMING` or :data:`NO_FRAMING`.
        limit: Bytes the records may take (a shard's remaining room).
        out: A writable buffer.
        sizes: An int64 array with room for ``stop - start``: each record's framed size.
        crcs: A uint32 array with room for ``stop - start``: each payload's CRC32C (what an
            OFRecord sidecar keeps), or ``None``.

    Returns:
        ``(rows, used)``: the rows written and their bytes; ``(0, size)`` when the first
        record (``size`` bytes) does not fit.

    Raises:
        TypeError: A value of a bytes column that is not ``bytes``.
    """
    native = _accel.native
    if native is None:
        return encode_block_py(plan, start, stop, framing, limit, out, sizes, crcs)
    header, footer = framing
    rows, used = native.encode(plan.as_tuples(), plan.wrap, header, footer, start, stop, limit,
                               out, sizes, crcs, crc32c.crc32c)
    return rows, used
