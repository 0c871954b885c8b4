"""Scalar features out of serialized records: the values a column stores.

Records are Examples (a TFRecord file; a SequenceExample reads as an Example whose features
are its context, as protobuf itself parses it) or OFRecords. Each feature asked for gives one
value per record, by one rule:

* a record without the feature, or whose feature holds no value (an empty list, or a
  Feature with no list set), has no value: it is *null* (its validity bit is clear);
* a record whose feature holds one value has that value (``int32_list`` widened to int64);
* a record whose feature holds several values is refused (:class:`ofindex.ColumnError`
  naming the file, the record and the count): a column is a scalar per record, and taking
  the first value would file the record under a value it does not only have;
* records storing the feature as different value types are refused too.

The compiled ``locate`` (see ofindex/csrc/examples.c) finds the features of records laid out
as their writers lay them out, straight in the buffer holding them (a memory map or a block
of the scan); records it does not handle (a SequenceExample, an unusual layout, a build
without the compiled module) are walked by :mod:`ofindex.decode`'s careful walker, which
gives what protobuf gives.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..decode._located import SLOTS
from ..decode._plans import loops
from ..decode._values import EXAMPLE_KINDS, OFRECORD_KINDS, list_values
from ..decode._walk import walk_example, walk_ofrecord
from ..decode._wire import WireError
from ..errors import ColumnError, DecodeError, hint
from .packed import PackedBytes
from .value_types import ValueType

#: Per record family: the list kinds (oneof field numbers) ``locate`` is told about, whether
#: the feature map is wrapped in an Example, the value type of each kind, and the careful
#: walker.
_FAMILIES: dict[str, tuple[bytes, bool, dict[int, str], Any]] = {
    "example": (b".b4v", True, EXAMPLE_KINDS, walk_example),
    "ofrecord": (b".b48vv", False, OFRECORD_KINDS, walk_ofrecord),
}
_TYPE_OF = {"bytes": ValueType.BYTES, "float32": ValueType.FLOAT32,
            "float64": ValueType.FLOAT64, "int32": ValueType.INT64, "int64": ValueType.INT64}
# the columns of a row of locate's output (its first five; SLOTS in all: csrc/protowire.h)
_KIND, _COUNT, _START, _END, _VALUE = range(5)


@dataclasses.dataclass
class Extracted:
    """One column's values for a run of records.

    Attributes:
        vtype: Their type (``NONE`` when no record of the run holds the feature).
        values: One value per record: numbers of the type's dtype, or
            :class:`~ofindex.columns.packed.PackedBytes` (0 or ``b""`` for records without a
            value).
        valid: Which records hold a value.
    """

    vtype: ValueType
    values: np.ndarray | PackedBytes
    valid: np.ndarray


def _refuse_several(url: str, record: int, name: str, count: int) -> ColumnError:
    return ColumnError(
        f"{url}: record {record}: feature {name!r} holds {count} values; a column holds one "
        f"value per record (a record without the feature is null): leave {name!r} out of "
        f"{hint('columns=', '--columns')}")


def _refuse_types(url: str, record: int, name: str, got: ValueType,
                  seen: ValueType) -> ColumnError:
    return ColumnError(
        f"{url}: record {record}: feature {name!r} is stored as {got.label}, earlier records "
        f"store it as {seen.label}; a column has one type: leave {name!r} out of "
        f"{hint('columns=', '--columns')}")


class _Rows:
    """What ``locate`` found for one feature: per record, the list's kind, value count,
    value span (relative to the record) and first varint."""

    def __init__(self, rows: np.ndarray) -> None:
        self.kind = rows[:, _KIND]
        self.count = rows[:, _COUNT]
        self.start = rows[:, _START]
        self.end = rows[:, _END]
        self.value = rows[:, _VALUE]


def extract(buffer: Any, starts: np.ndarray, ends: np.ndarray, names: tuple[str, ...],
            family: str, *, url: str, first: int) -> list[Extracted]:
    """The features ``names`` of the records ``buffer[starts[i]:ends[i]]``.

    Args:
        buffer: The bytes holding the records (a memory map, a scan's block, ``bytes``).
        starts: int64 start of each record's payload in ``buffer``.
        ends: int64 end of each record's payload.
        names: The features.
        family: ``"example"`` or ``"ofrecord"``.
        url: The data file, for messages.
        first: The number (in its file) of the first record, for messages.

    Returns:
        One :class:`Extracted` per name, in order.

    Raises:
        ColumnError: A record holds several values of a feature, or records store a feature
            as different types (see the module's rules).
        DecodeError: A record is not a valid Example / OFRecord where a feature is looked
            for (the careful walk's error, naming the record).
    """
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    n = len(starts)
    table, wrapped, kinds, _ = _FAMILIES[family]
    rows = np.zeros((n, len(names), SLOTS), dtype=np.int64)
    rows[:, :, _KIND] = -1
    native = loops()
    if native is not None and n and all(name.isascii() for name in names):
        native.locate([buffer], tuple(name.encode("ascii") for name in names), table, wrapped,
                      rows.reshape(-1), (np.zeros(n, dtype=np.int64), starts, ends))
    careful = np.flatnonzero(rows[:, 0, _KIND] < 0)
    walked = _walk(buffer, starts, ends, careful, names, family, url, first)
    return [_column(buffer, starts, ends, _Rows(rows[:, j]), walked[j], name, kinds, url,
                    first) for j, name in enumerate(names)]


def _walk(buffer: Any, starts: np.ndarray, ends: np.ndarray, careful: np.ndarray,
          names: tuple[str, ...], family: str, url: str, first: int
          ) -> list[dict[int, tuple[str, np.ndarray]]]:
    """The careful walk of the records ``careful``: per name, record -> (value type, values)
    for the records that hold the feature with a list set."""
    _, _, kinds, walker = _FAMILIES[family]
    found: list[dict[int, tuple[str, np.ndarray]]] = [{} for _ in names]
    what = "Example" if family == "example" else "OFRecord"
    for i in careful.tolist():
        payload = bytes(buffer[int(starts[i]):int(ends[i])])
        try:
            located = walker(payload)
            for j, name in enumerate(names):
                loc = located.get(name)
                if loc is not None and loc.kind:
                    vtype = kinds[loc.kind]
                    found[j][i] = (vtype, list_values(payload, loc.regions, vtype, loc.level))
        except WireError as exc:
            raise DecodeError(f"{url}: record {first + i} is not a valid {what} ({exc}); "
                              "its columns cannot be read") from None
    return found


def _column(buffer: Any, starts: np.ndarray, ends: np.ndarray, rows: _Rows,
            walked: dict[int, tuple[str, np.ndarray]], name: str, kinds: dict[int, str],
            url: str, first: int) -> Extracted:
    """One feature's :class:`Extracted` from ``locate``'s rows and the careful walk's
    values."""
    n = len(starts)
    kind = rows.kind.copy()
    count = rows.count.copy()
    for i, (stored, got) in walked.items():  # the careful walk's records, as locate's
        kind[i] = next(k for k, t in kinds.items() if t == stored)
        count[i] = len(got)
    several = np.flatnonzero(count > 1)
    if len(several):
        i = int(several[0])
        raise _refuse_several(url, first + i, name, int(count[i]))
    valid = (kind > 0) & (count == 1)
    vtype = _one_type(kind, valid, kinds, name, url, first)
    if vtype is ValueType.NONE:
        return Extracted(vtype, np.zeros(n, dtype=np.int64), valid)
    fast = valid & (rows.kind > 0)
    if vtype is ValueType.BYTES:
        return Extracted(vtype, _bytes_values(buffer, starts, ends, rows, fast, walked), valid)
    values = _numbers(buffer, starts, rows, fast, kind, vtype)
    for i, (_, got) in walked.items():
        if len(got) == 1:
            values[i] = got[0]
    return Extracted(vtype, values, valid)


def _bytes_values(buffer: Any, starts: np.ndarray, ends: np.ndarray, rows: _Rows,
                  fast: np.ndarray, walked: dict[int, tuple[str, np.ndarray]]) -> PackedBytes:
    """The bytes values of the records (empty where none): those ``locate`` found copied out
    of ``buffer`` by one compiled call, the careful walk's put in their places."""
    lo = np.where(fast, rows.start, 0)
    hi = np.where(fast, rows.end, 0)
    lengths = hi - lo
    offsets = np.zeros(len(lo) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    native = loops()
    if native is not None:
        data = np.empty(int(offsets[-1]), dtype=np.uint8)
        native.gather_spans([buffer], lo, hi, data,
                            (np.zeros(len(lo), dtype=np.int64), starts, ends))
        values = PackedBytes(data, offsets)
    else:
        values = PackedBytes.from_list([bytes(buffer[a:b]) for a, b in zip(
            (starts + lo).tolist(), (starts + hi).tolist(), strict=True)])
    singles = {i: bytes(got[0]) for i, (_, got) in walked.items() if len(got) == 1}
    if not singles:
        return values
    items = values.tolist()
    for i, value in singles.items():
        items[i] = value
    return PackedBytes.from_list(items)


def _one_type(kind: np.ndarray, valid: np.ndarray, kinds: dict[int, str], name: str,
              url: str, first: int) -> ValueType:
    """The one value type the records with a value store the feature as."""
    present = np.flatnonzero(np.bincount(kind[valid], minlength=len(kinds) + 1))
    types = {_TYPE_OF[kinds[int(k)]] for k in present.tolist()}
    if not types:
        return ValueType.NONE
    if len(types) > 1:
        ordered = [_TYPE_OF[kinds[int(k)]] for k in kind[valid].tolist()]
        seen = ordered[0]
        i = next(j for j, t in enumerate(ordered) if t is not seen)
        record = int(np.flatnonzero(valid)[i])
        raise _refuse_types(url, first + record, name, ordered[i], seen)
    return types.pop()


def _numbers(buffer: Any, starts: np.ndarray, rows: _Rows, fast: np.ndarray,
             kind: np.ndarray, vtype: ValueType) -> np.ndarray:
    """The numeric values of the records ``locate`` handled (``fast``)."""
    n = len(starts)
    values = np.zeros(n, dtype=vtype.dtype)
    picked = np.flatnonzero(fast)
    if not len(picked):
        return values
    if vtype is ValueType.INT64:
        raw = rows.value[picked]
        int32 = kind[picked] == 4  # an OFRecord int32_list: protobuf keeps the low 32 bits
        if int32.any():
            raw = np.where(int32, (raw & 0xFFFFFFFF).astype(np.uint32).view(np.int32), raw)
        values[picked] = raw
        return values
    at = starts[picked] + rows.start[picked]
    width = vtype.width
    data = np.frombuffer(buffer, dtype=np.uint8)  # released on return (a map can then close)
    gathered = data[at[:, None] + np.arange(width)]
    values[picked] = gathered.view(vtype.dtype).reshape(-1)
    return values
