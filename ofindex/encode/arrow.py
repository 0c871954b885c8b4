"""Arrow tables and record batches as the columns :func:`~ofindex.encode.encode_columns`
takes, by the mapping of :mod:`ofindex.encode.arrow_map` (every type it names is written;
the others are an :class:`EncodeError` naming the column, before anything is encoded).

Numbers become numpy arrays of the type they are stored as, binary and string columns
:class:`BinaryColumn` views of their Arrow buffers (the batch encoder copies each value once,
into its record), lists :class:`RaggedColumn` s (their values flat, with each row's bounds:
no Python object per row or value), structs one column per field. A null cell leaves the
features of its place out of that record (a list or struct also writes its ``/null`` mark);
a null element inside a list is resolved by the null policy first (:mod:`ofindex.encode.
nulls`: refused by default, naming the column, the row and the element).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ofindex.encode.arrow_map import (
    BITS,
    BOOL,
    COUNT,
    EXACT,
    NOTHING,
    RAW,
    TEXT,
    WIDENED,
    Leaf,
    Node,
    plan_schema,
)
from ofindex.encode.kinds import BYTES, NUMPY_TYPES
from ofindex.encode.nulls import DROP, FILL, NullPolicy
from ofindex.errors import EncodeError


def _pyarrow() -> Any:
    import pyarrow

    return pyarrow


@dataclasses.dataclass(frozen=True)
class BinaryColumn:
    """An Arrow binary or string column, not copied: row ``r`` holds
    ``values[bounds[r]:bounds[r + 1]]`` (a string's UTF-8 bytes).

    Attributes:
        bounds: ``rows + 1`` int64 offsets into ``values``.
        values: The column's data buffer.
        present: One uint8 per row, 0 for a null (the feature left out of that row), or
            ``None``: no nulls.
    """

    bounds: np.ndarray
    values: Any
    present: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def __getitem__(self, row: int) -> bytes | None:
        if self.present is not None and not self.present[row]:
            return None
        return bytes(memoryview(self.values)[int(self.bounds[row]):int(self.bounds[row + 1])])


@dataclasses.dataclass(frozen=True)
class RaggedColumn:
    """Rows of any number of values: row ``r`` holds ``values[offsets[r]:offsets[r + 1]]``.

    Attributes:
        offsets: ``rows + 1`` int64 offsets into ``values``.
        values: A 1-D numpy array of the type the values are stored as, or a
            :class:`BinaryColumn` without nulls (bytes values).
        present: One uint8 per row, 0 for a null cell (the feature left out of that row),
            or ``None``: no nulls.
    """

    offsets: np.ndarray
    values: np.ndarray | BinaryColumn
    present: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, row: int) -> np.ndarray | list[bytes] | None:
        if self.present is not None and not self.present[row]:
            return None
        lo, hi = int(self.offsets[row]), int(self.offsets[row + 1])
        if isinstance(self.values, BinaryColumn):
            return [self.values[k] or b"" for k in range(lo, hi)]
        return self.values[lo:hi]


@dataclasses.dataclass(frozen=True)
class DictionaryColumn:
    """A dictionary (categorical) Arrow column, not decoded: row ``r`` holds
    ``values[indices[r]]``.

    Attributes:
        indices: One int64 per row into ``values`` (a null row's: 0).
        values: The dictionary's values as a column of their own (as
            :func:`arrow_columns` gives a column of those values).
        present: One uint8 per row, 0 for a null (the feature left out of that row), or
            ``None``: no nulls.
        decode: Makes the column decoded, a value per row (for a dictionary whose values
            cannot all be written as asked: the row that holds one is then named).
    """

    indices: np.ndarray
    values: Any
    present: np.ndarray | None
    decode: Callable[[], Any]

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, row: int) -> Any:
        if self.present is not None and not self.present[row]:
            return None
        return self.values[int(self.indices[row])]


def _binary_column(column: Any, present: np.ndarray | None = None) -> BinaryColumn:
    pa = _pyarrow()
    if not (pa.types.is_binary(column.type) or pa.types.is_string(column.type)
            or pa.types.is_large_binary(column.type) or pa.types.is_large_string(column.type)):
        column = column.cast(pa.large_binary())  # views, fixed-size binary
    large = pa.types.is_large_binary(column.type) or pa.types.is_large_string(column.type)
    _, offsets, data = column.buffers()
    bounds = np.frombuffer(offsets, dtype=np.int64 if large else np.int32)[
        column.offset:column.offset + len(column) + 1].astype(np.int64)
    if present is None and column.null_count:
        present = _valid(column)
    return BinaryColumn(bounds, data if data is not None else b"", present)


def _valid(column: Any) -> np.ndarray:
    """One uint8 per entry of an Arrow array: 1 where it is not null."""
    valid: np.ndarray = column.is_valid().to_numpy(zero_copy_only=False)
    return valid.view(np.uint8)


def _plain(array: Any, keep_dictionary: bool = False) -> Any:
    """An array as its stored type: chunks combined, an extension array's storage, a
    dictionary's values (decoded, unless ``keep_dictionary``)."""
    pa = _pyarrow()
    if isinstance(array, pa.ChunkedArray):  # one chunk as it is (combining copies it)
        array = array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
    while True:
        if isinstance(array, pa.ExtensionArray):
            array = array.storage
        elif isinstance(array, pa.DictionaryArray) and not keep_dictionary:
            array = array.dictionary_decode()
        elif isinstance(array, pa.MapArray):
            array = _map_entries(array)
        else:
            return array


def _map_entries(array: Any) -> Any:
    """A map array as the list of its ``struct<key, value>`` entries (offsets from 0: Arrow
    takes no null mask with offsets that do not start there)."""
    pa = _pyarrow()
    offsets = array.offsets.to_numpy()
    start, stop = int(offsets[0]), int(offsets[-1])
    entries = pa.StructArray.from_arrays(
        [array.keys.slice(start, stop - start), array.items.slice(start, stop - start)],
        fields=[array.type.key_field, array.type.item_field])
    return pa.ListArray.from_arrays(pa.array(offsets - start, pa.int32()), entries,
                                    mask=array.is_null() if array.null_count else None)


def _numbers(leaf: Leaf, array: Any) -> np.ndarray:
    """A value array's numbers as numpy, in the type its list holds (null entries: 0)."""
    pa = _pyarrow()
    if array.null_count:
        zero = False if pa.types.is_boolean(array.type) else 0
        if leaf.encoding == COUNT:
            array = array.view(pa.int64() if array.type.bit_width == 64 else pa.int32())
        array = array.fill_null(pa.scalar(zero, array.type))
    if leaf.encoding == COUNT:
        width = array.type.bit_width
        array = array.view(pa.int64() if width == 64 else pa.int32())
    if leaf.encoding == WIDENED:
        array = array.cast(pa.float32())
    values: np.ndarray = array.to_numpy(zero_copy_only=False)
    if leaf.encoding == BITS:
        return values.view(np.int64)
    if leaf.encoding == BOOL or leaf.encoding == COUNT or values.dtype.kind in "iu":
        return values.astype(NUMPY_TYPES[leaf.stored], copy=False)
    return values


def _raw_doubles(array: Any, offsets: np.ndarray, present: np.ndarray | None) -> BinaryColumn:
    """float64 values as one bytes value per row: its values' little-endian doubles."""
    values = _numbers(Leaf(BYTES, RAW), array).astype("<f8", copy=False)
    return BinaryColumn(offsets * 8, np.ascontiguousarray(values).view(np.uint8), present)


def _dictionary_cells(leaf: Leaf, array: Any) -> Any:
    """A dictionary array's column: a :class:`DictionaryColumn` (its dictionary written
    once, each row choosing an entry), or its values decoded where the dictionary has more
    entries than the batch has rows (writing them would cost more than the rows do)."""
    dictionary = _plain(array.dictionary)
    if len(dictionary) == 0 or len(dictionary) > len(array):
        return _cell_values(leaf, array.dictionary_decode())
    indices = array.indices
    if indices.null_count:
        indices = indices.fill_null(0)
    index = indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return DictionaryColumn(index, _cell_values(leaf, dictionary),
                            _valid(array) if array.null_count else None,
                            lambda: _cell_values(leaf, array.dictionary_decode()))


def _cell_values(leaf: Leaf, array: Any) -> Any:
    """A column of one value per row (a null: the feature left out of that row)."""
    pa = _pyarrow()
    if isinstance(array, pa.DictionaryArray):
        return _dictionary_cells(leaf, array)
    present = _valid(array) if array.null_count else None
    if leaf.encoding == RAW:
        return _raw_doubles(array, np.arange(len(array) + 1, dtype=np.int64), present)
    if leaf.stored == BYTES:
        if leaf.encoding == TEXT:
            array = array.cast(pa.string())
        return _binary_column(array, present)
    values = _numbers(leaf, array)
    if present is None:
        return values
    return np.ma.MaskedArray(values, mask=present == 0)


def _ragged_values(leaf: Leaf, array: Any, offsets: np.ndarray,
                   present: np.ndarray | None) -> Any:
    """The values of the lists of every row (no nulls among them), row ``r`` holding
    ``array[offsets[r]:offsets[r + 1]]``."""
    pa = _pyarrow()
    if leaf.encoding == RAW:
        return _raw_doubles(array, offsets, present)
    if leaf.stored == BYTES:
        if leaf.encoding == TEXT:
            array = array.cast(pa.string())
        return RaggedColumn(offsets, _binary_column(array), present)
    return RaggedColumn(offsets, _numbers(leaf, array), present)


def _list_ends(array: Any, size: int | None) -> np.ndarray:
    """Where each list ends among the list array's values (``len + 1`` int64, from 0; a null
    list holds none, whatever its offsets span): from the offsets themselves (Arrow's
    ``list_value_length``, its nulls filled and summed, cost 5x as much: 9.7 ms against
    1.9 ms for the two list columns of 500k rows)."""
    pa = _pyarrow()
    if size is not None or not (pa.types.is_list(array.type)
                                or pa.types.is_large_list(array.type)):
        lengths = _lengths(array, size)
        ends = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=ends[1:])
        return ends
    offsets: np.ndarray = array.offsets.to_numpy().astype(np.int64)
    if not array.null_count:
        offsets -= offsets[0]
        return offsets
    lengths = np.diff(offsets)
    lengths[_valid(array) == 0] = 0
    ends = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=ends[1:])
    return ends


