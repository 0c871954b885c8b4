"""Datasets opened apart read as one: their shards one after the other in one dataset.

A weighted mixture numbers its sources' records one source after the other (source ``s``'s
record ``i`` is ``offset_s + i``), which is exactly how one dataset numbers the shards of
several: reading a mixed batch through the concatenation is one batch read (one plan, one
compiled gather) instead of one per source. The shards are the sources' own objects (their
loaded sidecars are shared); the storage is joined (:func:`ofindex.storage.union.
joined_storage`), so every data file is still checked against the stamp its own dataset
expects.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..cache.data import same_cache
from ..formats.dataset_identity import joined_identity
from ..storage.union import joined_storage
from .dataset import Dataset

__all__ = ["concatenated"]


def concatenated(datasets: Sequence[Dataset]) -> Dataset | None:
    """One dataset whose records are those of ``datasets``, one after the other.

    Args:
        datasets: Opened datasets, at least one.

    Returns:
        The dataset itself when only one is given; a dataset over all their shards when
        they read alike (the same record format, ``verify``, ``decode``, ``max_gap`` and
        ``max_read_bytes``, and storages of one kind with the same settings); otherwise
        ``None`` (read them one by one).

    Raises:
        ValueError: ``datasets`` is empty.
    """
    if not datasets:
        raise ValueError("concatenated needs at least one dataset")
    first = datasets[0]
    if len(datasets) == 1:
        return first
    for other in datasets[1:]:
        if (other.format is not first.format or other.verify != first.verify
                or other.decode is not first.decode
                or other.max_read_bytes != first.max_read_bytes
                or other._max_gap != first._max_gap):
            return None
    storage = joined_storage([ds._table.storage for ds in datasets])
    if storage is None:
        return None
    return Dataset(storage, [shard for ds in datasets for shard in ds._table.shards],
                   first.format, verify=first.verify, decode=first.decode,
                   max_gap=first._max_gap, max_read_bytes=first.max_read_bytes,
                   compressed=any(ds._compressed for ds in datasets),
                   data_cache=same_cache([ds.data_cache for ds in datasets]),
                   identity=joined_identity([ds.identity for ds in datasets]))
