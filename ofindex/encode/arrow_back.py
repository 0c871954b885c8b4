"""Decoded records back to the Arrow columns they were written from, by the mapping of
:mod:`ofindex.encode.arrow_map` (the way back of :mod:`ofindex.encode.arrow`).

Every feature of a column is decoded as ``VarLen`` of the list it was written to
(:func:`decode_spec`); :func:`arrow_table` rebuilds each column from them: a value's row is
null where its feature is absent, a list's or struct's where its ``/null`` mark is present,
lists are cut by the counts of what their items wrote and by their ``/lengths_<k>``
features, and every array is cast to the exact type of the schema written beside the data
(dictionary and extension types included).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ofindex.decode.spec import Ragged, VarLen
from ofindex.encode.arrow_map import (
    BITS,
    BOOL,
    COUNT,
    NOTHING,
    RAW,
    TEXT,
    UTF8,
    WIDENED,
    Leaf,
    Node,
    plan_schema,
    storage_type,
)
from ofindex.errors import DecodeError


def _pa() -> Any:
    import pyarrow

    return pyarrow


def decode_spec(nodes: list[Node]) -> dict[str, VarLen]:
    """The decoding spec of every feature the columns wrote (each a ``VarLen`` of its list).

    Args:
        nodes: The columns' trees (:func:`~ofindex.encode.arrow_map.plan_schema`).

    Returns:
        ``{feature: VarLen(list type)}``.
    """
    return {feature: VarLen(stored) for node in nodes
            for feature, stored in node.features().items()}


def _bytes_values(values: np.ndarray) -> Any:
    pa = _pa()
    return pa.array(values.tolist() if isinstance(values, np.ndarray) else list(values),
                    pa.binary())


def _leaf_array(leaf: Leaf, arrow_type: Any, values: np.ndarray) -> Any:
    """Decoded values of a list as an Arrow array of their value type (``arrow_type``'s
    storage)."""
    pa = _pa()
    target = storage_type(arrow_type)
    if leaf.encoding == RAW:
        raw = b"".join(values.tolist())
        return pa.array(np.frombuffer(raw, "<f8"))
    if leaf.stored == "bytes":
        array = _bytes_values(values)
        if leaf.encoding == UTF8:
            return array.cast(pa.string())
        if leaf.encoding == TEXT:
            return array.cast(pa.string()).cast(target)
        return array
    numbers = np.asarray(values)
    if leaf.encoding == BOOL:
        return pa.array(numbers != 0)
    if leaf.encoding == BITS:
        return pa.array(numbers.astype(np.int64, copy=False).view(np.uint64))
    if leaf.encoding == WIDENED:
        return pa.array(numbers.astype(np.float32, copy=False)).cast(pa.float16())
    if leaf.encoding == COUNT:
        width = target.bit_width
        ints = pa.array(numbers.astype(np.int64 if width == 64 else np.int32))
        return ints.view(target)
    return pa.array(numbers)


def _finish(array: Any, arrow_type: Any) -> Any:
    """``array`` (of the storage type, field names aside) as exactly ``arrow_type``."""
    pa = _pa()
    if isinstance(arrow_type, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(arrow_type, _finish(array,
                                                                  arrow_type.storage_type))
    if array.type.equals(arrow_type):
        return array
    if pa.types.is_map(arrow_type):  # rebuilt from its list of struct<key, value> entries
        entries = _finish(array, storage_type(arrow_type))
        nulls = entries.is_null() if entries.null_count else None
        return pa.MapArray.from_arrays(entries.offsets, entries.values.field(0),
                                       entries.values.field(1), type=arrow_type, mask=nulls)
    if pa.types.is_fixed_size_binary(arrow_type):
        data = b"".join(v or bytes(arrow_type.byte_width) for v in array.to_pylist())
        return pa.FixedSizeBinaryArray.from_buffers(
            arrow_type, len(array), [array.is_valid().buffers()[1] if array.null_count
                                     else None, pa.py_buffer(data)], array.null_count)
    return array.cast(arrow_type)


class _Reader:
    """One column rebuilt from its decoded features."""

    def __init__(self, decoded: Mapping[str, Ragged], rows: int) -> None:
        self.decoded, self.rows = decoded, rows

    def ragged(self, feature: str) -> Ragged:
        found = self.decoded.get(feature)
        if found is None:
            return Ragged(np.empty(0), np.zeros(self.rows, np.int64))
        return found

    def marked(self, node: Node) -> np.ndarray | None:
        """Rows whose ``/null`` mark is present (``None``: no mark)."""
        if node.marker is None:
            return None
        marks = np.asarray(self.ragged(node.marker).row_lengths) > 0
        return marks if marks.any() else None

    def values(self, node: Node) -> tuple[Any, np.ndarray, np.ndarray]:
        """A value node's values of every row, flat, with each row's count and presence."""
        assert node.leaf is not None
        found = self.ragged(node.place)
        lengths = np.asarray(found.row_lengths, np.int64)
        flat = _leaf_array(node.leaf, node.arrow_type, np.asarray(found.values))
        if node.leaf.encoding == RAW:
            sizes = np.fromiter((len(v) for v in np.asarray(found.values).tolist()),
                                np.int64, len(found.values))
            if (sizes % 8).any():
                raise DecodeError(f"feature {node.place!r}: a float64 value of "
                                  f"{int(sizes[np.argmax(sizes % 8)])} bytes (8 a value)")
            counts = np.zeros(self.rows, np.int64)
            counts[lengths > 0] = sizes // 8
            if (lengths > 1).any():
                raise self.too_many(node, lengths)
            return flat, counts, lengths > 0
        return flat, lengths, lengths > 0

    def too_many(self, node: Node, lengths: np.ndarray) -> DecodeError:
        row = int(np.argmax(lengths > 1))
        return DecodeError(f"feature {node.place!r} of row {row} holds {int(lengths[row])} "
                           "values where its column map says one: the records do not follow "
                           "the dataset's column map")

    def cell(self, node: Node) -> Any:
        """The column (or a top-level struct's field): one entry per row."""
        pa = _pa()
        if node.kind == "value":
            assert node.leaf is not None
            if node.leaf.encoding == NOTHING:
                return pa.nulls(self.rows, storage_type(node.arrow_type))
            flat, lengths, present = self.values(node)
            if node.leaf.encoding != RAW and (lengths > 1).any():
                raise self.too_many(node, lengths)
            return _taken(flat, present)
        if node.kind == "struct":
            items = [self.cell(item) for item in node.items]
            marks = self.marked(node)
            return pa.StructArray.from_arrays(
                items, names=list(node.names),
                mask=None if marks is None else pa.array(marks))
        flat, counts = self.elements(node.items[0])
        if node.size is not None:
            present = counts > 0
            per_row = counts[present]
            if (per_row != node.size).any():
                raise self.miscounted(node, counts)
            return _taken(pa.FixedSizeListArray.from_arrays(flat, node.size), present)
        offsets = np.zeros(self.rows + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        marks = self.marked(node)
        return pa.LargeListArray.from_arrays(
            pa.array(offsets), flat, mask=None if marks is None else pa.array(marks))

    def miscounted(self, node: Node, counts: np.ndarray) -> DecodeError:
        row = int(np.argmax((counts % (node.size or 1)) != 0) if node.size else 0)
        return DecodeError(f"column place {node.place!r} of row {row}: {int(counts[row])} "
                           f"values for lists of {node.size}: the records do not follow the "
                           "dataset's column map")

    def elements(self, node: Node) -> tuple[Any, np.ndarray]:
        """The elements at ``node`` of every row's lists, flat, and how many each row has."""
        pa = _pa()
        if node.kind == "value":
            flat, counts, _ = self.values(node)
            return flat, counts
        if node.kind == "struct":
            parts = [self.elements(item) for item in node.items]
            counts = parts[0][1]
            if any(not np.array_equal(c, counts) for _, c in parts[1:]):
                raise DecodeError(f"the fields of {node.place!r} hold different numbers of "
                                  "values in a row: the records do not follow the dataset's "
                                  "column map")
            return pa.StructArray.from_arrays([p[0] for p in parts],
                                              names=list(node.names)), counts
        flat, counts = self.elements(node.items[0])
        if node.size is not None:
            if (counts % node.size).any():
                raise self.miscounted(node, counts)
            return pa.FixedSizeListArray.from_arrays(flat, node.size), counts // node.size
        assert node.lengths is not None
        found = self.ragged(node.lengths)
        lengths = np.asarray(found.values, np.int64)
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if int(offsets[-1]) != len(flat) or (lengths < 0).any():
            raise DecodeError(f"feature {node.lengths!r}: its lengths add up to "
                              f"{int(offsets[-1])}, its items hold {len(flat)}: the records "
                              "do not follow the dataset's column map")
        return (pa.LargeListArray.from_arrays(pa.array(offsets), flat),
                np.asarray(found.row_lengths, np.int64))


def _taken(flat: Any, present: np.ndarray) -> Any:
    """One entry per row: the next of ``flat`` where ``present``, else null."""
    pa = _pa()
    if present.all():
        return flat
    at = np.cumsum(present) - 1
    return flat.take(pa.array(at, mask=~present))


def arrow_table(schema: Any, nodes: list[Node], decoded: Mapping[str, Ragged],
                rows: int) -> Any:
    """The Arrow record batch the decoded features were written from.

    Args:
        schema: The schema written beside the data (exact types, metadata).
        nodes: Its trees (:func:`~ofindex.encode.arrow_map.plan_schema`).
        decoded: Each feature of :func:`decode_spec`, decoded for ``rows`` records.
        rows: The records decoded.

    Returns:
        A ``pyarrow.RecordBatch`` of ``schema``.

    Raises:
        DecodeError: The records do not follow the column map (counts that do not add up).
    """
    pa = _pa()
    reader = _Reader(decoded, rows)
    arrays = [_finish(reader.cell(node), field.type)
              for node, field in zip(nodes, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


__all__ = ["arrow_table", "decode_spec", "plan_schema"]
