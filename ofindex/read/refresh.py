"""Datasets whose files grow: :meth:`Dataset.refresh` and :meth:`Dataset.follow`.

A refresh looks at every shard's data file (one ``stat`` each; remote ones in one concurrent
round) and at the dataset's location again (its manifest, listing or glob):

* a file as long as its index says, with the same fingerprint (or content), is unchanged;
* a longer file whose first bytes are the ones indexed (the content digest over the indexed
  size, :func:`ofindex.storage.identity.not_appended`) grew: only its new bytes are scanned
  (from the indexed end; a compressed file from its last seek point) and its shard's sidecar
  is extended in memory, in time proportional to the growth; a record still being written at
  the end is left for the next refresh, never taken as damage;
* a shorter file, or one whose first bytes changed, was truncated or replaced:
  :class:`~ofindex.errors.NotAppendedError`;
* files the location holds after the dataset's last shard (new shards of a
  ``ShardedWriter(..., append=True)``, a new log file) are opened (indexed first when they
  have no index) and join the dataset at its end; a shard gone or reordered is an error.

The data files are from then on read as growing (:attr:`ExpectedFiles.growing`): a longer
file is the one expected. Nothing is written: the index of a grown file is grown on disk by
``ofindex build`` (:mod:`ofindex.index.growth`). Records keep their numbers, except that the
records a shard gains come before those of the shards after it (a dataset of one growing
file, or whose last shard grows, only gains records at its end); :meth:`Dataset.follow`
yields every record once whatever shard it is in.

The scanning and indexing are the index builder's: the reading layer does not import it, so
:func:`ofindex.open` gives the dataset a :class:`Grower` (``ofindex.growing``).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from ..errors import OfindexError, StaleIndexError
from ..formats.location import DatasetLocation, resolve
from ..formats.sidecar import Sidecar
from ..formats.sidecar_growth import Growth
from ..storage import FileStamp, PathSpec, Storage, Storages
from ..storage.identity import grown_or_refused, not_appended_error, read_content_digest
from .shards import Shard
from .stray_shards import load_sidecars
from .table import ShardTable


class Dataset(Protocol):
    """What refreshing and following need of a :class:`~ofindex.read.dataset.Dataset`."""

    _table: ShardTable

    def _take_shards(self, shards: list[Shard]) -> None: ...

    def refresh(self) -> int: ...

    def iter_records(self, start: int = 0, stop: int | None = None,
                     block_bytes: int = 8 << 20) -> Iterator[Any]: ...


class Grower(Protocol):
    """What a refresh needs of the index builder (``ofindex.growing.IndexGrower``)."""

    def scan(self, storage: Storage, path: str, sidecar: Sidecar,
             current: FileStamp) -> Growth:
        """Index what ``path`` gained since ``sidecar`` (a record cut short at its end is
        not written yet)."""
        ...

    def build(self, location: DatasetLocation) -> None:
        """Index the files of ``location``, which have no index yet (files still being
        written)."""
        ...


@dataclasses.dataclass(frozen=True)
class DatasetSource:
    """How a dataset was opened: what :func:`refresh` resolves again to find new shards.

    Attributes:
        paths: The path spec opened.
        index_dir: The ``index_dir`` it was opened with.
        manifest: The ``manifest`` option it was opened with.
        allow_missing_shards: Whether a set lacking shards was accepted.
        storages: The storages of the open (the data storage is the dataset's).
        grower: The index builder's scan and build.
    """

    paths: PathSpec
    index_dir: str | None
    manifest: bool | str
    allow_missing_shards: bool
    storages: Storages
    grower: Grower


def refresh(ds: Dataset, source: DatasetSource | None) -> int:
    """Take up what the dataset's files gained and the shards added since it was opened (or
    last refreshed); see the module.

    Returns:
        The records added.

    Raises:
        NotAppendedError: A data file was truncated or replaced.
        StaleIndexError: A shard is gone, or the shards are in another order.
        OfindexError: The dataset was not made by ``ofindex.open`` (nothing to refresh from).
    """
    if source is None:
        raise OfindexError("this dataset was not opened by ofindex.open: nothing tells where "
                           "its files are to refresh it; open it with ofindex.open")
    table = ds._table
    storage = table.storage
    storage.expected.growing = True
    shards = list(table.shards)
    before = table.size
    stamps = _stamps(storage, [shard.path for shard in shards])
    changed = False
    for shard, current in zip(shards, stamps, strict=True):
        changed |= _refresh_shard(storage, shard, current, source.grower)
    added = _new_shards(storage, source, shards)
    if changed or added:
        ds._take_shards([*shards, *added])
    return ds._table.size - before


def _stamps(storage: Storage, paths: list[str]) -> list[FileStamp]:
    """The stamps of ``paths`` now (remote ones in one concurrent round)."""
    if storage.is_local:
        return [storage.stamp(path) for path in paths]
    _, stamps = storage.fetch_many([], paths)
    found: list[FileStamp] = []
    for stamp in stamps:
        if isinstance(stamp, BaseException):
            raise stamp
        found.append(stamp)
    return found


def _refresh_shard(storage: Storage, shard: Shard, current: FileStamp, grower: Grower) -> bool:
    """Take up what one shard's data file gained; ``True`` when it grew."""
    sidecar = shard.sidecar  # (loaded and checked when it was not yet)
    known = sidecar.header.stamp
    if current.size == known.size:
        if current.fingerprint != known.fingerprint and not storage.expected.verified(
                shard.path, current):
            # touched, copied over, or replaced by a file of the same size: its content tells
            digest = read_content_digest(storage, shard.path, current.size)
            if known.content is not None and digest != known.content:
                raise not_appended_error(shard.data_url, shard.index_url,
                                         "its content changed (the same size, another "
                                         "content digest): it was replaced")
            storage.expect(shard.path, current)
        return False
    grown_or_refused(storage, shard.path, known, current, shard.index_url)
    growth = grower.scan(storage, shard.path, sidecar, current)
    shard.grow(growth)
    storage.expect(shard.path, growth.header.stamp)
    storage.forget(shard.path)  # a map of the file as it was
    return True


