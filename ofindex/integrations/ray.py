"""Ray Data integration: an ofindex dataset as a ``ray.data.Dataset``, read in parallel.

:func:`read_ofindex` opens the files (a directory with its manifest, a glob, a list; local or
in a bucket) on the driver, which reads only their indexes, and gives Ray a
:class:`OfindexDatasource`: its read tasks cover **record ranges** cut so that every task
reads about as many records *and* bytes as the others (a shard of big records is split into
more tasks than one of small records; a task may span shards), not one task per file. Each
task carries only the shards it reads and streams its range in blocks of ``rows_per_block``
records, so Ray's ``limit`` / ``take`` stop a task after the rows they need.

With ``shuffle=True`` the dataset is a **global shuffle**: the records in the order of
:class:`ofindex.shuffle.GlobalShuffleSampler`'s permutation for ``(seed, epoch)``, each task
reading its slice of that permutation with batched random reads (``__getitems__``).

Rows are the raw record payloads (column ``bytes``) or, with a ``spec``, the decoded features
(one :class:`~ofindex.decode.BatchDecoder` call per block: dense numeric features as columns
or tensors, ``VarLen`` features as lists, bytes as binary); ``with_index=True`` adds the
global record number (column ``index``)::

    from ofindex.decode import FixedLen
    from ofindex.integrations.ray import read_ofindex

    ds = read_ofindex("s3://bucket/train/", {"label": FixedLen((), "int64")},
                      shuffle=True, seed=0, storage_options={"anon": True})
    for batch in ds.iter_batches(batch_size=256, batch_format="numpy"):
        ...
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import missing_extra

try:
    import pyarrow as pa
    import ray.data
    from ray.data.block import BlockAccessor, BlockMetadata
    from ray.data.datasource import Datasource, ReadTask
except ImportError as _exc:  # without the extra: say which one to install
    raise missing_extra("ofindex.integrations.ray", "ray", _exc) from _exc

from ..decode import BatchDecoder, Ragged
from ..decode.spec import Spec
from ..opening import open as open_dataset
from ..read.dataset import Dataset
from ..shuffle.orders import GlobalShuffleOrder

__all__ = ["OfindexDatasource", "read_ofindex"]

#: Records per block when not given: about 8 MiB of payload, between 64 and 65,536 records.
_BLOCK_BYTES = 8 << 20
#: What one record costs beyond its bytes, in bytes (framing, checks, a Python or Arrow
#: object), when read tasks are balanced by records and bytes.
_RECORD_COST = 64


def read_ofindex(paths: str | Sequence[str], spec: Spec | None = None, *,
                 kind: str | None = None, shuffle: bool = False, seed: int = 0, epoch: int = 0,
                 with_index: bool = False, rows_per_block: int | None = None,
                 override_num_blocks: int | None = None,
                 ray_remote_args: Mapping[str, Any] | None = None,
                 **open_kwargs: Any) -> ray.data.Dataset:
    """Read TFRecord / OFRecord files indexed by ofindex as a Ray ``Dataset``.

    Args:
        paths: What :func:`ofindex.open` takes: a directory, a glob, a file, or a list.
        spec: Decode each record's features with this spec (``{name: FixedLen | VarLen}``,
            see :class:`~ofindex.decode.BatchDecoder`); ``None``: one ``bytes`` column of
            raw payloads.
        kind: What the records are, for ``spec``: ``"example"`` or ``"ofrecord"``
            (default: what the files' framing holds, OFRecords in OFRecord files).
        shuffle: Read the records in the order of a global shuffle (each read task reads a
            slice of one permutation) instead of dataset order.
        seed: Selects the shuffle, with ``epoch``.
        epoch: Selects the shuffle, with ``seed`` (a new order per epoch).
        with_index: Add the column ``index``: each row's global record number.
        rows_per_block: Records per block (default: about 8 MiB of payload).
        override_num_blocks: The number of read tasks (default: Ray's choice).
        ray_remote_args: Passed to Ray for the read tasks (e.g. ``{"num_cpus": 0.5}``).
        **open_kwargs: Passed to :func:`ofindex.open` (``storage_options``, ``index_dir``,
            ``verify``, ``cache_dir`` …), on the driver and in every read task.

    Returns:
        The Ray dataset (lazy: nothing but the indexes is read until it is consumed).

    Raises:
        As :func:`ofindex.open` (on the driver); read errors as ``ds[i]`` raises them, from
        the task that meets them.
        ValueError: ``rows_per_block < 1``, or ``kind`` is neither ``"example"`` nor
            ``"ofrecord"``.
    """
    dataset = open_dataset(paths, **open_kwargs)
    source = OfindexDatasource(dataset, spec, kind=kind, shuffle=shuffle, seed=seed,
                               epoch=epoch, with_index=with_index, rows_per_block=rows_per_block)
    return ray.data.read_datasource(source, override_num_blocks=override_num_blocks,
                                    ray_remote_args=dict(ray_remote_args or {}))


class OfindexDatasource(Datasource):  # type: ignore[misc]
    """A Ray ``Datasource`` over an opened ofindex dataset (see :func:`read_ofindex`).

    Args:
        dataset: The records.
        spec: Decode with this spec (``None``: raw payloads in column ``bytes``).
        kind: ``"example"`` or ``"ofrecord"``, for ``spec`` (default: the files' framing's).
        shuffle: Read in the order of a global shuffle of ``(seed, epoch)``.
        seed: Selects the shuffle.
        epoch: Selects the shuffle.
        with_index: Add the column ``index``.
        rows_per_block: Records per block (default: about 8 MiB of payload).

    Raises:
        ValueError: ``rows_per_block < 1``, or ``kind`` is neither ``"example"`` nor
            ``"ofrecord"``.
    """

    def __init__(self, dataset: Dataset, spec: Spec | None = None, *, kind: str | None = None,
                 shuffle: bool = False, seed: int = 0, epoch: int = 0,
                 with_index: bool = False, rows_per_block: int | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        if kind not in (None, "example", "ofrecord"):
            raise ValueError(f"kind must be 'example' or 'ofrecord', not {kind!r}")
        if rows_per_block is not None and int(rows_per_block) < 1:
            raise ValueError(f"rows_per_block must be >= 1, got {rows_per_block}")
        self._dataset = dataset
        self._decoder = None if spec is None else BatchDecoder(spec, kind=kind).for_framing(
            dataset.format.name)
        self._shuffle = bool(shuffle)
        self._seed, self._epoch = int(seed), int(epoch)
        self._with_index = bool(with_index)
        shards = dataset.shards
        self._bytes = sum(s.bytes for s in shards)
        mean = self._bytes / max(1, len(dataset))
        self._rows_per_block = (int(rows_per_block) if rows_per_block is not None
                                else int(min(max(_BLOCK_BYTES // max(mean, 1.0), 64), 65536)))

    def get_name(self) -> str:
        """The name of the read operator Ray shows."""
        return "ReadOfindex"

    def estimate_inmemory_data_size(self) -> int | None:
        """The bytes of the data files (payloads and framing)."""
        return self._bytes

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        """Read tasks over record ranges (or slices of the shuffle's permutation), about
        equal in records and bytes.

        Args:
            parallelism: The number of tasks Ray asks for.
            per_task_row_limit: Read at most this many rows in each task (a ``limit``).
            data_context: Ray's context (unused).

        Returns:
            At most ``parallelism`` tasks (fewer for a small dataset: each reads at least a
            block's records, or every record).
        """
        n = len(self._dataset)
        if n == 0:
            return []
        count = max(1, min(int(parallelism), -(-n // min(self._rows_per_block, n))))
        if self._shuffle:
            cuts = np.linspace(0, n, count + 1).astype(np.int64)
        else:
            cuts = balanced_cuts(self._dataset, count)
        mean = self._bytes / n
        tasks = []
        for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
            if per_task_row_limit is not None:
                hi = min(hi, lo + int(per_task_row_limit))
            if hi <= lo:
                continue
            read = self._task(lo, hi)
            meta = BlockMetadata(num_rows=hi - lo, size_bytes=int(mean * (hi - lo)),
                                 input_files=None, exec_stats=None)
            tasks.append(_read_task(read, meta, per_task_row_limit))
        return tasks

    def _task(self, lo: int, hi: int) -> _Read:
        """The read of records ``[lo, hi)`` (of the dataset, or of the permutation)."""
        layout = _Layout(self._decoder, self._with_index, self._rows_per_block)
        if self._shuffle:
            order = GlobalShuffleOrder(len(self._dataset), self._seed, self._epoch)
            return _Read(self._dataset, lo, hi, layout, order)
        subset, first = shards_of(self._dataset, lo, hi)
        return _Read(subset, lo - first, hi - first, layout, None, first)


def balanced_cuts(dataset: Dataset, count: int) -> np.ndarray:
    """Record numbers cutting ``dataset`` into ``count`` ranges of about equal cost, a record
    costing its shard's mean size plus a fixed ``_RECORD_COST``.

    Returns:
        ``count + 1`` non-decreasing record numbers from 0 to ``len(dataset)``.
    """
    counts = np.diff(np.concatenate([[0], dataset.cumulative_counts])).astype(np.float64)
    sizes = np.array([s.bytes for s in dataset.shards], dtype=np.float64)
    per_record = np.where(counts > 0, sizes / np.maximum(counts, 1), 0.0) + _RECORD_COST
    cost_ends = np.cumsum(counts * per_record)
    targets = np.linspace(0.0, float(cost_ends[-1]), count + 1)[1:-1]
    shard = np.searchsorted(cost_ends, targets, side="right")
    shard = np.minimum(shard, len(counts) - 1)
    before = np.where(shard > 0, cost_ends[np.maximum(shard - 1, 0)], 0.0)
    first = np.concatenate([[0], dataset.cumulative_counts])[shard]
    inside = np.floor((targets - before) / per_record[shard]).astype(np.int64)
    cuts = first + np.minimum(inside, counts[shard].astype(np.int64))
    out: np.ndarray = np.concatenate([[0], np.maximum.accumulate(cuts), [len(dataset)]])
    return out.astype(np.int64)


def shards_of(dataset: Dataset, lo: int, hi: int) -> tuple[Dataset, int]:
    """The dataset of the shards holding records ``[lo, hi)`` (what a read task carries),
    and the global number of its first record."""
    table = dataset._table
    first_shard = table.locate(lo)[0]
    last_shard = table.locate(hi - 1)[0]
    subset = Dataset(table.storage, table.shards[first_shard:last_shard + 1], dataset.format,
                     verify=dataset.verify, decode=None,
                     compressed=dataset._compressed)
    return subset, int(table.first[first_shard])


def _read_task(read: Callable[[], Iterator[Any]], meta: BlockMetadata,
               limit: int | None) -> ReadTask:
    """A ``ReadTask`` (with Ray's own row limit where this Ray knows one)."""
    if "per_task_row_limit" in inspect.signature(ReadTask.__init__).parameters:
        return ReadTask(read, meta, per_task_row_limit=limit)
    return ReadTask(read, meta)


class _Layout:
    """How a block is made of records: decoded or raw, with or without the index column."""

    def __init__(self, decoder: BatchDecoder | None, with_index: bool,
                 rows_per_block: int) -> None:
        self.decoder = decoder
        self.with_index = with_index
        self.rows_per_block = rows_per_block

    def block(self, records: list[bytes] | None, raw: pa.Array | None,
              index: np.ndarray) -> Any:
        """A block of records (as ``bytes``, or already an Arrow binary array) and their
        global numbers."""
        if self.decoder is None:
            column = raw if raw is not None else pa.array(records, type=pa.large_binary())
            columns: dict[str, Any] = {"bytes": column}
            if self.with_index:
                columns["index"] = pa.array(index)
            return pa.table(columns)
        assert records is not None
        decoded = self.decoder(records)
        assert isinstance(decoded, dict)  # examples and OFRecords decode to {name: column}
        batch = {name: _column(value) for name, value in decoded.items()}
        if self.with_index:
            batch["index"] = index
        return BlockAccessor.batch_to_block(batch)


class _Read:
    """One read task: records ``[lo, hi)`` of ``dataset`` in blocks (or, with ``order``,
    the records at positions ``[lo, hi)`` of that permutation)."""

    def __init__(self, dataset: Dataset, lo: int, hi: int, layout: _Layout,
                 order: GlobalShuffleOrder | None, first: int = 0) -> None:
        self.dataset = dataset
        self.lo, self.hi = lo, hi
        self.layout = layout
        self.order = order
        self.first = first

    def __call__(self) -> Iterator[Any]:
        step = self.layout.rows_per_block
        if self.order is not None:
            for at in range(self.lo, self.hi, step):
                index = self.order(np.arange(at, min(at + step, self.hi), dtype=np.int64))
                yield self.layout.block(self.dataset.__getitems__(index), None, index)
            return
        if self.layout.decoder is not None:  # lists of records, for the decoder
            at = self.lo
            for records in self.dataset.iter_batches(step, self.lo, self.hi):
                index = np.arange(at, at + len(records), dtype=np.int64) + self.first
                at += len(records)
                yield self.layout.block(records, None, index)
            return
        for batch in self.dataset.iter_batches(step, self.lo, self.hi, as_buffer=True):
            index = np.arange(batch.first, batch.first + len(batch), dtype=np.int64)
            raw = pa.LargeBinaryArray.from_buffers(  # the payloads as they are: no copy
                pa.large_binary(), len(batch),
                [None, pa.py_buffer(np.ascontiguousarray(batch.offsets, dtype=np.int64)),
                 pa.py_buffer(batch.data)])
            yield self.layout.block(None, raw, index + self.first)


def _column(value: Any) -> Any:
    """A decoded feature as a column Ray takes: numeric arrays as they are (tensors when
    ``ndim > 1``), ``bytes`` as binary, :class:`Ragged` as lists."""
    if isinstance(value, Ragged):
        return pa.LargeListArray.from_arrays(pa.array(value.row_splits), _values(value.values))
    if isinstance(value, np.ndarray) and value.dtype == object:
        if value.ndim == 1:
            return pa.array(value.tolist(), type=pa.large_binary())
        return pa.array(value.tolist(), type=_nested_binary(value.ndim - 1))
    return value


def _values(values: Any) -> pa.Array:
    """The flat values of a :class:`Ragged` (itself maybe ragged) as an Arrow array."""
    if isinstance(values, Ragged):
        return pa.LargeListArray.from_arrays(pa.array(values.row_splits), _values(values.values))
    array = np.asarray(values)
    if array.dtype == object:
        return pa.array(array.reshape(-1).tolist(), type=pa.large_binary())
    return pa.array(array.reshape(-1))


def _nested_binary(depth: int) -> pa.DataType:
    """``list<…list<large_binary>>`` with ``depth`` list levels."""
    kind: pa.DataType = pa.large_binary()
    for _ in range(depth):
        kind = pa.list_(kind)
    return kind
