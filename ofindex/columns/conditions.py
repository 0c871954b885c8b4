"""The conditions of a query (``ds.where(label=3, score=(0.5, None))``): what each keyword
means, and which values and pages it matches.

One keyword per column, one of:

* a value (``label=3``, ``image_id=b"x"`` or ``"x"``): records whose value equals it;
* a list, set or 1-d array of values (``label=[1, 2]``): records whose value is one of them;
* a pair ``(low, high)`` (a ``tuple``): records with ``low <= value < high``, either end
  ``None`` for no bound (``score=(0.5, None)``: 0.5 and above);
* ``None``, alone or among the values of a list: records without a value (null).

Several keywords: records that meet all of them. Values compare as numpy compares the
column's type (see :mod:`.value_types`): NaN matches nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ColumnError
from .column_file import ColumnMeta, stat_bounds
from .packed import PackedBytes
from .value_types import ValueType, query_value


@dataclasses.dataclass(frozen=True)
class Condition:
    """One column's condition, as given (values are typed by :meth:`typed` once the column's
    type is known).

    Attributes:
        column: The column.
        values: The values to equal (a set), or ``None`` for a range.
        low: A range's lower bound (included), or ``None``.
        high: A range's upper bound (excluded), or ``None``.
        nulls: Whether records without a value match.
    """

    column: str
    values: tuple[Any, ...] | None = None
    low: Any = None
    high: Any = None
    nulls: bool = False

    @property
    def is_range(self) -> bool:
        """Whether this is a range (else a set of values)."""
        return self.values is None

    def typed(self, vtype: ValueType) -> Condition:
        """This condition with its values as the column's type compares them.

        Raises:
            ColumnError: A value the column cannot compare with.
        """
        if vtype is ValueType.NONE:
            return self
        column = self.column
        if self.values is not None:
            return dataclasses.replace(self, values=tuple(
                query_value(vtype, v, column) for v in self.values))
        return dataclasses.replace(
            self, low=None if self.low is None else query_value(vtype, self.low, column),
            high=None if self.high is None else query_value(vtype, self.high, column))

    def matches(self, values: np.ndarray | PackedBytes, valid: np.ndarray) -> np.ndarray:
        """Which records match, given their values and validity (the condition typed)."""
        if isinstance(values, PackedBytes):
            found = self._bytes_matches(values)
        elif self.values is not None:
            targets = [v for v in self.values if v == v]  # NaN equals nothing
            if len(targets) == 1:  # one comparison: 4x faster than isin's sort
                found = values == np.array(targets[0], dtype=values.dtype)
            else:
                found = np.isin(values, np.array(targets, dtype=values.dtype)) if targets \
                    else np.zeros(len(valid), dtype=bool)
        else:
            found = np.ones(len(valid), dtype=bool)
            if self.low is not None:
                found &= values >= self.low
            if self.high is not None:
                found &= values < self.high
        return self.with_nulls(found, valid)

    def with_nulls(self, found: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """Which records match, given which of their values match (``found``, whatever it
        says of records without a value) and which records hold one."""
        out: np.ndarray = found & valid
        if self.nulls:
            out |= ~valid
        return out

    def _bytes_matches(self, values: PackedBytes) -> np.ndarray:
        if self.values is not None:
            return values.equal_to(list(self.values))
        found = np.ones(len(values), dtype=bool)
        if self.low is not None:
            found &= values.compare(self.low) >= 0
        if self.high is not None:
            found &= values.compare(self.high) < 0
        return found

    def pages(self, meta: ColumnMeta) -> np.ndarray:
        """The pages of a column sidecar that may hold a matching record (by each page's null
        count and least and greatest values; the condition typed)."""
        directory = meta.directory
        may = np.zeros(len(directory), dtype=bool)
        if self.nulls:
            may |= directory["nulls"] > 0
        if self.values is not None and not self.values:
            return may
        low, high = stat_bounds(meta)
        prefix = meta.header.vtype is ValueType.BYTES

        def key(v: Any) -> Any:  # what a page's least and greatest values compare with
            return int.from_bytes(bytes(v)[:8].ljust(8, b"\0"), "big") if prefix else v

        if self.values is not None:
            for value in self.values:
                may |= (low <= key(value)) & (key(value) <= high)
            return may
        inside = low <= high
        if self.low is not None:
            inside &= high >= key(self.low)
        if self.high is not None:
            inside &= low <= key(self.high)  # (bytes: a prefix equal to high's may hold less)
        return may | inside

    def key_bounds(self) -> list[tuple[Any, Any, bool]]:
        """The key index searches that find the records with a value matching (the condition
        typed): one per value, or the range."""
        if self.values is not None:
            return [(v, v, True) for v in self.values]
        return [(self.low, self.high, False)]


def parse_conditions(conditions: Mapping[str, object]) -> list[Condition]:
    """The conditions of ``where(**conditions)``.

    Raises:
        ColumnError: No condition, or a condition of no form above (a tuple that is not a
            pair, a range with ``None`` inside a list, a nested list).
    """
    if not conditions:
        raise ColumnError("give at least one condition: where(label=3), where(label=[1, 2]) "
                          "or where(score=(0.5, None))")
    return [_one(column, given) for column, given in conditions.items()]


def _one(column: str, given: object) -> Condition:
    if given is None:
        return Condition(column, values=(), nulls=True)
    if isinstance(given, tuple):
        if len(given) != 2:
            raise ColumnError(f"column {column!r}: a tuple is a range (low, high) of two "
                              f"bounds, not {given!r}; give a list for several values")
        return Condition(column, low=given[0], high=given[1])
    if isinstance(given, np.ndarray):
        if given.ndim != 1:
            raise ColumnError(f"column {column!r}: an array of values must be 1-d")
        given = given.tolist()
    if isinstance(given, (list, set, frozenset)):
        items = list(given)
        for item in items:
            if isinstance(item, (list, tuple, set, dict)):
                raise ColumnError(f"column {column!r}: a list holds values, not {item!r}")
        return Condition(column, values=tuple(v for v in items if v is not None),
                         nulls=any(v is None for v in items))
    return Condition(column, values=(given,))


def value_from_text(text: str, vtype: ValueType, column: str) -> Any:
    """One value written on the command line, as the column's type reads it.

    Raises:
        ColumnError: ``text`` is not a value of that type.
    """
    if vtype is ValueType.BYTES:
        return text.encode("utf-8")
    try:
        return int(text) if vtype in (ValueType.INT64, ValueType.NONE) else float(text)
    except ValueError:
        raise ColumnError(f"column {column!r} holds {vtype.label} values, not "
                          f"{text!r}") from None


def condition_from_text(text: str, vtype: ValueType, column: str) -> object:
    """A condition written on the command line (``--where COLUMN=TEXT``), as
    ``where(**{column: ...})`` takes it.

    ``TEXT`` is a value; for a number column also ``a,b,...`` (any of them) or
    ``low:high`` (``low <= value < high``, either end left out for none); empty: records
    without a value. For a bytes column the whole text is one value (its UTF-8 bytes).

    Raises:
        ColumnError: A value that is not of the column's type.
    """
    if text == "":
        return None
    if vtype is ValueType.BYTES:
        return value_from_text(text, vtype, column)
    if ":" in text:
        low, _, high = text.partition(":")
        return (value_from_text(low, vtype, column) if low else None,
                value_from_text(high, vtype, column) if high else None)
    if "," in text:
        return [value_from_text(part, vtype, column) for part in text.split(",")]
    return value_from_text(text, vtype, column)
