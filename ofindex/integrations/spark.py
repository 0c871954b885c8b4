"""Apache Spark integration (Spark 4.0 or later): ofindex datasets as a Python Data Source,
``spark.read.format("ofindex")`` and ``df.write.format("ofindex")``.

**Reading.** ``spark.read.format("ofindex").load(path)`` opens the files on the driver (it
reads only their indexes) and makes one Spark partition per partition of the split planner
(:func:`ofindex.planning.splits.plan_dataset`): one big file gives as many partitions as
asked (``option("partitions", N)``), a GZIP/ZLIB file is cut at its seek points. Each task
reads its records in one pass and hands Spark Arrow record batches (records of local,
uncompressed files decoded straight out of their memory maps, ``bytes`` features packed into
Arrow buffers: :meth:`~ofindex.integrations._arrow_tables.PartitionRead.decoded_batches`).
The columns are the DataFrame's schema: given with ``.schema("label bigint, tokens
array<bigint>, name string")`` (mapped to a spec: ``bigint``/``int``/``float``/``double`` as
scalars, ``binary``/``string`` as a bytes feature, ``array<…>`` as a ``VarLen``), or
inferred from a sample of the records (:func:`ofindex.infer_spec`); ``option("raw",
"true")`` gives the payloads in one ``bytes`` column.

**Writing.** ``df.write.format("ofindex").save(path)`` writes TFRecord (``option("format",
"ofrecord")``: OFRecord) shards with their sidecars from the executors, each task its own
(:class:`ofindex.write.jobs.TaskWriter`, encoding the Arrow batches Spark hands it), and the
driver publishes them with the manifest when the job commits; an aborted job publishes
nothing (its files are removed). The columns are encoded as Example features (a DataFrame of
one binary column ``bytes`` is written as raw payloads). Options: ``compression`` (``gzip``,
``zlib``), ``shardRecords``, ``shardBytes``. Spark's ``overwrite`` mode is refused: a dataset
is never written over another.

**Filter pushdown** (Spark 4.1 or later). A ``filter``/``where`` on a column the dataset was
indexed with (``build_index(columns=[...])``, ``ofindex build --columns``) is answered from
the column before any record is read: the split planner's partitions hold only the matching
records (partitions without one are dropped), and Spark does not apply the filter again.
Which filters are taken, and why the others are left to Spark, is in
:mod:`ofindex.integrations._spark_filters`; the results are those of Spark applying the
filter itself. :func:`register` turns on Spark's ``spark.sql.python.filterPushdown.enabled``
(off by default: with it off, Spark refuses a Python reader that can take filters);
``option("pushdown", "false")`` reads without it::

    from ofindex.integrations.spark import register

    register(spark)
    df = spark.read.format("ofindex").option("partitions", 64).load("s3://bucket/train/")
    df.groupBy("label").count().show()
    df.filter(df.label == 3).count()  # reads only the records of label 3 (a built column)
    df.write.format("ofindex").option("compression", "gzip").save("s3://bucket/copy/")
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..errors import missing_extra

try:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceReader,
        Filter,
        InputPartition,
        WriterCommitMessage,
    )
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        DataType,
        DoubleType,
        FloatType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )
except ImportError as _exc:  # without the extra: say which one to install
    raise missing_extra("ofindex.integrations.spark", "spark", _exc) from _exc

from ..decode import FixedLen, VarLen
from ..errors import ColumnError, IndexNotFoundError, OfindexError
from ..opening import open as open_dataset
from ..planning.splits import layouts_of, plan_splits
from ..read.dataset import Dataset
from ..schema import infer_spec
from ..write.jobs import StagedShard, WriteJob
from ._arrow_tables import BYTES_COLUMN, PartitionRead
from ._spark_filters import condition_of

__all__ = ["OfindexDataSource", "OfindexFilteringReader", "register", "spark_schema",
           "spec_of_schema"]

#: The name the source is registered under (``spark.read.format(NAME)``).
NAME = "ofindex"
#: Bytes of data files a partition reads when ``partitions`` is not given.
PARTITION_BYTES = 64 << 20
#: Records in one Arrow batch handed to Spark.
_BATCH_ROWS = 8192

_SCALARS: dict[str, DataType] = {"int64": LongType(), "int32": IntegerType(),
                                 "float32": FloatType(), "float64": DoubleType(),
                                 "bytes": BinaryType()}


#: The Spark setting without which Spark refuses a Python reader that takes filters.
PUSHDOWN_SETTING = "spark.sql.python.filterPushdown.enabled"


def register(spark: SparkSession) -> None:
    """Register the data source with a session: ``spark.read.format("ofindex")`` and
    ``df.write.format("ofindex")`` work from then on, and filters on built columns are
    pushed down (this turns on ``spark.sql.python.filterPushdown.enabled``, which Spark
    leaves off).

    Args:
        spark: The session.
    """
    spark.dataSource.register(OfindexDataSource)
    spark.conf.set(PUSHDOWN_SETTING, "true")


def spark_schema(spec: Mapping[str, FixedLen | VarLen] | None) -> StructType:
    """The DataFrame schema of a spec (``None``: one ``bytes`` column of payloads).

    Args:
        spec: ``{name: FixedLen | VarLen}``.

    Returns:
        The schema: scalars as their type, ``bytes`` as binary, shaped ``FixedLen`` as nested
        arrays, ``VarLen`` as an array.
    """
    if spec is None:
        return StructType([StructField(BYTES_COLUMN, BinaryType(), nullable=False)])
    fields = []
    for name, fs in spec.items():
        kind: DataType = _SCALARS[fs.dtype]
        for _ in (fs.shape if isinstance(fs, FixedLen) else (0,)):
            kind = ArrayType(kind, containsNull=False)
        fields.append(StructField(name, kind, nullable=True))
    return StructType(fields)


def _value_dtype(kind: DataType, name: str) -> str:
    """The spec dtype of a scalar Spark type."""
    if isinstance(kind, StringType):
        return "bytes"
    for dtype, scalar in _SCALARS.items():
        if type(kind) is type(scalar):
            return dtype
    raise OfindexError(
        f"column {name!r}: Spark type {kind.simpleString()} has no Example feature type; use "
        "bigint, int, float, double, binary, string or an array of one of them")


def spec_of_schema(schema: StructType) -> dict[str, FixedLen | VarLen] | None:
    """The spec a DataFrame schema asks for (see the module's docstring): ``None`` for one
    binary column ``bytes`` (raw payloads).

    Args:
        schema: The schema.

    Returns:
        The spec, or ``None``.

    Raises:
        OfindexError: A column's type has no feature type (a map, a struct, an array of
            arrays…), naming the column.
    """
    fields = list(schema.fields)
    if len(fields) == 1 and fields[0].name == BYTES_COLUMN and isinstance(
            fields[0].dataType, BinaryType):
        return None
    spec: dict[str, FixedLen | VarLen] = {}
    for field in fields:
        kind = field.dataType
        if isinstance(kind, ArrayType):
            spec[field.name] = VarLen(_value_dtype(kind.elementType, field.name))
        else:
            spec[field.name] = FixedLen((), _value_dtype(kind, field.name))
    return spec


def _open_kwargs(options: Mapping[str, str]) -> dict[str, Any]:
    """The :func:`ofindex.open` arguments of the reader's options."""
    kwargs: dict[str, Any] = {}
    if "storage_options" in options:
        kwargs["storage_options"] = json.loads(options["storage_options"])
    if "index_dir" in options:
        kwargs["index_dir"] = options["index_dir"]
    if "verify" in options:
        kwargs["verify"] = options["verify"].lower() != "false"
    return kwargs


