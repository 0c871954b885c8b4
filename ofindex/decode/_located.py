"""Batched decoding of records whose byte layouts differ, located in compiled code.

Records of one writer often differ in length only because a value does (a JPEG of another
size changes every enclosing length), so they do not share one byte layout (``_template``).
The compiled ``locate`` walks each record the way its writer laid it out (one map entry
after the other, ``key, value{one list}``, lists packed) and finds where the asked-for
features' values lie; numpy and one compiled copy then cut them out. Records laid out
otherwise, and records whose features do not match the spec (a missing feature, another
value type or count), are left to the careful path, which decodes them or words the error.

Eligible specs: every feature a ``FixedLen`` named by an ASCII ``str``: ``bytes`` with one
value, integers with one value, floats of any shape.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from ofindex.decode._values import (
    BYTES,
    FLOAT32,
    FLOAT64,
    INT32,
    INT64,
    NP_DTYPES,
    bytes_array,
)
from ofindex.decode.spec import FixedLen, NormalizedSpec, Ragged

#: Per family: how each list kind stores values (for ``locate``), whether the feature map
#: is wrapped in an Example, and the list kind of each value type.
_FAMILIES: dict[str, tuple[bytes, bool, dict[str, int]]] = {
    "example": (b".b4v", True, {BYTES: 1, FLOAT32: 2, INT64: 3}),
    "ofrecord": (b".b48vv", False, {BYTES: 1, FLOAT32: 2, FLOAT64: 3, INT32: 4, INT64: 5}),
}
_VARINT = (INT32, INT64)
_WIDTH = {FLOAT32: 4, FLOAT64: 8}
# the columns of a row of locate's output
_KIND, _COUNT, _START, _END, _VALUE = range(5)

#: Column of a batch part: ("fixed", array).
Column = tuple[Any, ...]


def _eligible_fields(spec: NormalizedSpec | None,
                     family: str) -> list[tuple[Any, FixedLen, int]] | None:
    """``(name, spec, list kind)`` per feature when every feature is eligible, else ``None``."""
    if not spec or family not in _FAMILIES:
        return None
    kinds = _FAMILIES[family][2]
    plan = []
    for name, fs in spec.items():
        if not isinstance(name, str) or not name.isascii() or not isinstance(fs, FixedLen):
            return None
        kind = kinds.get(fs.dtype)
        if kind is None or (fs.dtype not in _WIDTH and fs.size != 1) or (
                fs.dtype in _WIDTH and sys.byteorder != "little"):  # values stored LE
            return None
        plan.append((name, fs, kind))
    return plan


#: Where records lie in buffers (memory maps): ``(which buffer, starts, ends)``.
Spans = tuple[np.ndarray, np.ndarray, np.ndarray]


def _locate(bufs: list[Any], plan: list[tuple[Any, FixedLen, int]], family: str,
            native: ModuleType, spans: Spans | None = None
            ) -> tuple[np.ndarray, np.ndarray] | None:
    """``(picked, rows)``: the positions of the records whose asked-for features all have
    the spec's value type and count, and their rows of ``locate``'s output; ``None`` when
    no record qualifies."""
    table, wrapped, _ = _FAMILIES[family]
    names = tuple(name.encode("ascii") for name, _, _ in plan)
    n = len(bufs) if spans is None else len(spans[0])
    rows = np.empty((n, len(plan), 5), dtype=np.int64)
    if not native.locate(bufs, names, table, wrapped, rows.reshape(-1), spans):
        return None
    ok = np.ones(n, dtype=bool)
    for j, (_, fs, kind) in enumerate(plan):
        ok &= (rows[:, j, _KIND] == kind) & (rows[:, j, _COUNT] == fs.size)
    picked = np.flatnonzero(ok)
    return (picked, rows[picked]) if len(picked) else None


def _numeric(sub: list[Any], rows: np.ndarray, j: int, fs: FixedLen,
             into: np.ndarray | None, native: ModuleType,
             spans: Spans | None = None) -> np.ndarray:
    """Feature ``j``'s values of the located records (into ``into`` when given)."""
    g = len(rows)
    if fs.dtype in _VARINT:
        values = rows[:, j, _VALUE].astype(NP_DTYPES[fs.dtype]).reshape(g, *fs.shape)
        if into is None:
            return values
        np.copyto(into, values)
        return into
    arr = into if into is not None else np.empty((g, *fs.shape), NP_DTYPES[fs.dtype])
    native.gather_spans(sub, rows[:, j, _START].copy(), rows[:, j, _END].copy(),
                        arr.reshape(-1).view(np.uint8), spans)
    return arr


