"""Where the lists of named features lie in serialized Examples, where each value of a
bytes list lies, and the CRC-32C of spans of them: what a reader needs to take one value out
of a record later without parsing the record again, and to check it by its own sum (the TFDS
step layout, :mod:`ofindex.tfds.step_layout`).

The compiled module walks (``locate``, ``byte_spans``) and sums (``span_sums``) a batch of
records in one call each, without the GIL; the records are ``bytes``, or spans of buffers
such as memory maps (``spans``), walked where they lie. The pure-Python walk here is the
fallback without it and the twin the tests hold it to. A record laid out otherwise than
TensorFlow's writers lay Examples out may be refused (``None``); the caller then parses it
as a whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import crc32c
import numpy as np

from ofindex.decode._located import (
    COUNT,
    END,
    EXAMPLE_LOCATE_KINDS,
    KIND,
    LIST_END,
    LIST_START,
    SLOTS,
    START,
    Spans,
)
from ofindex.decode._plans import loops
from ofindex.errors import DecodeError

#: The list kind of a bytes list.
_BYTES_LIST = 1


def _records(records: Sequence[Any], spans: Spans | None
             ) -> tuple[list[Any], tuple[np.ndarray, ...] | None]:
    """The records as the compiled calls take them: a list of bytes, or of other buffers
    (memory maps' views) with their spans (``spans`` when given, else each record a whole
    buffer)."""
    items = list(records)
    if spans is not None:
        return items, tuple(np.ascontiguousarray(part, dtype=np.int64) for part in spans)
    if all(type(item) is bytes for item in items):
        return items, None
    lengths = [memoryview(item).nbytes for item in items]
    return items, (np.arange(len(items), dtype=np.int64), np.zeros(len(items), np.int64),
                   np.asarray(lengths, dtype=np.int64))


def record_views(records: Sequence[Any], spans: Spans | None) -> list[Any]:
    """The records one buffer each (``spans``: see :func:`list_bounds`), for the
    pure-Python walks.

    Args:
        records: The records, or with ``spans`` the buffers they lie in.
        spans: ``(which, starts, ends)`` of the records, or ``None``.

    Returns:
        One bytes-like object per record (``memoryview`` slices of the buffers with
        ``spans``).
    """
    if spans is None:
        return list(records)
    views = [memoryview(item).cast("B") for item in records]
    return [views[which][start:end] for which, start, end in
            zip(*(part.tolist() for part in spans), strict=True)]


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


def _run_count(record: Any, kind: int, start: int, end: int) -> int:
    """The number of values of a list found by the pure-Python walk (its values' bytes
    [start, end): a packed run, or a bytes list's body)."""
    if kind == _BYTES_LIST:
        return len(_record_values(record, start, end)[0])
    packed = np.frombuffer(memoryview(record).cast("B")[start:end], dtype=np.uint8)
    if kind == 2:
        if len(packed) % 4:
            raise DecodeError("a packed float list of a part of a value")
        return len(packed) // 4
    if len(packed) and packed[-1] >= 0x80:
        raise DecodeError("a packed varint list ends inside a value")
    return int(np.count_nonzero(packed < 0x80))


def list_bounds(records: Sequence[Any], names: Sequence[str],
                spans: Spans | None = None) -> np.ndarray | None:
    """Where each named feature's list lies in each serialized Example.

    Args:
        records: The serialized Examples (bytes-like), or with ``spans`` the buffers they
            lie in (memory maps).
        names: The feature names (ASCII, each once).
        spans: ``(which, starts, ends)``: record ``i`` is
            ``records[which[i]][starts[i]:ends[i]]`` (positions found are within it).

    Returns:
        int64 ``(records, names, 6)``: the list kind (0: the feature is missing, 1 bytes,
        2 float, 3 int64), the start and end of the list message's body in the record, the
        start and end of a numeric list's packed values (a bytes list's body again), and
        the number of values; ``None`` when a record is laid out otherwise than writers lay
        Examples out (a numeric list unpacked or in several runs, among others).
    """
    native = loops()
    count = len(records) if spans is None else len(spans[0])
    out = np.zeros((count, len(names), 6), dtype=np.int64)
    if native is not None:
        rows = np.empty((count, len(names), SLOTS), dtype=np.int64)
        encoded = tuple(name.encode("ascii") for name in names)
        items, held = _records(records, spans)
        native.locate(items, encoded, EXAMPLE_LOCATE_KINDS, True, rows.reshape(-1), held)
        if count and names and (rows[:, 0, KIND] < 0).any():
            return None
        out[...] = rows[:, :, [KIND, LIST_START, LIST_END, START, END, COUNT]]
        bytes_lists = out[:, :, 0] == _BYTES_LIST
        out[:, :, 3][bytes_lists] = out[:, :, 1][bytes_lists]
        out[:, :, 4][bytes_lists] = out[:, :, 2][bytes_lists]
        return out
    wanted = set(names)
    for i, record in enumerate(record_views(records, spans)):
        try:
            found = _record_lists(record, wanted)
            for j, name in enumerate(names):
                kind, start, end = found.get(name, (0, 0, 0))
                if kind > 3:
                    raise DecodeError(f"list kind {kind} is not an Example's")
                run = (start, end) if kind in (0, _BYTES_LIST) else _packed_run(record, start,
                                                                                 end)
                values = _run_count(record, kind, *run) if kind else 0
                out[i, j] = (kind, start, end, *run, values)
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
                      counts: np.ndarray, spans: Spans | None = None
                      ) -> tuple[np.ndarray, np.ndarray] | None:
    """Where each value of one bytes list lies in each record.

    Args:
        records: The serialized Examples (bytes-like), or with ``spans`` the buffers they
            lie in (as for :func:`list_bounds`).
        starts: Where each record's list body starts (``list_bounds``), int64.
        ends: Where it ends, int64.
        counts: How many values each record's list holds, int64.
        spans: ``(which, starts, ends)`` of the records in ``records`` (as for
            :func:`list_bounds`).

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
        items, held = _records(records, spans)
        if not native.byte_spans(items, starts, ends, counts, value_starts, value_lengths,
                                 held):
            return None
        return value_starts, value_lengths
    all_starts: list[int] = []
    all_lengths: list[int] = []
    for record, start, end, count in zip(record_views(records, spans), starts.tolist(),
                                         ends.tolist(), counts.tolist(), strict=True):
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


def _span_arrays(counts: np.ndarray, starts: np.ndarray, ends: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The span sums' arguments as contiguous int64 arrays, and their output: one uint32 per
    span, allocated once the counts are known not to be negative and to match the spans.

    Raises:
        ValueError: A count is negative, or the starts and ends are not one per span.
    """
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    if (counts < 0).any():  # before anything is allocated from their sum
        raise ValueError(f"a count {int(counts.min())} of spans is negative")
    spans = int(counts.sum())
    if len(starts) != spans or len(ends) != spans:
        raise ValueError(f"{len(starts)} starts and {len(ends)} ends for {spans} spans")
    return counts, starts, ends, np.empty(spans, dtype=np.uint32)