def _lengths(array: Any, size: int | None) -> np.ndarray:
    """Each list's length (a null list: 0), int64."""
    import pyarrow.compute as pc

    if size is not None:
        fixed = np.full(len(array), size, np.int64)
        if array.null_count:
            fixed[_valid(array) == 0] = 0
        return fixed
    lengths: np.ndarray = pc.list_value_length(array).fill_null(0).to_numpy(
        zero_copy_only=False)
    return lengths.astype(np.int64, copy=False)


class _ColumnWriter:
    """The columns of one Arrow column of a batch, by its :class:`Node` tree."""

    def __init__(self, column: str, policy: NullPolicy, first: int) -> None:
        self.column, self.policy, self.first = column, policy, first
        self.out: dict[str, Any] = {}

    def cell(self, node: Node, array: Any) -> None:
        """A value of each row (or of each row's struct)."""
        array = _plain(array, keep_dictionary=node.kind == "value")
        if node.marker is not None and array.null_count:
            nulls = array.is_null().to_numpy(zero_copy_only=False)
            self.out[node.marker] = np.ma.MaskedArray(np.ones(len(array), np.int64),
                                                      mask=~nulls)
        if node.kind == "struct":
            for item, child in zip(node.items, array.flatten(), strict=True):
                self.cell(item, child)
        elif node.kind == "list":
            present = _valid(array) if array.null_count else None
            self.elements(node, array, np.arange(len(array) + 1, dtype=np.int64), present,
                          cell=True)
        elif node.leaf is not None and node.leaf.encoding != NOTHING:
            self.out[node.place] = _cell_values(node.leaf, array)

    def elements(self, node: Node, array: Any, rows_at: np.ndarray,
                 present: np.ndarray | None, *, cell: bool = False) -> None:
        """The elements of every row's lists at ``node`` (their null elements resolved):
        row ``r``'s are ``array[rows_at[r]:rows_at[r + 1]]`` (``cell``: ``rows_at`` is every
        position, one list a row)."""
        array = _plain(array)
        if node.kind == "list":
            ends = _list_ends(array, node.size)
            items = _plain(array.flatten())
            if items.null_count:  # before the lengths are written: a drop shortens them
                items, kept = self.null_elements(node.items[0], items,
                                                 ends if cell else ends[rows_at], True)
                if kept is not None:
                    ends = kept[ends]
                    if node.size is not None:
                        raise self.shortened(node, np.diff(ends), ends, rows_at)
            if node.lengths is not None:
                self.out[node.lengths] = RaggedColumn(rows_at, np.diff(ends), present)
            self.elements(node.items[0], items, ends if cell else ends[rows_at], present)
        elif node.kind == "struct":
            for item, field in zip(node.items, array.flatten(), strict=True):
                field = _plain(field)
                if field.null_count:
                    field, _ = self.null_elements(item, field, rows_at, False)
                self.elements(item, field, rows_at, present)
        elif node.leaf is not None:
            self.out[node.place] = _ragged_values(node.leaf, array, rows_at, present)

    def shortened(self, node: Node, lengths: np.ndarray, ends: np.ndarray,
                  rows_at: np.ndarray) -> EncodeError:
        """The error for a drop that would shorten a fixed-size list."""
        element = int(np.argmax(lengths != node.size))
        row = int(np.searchsorted(rows_at, element, side="right")) - 1
        return EncodeError(
            f"column {self.column!r} of record {self.first + row}: a null element of a list "
            f"of fixed size {node.size} ({node.arrow_type}); leaving it out would change the "
            "size its type gives: fill it (nulls=('fill', value)) instead")

    def null_elements(self, node: Node, array: Any, rows_at: np.ndarray,
                      droppable: bool) -> tuple[Any, np.ndarray | None]:
        """Null elements inside lists resolved by the policy: filled (values), dropped (with
        ``kept[k]``, the elements kept before position ``k``), or refused naming the record
        and the element (``rows_at``: each row's first position in ``array``)."""
        pa = _pyarrow()
        valid = _valid(array).astype(bool)
        at = int(np.argmin(valid))
        row = int(np.searchsorted(rows_at, at, side="right")) - 1
        record, element = self.first + row, at - int(rows_at[row])
        action = self.policy.action
        if node.kind == "value" and action == FILL:
            fill = self.policy.arrow_fill(array.type, self.column, record)
            return array.fill_null(fill), None
        if action == DROP and droppable:
            kept = np.zeros(len(valid) + 1, np.int64)
            np.cumsum(valid, out=kept[1:])
            return array.filter(pa.array(valid)), kept
        if action == DROP:
            raise EncodeError(
                f"column {self.column!r} of record {record}: {node.place!r} of element "
                f"{element} of its list is null; one field of a struct cannot be left out "
                "alone (its siblings would lose their places): fill it (nulls=('fill', "
                "value)) or give it a value")
        if node.kind == "value":
            raise self.policy.refused(self.column, record, element)
        raise self.policy.nested(self.column, record, element, node.kind)


