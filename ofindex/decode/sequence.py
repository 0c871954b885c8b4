"""Decode ``tf.train.SequenceExample`` records: context features + feature lists."""

from collections.abc import Sequence
from typing import Any

import numpy as np

from ofindex.decode._values import EXAMPLE_KINDS, FLOAT32, NP_DTYPES, bytes_array, empty
from ofindex.decode._walk import Located, walk_sequence_example
from ofindex.decode._wire import as_bytes
from ofindex.decode.example import (
    EXAMPLE_DTYPES,
    Decoded,
    RecordBytes,
    check_kind,
    convert,
    decode_features,
    walk,
)
from ofindex.decode.spec import FeatureSpec, FixedLen, Ragged, Spec, VarLen, normalize_spec
from ofindex.errors import DecodeError

_WHAT = "SequenceExample"
_CTX = "SequenceExample context"
_SEQ = "SequenceExample feature list"


def _concat(parts: list[np.ndarray], dtype: np.dtype[Any],
            inner_shape: tuple[int, ...] = ()) -> np.ndarray:
    if np.dtype(dtype).kind == "O":
        flat = bytes_array([x for p in parts for x in p.reshape(-1)])
        return flat.reshape(-1, *inner_shape)
    if not parts:
        return np.empty((0, *inner_shape), dtype)
    return np.concatenate(parts).astype(dtype, copy=False)


def _feature_list(buf: bytes, name: str, steps: list[Located] | None,
                  fs: FeatureSpec) -> np.ndarray | Ragged:
    """One feature list -> (T, *shape) array for FixedLen, Ragged otherwise."""
    if steps is None:
        if isinstance(fs, VarLen):
            return Ragged(empty(fs.dtype), np.zeros(0, np.int64))
        if isinstance(fs, FixedLen) and fs.allow_missing:
            return np.empty((0, *fs.shape), NP_DTYPES[fs.dtype])
        raise DecodeError(
            f"feature list {name!r} is missing from the SequenceExample "
            "(use VarLen, or FixedLen(..., allow_missing=True))"
        )
    if fs is None:
        stored = {EXAMPLE_KINDS[s.kind] for s in steps if s.kind in EXAMPLE_KINDS}
        if len(stored) > 1:
            raise DecodeError(
                f"feature list {name!r}: steps store different value types "
                f"({', '.join(sorted(stored))}); give it a spec"
            )
        vtype = stored.pop() if stored else FLOAT32
        fs_step: Any = VarLen(vtype)
    else:
        vtype = fs.dtype
        fs_step = fs
    rows = []
    for t, loc in enumerate(steps):
        try:
            check_kind(name, EXAMPLE_KINDS.get(loc.kind), vtype, _SEQ)
            rows.append(convert(buf, name, loc, fs_step, EXAMPLE_KINDS, _SEQ, copy=False))
        except DecodeError as exc:
            raise DecodeError(f"{exc} (step {t})") from None
    dtype = NP_DTYPES[vtype]
    if isinstance(fs, FixedLen):
        if not rows:
            return np.empty((0, *fs.shape), dtype)
        if dtype.kind == "O":
            return _concat(rows, dtype, fs.shape)
        return np.stack(rows).astype(dtype, copy=False)
    lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
    return Ragged(_concat(rows, dtype), lengths)


def decode_sequence_example(
    data: RecordBytes, context_spec: Spec = None, sequence_spec: Spec = None
) -> tuple[Decoded, Decoded]:
    """Decode a serialized ``tf.train.SequenceExample`` to ``(context, feature_lists)``.

    Args:
        data: The serialized record (``bytes``, ``bytearray``, ``memoryview`` or anything
            ``bytes()`` accepts).
        context_spec: Spec of the context features, as for :func:`decode_example`
            (``None``: every context feature as stored).
        sequence_spec: Spec of the feature lists (``None``: every list as stored).
            ``FixedLen(..., allow_missing=True)`` lets a missing list decode to zero steps.

    Returns:
        ``(context, feature_lists)``. ``context`` is decoded like :func:`decode_example`.
        Each feature list is an array ``(steps, *shape)`` for ``FixedLen`` (every step
        must hold ``shape``'s number of values), or a :class:`Ragged`
        ``(values, row_lengths)`` with one row per step for ``VarLen`` and for lists
        without a spec.

    Raises:
        DecodeError: ``data`` is not bytes or not a valid serialized SequenceExample, a
            feature or feature list does not match its spec (the message names it and,
            for lists, the step), or a list without a spec mixes value types.
        ValueError: A spec dtype is not one an Example stores (bytes, float32, int64).
        TypeError: A spec entry is not ``FixedLen(...)``, ``VarLen(...)`` or ``None``.
    """
    cspec = normalize_spec(context_spec, EXAMPLE_DTYPES, _WHAT)
    sspec = normalize_spec(sequence_spec, EXAMPLE_DTYPES, _WHAT)
    buf = as_bytes(data)
    context, lists = walk(buf, walk_sequence_example, _WHAT)
    ctx = decode_features(buf, context, cspec, EXAMPLE_KINDS, _CTX)
    if sspec is None:
        seq = {name: _feature_list(buf, name, steps, None) for name, steps in lists.items()}
    else:
        seq = {name: _feature_list(buf, name, lists.get(name), fs)
               for name, fs in sspec.items()}
    return ctx, seq


