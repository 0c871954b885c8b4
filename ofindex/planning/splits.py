"""The split planner: a dataset cut into partitions for parallel engines (Ray, Dask, Beam,
Spark), each partition a run of *splits* ``(file, first_record, last_record, byte_range)``.

Engines split TFRecord files at whole files at best (a gzip file cannot be entered in the
middle without an index). With a sidecar, a file can be cut anywhere between two records; a
GZIP/ZLIB file at its seek points (where inflating can resume). :func:`plan_splits` cuts
the records into ``count`` partitions of about equal cost, by record count
(``balance="records"``) or by the bytes of the data files a partition reads
(``balance="bytes"``, optionally with ``record_cost`` bytes more per record, the work a record
costs beyond its bytes). A partition covers consecutive records: the tail of one file, whole
files, the head of another; many small files share one partition, and one big file gives as
many partitions as asked.

The planner itself is pure: it takes :class:`FileLayout` rows (record count, size, and a way
to load a file's offsets) and reads nothing but the offsets of the files where a cut falls, and
only those (a partition of whole files needs no index at all). :func:`layouts_of` makes the
rows of an opened :class:`~ofindex.read.dataset.Dataset`, loading a sidecar on first use.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import numpy as np

from ..read.dataset import Dataset

__all__ = ["FileLayout", "FileOffsets", "Partition", "Split", "SplitPlan", "layouts_of",
           "partition_dataset", "plan_dataset", "plan_splits"]

#: How partitions are made equal: by record count, or by the data files' bytes.
Balance = Literal["records", "bytes"]


@dataclasses.dataclass(frozen=True)
class FileOffsets:
    """Where a file's records lie, as its sidecar says.

    Attributes:
        starts: Where each record's framing starts in the file's stream (the uncompressed
            stream of a GZIP/ZLIB file), one per record.
        end: Where the last record ends in that stream.
        seek_out: The seek points' offsets in the uncompressed stream (empty: the file is not
            compressed).
        seek_start: The first compressed byte inflating from each seek point needs.
        seek_end: The compressed offset of each seek point (the data before a point's
            uncompressed offset lies before it).
    """

    starts: np.ndarray
    end: int
    seek_out: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    seek_start: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    seek_end: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def compressed(self) -> bool:
        """Whether the file is GZIP/ZLIB compressed (it has seek points)."""
        return len(self.seek_out) > 0


@dataclasses.dataclass(frozen=True)
class FileLayout:
    """What the planner knows of one data file before reading its index.

    Attributes:
        url: The data file.
        records: Its records.
        size: Its size in bytes.
        load: Loads its offsets (called only for a file a cut falls inside).
        compressed: Whether it is compressed, when known without loading (``None``:
            ``load`` tells).
    """

    url: str
    records: int
    size: int
    load: Callable[[], FileOffsets]
    compressed: bool | None = None


@dataclasses.dataclass(frozen=True)
class Split:
    """A run of records of one file.

    Attributes:
        file: The file's number in the dataset.
        url: The file.
        first_record: Its first record (numbered in the file).
        last_record: Its last record (numbered in the file, included).
        byte_range: ``(start, end)``: the bytes of the data file a reader of these records
            reads (of a GZIP/ZLIB file: from the seek point before the first record to the
            one after the last).
        start: The dataset's number of ``first_record``.
    """

    file: int
    url: str
    first_record: int
    last_record: int
    byte_range: tuple[int, int]
    start: int

    @property
    def records(self) -> int:
        """How many records the split holds."""
        return self.last_record - self.first_record + 1

    @property
    def stop(self) -> int:
        """The dataset's number of the record after the split."""
        return self.start + self.records


#: A partition: consecutive splits, in dataset order (one engine task reads one).
Partition = tuple[Split, ...]


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    """Partitions of a dataset, in dataset order.

    Attributes:
        partitions: The partitions (none for a dataset without records).
        records: Records in the dataset.
        balance: How they were balanced.
    """

    partitions: list[Partition]
    records: int
    balance: Balance

    def __len__(self) -> int:
        return len(self.partitions)

    def __iter__(self) -> Iterator[Partition]:
        return iter(self.partitions)

    def bounds(self) -> list[tuple[int, int]]:
        """``(start, stop)``: the dataset's record numbers each partition covers."""
        return [(p[0].start, p[-1].stop) for p in self.partitions]

    def divisions(self) -> list[int]:
        """The first record number of each partition, then the number of records (Dask's
        ``divisions`` of a frame indexed by record number: ``len(plan) + 1`` values)."""
        return [p[0].start for p in self.partitions] + [self.records]