def _columns_of(arrow_data: Any) -> tuple[list[str], Any]:
    if hasattr(arrow_data, "features") and hasattr(arrow_data, "with_format"):
        # a Hugging Face dataset: the rows it yields (through its indices mapping, which
        # .filter, .select, .shuffle and train_test_split make), not its parent's whole table
        arrow_data = arrow_data.with_format("arrow")[:]
    names = getattr(arrow_data, "column_names", None)
    if names is None or getattr(arrow_data, "schema", None) is None:
        raise EncodeError(f"columns are a mapping {{name: column}} or an Arrow table, not "
                          f"{type(arrow_data).__name__}")
    return list(names), arrow_data


#: The last schema planned for each (kind, float64), and its nodes: a source's batches share
#: one schema, which compares equal in 0.1 µs where planning it again took 100 µs a batch
#: (a fifth of the Python time of a 1,024-row batch of five columns).
_LAST_PLANS: dict[tuple[str, str], tuple[Any, list[Node]]] = {}


def _schema_nodes(schema: Any, kind: str, float64: str) -> list[Node]:
    """:func:`~ofindex.encode.arrow_map.plan_schema` of ``schema``, planned again only when
    it differs from the last one planned (its nodes are frozen: shared, never changed)."""
    last = _LAST_PLANS.get((kind, float64))
    if last is not None and last[0].equals(schema):
        return last[1]
    nodes = plan_schema(schema, kind, float64)
    _LAST_PLANS[(kind, float64)] = (schema, nodes)
    return nodes


