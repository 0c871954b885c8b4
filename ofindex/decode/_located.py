"""Batched decoding of records whose byte layouts differ, located in compiled code.

Records of one writer often differ in length only because a value does (a JPEG of another
size changes every enclosing length, a token list of another length too), so they do not
share one byte layout (``_template``). The compiled ``locate`` walks each record the way its
writer laid it out (one map entry after the other, ``key, value{one list}``, lists packed)
and finds where the asked-for features' values lie; one compiled call per feature then reads
them all out (``gather_spans`` copies packed floats, ``values`` decodes packed varints and
makes the bytes values). Records laid out otherwise, and records whose features do not match
the spec (another value type or count, a ``FixedLen`` missing without a default), are left to
the careful path, which decodes them or words the error.

Eligible specs: every feature named by an ASCII ``str``, with a ``FixedLen`` or ``VarLen``
spec (floats only on little-endian machines, where they are stored as they are). Without it,
10,000 Examples of 8 features, 2 of them ``VarLen``, took 1.2 s record by record in Python,
against 0.05 s for ``tf.io.parse_example``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from ofindex.decode._memory import empty
from ofindex.decode._parallel import fill_parallel
from ofindex.decode._values import (
    BYTES,
    FLOAT32,
    FLOAT64,
    INT32,
    INT64,
    NP_DTYPES,
)
from ofindex.decode.spec import FeatureSpec, FixedLen, NormalizedSpec, Ragged

#: How an Example's list kinds store their values, as ``locate`` reads them (the oneof field
#: number indexes it: 1 bytes, 2 packed float32, 3 packed varints).
EXAMPLE_LOCATE_KINDS = b".b4v"
#: Per family: how each list kind stores values (for ``locate``), whether the feature map
#: is wrapped in an Example, and the list kind of each value type.
_FAMILIES: dict[str, tuple[bytes, bool, dict[str, int]]] = {
    "example": (EXAMPLE_LOCATE_KINDS, True, {BYTES: 1, FLOAT32: 2, INT64: 3}),
    "ofrecord": (b".b48vv", False, {BYTES: 1, FLOAT32: 2, FLOAT64: 3, INT32: 4, INT64: 5}),
}
_VARINT = (INT32, INT64)
_WIDTH = {FLOAT32: 4, FLOAT64: 8}
#: The columns of a row of ``locate``'s output (csrc/protowire.h): the list kind (0 missing,
#: -1 in the first column: the record is not laid out as writers lay records out), the
#: number of values, the values' bytes, a varint list's first value, the list message's body.
KIND, COUNT, START, END, VALUE, LIST_START, LIST_END, SLOTS = range(8)

#: Column of a batch part: ("fixed", array) or ("ragged", values, row lengths).
Column = tuple[Any, ...]

#: Batches of at least this many records are located on a few threads (a record of 8
#: features takes ~0.5 us, a thread ~0.1 ms to start its part), and varint values of at
#: least this many bytes decoded on a few threads: 10,000 Examples with token lists of 1 to
#: 200 ids, 17 ms on one core of the 2-core VM, 12 ms on two.
PARALLEL_RECORDS = 4096
PARALLEL_VALUE_BYTES = 1 << 20


def _eligible_fields(spec: NormalizedSpec | None, family: str, packed: bool = False
                     ) -> list[tuple[Any, Any, int]] | None:
    """``(name, spec, list kind)`` per feature when every feature is eligible, else ``None``.
    ``packed``: for :func:`decode_packed`, which takes ``FixedLen`` features only, of one
    value unless floats."""
    if not spec or family not in _FAMILIES:
        return None
    kinds = _FAMILIES[family][2]
    plan = []
    for name, fs in spec.items():
        if not isinstance(name, str) or not name.isascii() or fs is None:
            return None
        kind = kinds.get(fs.dtype)
        if kind is None or (fs.dtype in _WIDTH and sys.byteorder != "little"):  # stored LE
            return None
        if packed and (not isinstance(fs, FixedLen) or (fs.dtype not in _WIDTH
                                                          and fs.size != 1)):
            return None
        plan.append((name, fs, kind))
    return plan


def eligible(spec: NormalizedSpec | None, family: str, native: ModuleType | None) -> bool:
    """Whether :func:`decode_located` can take records of ``spec`` (see the module doc).

    Args:
        spec: The normalized spec.
        family: ``"example"`` or ``"ofrecord"``.
        native: The compiled module the batch is decoded with, or ``None``.

    Returns:
        ``True`` when the compiled module is in use and every feature is eligible.
    """
    return native is not None and _eligible_fields(spec, family) is not None


def _matches(rows: np.ndarray, fs: FeatureSpec, kind: int, missing: bool) -> np.ndarray:
    """Per record, whether its located feature (``rows``: its column of ``locate``'s output)
    is decoded here: of the spec's kind and count, or (with ``missing``) missing where that
    is no error."""
    stored = rows[:, KIND]
    ok: np.ndarray = stored == kind
    if isinstance(fs, FixedLen):
        ok &= rows[:, COUNT] == fs.size
        missing = missing and fs.default is not None
    return ok | (stored == 0) if missing else ok


#: Where records lie in buffers (memory maps): ``(which buffer, starts, ends)``.
Spans = tuple[np.ndarray, np.ndarray, np.ndarray]


def _locate(bufs: list[Any], plan: list[tuple[Any, Any, int]], family: str, native: ModuleType,
            spans: Spans | None = None, missing: bool = True
            ) -> tuple[np.ndarray, np.ndarray] | None:
    """``(picked, rows)``: the positions of the records whose asked-for features all match
    the spec (see :func:`_matches`; ``missing``: a feature may be missing where that is no
    error), and their rows of ``locate``'s output; ``None`` when no record qualifies."""
    table, wrapped, _ = _FAMILIES[family]
    names = tuple(name.encode("ascii") for name, _, _ in plan)
    n = len(bufs) if spans is None else len(spans[0])
    rows = np.empty((n, len(plan), SLOTS), dtype=np.int64)
    if spans is None:  # without spans, big batches on a few threads, a slice of records each
        handled: list[int] = []
        fill_parallel(n, n, _locate_part, native, bufs, names, table, wrapped, rows, handled,
                      least=PARALLEL_RECORDS)
        if not sum(handled):
            return None
    elif not native.locate(bufs, names, table, wrapped, rows.reshape(-1), spans):
        return None
    ok = rows[:, 0, KIND] >= 0  # laid out as writers lay records out
    for j, (_, fs, kind) in enumerate(plan):
        ok &= _matches(rows[:, j], fs, kind, missing)
    if ok.all():
        return np.arange(n), rows
    picked = np.flatnonzero(ok)
    return (picked, rows[picked]) if len(picked) else None


def _locate_part(job: list[Any], lo: int, hi: int) -> None:
    """``locate`` of records ``lo..hi-1`` into their rows (the compiled loop runs without the
    GIL)."""
    native, bufs, names, table, wrapped, rows, handled = job
    handled.append(native.locate(bufs[lo:hi], names, table, wrapped, rows[lo:hi].reshape(-1)))


def _varints_part(job: list[Any], lo: int, hi: int) -> None:
    """The varints of records ``lo..hi-1`` into their places of the output (without the
    GIL)."""
    native, sub, starts, ends, how, out, offsets = job
    native.values(sub[lo:hi], starts[lo:hi], ends[lo:hi], how,
                  out[int(offsets[lo]):int(offsets[hi])])


def _values(sub: list[bytes], rows: np.ndarray, vtype: str, counts: np.ndarray,
            native: ModuleType) -> np.ndarray:
    """The values of one feature of every located record (``rows``: its column), back to
    back: ``counts[i]`` of record ``i``."""
    total = int(counts.sum())
    if vtype == BYTES:
        values: np.ndarray = native.values(sub, rows[:, LIST_START].copy(),
                                           rows[:, LIST_END].copy(), "b", total)
        return values
    out = empty((total,), NP_DTYPES[vtype])
    starts, ends = rows[:, START].copy(), rows[:, END].copy()
    if vtype in _WIDTH:
        native.gather_spans(sub, starts, ends, out.view(np.uint8))
        return out
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    fill_parallel(len(sub), int(ends.sum() - starts.sum()), _varints_part, native, sub, starts,
                  ends,
                  "i" if vtype == INT32 else "v", out, offsets,
                  least=PARALLEL_VALUE_BYTES)
    return out


def _fixed(sub: list[bytes], rows: np.ndarray, fs: FixedLen, kind: int,
           into: np.ndarray | None, native: ModuleType) -> np.ndarray:
    """A ``FixedLen`` feature of the located records (``rows``: its column) as one array
    ``(records, *shape)`` (``into`` when given); a missing one takes the default."""
    g = len(rows)
    present = rows[:, KIND] == kind
    every = bool(present.all())
    if every and fs.dtype in _VARINT and fs.size == 1:  # the value locate read
        values = rows[:, VALUE].astype(NP_DTYPES[fs.dtype]).reshape(g, *fs.shape)
        return values if into is None else _into(into, values)
    arr = into if into is not None else empty((g, *fs.shape), NP_DTYPES[fs.dtype])
    if every and fs.dtype in _WIDTH:  # copied straight into the output
        native.gather_spans(sub, rows[:, START].copy(), rows[:, END].copy(),
                            arr.reshape(-1).view(np.uint8))
        return arr
    count = int(present.sum())
    values = _values(sub, rows, fs.dtype, present * fs.size, native).reshape(count, *fs.shape)
    if every:  # the values are the output (a second copy of a batch's bytes objects took
        # 3-4 % of its time)
        return values if into is None else _into(into, values)
    arr[present] = values
    arr[~present] = fs.default
    return arr


def _into(into: np.ndarray, values: np.ndarray) -> np.ndarray:
    np.copyto(into, values)
    return into


def _numeric(sub: list[Any], rows: np.ndarray, j: int, fs: FixedLen,
             into: np.ndarray | None, native: ModuleType,
             spans: Spans | None = None) -> np.ndarray:
    """Feature ``j``'s values of the located records (into ``into`` when given)."""
    g = len(rows)
    if fs.dtype in _VARINT:
        values = rows[:, j, VALUE].astype(NP_DTYPES[fs.dtype]).reshape(g, *fs.shape)
        if into is None:
            return values
        np.copyto(into, values)
        return into
    arr = into if into is not None else np.empty((g, *fs.shape), NP_DTYPES[fs.dtype])
    native.gather_spans(sub, rows[:, j, START].copy(), rows[:, j, END].copy(),
                        arr.reshape(-1).view(np.uint8), spans)
    return arr


def decode_located(bufs: list[bytes], spec: NormalizedSpec | None, family: str,
                   native: ModuleType | None, targets: dict[Any, np.ndarray] | None = None
                   ) -> tuple[Sequence[int], dict[Any, Column]] | None:
    """Decode the records of ``bufs`` that are laid out as writers lay them out.

    Args:
        bufs: The serialized records.
        spec: The normalized spec.
        family: ``"example"`` or ``"ofrecord"``.
        native: The compiled module that locates and copies them (``None``: none is decoded
            here).
        targets: Arrays to decode ``FixedLen`` features into when every record is decoded
            here (the caller's ``out=``, of the whole batch's shape).

    Returns:
        ``(positions in bufs, {name: ("fixed", array) | ("ragged", values, row lengths)})``
        for the records decoded here (the rest are left to the careful path), or ``None``
        when none is (the compiled module is not built, the spec is not eligible, or no
        record qualifies).
    """
    plan = _eligible_fields(spec, family)
    found = (_locate(bufs, plan, family, native) if plan is not None and bufs
             and native is not None else None)
    if plan is None or found is None or native is None:
        return None
    picked, rows = found
    whole = len(picked) == len(bufs)
    sub = bufs if whole else [bufs[i] for i in picked.tolist()]
    out: dict[Any, Column] = {}
    for j, (name, fs, kind) in enumerate(plan):
        column = rows[:, j]
        if isinstance(fs, FixedLen):
            into = (targets or {}).get(name) if whole else None
            out[name] = ("fixed", _fixed(sub, column, fs, kind, into, native))
            continue
        lengths = np.where(column[:, KIND] == kind, column[:, COUNT], 0)
        out[name] = ("ragged", _values(sub, column, fs.dtype, lengths, native), lengths)
    return (range(len(bufs)) if whole else picked.tolist()), out


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
    plan = _eligible_fields(spec, family, packed=True)
    n = len(bufs) if spans is None else len(spans[0])
    found = (_locate(bufs, plan, family, native, spans, missing=False)
             if plan is not None and n and native is not None else None)
    if plan is None or found is None or native is None or len(found[0]) != n:
        return None
    _, rows = found
    result: dict[str, Any] = {}
    for j, (name, fs, _) in enumerate(plan):
        if fs.dtype != BYTES:
            result[name] = _numeric(bufs, rows, j, fs, out.get(name), native, spans)
            continue
        starts, ends = rows[:, j, START].copy(), rows[:, j, END].copy()
        lengths = ends - starts
        packed = buffer(name, int(lengths.sum()))
        native.gather_spans(bufs, starts, ends, packed, spans)
        result[name] = Ragged(packed, lengths)
    return result
