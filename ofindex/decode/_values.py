"""Turn located list messages into numpy arrays (no Python object per numeric element)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ofindex.decode._wire import I32, I64, LEN, VARINT, WireError, iter_fields, read_varint

# value types, as used in specs and results
BYTES, FLOAT32, FLOAT64, INT32, INT64 = "bytes", "float32", "float64", "int32", "int64"

#: Feature oneof field number -> value type, per message family
EXAMPLE_KINDS = {1: BYTES, 2: FLOAT32, 3: INT64}
OFRECORD_KINDS = {1: BYTES, 2: FLOAT32, 3: FLOAT64, 4: INT32, 5: INT64}

#: the name of the oneof field that stores each value type (for messages)
LIST_NAMES = {
    BYTES: "bytes_list", FLOAT32: "float_list", FLOAT64: "double_list",
    INT32: "int32_list", INT64: "int64_list",
}

NP_DTYPES: dict[str, np.dtype[Any]] = {
    BYTES: np.dtype(object), FLOAT32: np.dtype(np.float32), FLOAT64: np.dtype(np.float64),
    INT32: np.dtype(np.int32), INT64: np.dtype(np.int64),
}
_LE: dict[str, np.dtype[Any]] = {FLOAT32: np.dtype("<f4"), FLOAT64: np.dtype("<f8")}
_FIXED_WT = {FLOAT32: I32, FLOAT64: I64}
_U64 = np.uint64

# below this many payload bytes, a Python loop over varints beats numpy's fixed costs
_SMALL_VARINT_BYTES = 24


def empty(vtype: str) -> np.ndarray:
    return np.empty(0, dtype=NP_DTYPES[vtype])


def bytes_array(items: list[Any]) -> np.ndarray:
    """A 1-D object array holding the given bytes objects."""
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def varints_to_u64(u8: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised varint decoding of a uint8 array holding whole varints back to back.

    Returns (values as uint64, index of each varint's last byte). Raises WireError if
    the data ends inside a varint or a varint is longer than 10 bytes.
    """
    n = u8.size
    if n == 0:
        return np.empty(0, _U64), np.empty(0, np.intp)
    cont = u8 >= 0x80
    if not cont.any():
        return u8.astype(_U64), np.arange(n)
    if cont[-1]:
        raise WireError("truncated varint in a packed list")
    last = np.flatnonzero(~cont)
    starts = np.empty_like(last)
    starts[0] = 0
    starts[1:] = last[:-1] + 1
    lengths = last - starts + 1
    if lengths.max() > 10:
        raise WireError("varint longer than 10 bytes in a packed list")
    pos_in = np.arange(n) - np.repeat(starts, lengths)
    contrib = (u8 & 0x7F).astype(_U64) << (pos_in * 7).astype(_U64)
    return np.add.reduceat(contrib, starts), last


def _u64_to(vtype: str, u: np.ndarray) -> np.ndarray:
    if vtype == INT64:
        return u.view(np.int64)
    low: np.ndarray = u & _U64(0xFFFFFFFF)
    return low.astype(np.uint32).view(np.int32)


def _small_varints(buf: bytes, s: int, e: int, vtype: str) -> list[int]:
    out = []
    while s < e:
        v, s = read_varint(buf, s, e)
        out.append(v)
    if vtype == INT64:
        return [v - (1 << 64) if v >= 1 << 63 else v for v in out]
    out = [v & 0xFFFFFFFF for v in out]
    return [v - (1 << 32) if v >= 1 << 31 else v for v in out]


def _chunks(buf: bytes, regions: list[tuple[int, int]], vtype: str,
            level: int) -> list[tuple[int, int, int]]:
    """The value-carrying fields of the list message(s) (at nesting ``level`` in the
    record): (wire type, start, end)."""
    want = _FIXED_WT.get(vtype, VARINT)
    out = []
    for rs, re_ in regions:
        for field, wt, s, e in iter_fields(buf, rs, re_, level):
            if field != 1:
                continue
            if vtype == BYTES:
                if wt == LEN:
                    out.append((wt, s, e))
            elif wt in (LEN, want):
                out.append((wt, s, e))
    return out


def list_values(buf: bytes, regions: list[tuple[int, int]], vtype: str, level: int,
                copy: bool = True) -> np.ndarray:
    """Decode the values of a list message (given by its regions, at nesting ``level`` in
    the record) as a 1-D array.

    With ``copy=False`` a packed float list may come back as a read-only view of ``buf``.
    """
    if not regions:
        return empty(vtype)
    if len(regions) == 1 and vtype != BYTES:
        # fast path: one list message holding one packed field (what writers emit)
        rs, re_ = regions[0]
        if re_ - rs >= 2 and buf[rs] == 0x0A:
            n = buf[rs + 1]
            p = rs + 2
            if n >= 0x80 and p < re_:
                c = buf[p]
                n = (n & 0x7F) | (c & 0x7F) << 7
                p += 1
                if c >= 0x80:
                    n = -1
            if n >= 0 and p + n == re_:
                if vtype in _LE:
                    dt = _LE[vtype]
                    if n % dt.itemsize == 0:
                        arr = np.frombuffer(buf, dt, n // dt.itemsize, p)
                        return arr.astype(NP_DTYPES[vtype], copy=copy)
                elif n <= _SMALL_VARINT_BYTES:
                    return np.array(_small_varints(buf, p, re_, vtype), NP_DTYPES[vtype])
    chunks = _chunks(buf, regions, vtype, level)
    if vtype == BYTES:
        return bytes_array([buf[s:e] for _, s, e in chunks])
    if vtype in _LE:
        dt = _LE[vtype]
        size = dt.itemsize
        parts = []
        for wt, s, e in chunks:
            if wt == LEN and (e - s) % size:
                raise WireError(f"packed {vtype} list of {e - s} bytes, not a multiple of {size}")
            parts.append(np.frombuffer(buf, dt, (e - s) // size, s))
        if len(parts) == 1:
            return parts[0].astype(NP_DTYPES[vtype], copy=copy)
        if not parts:
            return empty(vtype)
        return np.concatenate(parts).astype(NP_DTYPES[vtype], copy=False)
    # varint lists
    total = sum(e - s for _, s, e in chunks)
    if total <= _SMALL_VARINT_BYTES:
        vals: list[int] = []
        for _, s, e in chunks:
            vals.extend(_small_varints(buf, s, e, vtype))
        return np.array(vals, dtype=NP_DTYPES[vtype])
    if len(chunks) == 1:
        _, s, e = chunks[0]
        u8 = np.frombuffer(buf, np.uint8, e - s, s)
    else:
        for _, s, e in chunks:
            if e > s and buf[e - 1] >= 0x80:  # each packed field must hold whole varints
                raise WireError("truncated varint in a packed list")
        u8 = np.frombuffer(b"".join([buf[s:e] for _, s, e in chunks]), np.uint8)
    u, _ = varints_to_u64(u8)
    return _u64_to(vtype, u)
