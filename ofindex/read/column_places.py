"""Where a dataset's columns are: its shards' column sidecars (beside their sidecars) and its
key indexes (in the directory of its first shard's sidecar, where a build writes them beside
the manifest), for :class:`~ofindex.columns.query.DatasetColumns`."""

from __future__ import annotations

from ..columns.query import DatasetColumns
from ..columns.shard_reader import ShardPlace
from .shards import Shard
from .table import ShardTable


def _shard_place(shard: Shard) -> ShardPlace:
    body_crc = shard.body_crc
    if body_crc is None:  # no manifest names it: the header this process checked does
        body_crc = shard.header.body_crc
    return ShardPlace(shard.index_storage, shard.index_path, shard.records, body_crc,
                      shard.data_url)


def dataset_columns(table: ShardTable, identity: str) -> DatasetColumns:
    """The column queries of the dataset of ``table`` (whose identity is ``identity``): its
    shards' places are made when a query first scans column sidecars."""
    shards = table.shards
    home = None
    if len(shards):
        first = shards[0]
        home = (first.index_storage, first.index_storage.dirname(first.index_path))
    return DatasetColumns(lambda: [_shard_place(shard) for shard in table.shards], table.size,
                          identity, home)
