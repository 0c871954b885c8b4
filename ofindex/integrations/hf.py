"""Hugging Face ``datasets`` integration: an ofindex dataset as a ``datasets.Dataset`` or a
``datasets.IterableDataset`` with typed ``Features``, for ``map``, ``filter`` and training
without converting the TFRecords first::

    from ofindex.decode import BatchDecoder, FixedLen, VarLen
    from ofindex.integrations.hf import to_hf_dataset, to_hf_iterable

    decoder = BatchDecoder({"text": FixedLen((), "bytes"), "label": FixedLen((), "int64"),
                            "tokens": VarLen("int64")})
    train = to_hf_dataset(ofindex.open("data/"), decoder)     # in memory, as Arrow
    train = train.map(tokenize).filter(lambda r: r["label"] >= 0)
    stream = to_hf_iterable(ofindex.open("s3://bucket/data/"), decoder, seed=0)

The spec's features become ``datasets.Features``: ``FixedLen`` of shape ``()`` a ``Value``,
of shape ``(k, ...)`` a ``List`` of length ``k`` (nested per dimension), ``VarLen`` a
``List``, bytes ``Value("binary")``. Records are read by batches, each with one
``__getitems__`` call and one ``BatchDecoder`` call, and turned into Arrow columns without a
Python object per value (bytes features excepted).

A dataset written from Arrow data (``ofindex.convert`` of a Hugging Face dataset or of
Parquet files) has a column map beside its manifest; ``to_hf_dataset(ds)`` without a decoder
reads it and gives the columns back as they were written: the same ``Features`` (``ClassLabel``
names, ``Image``, ``Audio``, ``Array2D`` …), Arrow types, column order, values and nulls
(see :mod:`ofindex.encode.arrow_map`)::

    ofindex.convert(hf_dataset, "train/")
    assert to_hf_dataset(ofindex.open("train/")).features == hf_dataset.features
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..decode import BatchDecoder, FixedLen, Ragged, VarLen
from ..encode.arrow_back import arrow_table, decode_spec
from ..encode.arrow_map import plan_schema, schema_of
from ..errors import missing_extra
from ._batch_plan import BatchPlan
from ._fetch import BatchFetch, RecordSource
from ._typed_spec import feature_specs

try:
    import datasets
    import pyarrow as pa
    from datasets.table import InMemoryTable
except ImportError as _exc:  # pragma: no cover - exercised without datasets only
    raise missing_extra("ofindex.integrations.hf", "hf", _exc) from _exc

__all__ = ["hf_features", "to_hf_dataset", "to_hf_iterable"]

_VALUES = {"bytes": "binary", "float32": "float32", "float64": "float64", "int32": "int32",
           "int64": "int64"}


def hf_features(decoder: BatchDecoder) -> datasets.Features:
    """The ``datasets.Features`` of what ``decoder`` decodes.

    Args:
        decoder: A :class:`~ofindex.decode.BatchDecoder` of Examples or OFRecords whose spec
            maps every feature to ``FixedLen`` or ``VarLen``.

    Returns:
        ``Features`` with one column per feature, in the spec's order.

    Raises:
        TypeError: ``decoder`` is not a ``BatchDecoder``.
        ValueError: The spec has a feature without a dtype, or decodes SequenceExamples.
    """
    columns = {}
    for name, feature in feature_specs(decoder).items():
        column: Any = datasets.Value(_VALUES[feature.dtype])
        if isinstance(feature, VarLen):
            column = datasets.List(column)
        else:
            for size in reversed(feature.shape):
                column = datasets.List(column, length=size)
        columns[name] = column
    return datasets.Features(columns)


def _column(value: np.ndarray | Ragged, feature: FixedLen | VarLen) -> pa.Array:
    """One decoded feature of a batch as an Arrow array of ``hf_features``' type."""
    if isinstance(value, Ragged):
        offsets = np.zeros(len(value.row_lengths) + 1, dtype=np.int64)
        np.cumsum(value.row_lengths, out=offsets[1:])
        rows = pa.LargeListArray.from_arrays(offsets, _flat(np.asarray(value.values),
                                                            feature.dtype))
        values = pa.binary() if feature.dtype == "bytes" else pa.from_numpy_dtype(
            np.dtype(feature.dtype))
        return rows.cast(pa.list_(values))  # datasets' List: 32-bit offsets
    column = _flat(value.reshape(-1), feature.dtype)
    shape = feature.shape if isinstance(feature, FixedLen) else ()
    for level in range(len(shape) - 1, -1, -1):
        if shape[level]:
            column = pa.FixedSizeListArray.from_arrays(column, shape[level])
        else:  # lists of no values: how many cannot come from the values (from_arrays fails)
            count = len(value) * math.prod(shape[:level])
            column = pa.Array.from_buffers(pa.list_(column.type, 0), count, [None],
                                           children=[column])
    return column


