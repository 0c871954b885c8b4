"""Decode Example, SequenceExample and OFRecord records to numpy arrays.

Single records::

    decode_example(data, spec=None) -> {name: array}
    decode_sequence_example(data, context_spec=None, sequence_spec=None) -> (ctx, lists)
    decode_ofrecord(data, spec=None) -> {name: array}

Batches (dense ``(batch, *shape)`` for :class:`FixedLen`, :class:`Ragged` otherwise)::

    decode_batch(records, spec=None, kind="example") -> {name: array | Ragged}

Picklable callables for ``ofindex.open(..., decode=...)`` and PyTorch ``collate_fn``::

    Decoder(spec)(data)           # one record (kind: "example" unless given or bound)
    BatchDecoder(spec)(records)   # a list of records

Without ``kind``, a decoder given to ``ofindex.open(..., decode=...)`` or to an integration
decodes the records as what the dataset's framing holds: OFRecord files as OFRecords.

Packed numeric lists go to numpy without a Python object per value, and the result always
equals what protobuf's own parser gives. Big outputs reuse memory that earlier outputs
released (:func:`memory_pool` bounds it). Errors are :class:`ofindex.errors.DecodeError`
naming the feature.
"""

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from ofindex.decode._memory import memory_pool
from ofindex.decode._plans import OneRecord, RecordCall, rebuilt, record_plan
from ofindex.decode.batch import decode_records
from ofindex.decode.example import (
    EXAMPLE_DTYPES,
    OFRECORD_DTYPES,
    Decoded,
    RecordBytes,
    decode_example,
    decode_ofrecord,
    decode_one,
    from_message,
)
from ofindex.decode.pretty import format_decoded
from ofindex.decode.sequence import decode_sequence_batch, decode_sequence_example
from ofindex.decode.spec import (
    FixedLen,
    Ragged,
    Spec,
    VarLen,
    normalize_dtype,
    normalize_spec,
)
from ofindex.errors import DecodeError

KINDS = ("example", "sequence_example", "ofrecord")
_KIND_ALIASES = {
    "example": "example", "tfrecord": "example", "tf.train.example": "example",
    "sequence_example": "sequence_example", "sequenceexample": "sequence_example",
    "sequence": "sequence_example", "ofrecord": "ofrecord", "oneflow": "ofrecord",
}
_NO_OUT = "out= is supported for kind='example' and 'ofrecord'"

#: What a decoder returns: ``{name: value}``, or ``(context, feature_lists)`` for
#: ``kind="sequence_example"``.
DecodeResult = Decoded | tuple[Decoded, Decoded]


def _kind(kind: str) -> str:
    try:
        return _KIND_ALIASES[str(kind).lower()]
    except KeyError:
        raise ValueError(f"unknown record kind {kind!r}: use one of {', '.join(KINDS)}") from None


def _pair(spec: Any) -> tuple[Spec, Spec]:
    """``spec`` given as a ``(context_spec, sequence_spec)`` pair.

    Raises:
        ValueError: ``spec`` is not such a pair (a mapping of features, whose names would
            otherwise be taken for the two specs).
    """
    if isinstance(spec, (tuple, list)) and len(spec) == 2 and not any(
            isinstance(part, (str, bytes)) for part in spec):
        return spec[0], spec[1]
    what = (f"a mapping of {len(spec)} features" if hasattr(spec, "items")
            else f"{type(spec).__name__} {spec!r:.60}")
    raise ValueError(
        f"for kind='sequence_example' give spec as a (context_spec, sequence_spec) pair, or "
        f"context_spec= and sequence_spec=, not {what} (ofindex.infer_spec's schema.decoder() "
        "builds the decoder for you)")