def plan_splits(files: Sequence[FileLayout], count: int, balance: Balance = "records", *,
                record_cost: float = 0.0, min_records: int = 1) -> SplitPlan:
    """Cut the records of ``files`` into at most ``count`` partitions of about equal cost.

    Args:
        files: The dataset's files, in order.
        count: How many partitions to aim at (fewer when there are fewer places to cut: a
            compressed file is cut only at its seek points).
        balance: ``"records"``: equal record counts; ``"bytes"``: equal bytes of the data files
            (a compressed file's compressed bytes).
        record_cost: With ``"bytes"``, bytes added per record (what a record costs beyond its
            bytes).
        min_records: No partition holds fewer records than this (but the last, when the
            dataset has fewer).

    Returns:
        The plan (no partition for a dataset without records).

    Raises:
        ValueError: ``count`` or ``min_records`` is below 1, ``balance`` is unknown, or
            ``record_cost`` is negative.
    """
    if count < 1 or min_records < 1:
        raise ValueError(f"count and min_records must be at least 1, not {count} and "
                         f"{min_records}")
    if balance not in ("records", "bytes"):
        raise ValueError(f"balance must be 'records' or 'bytes', not {balance!r}")
    if record_cost < 0:
        raise ValueError(f"record_cost must be >= 0, not {record_cost}")
    planner = _Planner(files, balance, float(record_cost))
    cuts = planner.cuts(count, min_records)
    partitions = [planner.partition(lo, hi) for lo, hi in itertools.pairwise(cuts)]
    return SplitPlan(partitions, planner.total, balance)


class _Planner:
    """One planning: the files' costs, their offsets loaded once each."""

    def __init__(self, files: Sequence[FileLayout], balance: Balance, record_cost: float) -> None:
        self.files = list(files)
        self.balance = balance
        self.record_cost = record_cost
        counts = np.array([f.records for f in self.files], dtype=np.int64)
        self.first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.total = int(self.first[-1])
        if balance == "records":
            costs = counts.astype(np.float64)
        else:
            sizes = np.array([f.size for f in self.files], dtype=np.float64)
            costs = np.where(counts > 0, sizes + record_cost * counts, 0.0)
        self.cost_ends = np.cumsum(costs)
        self._offsets: dict[int, FileOffsets] = {}

    def offsets(self, file: int) -> FileOffsets:
        """The offsets of ``file`` (loaded once)."""
        found = self._offsets.get(file)
        if found is None:
            found = self._offsets[file] = self.files[file].load()
        return found

    def cuts(self, count: int, min_records: int) -> list[int]:
        """The dataset's record numbers where partitions start, and the total at the end."""
        if self.total == 0:
            return [0]
        total_cost = float(self.cost_ends[-1])
        targets = total_cost * np.arange(1, count, dtype=np.float64) / count
        cuts = {0, self.total}
        for target in targets.tolist():
            file = min(int(np.searchsorted(self.cost_ends, target, side="right")),
                       len(self.files) - 1)
            before = float(self.cost_ends[file - 1]) if file else 0.0
            cuts.add(int(self.first[file]) + self.cut_in_file(file, target - before))
        return _spaced(sorted(cuts), min_records)

    def cut_in_file(self, file: int, cost: float) -> int:
        """The record of ``file`` to cut before nearest to ``cost`` into it (0 or its record
        count: at its start or end)."""
        layout = self.files[file]
        if cost <= 0:  # at the file's start (a whole-file cut needs no index)
            return 0
        if self.balance == "records" and layout.compressed is False:
            return min(layout.records, max(0, round(cost)))
        offsets = self.offsets(file)
        records, costs = self.candidates(layout, offsets)
        at = int(np.searchsorted(costs, cost))
        if at == len(costs) or (at > 0 and cost - costs[at - 1] <= costs[at] - cost):
            at -= 1
        return int(records[at])

    def candidates(self, layout: FileLayout, offsets: FileOffsets
                   ) -> tuple[np.ndarray, np.ndarray]:
        """The records of a file a partition may start at (0 and its record count included)
        and the cost of the file before each, ascending."""
        n = layout.records
        starts = np.asarray(offsets.starts[:n], dtype=np.int64)
        if offsets.compressed:  # the first record starting at or after each seek point
            records = np.unique(np.concatenate([
                [0], np.searchsorted(starts, offsets.seek_out, side="left"), [n]]))
            inner = records[(records > 0) & (records < n)]
            points = np.searchsorted(offsets.seek_out, starts[inner], side="right") - 1
            at = offsets.seek_start[points].astype(np.float64)
        else:
            records = np.arange(n + 1, dtype=np.int64)
            inner = records[1:-1]
            at = starts[inner].astype(np.float64)
        if self.balance == "records":
            return records, records.astype(np.float64)
        costs = np.concatenate([[0.0], at, [float(layout.size)]])
        return records, costs + self.record_cost * records

    def partition(self, lo: int, hi: int) -> Partition:
        """The splits of the dataset's records ``[lo, hi)``."""
        splits = []
        file = int(np.searchsorted(self.first, lo, side="right")) - 1
        while lo < hi:
            first = int(self.first[file])
            end = min(hi, int(self.first[file + 1]))
            if end > lo:
                layout = self.files[file]
                a, b = lo - first, end - first
                splits.append(Split(file, layout.url, a, b - 1, self.byte_range(file, a, b), lo))
                lo = end
            file += 1
        return tuple(splits)

    def byte_range(self, file: int, a: int, b: int) -> tuple[int, int]:
        """The bytes of ``file`` a reader of its records ``[a, b)`` reads."""
        layout = self.files[file]
        if a == 0 and b == layout.records:
            return 0, layout.size
        offsets = self.offsets(file)
        begin = int(offsets.starts[a])
        end = int(offsets.starts[b]) if b < layout.records else int(offsets.end)
        if not offsets.compressed:
            return begin, end
        point = int(np.searchsorted(offsets.seek_out, begin, side="right")) - 1
        after = int(np.searchsorted(offsets.seek_out, end, side="left"))
        stop = int(offsets.seek_end[after]) if after < len(offsets.seek_out) else layout.size
        return int(offsets.seek_start[point]), stop


