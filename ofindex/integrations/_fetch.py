"""The batch step the framework integrations share: a batch of global record numbers read with
one ``__getitems__`` call and decoded with one batch-decoder call. With ``pack_bytes`` and an
ofindex dataset of memory-mapped shards, the batch is decoded straight out of the maps
instead (records checked in place, each value copied once into the batch's buffers)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeGuard, runtime_checkable

import numpy as np

from ..decode import BatchDecoder, FixedLen, Ragged
from ..decode._memory import pooled_bytes
from ..decode.batch import decode_records_packed
from ..formats.framing import RecordFormat
from ..read.dataset import Dataset

#: The numeric ``FixedLen`` outputs of a batch: ``{name: (shape, dtype)}``.
Layout = dict[str, tuple[tuple[int, ...], np.dtype[Any]]]
#: Makes the output arrays of a batch: ``layout -> {name: array}`` (any object
#: ``numpy.asarray`` turns into a writable view: a numpy array, a CPU tensor).
Allocate = Callable[[Layout], dict[str, Any]]


class RecordSource(Protocol):
    """What the integrations read records from: an ofindex ``Dataset``, or any sequence of
    records (``__len__`` and ``__getitem__``; a ``__getitems__`` is used when it has one)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


@runtime_checkable
class ShardedSource(RecordSource, Protocol):
    """A record source that knows its shard boundaries (an ofindex ``Dataset``)."""

    @property
    def cumulative_counts(self) -> np.ndarray: ...


def shard_counts(source: RecordSource) -> np.ndarray:
    """``source.cumulative_counts`` (records in shards ``0..k``), for samplers.

    Raises:
        AttributeError: The source has no shard boundaries.
    """
    if not isinstance(source, ShardedSource):
        raise AttributeError(f"{type(source).__name__} has no shard boundaries "
                             "(cumulative_counts)")
    return source.cumulative_counts


def fixed_outputs(decoder: object, n: int) -> Layout:
    """Shape and dtype of the numeric ``FixedLen`` outputs of ``decoder`` for a batch of ``n``
    (the arrays ``out=`` can receive): none unless it is a :class:`BatchDecoder` of Examples
    or OFRecords with a mapping spec."""
    if not _decodes_records(decoder):
        return {}
    spec = decoder.spec
    assert isinstance(spec, Mapping)
    return {name: ((n, *fs.shape), np.dtype(fs.dtype)) for name, fs in spec.items()
            if isinstance(fs, FixedLen) and fs.dtype != "bytes"}


def _decodes_records(decoder: object) -> TypeGuard[BatchDecoder]:
    """Whether ``decoder`` is a :class:`BatchDecoder` of Examples or OFRecords with a
    mapping spec."""
    return (isinstance(decoder, BatchDecoder) and decoder.kind != "sequence_example"
            and isinstance(decoder.spec, Mapping))


def _image_features(decoder: object, images: Mapping[str, tuple[int, int] | None] | None
                    ) -> dict[str, tuple[int, int] | None]:
    """``images`` checked against the decoder's spec (each a ``FixedLen((), "bytes")``
    feature), with sizes as tuples."""
    if not images:
        return {}
    spec = decoder.spec if _decodes_records(decoder) else None
    checked: dict[str, tuple[int, int] | None] = {}
    for name, size in images.items():
        feature = spec.get(name) if isinstance(spec, Mapping) else None
        if not (isinstance(feature, FixedLen) and feature.dtype == "bytes" and
                tuple(feature.shape) == ()):
            raise ValueError(f"images={{{name!r}: ...}}: the decoder must give {name!r} as "
                             f"FixedLen((), 'bytes') (one JPEG or PNG per record), got "
                             f"{feature!r}; use a BatchDecoder whose spec has it so")
        checked[name] = None if size is None else (int(size[0]), int(size[1]))
    return checked


def bound_decoder(decoder: Callable[..., Any] | None,
                  source: RecordSource) -> Callable[..., Any] | None:
    """``decoder`` with the record kind of ``source`` when it was made without one.

    A :class:`~ofindex.decode.Decoder` or :class:`~ofindex.decode.BatchDecoder` made without
    ``kind`` decodes what the source's framing holds: OFRecords for an OFRecord dataset (a
    mixture: when all its sources are), Examples otherwise (see ``for_framing``).

    Args:
        decoder: Any callable, or ``None``.
        source: The records it will decode: an ofindex ``Dataset``, a mixture, anything.

    Returns:
        The decoder to use (``decoder`` itself unless it is bound to another kind).
    """
    framing = getattr(source, "format", None)  # a Dataset's (or a mixture's) RecordFormat
    for_framing = getattr(decoder, "for_framing", None)
    if not isinstance(framing, RecordFormat) or for_framing is None:
        return decoder
    bound: Callable[..., Any] = for_framing(framing.name)
    return bound


