"""Ray Data integration: an ofindex dataset as a ``ray.data.Dataset``, read in parallel.

:func:`read_ofindex` opens the files (a directory with its manifest, a glob, a list; local or
in a bucket) on the driver, which reads only their indexes, and gives Ray a
:class:`OfindexDatasource`: its read tasks cover **record ranges** cut so that every task
reads about as many records *and* bytes as the others (a shard of big records is split into
more tasks than one of small records; a task may span shards), not one task per file. Each
task carries only the shards it reads and streams its range in blocks of ``rows_per_block``
records, so Ray's ``limit`` / ``take`` stop a task after the rows they need.

**Blocks of one Arrow chunk, a little over Ray's block size.** Ray Data joins what a read task
yields into blocks of its ``DataContext.target_max_block_size`` (128 MiB by default), smaller
pieces as several chunks of one column, and ``iter_batches`` copies a block whose column has
several chunks into one. A piece a little over the target (:data:`BLOCK_MARGIN`) is passed on
as it is: one chunk per column, which ``iter_batches`` slices into batches without a copy. Its
payloads are packed straight from the files into one buffer (raw: the Arrow binary column's
data; decoded: each ``bytes`` feature's values), made on memory that an earlier block
released (:func:`ofindex._accel.pooled_bytes`), and there are only as many read tasks as
blocks (at least one per CPU of the cluster): a task costs Ray tens of milliseconds. On 10,000
records of 100 KB (1 GB, 2 CPUs) this took ``iter_batches`` from about 2,600 rows/s with
8 MiB pieces to about 9,000 (``tools/bench_ray.py``).

With ``shuffle=True`` the dataset is a **global shuffle**: the records in the order of
:class:`ofindex.shuffle.GlobalShuffleSampler`'s permutation for ``(seed, epoch)``, each task
reading its slice of that permutation with batched random reads (``__getitems__``).

Rows are the raw record payloads (column ``bytes``) or, with a ``spec``, the decoded features
(one :class:`~ofindex.decode.BatchDecoder` call per block, straight out of the memory maps of
local files: dense numeric features as columns or tensors, ``VarLen`` features as lists, bytes
as binary); ``with_index=True`` adds the global record number (column ``index``).
``where=`` reads only the records meeting conditions on columns built with
``build_index(columns=[...])`` (as ``ds.positions`` takes them): the read tasks are the split
planner's partitions of those records alone, balanced by them::

    from ofindex.decode import FixedLen
    from ofindex.integrations.ray import read_ofindex

    ds = read_ofindex("s3://bucket/train/", {"label": FixedLen((), "int64")},
                      shuffle=True, seed=0, storage_options={"anon": True})
    for batch in ds.iter_batches(batch_size=256, batch_format="numpy"):
        ...
    threes = read_ofindex("s3://bucket/train/", where={"label": 3})  # label 3 only
"""

from __future__ import annotations

import inspect
import itertools
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

from ..decode import BatchDecoder, FixedLen, Ragged
from ..decode.spec import Spec
from ..opening import open as open_dataset
from ..planning.splits import (
    Partition,
    SplitPlan,
    layouts_of,
    partition_dataset,
    partition_positions,
    plan_dataset,
    plan_splits,
)
from ..read.dataset import Dataset
from ..read.sequential.record_batch import RecordBatch
from ..shuffle.orders import GlobalShuffleOrder
from ._fetch import BatchFetch

__all__ = ["BLOCK_MARGIN", "OfindexDatasource", "read_ofindex", "read_task_count"]

#: A block read by a task holds this many times Ray's ``target_max_block_size`` of data (by
#: the records' mean size): over the target, so that Ray passes it on alone (one Arrow chunk
#: per column, sliced into batches without a copy), and well under the 1.5 times at which Ray
#: slices it, so that records of varying sizes stay within the two. (Ray's own Parquet reader
#: reads batches of the target's size, which Ray joins in pairs when one falls short.)
BLOCK_MARGIN = 1.25
#: The block size aimed at when Ray's context sets none (Ray's own default).
_TARGET_BLOCK_BYTES = 128 << 20
#: What one record costs beyond its bytes, in bytes (framing, checks, a Python or Arrow
#: object), when read tasks are balanced by records and bytes.
_RECORD_COST = 64