def decode_batch(
    records: Sequence[RecordBytes],
    spec: Spec | tuple[Spec, Spec] = None,
    kind: str = "example",
    *,
    context_spec: Spec = None,
    sequence_spec: Spec = None,
    out: dict[str, np.ndarray] | None = None,
) -> DecodeResult:
    """Decode a list of serialized records into batched arrays.

    Records that share a byte layout (one writer, same features: the usual case) are
    decoded together with numpy; the result always equals decoding them one by one.

    Args:
        records: The serialized records (``bytes``, ``bytearray``, ``memoryview``...).
        spec: The features to decode (see :mod:`ofindex.decode.spec`): a mapping
            ``{name: FixedLen | VarLen | None}``, a list of names, or ``None`` for every
            feature as stored. For ``kind="sequence_example"``, a
            ``(context_spec, sequence_spec)`` pair instead of the keyword arguments.
        kind: ``"example"``, ``"sequence_example"`` or ``"ofrecord"`` (aliases such as
            ``"tfrecord"`` and ``"oneflow"`` are accepted, in any case). Left out: the
            kind of the dataset the decoder is given to (``ofindex.open(..., decode=...)``,
            the integrations: ``"ofrecord"`` for OFRecord files), else ``"example"``.
        context_spec: For ``kind="sequence_example"``: the spec of the context features.
        sequence_spec: For ``kind="sequence_example"``: the spec of the feature lists.
        out: ``{name: array}`` to decode ``FixedLen`` features into arrays you own (exactly
            ``(len(records), *shape)``, the spec's dtype, writable and C-contiguous), e.g.
            buffers reused from batch to batch or pinned memory for a GPU copy; the result
            holds those same arrays. Without ``out=``, big outputs (4 MiB or more) are made
            on memory that earlier outputs released (see :func:`memory_pool`).

    Returns:
        For ``"example"``/``"ofrecord"``: ``{name: value}`` where a ``FixedLen`` feature is
        one array ``(len(records), *shape)`` and a ``VarLen`` feature (or one without a
        spec) is :class:`Ragged` ``(values, row_lengths)``. For ``"sequence_example"``:
        ``(context, feature_lists)`` as :func:`decode_sequence_batch` gives.

    Raises:
        DecodeError: A record cannot be decoded as asked (the message names the record
            and the feature), or records store a feature without a spec as different
            value types.
        ValueError: ``kind`` is unknown, a spec dtype is not one the kind stores, or
            ``out`` names a feature that is not ``FixedLen`` in ``spec``, holds an array
            of the wrong shape, dtype or layout, or is given for ``"sequence_example"``.
        TypeError: A spec entry is not ``FixedLen(...)``, ``VarLen(...)`` or ``None``.
    """
    k = _kind(kind)
    if k == "sequence_example":
        if out:
            raise ValueError(_NO_OUT)
        if spec is not None:
            context_spec, sequence_spec = _pair(spec)
        return decode_sequence_batch(records, context_spec, sequence_spec)
    return decode_records(records, cast(Spec, spec), k, out)


_D = TypeVar("_D", bound="_SpecDecoder")


