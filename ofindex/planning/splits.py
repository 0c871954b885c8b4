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

**Pruned by a selection.** Given the records to keep (``selected``: what
``ds.positions(**conditions)`` returns; :func:`plan_dataset` takes the conditions as ``where=``),
the plan holds only those: a split is tightened to its first and last kept record and knows
which records of that span it reads (:attr:`Split.positions`, ``None`` when it reads them all),
splits and partitions without a kept record are dropped, and partitions are balanced by kept
records (``"bytes"``: each kept record weighs its file's mean record size, plus
``record_cost``).

The planner itself is pure: it takes :class:`FileLayout` rows (record count, size, and a way
to load a file's offsets) and reads nothing but the offsets of the files where a cut falls, and
only those (a partition of whole files needs no index at all). :func:`layouts_of` makes the
rows of an opened :class:`~ofindex.read.dataset.Dataset`, loading a sidecar on first use.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Literal

import numpy as np

from ..read.dataset import Dataset

__all__ = ["FileLayout", "FileOffsets", "Partition", "Split", "SplitPlan", "layouts_of",
           "partition_dataset", "partition_positions", "plan_dataset", "plan_splits"]

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
        positions: The records of the file the split reads (ascending, from ``first_record``
            to ``last_record``) when a selection pruned the plan and they are not every
            record of that span; ``None``: every record from ``first_record`` to
            ``last_record``.
    """

    file: int
    url: str
    first_record: int
    last_record: int
    byte_range: tuple[int, int]
    start: int
    positions: np.ndarray | None = dataclasses.field(default=None, compare=False)

    @property
    def records(self) -> int:
        """How many records the split spans, from ``first_record`` to ``last_record``."""
        return self.last_record - self.first_record + 1

    @property
    def count(self) -> int:
        """How many records the split reads (:attr:`records`, or its :attr:`positions`)."""
        return self.records if self.positions is None else len(self.positions)

    def global_positions(self) -> np.ndarray:
        """The dataset's numbers of the records the split reads, ascending (int64)."""
        local = (np.arange(self.first_record, self.last_record + 1, dtype=np.int64)
                 if self.positions is None else self.positions)
        return local - self.first_record + self.start

    def runs(self) -> np.ndarray:
        """The records the split reads as runs of consecutive records of its file: rows
        ``(first, stop)`` (``stop`` excluded), ascending."""
        if self.positions is None:
            return np.array([[self.first_record, self.last_record + 1]], dtype=np.int64)
        breaks = np.flatnonzero(np.diff(self.positions) != 1) + 1
        firsts = self.positions[np.concatenate([[0], breaks])]
        lasts = self.positions[np.concatenate([breaks - 1, [len(self.positions) - 1]])]
        return np.stack([firsts, lasts + 1], axis=1).astype(np.int64)

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
        selected: Records the partitions read when a selection pruned the plan (``None``:
            every record of the dataset).
    """

    partitions: list[Partition]
    records: int
    balance: Balance
    selected: int | None = None

    @property
    def count(self) -> int:
        """How many records the partitions read."""
        return self.records if self.selected is None else self.selected

    def __len__(self) -> int:
        return len(self.partitions)

    def __iter__(self) -> Iterator[Partition]:
        return iter(self.partitions)

    def bounds(self) -> list[tuple[int, int]]:
        """``(start, stop)``: the dataset's record numbers each partition covers."""
        return [(p[0].start, p[-1].stop) for p in self.partitions]

    def divisions(self) -> list[int]:
        """The first record number of each partition, then the number after the last
        partition's last record (the number of records, unless a selection pruned the plan):
        ``len(plan) + 1`` values (Dask's ``divisions`` of a frame indexed by record number)."""
        if not self.partitions:
            return [self.records]
        return [p[0].start for p in self.partitions] + [self.partitions[-1][-1].stop]


def plan_splits(files: Sequence[FileLayout], count: int, balance: Balance = "records", *,
                record_cost: float = 0.0, min_records: int = 1,
                selected: np.ndarray | Sequence[int] | None = None) -> SplitPlan:
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
            dataset has fewer); with ``selected``, fewer selected records.
        selected: Only these records (the dataset's record numbers, ascending, each once:
            what ``ds.positions`` returns): splits hold only them, and partitions are
            balanced by them (see the module's docstring). ``None``: every record.

    Returns:
        The plan (no partition for a dataset without records, or without a selected one).

    Raises:
        ValueError: ``count`` or ``min_records`` is below 1, ``balance`` is unknown,
            ``record_cost`` is negative, or ``selected`` is not ascending record numbers of
            the files.
    """
    if count < 1 or min_records < 1:
        raise ValueError(f"count and min_records must be at least 1, not {count} and "
                         f"{min_records}")
    if balance not in ("records", "bytes"):
        raise ValueError(f"balance must be 'records' or 'bytes', not {balance!r}")
    if record_cost < 0:
        raise ValueError(f"record_cost must be >= 0, not {record_cost}")
    planner = _Planner(files, balance, float(record_cost))
    if selected is not None:
        planner.select(np.asarray(selected))
    cuts = planner.cuts(count, min_records)
    partitions = [planner.partition(lo, hi) for lo, hi in itertools.pairwise(cuts)]
    return SplitPlan([p for p in partitions if p], planner.total, balance,
                     None if planner.selected is None else len(planner.selected))


class _Planner:
    """One planning: the files' costs, their offsets loaded once each."""

    def __init__(self, files: Sequence[FileLayout], balance: Balance, record_cost: float) -> None:
        self.files = list(files)
        self.balance = balance
        self.record_cost = record_cost
        counts = np.array([f.records for f in self.files], dtype=np.int64)
        self.counts = counts
        self.first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.total = int(self.first[-1])
        self.sizes = np.array([f.size for f in self.files], dtype=np.float64)
        if balance == "records":
            costs = counts.astype(np.float64)
        else:
            costs = np.where(counts > 0, self.sizes + record_cost * counts, 0.0)
        self.cost_ends = np.cumsum(costs)
        self._offsets: dict[int, FileOffsets] = {}
        #: The records kept (global numbers), or ``None``: all.
        self.selected: np.ndarray | None = None
        #: With a selection: the kept records before each file (and the total, last).
        self.selected_before = np.zeros(0, dtype=np.int64)
        #: With a selection: what one kept record of each file costs.
        self.weights = np.zeros(0, dtype=np.float64)

    def select(self, selected: np.ndarray) -> None:
        """Keep only the records ``selected`` (global numbers, ascending, each once): costs
        become those of the kept records.

        Raises:
            ValueError: ``selected`` is not ascending record numbers below the total.
        """
        if selected.ndim != 1 or (len(selected) and not np.issubdtype(selected.dtype,
                                                                          np.integer)):
            raise ValueError("selected must be a 1-d array of record numbers")
        selected = selected.astype(np.int64, copy=False)
        if len(selected) and (int(selected[0]) < 0 or int(selected[-1]) >= self.total
                              or bool((np.diff(selected) <= 0).any())):
            raise ValueError(f"selected must be ascending record numbers, each once, in "
                             f"[0, {self.total})")
        self.selected = selected
        self.selected_before = np.searchsorted(selected, self.first).astype(np.int64)
        if self.balance == "records":
            self.weights = np.ones(len(self.files), dtype=np.float64)
        else:
            mean = np.divide(self.sizes, self.counts, out=np.zeros(len(self.files)),
                             where=self.counts > 0)
            self.weights = mean + self.record_cost
        self.cost_ends = np.cumsum(np.diff(self.selected_before) * self.weights)

    def kept(self, file: int) -> np.ndarray:
        """The kept records of ``file`` (numbered in the file; a selection is set)."""
        assert self.selected is not None
        begin, end = self.selected_before[file], self.selected_before[file + 1]
        kept: np.ndarray = self.selected[begin:end] - self.first[file]
        return kept

    def offsets(self, file: int) -> FileOffsets:
        """The offsets of ``file`` (loaded once)."""
        found = self._offsets.get(file)
        if found is None:
            found = self._offsets[file] = self.files[file].load()
        return found

    def cuts(self, count: int, min_records: int) -> list[int]:
        """The dataset's record numbers where partitions start, and the total at the end."""
        if self.total == 0 or (self.selected is not None and not len(self.selected)):
            return [0]
        total_cost = float(self.cost_ends[-1])
        targets = total_cost * np.arange(1, count, dtype=np.float64) / count
        cuts = {0, self.total}
        for target in targets.tolist():
            file = min(int(np.searchsorted(self.cost_ends, target, side="right")),
                       len(self.files) - 1)
            before = float(self.cost_ends[file - 1]) if file else 0.0
            cuts.add(int(self.first[file]) + self.cut_in_file(file, target - before))
        ordered = sorted(cuts)
        if self.selected is None:
            return _spaced(ordered, ordered, min_records)
        return _spaced(ordered, np.searchsorted(self.selected, ordered).tolist(), min_records)

    def cut_in_file(self, file: int, cost: float) -> int:
        """The record of ``file`` to cut before nearest to ``cost`` into it (0 or its record
        count: at its start or end)."""
        layout = self.files[file]
        if cost <= 0:  # at the file's start (a whole-file cut needs no index)
            return 0
        if self.selected is not None:
            return self.cut_in_kept(file, cost)
        if self.balance == "records" and layout.compressed is False:
            return min(layout.records, max(0, round(cost)))
        offsets = self.offsets(file)
        records, costs = self.candidates(layout, offsets)
        return _nearest(records, costs, cost)

    def cut_in_kept(self, file: int, cost: float) -> int:
        """:meth:`cut_in_file` with a selection: before the kept record that ``cost`` reaches
        (a compressed file: the place to cut at nearest to it)."""
        layout = self.files[file]
        kept = self.kept(file)
        weight = float(self.weights[file])
        if layout.compressed is False:
            k = min(len(kept), max(0, round(cost / weight)))
            return int(kept[k]) if k < len(kept) else layout.records
        records, _ = self.cut_points(layout, self.offsets(file))
        costs = weight * np.searchsorted(kept, records, side="left").astype(np.float64)
        return _nearest(records, costs, cost)

    def candidates(self, layout: FileLayout, offsets: FileOffsets
                   ) -> tuple[np.ndarray, np.ndarray]:
        """The records of a file a partition may start at (0 and its record count included)
        and the cost of the file before each, ascending."""
        records, at = self.cut_points(layout, offsets)
        if self.balance == "records":
            return records, records.astype(np.float64)
        costs = np.concatenate([[0.0], at, [float(layout.size)]])
        return records, costs + self.record_cost * records

    @staticmethod
    def cut_points(layout: FileLayout, offsets: FileOffsets) -> tuple[np.ndarray, np.ndarray]:
        """The records of a file a partition may start at (0 and its record count included;
        a compressed file's: the first after each seek point), and the bytes of the file
        before each of them but the first and last."""
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
        return records, at

    def partition(self, lo: int, hi: int) -> Partition:
        """The splits of the dataset's records ``[lo, hi)``."""
        splits = []
        file = int(np.searchsorted(self.first, lo, side="right")) - 1
        while lo < hi:
            first = int(self.first[file])
            end = min(hi, int(self.first[file + 1]))
            if end > lo:
                split = self.split(file, lo - first, end - first)
                if split is not None:
                    splits.append(split)
                lo = end
            file += 1
        return tuple(splits)

    def split(self, file: int, a: int, b: int) -> Split | None:
        """The split of records ``[a, b)`` of ``file`` (with a selection: of its kept
        records among them, ``None`` when there is none)."""
        positions = None
        if self.selected is not None:
            kept = self.kept(file)
            positions = kept[np.searchsorted(kept, a):np.searchsorted(kept, b)]
            if not len(positions):
                return None
            a, b = int(positions[0]), int(positions[-1]) + 1
            if len(positions) == b - a:  # every record of the span: a plain range
                positions = None
        layout = self.files[file]
        return Split(file, layout.url, a, b - 1, self.byte_range(file, a, b),
                     int(self.first[file]) + a, positions)

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


def _nearest(records: np.ndarray, costs: np.ndarray, cost: float) -> int:
    """The record of ``records`` whose cost (``costs``, ascending) is nearest ``cost``."""
    at = int(np.searchsorted(costs, cost))
    if at == len(costs) or (at > 0 and cost - costs[at - 1] <= costs[at] - cost):
        at -= 1
    return int(records[at])


def _spaced(cuts: list[int], ranks: list[int], min_records: int) -> list[int]:
    """``cuts`` (ascending, from 0 to the total) without those whose rank (``ranks``: the
    records before each cut that count, one per cut) is closer than ``min_records`` to the
    one kept before, or to the last (the total stays)."""
    kept, kept_rank = [cuts[0]], ranks[0]
    for cut, rank in zip(cuts[1:-1], ranks[1:-1], strict=True):
        if rank - kept_rank >= min_records and ranks[-1] - rank >= min_records:
            kept.append(cut)
            kept_rank = rank
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
    known = None if dataset.compressed else False  # no shard compressed: known at open
    return [FileLayout(info.url, info.records, info.bytes, _Loader(dataset, k), known)
            for k, info in enumerate(dataset.shards)]


class _Loader:
    """Loads the offsets of shard ``shard`` of ``dataset`` (picklable, unlike a lambda)."""

    def __init__(self, dataset: Dataset, shard: int) -> None:
        self.dataset = dataset
        self.shard = shard

    def __call__(self) -> FileOffsets:
        sidecar = self.dataset.sidecar(self.shard)
        if not sidecar.compressed:
            return FileOffsets(sidecar.offsets, int(sidecar.indexed_end))
        seeks = sidecar.seeks
        every = np.arange(len(seeks), dtype=np.int64)
        return FileOffsets(sidecar.offsets, int(sidecar.indexed_end), seeks.out,
                           seeks.compressed_starts(every), seeks.in_)


def plan_dataset(dataset: Dataset, count: int, balance: Balance = "records", *,
                 record_cost: float = 0.0, min_records: int = 1,
                 where: Mapping[str, object] | None = None) -> SplitPlan:
    """:func:`plan_splits` over an opened dataset's shards (see :func:`layouts_of`).

    Args:
        dataset: The dataset.
        count: How many partitions to aim at.
        balance: ``"records"`` or ``"bytes"``.
        record_cost: With ``"bytes"``, bytes added per record.
        min_records: No partition holds fewer records (but the last).
        where: Only the records meeting these conditions, as ``ds.positions(**where)``
            takes them (``{"label": 3}``, ``{"label": [1, 2]}``, ``{"score": (0.5,
            None)}``, ``{"caption": None}``), answered from the columns built with
            ``build_index(columns=...)``; ``None`` or empty: every record.

    Returns:
        The plan.

    Raises:
        ValueError: As :func:`plan_splits`.
        SidecarError: A sidecar a cut falls in is corrupt.
        ColumnError, ColumnNotFoundError: As ``ds.positions`` (a condition of no known form;
            a column the dataset was indexed without, naming the build that adds it).
    """
    selected = dataset.positions(**where) if where else None
    return plan_splits(layouts_of(dataset), count, balance, record_cost=record_cost,
                       min_records=min_records, selected=selected)


def partition_dataset(dataset: Dataset, partition: Partition) -> tuple[Dataset, int, int]:
    """The dataset of the shards a partition reads (what a task carries: only those shards'
    rows), and the partition's records in it.

    Args:
        dataset: The planned dataset.
        partition: One of its plan's partitions.

    Returns:
        ``(subset, lo, hi)``: the partition's records lie in ``[lo, hi)`` of ``subset`` (all
        of them, unless :func:`partition_positions` names some); the dataset's number of
        ``subset``'s record 0 is ``partition[0].start - lo``.
    """
    first, last = partition[0].file, partition[-1].file
    subset = dataset.shard_range(first, last + 1)
    base = partition[0].start - partition[0].first_record  # subset's record 0, in the dataset
    return subset, partition[0].first_record, partition[-1].stop - base


def partition_positions(partition: Partition) -> np.ndarray | None:
    """The records a partition of a pruned plan reads, numbered in its subset (see
    :func:`partition_dataset`).

    Args:
        partition: One of a plan's partitions.

    Returns:
        Their numbers, ascending (int64); ``None`` when the partition reads every record
        of its ``[lo, hi)``.
    """
    contiguous = all(b.start == a.stop for a, b in itertools.pairwise(partition))
    if contiguous and all(s.positions is None for s in partition):
        return None
    base = partition[0].start - partition[0].first_record
    return np.concatenate([s.global_positions() for s in partition]) - base
