"""Datasets opened apart read as one: their shards one after the other in one dataset.

A weighted mixture numbers its sources' records one source after the other (source ``s``'s
record ``i`` is ``offset_s + i``), which is exactly how one dataset numbers the shards of
several: reading a mixed batch through the concatenation is one batch read (one plan, one
compiled gather over the shards of every source) instead of one per source. Joining datasets
joins their shard lists (:func:`~ofindex.read.dataset.join_datasets`): the
shards are the sources' own objects (their loaded sidecars shared), each read through the
storage of its own data file (so every data file is still checked against the stamp its own
dataset expects) by the access its own dataset binds it to.
"""

from __future__ import annotations

from collections.abc import Sequence

from .dataset import Dataset, join_datasets

__all__ = ["concatenated"]


def concatenated(datasets: Sequence[Dataset]) -> Dataset | None:
    """One dataset whose records are those of ``datasets``, one after the other.

    Args:
        datasets: Opened datasets, at least one.

    Returns:
        The dataset itself when only one is given; a dataset over all their shards when
        they read alike (the same record format, ``verify``, ``decode``, ``max_gap`` and
        ``max_read_bytes``; their storages and caches may differ: each shard keeps its
        own); otherwise ``None`` (read them one by one).

    Raises:
        ValueError: ``datasets`` is empty.
    """
    if not datasets:
        raise ValueError("concatenated needs at least one dataset")
    if len(datasets) == 1:
        return datasets[0]
    return join_datasets(datasets)
