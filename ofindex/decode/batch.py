"""Batched decoding: a list of serialized records -> dense stacked arrays and Ragged pairs.

``FixedLen`` features become one array ``(batch, *shape)``; ``VarLen`` features (and
features without a spec) become :class:`Ragged` ``(values, row_lengths)``. Records that
share a byte layout (the usual case: one writer, same features) are decoded together with
numpy (see :mod:`ofindex.decode._template`). Records whose layouts differ only where a
value's length does (a JPEG of another size each) are located in compiled code and their
values read straight out, ``FixedLen`` and ``VarLen`` features alike (see
:mod:`ofindex.decode._located`). The others go record by record, through protobuf's compiled
parser where they plainly fit the spec (see :mod:`ofindex.decode._protobuf`), else by the
careful walk that also words the errors.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from ofindex.decode._located import decode_located, decode_packed
from ofindex.decode._located import eligible as located_eligible
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
    kind_hint,
    walk,
)
from ofindex.decode.spec import (
    FixedLen,
    NormalizedSpec,
    Ragged,
    Spec,
    check_batch_room,
    normalize_spec,
)
from ofindex.errors import DecodeError

#: The fewest records of one byte length decoded as a group by their template when the
#: compiled ``LOCATED`` stage could take them instead: a template costs ~0.1 ms a group (one
#: record walked in Python, the layout checked), ``locate`` ~2 us a record; 10,000 Examples
#: with token lists fell into 576 groups of 2 to 60 and took 70 ms through their templates,
#: 32 ms located. Big uniform groups stay with their templates, which copy big payloads on
#: two threads (256 records of 150,528 floats: 1.9 ms a batch, 4.1 ms located).
_TEMPLATE_MIN_LOCATED = 64

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
            check_batch_room(name, fs, bufs, idx[0] if idx else None)
            arr = np.empty((len(bufs), *fs.shape), NP_DTYPES[fs.dtype])
            for j, (buf, located) in enumerate(zip(bufs, walked, strict=True)):
                try:
                    # [j, ...]: a 0-d bytes value is stored as its bytes, not as an array
                    arr[j, ...] = convert(buf, name, located.get(name), fs, kinds, what,
                                          copy=False)
                except DecodeError as exc:
                    raise DecodeError(
                        f"record {idx[j]}: {kind_hint(exc, located, what, names)}") from None
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
                hinted = kind_hint(exc, located, what, names)
                raise DecodeError(f"record {idx[j]}: {hinted}") from None
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
        lengths = np.zeros(n, np.int64)
        for idx, res in parts:
            lengths[idx] = res[name][2]
        stored = {res[name][1].dtype for _, res in parts if len(res[name][1])}
        if len(stored) > 1:
            raise DecodeError(
                f"feature {name!r}: records store different value types "
                f"({', '.join(sorted(str(d) for d in stored))}); give it a spec"
            )
        dtype = NP_DTYPES[fs.dtype] if fs is not None else (
            stored.pop() if stored else parts[0][1][name][1].dtype)  # record 0's part
        starts = np.cumsum(lengths) - lengths
        vals = np.empty(int(lengths.sum()), dtype)
        for idx, res in parts:  # each part's values moved to its records' places
            _, part, lens = res[name]
            if len(part):
                moved = np.repeat(starts[idx] - (np.cumsum(lens) - lens), lens)
                vals[moved + np.arange(len(part))] = part
        out[name] = Ragged(vals, lengths)
    return out


class DecodeStage(enum.Enum):
    """The ways a batch's records are decoded, tried in this order on the records the earlier
    stages left (the choice is :func:`decode_stages`):

    ``TEMPLATE``: records of one byte length (one writer, same features), grouped when there
    are few lengths (at most one per 8 records): one record is walked and its layout applied
    to the whole group with numpy (:mod:`._template`; MNIST-like batches at ~1.3 M records/s).

    ``LOCATED``: each record laid out as writers lay them out located in compiled code and
    its values read straight out, a feature at a time (:mod:`._located`; a JPEG of another
    size each, token lists of other lengths).

    ``PARSED``: at least two records left and a spec that plainly fits protobuf's types:
    protobuf's compiled parser, record by record (:mod:`._protobuf`).

    ``PER_RECORD``: the careful walk, record by record, which also words the errors (and the
    only stage without a spec).
    """

    TEMPLATE = "template"
    LOCATED = "located"
    PARSED = "parsed"
    PER_RECORD = "per-record"


def decode_stages(spec_given: bool, spec: NormalizedSpec) -> list[DecodeStage]:
    """The stages to try, in order, for a batch decoded with (``spec_given``) or without a
    spec (then only the walk can tell each record's features and types)."""
    if not spec_given:
        return [DecodeStage.PER_RECORD]
    stages = [DecodeStage.TEMPLATE, DecodeStage.LOCATED]
    if eligible(spec):
        stages.append(DecodeStage.PARSED)
    return [*stages, DecodeStage.PER_RECORD]


class _Batch:
    """One batch being decoded: its records, spec and family, and its parts decoded so far."""

    def __init__(self, bufs: list[bytes], spec: NormalizedSpec, family: str,
                 out: dict[str, np.ndarray] | None, walked: list[Walked] | None) -> None:
        self.bufs, self.spec, self.family, self.out = bufs, spec, family, out
        self.walker, self.kinds, _, self.what = _FAMILIES[family]
        self.walked = walked  # every record walked already (decoding without a spec)
        self.parts: list[tuple[list[int], dict[Any, Column]]] = []

    def take(self, rest: list[int], picked: list[int], columns: dict[Any, Column]) -> list[int]:
        """Keep ``columns`` decoded for the records ``picked`` of ``rest``; the others."""
        self.parts.append((picked, columns))
        if len(picked) == len(rest):
            return []
        taken = set(picked)
        return [r for r in rest if r not in taken]

    def some(self, rest: list[int]) -> list[bytes]:
        """The records ``rest`` (all of them without a copy)."""
        return self.bufs if len(rest) == len(self.bufs) else [self.bufs[i] for i in rest]


def _by_template(batch: _Batch, rest: list[int]) -> list[int]:
    """:attr:`DecodeStage.TEMPLATE` (see there)."""
    smallest = _TEMPLATE_MIN_LOCATED if located_eligible(batch.spec, batch.family) else 2
    for group in _layout_groups(batch.bufs, max(1, len(batch.bufs) // 8), smallest):
        records = batch.some(group)
        try:
            first = batch.walker(records[0])
        except WireError:
            continue  # malformed: the per-record walk reports it properly
        targets = batch.out if len(group) == len(batch.bufs) else None  # fill the caller's
        columns = decode_group(records, first, batch.spec, batch.kinds, targets)  # arrays
        if columns is not None:
            rest = batch.take(rest, group, columns)
    return rest


def _layout_groups(bufs: list[bytes], most: int, smallest: int = 2) -> list[list[int]]:
    """The records grouped by byte length, groups of ``smallest`` records or more; none for a
    batch of one or of more than ``most`` lengths."""
    if len(bufs) < 2:
        return []
    sizes = list(map(len, bufs))
    distinct = set(sizes)  # a batch of too many lengths is left before any numpy call (256
    # token lists: 9 us, 26 us sorting them first; 10,000 Examples of 8 features: 4.0 ms,
    # 5.1 ms through numpy.fromiter, on the loaded 2-core VM)
    if len(distinct) == 1:
        return [list(range(len(bufs)))]
    if len(bufs) < smallest or len(distinct) > most:
        return []
    lengths = np.array(sizes, np.int64)
    # one stable sort gives the records of each length, in their order (np.unique with its
    # inverse and counts took 17 % of a batch of 256 token lists of 256 lengths); lengths
    # below 2**16 as uint16, which numpy sorts stably by radix (10,000 records: 0.05 ms,
    # 0.46 ms its merge sort of int64)
    order = np.argsort(lengths.astype(np.uint16) if max(distinct) < 1 << 16 else lengths,
                       kind="stable")
    bounds = np.flatnonzero(np.diff(lengths[order], prepend=-1, append=-1))
    big = np.flatnonzero(np.diff(bounds) >= smallest).tolist()
    return [order[bounds[g]:bounds[g + 1]].tolist() for g in big]


def _by_location(batch: _Batch, rest: list[int]) -> list[int]:
    """:attr:`DecodeStage.LOCATED` (see there)."""
    targets = batch.out if len(rest) == len(batch.bufs) else None
    fast = decode_located(batch.some(rest), batch.spec, batch.family, targets)
    if fast is None:
        return rest
    picked, columns = fast
    return batch.take(rest, rest if len(picked) == len(rest) else [rest[i] for i in picked],
                      columns)


def _by_protobuf(batch: _Batch, rest: list[int]) -> list[int]:
    """:attr:`DecodeStage.PARSED` (see there)."""
    if len(rest) < _PARSED_MIN:
        return rest
    parsed = decode_parsed(batch.some(rest), batch.spec, batch.family)
    return rest if parsed is None else batch.take(rest, rest, parsed)


def _by_walk(batch: _Batch, rest: list[int]) -> list[int]:
    """:attr:`DecodeStage.PER_RECORD` (see there)."""
    records = batch.some(rest)
    walked = ([batch.walked[i] for i in rest] if batch.walked is not None else
              [_walk(b, batch.walker, batch.what, i) for i, b in zip(rest, records, strict=True)])
    columns = _per_record(records, rest, walked, batch.spec, batch.kinds, batch.what,
                          batch.walked is not None)
    return batch.take(rest, rest, columns)


_STAGES: dict[DecodeStage, Callable[[_Batch, list[int]], list[int]]] = {
    DecodeStage.TEMPLATE: _by_template,
    DecodeStage.LOCATED: _by_location,
    DecodeStage.PARSED: _by_protobuf,
    DecodeStage.PER_RECORD: _by_walk,
}


def decode_records(records: Sequence[RecordBytes], spec: Spec, family: str,
                   out: dict[str, np.ndarray] | None = None) -> Decoded:
    """Batched Example / OFRecord decoding (see :func:`decode_batch`): the stages of
    :func:`decode_stages`, each on the records the ones before it left."""
    walker, _, allowed, what = _FAMILIES[family]
    given = normalize_spec(spec, allowed, what)
    bufs = cast("list[bytes]", list(records))  # made all bytes on the next line if need be
    if set(map(type, bufs)) - {bytes}:
        bufs = [as_bytes(r) for r in bufs]
    n = len(bufs)
    if out:
        _check_out(out, given, n)
    walked = None
    if given is None:  # every record walked: the spec is the union of their features
        walked = [_walk(b, walker, what, i) for i, b in enumerate(bufs)]
        names: dict[Any, None] = {}
        for located in walked:
            names.update(dict.fromkeys(located))
    nspec: NormalizedSpec = given if given is not None else dict.fromkeys(names)
    if n == 0:
        return _empty_batch(nspec)
    batch = _Batch(bufs, nspec, family, out, walked)
    rest = list(range(n))
    for stage in decode_stages(given is not None, nspec):
        rest = _STAGES[stage](batch, rest)
        if not rest:
            break
    batch.parts.sort(key=lambda p: p[0][0])
    result = _assemble(n, nspec, batch.parts)
    for name, target in (out or {}).items():
        if result[name].ctypes.data != target.ctypes.data:  # not already written in place
            np.copyto(target, result[name])
        result[name] = target
    return result


def _empty_batch(spec: NormalizedSpec) -> Decoded:
    """The outputs of a batch of no record."""
    return {name: (np.empty((0, *fs.shape), NP_DTYPES[fs.dtype])
                   if isinstance(fs, FixedLen) else
                   Ragged(np.empty(0, NP_DTYPES[fs.dtype if fs else FLOAT32]), []))
            for name, fs in spec.items()}


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