def span_sums(records: Sequence[Any], counts: np.ndarray, starts: np.ndarray,
              ends: np.ndarray, spans: Spans | None = None) -> np.ndarray:
    """The CRC-32C of many spans of a batch of records, in one compiled call (without the
    GIL, three spans at a time) where the CPU has a CRC32C instruction.

    Args:
        records: The records (bytes-like), or with ``spans`` the buffers they lie in (as
            for :func:`list_bounds`).
        counts: How many spans lie in each record (int64): record ``i`` holds the next
            ``counts[i]`` spans.
        starts: Where each span starts in its record (int64, ``counts.sum()`` of them).
        ends: Where each span ends.
        spans: ``(which, starts, ends)`` of the records in ``records``.

    Returns:
        ``uint32``: one CRC-32C per span, in order.

    Raises:
        ValueError: A count is negative, or a span lies outside its record.
    """
    counts, starts, ends, out = _span_arrays(counts, starts, ends)
    native = loops()
    items, held = _records(records, spans)
    if native is not None and native.span_sums(items, counts, starts, ends, out, held):
        return out
    first = 0
    for i, (record, count) in enumerate(zip(record_views(records, spans), counts.tolist(),
                                            strict=True)):
        view = memoryview(record).cast("B")
        for k in range(first, first + count):
            start, end = int(starts[k]), int(ends[k])
            if not 0 <= start <= end <= len(view):
                raise ValueError(f"span {k} [{start}, {end}) lies outside record {i}")
            out[k] = crc32c.crc32c(view[start:end])
        first += count
    return out


def record_span_sums(records: Sequence[Any], counts: np.ndarray, starts: np.ndarray,
                     ends: np.ndarray, spans: Spans | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The CRC-32C of many spans of a batch of records (as :func:`span_sums`) and of each
    whole record, in one compiled pass over each record: its gaps between the spans are
    summed and its spans' sums joined in, so that a first open checks a record's own CRC
    without reading it again (reading the 2.9 GB of a DROID-like dataset twice took 0.45 s
    of CPU more than reading it once).

    Args:
        records: The records (bytes-like), or with ``spans`` the buffers they lie in.
        counts: How many spans lie in each record (int64).
        starts: Where each span starts in its record (int64); a record's spans in order,
            none starting before the one before it ends.
        ends: Where each span ends.
        spans: ``(which, starts, ends)`` of the records in ``records``.

    Returns:
        ``uint32``: one CRC-32C per span, in order, and one per record.

    Raises:
        ValueError: A count is negative, a span lies outside its record, or a record's
            spans are out of order or overlap.
    """
    counts, starts, ends, out = _span_arrays(counts, starts, ends)
    whole = np.empty(len(counts), dtype=np.uint32)
    native = loops()
    items, held = _records(records, spans)
    if native is not None and native.span_sums(items, counts, starts, ends, out, held, whole):
        return out, whole
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    behind = starts[1:] < ends[:-1]  # a span starting before the one before it ends
    behind[firsts[(counts > 0) & (firsts > 0)] - 1] = False  # a record's first: none before
    if behind.any():
        k = int(np.flatnonzero(behind)[0]) + 1
        raise ValueError(f"span {k} starts before the one before it ends")
    out[...] = span_sums(records, counts, starts, ends, spans)
    for i, record in enumerate(record_views(records, spans)):
        whole[i] = crc32c.crc32c(memoryview(record).cast("B"))
    return out, whole
