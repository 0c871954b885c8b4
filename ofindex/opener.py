"""``ofindex.open``: resolve shards, find their sidecars, check them, return a Dataset.

A dataset directory with a manifest (``ofindex-manifest.json``, written by ``ofindex build``
on a directory) opens with one request whatever its number of shards: shard names, record
counts, sizes and fingerprints come from the manifest and each sidecar is fetched when its shard
is first read. Without a manifest every sidecar is opened (and every data file stat-ed) now.
"""

from __future__ import annotations

import glob as _glob
import os
from typing import Any, Callable, Sequence

from .errors import DataFileNotFoundError, SidecarError, StaleIndexError
from .framing import RecordFormat
from .layout import check_unique_names
from .manifest import MANIFEST_NAME, Manifest, manifest_url_for, read_manifest
from .reader import Dataset, Decode
from .shards import DEFAULT_CACHE_BYTES, Shard, SidecarCache
from .sidecar import SUFFIX, FileStamp
from .storage import LocalStorage, Storage, is_data_file_name, resolve_data_files, storage_for
from .storage.mapped import MappedLocalStorage


def open(
    paths: "str | os.PathLike | Sequence[str | os.PathLike]",
    *,
    format: str = "auto",
    index_dir: str | None = None,
    storage_options: dict[str, Any] | None = None,
    verify: bool = True,
    decode: Decode | None = None,
    build_missing: bool = False,
    check_stale: bool = True,
    manifest: "bool | str" = True,
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
    ds = _open(paths, format, index_dir, storage_options, verify, decode, build_missing,
               check_stale, manifest, SidecarCache(cache_bytes, cache_dir))
    if mmap and type(ds._storage) is LocalStorage:
        ds._storage = MappedLocalStorage()
    storage = ds._storage
    if max_concurrency is not None and hasattr(storage, "max_concurrency"):
        storage.max_concurrency = max(1, int(max_concurrency))
    if max_inflight_bytes is not None and hasattr(storage, "max_inflight_bytes"):
        storage.max_inflight_bytes = max(1, int(max_inflight_bytes))
    return ds


def _open(paths, format, index_dir, storage_options, verify, decode, build_missing,
          check_stale, manifest, cache: SidecarCache) -> Dataset:
    found = _find_manifest(paths, index_dir, storage_options, manifest)
    if found is not None:
        return _open_manifest(found, format, storage_options, verify, decode, check_stale, cache)
    storage, files = resolve_data_files(paths, storage_options)
    check_unique_names(storage, files, index_dir)
    locate = sidecar_locator(storage, index_dir, storage_options)
    shards: list[Shard] = []
    missing: list[str] = []
    for f in files:
        ist, ipath = locate(f)
        shard = Shard(f, ist, ipath, cache=cache)
        shards.append(shard)
        if build_missing and not ist.exists(ipath):
            missing.append(f)
    if missing:
        from .build import build_index

        urls = [storage.url(f) for f in missing]
        build_index(urls, format=format, index_dir=index_dir, storage_options=storage_options,
                    manifest=False)
    fmt = None if format == "auto" else RecordFormat.parse(format)
    from .shards import prefetch_sidecars

    prefetch_sidecars(shards)
    for shard in shards:
        sc = shard.sidecar
        if check_stale:
            sc.check_fresh(storage.stamp(shard.path), storage.url(shard.path))
        if fmt is None:
            fmt = sc.format
        elif sc.format is not fmt:
            raise SidecarError(
                f"{shard.index_url}: indexed as "
                f"{sc.format.name.lower()} but the dataset is {fmt.name.lower()}; all shards "
                "must share one format (or rebuild with the right `--format`)"
            )
    return Dataset(storage, shards, fmt or RecordFormat.TFRECORD, verify=verify, decode=decode)


def sidecar_locator(
    storage: Storage, index_dir: str | None, storage_options: dict[str, Any] | None
) -> Callable[[str], tuple[Storage, str]]:
    """``path -> (storage, sidecar path)``, the rule of :func:`ofindex.layout.sidecar_location`
    with one index storage shared by all shards (one client, not one per shard)."""
    if index_dir is None:
        return lambda path: (storage, path + SUFFIX)
    ist, directory = storage_for(str(index_dir), storage_options)
    return lambda path: (ist, ist.join(directory, storage.basename(path) + SUFFIX))


def _is_local(url: str) -> bool:
    protocol, sep, _ = url.partition("://")
    return not sep or protocol in ("file", "local")


def _find_manifest(paths, index_dir, storage_options, manifest) -> Manifest | None:
    if manifest is False:
        return None
    if isinstance(manifest, str):
        m = read_manifest(manifest, storage_options)
        if m is None:
            raise DataFileNotFoundError(f"{manifest}: manifest not found")
        return m
    if not isinstance(paths, (str, os.PathLike)):
        if len(paths) != 1:
            return None
        paths = paths[0]  # the CLI passes a list
    spec = os.fspath(paths)
    if spec.endswith(".json"):
        m = read_manifest(spec, storage_options)
        if m is None:
            raise DataFileNotFoundError(f"{spec}: manifest not found")
        return m
    if _glob.has_magic(spec):
        return None
    if _is_local(spec):
        st, local = storage_for(spec)
        if not os.path.isdir(local):
            return None
    where = str(index_dir) if index_dir is not None else spec
    m = read_manifest(manifest_url_for(where), storage_options)
    if m is None or index_dir is None:
        return m
    # a manifest in a separate index directory must describe this data directory
    st, data_path = storage_for(spec, storage_options)
    want = os.path.abspath(data_path) if _is_local(spec) else st.url(data_path)
    return m if m.data_dir.rstrip("/") == want.rstrip("/") else None


def _open_manifest(m: Manifest, format, storage_options, verify, decode, check_stale,
                   cache: SidecarCache) -> Dataset:
    if format != "auto" and RecordFormat.parse(format) is not m.format:
        raise SidecarError(
            f"{m.data_dir}: the manifest says the dataset is {m.format.name.lower()}, not "
            f"{format}; open with format='auto' or rebuild with the right `--format`"
        )
    storage, data_dir = storage_for(m.data_dir, storage_options)
    locate = sidecar_locator(storage, m.index_dir, storage_options)
    local = storage.cheap_seeks
    shards = []
    for name, records, size, fp in zip(m.names, m.records, m.sizes, m.fingerprints):
        path = storage.join(data_dir, name)
        ist, ipath = locate(path)
        shards.append(Shard(
            path, ist, ipath, records, size, fingerprint=fp, cache=cache,
            data_storage=storage if (check_stale and not local) else None,
        ))
    if local:  # stat-ing local files is cheap: check now, as without a manifest
        _check_local(storage, data_dir, shards, check_stale)
    return Dataset(storage, shards, m.format, verify=verify, decode=decode)


def _check_local(storage: Storage, data_dir: str, shards: list[Shard], check_stale: bool) -> None:
    listed = {storage.basename(p) for p in storage.expand(data_dir)
              if is_data_file_name(storage.basename(p))}
    named = {storage.basename(s.path) for s in shards}
    if listed != named:
        extra = sorted(listed - named)[:3]
        gone = sorted(named - listed)[:3]
        raise StaleIndexError(
            f"{os.path.join(data_dir, MANIFEST_NAME)}: the manifest does not list the data "
            f"files of {data_dir} (not in the manifest: {extra or 'none'}; missing: "
            f"{gone or 'none'}); run `ofindex build {data_dir}` again"
        )
    if not check_stale:
        return
    for s in shards:
        why = FileStamp(s.size, s.fingerprint or "").mismatch(storage.stamp(s.path))
        if why:
            raise StaleIndexError(
                f"{storage.url(s.path)}: {why} since the dataset manifest was written; run "
                f"`ofindex build {data_dir}` again"
            )
