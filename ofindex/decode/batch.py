"""Batched decoding: a list of serialized records -> dense stacked arrays and Ragged pairs.

``FixedLen`` features become one array ``(batch, *shape)``; ``VarLen`` features (and
features without a spec) become :class:`Ragged` ``(values, row_lengths)``. Records that
share a byte layout (the usual case: one writer, same features) are decoded together with
numpy (see :mod:`ofindex.decode._template`). Records whose layouts differ only where a
value's length does (a JPEG of another size each) are located in compiled code and their
values cut straight out, when the spec holds ``FixedLen`` features only (see
:mod:`ofindex.decode._located`). The others go record by record, through protobuf's compiled
parser where they plainly fit the spec (see :mod:`ofindex.decode._protobuf`), else by the
careful walk that also words the errors.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from ofindex.decode._located import decode_located, decode_packed
from ofindex.decode._protobuf import decode_parsed, eligible
from ofindex.decode._template import Column, decode_group
from ofindex.decode._values import EXAMPLE_KINDS, FLOAT32, NP_DTYPES, OFRECORD_KINDS, bytes_array
from ofindex.decode._walk import Walked, walk_example, walk_ofrecord
from ofindex.decode._wire import WireError, as_bytes
from ofindex.decode.example import (
    EXAMPLE_DTYPES,
    OFRECORD_DTYPES,
    Decoded,
    RecordBytes,
    check_kind,
    convert,
    walk,
)
from ofindex.decode.spec import FixedLen, NormalizedSpec, Ragged, Spec, normalize_spec
from ofindex.errors import DecodeError

#: Records left over from the layout groups: from this many on, protobuf's compiled parser is
#: tried first (see :mod:`ofindex.decode._protobuf`).
_PARSED_MIN = 2

_FAMILIES: dict[str, tuple[Callable[[bytes], Walked], dict[int, str], tuple[str, ...], str]] = {
    "example": (walk_example, EXAMPLE_KINDS, EXAMPLE_DTYPES, "Example"),
    "ofrecord": (walk_ofrecord, OFRECORD_KINDS, OFRECORD_DTYPES, "OFRecord"),
}


def _concat(rows: list[np.ndarray], vtype: str) -> np.ndarray:
    if vtype == "bytes":
        return bytes_array([x for row in rows for x in row])
    if not rows:
        return np.empty(0, NP_DTYPES[vtype])
    return np.concatenate(rows).astype(NP_DTYPES[vtype], copy=False)


def _natural_types(walked: list[Walked], kinds: dict[int, str], names: list[Any]
                   ) -> dict[Any, str]:
    """For spec-less features: the one stored value type across all records."""
    types: dict[Any, str] = {}
    for name in names:
        found: tuple[str, int] | None = None
        for i, located in enumerate(walked):
            loc = located.get(name)
            vtype = kinds.get(loc.kind) if loc is not None else None
            if vtype is None:
                continue
            if found is None:
                found = (vtype, i)
            elif found[0] != vtype:
                raise DecodeError(
                    f"feature {name!r}: record {found[1]} stores {found[0]} values, "
                    f"record {i} stores {vtype}; give it a spec"
                )
        types[name] = found[0] if found else FLOAT32
    return types


def _per_record(bufs: list[bytes], idx: list[int], walked: list[Walked], spec: NormalizedSpec,
                kinds: dict[int, str], what: str, union: bool) -> dict[Any, Column]:
    """Decode records one by one; returns {name: ("fixed", arr) | ("ragged", vals, lens)}."""
    names = list(spec)
    natural = _natural_types(walked, kinds, [n for n in names if spec[n] is None])
    out: dict[Any, Column] = {}
    for name in names:
        fs = spec[name]
        if isinstance(fs, FixedLen):
            arr = np.empty((len(bufs), *fs.shape), NP_DTYPES[fs.dtype])
            for j, (buf, located) in enumerate(zip(bufs, walked, strict=True)):
                try:
                    # [j, ...]: a 0-d bytes value is stored as its bytes, not as an array
                    arr[j, ...] = convert(buf, name, located.get(name), fs, kinds, what,
                                          copy=False)
                except DecodeError as exc:
                    raise DecodeError(f"record {idx[j]}: {exc}") from None
            out[name] = ("fixed", arr)
            continue
        vtype = fs.dtype if fs is not None else natural[name]
        rows: list[np.ndarray] = []
        for j, (buf, located) in enumerate(zip(bufs, walked, strict=True)):
            loc = located.get(name)
            try:
                if fs is None:
                    if loc is None and union:
                        rows.append(np.empty(0, NP_DTYPES[vtype]))
                        continue
                    check_kind(name, kinds.get(loc.kind) if loc else None, vtype, what)
                rows.append(convert(buf, name, loc, fs, kinds, what, copy=False))
            except DecodeError as exc:
                raise DecodeError(f"record {idx[j]}: {exc}") from None
        lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
        out[name] = ("ragged", _concat(rows, vtype), lengths)
    return out


def _assemble(n: int, spec: NormalizedSpec, parts: list[tuple[list[int], dict[Any, Column]]]
              ) -> Decoded:
    """Merge per-group results (idx, {name: result}) into whole-batch outputs."""
    if len(parts) == 1 and parts[0][0] == list(range(n)):
        res = parts[0][1]
        return {name: (r[1] if r[0] == "fixed" else Ragged(r[1], r[2]))
                for name, r in res.items()}
    out: Decoded = {}
    for name, fs in spec.items():
        first = parts[0][1][name]
        if first[0] == "fixed":
            arr = np.empty((n, *first[1].shape[1:]), first[1].dtype)
            for idx, res in parts:
                arr[idx] = res[name][1]
            out[name] = arr
            continue
        rows: list[Any] = [None] * n
        lengths = np.zeros(n, np.int64)
        for idx, res in parts:
            _, vals, lens = res[name]
            for i, row in zip(idx, np.split(vals, np.cumsum(lens)[:-1]), strict=True):
                rows[i] = row
            lengths[idx] = lens
        stored = {r.dtype for r in rows if len(r)}
        if len(stored) > 1:
            raise DecodeError(
                f"feature {name!r}: records store different value types "
                f"({', '.join(sorted(str(d) for d in stored))}); give it a spec"
            )
        dtype = NP_DTYPES[fs.dtype] if fs is not None else (
            stored.pop() if stored else rows[0].dtype)
        vals = np.concatenate(rows).astype(dtype, copy=False)
        out[name] = Ragged(vals, lengths)
    return out


def decode_records(records: Sequence[RecordBytes], spec: Spec, family: str,
                   out: dict[str, np.ndarray] | None = None) -> Decoded:
    """Batched Example / OFRecord decoding (see :func:`decode_batch`)."""
    walker, kinds, allowed, what = _FAMILIES[family]
    nspec = normalize_spec(spec, allowed, what)
    bufs = cast("list[bytes]", list(records))  # made all bytes on the next line if need be
    if set(map(type, bufs)) - {bytes}:
        bufs = [as_bytes(r) for r in bufs]
    n = len(bufs)
    if out:
        _check_out(out, nspec, n)
    union = nspec is None
    walked_all: list[Walked] | None = None
    if nspec is None:
        walked_all = [_walk(b, walker, what, i) for i, b in enumerate(bufs)]
        names: dict[Any, None] = {}
        for located in walked_all:
            names.update(dict.fromkeys(located))
        nspec = dict.fromkeys(names)
    if n == 0:
        return {name: (np.empty((0, *fs.shape), NP_DTYPES[fs.dtype])
                       if isinstance(fs, FixedLen) else
                       Ragged(np.empty(0, NP_DTYPES[fs.dtype if fs else FLOAT32]), []))
                for name, fs in nspec.items()}
    groups: defaultdict[int, list[int]] = defaultdict(list)
    if n >= 2:
        lengths = list(map(len, bufs))
        if min(lengths) == max(lengths):
            groups[lengths[0]] = list(range(n))
        else:
            for i, length in enumerate(lengths):
                groups[length].append(i)
    parts: list[tuple[list[int], dict[Any, Column]]] = []
    done: set[int] = set()
    if groups and len(groups) <= max(1, n // 8):
        for idx in groups.values():
            if len(idx) < 2:
                continue
            gbufs = bufs if len(idx) == n else [bufs[i] for i in idx]
            try:
                located0 = walker(gbufs[0])
            except WireError:
                continue  # malformed: the per-record path below reports it properly
            targets = out if len(idx) == n else None  # one group: fill the caller's arrays
            res = decode_group(gbufs, located0, nspec, kinds, targets) if not union else None
            if res is not None:
                parts.append((idx, res))
                done.update(idx)
    rest = [] if len(done) == n else [i for i in range(n) if i not in done]
    if rest and not union:
        rbufs = bufs if len(rest) == n else [bufs[i] for i in rest]
        fast = decode_located(rbufs, nspec, family)
        if fast is not None:
            picked, columns = fast
            parts.append(([rest[i] for i in picked], columns))
            taken = set(picked)
            rest = [r for i, r in enumerate(rest) if i not in taken]
    if rest:
        rbufs = [bufs[i] for i in rest]
        parsed = (decode_parsed(rbufs, nspec, family)
                  if not union and len(rest) >= _PARSED_MIN and eligible(nspec) else None)
        if parsed is not None:
            parts.append((rest, parsed))
            rest = []
    if rest:
        rbufs = [bufs[i] for i in rest]
        walked = ([walked_all[i] for i in rest] if walked_all is not None else
                  [_walk(b, walker, what, i) for i, b in zip(rest, rbufs, strict=True)])
        parts.append((rest, _per_record(rbufs, rest, walked, nspec, kinds, what, union)))
    parts.sort(key=lambda p: p[0][0])
    result = _assemble(n, nspec, parts)
    for name, target in (out or {}).items():
        if result[name].ctypes.data != target.ctypes.data:  # not already written in place
            np.copyto(target, result[name])
        result[name] = target
    return result


def decode_records_packed(records: Sequence[RecordBytes], spec: Spec, family: str,
                          out: dict[str, np.ndarray],
                          buffer: Callable[[str, int], np.ndarray],
                          spans: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                          ) -> Decoded | None:
    """:func:`decode_records` with ``bytes`` features given as ``Ragged(uint8 buffer,
    lengths)``, each buffer from ``buffer(name, size)`` and filled straight from the records,
    when every record is laid out as writers lay them out and matches the spec; else
    ``None`` (decode with :func:`decode_records`, then pack).

    Args:
        records: The serialized records.
        spec: The spec (only ``FixedLen`` features qualify).
        family: ``"example"`` or ``"ofrecord"``.
        out: Arrays to decode numeric features into, by name.
        buffer: Gives the buffer of a ``bytes`` feature's values.
        spans: ``(which, starts, ends)``: ``records`` are then buffers (e.g. memory maps)
            and record ``i`` is ``records[which[i]][starts[i]:ends[i]]``.

    Returns:
        The decoded batch, or ``None``.

    Raises:
        ValueError: ``out`` does not fit the batch or the spec.
    """
    _, _, allowed, what = _FAMILIES[family]
    nspec = normalize_spec(spec, allowed, what)
    bufs = cast("list[bytes]", list(records))
    if spans is None and set(map(type, bufs)) - {bytes}:
        return None
    if out:
        _check_out(out, nspec, len(bufs) if spans is None else len(spans[0]))
    return decode_packed(bufs, nspec, family, out, buffer, spans)


def _check_out(out: dict[str, np.ndarray], spec: NormalizedSpec | None, n: int) -> None:
    """``out`` may hold, for FixedLen features, arrays of exactly the batch's shape and dtype."""
    for name, arr in out.items():
        fs = spec.get(name) if spec is not None else None
        if not isinstance(fs, FixedLen):
            raise ValueError(f"out[{name!r}]: only FixedLen features of the spec can be decoded "
                             "into a given array")
        want = ((n, *fs.shape), np.dtype(NP_DTYPES[fs.dtype]))
        if not isinstance(arr, np.ndarray) or (arr.shape, arr.dtype) != want \
                or not arr.flags.writeable or not arr.flags.c_contiguous:
            got = (f"{arr.shape} {arr.dtype}" if isinstance(arr, np.ndarray)
                   else type(arr).__name__)
            raise ValueError(f"out[{name!r}]: need a writable C-contiguous array of shape "
                             f"{want[0]} and dtype {want[1]} for this batch, got {got}")


def _walk(buf: bytes, walker: Callable[[bytes], Walked], what: str, i: int) -> Walked:
    try:
        return walk(buf, walker, what)
    except DecodeError as exc:
        raise DecodeError(f"record {i}: {exc}") from None
