"""Datasets the tests build and then read elsewhere (copied to a server, a bucket, a child).

Built once per test module (``scope="module"`` fixtures call these), read back locally for the
records a remote read must give.
"""

from __future__ import annotations

import pytest

import ofindex
from ofindex.cli.synthetic import write_dataset


def random_dataset(factory: pytest.TempPathFactory, name: str, records: int, shards: int, *,
                   record_size: int, seed: int,
                   manifest: bool = True) -> tuple[str, list[bytes]]:
    """A dataset directory of ``shards`` files ``part-00000``… holding ``records`` random
    records of about ``record_size`` bytes, and those records as read back locally.

    Args:
        factory: pytest's ``tmp_path_factory``: the directory is a new one of it.
        name: the stem of the directory's name.
        records: how many records, spread evenly over the shards.
        shards: how many data files.
        record_size: the records' typical size in bytes.
        seed: the seed of the random bytes (a fixed one per test module).
        manifest: True: indexed as a received dataset is (``ofindex.build_index``: sidecars
            and the manifest); False: by the writer alone (each file's sidecar, no manifest).

    Returns:
        ``(directory, records in dataset order)``.
    """
    directory = str(factory.mktemp(name))
    write_dataset(directory, records, shards, kind="random", record_size=record_size,
                  index=not manifest, seed=seed)
    if manifest:
        ofindex.build_index(directory)
    with ofindex.open(directory) as ds:
        return directory, [ds[i] for i in range(len(ds))]