def _path(options: Mapping[str, str]) -> str:
    path = options.get("path")
    if not path:
        raise OfindexError("the ofindex data source needs a path: "
                           "spark.read.format('ofindex').load(path) or .save(path)")
    return path


class OfindexDataSource(DataSource):  # type: ignore[misc]
    """The ``ofindex`` Python Data Source (see the module's docstring).

    Spark makes it with the options of the read or write (``self.options``): ``path``, and
    for reading ``partitions``, ``balance`` (``bytes`` or ``records``), ``raw``, ``kind``,
    ``pushdown`` (``false``: Spark applies every filter), ``index_dir``, ``verify``,
    ``storage_options`` (JSON); for writing ``format``,
    ``compression``, ``shardRecords``, ``shardBytes``, ``storage_options``.
    """

    @classmethod
    def name(cls) -> str:
        """The format name: ``"ofindex"``."""
        return NAME

    def _dataset(self) -> Dataset:
        return open_dataset(_path(self.options), **_open_kwargs(self.options))

    def schema(self) -> StructType:
        """The schema when none is given: the payloads (``raw``), or inferred from a sample
        of the records.

        Raises:
            OfindexError: The records are not Examples or OFRecords (read them with
                ``option("raw", "true")``).
        """
        if self.options.get("raw", "false").lower() == "true":
            return spark_schema(None)
        with self._dataset() as dataset:
            inferred = infer_spec(dataset)
        if inferred.kind not in ("example", "ofrecord") or not inferred.spec:
            raise OfindexError(
                f"{_path(self.options)}: no features could be inferred (the records are "
                f"{inferred.kind!r}); give the columns with .schema(...) or read the payloads "
                "with .option('raw', 'true')")
        return spark_schema(inferred.spec)

    def reader(self, schema: StructType) -> OfindexReader:
        """The reader of ``schema``'s columns: one that takes filters on built columns, unless
        ``option("pushdown", "false")``."""
        if self.options.get("pushdown", "true").lower() == "false":
            return OfindexReader(dict(self.options), schema)
        return OfindexFilteringReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> OfindexWriter:
        """The writer of a DataFrame of ``schema``.

        Raises:
            OfindexError: ``overwrite`` (Spark's ``mode("overwrite")``).
            DatasetExistsError: The directory holds data files.
        """
        if overwrite:
            raise OfindexError(f"{_path(self.options)}: the ofindex data source never writes "
                               "over a dataset; save to a new directory")
        return OfindexWriter(dict(self.options), schema)


