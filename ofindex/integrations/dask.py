"""Dask integration: an ofindex dataset as a Dask DataFrame with known divisions, or a Bag of
payloads, read in parallel by the split planner's partitions.

:func:`read` opens the files on the client (it reads only their indexes), cuts the records
with :func:`ofindex.planning.splits.plan_dataset` (inside files, GZIP/ZLIB files at their seek
points) and gives Dask one task per partition. The frame's index is the record number in the
dataset, so its ``divisions`` are known from the record counts: ``df.loc[a:b]`` reads only
the partitions holding those records, and joins on the record number need no shuffle.

Columns are the spec's features decoded (numbers as numpy columns of their dtype; bytes,
shaped and ``VarLen`` features as Arrow-backed columns, ``pd.ArrowDtype`` of binary and list
types), or with no spec the raw payloads (column ``bytes``); ``spec="infer"`` infers one
from a sample (:func:`ofindex.infer_spec`). ``where=`` reads only the records meeting
conditions on columns built with ``build_index(columns=[...])`` (as ``ds.positions`` takes
them): the partitions hold only those, indexed by their record numbers::

    from ofindex.decode import FixedLen
    from ofindex.integrations.dask import read

    df = read("s3://bucket/train/", {"label": FixedLen((), "int64")},
              storage_options={"anon": True})
    df.groupby("label").size().compute()
    threes = read("s3://bucket/train/", where={"label": 3})  # only the records of label 3
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..errors import missing_extra

try:
    import dask.bag as dask_bag
    import dask.dataframe as dd
    import pandas as pd
    import pyarrow
    from dask.delayed import delayed
except ImportError as _exc:  # without the extra: say which one to install
    raise missing_extra("ofindex.integrations.dask", "dask", _exc) from _exc

from ..decode import FixedLen, VarLen
from ..opening import open as open_dataset
from ..planning.splits import Balance, SplitPlan, layouts_of, plan_splits
from ..read.dataset import Dataset
from ..schema import infer_spec
from ._arrow_tables import INDEX_COLUMN, PartitionRead, table_schema

__all__ = ["PARTITION_BYTES", "plan_for", "read", "read_bag"]

#: Bytes of data files a partition reads by default: Dask's own advice is partitions of about
#: 100 MB in memory, and decoded records take more room than their bytes on disk.
PARTITION_BYTES = 64 << 20

#: A spec: ``{name: FixedLen | VarLen}``, ``"infer"`` or ``None`` (raw payloads).
SpecArg = Mapping[str, FixedLen | VarLen] | Literal["infer"] | None


def plan_for(dataset: Dataset, partitions: int | None = None, balance: Balance = "bytes",
             where: Mapping[str, object] | None = None) -> SplitPlan:
    """The partitions :func:`read` and :func:`read_bag` read.

    Args:
        dataset: The dataset.
        partitions: How many to aim at (default: one per :data:`PARTITION_BYTES` of data
            files, of the matching records' share of them with ``where``).
        balance: ``"bytes"`` or ``"records"`` (see :func:`ofindex.planning.splits.plan_splits`).
        where: Only the records meeting these conditions (as ``ds.positions`` takes them).

    Returns:
        The plan.

    Raises:
        ValueError: ``partitions`` is below 1.
        ColumnError, ColumnNotFoundError: As ``ds.positions``.
    """
    selected = dataset.positions(**where) if where else None
    if partitions is None:
        data = sum(s.bytes for s in dataset.shards)
        if selected is not None:
            data = data * len(selected) // max(1, len(dataset))
        partitions = max(1, math.ceil(data / PARTITION_BYTES))
    return plan_splits(layouts_of(dataset), partitions, balance, selected=selected)


def _spec_of(spec: SpecArg, dataset: Dataset) -> dict[str, FixedLen | VarLen] | None:
    """The spec :func:`read` decodes with (``"infer"``: from a sample of the dataset)."""
    if spec is None:
        return None
    if isinstance(spec, str):
        if spec != "infer":
            raise ValueError(f"spec must be a mapping, 'infer' or None, not {spec!r}")
        return infer_spec(dataset).spec
    return dict(spec)


class _Frame:
    """Reads one partition as a pandas frame indexed by record number (picklable)."""

    def __init__(self, spec: dict[str, FixedLen | VarLen] | None, kind: str | None,
                 rows: int) -> None:
        self.spec, self.kind, self.rows = spec, kind, rows

    def __call__(self, part: PartitionRead) -> pd.DataFrame:
        tables = list(part.tables(self.spec, kind=self.kind, with_index=True, rows=self.rows))
        schema = table_schema(self.spec, with_index=True)
        table = pyarrow.concat_tables(tables) if tables else schema.empty_table()
        return _pandas(table)

    def meta(self) -> pd.DataFrame:
        """The empty frame of the columns' types."""
        return _pandas(table_schema(self.spec, with_index=True).empty_table())


def _arrow_backed(kind: pyarrow.DataType) -> pd.ArrowDtype | None:
    """Binary and list columns stay Arrow-backed (no Python object per value, and Dask does
    not take their ``bytes`` for text); numbers become numpy columns."""
    return None if pyarrow.types.is_primitive(kind) else pd.ArrowDtype(kind)


def _pandas(table: pyarrow.Table) -> pd.DataFrame:
    """A table as a frame indexed by record number."""
    frame: pd.DataFrame = table.to_pandas(types_mapper=_arrow_backed)
    return frame.set_index(INDEX_COLUMN)


def read(paths: str | Sequence[str], spec: SpecArg = None, *, partitions: int | None = None,
         balance: Balance = "bytes", kind: str | None = None, rows_per_batch: int = 4096,
         where: Mapping[str, object] | None = None, **open_kwargs: Any) -> dd.DataFrame:
    """Read TFRecord / OFRecord files indexed by ofindex as a Dask DataFrame.

    Args:
        paths: What :func:`ofindex.open` takes: a directory, a glob, a file, or a list.
        spec: Decode each record's features (``{name: FixedLen | VarLen}``), ``"infer"``
            (from a sample, :func:`ofindex.infer_spec`), or ``None``: one ``bytes`` column of
            raw payloads.
        partitions: How many partitions to aim at (default: one per
            :data:`PARTITION_BYTES` of data files; fewer when a compressed file has fewer seek
            points).
        balance: Make partitions equal in ``"bytes"`` or ``"records"``.
        kind: What the records are, for ``spec``: ``"example"`` or ``"ofrecord"``
            (default: the files' framing's).
        rows_per_batch: Records decoded at once in a task.
        where: Only the records meeting these conditions on built columns, as
            ``ds.positions`` takes them (``{"label": 3}``, ``{"label": [1, 2], "score":
            (0.5, None)}``): partitions hold only them (see
            :func:`ofindex.planning.splits.plan_dataset`).
        **open_kwargs: Passed to :func:`ofindex.open` (``storage_options``, ``index_dir``,
            ``verify`` …).

    Returns:
        The frame, indexed by record number (``index``), with known ``divisions``.

    Raises:
        OfindexError: As :func:`ofindex.open`.
        ValueError: A bad ``spec``, ``partitions`` or ``balance``.
        ColumnError: A bad condition.
        ColumnNotFoundError: A column the dataset was indexed without (the message names the
            build that adds it).
    """
    dataset = open_dataset(paths, **open_kwargs)
    decoded = _spec_of(spec, dataset)
    plan = plan_for(dataset, partitions, balance, where)
    frame = _Frame(decoded, kind, int(rows_per_batch))
    if not len(plan):
        return dd.from_pandas(frame.meta(), npartitions=1)  # type: ignore[no-untyped-call]
    reads = [PartitionRead(dataset, part) for part in plan]
    bounds = plan.divisions()
    divisions = [*bounds[:-1], bounds[-1] - 1]
    return dd.from_map(frame, reads, meta=frame.meta(),  # type: ignore[no-untyped-call]
                       divisions=divisions, label="read-ofindex", enforce_metadata=False)


def _payloads(part: PartitionRead, rows: int) -> list[bytes]:
    return [record for batch in part.batches(rows) for record in batch]


def read_bag(paths: str | Sequence[str], *, partitions: int | None = None,
             balance: Balance = "bytes", rows_per_batch: int = 4096,
             where: Mapping[str, object] | None = None, **open_kwargs: Any) -> dask_bag.Bag:
    """Read the raw payloads of TFRecord / OFRecord files indexed by ofindex as a Dask Bag,
    in dataset order.

    Args:
        paths: What :func:`ofindex.open` takes.
        partitions: How many partitions to aim at (as for :func:`read`).
        balance: ``"bytes"`` or ``"records"``.
        rows_per_batch: Records read at once in a task.
        where: Only the records meeting these conditions (as for :func:`read`).
        **open_kwargs: Passed to :func:`ofindex.open`.

    Returns:
        A Bag of ``bytes``.

    Raises:
        OfindexError: As :func:`ofindex.open`.
        ValueError: A bad ``partitions`` or ``balance``.
        ColumnError, ColumnNotFoundError: As for :func:`read`.
    """
    dataset = open_dataset(paths, **open_kwargs)
    plan = plan_for(dataset, partitions, balance, where)
    if not len(plan):
        return dask_bag.from_sequence([], npartitions=1)  # type: ignore[no-untyped-call]
    parts = [delayed(_payloads)(PartitionRead(dataset, part), int(rows_per_batch))
             for part in plan]
    return dask_bag.from_delayed(parts)  # type: ignore[no-untyped-call]
