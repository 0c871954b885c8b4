"""``ofindex.open``: resolve the shards once, find and check their sidecars, return a Dataset.

A dataset directory with a manifest (``ofindex-manifest.json``, written by ``ofindex build``
on a directory) opens with one request whatever its number of shards: shard names, record
counts, sizes and fingerprints come from the manifest and each sidecar is fetched when its shard
is first read. Without a manifest every sidecar is opened (and every data file stat-ed) now.
"""

import dataclasses
import heapq
import os
import warnings
from typing import Any

from ..errors import SidecarError, StaleIndexError, hint
from ..formats.compression import parse_compression
from ..formats.framing import RecordFormat
from ..formats.location import DatasetLocation, resolve
from ..formats.manifest import MANIFEST_NAME
from ..formats.sidecar_header import Compression
from ..formats.strays import is_stray, name_pattern
from ..storage import FileStamp, PathSpec, Storage, Storages, is_data_file_name
from ..storage.retry import current_policy, with_settings
from .dataset import Dataset, Decode
from .nodecache import DEFAULT_NODE_BYTES
from .shards import Shard
from .sidecar_cache import DEFAULT_CACHE_BYTES, SidecarCache
from .stray_shards import load_sidecars

_AUTO_HINT = hint("format='auto'", "--format auto")


@dataclasses.dataclass(frozen=True)
class OpenOptions:
    """How :func:`open` reads and checks a resolved location (its keyword arguments)."""

    format: str = "auto"
    verify: bool = True
    decode: Decode | None = None
    build_missing: bool = False
    check_stale: bool = True
    cache: SidecarCache = dataclasses.field(default_factory=SidecarCache)
    compression: str | Compression | None = "auto"


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
    cache_dir_bytes: int = DEFAULT_NODE_BYTES,
    max_concurrency: int | None = None,
    max_inflight_bytes: int | None = None,
    mmap: bool = True,
    compression: str | Compression | None = "auto",
    retries: int | None = None,
    timeout: float | None = None,
) -> Dataset:
    """Open TFRecord/OFRecord shards as one randomly accessible :class:`Dataset`.

    Every shard needs a sidecar index (``ofindex build`` or :func:`ofindex.build_index`). A
    directory holding ``ofindex-manifest.json`` (written when a directory is built) opens with
    one request whatever its number of shards. Remote sidecars are then read by *pages*: a
    batch fetches only the runs of offsets its records need (and each sidecar's header,
    checked against the manifest), all shards' at once, then the data: two rounds of requests
    cold, one once the pages are cached (see :mod:`ofindex.read.pages`). Small, version 1 and
    compressed-file sidecars are fetched whole. The dataset can be used as a context manager
    (``with ofindex.open(...) as ds:``), which releases its handles and maps at the end.

    Args:
        paths: A data file, a directory (its files in natural name order, skipping hidden
            files, markers and index files), a glob, a URL (``s3://``, ``gs://``,
            ``https://`` … through fsspec), or a list of them; shards keep that order.
        format: ``"tfrecord"``, ``"ofrecord"``, or ``"auto"`` to take it from the sidecars.
        index_dir: Where the sidecars live when not beside the data (a local directory or
            another bucket, for read-only data).
        storage_options: Options for the fsspec filesystem (credentials, endpoint …).
        verify: Check TFRecord CRCs on every read.
        decode: A callable applied to each record's bytes, e.g.
            ``ofindex.decode.Decoder(spec)``.
        build_missing: Build the sidecars that are missing instead of failing.
        check_stale: Compare each data file's size and fingerprint with its sidecar's (one
            ``stat`` per shard; remote shards of a manifest are checked on first touch).
        manifest: ``True`` uses a directory's manifest when there is one, ``False`` ignores
            it, a path or URL names one.
        cache_bytes: Bound on remote sidecar pages and sidecars held in memory per process
            (least recently used dropped first).
        cache_dir: A local directory holding one cache of sidecar pages and sidecars for
            every process of the machine (DataLoader workers, ranks); entries are valid only
            while the manifest's stamps match (see :mod:`ofindex.read.nodecache`). It is
            created if missing and checked now; the cache is best effort: when it cannot be
            used (a file, or a link to one, not writable, a database that is foreign, damaged
            or a symbolic link …) the dataset reads without it and one
            ``ofindex.read.nodecache.CacheDirWarning`` says why (workers it is pickled to do
            not warn again). The cache only opens, writes and deletes files it names itself
            inside the directory, never following symbolic links there.
        cache_dir_bytes: Bound on the bytes kept in ``cache_dir`` (least recently used
            evicted first).
        max_concurrency: Remote requests in flight at once for one batch (default 64).
        max_inflight_bytes: Bound on response bytes held before they are copied out
            (default 128 MiB).
        mmap: Read local files through memory maps (about 1.5x faster random access). A file
            *truncated in place* by another process while it is mapped kills the reader with
            SIGBUS, as with ``numpy.memmap``; :class:`ofindex.Writer` replaces files
            atomically, so that cannot happen through it. ``False`` reads with ``os.pread``.
        compression: ``"auto"`` takes what each sidecar says (GZIP and ZLIB files, as
            TensorFlow writes them, are read like any other once indexed); ``"gzip"``,
            ``"zlib"`` or ``None`` insists on one (a shard indexed otherwise raises
            :class:`SidecarError`, and ``build_missing`` indexes with it). A random record
            costs inflating from the seek point before it; iteration inflates each shard once.
        retries: Remote requests that fail transiently (connection refused or reset,
            timeouts, HTTP 5xx and 429, S3 ``SlowDown``) are sent again up to this many times,
            after waits drawn with exponential backoff and jitter (default 10; ``0``: no
            retries). A request of a batch far slower than its peers is also sent once more.
        timeout: Seconds after which a remote request is given up, its retries included
            (default 60).

    Returns:
        The dataset: ``len(ds)``, ``ds[i]``, slices, ``ds.__getitems__(indices)``, iteration.

    Raises:
        DataFileNotFoundError: ``paths`` matches no data file (a ``FileNotFoundError``).
        IndexNotFoundError: Shards without a sidecar, all named (a ``FileNotFoundError``).
        StaleIndexError: A data file changed since it was indexed (a ``ValueError``).
        SidecarError: A sidecar or manifest is corrupt, or shards disagree on the format.
        StorageError: Storage cannot be reached (a host name that does not resolve, a refused
            connection, a failed TLS handshake, no answer within ``timeout``), or refuses
            access (an ``OSError``).
        MissingDependencyError: The URL's protocol needs an extra, e.g. ``pip install
            'ofindex[s3]'`` (an ``ImportError``).
        InvalidURLError: An unknown URL protocol (a ``ValueError``).

    Warns:
        PartialIndexWarning: Some shards are indexed only up to damaged data (once per
            dataset, naming them).
        SkippedFilesWarning: Files a directory or glob lists have no sidecar and are plainly
            not record files (a README): left out, once, naming them.
    """
    parse_compression(compression)  # refuse a bad name before any work
    # every storage of this open is made once, with these settings, and shared
    storages = Storages(storage_options, mmap=mmap, max_concurrency=max_concurrency,
                        max_inflight_bytes=max_inflight_bytes,
                        retry=with_settings(current_policy(), retries, timeout))
    location = resolve(paths, index_dir=index_dir, storages=storages, manifest=manifest)
    options = OpenOptions(format, verify, decode, build_missing, check_stale,
                          SidecarCache(cache_bytes, cache_dir, cache_dir_bytes), compression)
    return open_location(location, options)


