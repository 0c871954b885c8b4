"""The key indexes a build with ``keys=`` writes beside the dataset's manifest: one per
column named, sorted by value over the whole dataset (see :mod:`ofindex.columns.key_file`),
once every shard's column sidecars are written. (Without ``keys=``, a local dataset's is
written by its first lookup: :mod:`ofindex.columns.query`.)"""

from __future__ import annotations

from collections.abc import Sequence

from .._threads import ProcessPool
from ..columns.key_build import build_key_index, key_index_path
from ..columns.shard_reader import ShardPlace
from ..formats.dataset_identity import dataset_identity
from ..storage import Storage
from .build_file import BuildResult
from .job import FileJob

#: The threads building key indexes, a column each: numpy's sorts and zlib, most of the
#: work, run without the GIL (label and id over a million records: 0.15 and 0.45 s of CPU),
#: so that a core left idle builds one column's while another builds the other's.
_POOL = ProcessPool("ofindex-key-indexes", max_threads=4)


def write_key_indexes(storage: Storage, directory: str, jobs: Sequence[FileJob],
                      results: Sequence[BuildResult], columns: tuple[str, ...]) -> None:
    """Write the key index of each of ``columns`` in ``directory``.

    Args:
        storage: Storage of the manifest.
        directory: The manifest's directory.
        jobs: The dataset's files' jobs, in dataset order (where their sidecars are).
        results: Their results, in the same order.
        columns: The columns.

    Raises:
        ColumnError: Shards store a column as different types.
        SidecarError: A column sidecar is damaged.
    """
    places = [ShardPlace(job.index_storage, job.index_path, result.records, result.body_crc,
                         result.data_url) for job, result in zip(jobs, results, strict=True)]
    identity = dataset_identity([r.records for r in results], [r.size for r in results],
                                [r.content for r in results], [r.body_crc for r in results])
    def build(column: str) -> int:
        return build_key_index(places, column, identity, storage,
                               key_index_path(storage, directory, column))

    pool = _POOL.get() if len(columns) > 1 else None
    if pool is None:
        for column in columns:
            build(column)
        return
    for _ in pool.map(build, columns):  # their sorts and deflating run without the GIL
        pass