def decode_located(bufs: list[bytes], spec: NormalizedSpec | None, family: str,
                   native: ModuleType | None) -> tuple[list[int], dict[Any, Column]] | None:
    """Decode the records of ``bufs`` that are laid out as writers lay them out.

    Args:
        bufs: The serialized records.
        spec: The normalized spec.
        family: ``"example"`` or ``"ofrecord"``.
        native: The compiled module that locates them (``None``: none is decoded here).

    Returns:
        ``(positions in bufs, {name: ("fixed", array)})`` for the records decoded here (the
        rest are left to the careful path), or ``None`` when none is (the compiled module
        is not built, the spec is not eligible, or no record qualifies).
    """
    plan = _eligible_fields(spec, family)
    found = (_locate(bufs, plan, family, native) if plan is not None and bufs
             and native is not None else None)
    if plan is None or found is None or native is None:
        return None
    picked, rows = found
    sub = bufs if len(picked) == len(bufs) else [bufs[i] for i in picked.tolist()]
    out: dict[Any, Column] = {}
    for j, (name, fs, _) in enumerate(plan):
        if fs.dtype == BYTES:
            values = bytes_array([b[s:e] for b, s, e in zip(
                sub, rows[:, j, _START].tolist(), rows[:, j, _END].tolist(), strict=True)])
            out[name] = ("fixed", values.reshape(len(sub), *fs.shape))
        else:
            out[name] = ("fixed", _numeric(sub, rows, j, fs, None, native))
    return picked.tolist(), out


def decode_packed(bufs: list[Any], spec: NormalizedSpec | None, family: str,
                  out: dict[str, np.ndarray], buffer: Callable[[str, int], np.ndarray],
                  native: ModuleType | None, spans: Spans | None = None
                  ) -> dict[str, Any] | None:
    """Decode a whole batch with its ``bytes`` features packed: each one's values copied
    once, straight from the records, back to back into one ``uint8`` buffer.

    Args:
        bufs: The serialized records.
        spec: The normalized spec.
        family: ``"example"`` or ``"ofrecord"``.
        out: Arrays to decode numeric features into, by name (checked by the caller).
        buffer: ``buffer(name, size)`` gives the writable ``uint8`` array of ``size`` bytes
            that feature ``name``'s values go into.
        native: The compiled module that locates and copies them (``None``: none is
            decoded here).
        spans: ``(which, starts, ends)``: ``bufs`` are then buffers (e.g. memory maps) and
            record ``i`` is ``bufs[which[i]][starts[i]:ends[i]]``.

    Returns:
        ``{name: array | Ragged(buffer, lengths)}``, or ``None`` unless every record is
        decoded here (the caller then decodes the batch on the usual path).
    """
    plan = _eligible_fields(spec, family)
    n = len(bufs) if spans is None else len(spans[0])
    found = (_locate(bufs, plan, family, native, spans) if plan is not None and n
             and native is not None else None)
    if plan is None or found is None or native is None or len(found[0]) != n:
        return None
    _, rows = found
    result: dict[str, Any] = {}
    for j, (name, fs, _) in enumerate(plan):
        if fs.dtype != BYTES:
            result[name] = _numeric(bufs, rows, j, fs, out.get(name), native, spans)
            continue
        starts, ends = rows[:, j, _START].copy(), rows[:, j, _END].copy()
        lengths = ends - starts
        packed = buffer(name, int(lengths.sum()))
        native.gather_spans(bufs, starts, ends, packed, spans)
        result[name] = Ragged(packed, lengths)
    return result