class BatchFetch:
    """Read and decode one batch of records: ``fetch(indices) -> decoder(records)``.

    Args:
        source: The records: an ofindex ``Dataset`` or anything with ``__getitems__`` (or
            ``__getitem__``).
        decoder: Called once with the batch's list of records, e.g. a
            :class:`~ofindex.decode.BatchDecoder` (one made without ``kind`` takes the
            source's, see :func:`bound_decoder`); ``None``: the list itself.
        pack_bytes: Give ``bytes`` features of the decoded batch as one ``uint8`` buffer
            with the values back to back and their lengths (:class:`~ofindex.decode.Ragged`)
            instead of a numpy array of ``bytes`` objects.
        images: ``{feature: (height, width) or None}``: ``bytes`` features holding JPEG or
            PNG images, decoded (and resized) by :func:`ofindex.decode.images.decode_images` into a
            ``uint8`` array ``(batch, height, width, 3)`` made by ``allocate``.

    Raises:
        ValueError: ``images`` names a feature that the decoder's spec does not give as
            ``FixedLen((), "bytes")``.
    """

    def __init__(self, source: RecordSource, decoder: Callable[..., Any] | None = None,
                 pack_bytes: bool = False,
                 images: Mapping[str, tuple[int, int] | None] | None = None) -> None:
        self.source = source
        self.decoder = bound_decoder(decoder, source)
        self.pack_bytes = pack_bytes
        self.images = _image_features(self.decoder, images)

    def records(self, indices: Sequence[int] | np.ndarray | int) -> list[Any]:
        """The records of ``indices`` (one number: a batch of one), read with one
        ``__getitems__`` call when the source has it."""
        if isinstance(indices, (int, np.integer)):
            indices = [int(indices)]
        fetch = getattr(self.source, "__getitems__", None)
        if fetch is not None:
            got: list[Any] = fetch(indices)
            return got
        return [self.source[int(i)] for i in indices]

    def __call__(self, indices: Sequence[int] | np.ndarray | int,
                 allocate: Allocate | None = None) -> tuple[Any, dict[str, Any]]:
        """Read and decode a batch.

        Args:
            indices: Global record numbers (one number: a batch of one).
            allocate: Makes the arrays numeric ``FixedLen`` features are decoded into (e.g.
                views of one block of shared or pinned memory); ``None``: the decoder's own
                arrays.

        Returns:
            ``(batch, made)``: the decoded batch, and the objects ``allocate`` returned, by
            feature name (the arrays given to the decoder are ``numpy.asarray`` of them).
        """
        if isinstance(indices, (int, np.integer)):
            indices = [int(indices)]
        if self.decoder is None:
            return self.records(indices), {}
        made: dict[str, Any] = {}
        batch = self._decoded(indices, allocate, made)
        if self.images and isinstance(batch, dict):
            self._decode_images(batch, allocate, made)
        return batch, made

    def _decoded(self, indices: Sequence[int] | np.ndarray, allocate: Allocate | None,
                 made: dict[str, Any]) -> Any:
        """The decoded batch (its outputs made by ``allocate``, recorded in ``made``)."""
        decoder = self.decoder
        assert decoder is not None  # checked by the caller
        layout = fixed_outputs(decoder, len(indices)) if allocate is not None else {}
        if layout and allocate is not None:
            made.update(allocate(layout))
        outs = {k: np.asanyarray(v) for k, v in made.items()}
        packs = self.pack_bytes and _decodes_records(decoder)
        if packs and isinstance(self.source, Dataset):
            spans = self.source.mapped_spans(indices)
            if spans is not None:  # decoded straight out of the memory-mapped records
                packed = self._decode_packed(spans.maps, outs, allocate, made,
                                             (spans.which, spans.starts, spans.ends))
                if packed is not None:
                    return packed
        recs = self.records(indices)
        if packs:
            packed = self._decode_packed(recs, outs, allocate, made)
            if packed is not None:
                return packed
        batch = decoder(recs, out=outs) if made else decoder(recs)
        if self.pack_bytes and isinstance(batch, dict):
            for name, value in batch.items():
                if isinstance(value, np.ndarray) and value.dtype == object:
                    batch[name] = self._packed(name, value, allocate, made)
        return batch

    def _decode_images(self, batch: dict[str, Any], allocate: Allocate | None,
                       made: dict[str, Any]) -> None:
        """Replace each of :attr:`images` in ``batch`` by its decoded images (made by
        ``allocate`` when given, recorded in ``made``)."""
        from ..decode.images import decode_images

        for name, size in self.images.items():
            def make(shape: tuple[int, ...], name: str = name) -> np.ndarray:
                if allocate is None:
                    return np.empty(shape, dtype=np.uint8)
                made[name] = allocate({name: (shape, np.dtype(np.uint8))})[name]
                return np.asanyarray(made[name])

            batch[name] = decode_images(batch[name], size, out=make)

    def _decode_packed(self, recs: list[Any], outs: dict[str, np.ndarray],
                       allocate: Allocate | None, made: dict[str, Any],
                       spans: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> Any:
        """The batch decoded with its ``bytes`` features packed straight from the records
        (one copy), or ``None`` when the records need the usual path (see
        :func:`~ofindex.decode.batch.decode_records_packed`). With ``spans``, ``recs`` are
        buffers (memory maps) and record ``i`` is ``recs[which[i]][starts[i]:ends[i]]``."""
        decoder = self.decoder
        assert _decodes_records(decoder)

        def buffer(name: str, size: int) -> np.ndarray:
            if allocate is None:
                return pooled_bytes(size)
            made[name] = allocate({name: ((size,), np.dtype(np.uint8))})[name]
            return np.asanyarray(made[name])

        return decode_records_packed(recs, decoder.spec, decoder.kind, outs, buffer, spans)

    @staticmethod
    def _packed(name: str, value: np.ndarray, allocate: Allocate | None,
                made: dict[str, Any]) -> Any:
        """A ``bytes`` feature's values back to back in one ``uint8`` buffer (from
        ``allocate`` when given, recorded in ``made``), as ``Ragged(buffer, lengths)``."""
        flat = value.reshape(-1).tolist()
        lengths = np.fromiter(map(len, flat), dtype=np.int64, count=len(flat))
        total = int(lengths.sum())
        if allocate is not None:
            made[name] = allocate({name: ((total,), np.dtype(np.uint8))})[name]
            buf = np.asanyarray(made[name])
        else:
            buf = pooled_bytes(total)
        at = 0
        for item, n in zip(flat, lengths.tolist(), strict=True):
            buf[at:at + n] = np.frombuffer(item, dtype=np.uint8)
            at += n
        return Ragged(buf, lengths)
