"""``ofindex.open``: resolve the paths once (one storage per protocol, made with this call's
settings), build the sidecars that are missing when asked to, and open the dataset.

This is the one module that joins the layers for a user's call: the location and its storages
(:mod:`ofindex.formats.location`, :mod:`ofindex.storage`), the builder (:mod:`ofindex.index`)
and the reader (:mod:`ofindex.read`), which knows nothing of building.
"""

from typing import Any

from .cache.chain import DEFAULT_CACHE_BYTES, DEFAULT_NODE_BYTES, Chain
from .formats.location import DatasetLocation, resolve
from .formats.sidecar_header import Compression, parse_compression
from .growing import IndexGrower
from .index.builder import build_location
from .read.dataset import Dataset, Decode
from .read.open import OpenOptions, open_location
from .read.refresh import DatasetSource
from .storage import PathSpec, Storages


def open(
    paths: PathSpec,
    *,
    format: str = "auto",
    index_dir: str | None = None,
    storage_options: dict[str, Any] | None = None,
    verify: bool = True,
    decode: Decode | None = None,
    build_missing: bool = False,
    rebuild_stale: bool = False,
    check_stale: bool = True,
    manifest: bool | str = True,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    cache_dir: str | None = None,
    cache_dir_bytes: int = DEFAULT_NODE_BYTES,
    data_cache_bytes: int = 0,
    max_concurrency: int | None = None,
    max_inflight_bytes: int | None = None,
    mmap: bool = True,
    compression: str | Compression | None = "auto",
    retries: int | None = None,
    timeout: float | None = None,
    allow_missing_shards: bool = False,
    growing: bool = False,
) -> Dataset:
    """Open TFRecord/OFRecord shards as one randomly accessible :class:`Dataset`.

    Every shard needs a sidecar index (``ofindex build`` or :func:`ofindex.build_index`). A
    directory holding ``ofindex-manifest.json`` (written when a directory is built) opens with
    one request whatever its number of shards. Remote sidecars are then read by *pages*: a
    batch fetches only the runs of offsets its records need (and each sidecar's header,
    checked against the manifest), all shards' at once, then the data: two rounds of requests
    cold, one once the pages are cached (see :mod:`ofindex.read.remote.pages`). Small, version 1 and
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
            ``ofindex.decode.Decoder(spec)`` (a decoder made without ``kind`` decodes what
            the files' framing holds: OFRecords in OFRecord files, else Examples).
        build_missing: Build the sidecars that are missing instead of failing. A sidecar
            that exists but no longer matches its data file is *not* rebuilt: the data
            changed since it was indexed (a bad copy, a file still being written), which
            :class:`StaleIndexError` reports; pass ``rebuild_stale=True`` to rebuild it.
        rebuild_stale: Before opening, do what ``ofindex build`` does: keep the fresh
            sidecars, build the missing and the stale ones (a partial index is rebuilt too)
            and rewrite a directory's manifest. It implies ``build_missing``.
        check_stale: Compare each data file's size and fingerprint with its sidecar's (one
            ``stat`` per shard; remote shards of a manifest are checked on first touch).
        manifest: ``True`` uses a directory's manifest when there is one, ``False`` ignores
            it, a path or URL names one.
        cache_bytes: Bound on remote sidecar pages and sidecars held in memory per process
            (least recently used dropped first).
        cache_dir: A local directory holding one cache of sidecar pages and sidecars for
            every process of the machine (DataLoader workers, ranks); entries are valid only
            while the manifest's stamps match (see :mod:`ofindex.cache.machine`). It is
            created if missing and checked now; the cache is best effort: when it cannot be
            used (a file, or a link to one, not writable, a database that is foreign, damaged
            or a symbolic link …) the dataset reads without it and one
            ``ofindex.CacheDirWarning`` says why (workers it is pickled to do
            not warn again). The cache only opens, writes and deletes files it names itself
            inside the directory, never following symbolic links there.
        cache_dir_bytes: Bound on the bytes kept in ``cache_dir`` (least recently used
            evicted first).
        data_cache_bytes: Also keep the remote *data* read in ``cache_dir``, up to this many
            bytes (default 0: not kept), so that later epochs read it from local disk: blocks
            of the data files fetched once serve every process of the machine, keyed by each
            file's size and ETag / generation (a file replaced is never served from an older
            copy), least recently used evicted first, records checked as every remote read
            checks them (see :mod:`ofindex.cache.data`). A dataset whose data files do
            not fit is read without it (one ``DataCacheWarning``). Needs ``cache_dir``.
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
        retries: Remote requests that fail transiently (connections reset, or refused by a
            store that answered before; timeouts, HTTP 5xx and 429, S3 ``SlowDown``) are sent
            again up to this many times, after waits drawn with exponential backoff and jitter
            (default 10; ``0``: each request is sent once). A connection refused where nothing
            ever answered is not retried. A request of a batch far slower than its peers is
            also sent once more.
        timeout: Seconds after which a remote request is given up: its attempts, backoff
            waits and waits for its turn at a throttled store's rate included (default 60).
        allow_missing_shards: Open a directory, glob or manifest whose shards are not all
            there (names that say ``-of-N`` with fewer than N of them, or a writer's
            publication that did not finish: see :mod:`ofindex.formats.shard_set`), with a
            ``MissingShardsWarning``. Without it such a set is refused, also with
            ``build_missing`` or ``rebuild_stale``.
        growing: The data files may be growing (being appended to: a training run's
            TensorBoard logs, a collector's output). A file longer than its index says is
            read as the file indexed when its first bytes are the ones indexed (its content
            digest over the indexed size), its records up to the indexed end;
            :meth:`Dataset.refresh` and :meth:`Dataset.follow` take up the rest. With
            ``build_missing`` or ``rebuild_stale``, a record cut short at a file's end is
            indexed as not written yet. A file truncated or replaced raises
            :class:`NotAppendedError`.

    Returns:
        The dataset: ``len(ds)``, ``ds[i]``, slices, ``ds.__getitems__(indices)``, iteration.

    Raises:
        DataFileNotFoundError: ``paths`` matches no data file (a ``FileNotFoundError``).
        IndexNotFoundError: Shards without a sidecar, all named (a ``FileNotFoundError``).
        IncompleteDatasetError: Shards of the set are missing (a ``FileNotFoundError``),
            unless ``allow_missing_shards``.
        StaleIndexError: A data file changed since it was indexed (a ``ValueError``;
            :class:`NotAppendedError` with ``growing``: it was truncated or replaced).
        SidecarError: A sidecar or manifest is corrupt, or shards disagree on the format.
        StorageError: Storage cannot be reached (a host name that does not resolve, nothing
            listening at the address, a failed TLS handshake, no answer within ``timeout``),
            refuses access, or keeps answering that the request rate is too high (an
            ``OSError``).
        MissingDependencyError: The URL's protocol needs an extra, e.g. ``pip install
            'ofindex[s3]'`` (an ``ImportError``).
        InvalidURLError: An unknown URL protocol (a ``ValueError``).
        ValueError: ``data_cache_bytes`` without ``cache_dir``, or not a positive number.

    Warns:
        PartialIndexWarning: Some shards are indexed only up to damaged data (once per
            dataset, naming them).
        SkippedFilesWarning: Files a directory or glob lists have no sidecar and are plainly
            not record files (a README): left out, once, naming them.
        DataCacheWarning: ``data_cache_bytes`` cannot hold the dataset's data files: read
            without the data cache.
        MissingShardsWarning: ``allow_missing_shards=True`` accepted a set lacking shards.
    """
    parse_compression(compression)  # refuse a bad name before any work
    if data_cache_bytes and cache_dir is None:
        raise ValueError("data_cache_bytes= keeps remote data in a local directory: pass "
                         "cache_dir= too")
    # every storage of this open is made once, with these settings, and shared
    storages = Storages(storage_options, mmap=mmap, max_concurrency=max_concurrency,
                        max_inflight_bytes=max_inflight_bytes,
                        retries=retries, timeout=timeout)
    if rebuild_stale:
        build_location(resolve(paths, index_dir=index_dir, storages=storages, manifest=False,
                               allow_missing_shards=allow_missing_shards, building=True),
                       format=format, compression=compression, growing=growing)
    location = resolve(paths, index_dir=index_dir, storages=storages, manifest=manifest,
                       allow_missing_shards=allow_missing_shards)
    location.storage.expected.growing = growing
    if build_missing and not rebuild_stale and location.manifest is None:
        build_missing_sidecars(location, format, compression, growing)
    options = OpenOptions(format, verify, decode, check_stale,
                          Chain(cache_bytes, cache_dir, cache_dir_bytes, data_cache_bytes),
                          compression)
    dataset = open_location(location, options)
    dataset._refresh_source = DatasetSource(paths, index_dir, manifest, allow_missing_shards,
                                            storages, IndexGrower())
    for_framing = getattr(decode, "for_framing", None)
    if for_framing is not None:  # a Decoder made without kind decodes what the files hold
        dataset.decode = for_framing(dataset.format.name)
    return dataset


def build_missing_sidecars(location: DatasetLocation, format: str,
                           compression: str | Compression | None,
                           growing: bool = False) -> None:
    """Index the files of ``location`` that have no sidecar (``build_missing=True``; files
    still being written with ``growing``).

    Raises:
        As :func:`ofindex.build_index`.
    """
    missing = [f for f in location.files if not _sidecar_exists(location, f)]
    if missing:
        build_location(location.subset(missing), format=format, manifest=False,
                       compression=compression, growing=growing)


def _sidecar_exists(location: DatasetLocation, path: str) -> bool:
    storage, index_path = location.sidecar_of(path)
    return storage.exists(index_path)
