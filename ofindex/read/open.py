"""``ofindex.open``: resolve the shards once, find and check their sidecars, return a Dataset.

A dataset directory with a manifest (``ofindex-manifest.json``, written by ``ofindex build``
on a directory) opens with one request whatever its number of shards: shard names, record
counts, sizes and fingerprints come from the manifest and each sidecar is fetched when its shard
is first read. Without a manifest every sidecar is opened (and every data file stat-ed) now.
"""

from __future__ import annotations

import dataclasses
import heapq
import os
from typing import Any

from ..errors import SidecarError, StaleIndexError
from ..formats.framing import RecordFormat
from ..formats.location import DatasetLocation, resolve
from ..formats.manifest import MANIFEST_NAME
from ..storage import FileStamp, LocalStorage, PathSpec, Storage, is_data_file_name
from ..storage.mapped import MappedLocalStorage
from .dataset import Dataset, Decode
from .shards import DEFAULT_CACHE_BYTES, Shard, SidecarCache, prefetch_sidecars


@dataclasses.dataclass(frozen=True)
class OpenOptions:
    """How :func:`open` reads and checks a resolved location (its keyword arguments)."""

    format: str = "auto"
    verify: bool = True
    decode: Decode | None = None
    build_missing: bool = False
    check_stale: bool = True
    cache: SidecarCache = dataclasses.field(default_factory=SidecarCache)


def open(
    paths: PathSpec,
    *,
    format: str = "auto",
    index_dir: str | None = None,
    storage_options: dict[str, Any] | None = None,
    verify: bool = True,
    decode: Decode | None = None,
    build_missing: bool = False,
    check_stale: bool = True,
    manifest: bool | str = True,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    cache_dir: str | None = None,
    max_concurrency: int | None = None,
    max_inflight_bytes: int | None = None,
    mmap: bool = True,
) -> Dataset:
    """Open TFRecord/OFRecord shards (a path, directory, glob, or a list of them) as a Dataset.

    Every shard needs a sidecar (``ofindex build``); ``build_missing=True`` builds missing
    ones on the fly. Sidecars whose data file changed raise :class:`StaleIndexError`
    (``check_stale=False`` skips that check, one ``stat`` per shard).

    A directory (or ``index_dir``) holding ``ofindex-manifest.json`` is opened through it
    (``manifest=False`` ignores it; ``manifest="<URL>"`` or a path ending in ``.json`` names
    one): one request, sidecars fetched on first touch, and for remote data the staleness
    ``stat`` is done then too. Fetched remote sidecars are kept in memory up to
    ``cache_bytes`` per process (least recently used dropped first) and, with
    ``cache_dir``, on local disk (re-validated against the manifest's stamps).

    Remote batches run up to ``max_concurrency`` requests at once (default 64) holding at most
    ``max_inflight_bytes`` of responses (default 128 MiB) before they are copied out.

    Local data files are read through memory maps (no system call per record: about 1.5x
    faster random access). A file *truncated in place* by another process while it is mapped
    kills the reader with SIGBUS instead of raising an error (as with ``numpy.memmap`` or
    Arrow); :class:`ofindex.Writer` replaces files atomically, so rewriting a dataset with it
    is safe. ``mmap=False`` reads with ``os.pread`` instead, for files that may be truncated
    in place while they are read. See :mod:`ofindex.storage.mapped`.
    """
    location = resolve(paths, index_dir=index_dir, storage_options=storage_options,
                       manifest=manifest)
    options = OpenOptions(format, verify, decode, build_missing, check_stale,
                          SidecarCache(cache_bytes, cache_dir))
    ds = open_location(location, options)
    if mmap and type(ds._storage) is LocalStorage:
        ds._storage = MappedLocalStorage()
    storage = ds._storage
    if max_concurrency is not None and hasattr(storage, "max_concurrency"):
        storage.max_concurrency = max(1, int(max_concurrency))
    if max_inflight_bytes is not None and hasattr(storage, "max_inflight_bytes"):
        storage.max_inflight_bytes = max(1, int(max_inflight_bytes))
    return ds


def open_location(location: DatasetLocation, options: OpenOptions) -> Dataset:
    """Open a resolved location (see :func:`open`)."""
    if location.manifest is not None:
        return _open_manifest(location, options)
    storage = location.storage
    shards = [Shard(f, *location.sidecar_of(f), cache=options.cache) for f in location.files]
    if options.build_missing:
        missing = [s.path for s in shards if not s.index_storage.exists(s.index_path)]
        if missing:
            from ..index.builder import build_location

            build_location(location.subset(missing), format=options.format, manifest=False)
    fmt = None if options.format == "auto" else RecordFormat.parse(options.format)
    prefetch_sidecars(shards)
    for shard in shards:
        sc = shard.sidecar
        if options.check_stale:
            sc.check_fresh(storage.stamp(shard.path), storage.url(shard.path))
        if fmt is None:
            fmt = sc.format
        elif sc.format is not fmt:
            raise SidecarError(
                f"{shard.index_url}: indexed as "
                f"{sc.format.name.lower()} but the dataset is {fmt.name.lower()}; all shards "
                "must share one format (or rebuild with the right `--format`)"
            )
    return Dataset(storage, shards, fmt or RecordFormat.TFRECORD, verify=options.verify,
                   decode=options.decode)


def _open_manifest(location: DatasetLocation, options: OpenOptions) -> Dataset:
    m = location.manifest
    assert m is not None
    if options.format != "auto" and RecordFormat.parse(options.format) is not m.format:
        raise SidecarError(
            f"{m.data_dir}: the manifest says the dataset is {m.format.name.lower()}, not "
            f"{options.format}; open with format='auto' or rebuild with the right `--format`"
        )
    storage = location.storage
    local = storage.cheap_seeks
    if local:  # listing a local directory is cheap: refuse a manifest of other files first
        assert location.directory is not None
        _check_listing(storage, location.directory, m.names)
    lazy_stat = options.check_stale and not local
    shards = [
        Shard(path, *location.sidecar_of(path), records, size, fingerprint=fp,
              cache=options.cache, data_storage=storage if lazy_stat else None)
        for path, records, size, fp in zip(location.files, m.records, m.sizes, m.fingerprints,
                                           strict=True)
    ]
    if local and options.check_stale:  # stat-ing local files is cheap: check now, as
        assert location.directory is not None  # without a manifest
        _check_stamps(location.storage, location.directory, shards)
    return Dataset(storage, shards, m.format, verify=options.verify, decode=options.decode)


def _check_listing(storage: Storage, data_dir: str, names: list[str]) -> None:
    listed = {storage.basename(p) for p in storage.expand(data_dir)
              if is_data_file_name(storage.basename(p))}
    named = {n.rsplit("/", 1)[-1] for n in names}
    if listed != named:
        extra = heapq.nsmallest(3, listed - named)
        gone = heapq.nsmallest(3, named - listed)
        raise StaleIndexError(
            f"{os.path.join(data_dir, MANIFEST_NAME)}: the manifest does not list the data "
            f"files of {data_dir} (not in the manifest: {extra or 'none'}; missing: "
            f"{gone or 'none'}); run `ofindex build {data_dir}` again"
        )


def _check_stamps(storage: Storage, data_dir: str, shards: list[Shard]) -> None:
    for s in shards:
        why = FileStamp(s.size, s.fingerprint or "").mismatch(storage.stamp(s.path))
        if why:
            raise StaleIndexError(
                f"{storage.url(s.path)}: {why} since the dataset manifest was written; run "
                f"`ofindex build {data_dir}` again"
            )
