"""Opening a resolved location (``ofindex.open`` is :func:`ofindex.opening.open`): find and
check the shards' sidecars, return a Dataset.

A dataset directory with a manifest (``ofindex-manifest.json``, written by ``ofindex build``
on a directory) opens with one round of requests whatever its number of shards: shard names, record
counts, sizes and fingerprints come from the manifest and each sidecar is fetched when its shard
is first read (through a compact manifest, no shard is even made at open, and none is listed
or stat-ed: :func:`_open_compact`). Without a manifest every sidecar is opened (and every
data file stat-ed) now: local ones memory-mapped, remote ones by their headers only, in one
round (:mod:`ofindex.read.remote.header_round`); either way the shards then read pages of their
offsets.
"""

import dataclasses
import heapq
import os
import warnings
from collections.abc import Sequence

import numpy as np

from ..cache.chain import Chain
from ..cache.data import DataCache
from ..errors import DataCacheWarning, PartialIndexWarning, SidecarError, StaleIndexError, hint
from ..formats.compact_manifest import CompactManifest
from ..formats.dataset_identity import dataset_identity
from ..formats.framing import RecordFormat
from ..formats.location import AnyManifest, DatasetLocation
from ..formats.manifest import MANIFEST_NAME
from ..formats.sidecar_header import Compression, parse_compression
from ..formats.strays import is_stray, name_pattern
from ..storage import Storage, is_data_file_name
from .dataset import Dataset, Decode
from .manifest_shards import ManifestShards
from .shards import Shard
from .stray_shards import load_sidecars

_AUTO_HINT = hint("format='auto'", "--format auto")


@dataclasses.dataclass(frozen=True)
class OpenOptions:
    """How :func:`open_location` reads and checks a location (``ofindex.open``'s keyword
    arguments)."""

    format: str = "auto"
    verify: bool = True
    decode: Decode | None = None
    check_stale: bool = True
    cache: Chain = dataclasses.field(default_factory=Chain)
    compression: str | Compression | None = "auto"


def open_location(location: DatasetLocation, options: OpenOptions) -> Dataset:
    """Open a resolved location (see :func:`ofindex.opening.open`).

    Raises:
        IndexNotFoundError, StaleIndexError, SidecarError, StorageError: As ``ofindex.open``.
    """
    if location.manifest is not None:
        return _open_manifest(location, options)
    storage = location.storage
    # with check_stale, every (re)load of a sidecar in any process stats its data file and
    # checks it (and the storage then checks every opening of the file against that stamp)
    data_storage = storage if options.check_stale else None
    shards = [Shard(f, *location.sidecar_of(f), cache=options.cache, url=storage.url(f),
                    data_storage=data_storage, storage=storage)
              for f in location.files]
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
                                  for s in shards),
                   data_cache=data_cache_for(storage, [s.size for s in shards], options))


def _check_compression(where: str, got: Compression, want: Compression | None) -> None:
    """Refuse a shard indexed with another compression than ``compression=`` insists on."""
    if want is not None and got is not want:
        raise SidecarError(
            f"{where}: indexed as {got.name.lower()} but compression="
            f"{want.name.lower() if want else None!r} was asked for; open with "
            "compression='auto', or rebuild with the right `--compression`"
        )


def _check_format(m: AnyManifest, options: OpenOptions) -> None:
    if options.format != "auto" and RecordFormat.parse(options.format) is not m.format:
        raise SidecarError(
            f"{m.data_dir}: the manifest says the dataset is {m.format.name.lower()}, not "
            f"{options.format}; open with {_AUTO_HINT} or rebuild "
            "with the right `--format`"
        )


def _open_compact(location: DatasetLocation, m: CompactManifest,
                  options: OpenOptions) -> Dataset:
    """Open through a compact manifest: no shard is made, no file listed or stat-ed now.

    Each shard is made when a read first touches it, and checked then as through a JSON
    manifest from a bucket: its sidecar header against the manifest's count, stamp and body
    CRC, and (``check_stale``) its data file's stamp against the header, before any of its
    global record numbers is mapped to a byte. A million stamps are not read at open.
    """
    _check_format(m, options)
    want = parse_compression(options.compression)
    if want is not None:
        comps = m.compressions
        bad = next((k for k, c in enumerate(comps) if c is not want), None)
        if bad is not None:
            _check_compression(f"{m.data_dir}/{m.name(bad)}", comps[bad], want)
    assert location.directory is not None
    shards = ManifestShards(m, location.storage, location.directory, location.sidecars,
                            options.cache, options.check_stale)
    partial = m.partial_rows()
    warn_partial([shards[int(k)] for k in partial[:3]], 5, total=len(shards),
                 count=len(partial))
    # a manifest of ofindex 0.2 names no identity: its counts and sizes are what is known
    identity = m.identity or dataset_identity(m.records, m.sizes, [None] * len(m))
    return Dataset(location.storage, shards, m.format, verify=options.verify,
                   decode=options.decode, compressed=m.compressed,
                   data_cache=data_cache_for(location.storage, m.sizes, options),
                   identity=identity)


