"""The shards of a dataset opened through a compact manifest, made when first touched.

A million :class:`~ofindex.read.shards.Shard` objects would take seconds and hundreds of MB
to make at ``open``; :class:`ManifestShards` is the sequence a
:class:`~ofindex.read.table.ShardTable` holds instead: the record counts come from the
manifest's column (what maps global record numbers), and shard ``k`` is made the first time a
read asks for it, with its name, count and size from the manifest and its stamp (fingerprint
and sidecar body CRC) from the manifest's stamps page, read in the round that fetches its
sidecar pages (:func:`queue_stamps` / :func:`take_stamps`) or on first use. A shard once made
is kept, so that this process's page cache and checked headers stay with it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..cache.chain import Chain, Kept, Want
from ..errors import ManifestError, RangeReadError
from ..formats.compact_manifest import CompactManifest
from ..formats.lazy_rows import LazyRows
from ..formats.placement import SidecarPlace
from ..storage import Storage
from .shards import Shard

#: A queued stamps page: ``(manifest, page, slot of its range in the round)``.
QueuedStamp = tuple[CompactManifest, int, Any]


class ManifestShards(LazyRows[Shard]):
    """The shards of a compact manifest, as a sequence that makes each on first access.

    Args:
        manifest: The opened manifest.
        storage: Storage of the data files.
        data_dir: The data directory on ``storage``.
        place: Where the sidecars are.
        cache: The dataset's cache chain.
        check_stale: Stat each data file when its sidecar is first loaded in a process.
    """

    def __init__(self, manifest: CompactManifest, storage: Storage, data_dir: str,
                 place: SidecarPlace, cache: Chain, check_stale: bool) -> None:
        self.manifest = manifest
        self.storage, self.place, self.cache = storage, place, cache
        self.prefix = storage.join(data_dir, "")
        self.check_stale = check_stale
        self._made: dict[int, Shard] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_made"] = {}  # a new process makes its own (no handle, no page crosses over)
        return state

    def __len__(self) -> int:
        return len(self.manifest)

    def __repr__(self) -> str:
        return f"ManifestShards({len(self)} shards, {len(self._made)} made)"

    def __getitem__(self, k: Any) -> Any:
        shard = self._made.get(k) if type(k) is int else None  # the hot path: made already
        return shard if shard is not None else super().__getitem__(k)

    def make(self, k: int) -> Shard:
        """Shard ``k``: the one made before, or made now from the manifest's row."""
        shard = self._made.get(k)
        if shard is not None:
            return shard
        m = self.manifest
        path = self.prefix + m.name(k)
        index_storage, index_path = self.place.of(self.storage, path)
        shard = Shard(path, index_storage, index_path, int(m.records[k]), int(m.sizes[k]),
                      cache=self.cache, data_storage=self.storage if self.check_stale else None,
                      url=self.storage.url(path), partial=bool(k in self._partial()),
                      stamps=m, row=k)
        if m.has_stamp(k):
            shard.take_stamp()
        # one shard per number even when threads make it at once: the page cache keys pages
        # by the shard object, so a second one must never be used
        return self._made.setdefault(k, shard)

    def _partial(self) -> set[int]:
        rows = self.__dict__.get("_partial_rows")
        if rows is None:
            rows = self.__dict__["_partial_rows"] = set(self.manifest.partial_rows().tolist())
        return rows

    def made(self) -> list[Shard]:
        """The shards made so far in this process (what holds handles, maps and pages)."""
        return list(self._made.values())

    @property
    def counts(self) -> np.ndarray:
        """Each shard's record count, from the manifest."""
        return self.manifest.records.astype(np.int64)

    @property
    def total_bytes(self) -> int:
        """The data files' sizes added up."""
        return self.manifest.head.total_bytes


def _source(shard: Shard) -> tuple[CompactManifest, int] | None:
    """The compact manifest and row a pending shard's stamp is to be read from."""
    source = shard.stamp_source()
    if source is None or not isinstance(source[0], CompactManifest):
        return None
    return source[0], source[1]


def _pending_pages(shards: Sequence[Shard]) -> dict[tuple[int, int], CompactManifest]:
    """The stamps pages the pending ``shards`` need, by ``(id of manifest, page)``."""
    wanted: dict[tuple[int, int], CompactManifest] = {}
    for shard in shards:
        source = _source(shard)
        if source is not None:
            manifest, row = source
            wanted[(id(manifest), manifest.stamp_page_of(row))] = manifest
    return wanted


def stamps_from_machine(shards: Sequence[Shard], chain: Chain) -> None:
    """Take the stamps pages the pending ``shards`` need from the machine's cache (each
    checked against the manifest's page table as a fetched one; a bad entry is a miss), so
    that their sidecar pages can be looked for there too.

    Args:
        shards: Shards some of which may have their stamp pending.
        chain: The dataset's cache chain.
    """
    wanted = _pending_pages(shards)
    if not wanted:
        return
    chain.recall([Want(None, manifest.node_key(page),
                       functools.partial(_take_page, manifest, page))
                  for (_, page), manifest in wanted.items()])
    for shard in shards:
        source = _source(shard)
        if source is not None and source[0].has_stamp(source[1]):
            shard.take_stamp()


def _take_page(manifest: CompactManifest, page: int, blob: bytes) -> bool | None:
    """Take a stamps page the machine held: ``True``, or ``None`` when it fails its checks
    (a damaged or tampered entry: fetched again)."""
    try:
        manifest.take_stamp_page(page, blob)
    except ManifestError:
        return None
    return True


def queue_stamps(shards: Sequence[Shard], add_range: Any) -> list[QueuedStamp]:
    """Queue, in a round, the compact-manifest stamps pages the pending ``shards`` need.

    Args:
        shards: Shards some of which may have their stamp pending.
        add_range: ``add_range(storage, path, start, end)`` queues a range and returns its
            slot.

    Returns:
        What :func:`take_stamps` takes once the round ran.
    """
    queued = []
    for (_, page), manifest in sorted(_pending_pages(shards).items(), key=lambda kv: kv[0][1]):
        start, end = manifest.stamp_range(page)
        queued.append((manifest, page, add_range(manifest.storage, manifest.path, start, end)))
    return queued


def take_stamps(queued: list[QueuedStamp], result: Any, shards: Sequence[Shard],
                kept: list[Kept]) -> None:
    """Check and take the stamps pages a round fetched (adding them to ``kept``, for the
    machine's cache), then give ``shards`` their stamps.

    Raises:
        ManifestError: A page fails its checks.
        RangeReadError, StorageError: Its request failed.
    """
    for manifest, page, slot in queued:
        got = result(slot)
        if isinstance(got, RangeReadError):
            raise manifest.cut_short(got) from None
        if isinstance(got, BaseException):
            raise got
        manifest.take_stamp_page(page, got)
        kept.append(Kept(None, manifest.node_key(page), True, bytes(got)))
    for shard in shards:
        if shard.stamp_pending:
            shard.take_stamp()


def resolve_stamps(shards: Sequence[Shard]) -> None:
    """Give the pending ``shards`` their stamps, the missing pages of each manifest fetched in
    one round (before their whole sidecars are looked for in the node cache or fetched).

    Raises:
        ManifestError: A page fails its checks.
    """
    rows: dict[int, tuple[CompactManifest, list[int]]] = {}
    for shard in shards:
        source = _source(shard)
        if source is not None:
            rows.setdefault(id(source[0]), (source[0], []))[1].append(source[1])
    for manifest, wanted in rows.values():
        manifest.fetch_stamps(wanted)
    for shard in shards:
        if shard.stamp_pending:
            shard.take_stamp()
