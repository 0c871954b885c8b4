"""Records as Arrow tables for the engines (Spark, Dask, Beam): raw payloads in one binary
column, or a spec's features decoded into typed columns, and the partition reads that make
them (one :meth:`~ofindex.read.dataset.Dataset.iter_batches` pass over a partition's records:
a GZIP/ZLIB shard is inflated once, from the seek point the partition starts at).

Types: a scalar ``FixedLen`` is a column of its dtype (``bytes``: binary); a shaped one nests
lists (``FixedLen((2, 3))``: a list of lists of 3); a ``VarLen`` is a list. Offsets are 32-bit
(Arrow's ``list`` and ``binary``), as Spark's Arrow reader takes them; a block is cut well
under 2 GiB by its record count.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa  # each engine's module imports it first, naming its extra when missing

from ..decode import BatchDecoder, FixedLen, Ragged, VarLen
from ..decode.batch import decode_records_packed
from ..planning.splits import Partition, partition_dataset, partition_positions
from ..read.dataset import Dataset

#: The column of raw payloads, and the column of record numbers.
BYTES_COLUMN, INDEX_COLUMN = "bytes", "index"
#: The most bytes one Arrow ``binary`` array holds (its offsets are 32-bit).
_BINARY_BYTES = (1 << 31) - 1


def feature_type(fs: FixedLen | VarLen) -> pa.DataType:
    """The Arrow type of a decoded feature.

    Args:
        fs: The feature's spec.

    Returns:
        Its column's type.
    """
    value = pa.binary() if fs.dtype == "bytes" else pa.from_numpy_dtype(np.dtype(fs.dtype))
    if isinstance(fs, VarLen):
        return pa.list_(value)
    for _ in fs.shape:
        value = pa.list_(value)
    return value


def table_schema(spec: Mapping[str, FixedLen | VarLen] | None, with_index: bool) -> pa.Schema:
    """The schema of the tables :func:`partition_tables` makes.

    Args:
        spec: The decoded features (``None``: one binary column of payloads).
        with_index: Whether the record numbers come first as an ``int64`` column.

    Returns:
        The schema.
    """
    fields = [pa.field(INDEX_COLUMN, pa.int64(), nullable=False)] if with_index else []
    if spec is None:
        fields.append(pa.field(BYTES_COLUMN, pa.binary(), nullable=False))
    else:
        fields += [pa.field(name, feature_type(fs)) for name, fs in spec.items()]
    return pa.schema(fields)


def _nested(values: pa.Array, shape: tuple[int, ...], rows: int) -> pa.Array:
    """``values`` (``rows * prod(shape)`` of them) as ``len(shape)`` levels of lists."""
    for depth in range(len(shape) - 1, -1, -1):
        outer = rows * int(np.prod(shape[:depth], dtype=np.int64))
        step = shape[depth]
        offsets = pa.array(np.arange(outer + 1, dtype=np.int32) * step)
        values = pa.ListArray.from_arrays(offsets, values)
    return values


def _flat(values: Any, dtype: str) -> pa.Array:
    """Numeric values, or an object array of ``bytes``, as one flat Arrow array."""
    array = np.asarray(values)
    if dtype == "bytes":
        return pa.array(array.reshape(-1).tolist(), type=pa.binary())
    return pa.array(array.reshape(-1))


def _binary(values: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Byte strings given back to back (``values``, ``uint8``) with their ``lengths`` as one
    Arrow ``binary`` array, made on ``values`` without copying them."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > _BINARY_BYTES:  # pyarrow cuts these into chunks of 32-bit offsets
        return pa.array([values[s:e].tobytes() for s, e in
                         zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)],
                        type=pa.binary())
    return pa.Array.from_buffers(pa.binary(), len(lengths),
                                 [None, pa.py_buffer(offsets.astype(np.int32)),
                                  pa.py_buffer(values)])


def feature_column(value: Any, fs: FixedLen | VarLen, rows: int) -> pa.Array:
    """A decoded batch's feature as its Arrow column (:func:`feature_type`).

    Args:
        value: What the batch decoder gave: an array ``(rows, *shape)`` or a
            :class:`~ofindex.decode.Ragged`; of a ``bytes`` ``FixedLen``, also a
            ``Ragged(uint8 buffer, byte lengths)`` (its values packed back to back, as
            :func:`~ofindex.decode.batch.decode_records_packed` gives them).
        fs: The feature's spec.
        rows: The batch's records.

    Returns:
        The column.
    """
    if isinstance(value, Ragged) and isinstance(fs, FixedLen):  # packed bytes
        return _nested(_binary(value.values, value.row_lengths), fs.shape, rows)
    if isinstance(value, Ragged):
        offsets = pa.array(value.row_splits.astype(np.int32))
        return pa.ListArray.from_arrays(offsets, _flat(value.values, fs.dtype))
    shape = fs.shape if isinstance(fs, FixedLen) else ()
    return _nested(_flat(value, fs.dtype), shape, rows)


def decoded_table(batch: Mapping[str, Any], spec: Mapping[str, FixedLen | VarLen], rows: int,
                  index: np.ndarray | None) -> pa.Table:
    """A decoded batch as a table of :func:`table_schema`'s schema.

    Args:
        batch: ``{name: column}`` from a :class:`~ofindex.decode.BatchDecoder` (or from
            :func:`~ofindex.decode.batch.decode_records_packed`).
        spec: Its spec.
        rows: Its records.
        index: The records' numbers (``None``: no index column).

    Returns:
        The table.
    """
    columns = [] if index is None else [pa.array(index, type=pa.int64())]
    columns += [feature_column(batch[name], fs, rows) for name, fs in spec.items()]
    return pa.Table.from_arrays(columns, schema=table_schema(spec, index is not None))


def _fresh_bytes(name: str, size: int) -> np.ndarray:
    """A new buffer for a packed ``bytes`` feature (the Arrow column made on it keeps it)."""
    return np.empty(size, dtype=np.uint8)


def _packs(decoder: BatchDecoder) -> bool:
    """Whether ``decoder``'s records may be decoded with their ``bytes`` features packed."""
    return decoder.kind in ("example", "ofrecord") and isinstance(decoder.spec, Mapping)