class _SpecDecoder:
    """What :class:`Decoder` and :class:`BatchDecoder` share: the kind, the checked specs,
    :meth:`batch`, equality and repr."""

    def __init__(self, spec: Spec | tuple[Spec, Spec] = None, kind: str | None = None, *,
                 context_spec: Spec = None, sequence_spec: Spec = None) -> None:
        self.kind = _kind("example" if kind is None else kind)
        #: The kind was left to the dataset (see :meth:`for_framing`).
        self.kind_from_dataset = kind is None
        if self.kind == "sequence_example" and spec is not None:
            context_spec, sequence_spec = _pair(spec)
            spec = None
        if self.kind != "sequence_example" and (context_spec or sequence_spec):
            raise ValueError("context_spec/sequence_spec only apply to kind='sequence_example'")
        given: Any = spec
        self.spec: dict[str, Any] | list[str] | None = dict(given) if hasattr(
            given, "items") else (list(given) if given is not None else None)
        self.context_spec = context_spec
        self.sequence_spec = sequence_spec
        # validate now rather than at the first record, and only once
        allowed = OFRECORD_DTYPES if self.kind == "ofrecord" else EXAMPLE_DTYPES
        what = {"example": "Example", "ofrecord": "OFRecord"}.get(self.kind, "SequenceExample")
        self._nspec = normalize_spec(self.spec, allowed, what)
        normalize_spec(self.context_spec, allowed, what)
        normalize_spec(self.sequence_spec, allowed, what)

    def batch(self, records: Sequence[RecordBytes],
              out: dict[str, np.ndarray] | None = None) -> DecodeResult:
        """Decode a list of serialized records at once, as :func:`decode_batch` does.

        Args:
            records: The serialized records.
            out: ``{name: array}`` to decode ``FixedLen`` features into arrays you own
                (see :func:`decode_batch`); not for ``kind="sequence_example"``.

        Returns:
            ``{name: array | Ragged}``, or ``(context, feature_lists)`` for
            ``kind="sequence_example"`` (see :func:`decode_batch`).

        Raises:
            DecodeError: A record cannot be decoded as asked (the message names the record
                and the feature).
            ValueError: ``out`` does not fit the batch or the spec, or is given for
                ``kind="sequence_example"``.
        """
        if self.kind == "sequence_example":
            if out:
                raise ValueError(_NO_OUT)
            return decode_sequence_batch(records, self.context_spec, self.sequence_spec)
        return decode_records(records, self.spec, self.kind, out)

    def for_framing(self: "_D", framing: str) -> "_D":
        """This decoder for the records of a dataset of ``framing``.

        A decoder made without ``kind`` takes it from the dataset it is given to
        (``ofindex.open(..., decode=...)`` and every integration call this): OFRecord files
        hold OFRecord messages, TFRecord files Examples. A decoder made with a ``kind``
        keeps it.

        Args:
            framing: The dataset's record framing, ``"tfrecord"`` or ``"ofrecord"`` (any
                case; ``ds.format.name``).

        Returns:
            ``self``, or a decoder of the same spec with ``kind="ofrecord"``.
        """
        if self.kind_from_dataset and str(framing).lower() == "ofrecord":
            return type(self)(self.spec, "ofrecord")
        return self

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.__getstate__() == other.__getstate__()

    def __getstate__(self) -> dict[str, Any]:
        """What the decoder is made of: its kind and specs (not its compiled plan)."""
        return {name: value for name, value in vars(self).items() if name != "_plan"}

    def __repr__(self) -> str:
        if self.kind == "sequence_example":
            return (f"{type(self).__name__}(kind='sequence_example', "
                    f"context_spec={self.context_spec!r}, sequence_spec={self.sequence_spec!r})")
        return f"{type(self).__name__}({self.spec!r}, kind={self.kind!r})"