def read_ofindex(paths: str | Sequence[str], spec: Spec | None = None, *,
                 kind: str | None = None, shuffle: bool = False, seed: int = 0, epoch: int = 0,
                 with_index: bool = False, rows_per_block: int | None = None,
                 override_num_blocks: int | None = None,
                 ray_remote_args: Mapping[str, Any] | None = None,
                 where: Mapping[str, object] | None = None,
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
        rows_per_block: Records per block (default: :data:`BLOCK_MARGIN` times Ray's
            ``target_max_block_size`` of data, by the records' mean size).
        override_num_blocks: At most this many read tasks (default: no bound but
            :func:`read_task_count`'s).
        ray_remote_args: Passed to Ray for the read tasks (e.g. ``{"num_cpus": 0.5}``).
        where: Only the records meeting these conditions on built columns, as
            ``ds.positions`` takes them (``{"label": 3}``, ``{"score": (0.5, None)}``), in
            dataset order (not with ``shuffle``).
        **open_kwargs: Passed to :func:`ofindex.open` (``storage_options``, ``index_dir``,
            ``verify``, ``cache_dir`` …), on the driver and in every read task.

    Returns:
        The Ray dataset (lazy: nothing but the indexes, and the columns of ``where``, is
        read until it is consumed).

    Raises:
        OfindexError: What :func:`ofindex.open` raises (on the driver); read errors as
            ``ds[i]`` raises them, from the task that meets them.
        ValueError: ``rows_per_block < 1``, ``kind`` is neither ``"example"`` nor
            ``"ofrecord"``, or ``where`` with ``shuffle``.
        ColumnError, ColumnNotFoundError: A bad condition, or a column the dataset was
            indexed without (the message names the build that adds it).
    """
    dataset = open_dataset(paths, **open_kwargs)
    source = OfindexDatasource(dataset, spec, kind=kind, shuffle=shuffle, seed=seed,
                               epoch=epoch, with_index=with_index, rows_per_block=rows_per_block,
                               where=where)
    if not ray.is_initialized():  # as any Ray Data call would: the tasks depend on the CPUs
        ray.init()
    # Ray told how many tasks there are: it would otherwise split each block into slices to
    # reach its own count (at least 200), which costs its driver and object store more than
    # the read (1 GB of 100 KB records on 2 CPUs: 2.2 CPU-seconds instead of 0.9)
    tasks = max(1, source.task_count(override_num_blocks))  # none for no record
    return ray.data.read_datasource(source, override_num_blocks=tasks,
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
        rows_per_block: Records per block (default: :data:`BLOCK_MARGIN` times Ray's
            ``target_max_block_size`` of data).
        where: Only the records meeting these conditions (as ``ds.positions`` takes them).

    Raises:
        ValueError: ``rows_per_block < 1``, ``kind`` is neither ``"example"`` nor
            ``"ofrecord"``, or ``where`` with ``shuffle``.
        ColumnError, ColumnNotFoundError: As ``ds.positions``.
    """

    def __init__(self, dataset: Dataset, spec: Spec | None = None, *, kind: str | None = None,
                 shuffle: bool = False, seed: int = 0, epoch: int = 0,
                 with_index: bool = False, rows_per_block: int | None = None,
                 where: Mapping[str, object] | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        if kind not in (None, "example", "ofrecord"):
            raise ValueError(f"kind must be 'example' or 'ofrecord', not {kind!r}")
        if rows_per_block is not None and int(rows_per_block) < 1:
            raise ValueError(f"rows_per_block must be >= 1, got {rows_per_block}")
        if where and shuffle:  # each task would carry every matching record's number
            raise ValueError("where= reads in dataset order, not with shuffle=True; shuffle "
                             "the matching records with ds.where(...) and "
                             "ofindex.shuffle.GlobalShuffleSampler instead")
        self._dataset = dataset
        #: The records read (global numbers), or ``None``: all.
        self._selected = dataset.positions(**where) if where else None
        #: How many records are read.
        self._count = len(dataset) if self._selected is None else len(self._selected)
        self._decoder = None if spec is None else BatchDecoder(spec, kind=kind).for_framing(
            dataset.format.name)
        self._shuffle = bool(shuffle)
        self._seed, self._epoch = int(seed), int(epoch)
        self._with_index = bool(with_index)
        self._bytes = sum(s.bytes for s in dataset.shards)
        self._layouts = layouts_of(dataset)
        self._rows_per_block = None if rows_per_block is None else int(rows_per_block)

    def get_name(self) -> str:
        """The name of the read operator Ray shows."""
        return "ReadOfindex"

    def estimate_inmemory_data_size(self) -> int | None:
        """The bytes of the data files (payloads and framing) of the records read."""
        return self._bytes * self._count // max(1, len(self._dataset))

    def rows_per_block(self, target_block_bytes: int | None = None) -> int:
        """Records per block: as given, or :data:`BLOCK_MARGIN` times ``target_block_bytes``
        (Ray's ``target_max_block_size``; 128 MiB when ``None``) of payloads of the records'
        mean size.

        Args:
            target_block_bytes: The block size Ray aims at.

        Returns:
            At least 1.
        """
        if self._rows_per_block is not None:
            return self._rows_per_block
        n = len(self._dataset)
        payload = self._bytes / max(1, n) - self._dataset.format.overhead
        target = target_block_bytes or _TARGET_BLOCK_BYTES
        return max(1, int(BLOCK_MARGIN * target / max(1.0, payload)))

    def task_count(self, parallelism: int | None = None, data_context: Any = None) -> int:
        """How many read tasks :meth:`get_read_tasks` makes (see :func:`read_task_count`).

        Args:
            parallelism: At most this many (default: no bound but the records).
            data_context: Ray's context (its ``target_max_block_size``; default: the
                current one).

        Returns:
            0 for an empty dataset, else at least 1.
        """
        n = self._count
        if n == 0:
            return 0
        rows = self.rows_per_block(_target_block_bytes(data_context))
        most = n if parallelism is None or parallelism < 1 else int(parallelism)
        return read_task_count(n, rows, most, _cluster_cpus())

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        """Read tasks over record ranges (or slices of the shuffle's permutation), about
        equal in records and bytes, as many as :meth:`task_count` says.

        Args:
            parallelism: The number of tasks Ray asks for (at most).
            per_task_row_limit: Read at most this many rows in each task (a ``limit``).
            data_context: Ray's context (its ``target_max_block_size``; default: the
                current one).

        Returns:
            The tasks (none for an empty dataset).
        """
        n = self._count
        count = self.task_count(parallelism, data_context)
        if count == 0:
            return []
        rows = self.rows_per_block(_target_block_bytes(data_context))
        limit = None if per_task_row_limit is None else int(per_task_row_limit)
        blocks = _Blocks(self._decoder, self._with_index)
        reads: list[tuple[_Read, int, int]] = []
        if self._shuffle:
            order = GlobalShuffleOrder(n, self._seed, self._epoch)
            cuts = np.linspace(0, n, count + 1).astype(np.int64).tolist()
            for lo, hi in itertools.pairwise(cuts):
                end = hi if limit is None else min(hi, lo + limit)
                reads.append((_Read(self._dataset, lo, end, rows, blocks, order), end - lo,
                              hi - lo))
        else:
            reads.extend(self._partition_read(part, rows, blocks, limit)
                         for part in self.plan(count))
        mean = self._bytes / len(self._dataset)
        tasks = []
        for read, records, size in reads:
            if records <= 0:
                continue
            estimated = self._shuffle or limit is not None or read.positions is not None
            size_bytes = int(mean * records) if estimated else size
            meta = BlockMetadata(num_rows=records, size_bytes=size_bytes, input_files=None,
                                 exec_stats=None)
            tasks.append(_read_task(read, meta, per_task_row_limit))
        return tasks

    def _partition_read(self, part: Partition, rows: int, blocks: _Blocks,
                        limit: int | None) -> tuple[_Read, int, int]:
        """The read of one partition (its first ``limit`` records), how many records it
        reads, and the bytes of its splits."""
        subset, lo, hi = partition_dataset(self._dataset, part)
        positions = partition_positions(part)
        first = part[0].start - lo
        size = sum(s.byte_range[1] - s.byte_range[0] for s in part)
        if positions is not None:
            positions = positions[:limit]
            return (_Read(subset, lo, hi, rows, blocks, None, first, positions), len(positions),
                    size)
        end = hi if limit is None else min(hi, lo + limit)
        return _Read(subset, lo, end, rows, blocks, None, first), end - lo, size

    def plan(self, count: int) -> SplitPlan:
        """The read tasks' record ranges in dataset order: :func:`ofindex.planning.splits
        .plan_splits` balanced by bytes plus ``_RECORD_COST`` a record (compressed shards cut
        at their seek points), of the records of ``where`` alone when given.

        Args:
            count: How many tasks to aim at.

        Returns:
            The plan (one task per partition).
        """
        return plan_splits(self._layouts, count, "bytes", record_cost=_RECORD_COST,
                           selected=self._selected)


def read_task_count(records: int, rows_per_block: int, parallelism: int, cpus: int) -> int:
    """How many read tasks read ``records`` records: one per block's worth of records (a task
    costs Ray tens of milliseconds to start, and the records of a block are read by one task),
    but at least one per CPU of the cluster, at most ``parallelism`` (what Ray asks for, or
    ``override_num_blocks``) and at most one per record.

    Args:
        records: The records to read (> 0).
        rows_per_block: Records per block.
        parallelism: The most tasks.
        cpus: The cluster's CPUs.

    Returns:
        At least 1.
    """
    blocks = -(-records // max(1, rows_per_block))
    return max(1, min(parallelism, records, max(blocks, cpus)))


def _target_block_bytes(data_context: Any) -> int | None:
    """Ray's ``target_max_block_size`` in ``data_context`` (default: the current context)."""
    context = data_context if data_context is not None else ray.data.DataContext.get_current()
    target = getattr(context, "target_max_block_size", None)
    return None if target is None else int(target)


def _cluster_cpus() -> int:
    """The CPUs of the Ray cluster this driver is connected to (1 when it is not)."""
    if not ray.is_initialized():
        return 1
    resources = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return max(1, int(resources.get("CPU", 1)))


def balanced_cuts(dataset: Dataset, count: int) -> np.ndarray:
    """Record numbers cutting ``dataset`` into ranges of about equal cost (its bytes, a record
    costing ``_RECORD_COST`` more), as the read tasks are cut: the bounds of
    :func:`ofindex.planning.splits.plan_dataset`'s partitions.

    Returns:
        Non-decreasing record numbers from 0 to ``len(dataset)`` (at most ``count + 1``).
    """
    plan = plan_dataset(dataset, count, "bytes", record_cost=_RECORD_COST)
    return np.array(plan.divisions() if len(plan) else [0, 0], dtype=np.int64)


def _read_task(read: Callable[[], Iterator[Any]], meta: BlockMetadata,
               limit: int | None) -> ReadTask:
    """A ``ReadTask`` (with Ray's own row limit where this Ray knows one)."""
    if "per_task_row_limit" in inspect.signature(ReadTask.__init__).parameters:
        return ReadTask(read, meta, per_task_row_limit=limit)
    return ReadTask(read, meta)


class _Blocks:
    """How records become an Arrow block: raw payloads (column ``bytes``) or decoded
    features, with or without the column ``index``.

    Args:
        decoder: Decodes the records (``None``: raw payloads).
        with_index: Add each row's global record number.
    """

    def __init__(self, decoder: BatchDecoder | None, with_index: bool) -> None:
        self.decoder = decoder
        self.with_index = with_index
        spec = decoder.spec if decoder is not None and isinstance(decoder.spec, Mapping) else {}
        bytes_features = {name: fs for name, fs in spec.items()
                          if getattr(fs, "dtype", None) == "bytes"}
        #: ``bytes`` features that are one value per record: decoded into one buffer each
        #: (``BatchFetch``'s ``pack_bytes``), which becomes the binary column without a copy.
        self.packed = {name for name, fs in bytes_features.items()
                       if isinstance(fs, FixedLen) and fs.shape == ()}
        #: Whether every ``bytes`` feature is packed (other shapes keep their list columns).
        self.packs = len(self.packed) == len(bytes_features)

    def raw(self, batch: RecordBatch, first: int) -> pa.Table:
        """The block of a :class:`RecordBatch` (its buffer is the column's data: no copy);
        ``first``: the global number of its first record."""
        columns = {"bytes": _binary(batch.data, batch.offsets)}
        if self.with_index:
            columns["index"] = pa.array(np.arange(first, first + len(batch), dtype=np.int64))
        return pa.table(columns)

    def records(self, records: list[bytes], index: np.ndarray) -> pa.Table:
        """The block of raw payloads given as ``bytes`` and their global numbers."""
        columns = {"bytes": pa.array(records, type=pa.large_binary())}
        if self.with_index:
            columns["index"] = pa.array(index)
        return pa.table(columns)

    def decoded(self, batch: Mapping[str, Any], index: np.ndarray) -> Any:
        """The block of a decoded batch (``{name: column}``) and its global numbers."""
        columns: dict[str, Any] = {}
        for name, value in batch.items():
            if name in self.packed and isinstance(value, Ragged):
                columns[name] = _binary(value.values, value.row_splits)
            else:
                columns[name] = _column(value)
        if self.with_index:
            columns["index"] = index
        return BlockAccessor.batch_to_block(columns)


class _Read:
    """One read task: records ``[lo, hi)`` of ``dataset`` in blocks of ``rows_per_block``
    (or, with ``order``, the records at positions ``[lo, hi)`` of that permutation; with
    ``positions``, those records of ``dataset``); ``first``: the global number of
    ``dataset``'s first record."""

    def __init__(self, dataset: Dataset, lo: int, hi: int, rows_per_block: int,
                 blocks: _Blocks, order: GlobalShuffleOrder | None, first: int = 0,
                 positions: np.ndarray | None = None) -> None:
        self.dataset = dataset
        self.lo, self.hi = lo, hi
        self.rows_per_block = rows_per_block
        self.blocks = blocks
        self.order = order
        self.first = first
        self.positions = positions

    def __call__(self) -> Iterator[Any]:
        if self.blocks.decoder is not None:
            yield from self._decoded()
        elif self.order is not None or self.positions is not None:  # batched reads
            for index in self._indices():
                yield self.blocks.records(self.dataset.__getitems__(index), index + self.first)
        else:  # raw, in order: payloads packed into one buffer per block
            for batch in self.dataset.iter_batches(self.rows_per_block, self.lo, self.hi,
                                                   as_buffer=True):
                yield self.blocks.raw(batch, self.first + batch.first)

    def _indices(self) -> Iterator[np.ndarray]:
        """The record numbers of each block (of ``dataset``; global when shuffled)."""
        if self.positions is not None:
            for at in range(0, len(self.positions), self.rows_per_block):
                yield self.positions[at:at + self.rows_per_block]
            return
        for at in range(self.lo, self.hi, self.rows_per_block):
            positions = np.arange(at, min(at + self.rows_per_block, self.hi), dtype=np.int64)
            yield self.order(positions) if self.order is not None else positions

    def _decoded(self) -> Iterator[Any]:
        """Decoded blocks: one read and one decoder call per block (straight out of the maps
        of local files, ``bytes`` features packed where they are one value per record)."""
        fetch = BatchFetch(self.dataset, self.blocks.decoder, pack_bytes=self.blocks.packs)
        for index in self._indices():
            batch, _ = fetch(index)
            assert isinstance(batch, dict)  # examples and OFRecords decode to {name: column}
            yield self.blocks.decoded(batch, index + self.first)


def _binary(data: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """A ``large_binary`` Arrow array over ``data`` (bytes) cut at ``offsets`` (``len + 1``
    positions), without a copy."""
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


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