def _stack_context(name: str, fs: FeatureSpec, values: list[np.ndarray]) -> np.ndarray | Ragged:
    if isinstance(fs, FixedLen):
        shape = (len(values), *fs.shape)
        if fs.dtype == "bytes":
            return bytes_array([x for v in values for x in v.reshape(-1)]).reshape(shape)
        return np.stack(values) if values else np.empty(shape, NP_DTYPES[fs.dtype])
    dtypes = {v.dtype for v in values if len(v)}
    if len(dtypes) > 1:
        raise DecodeError(f"feature {name!r}: records store different value types; "
                          "give it a spec")
    dtype = NP_DTYPES[fs.dtype] if fs is not None else (
        dtypes.pop() if dtypes else np.dtype(np.float32))
    lengths = np.fromiter((len(v) for v in values), np.int64, len(values))
    return Ragged(_concat(values, dtype), lengths)


def _stack_list(name: str, fs: FeatureSpec, values: list[Any]) -> Ragged:
    """Per-record feature lists (arrays for FixedLen, Ragged otherwise) -> one Ragged."""
    lengths = np.fromiter((len(v) for v in values), np.int64, len(values))
    if isinstance(fs, FixedLen):
        dtype = NP_DTYPES[fs.dtype]
        return Ragged(_concat(values, dtype, fs.shape), lengths)
    dtypes = {v.values.dtype for v in values if len(v.values)}
    if len(dtypes) > 1:
        raise DecodeError(f"feature list {name!r}: records store different value types; "
                          "give it a spec")
    dtype = NP_DTYPES[fs.dtype] if fs is not None else (
        dtypes.pop() if dtypes else np.dtype(np.float32))
    inner = Ragged(_concat([v.values for v in values], dtype),
                   np.concatenate([v.row_lengths for v in values]) if values else [])
    return Ragged(inner, lengths)


def decode_sequence_batch(
    records: Sequence[RecordBytes], context_spec: Spec = None, sequence_spec: Spec = None
) -> tuple[Decoded, Decoded]:
    """Decode a list of serialized ``tf.train.SequenceExample`` records into batches.

    Args:
        records: The serialized records.
        context_spec: Spec of the context features (``None``: all, as stored).
        sequence_spec: Spec of the feature lists (``None``: all, as stored).

    Returns:
        ``(context, feature_lists)``. Context features are batched like Examples: an array
        ``(batch, *shape)`` for ``FixedLen``, a :class:`Ragged` with one row per record
        otherwise. Each feature list is a :class:`Ragged` with one row per record whose
        values are ``(total steps, *shape)`` for ``FixedLen``, and otherwise themselves a
        :class:`Ragged` with one row per step.

    Raises:
        DecodeError: A record cannot be decoded (the message starts with ``record i:``),
            or records store a feature without a spec as different value types.
        ValueError: A spec dtype is not one an Example stores (bytes, float32, int64).
        TypeError: A spec entry is not ``FixedLen(...)``, ``VarLen(...)`` or ``None``.
    """
    cspec = normalize_spec(context_spec, EXAMPLE_DTYPES, _WHAT)
    sspec = normalize_spec(sequence_spec, EXAMPLE_DTYPES, _WHAT)
    decoded = []
    for i, rec in enumerate(records):
        try:
            ctx, seq = decode_sequence_example(rec, cspec, sspec)
        except DecodeError as exc:
            raise DecodeError(f"record {i}: {exc}") from None
        decoded.append((ctx, seq))
    cnames = cspec if cspec is not None else dict.fromkeys(
        name for ctx, _ in decoded for name in ctx)
    snames = sspec if sspec is not None else dict.fromkeys(
        name for _, seq in decoded for name in seq)
    ctx_out = {}
    for name, fs in cnames.items():
        vals = [ctx.get(name, np.empty(0, np.float32)) for ctx, _ in decoded]
        ctx_out[name] = _stack_context(name, fs, vals)
    seq_out = {}
    for name, fs in snames.items():
        vals = [seq.get(name, Ragged(np.empty(0, np.float32), [])) for _, seq in decoded]
        seq_out[name] = _stack_list(name, fs, vals)
    return ctx_out, seq_out