class Decoder(_SpecDecoder, RecordCall):
    """A picklable per-record decoder, e.g. for ``ofindex.open(..., decode=Decoder(spec))``.

    ``Decoder(spec, kind)(data)`` decodes one serialized record (``bytes``, ``bytearray``,
    ``memoryview``...) to ``{name: array}`` (see :func:`decode_example` /
    :func:`decode_ofrecord`), or ``(context, feature_lists)`` for
    ``kind="sequence_example"`` (see :func:`decode_sequence_example`), and raises
    :class:`~ofindex.errors.DecodeError` naming the feature when the record is not a valid
    one of the kind or a feature does not match its spec; :meth:`batch` decodes a list of
    records at once. The specs are checked when the decoder is made, not at the first
    record. Two decoders are equal when their kind and specs are.

    Args:
        spec: The features to decode (a mapping ``{name: FixedLen | VarLen | None}``, a
            list of names, or ``None`` for every feature as stored). For
            ``kind="sequence_example"``, a ``(context_spec, sequence_spec)`` pair may be
            given here instead of the keyword arguments.
        kind: ``"example"``, ``"sequence_example"`` or ``"ofrecord"`` (aliases such as
            ``"tfrecord"`` and ``"oneflow"`` are accepted, in any case). Left out: the
            kind of the dataset the decoder is given to (``ofindex.open(..., decode=...)``,
            the integrations: ``"ofrecord"`` for OFRecord files), else ``"example"``.
        context_spec: For ``kind="sequence_example"``: the spec of the context features.
        sequence_spec: For ``kind="sequence_example"``: the spec of the feature lists.

    Raises:
        ValueError: ``kind`` is unknown, a spec dtype is not one the kind stores, or
            ``context_spec``/``sequence_spec`` are given for another kind.
        TypeError: A spec entry is not ``FixedLen(...)``, ``VarLen(...)`` or ``None``.
    """

    def __init__(self, spec: Spec | tuple[Spec, Spec] = None, kind: str | None = None, *,
                 context_spec: Spec = None, sequence_spec: Spec = None) -> None:
        super().__init__(spec, kind, context_spec=context_spec, sequence_spec=sequence_spec)
        self._plan = self._compiled()

    def _compiled(self) -> OneRecord | None:
        """The compiled one-record decoder of the spec (see :mod:`ofindex.decode._plans`), or
        ``None``: every record goes the careful way. It is chosen when the decoder is made (or
        unpickled, e.g. in a DataLoader worker): without the compiled module
        (``OFINDEX_PURE_PYTHON=1``) there is none."""
        return None if self.kind == "sequence_example" else record_plan(self._nspec, self.kind)

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._plan = self._compiled()

    def __reduce__(self) -> tuple[Any, ...]:
        # (pickle's older protocols would rebuild the decoder through its compiled base)
        return rebuilt, (type(self),), self.__getstate__()

    if TYPE_CHECKING:  # the call itself is RecordCall's (no Python frame): its types
        def __call__(self, data: RecordBytes) -> DecodeResult: ...

    def _careful(self, data: RecordBytes) -> DecodeResult:
        """``self(data)`` on the careful path (the compiled plan gave ``None``)."""
        if self.kind == "sequence_example":
            return decode_sequence_example(data, self.context_spec, self.sequence_spec)
        return decode_one(data, self._nspec, self.kind, self._plan)


class BatchDecoder(_SpecDecoder):
    """Like :class:`Decoder`, but called with a list of records (a ``collate_fn``).

    ``BatchDecoder(spec, kind)(records)`` is ``Decoder(spec, kind).batch(records)``, e.g.
    ``DataLoader(..., collate_fn=BatchDecoder(spec))``.

    Args:
        spec: The features to decode, as for :class:`Decoder`.
        kind: ``"example"``, ``"sequence_example"`` or ``"ofrecord"`` (or an alias); left
            out: taken from the dataset, as for :class:`Decoder`.
        context_spec: For ``kind="sequence_example"``: the spec of the context features.
        sequence_spec: For ``kind="sequence_example"``: the spec of the feature lists.

    Raises:
        ValueError: ``kind`` is unknown, a spec dtype is not one the kind stores, or
            ``context_spec``/``sequence_spec`` are given for another kind.
        TypeError: A spec entry is not ``FixedLen(...)``, ``VarLen(...)`` or ``None``.
    """

    def __call__(self, records: Sequence[RecordBytes],
                 out: dict[str, np.ndarray] | None = None) -> DecodeResult:
        """Decode a list of serialized records at once (see :func:`decode_batch`).

        Args:
            records: The serialized records.
            out: ``{name: array}`` to decode ``FixedLen`` features into arrays you own
                (see :func:`decode_batch`); not for ``kind="sequence_example"``.

        Returns:
            ``{name: array | Ragged}``, or ``(context, feature_lists)`` for
            ``kind="sequence_example"``.

        Raises:
            DecodeError: A record cannot be decoded as asked (the message names the record
                and the feature).
            ValueError: ``out`` does not fit the batch or the spec, or is given for
                ``kind="sequence_example"``.
        """
        return self.batch(records, out)


__all__ = [
    "BatchDecoder", "DecodeError", "Decoder", "FixedLen", "Ragged", "VarLen",
    "decode_batch", "decode_example", "decode_ofrecord", "decode_sequence_batch",
    "decode_sequence_example", "format_decoded", "from_message", "memory_pool", "normalize_dtype",
]
