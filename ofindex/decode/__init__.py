"""Decode Example, SequenceExample and OFRecord records to numpy arrays.

Single records::

    decode_example(data, spec=None) -> {name: array}
    decode_sequence_example(data, context_spec=None, sequence_spec=None) -> (ctx, lists)
    decode_ofrecord(data, spec=None) -> {name: array}

Batches (dense ``(batch, *shape)`` for :class:`FixedLen`, :class:`Ragged` otherwise)::

    decode_batch(records, spec=None, kind="example") -> {name: array | Ragged}

Picklable callables for ``ofindex.open(..., decode=...)`` and PyTorch ``collate_fn``::

    Decoder(spec, kind="example")(data)          # one record
    BatchDecoder(spec, kind="example")(records)  # a list of records

Packed numeric lists go to numpy without a Python object per value, and the result always
equals what protobuf's own parser gives. Big outputs reuse memory that earlier outputs
released (:func:`memory_pool` bounds it). Errors are :class:`ofindex.errors.DecodeError`
naming the feature.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ofindex.decode._memory import memory_pool
from ofindex.decode.batch import decode_records
from ofindex.decode.example import (
    EXAMPLE_DTYPES,
    OFRECORD_DTYPES,
    decode_example,
    decode_example_normalized,
    decode_ofrecord,
    decode_ofrecord_normalized,
    from_message,
)
from ofindex.decode.pretty import format_decoded
from ofindex.decode.sequence import decode_sequence_batch, decode_sequence_example
from ofindex.decode.spec import FixedLen, Ragged, VarLen, normalize_dtype, normalize_spec
from ofindex.errors import DecodeError

KINDS = ("example", "sequence_example", "ofrecord")
_KIND_ALIASES = {
    "example": "example", "tfrecord": "example", "tf.train.example": "example",
    "sequence_example": "sequence_example", "sequenceexample": "sequence_example",
    "sequence": "sequence_example", "ofrecord": "ofrecord", "oneflow": "ofrecord",
}


def _kind(kind: str) -> str:
    try:
        return _KIND_ALIASES[str(kind).lower()]
    except KeyError:
        raise ValueError(f"unknown record kind {kind!r}: use one of {', '.join(KINDS)}") from None


def decode_batch(
    records: Sequence[Any],
    spec: Any = None,
    kind: str = "example",
    *,
    context_spec: Any = None,
    sequence_spec: Any = None,
    out: dict[str, np.ndarray] | None = None,
) -> Any:
    """Decode a list of serialized records into batched arrays.

    For ``kind="example"``/``"ofrecord"`` returns ``{name: value}`` where a FixedLen
    feature is one array ``(len(records), *shape)`` and a VarLen feature (or one without a
    spec) is ``Ragged(values, row_lengths)``. For ``kind="sequence_example"`` returns
    ``(context, feature_lists)`` (see :func:`decode_sequence_batch`); ``spec`` may then be
    a ``(context_spec, sequence_spec)`` pair instead of the keyword arguments.

    ``out={name: array}`` decodes FixedLen features into arrays you own (exactly
    ``(len(records), *shape)``, the spec's dtype, C-contiguous), e.g. buffers reused from
    batch to batch or pinned memory for a GPU copy; the result holds those same arrays.
    Reusing one array skips the fresh-memory page faults that dominate big batches.
    Without ``out=``, big outputs (4 MiB or more) are made on memory that earlier outputs
    released once nothing referred to them any more (see :func:`memory_pool`), which skips
    most of those page faults too.
    """
    k = _kind(kind)
    if k == "sequence_example":
        if out:
            raise ValueError("out= is supported for kind='example' and 'ofrecord'")
        if spec is not None:
            context_spec, sequence_spec = spec
        return decode_sequence_batch(records, context_spec, sequence_spec)
    return decode_records(records, spec, k, out)


class Decoder:
    """A picklable per-record decoder: ``Decoder(spec, kind)(data) -> dict``.

    ``kind="sequence_example"`` returns ``(context, feature_lists)``; give its specs as
    ``context_spec=``/``sequence_spec=`` (or ``spec=(context_spec, sequence_spec)``).
    :meth:`batch` decodes a list of records at once (see :func:`decode_batch`).
    """

    def __init__(self, spec: Any = None, kind: str = "example", *,
                 context_spec: Any = None, sequence_spec: Any = None) -> None:
        self.kind = _kind(kind)
        if self.kind == "sequence_example" and spec is not None:
            context_spec, sequence_spec = spec
            spec = None
        if self.kind != "sequence_example" and (context_spec or sequence_spec):
            raise ValueError("context_spec/sequence_spec only apply to kind='sequence_example'")
        self.spec = dict(spec) if hasattr(spec, "items") else (
            list(spec) if spec is not None else None)
        self.context_spec = context_spec
        self.sequence_spec = sequence_spec
        # validate now rather than at the first record, and only once
        allowed = OFRECORD_DTYPES if self.kind == "ofrecord" else EXAMPLE_DTYPES
        what = {"example": "Example", "ofrecord": "OFRecord"}.get(self.kind, "SequenceExample")
        self._nspec = normalize_spec(self.spec, allowed, what)
        normalize_spec(self.context_spec, allowed, what)
        normalize_spec(self.sequence_spec, allowed, what)

    def __call__(self, data: Any) -> Any:
        if self.kind == "example":
            return decode_example_normalized(data, self._nspec)
        if self.kind == "ofrecord":
            return decode_ofrecord_normalized(data, self._nspec)
        return decode_sequence_example(data, self.context_spec, self.sequence_spec)

    def batch(self, records: Sequence[Any], out: dict[str, np.ndarray] | None = None) -> Any:
        """Decode a list of records at once (``out=``: see :func:`decode_batch`)."""
        if self.kind == "sequence_example":
            if out:
                raise ValueError("out= is supported for kind='example' and 'ofrecord'")
            return decode_sequence_batch(records, self.context_spec, self.sequence_spec)
        return decode_records(records, self.spec, self.kind, out)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(self) == vars(other)

    def __repr__(self) -> str:
        if self.kind == "sequence_example":
            return (f"{type(self).__name__}(kind='sequence_example', "
                    f"context_spec={self.context_spec!r}, sequence_spec={self.sequence_spec!r})")
        return f"{type(self).__name__}({self.spec!r}, kind={self.kind!r})"


class BatchDecoder(Decoder):
    """Like :class:`Decoder`, but called with a list of records (a ``collate_fn``)."""

    def __call__(self, records: Sequence[Any],  # type: ignore[override]
                 out: dict[str, np.ndarray] | None = None) -> Any:
        return self.batch(records, out)


__all__ = [
    "BatchDecoder", "DecodeError", "Decoder", "FixedLen", "Ragged", "VarLen",
    "decode_batch", "decode_example", "decode_ofrecord", "decode_sequence_batch",
    "decode_sequence_example", "format_decoded", "from_message", "memory_pool", "normalize_dtype",
]
