"""Apache Beam integration: a splittable read of ofindex datasets, and a write transform that
writes the shards, their sidecars and the manifest in the same pass.

:class:`ReadFromOfindex` opens the files when the pipeline is built (it reads only their
indexes) and cuts the records with the split planner
(:func:`ofindex.planning.splits.plan_dataset`: inside files, GZIP/ZLIB files at their seek
points). Each partition is one element read by a splittable ``DoFn`` whose restriction is the
partition's record range (an ``OffsetRange``): a runner may split what is left of it again,
and a GZIP shard is then entered at the seek point before the new start. Beam's own
``ReadFromTFRecord`` reads each file whole in one worker (``splittable=False``). With
``where=`` (conditions on columns built with ``build_index(columns=[...])``, as
``ds.positions`` takes them) only the matching records are read.

:class:`WriteToOfindex` is what a ``WriteToTFRecord`` user swaps in: each bundle writes its
shards with their sidecars under hidden names (:class:`ofindex.write.jobs.TaskWriter`), and
one step after every bundle has finished publishes them, ``part-00000-of-N``, and writes the
manifest (:meth:`ofindex.write.jobs.WriteJob.commit`): no ``ofindex build`` pass afterwards,
GZIP included. A bundle that fails and is retried leaves files that the commit removes; a
pipeline that fails publishes nothing::

    import apache_beam as beam
    from ofindex.integrations.beam import ReadFromOfindex, WriteToOfindex

    with beam.Pipeline() as p:
        (p | ReadFromOfindex("gs://bucket/raw/")
           | beam.Map(transform)
           | WriteToOfindex("gs://bucket/clean/", compression="gzip"))
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..decode import FixedLen, VarLen
from ..errors import missing_extra
from ..opening import open as open_dataset
from ..planning.splits import Balance, plan_dataset
from ..write.jobs import StagedShard, TaskWriter, WriteJob


def _drop_bigquery_notice(record: logging.LogRecord) -> bool:
    """Beam's import logs to the root logger that its BigQuery clients are missing (installed
    only by ``apache-beam[gcp]``), which a reader of TFRecords never uses."""
    return not record.getMessage().startswith("apitools not found")


logging.getLogger().addFilter(_drop_bigquery_notice)
try:
    import apache_beam as beam
    import pyarrow  # noqa: F401  (decoded records are cut from Arrow tables)
    from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
    from apache_beam.transforms import combiners
    from apache_beam.transforms.core import RestrictionProvider
    from apache_beam.transforms.window import GlobalWindow
    from apache_beam.utils.timestamp import MIN_TIMESTAMP
    from apache_beam.utils.windowed_value import WindowedValue
except ImportError as _exc:  # without the extra: say which one to install
    raise missing_extra("ofindex.integrations.beam", "beam", _exc) from _exc
finally:
    logging.getLogger().removeFilter(_drop_bigquery_notice)

from ._arrow_tables import (  # noqa: E402  (needs pyarrow, checked above)
    INDEX_COLUMN,
    PartitionRead,
)

__all__ = ["ReadFromOfindex", "WriteToOfindex"]

#: Records a read task reads at once.
_READ_ROWS = 4096


class _PartitionRestrictions(RestrictionProvider):  # type: ignore[misc]
    """A partition's restriction: its records' range in its shards (an ``OffsetRange``)."""

    def initial_restriction(self, element: PartitionRead) -> OffsetRange:
        return OffsetRange(element.lo, element.hi)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element: PartitionRead, restriction: OffsetRange) -> int:
        return len(element.restricted(restriction.start, restriction.stop))

    def split(self, element: PartitionRead, restriction: OffsetRange) -> Iterator[OffsetRange]:
        yield restriction  # the planner balanced the partitions already


#: How Beam gives :class:`_ReadPartition` its restriction's tracker.
_RESTRICTION = beam.DoFn.RestrictionParam(_PartitionRestrictions())


class _ReadPartition(beam.DoFn):  # type: ignore[misc]
    """Reads the records of its restriction of a partition, a batch at a time: lists of
    payloads, or of decoded features (``{name: value}``, one dict per record).

    A batch is one output element, claimed by its last record: Beam's per-output costs of a
    splittable ``DoFn`` (the claim under a lock, the output's timestamp made and observed
    under another) came to 60 % of a raw read's time when paid per record (cProfile of
    counting 192,307 GZIP records, in-memory runner); :func:`_each` then hands the records
    on one by one in the same fused stage.

    Args:
        spec: Decode with this spec (``None``: payloads).
        kind: ``"example"`` or ``"ofrecord"`` for ``spec``.
        rows: Records per batch.
    """

    def __init__(self, spec: dict[str, FixedLen | VarLen] | None, kind: str | None,
                 rows: int = _READ_ROWS) -> None:
        super().__init__()
        self.spec, self.kind, self.rows = spec, kind, rows

    def _numbered(self, piece: PartitionRead) -> Iterator[tuple[list[int], list[Any]]]:
        """``(numbers, records)`` of ``piece``, ``rows`` at a time, numbered as its
        restriction is."""
        if self.spec is None:
            for numbers, batch in piece.numbered_batches(self.rows):
                yield numbers.tolist(), batch
            return
        base = piece.start - piece.lo  # the dataset's number of the shards' first record
        for table in piece.tables(self.spec, kind=self.kind, with_index=True, rows=self.rows):
            numbers = (np.asarray(table.column(INDEX_COLUMN)) - base).tolist()
            yield numbers, table.drop_columns([INDEX_COLUMN]).to_pylist()

    def process(self, element: PartitionRead, tracker: Any = _RESTRICTION) -> Iterator[Any]:
        """Read and yield the batches of the tracker's range, claiming each by its last
        record first; a batch the range was split inside is cut at the split (the records
        before it are still this range's); then the range's end (a pruned partition may read
        no record near it)."""
        span = tracker.current_restriction()
        piece = element.restricted(span.start, span.stop)
        for numbers, records in self._numbered(piece):
            if not tracker.try_claim(numbers[-1]):
                stop = tracker.current_restriction().stop
                kept = bisect.bisect_left(numbers, stop)
                if kept:
                    yield records[:kept]
                return
            yield records
        tracker.try_claim(span.stop)


def _each(batch: list[Any]) -> list[Any]:
    """A batch's records, handed on one by one (``beam.FlatMap``)."""
    return batch


class ReadFromOfindex(beam.PTransform):  # type: ignore[misc, type-arg]
    """Read TFRecord / OFRecord files indexed by ofindex, split inside files.

    Args:
        paths: What :func:`ofindex.open` takes: a directory, a glob, a file, or a list.
        spec: Decode each record into ``{name: value}`` with this spec (numbers as Python
            numbers, bytes as ``bytes``, shaped and ``VarLen`` features as lists); ``None``:
            the payloads as ``bytes`` (what ``ReadFromTFRecord`` gives).
        partitions: How many partitions to aim at (default: 4 per CPU of this machine, at
            least one per 64 MiB of data files).
        balance: Make partitions equal in ``"bytes"`` or ``"records"``.
        kind: ``"example"`` or ``"ofrecord"`` for ``spec`` (default: the framing's).
        where: Only the records meeting these conditions on built columns, as
            ``ds.positions`` takes them (``{"label": 3}``, ``{"score": (0.5, None)}``):
            partitions hold only them (see :func:`ofindex.planning.splits.plan_dataset`).
        **open_kwargs: Passed to :func:`ofindex.open`, where the pipeline is built.

    Raises:
        OfindexError: As :func:`ofindex.open`.
        ValueError: A bad ``partitions`` or ``balance``.
        ColumnError: A bad condition.
        ColumnNotFoundError: A column the dataset was indexed without (the message names the
            build that adds it).
    """

    def __init__(self, paths: str | Sequence[str],
                 spec: Mapping[str, FixedLen | VarLen] | None = None, *,
                 partitions: int | None = None, balance: Balance = "bytes",
                 kind: str | None = None, where: Mapping[str, object] | None = None,
                 **open_kwargs: Any) -> None:
        super().__init__()
        dataset = open_dataset(paths, **open_kwargs)
        if partitions is None:
            data = sum(s.bytes for s in dataset.shards)
            partitions = max(4 * (os.cpu_count() or 1), -(-data // (64 << 20)))
        self.plan = plan_dataset(dataset, partitions, balance, where=where)
        self._reads = [PartitionRead(dataset, part) for part in self.plan]
        self._spec = None if spec is None else dict(spec)
        self._kind = kind

    def expand(self, pbegin: Any) -> Any:
        """The pipeline steps: the partitions, spread over workers, read."""
        return (pbegin
                | "Partitions" >> beam.Create(self._reads, reshuffle=False)
                | "Spread" >> beam.Reshuffle()
                | "Read" >> beam.ParDo(_ReadPartition(self._spec, self._kind))
                | "Records" >> beam.FlatMap(_each))


class _WriteBundles(beam.DoFn):  # type: ignore[misc]
    """Writes each bundle's records into shards of their own; yields the bundle's report."""

    def __init__(self, job: WriteJob) -> None:
        super().__init__()
        self.job = job
        self._writer: TaskWriter | None = None
        self._bundles = 0

    def start_bundle(self) -> None:
        self.teardown()  # a writer a failed bundle left open

    def process(self, element: Any) -> Iterator[Any]:
        """Write one record (bytes, a message or ``{name: value}``)."""
        if self._writer is None:
            # tasks are ordered by the worker's process and bundle: a stable order of shards
            self._bundles += 1
            self._writer = self.job.task(os.getpid() * (1 << 20) + self._bundles)
        self._writer.write(element)
        return iter(())

    def finish_bundle(self) -> Iterator[WindowedValue]:
        """Finish the bundle's shards and report them."""
        if self._writer is not None:
            report = self._writer.close()
            self._writer = None
            yield WindowedValue(report, MIN_TIMESTAMP, (GlobalWindow(),))

    def teardown(self) -> None:
        """Drop the shards of a bundle that failed (its records go to a retry, or nowhere:
        the job then publishes nothing)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.abort()


class _Commit(beam.DoFn):  # type: ignore[misc]
    """Publishes every report at once (after the last bundle), with the manifest."""

    def __init__(self, job: WriteJob) -> None:
        super().__init__()
        self.job = job

    def process(self, reports: list[list[StagedShard]]) -> Iterator[str]:
        """Publish; yields the shards' URLs."""
        try:
            summary = self.job.commit(reports)
        except BaseException:
            self.job.abort()
            raise
        yield from summary.files


class WriteToOfindex(beam.PTransform):  # type: ignore[misc, type-arg]
    """Write records as an indexed dataset: shards with their sidecars from the workers, the
    manifest when the last bundle is done.

    Args:
        directory: The dataset's directory, local or a bucket URL; it must hold no data files
            (checked when the pipeline is built).
        format: ``"tfrecord"`` or ``"ofrecord"``.
        spec: The spec feature mappings must fit (``{name: FixedLen | VarLen}``), or
            ``None`` (elements are payload bytes or protobuf messages, or mappings encoded
            without one).
        compression: ``"gzip"``, ``"zlib"`` or ``None`` (GZIP files with seek points: read
            in parallel, and split inside, by :class:`ReadFromOfindex`).
        shard_bytes: A bundle starts a new shard before one would pass this many bytes
            (default 256 MiB when ``shard_records`` is not given either).
        shard_records: A bundle starts a new shard after this many records.
        **job_kwargs: More :class:`ofindex.write.jobs.WriteJob` settings (``pattern``,
            ``storage_options``, ``checksums``, ``compression_level``, ``nulls``).

    The output is a ``PCollection`` of the published shards' URLs.

    Raises:
        DatasetExistsError: ``directory`` already holds data files.
        ValueError: A bad setting.
    """

    def __init__(self, directory: str, format: str = "tfrecord", *,
                 spec: Mapping[str, FixedLen | VarLen] | None = None,
                 compression: str | None = None, shard_bytes: int | None = None,
                 shard_records: int | None = None, **job_kwargs: Any) -> None:
        super().__init__()
        self.job = WriteJob(directory, format, spec=None if spec is None else dict(spec),
                            compression=compression, shard_bytes=shard_bytes,
                            shard_records=shard_records, **job_kwargs)

    def expand(self, pcoll: Any) -> Any:
        """The pipeline steps: write bundles, gather their reports, publish."""
        return (pcoll
                | "WriteShards" >> beam.ParDo(_WriteBundles(self.job))
                | "Reports" >> combiners.ToList()
                | "Publish" >> beam.ParDo(_Commit(self.job)))