def _decoded(decoder: BatchDecoder, records: list[bytes]) -> dict[str, Any]:
    """``records`` decoded: ``bytes`` features packed when every record allows it (no
    Python object per value), else as ``decoder`` decodes them."""
    packed = (decode_records_packed(records, decoder.spec, decoder.kind, {}, _fresh_bytes)
              if _packs(decoder) else None)
    batch = decoder(records) if packed is None else packed
    assert isinstance(batch, dict)  # examples and OFRecords: {name: column}
    return batch


def raw_table(records: list[bytes], index: np.ndarray | None) -> pa.Table:
    """Raw payloads as a table of :func:`table_schema`'s schema for no spec."""
    columns = [] if index is None else [pa.array(index, type=pa.int64())]
    columns.append(pa.array(records, type=pa.binary()))
    return pa.Table.from_arrays(columns, schema=table_schema(None, index is not None))


class PartitionRead:
    """The read of one partition of a plan, carrying only the shards it reads (what an
    engine sends to the task that reads it; pickles without open handles).

    Args:
        dataset: The planned dataset.
        partition: One of its plan's partitions (of a pruned plan: only its records are
            read, see :func:`~ofindex.planning.splits.partition_positions`).
    """

    def __init__(self, dataset: Dataset, partition: Partition) -> None:
        self.dataset, self.lo, self.hi = partition_dataset(dataset, partition)
        #: The dataset's number of record ``lo`` of :attr:`dataset`.
        self.start = partition[0].start
        self.format = dataset.format
        #: The records read, numbered in :attr:`dataset` (``None``: all of ``[lo, hi)``).
        self.positions = partition_positions(partition)

    def __len__(self) -> int:
        return self.hi - self.lo if self.positions is None else len(self.positions)

    def restricted(self, lo: int, hi: int) -> PartitionRead:
        """The read of records ``[lo, hi)`` of the same shards (a part of this partition, as
        a runner splits it; numbered as :attr:`lo` and :attr:`hi` are).

        Raises:
            ValueError: ``[lo, hi)`` is not inside ``[self.lo, self.hi)``.
        """
        if not self.lo <= lo <= hi <= self.hi:
            raise ValueError(f"records [{lo}, {hi}) are not inside the partition's "
                             f"[{self.lo}, {self.hi})")
        piece = copy.copy(self)
        piece.lo, piece.hi, piece.start = lo, hi, self.start + (lo - self.lo)
        if self.positions is not None:
            piece.positions = self.positions[np.searchsorted(self.positions, lo):
                                             np.searchsorted(self.positions, hi)]
        return piece

    def numbered_batches(self, rows: int = 4096) -> Iterator[tuple[np.ndarray, list[bytes]]]:
        """The partition's payloads in order, ``rows`` at a time, with their numbers in
        :attr:`dataset` (one pass over a range: a GZIP/ZLIB shard is inflated once, from the
        seek point the partition starts at; chosen records: one batch read of each
        ``rows``).

        Args:
            rows: Records per batch.

        Yields:
            ``(numbers, payloads)``.

        Raises:
            As ``Dataset.iter_batches`` and ``Dataset.payloads``.
        """
        try:
            if self.positions is None:
                at = self.lo
                for batch in self.dataset.iter_batches(rows, self.lo, self.hi):
                    yield np.arange(at, at + len(batch), dtype=np.int64), batch
                    at += len(batch)
                return
            for begin in range(0, len(self.positions), rows):
                chosen = self.positions[begin:begin + rows]
                yield chosen, self.dataset.payloads(chosen)
        finally:
            self.dataset.close()

    def _numbers(self, rows: int) -> Iterator[np.ndarray]:
        """The partition's record numbers in :attr:`dataset`, ``rows`` at a time."""
        if self.positions is None:
            for begin in range(self.lo, self.hi, rows):
                yield np.arange(begin, min(begin + rows, self.hi), dtype=np.int64)
        else:
            for begin in range(0, len(self.positions), rows):
                yield self.positions[begin:begin + rows]

    def decoded_batches(self, decoder: BatchDecoder, rows: int = 4096
                        ) -> Iterator[tuple[np.ndarray, dict[str, Any]]]:
        """The partition's records decoded, ``rows`` at a time, with their numbers in
        :attr:`dataset`. A ``bytes`` ``FixedLen`` feature comes packed, ``Ragged(uint8
        buffer, byte lengths)``, when the records allow it; records of memory-mapped shards
        are decoded straight out of the maps (no copy of a whole record), others read as
        :meth:`numbered_batches` reads them.

        Args:
            decoder: The batch decoder.
            rows: Records per batch.

        Yields:
            ``(numbers, {name: column})``.

        Raises:
            As :meth:`numbered_batches`; DecodeError: a record does not fit the spec.
        """
        numbers = self._numbers(rows)
        first = next(numbers, None)
        if first is None or not _packs(decoder) or self.dataset.mapped_spans(first[:1]) is None:
            for numbered, records in self.numbered_batches(rows):
                yield numbered, _decoded(decoder, records)
            return
        try:
            for chosen in itertools.chain([first], numbers):
                spans = self.dataset.mapped_spans(chosen)
                maps: list[Any] = [] if spans is None else spans.maps
                batch = None if spans is None else decode_records_packed(
                    maps, decoder.spec, decoder.kind, {}, _fresh_bytes,
                    (spans.which, spans.starts, spans.ends))
                yield chosen, (_decoded(decoder, self.dataset.payloads(chosen))
                               if batch is None else batch)
        finally:
            self.dataset.close()

    def batches(self, rows: int = 4096) -> Iterator[list[bytes]]:
        """The partition's payloads in order, ``rows`` at a time (see
        :meth:`numbered_batches`).

        Args:
            rows: Records per batch.

        Yields:
            Lists of payloads.

        Raises:
            As ``Dataset.iter_batches``.
        """
        for _, batch in self.numbered_batches(rows):
            yield batch

    def tables(self, spec: Mapping[str, FixedLen | VarLen] | None, *, kind: str | None = None,
               with_index: bool = False, rows: int = 4096) -> Iterator[pa.Table]:
        """The partition's records as Arrow tables of ``rows`` records (the last may be
        shorter), in order.

        Args:
            spec: Decode each record's features (``None``: raw payloads).
            kind: ``"example"`` or ``"ofrecord"`` for ``spec`` (default: the framing's).
            with_index: Add the records' numbers in the dataset (column ``index``).
            rows: Records per table.

        Yields:
            Tables of :func:`table_schema`'s schema.

        Raises:
            As ``Dataset.iter_batches``; DecodeError: a record does not fit ``spec``.
        """
        decoder = (None if spec is None else
                   BatchDecoder(dict(spec), kind=kind).for_framing(self.format.name))
        base = self.start - self.lo  # the dataset's number of record 0 of the subset
        if decoder is None or spec is None:
            for numbers, records in self.numbered_batches(rows):
                yield raw_table(records, numbers + base if with_index else None)
            return
        for numbers, batch in self.decoded_batches(decoder, rows):
            yield decoded_table(batch, spec, len(numbers), numbers + base if with_index else None)
