"""Vectorised batch decoding of records that share one byte layout.

Records written by one writer with the same feature names, kinds and value counts are
byte-for-byte identical except inside the value payloads (the packed float bytes, the
packed varints, the bytes values). For a group of records of equal length we walk the
first one, mark its payload regions, and check with numpy that every other record has
the same bytes everywhere else. A protobuf parse only ever looks at those "structural"
bytes to decide what goes where, so every record of the group then parses exactly like
the first one, and each feature's values can be cut out of all records at once
(``(records, bytes)`` uint8 matrix -> ``view('<f4')``; varints decoded vectorised). If
anything is unusual (unpacked varints, a kind mismatch, a missing feature without
default, a wrong count...) the template declines and the caller decodes record by record,
which also produces the precise error.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from ofindex.decode._memory import empty
from ofindex.decode._parallel import copy_rows, fill_parallel
from ofindex.decode._values import (
    BYTES,
    FLOAT32,
    FLOAT64,
    NP_DTYPES,
    _chunks,
    _u64_to,
    bytes_array,
    varints_to_u64,
)
from ofindex.decode._walk import Walked
from ofindex.decode._wire import LEN, WireError
from ofindex.decode.spec import FeatureSpec, FixedLen, NormalizedSpec

_LE: dict[str, np.dtype[Any]] = {FLOAT32: np.dtype("<f4"), FLOAT64: np.dtype("<f8")}
# per-record payloads at least this big are copied record by record instead of joined
_BIG_PAYLOAD = 16 * 1024
_SMALL_SLICE = 512

#: payload fields of a list message: (wire type, start, end)
Chunks = list[tuple[int, int, int]]
#: one spec feature's plan: (name, spec, value type, payload chunks or None when absent)
Plan = tuple[Any, FeatureSpec, str, Chunks | None]
#: a decoded column: ("fixed", array (g, *shape)) or ("ragged", values, row_lengths)
Column = tuple[Any, ...]


def _layout_plan(buf: bytes, located: Walked, spec: NormalizedSpec, kinds: dict[int, str]
                 ) -> tuple[list[Plan], list[tuple[int, int]]] | None:
    """``(plans, payload)``: per spec feature (name, fs, vtype, chunks) or a constant, and the
    payload regions (bytes free to differ between records); None if not eligible.

    The values of features left out of the spec may differ too; like the record-by-record
    path and TensorFlow's parser, nothing looks inside them."""
    plans: list[Plan] = []
    payload: list[tuple[int, int]] = []
    for name, fs in spec.items():
        loc = located.get(name)
        stored = kinds.get(loc.kind) if loc is not None else None
        vtype = fs.dtype if fs is not None else stored
        if loc is None or stored is None:
            if fs is None or (isinstance(fs, FixedLen) and fs.default is None):
                return None  # missing/untyped: let the per-record path decide
            plans.append((name, fs, fs.dtype, None))
            continue
        if stored != vtype:
            return None
        try:
            chunks = _chunks(buf, loc.regions, vtype, loc.level)
        except WireError:
            return None
        if vtype in _LE:
            size = _LE[vtype].itemsize
            if any((e - s) % size for _, s, e in chunks):
                return None
        elif vtype != BYTES and any(wt != LEN for wt, _, _ in chunks):
            return None  # unpacked varints: their widths decide the layout
        plans.append((name, fs, vtype, chunks))
        payload.extend((s, e) for _, s, e in chunks)
    for name, loc in located.items():  # features left out of the spec: their values may
        stored = kinds.get(loc.kind)    # differ between records, only their layout may not
        if name in spec or stored is None:
            continue
        try:
            chunks = _chunks(buf, loc.regions, stored, loc.level)
        except WireError:
            return None
        if stored != BYTES and any(wt != LEN for wt, _, _ in chunks):
            return None  # unpacked values: their widths decide the layout
        payload.extend((s, e) for _, s, e in chunks)
    return plans, payload


def _structure_matches(bufs: list[bytes], payload: list[tuple[int, int]], length: int,
                       native: ModuleType | None) -> bool:
    """Whether every record has record 0's bytes outside the payload regions (compared by
    the compiled module ``native``, or by the pure-Python loop)."""
    ranges = []
    pos = 0
    for s, e in sorted(payload):
        if s > pos:
            ranges.append((pos, s))
        pos = max(pos, e)
    if pos < length:
        ranges.append((pos, length))
    if native is not None:
        same: bool = native.same_bytes(bufs, np.array(ranges, dtype=np.int64).reshape(-1))
        return same
    first = bufs[0]
    for a, b in ranges:
        ref = first[a:b]
        for buf in bufs:
            if buf[a:b] != ref:
                return False
    return True


def _gather(bufs: list[bytes], chunks: Chunks,
            native: ModuleType | None) -> bytearray | np.ndarray:
    """The payload bytes of ``chunks`` of every record, back to back (one copy by the
    compiled module ``native``, or by the pure-Python loop)."""
    if native is not None:
        ranges = np.array([(s, e) for _, s, e in chunks], dtype=np.int64).reshape(-1)
        out = np.empty(len(bufs) * int((ranges[1::2] - ranges[::2]).sum()), np.uint8)
        native.gather_bytes(bufs, ranges, out)
        return out
    if len(chunks) == 1:
        _, s, e = chunks[0]
        if e - s <= _SMALL_SLICE:  # slicing bytes beats making a memoryview
            return bytearray().join([b[s:e] for b in bufs])
        return bytearray().join([memoryview(b)[s:e] for b in bufs])
    return bytearray().join([memoryview(b)[s:e] for b in bufs for _, s, e in chunks])


