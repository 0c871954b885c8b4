"""Spark's pushed filters (Spark 4.1 ``DataSourceReader.pushFilters``) as column conditions
(what ``ds.positions`` takes), for the filters the columns answer exactly as Spark would.

Spark hands the conjuncts of a query's filter that reference one column each (``a = 1 and
(b = 2 or c = 3)`` hands ``a = 1``; an ``or`` is never handed). A filter is taken when its
column is a scalar of the DataFrame's schema whose column was built (``build_index(columns=
[...])``) with the type Spark reads it as (``bigint``/``int``: int64, ``float``: float32,
``double``: float64, ``binary``/``string``: bytes), and the condition gives the records
Spark's own evaluation keeps:

* ``a = v``, ``a <=> v`` (``v`` not null), ``a in (…)`` (nulls in the list match nothing),
  ``a < v``, ``a <= v``, ``a > v``, ``a >= v`` (whole numbers and bytes as ranges: ``a > v``
  is ``(v + 1, None)``, ``(v + b"\\0", None)``), ``a is null``, ``a is not null``,
  ``not (a is null)``;
* on a float column, not ``a > v``, ``a >= v`` nor ``a is not null`` (Spark orders NaN
  above every number and counts it as a value; a column's range holds no NaN), nor any
  comparison with NaN or an infinity;
* not ``not (…)`` of anything else, string patterns (``like``), a value of another type than
  the column's (Spark then compares in a wider type).

Every other filter is returned to Spark, which applies it to the records read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
)

#: The column type (``ds.column_type``) a Spark type reads exactly.
_COLUMN_TYPES: dict[type[DataType], str] = {
    LongType: "int64", IntegerType: "int64", FloatType: "float32", DoubleType: "float64",
    BinaryType: "bytes", StringType: "bytes"}
_INT64 = (-(1 << 63), (1 << 63) - 1)


def column_type_of(kind: DataType) -> str | None:
    """The column type a Spark scalar type reads exactly (``None``: none)."""
    return _COLUMN_TYPES.get(type(kind))


def _value(value: object, ctype: str) -> object | None:
    """``value`` as a column of ``ctype`` compares it exactly as Spark does, or ``None``."""
    if isinstance(value, (bool, np.bool_)) or value is None:
        return None
    if ctype == "bytes":
        if isinstance(value, str):
            return value.encode("utf-8")
        return bytes(value) if isinstance(value, (bytes, bytearray)) else None
    if ctype == "int64":
        ok = isinstance(value, (int, np.integer)) and _INT64[0] <= int(value) <= _INT64[1]
        return int(value) if ok else None  # type: ignore[call-overload]
    if not isinstance(value, (int, float, np.integer, np.floating)) or not math.isfinite(value):
        return None
    exact = np.float32(value) if ctype == "float32" else np.float64(value)
    return float(exact) if float(exact) == float(value) else None


def _after(value: object, ctype: str) -> object | None:
    """The least value of ``ctype`` above ``value`` (``None``: none)."""
    if ctype == "bytes":
        assert isinstance(value, bytes)
        return value + b"\0"
    if ctype == "int64":
        assert isinstance(value, int)
        return value + 1 if value < _INT64[1] else None
    dtype = np.float32 if ctype == "float32" else np.float64
    return float(np.nextafter(dtype(value), dtype(np.inf)))  # type: ignore[arg-type]


def _attribute(spark_filter: Filter) -> str | None:
    path: tuple[str, ...] = getattr(spark_filter, "attribute", ())
    return path[0] if len(path) == 1 else None


def _comparison(spark_filter: Filter, ctype: str) -> object | None:
    """The condition of a comparison with a value (``None``: not exact)."""
    if isinstance(spark_filter, In):
        values = [_value(v, ctype) for v in spark_filter.value if v is not None]
        return None if any(v is None for v in values) else values
    value = _value(getattr(spark_filter, "value", None), ctype)
    if value is None:
        return None
    if isinstance(spark_filter, (EqualTo, EqualNullSafe)):
        return value
    if isinstance(spark_filter, LessThan):
        return (None, value)
    if isinstance(spark_filter, LessThanOrEqual):
        after = _after(value, ctype)
        return None if after is None else (None, after)
    if ctype in ("float32", "float64"):  # Spark orders NaN above every number
        return None
    if isinstance(spark_filter, GreaterThanOrEqual):
        return (value, None)
    after = _after(value, ctype)  # GreaterThan
    return None if after is None else (after, None)


_COMPARISONS = (EqualTo, EqualNullSafe, In, LessThan, LessThanOrEqual, GreaterThan,
                GreaterThanOrEqual)


def condition_of(spark_filter: Filter, fields: Mapping[str, DataType],
                 column_type: Callable[[str], str | None]) -> tuple[str, object] | None:
    """The column condition giving exactly the records ``spark_filter`` keeps.

    Args:
        spark_filter: A filter Spark pushed.
        fields: The DataFrame's scalar columns and their Spark types.
        column_type: The type of a built column (``ds.column_type``), ``None`` when the
            dataset has no such column.

    Returns:
        ``(column, condition)`` as ``ds.positions(**{column: condition})`` takes it, or
        ``None``: the filter is Spark's to apply.
    """
    if isinstance(spark_filter, Not):
        if not isinstance(spark_filter.child, IsNull):
            return None
        spark_filter = IsNotNull(spark_filter.child.attribute)
    name = _attribute(spark_filter)
    if name is None or name not in fields:
        return None
    ctype = column_type_of(fields[name])
    if ctype is None or column_type(name) != ctype:
        return None
    if isinstance(spark_filter, IsNull) or (isinstance(spark_filter, EqualNullSafe)
                                            and spark_filter.value is None):
        return name, None
    if isinstance(spark_filter, IsNotNull):  # a float column's range holds no NaN
        return None if ctype in ("float32", "float64") else (name, (None, None))
    if isinstance(spark_filter, _COMPARISONS):
        condition = _comparison(spark_filter, ctype)
        return None if condition is None else (name, condition)
    return None