def open_location(location: DatasetLocation, options: OpenOptions) -> Dataset:
    """Open a resolved location (see :func:`open`)."""
    if location.manifest is not None:
        return _open_manifest(location, options)
    storage = location.storage
    # with check_stale, every (re)load of a sidecar in any process stats its data file and
    # checks it (and the storage then checks every opening of the file against that stamp)
    data_storage = storage if options.check_stale else None
    shards = [Shard(f, *location.sidecar_of(f), cache=options.cache, url=storage.url(f),
                    data_storage=data_storage)
              for f in location.files]
    if options.build_missing:
        missing = [s.path for s in shards if not s.index_storage.exists(s.index_path)]
        if missing:
            from ..index.builder import build_location

            build_location(location.subset(missing), format=options.format, manifest=False,
                           compression=options.compression)
    fmt = None if options.format == "auto" else RecordFormat.parse(options.format)
    want = parse_compression(options.compression)
    # headers only: each sidecar's offsets are checked against its CRC on first read
    shards = load_sidecars(location, shards, stacklevel=3)
    setter: Shard | None = None  # the first shard, which sets the framing
    for shard in shards:
        header = shard.header
        _check_compression(shard.index_url, header.compression, want)
        if setter is None:
            setter, fmt = shard, (fmt or header.format)
        if header.format is not fmt:
            framing = fmt.name.lower() if fmt is not None else "auto"
            first = (f", but format={framing!r} was asked for" if setter is shard
                     else f", but {setter.data_url} is {framing}")
            raise SidecarError(
                f"{shard.data_url}: indexed as {header.format.name.lower()}{first}; a dataset "
                "is all TFRecord or all OFRecord: open each kind as its own dataset (a glob or "
                f"a list of its files){hint(' or pass the format it has: format=...', '')}"
            )
    warn_partial(shards)
    return Dataset(storage, shards, fmt or RecordFormat.TFRECORD, verify=options.verify,
                   decode=options.decode,
                   compressed=any(s.header.compression is not Compression.NONE
                                  for s in shards))