def _gather_part(job: list[Any], lo: int, hi: int) -> None:
    """Records ``lo..hi-1``'s payload range into rows ``lo..hi-1`` of the output (the
    compiled module's: streaming stores, without the GIL)."""
    native, bufs, ranges, out = job
    native.gather_bytes(bufs[lo:hi], ranges, out[lo:hi])


def _numeric(bufs: list[bytes], chunks: Chunks, vtype: str, target: np.ndarray | None,
             native: ModuleType | None) -> np.ndarray | tuple[np.ndarray, np.ndarray] | None:
    """Values of every record: (2-D array if all rows have equal counts, else
    (flat values, row lengths)); None if the payload is malformed. Big packed floats are
    written into ``target`` (the caller's output array) when it has the right size."""
    g = len(bufs)
    if not chunks:
        return np.empty((g, 0), NP_DTYPES[vtype])
    if vtype in _LE and len(chunks) == 1 and chunks[0][2] - chunks[0][1] >= _BIG_PAYLOAD:
        # big payloads: copy each record straight into the result (or the caller's array)
        _, s, e = chunks[0]
        dt = _LE[vtype]
        count = (e - s) // dt.itemsize
        out = target.reshape(g, count) if target is not None and target.size == g * count \
            else empty((g, count), NP_DTYPES[vtype])
        if native is not None and out.dtype == dt:  # a little-endian machine
            fill_parallel(g, out.nbytes, _gather_part, native, bufs, np.array([s, e], np.int64),
                          out)
        else:
            copy_rows(out, [np.frombuffer(buf, dt, count, s) for buf in bufs])
        return out
    raw = _gather(bufs, chunks, native)
    if vtype in _LE:
        vals = np.frombuffer(raw, _LE[vtype]).astype(NP_DTYPES[vtype], copy=False)
        return vals.reshape(g, -1)
    u8 = np.frombuffer(raw, np.uint8)
    width = len(raw) // g
    if width == 0:
        return np.empty((g, 0), NP_DTYPES[vtype])
    if not (u8 >= 0x80).any():
        return u8.astype(NP_DTYPES[vtype]).reshape(g, width)
    ends = np.cumsum([e - s for _, s, e in chunks]) - 1  # last byte of each packed field
    rows = u8.reshape(g, width)
    for end in ends:
        if (rows[:, end] >= 0x80).any():  # every packed field must end on a whole varint
            return None
    try:
        u, last = varints_to_u64(u8)
    except WireError:
        return None
    vals = _u64_to(vtype, u)
    counts = np.bincount(last // width, minlength=g)
    if (counts == counts[0]).all():
        return vals.reshape(g, -1)
    return vals, counts


def decode_group(bufs: list[bytes], located0: Walked, spec: NormalizedSpec,
                 kinds: dict[int, str], targets: dict[Any, np.ndarray] | None,
                 native: ModuleType | None) -> dict[Any, Column] | None:
    """Decode a group of equal-length records sharing record 0's layout.

    Returns {name: ("fixed", array (g, *shape)) | ("ragged", values, row_lengths)} or
    None when the template does not apply. ``targets``: output arrays to fill where possible;
    ``native``: the compiled module that compares and copies the records, or ``None`` (the
    pure-Python loops).
    """
    buf0 = bufs[0]
    planned = _layout_plan(buf0, located0, spec, kinds)
    if planned is None:
        return None
    plans, payload = planned
    length = len(buf0)
    g = len(bufs)
    if not _structure_matches(bufs, payload, length, native):
        return None
    out: dict[Any, Column] = {}
    for name, fs, vtype, chunks in plans:
        if chunks is None:  # absent or untyped everywhere: default / empty
            if isinstance(fs, FixedLen):
                out[name] = ("fixed", np.broadcast_to(fs.default, (g, *fs.shape)).copy())
            else:
                out[name] = ("ragged", np.empty(0, NP_DTYPES[vtype]), np.zeros(g, np.int64))
            continue
        if vtype == BYTES:
            n = len(chunks)
            items = [buf[s:e] for buf in bufs for _, s, e in chunks]
            if isinstance(fs, FixedLen):
                if n != fs.size:
                    return None
                out[name] = ("fixed", bytes_array(items).reshape(g, *fs.shape))
            else:
                out[name] = ("ragged", bytes_array(items), np.full(g, n, np.int64))
            continue
        vals = _numeric(bufs, chunks, vtype, (targets or {}).get(name), native)
        if vals is None:
            return None
        if isinstance(fs, FixedLen):
            if isinstance(vals, tuple) or vals.shape[1] != fs.size:
                return None
            out[name] = ("fixed", vals.reshape(g, *fs.shape))
        elif isinstance(vals, tuple):
            out[name] = ("ragged", vals[0], vals[1].astype(np.int64))
        else:
            out[name] = ("ragged", vals.reshape(-1), np.full(g, vals.shape[1], np.int64))
    return out


__all__ = ["decode_group"]