def _flat(values: np.ndarray, dtype: str) -> pa.Array:
    if dtype == "bytes":
        return pa.array(values.tolist(), type=pa.binary())
    return pa.array(values)


def _record_batches(fetch: BatchFetch, features: dict[str, FixedLen | VarLen],
                    schema: pa.Schema, batches: Iterator[np.ndarray]) -> Iterator[pa.RecordBatch]:
    """Each batch of record numbers read, decoded and turned into an Arrow record batch."""
    for indices in batches:
        decoded, _ = fetch(indices)
        arrays = [_column(decoded[name], feature) for name, feature in features.items()]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _column_map(source: RecordSource) -> dict[str, Any]:
    """The column map of an ofindex dataset written from Arrow data.

    Raises:
        ValueError: ``source`` has none.
    """
    reader = getattr(source, "column_map", None)
    doc = reader() if callable(reader) else None
    if doc is None:
        raise ValueError(f"{type(source).__name__} has no column map (ofindex-columns.json: "
                         "the dataset was not written from Arrow data, e.g. by "
                         "ofindex.convert of Parquet or a Hugging Face dataset): pass "
                         "decoder=BatchDecoder(spec) to say what to decode")
    return doc


def _has_map(arrow_type: pa.DataType) -> bool:
    if pa.types.is_map(arrow_type):
        return True
    return any(_has_map(arrow_type.field(k).type) for k in range(arrow_type.num_fields))


def _from_column_map(source: RecordSource, order: np.ndarray,
                     batch_size: int) -> datasets.Dataset:
    """The records as the Arrow columns they were written from (their column map).

    Raises:
        ValueError: A column holds a map (``datasets`` has no such type).
    """
    doc = _column_map(source)
    schema = schema_of(doc["arrow_schema"])
    for field in schema:
        if _has_map(field.type):
            raise ValueError(f"column {field.name!r} is a map, which a Hugging Face dataset "
                             "cannot hold (datasets has no map type); cast it to a list of "
                             "struct<key, value> before converting, or decode its features "
                             f"({field.name}/key, {field.name}/value) with a decoder=")
    kind = "ofrecord" if doc["format"] == "ofrecord" else "example"
    nodes = plan_schema(schema, kind, doc["float64"])
    fetch = BatchFetch(source, BatchDecoder(decode_spec(nodes), kind))
    batches = []
    for at in range(0, len(order), batch_size):
        chunk = order[at:at + batch_size]
        decoded, _ = fetch(chunk)
        batches.append(arrow_table(schema, nodes, decoded, len(chunk)))
    table = pa.Table.from_batches(batches, schema=schema)
    return datasets.Dataset(InMemoryTable(table))


