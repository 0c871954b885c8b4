"""Arrow tables and record batches as the columns :func:`~ofindex.encode.encode_columns`
takes, checked before anything is encoded.

Numbers without nulls become numpy arrays (fixed-size lists: ``(batch, size)``), binary and
string columns without nulls :class:`BinaryColumn` views of their Arrow buffers (the batch
encoder copies each value once, into its record), lists of numbers rows of numpy arrays,
other columns lists of values. A null cell (a row's value) leaves the feature out of that
record; a null element inside a list is resolved by the null policy first
(:mod:`ofindex.encode.nulls`: refused by default, naming the column and the row). A column
no record can hold (structs, maps, lists of lists, dates …) is an :class:`EncodeError`
naming it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ofindex.encode.nulls import NullPolicy
from ofindex.errors import EncodeError


def _pyarrow() -> Any:
    import pyarrow

    return pyarrow


def _numeric(arrow_type: Any) -> bool:
    pa = _pyarrow()
    return bool(pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type)
                or pa.types.is_boolean(arrow_type))


def _texts(arrow_type: Any) -> bool:
    pa = _pyarrow()
    return bool(pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type)
                or pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
                or pa.types.is_fixed_size_binary(arrow_type))


def _list_like(arrow_type: Any) -> bool:
    pa = _pyarrow()
    return bool(pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)
                or pa.types.is_fixed_size_list(arrow_type))


def check_arrow_type(name: str, arrow_type: Any) -> None:
    """Refuse a column type no record can hold.

    Raises:
        EncodeError: Naming the column and its type.
    """
    if _numeric(arrow_type) or _texts(arrow_type):
        return
    if _list_like(arrow_type) and (_numeric(arrow_type.value_type)
                                   or _texts(arrow_type.value_type)):
        return
    raise EncodeError(f"column {name!r} of Arrow type {arrow_type} cannot be represented: a "
                      "feature holds one list of bytes, floats or integers (flatten structs "
                      "and nested lists into columns of their own, or cast dates to int64)")


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


def _binary_column(column: Any) -> BinaryColumn:
    pa = _pyarrow()
    large = pa.types.is_large_binary(column.type) or pa.types.is_large_string(column.type)
    _, offsets, data = column.buffers()
    bounds = np.frombuffer(offsets, dtype=np.int64 if large else np.int32)[
        column.offset:column.offset + len(column) + 1].astype(np.int64)
    present = None
    if column.null_count:
        present = column.is_valid().to_numpy(zero_copy_only=False).view(np.uint8)
    return BinaryColumn(bounds, data if data is not None else b"", present)


def _masked_numbers(column: Any) -> np.ma.MaskedArray:
    """A numeric column with nulls as a masked array (nulls masked: null cells)."""
    pa = _pyarrow()
    zero = pa.scalar(False if pa.types.is_boolean(column.type) else 0, column.type)
    data = column.fill_null(zero).to_numpy(zero_copy_only=False)
    return np.ma.MaskedArray(data, mask=column.is_null().to_numpy(zero_copy_only=False))


def _column(name: str, chunked: Any, nulls: NullPolicy, first: int) -> Any:
    pa = _pyarrow()
    column = chunked.combine_chunks() if isinstance(chunked, pa.ChunkedArray) else chunked
    if _list_like(column.type):
        column = nulls.arrow_list(column, name, first)
    arrow_type = column.type
    if _texts(arrow_type) and not pa.types.is_fixed_size_binary(arrow_type):
        return _binary_column(column)
    if column.null_count == 0 and _numeric(arrow_type):
        return column.to_numpy(zero_copy_only=False)
    if _numeric(arrow_type):
        return _masked_numbers(column)
    if (column.null_count == 0 and pa.types.is_fixed_size_list(arrow_type)
            and _numeric(arrow_type.value_type) and column.values.null_count == 0):
        flat = column.flatten().to_numpy(zero_copy_only=False)
        return flat.reshape(len(column), arrow_type.list_size)
    if _list_like(arrow_type) and _numeric(arrow_type.value_type):
        return [None if row is None else np.asarray(row, dtype=_numpy_of(arrow_type.value_type))
                for row in column.to_pylist()]
    if _list_like(arrow_type):  # texts: an empty row is still a bytes list
        return [_EMPTY_BYTES if row == [] else row for row in column.to_pylist()]
    return column.to_pylist()


#: An empty list of a text column (an empty Python list has no type).
_EMPTY_BYTES = np.empty(0, "S1")


def _numpy_of(arrow_type: Any) -> Any:
    return arrow_type.to_pandas_dtype()


def arrow_columns(arrow_data: Any, nulls: NullPolicy | None = None,
                  first: int = 0) -> dict[str, Any]:
    """``{name: column}`` of an Arrow ``Table`` or ``RecordBatch``, or of the rows a Hugging
    Face ``datasets.Dataset`` yields.

    Args:
        arrow_data: The table.
        nulls: What a null element inside a list becomes (default: refused).
        first: The number of the table's first row, for messages.

    Returns:
        The columns, as :func:`~ofindex.encode.encode_columns` takes them.

    Raises:
        EncodeError: ``table`` is not a mapping or an Arrow table, or one of its columns
            cannot be represented (checked for every column first).
    """
    if hasattr(arrow_data, "features") and hasattr(arrow_data, "with_format"):
        # a Hugging Face dataset: the rows it yields (through its indices mapping, which
        # .filter, .select, .shuffle and train_test_split make), not its parent's whole table
        arrow_data = arrow_data.with_format("arrow")[:]
    names = getattr(arrow_data, "column_names", None)
    schema = getattr(arrow_data, "schema", None)
    if names is None or schema is None:
        raise EncodeError(f"columns are a mapping {{name: column}} or an Arrow table, not "
                          f"{type(arrow_data).__name__}")
    for field in schema:
        check_arrow_type(field.name, field.type)
    policy = nulls or NullPolicy()
    return {name: _column(name, arrow_data.column(name), policy, first) for name in names}