class OfindexReader(DataSourceReader):  # type: ignore[misc]
    """Reads the split planner's partitions as Arrow batches (made on the driver, pickled to
    the executors)."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.spec = spec_of_schema(schema)
        self.arrow_schema = to_arrow_schema(schema)
        self.kind = options.get("kind")
        #: The conditions of the filters taken (``(column, condition)``, as
        #: ``ds.positions`` takes them): the plan holds only the records meeting all.
        self.conditions: list[tuple[str, object]] = []

    def selected(self, dataset: Dataset) -> np.ndarray | None:
        """The records meeting every condition taken (``None``: no condition)."""
        found: np.ndarray | None = None
        for column, condition in self.conditions:
            hits = dataset.positions(**{column: condition})
            found = hits if found is None else np.intersect1d(found, hits, assume_unique=True)
        return found

    def partitions(self) -> list[InputPartition]:
        """One input partition per partition of the plan (of a pushed filter: only those
        holding matching records, and only them).

        Raises:
            ValueError: ``partitions`` is not a whole number >= 1, or a bad ``balance``.
        """
        dataset = open_dataset(_path(self.options), **_open_kwargs(self.options))
        selected = self.selected(dataset)
        count = self.options.get("partitions")
        if count is None:
            data = sum(s.bytes for s in dataset.shards)
            if selected is not None:
                data = data * len(selected) // max(1, len(dataset))
            wanted = max(1, math.ceil(data / PARTITION_BYTES))
        else:
            wanted = int(count)
        balance = self.options.get("balance", "bytes")
        plan = plan_splits(layouts_of(dataset), wanted, balance,  # type: ignore[arg-type]
                           selected=selected)
        if not len(plan):
            return [InputPartition(None)]
        return [InputPartition(PartitionRead(dataset, part)) for part in plan]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's records as Arrow batches of the DataFrame's schema.

        Raises:
            As ``Dataset.iter_batches``; DecodeError: a record does not fit the schema.
        """
        part: PartitionRead | None = partition.value
        if part is None:
            return
        for table in part.tables(self.spec, kind=self.kind, rows=_BATCH_ROWS):
            yield from table.cast(self.arrow_schema).to_batches()


class OfindexFilteringReader(OfindexReader):
    """:class:`OfindexReader` taking the filters that built columns answer exactly (Spark 4.1
    ``pushFilters``; see :mod:`ofindex.integrations._spark_filters`)."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Take the filters a built column answers exactly; give back the others.

        Args:
            filters: What Spark pushes (their conjunction).

        Yields:
            The filters Spark still applies (those not taken), as given.
        """
        if self.spec is None:
            yield from filters
            return
        fields = {f.name: f.dataType for f in self.schema.fields
                  if isinstance(self.spec.get(f.name), FixedLen)
                  and self.spec[f.name].shape == ()}  # type: ignore[union-attr]
        with open_dataset(_path(self.options), **_open_kwargs(self.options)) as dataset:
            types: dict[str, str | None] = {}

            def column_type(name: str) -> str | None:
                if name not in types:
                    try:
                        types[name] = dataset.column_type(name)
                    except (ColumnError, IndexNotFoundError):  # not built: Spark's to apply
                        types[name] = None
                return types[name]

            for spark_filter in filters:
                taken = condition_of(spark_filter, fields, column_type)
                if taken is None:
                    yield spark_filter
                else:
                    self.conditions.append(taken)


@dataclasses.dataclass
class OfindexCommit(WriterCommitMessage):  # type: ignore[misc]
    """What a write task reports: its staged shards.

    Attributes:
        shards: The shards, with their sidecars, under hidden names.
    """

    shards: list[StagedShard]


class OfindexWriter(DataSourceArrowWriter):  # type: ignore[misc]
    """Writes each task's shards with their sidecars; publishes them with the manifest on
    commit (made on the driver, pickled to the executors)."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        spec = spec_of_schema(schema)
        self.raw = spec is None
        shard_records = options.get("shardrecords", options.get("shardRecords"))
        shard_bytes = options.get("shardbytes", options.get("shardBytes"))
        storage = options.get("storage_options")
        self.job = WriteJob(
            _path(options), options.get("format", "tfrecord"),
            compression=options.get("compression") or None, spec=spec,
            shard_records=None if shard_records is None else int(shard_records),
            shard_bytes=None if shard_bytes is None else int(shard_bytes),
            storage_options=None if storage is None else json.loads(storage))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> OfindexCommit:
        """Write one task's batches (on an executor).

        Raises:
            EncodeError: A value that cannot be encoded (naming the column and row).
        """
        from pyspark import TaskContext

        context = TaskContext.get()
        task = self.job.task(context.partitionId() if context is not None else 0)
        try:
            for batch in iterator:
                if self.raw:
                    task.write_many(batch.column(0).to_pylist())
                else:
                    task.write_columns(pa.Table.from_batches([batch]))
            return OfindexCommit(task.close())
        except BaseException:
            task.abort()
            raise

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Publish every task's shards and the manifest (on the driver)."""
        self.job.commit([m.shards for m in messages if isinstance(m, OfindexCommit)])

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Remove everything the job wrote: nothing is published."""
        self.job.abort()