def arrow_schema(arrow_data: Any) -> Any:
    """The Arrow schema of a table, record batch or Hugging Face dataset (its rows').

    Raises:
        EncodeError: ``arrow_data`` is none of them.
    """
    if hasattr(arrow_data, "features") and hasattr(arrow_data, "with_format"):
        return arrow_data.data.schema
    schema = getattr(arrow_data, "schema", None)
    if schema is None:
        raise EncodeError(f"columns are a mapping {{name: column}} or an Arrow table, not "
                          f"{type(arrow_data).__name__}")
    return schema


def check_arrow_schema(schema: Any, kind: str = "example", float64: str = EXACT) -> None:
    """Refuse a schema with a column no record can hold, or two columns giving one feature.

    Raises:
        EncodeError: Naming the column and its type.
    """
    plan_schema(schema, kind, float64)


def arrow_columns(arrow_data: Any, nulls: NullPolicy | None = None, first: int = 0,
                  kind: str = "example", float64: str = EXACT) -> dict[str, Any]:
    """``{feature: column}`` of an Arrow ``Table`` or ``RecordBatch``, or of the rows a Hugging
    Face ``datasets.Dataset`` yields, by :mod:`ofindex.encode.arrow_map`.

    Args:
        arrow_data: The table.
        nulls: What a null element inside a list becomes (default: refused).
        first: The number of the table's first row, for messages.
        kind: ``"example"`` or ``"ofrecord"`` (the records the columns are for).
        float64: ``"exact"`` or ``"float32"`` (an Example's float64 values, see
            :func:`~ofindex.encode.arrow_map.leaf_of`).

    Returns:
        The columns, as :func:`~ofindex.encode.encode_columns` takes them: one or more per
        Arrow column, in the schema's order.

    Raises:
        EncodeError: ``arrow_data`` is not a mapping or an Arrow table, one of its columns
            cannot be represented (checked for every column first), or a null element is
            refused.
    """
    names, arrow_data = _columns_of(arrow_data)
    nodes = _schema_nodes(arrow_data.schema, kind, float64)
    policy = nulls or NullPolicy()
    out: dict[str, Any] = {}
    for name, node in zip(names, nodes, strict=True):
        writer = _ColumnWriter(name, policy, first)
        writer.cell(node, arrow_data.column(name))
        out.update(writer.out)
    return out


__all__ = ["BinaryColumn", "DictionaryColumn", "RaggedColumn", "arrow_columns", "arrow_schema",
           "check_arrow_schema"]