def _open_manifest(location: DatasetLocation, options: OpenOptions) -> Dataset:
    m = location.manifest
    assert m is not None
    if isinstance(m, CompactManifest):
        return _open_compact(location, m, options)
    _check_format(m, options)
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
        Shard(path, *location.sidecar_of(path), records, size, fingerprint=fingerprint,
              cache=options.cache, data_storage=storage if options.check_stale else None,
              url=storage.url(path), partial=name in partial, body_crc=crc, storage=storage)
        for path, name, records, size, fingerprint, crc in zip(location.files, m.names, m.records,
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
    # a manifest of ofindex 0.2 names no identity: its sidecars' body CRCs stand in
    identity = m.identity or dataset_identity(m.records, m.sizes, [None] * len(m),
                                              m.body_crcs)
    return Dataset(storage, shards, m.format, verify=options.verify, decode=options.decode,
                   compressed=m.compressed,
                   data_cache=data_cache_for(storage, m.sizes, options), identity=identity)


def data_cache_for(storage: Storage, sizes: Sequence[int] | np.ndarray,
                   options: OpenOptions) -> DataCache | None:
    """The data cache a dataset reads through: none for local files or when the directory
    cannot be used (warned about already), and none, with one warning, for a dataset whose
    data files do not fit its bound (their blocks would be evicted before their other
    records are read, each fetched again and again). With it, the dataset's remote sidecars
    are read whole (a small part of the data kept)."""
    data_cache = options.cache.data
    if data_cache is None or storage.is_local or not data_cache.usable():
        return None
    sizes = [int(size) for size in sizes]  # (a compact manifest's column: only with a cache)
    if not data_cache.fits(sizes):
        warnings.warn(DataCacheWarning(
            f"the {len(sizes)} data files of this dataset hold {sum(sizes)} bytes, more than "
            f"data_cache_bytes={data_cache.max_bytes} can keep with their blocks' overhead; "
            "reading without the data cache (pass a larger data_cache_bytes=, or open the "
            "part of the dataset this machine reads)"), stacklevel=4)
        return None
    options.cache.whole = True
    return data_cache


def warn_partial(shards: list[Shard], stacklevel: int = 4, *, total: int | None = None,
                 count: int | None = None) -> None:
    """Warn once for a dataset with partial indexes, naming the shards and their records.

    Args:
        shards: The dataset's shards (or, with ``total``, some of its partial ones).
        stacklevel: Where the warning points.
        total: The dataset's shard count, when ``shards`` are not all of them.
        count: How many shards are partial, when ``shards`` are not all of them.
    """
    partial = [s for s in shards if s.partial]  # not ds.shards: 1e5 URLs made for nothing
    if not partial:
        return
    count = len(partial) if count is None else count
    shown = ", ".join(f"{s.data_url} ({s.records} records indexed)" for s in partial[:3])
    more = f" and {count - 3} more" if count > 3 else ""
    warnings.warn(PartialIndexWarning(
        f"{count} of {len(shards) if total is None else total} shards have a PARTIAL index: "
        f"{shown}{more}; the rest of each such file is damaged and not readable — re-copy it "
        "and run `ofindex build` again"), stacklevel=stacklevel)


def _check_listing(storage: Storage, data_dir: str, names: list[str]) -> None:
    """Refuse a manifest that does not list the record files of ``data_dir``: a listed file
    it does not name is new, unless it is plainly not a record file (a README the build
    skipped, see :mod:`ofindex.formats.strays`; only such unnamed files are read), and a file
    it names must exist. The listing holds the directory's own files: a name with a
    subdirectory (``sub/part-0``) is looked for on its own."""
    listed = {storage.basename(p): p for p in storage.expand(data_dir)
              if is_data_file_name(storage.basename(p))}
    named = {n for n in names if "/" not in n}
    patterns = {name_pattern(n.rsplit("/", 1)[-1]) for n in names}
    new = {n for n in listed.keys() - named if not _stray(storage, listed[n], patterns)}
    missing = (named - listed.keys()) | {n for n in names if "/" in n
                                         and not storage.exists(storage.join(data_dir, n))}
    if new or missing:
        extra = heapq.nsmallest(3, new)
        gone = heapq.nsmallest(3, missing)
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
    """Check local data files against their manifest's stamps now (a ``stat`` each); a file
    whose fingerprint is not the manifest's (a copy without its times) is checked against
    its sidecar's content digest instead (its header opened now)."""
    for shard in shards:
        current = storage.stamp(shard.path)
        if storage.expected.growing and current.size > shard.size:
            shard.load(check_body=False)  # its first bytes are checked against its index
            continue
        if current.size != shard.size:
            raise StaleIndexError(
                f"{storage.url(shard.path)}: its size changed from {shard.size} to "
                f"{current.size} bytes since the dataset manifest was written; run "
                f"`ofindex build {data_dir}` again"
            )
        if current.fingerprint == shard.fingerprint:
            storage.expect(shard.path, current)  # every later opening must be this same file
        else:  # the content its sidecar names decides (Shard.accept)
            shard.load(check_body=False)
