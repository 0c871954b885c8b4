"""Where the lists of named features lie in serialized Examples, and where each value of a
bytes list lies: what a reader needs to take one value out of a record later without
parsing the record again (the TFDS step layout, :mod:`ofindex.tfds.step_layout`).

The compiled module walks a batch of records in one call each, without the GIL
(``locate``, ``byte_spans``); the pure-Python walk here is the fallback without it and the
twin the tests hold it to. A record laid out otherwise than TensorFlow's writers lay
Examples out may be refused (``None``); the caller then parses it as a whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ofindex.decode._plans import loops
from ofindex.errors import DecodeError

#: How an Example's list kinds store their values (the oneof field number indexes it:
#: 1 bytes, 2 packed float32, 3 packed varints), as the compiled ``locate`` reads them.
_EXAMPLE_KINDS = b".b4v"
#: The columns of a row of ``locate``'s output (csrc/protowire.h: kind, count, start, end,
#: value, list start, list end).
_KIND, _START, _END, _LIST_START, _LIST_END, _SLOTS = 0, 2, 3, 5, 6, 7
#: The list kind of a bytes list.
_BYTES_LIST = 1


def _records(records: Sequence[Any]) -> tuple[list[Any], tuple[np.ndarray, ...] | None]:
    """The records as the compiled calls take them: a list of bytes, or of other buffers
    (memory maps' views) with their spans, each record a whole buffer."""
    items = list(records)
    if all(type(item) is bytes for item in items):
        return items, None
    lengths = [memoryview(item).nbytes for item in items]
    return items, (np.arange(len(items), dtype=np.int64), np.zeros(len(items), np.int64),
                   np.asarray(lengths, dtype=np.int64))


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    value, shift = 0, 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise DecodeError("truncated varint")
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7


def _record_lists(record: Any, wanted: set[str]) -> dict[str, tuple[int, int, int]]:
    """``{feature name: (list kind, list start, list end)}`` of the wanted features of one
    serialized Example (the pure-Python walk)."""
    buf = memoryview(record).cast("B")
    found: dict[str, tuple[int, int, int]] = {}
    if not len(buf):  # an Example without features
        return found
    tag, pos = _varint(buf, 0)
    if tag != 0x0A:
        raise DecodeError("no features")
    size, pos = _varint(buf, pos)
    end = pos + size
    while pos < end:
        tag, pos = _varint(buf, pos)
        size, pos = _varint(buf, pos)
        if tag != 0x0A:
            pos += size
            continue
        entry_end = pos + size
        key, feature = "", (0, 0, 0)
        while pos < entry_end:
            tag, pos = _varint(buf, pos)
            size, pos = _varint(buf, pos)
            if tag == 0x0A:
                key = bytes(buf[pos:pos + size]).decode("utf-8", "replace")
            elif tag == 0x12:
                inner_tag, inner = _varint(buf, pos)
                inner_size, inner = _varint(buf, inner)
                feature = (inner_tag >> 3, inner, inner + inner_size)
            pos += size
        if key in wanted:
            found[key] = feature
    return found


def _packed_run(record: Any, start: int, end: int) -> tuple[int, int]:
    """The bounds of a packed numeric list's values: one length-delimited field 1 filling
    the list's body [start, end), or nothing (an empty list)."""
    buf = memoryview(record).cast("B")
    if start == end:
        return start, start
    tag, pos = _varint(buf, start)
    if tag != 0x0A:
        raise DecodeError("not packed")
    size, pos = _varint(buf, pos)
    if pos + size != end:
        raise DecodeError("more than one packed run")
    return pos, end


def list_bounds(records: Sequence[Any], names: Sequence[str]) -> np.ndarray | None:
    """Where each named feature's list lies in each serialized Example.

    Args:
        records: The serialized Examples (bytes-like).
        names: The feature names (ASCII, each once).

    Returns:
        int64 ``(records, names, 5)``: the list kind (0: the feature is missing, 1 bytes,
        2 float, 3 int64), the start and end of the list message's body in the record, and
        the start and end of a numeric list's packed values (a bytes list's body again);
        ``None`` when a record is laid out otherwise than writers lay Examples out (a
        numeric list unpacked or in several runs, among others).
    """
    native = loops()
    out = np.zeros((len(records), len(names), 5), dtype=np.int64)
    if native is not None:
        rows = np.empty((len(records), len(names), _SLOTS), dtype=np.int64)
        encoded = tuple(name.encode("ascii") for name in names)
        items, spans = _records(records)
        native.locate(items, encoded, _EXAMPLE_KINDS, True, rows.reshape(-1), spans)
        if len(records) and names and (rows[:, 0, _KIND] < 0).any():
            return None
        out[...] = rows[:, :, [_KIND, _LIST_START, _LIST_END, _START, _END]]
        bytes_lists = out[:, :, 0] == _BYTES_LIST
        out[:, :, 3][bytes_lists] = out[:, :, 1][bytes_lists]
        out[:, :, 4][bytes_lists] = out[:, :, 2][bytes_lists]
        return out
    wanted = set(names)
    for i, record in enumerate(records):
        try:
            found = _record_lists(record, wanted)
            for j, name in enumerate(names):
                kind, start, end = found.get(name, (0, 0, 0))
                run = (start, end) if kind in (0, _BYTES_LIST) else _packed_run(record, start,
                                                                                 end)
                out[i, j] = (kind, start, end, *run)
        except DecodeError:
            return None
    return out


def _record_values(record: Any, start: int, end: int) -> tuple[list[int], list[int]]:
    """The (start, length) of every value of one bytes list's body (the pure-Python walk)."""
    buf = memoryview(record).cast("B")
    starts, lengths = [], []
    pos = start
    while pos < end:
        tag, pos = _varint(buf, pos)
        if tag != 0x0A:
            raise DecodeError("not a bytes value")
        size, pos = _varint(buf, pos)
        if pos + size > end:
            raise DecodeError("a value runs past its list")
        starts.append(pos)
        lengths.append(size)
        pos += size
    return starts, lengths


def bytes_value_spans(records: Sequence[Any], starts: np.ndarray, ends: np.ndarray,
                      counts: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Where each value of one bytes list lies in each record.

    Args:
        records: The serialized Examples (bytes-like).
        starts: Where each record's list body starts (``list_bounds``), int64.
        ends: Where it ends, int64.
        counts: How many values each record's list holds, int64.

    Returns:
        ``(value starts, value lengths)``: int64, ``counts.sum()`` each, the records' values
        in order (starts within their record); ``None`` when a list is laid out otherwise
        or holds another number of values.

    Raises:
        ValueError: A list's span lies outside its record, or a count is negative.
    """
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    if (counts < 0).any():  # before anything is allocated from their sum
        raise ValueError(f"a count {int(counts.min())} lies outside any record")
    native = loops()
    if native is not None:
        total = int(counts.sum())
        value_starts = np.empty(total, dtype=np.int64)
        value_lengths = np.empty(total, dtype=np.int64)
        items, spans = _records(records)
        if not native.byte_spans(items, starts, ends, counts, value_starts, value_lengths,
                                 spans):
            return None
        return value_starts, value_lengths
    all_starts: list[int] = []
    all_lengths: list[int] = []
    for record, start, end, count in zip(records, starts.tolist(), ends.tolist(),
                                         counts.tolist(), strict=True):
        if not 0 <= start <= end <= len(memoryview(record).cast("B")):
            raise ValueError(f"a list [{start}, {end}) or count {count} lies outside its "
                             "record")
        try:
            found_starts, found_lengths = _record_values(record, start, end)
        except DecodeError:
            return None
        if len(found_starts) != count:
            return None
        all_starts += found_starts
        all_lengths += found_lengths
    return np.asarray(all_starts, dtype=np.int64), np.asarray(all_lengths, dtype=np.int64)