def _check_compression(where: str, got: Compression, want: Compression | None) -> None:
    """Refuse a shard indexed with another compression than ``compression=`` insists on."""
    if want is not None and got is not want:
        raise SidecarError(
            f"{where}: indexed as {got.name.lower()} but compression="
            f"{want.name.lower() if want else None!r} was asked for; open with "
            "compression='auto', or rebuild with the right `--compression`"
        )


def _open_manifest(location: DatasetLocation, options: OpenOptions) -> Dataset:
    m = location.manifest
    assert m is not None
    if options.format != "auto" and RecordFormat.parse(options.format) is not m.format:
        raise SidecarError(
            f"{m.data_dir}: the manifest says the dataset is {m.format.name.lower()}, not "
            f"{options.format}; open with {_AUTO_HINT} or rebuild "
            "with the right `--format`"
        )
    storage = location.storage
    local = storage.is_local
    if local:  # listing a local directory is cheap: refuse a manifest of other files first
        assert location.directory is not None
        _check_listing(storage, location.directory, m.names)
    partial = set(m.partial)
    # with check_stale, each shard's data file is stat-ed and checked whenever its sidecar is
    # (re)loaded in a process (remote: in the round that fetches its pages)
    crcs = m.body_crcs if m.body_crcs is not None else [None] * len(m.names)
    shards = [
        Shard(path, *location.sidecar_of(path), records, size, fingerprint=fp,
              cache=options.cache, data_storage=storage if options.check_stale else None,
              url=storage.url(path), partial=name in partial, body_crc=crc)
        for path, name, records, size, fp, crc in zip(location.files, m.names, m.records,
                                                      m.sizes, m.fingerprints, crcs, strict=True)
    ]
    if local and options.check_stale:  # stat-ing local files is cheap: check now, as
        assert location.directory is not None  # without a manifest
        _check_stamps(location.storage, location.directory, shards)
    want = parse_compression(options.compression)
    for name, got in zip(m.names, m.compressions or [Compression.NONE] * len(m.names),
                         strict=True):
        _check_compression(f"{m.data_dir}/{name}", got, want)
    warn_partial(shards)
    return Dataset(storage, shards, m.format, verify=options.verify, decode=options.decode,
                   compressed=m.compressed)


class PartialIndexWarning(UserWarning):
    """A dataset has shards whose index covers only a valid prefix (``allow_partial``)."""


def warn_partial(shards: list[Shard], stacklevel: int = 4) -> None:
    """Warn once for a dataset with partial indexes, naming the shards and their records."""
    partial = [s for s in shards if s.partial]  # not ds.shards: 1e5 URLs made for nothing
    if not partial:
        return
    shown = ", ".join(f"{s.data_url} ({s.records} records indexed)" for s in partial[:3])
    more = f" and {len(partial) - 3} more" if len(partial) > 3 else ""
    warnings.warn(PartialIndexWarning(
        f"{len(partial)} of {len(shards)} shards have a PARTIAL index: {shown}{more}; the "
        "rest of each such file is damaged and not readable — re-copy it and run "
        "`ofindex build` again"), stacklevel=stacklevel)


def _check_listing(storage: Storage, data_dir: str, names: list[str]) -> None:
    """Refuse a manifest that does not list the record files of ``data_dir``: a listed file
    it does not name is new, unless it is plainly not a record file (a README the build
    skipped, see :mod:`ofindex.formats.strays`; only such unnamed files are read)."""
    listed = {storage.basename(p): p for p in storage.expand(data_dir)
              if is_data_file_name(storage.basename(p))}
    named = {n.rsplit("/", 1)[-1] for n in names}
    patterns = {name_pattern(n) for n in named}
    new = {n for n in listed.keys() - named if not _stray(storage, listed[n], patterns)}
    if new or not named <= listed.keys():
        extra = heapq.nsmallest(3, new)
        gone = heapq.nsmallest(3, named - listed.keys())
        raise StaleIndexError(
            f"{os.path.join(data_dir, MANIFEST_NAME)}: the manifest does not list the data "
            f"files of {data_dir} (not in the manifest: {extra or 'none'}; missing: "
            f"{gone or 'none'}); run `ofindex build {data_dir}` again"
        )


def _stray(storage: Storage, path: str, patterns: set[str]) -> bool:
    """Whether a listed file is plainly not a record file (a file gone since: no new one)."""
    try:
        return is_stray(storage, path, patterns)
    except FileNotFoundError:
        return True


def _check_stamps(storage: Storage, data_dir: str, shards: list[Shard]) -> None:
    for s in shards:
        current = storage.stamp(s.path)
        why = FileStamp(s.size, s.fingerprint or "").mismatch(current)
        if why:
            raise StaleIndexError(
                f"{storage.url(s.path)}: {why} since the dataset manifest was written; run "
                f"`ofindex build {data_dir}` again"
            )
        storage.expect(s.path, current)  # every later opening must be this same file