def to_hf_dataset(source: RecordSource, decoder: BatchDecoder | None = None, *,
                  indices: Sequence[int] | np.ndarray | None = None,
                  batch_size: int = 1024) -> datasets.Dataset:
    """The records, decoded, as an in-memory ``datasets.Dataset`` (one Arrow table).

    Args:
        source: The records: an ofindex ``Dataset`` or anything with ``__len__`` and
            ``__getitems__`` (or ``__getitem__``).
        decoder: A :class:`~ofindex.decode.BatchDecoder` whose spec gives every feature's
            dtype (see :func:`hf_features`), or ``None``: the columns the dataset was written
            from, by its column map (a dataset ``ofindex.convert`` wrote from Parquet or a
            Hugging Face dataset): their ``Features``, types, order, values and nulls.
        indices: The records to take, in this order (``None``: all, in dataset order), e.g.
            a subset or one epoch of a shuffle.
        batch_size: Records read and decoded per call.

    Returns:
        A ``datasets.Dataset`` with :func:`hf_features` as its features (or those written,
        without ``decoder``); row ``k`` is record ``indices[k]``.

    Raises:
        TypeError, ValueError: As for :func:`hf_features`; ``batch_size < 1``; no
            ``decoder`` and no column map.
        IndexError: An index is out of range.
        DecodeError: The records do not follow the column map.
    """
    if int(batch_size) < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = (np.arange(len(source), dtype=np.int64) if indices is None
             else np.asarray(indices, dtype=np.int64).reshape(-1))
    if decoder is None:
        return _from_column_map(source, order, int(batch_size))
    features = hf_features(decoder)
    chunks = (order[at:at + batch_size] for at in range(0, len(order), int(batch_size)))
    schema = features.arrow_schema
    table = pa.Table.from_batches(
        list(_record_batches(BatchFetch(source, decoder), feature_specs(decoder), schema,
                             chunks)), schema=schema)
    return datasets.Dataset(InMemoryTable(table), info=datasets.DatasetInfo(features=features))


def to_hf_iterable(source: RecordSource, decoder: BatchDecoder, *, batch_size: int = 256,
                   seed: int = 0, shuffle: bool = True, epoch: int = 0) -> datasets.IterableDataset:
    """One epoch of a global shuffle as a streaming ``datasets.IterableDataset``.

    Nothing is converted or cached: records are read as the dataset is iterated, a batch at
    a time. Its shards are the epoch's batches, so ``DataLoader`` workers and
    ``datasets.distributed.split_dataset_by_node`` split them: each record is read by one
    worker of one node.

    Args:
        source: The records: an ofindex ``Dataset`` (picklable, for ``DataLoader`` workers)
            or anything with ``__len__`` and ``__getitems__`` (or ``__getitem__``).
        decoder: A :class:`~ofindex.decode.BatchDecoder` whose spec gives every feature's
            dtype (see :func:`hf_features`).
        batch_size: Records read and decoded per call (one shard of the iterable).
        seed: Selects the shuffle, with ``epoch``.
        shuffle: ``False`` reads the records in dataset order.
        epoch: Which epoch's shuffle.

    Returns:
        A ``datasets.IterableDataset`` of ``{name: value}`` rows with :func:`hf_features`.

    Raises:
        TypeError, ValueError: As for :func:`hf_features`; ``batch_size < 1``; an empty
            source.
    """
    features = hf_features(decoder)
    plan = BatchPlan(len(source), batch_size, seed=seed, shuffle=shuffle)
    steps = list(range(int(epoch) * len(plan), (int(epoch) + 1) * len(plan)))
    return datasets.IterableDataset.from_generator(
        _rows, features=features,
        gen_kwargs={"steps": steps, "plan": plan, "fetch": BatchFetch(source, decoder),
                    "specs": feature_specs(decoder), "schema": features.arrow_schema})


def _rows(steps: list[int], plan: BatchPlan, fetch: BatchFetch,
          specs: dict[str, FixedLen | VarLen], schema: pa.Schema) -> Iterator[dict[str, Any]]:
    """The rows of the batches ``steps`` (the generator of :func:`to_hf_iterable`)."""
    batches = (plan.indices(step) for step in steps)
    for record_batch in _record_batches(fetch, specs, schema, batches):
        yield from record_batch.to_pylist()
