"""What a column holds: its value type, and the values a query compares with it.

A column holds one scalar per record, of the type its feature is stored as: ``INT64`` (an
Example's ``int64_list``, an OFRecord's ``int64_list`` or ``int32_list``), ``FLOAT32``
(``float_list``), ``FLOAT64`` (OFRecord's ``double_list``) or ``BYTES`` (``bytes_list``;
strings are their UTF-8 bytes). ``NONE`` is the type of a column none of whose records holds
the feature (a shard may lack it altogether). Values are compared as numpy compares them:
a ``FLOAT32`` column compares as float32 (``score=0.1`` matches the float32 nearest 0.1,
as TensorFlow stored it), NaN equals nothing and lies in no range.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from ..errors import ColumnError


class ValueType(enum.IntEnum):
    """The type of a column's values (its code in the file formats)."""

    NONE = 0
    INT64 = 1
    FLOAT32 = 2
    FLOAT64 = 3
    BYTES = 4

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype of an array of these values (``object`` for bytes)."""
        return _DTYPES[self]

    @property
    def width(self) -> int:
        """Bytes per value in a fixed-width array (0 for bytes, which are stored with their
        lengths)."""
        return _WIDTHS[self]

    @property
    def label(self) -> str:
        """How messages name the type."""
        return self.name.lower()


_DTYPES: dict[ValueType, np.dtype[Any]] = {
    ValueType.NONE: np.dtype(np.int64), ValueType.INT64: np.dtype("<i8"),
    ValueType.FLOAT32: np.dtype("<f4"), ValueType.FLOAT64: np.dtype("<f8"),
    ValueType.BYTES: np.dtype(object),
}
_WIDTHS = {ValueType.NONE: 8, ValueType.INT64: 8, ValueType.FLOAT32: 4, ValueType.FLOAT64: 8,
           ValueType.BYTES: 0}


def joined_type(types: list[ValueType], column: str, names: list[str]) -> ValueType:
    """The type of a column over shards whose columns have ``types`` (``NONE`` joins any).

    Args:
        types: Each shard's column type.
        column: The column, for messages.
        names: Each shard's name, for messages.

    Returns:
        The one type other than ``NONE`` (``NONE`` when every shard lacks the feature).

    Raises:
        ColumnError: Two shards store the feature as different types.
    """
    found: ValueType = ValueType.NONE
    first = ""
    for vtype, name in zip(types, names, strict=True):
        if vtype is ValueType.NONE:
            continue
        if found is ValueType.NONE:
            found, first = vtype, name
        elif vtype is not found:
            raise ColumnError(
                f"column {column!r}: {first} stores it as {found.label} and {name} as "
                f"{vtype.label}; a column has one type: rebuild one of them, or leave the "
                "column out")
    return found


def query_value(vtype: ValueType, value: object, column: str) -> Any:
    """A condition's value as the column's type compares it.

    Args:
        vtype: The column's type.
        value: What the caller gave: a number for numeric columns, ``bytes`` or ``str`` for
            bytes columns.
        column: The column, for messages.

    Returns:
        A numpy scalar of the column's dtype, or ``bytes``.

    Raises:
        ColumnError: ``value`` is of a type the column cannot compare with (a string for a
            number column, a fraction for an int64 column, a bool).
    """
    if isinstance(value, (bool, np.bool_)):
        raise ColumnError(f"column {column!r}: {value!r} is a bool; give a number "
                          f"({vtype.label})")
    if vtype is ValueType.BYTES:
        if isinstance(value, str):
            return value.encode("utf-8")
        if isinstance(value, (bytes, bytearray, memoryview, np.bytes_)):
            return bytes(value)
        raise ColumnError(f"column {column!r} holds bytes; give bytes or str, not "
                          f"{type(value).__name__} {value!r}")
    if not isinstance(value, (int, float, np.integer, np.floating)):
        raise ColumnError(f"column {column!r} holds {vtype.label} numbers; give a number, not "
                          f"{type(value).__name__} {value!r}")
    if vtype is ValueType.INT64:
        if isinstance(value, (float, np.floating)):
            if not float(value).is_integer():
                raise ColumnError(f"column {column!r} holds int64 numbers; {value!r} is "
                                  "not a whole number")
            value = int(value)
        if not -(1 << 63) <= int(value) < (1 << 63):
            raise ColumnError(f"column {column!r} holds int64 numbers; {value!r} is out of "
                              "their range")
        return np.int64(int(value))
    return vtype.dtype.type(value)


def key_bytes(vtype: ValueType, value: Any) -> bytes:
    """The bytes a value is hashed by (:func:`stable_fractions`): a type byte, then the value
    (int64 and floats little-endian; floats widened to float64, ``-0.0`` as ``0.0``)."""
    if vtype is ValueType.BYTES:
        return b"\x04" + bytes(value)
    if vtype is ValueType.INT64:
        return b"\x01" + int(value).to_bytes(8, "little", signed=True)
    number = float(value) + 0.0  # -0.0 + 0.0 is 0.0: one key for the values that compare equal
    return b"\x03" + bytes(np.float64(number).tobytes())