def _spaced(cuts: list[int], min_records: int) -> list[int]:
    """``cuts`` (ascending, from 0 to the total) without those closer than ``min_records``
    to the one before (the total stays)."""
    kept = [cuts[0]]
    for cut in cuts[1:-1]:
        if cut - kept[-1] >= min_records and cuts[-1] - cut >= min_records:
            kept.append(cut)
    kept.append(cuts[-1])
    return kept


def layouts_of(dataset: Dataset) -> list[FileLayout]:
    """The planner's rows for an opened dataset: counts and sizes as the dataset knows them
    (its manifest, or its sidecars' headers), each file's offsets loaded from its sidecar
    when a cut falls inside it.

    Args:
        dataset: The dataset.

    Returns:
        One row per shard, in order.
    """
    known = None if dataset._compressed else False  # no shard compressed: known at open
    return [FileLayout(info.url, info.records, info.bytes, _Loader(dataset, k), known)
            for k, info in enumerate(dataset.shards)]


class _Loader:
    """Loads the offsets of shard ``shard`` of ``dataset`` (picklable, unlike a lambda)."""

    def __init__(self, dataset: Dataset, shard: int) -> None:
        self.dataset = dataset
        self.shard = shard

    def __call__(self) -> FileOffsets:
        sidecar = self.dataset._table.shards[self.shard].sidecar
        if not sidecar.compressed:
            return FileOffsets(sidecar.offsets, int(sidecar.indexed_end))
        seeks = sidecar.seeks
        every = np.arange(len(seeks), dtype=np.int64)
        return FileOffsets(sidecar.offsets, int(sidecar.indexed_end), seeks.out,
                           seeks.compressed_starts(every), seeks.in_)


def plan_dataset(dataset: Dataset, count: int, balance: Balance = "records", *,
                 record_cost: float = 0.0, min_records: int = 1) -> SplitPlan:
    """:func:`plan_splits` over an opened dataset's shards (see :func:`layouts_of`).

    Args:
        dataset: The dataset.
        count: How many partitions to aim at.
        balance: ``"records"`` or ``"bytes"``.
        record_cost: With ``"bytes"``, bytes added per record.
        min_records: No partition holds fewer records (but the last).

    Returns:
        The plan.

    Raises:
        ValueError: As :func:`plan_splits`.
        SidecarError: A sidecar a cut falls in is corrupt.
    """
    return plan_splits(layouts_of(dataset), count, balance, record_cost=record_cost,
                       min_records=min_records)


def partition_dataset(dataset: Dataset, partition: Partition) -> tuple[Dataset, int, int]:
    """The dataset of the shards a partition reads (what a task carries: only those shards'
    rows), and the partition's records in it.

    Args:
        dataset: The planned dataset.
        partition: One of its plan's partitions.

    Returns:
        ``(subset, lo, hi)``: read records ``[lo, hi)`` of ``subset``; the dataset's number of
        ``subset``'s record 0 is ``partition[0].start - lo``.
    """
    table = dataset._table
    first, last = partition[0].file, partition[-1].file
    subset = Dataset(table.storage, table.shards[first:last + 1], dataset.format,
                     verify=dataset.verify, decode=None, compressed=dataset._compressed)
    lo = partition[0].first_record
    return subset, lo, lo + sum(s.records for s in partition)