def _new_shards(storage: Storage, source: DatasetSource, shards: list[Shard]) -> list[Shard]:
    """The shards the dataset's location holds after its own (opened, indexed first when
    they have no index).

    Raises:
        StaleIndexError: A shard of the dataset is not there any more, or not in its place.
    """
    location = resolve(source.paths, index_dir=source.index_dir, storages=source.storages,
                       manifest=source.manifest, allow_missing_shards=source.allow_missing_shards)
    files = list(location.files)
    known = [shard.path for shard in shards]
    if files[: len(known)] != known:
        gone = next((p for p in known if p not in set(files)), None)
        why = (f"{storage.url(gone)} is not there any more" if gone is not None
               else "its shards are listed in another order")
        raise StaleIndexError(f"{storage.url(known[0])}: the dataset cannot be refreshed: "
                              f"{why}; reopen it")
    new = files[len(known):]
    if not new:
        return []
    first = shards[0]
    made = [Shard(path, *location.sidecar_of(path), cache=first.cache, url=storage.url(path),
                  data_storage=first.data_storage) for path in new]
    missing = [s.path for s in made if not s.index_storage.exists(s.index_path)]
    if missing:
        source.grower.build(location.subset(missing))
    return load_sidecars(location, made, stacklevel=4)


def follow(ds: Dataset, poll_interval: float, stop: Callable[[], bool] | threading.Event | None,
           start: int, idle_timeout: float | None) -> Iterator[Any]:
    """The records of ``ds`` from record ``start`` on, then every record written after them,
    as it is written (see :meth:`Dataset.follow`)."""
    if poll_interval <= 0:
        raise ValueError(f"poll_interval must be a positive number of seconds, not "
                         f"{poll_interval}")
    should_stop = _stopper(stop)
    seen = _positions(ds, start)
    quiet_since = time.monotonic()
    while True:
        stopping = should_stop()  # before the refresh: what was written before it is read
        ds.refresh()
        got = False
        for first, lo, hi in _unseen(ds, seen):
            got = True
            yield from ds.iter_records(first + lo, first + hi)
        if stopping:
            return
        now = time.monotonic()
        if got:
            quiet_since = now
        elif idle_timeout is not None and now - quiet_since >= idle_timeout:
            return
        if isinstance(stop, threading.Event):
            stop.wait(poll_interval)
        else:
            time.sleep(poll_interval)


def _stopper(stop: Callable[[], bool] | threading.Event | None) -> Callable[[], bool]:
    if stop is None:
        return lambda: False
    if isinstance(stop, threading.Event):
        return stop.is_set
    return stop


def _positions(ds: Dataset, start: int) -> list[int]:
    """Records of each shard already seen when following from global record ``start``."""
    table = ds._table
    if start < 0:
        start = max(0, table.size + start)
    counts = [s.records for s in table.shards]
    seen = []
    for first, count in zip(table.first_list, counts, strict=True):
        seen.append(min(count, max(0, start - first)))
    return seen


def _unseen(ds: Dataset, seen: list[int]) -> list[tuple[int, int, int]]:
    """``(first global record of the shard, first unseen, end)`` of every shard holding
    records not yielded yet (marked seen now); ``seen`` grows with new shards."""
    table = ds._table
    shards: Sequence[Shard] = table.shards
    seen.extend([0] * (len(shards) - len(seen)))
    runs = []
    for k, shard in enumerate(shards):
        if shard.records > seen[k]:
            runs.append((table.first_list[k], seen[k], shard.records))
            seen[k] = shard.records
    return runs
