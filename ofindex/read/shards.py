"""One data file of a dataset together with its lazily opened sidecar, and the sidecar cache.

Local sidecars are memory-mapped (opening one reads its header only). Remote sidecars are
fetched whole when their shard is first touched and kept in a per-process LRU bounded in
bytes (:class:`SidecarCache`); with ``cache_dir`` they are also kept on local disk and
memory-mapped from there, valid as long as their header stamp matches the manifest.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from ..errors import IndexNotFoundError, SidecarError, StaleIndexError, hint
from ..formats.framing import RecordFormat
from ..formats.sidecar import Sidecar, load_sidecar, parse_sidecar
from ..formats.sidecar_header import SidecarHeader
from ..storage import FileStamp, Storage
from .cachedir import entry_name
from .nodecache import DEFAULT_NODE_BYTES, NodeCache
from .pagecache import PageCache

#: Default bound on remote sidecar bytes held in memory per process (8 bytes per record).
DEFAULT_CACHE_BYTES = 256 << 20


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """Public description of one shard.

    Attributes:
        url: The data file.
        records: Records indexed.
        bytes: Size of the data file.
        index_url: Its sidecar.
        partial: Only a valid prefix of the file is indexed (``build --allow-partial``).
    """

    url: str
    records: int
    bytes: int
    index_url: str
    partial: bool = False


class SidecarCache:
    """LRU of fetched remote sidecars and sidecar pages (:attr:`pages`), together bounded by
    ``max_bytes``; with ``cache_dir``, copies shared by every process of the machine
    (:attr:`node`, bounded by ``cache_dir_bytes``; checked now, and not used when it cannot be:
    :class:`~ofindex.read.nodecache.NodeCache`). Picklable: a new process starts with an
    empty memory cache and the node cache's verdict."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES, cache_dir: str | None = None,
                 cache_dir_bytes: int = DEFAULT_NODE_BYTES) -> None:
        self.max_bytes = int(max_bytes)
        self.cache_dir = (None if cache_dir is None
                          else os.path.abspath(os.path.expanduser(cache_dir)))
        self.cache_dir_bytes = int(cache_dir_bytes)
        self._lru: OrderedDict[int, tuple[Shard, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.pages = PageCache(self.max_bytes, lambda: self._bytes)
        self.node = (None if self.cache_dir is None
                     else NodeCache(self.cache_dir, self.cache_dir_bytes))

    def __getstate__(self) -> tuple[int, int, NodeCache | None]:
        return (self.max_bytes, self.cache_dir_bytes, self.node)

    def __setstate__(self, state: tuple[int, int, NodeCache | None]) -> None:
        max_bytes, cache_dir_bytes, node = state
        SidecarCache.__init__(self, max_bytes, None, cache_dir_bytes)
        self.cache_dir = None if node is None else node.directory
        self.node = node  # not checked again: a directory found unusable was warned about

    def __repr__(self) -> str:
        return f"SidecarCache({len(self._lru)} sidecars, {self._bytes} of {self.max_bytes} bytes)"

    @property
    def held_bytes(self) -> int:
        """Bytes of sidecars held in memory."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._lru)

    def touch(self, shard: Shard) -> None:
        with contextlib.suppress(KeyError):
            self._lru.move_to_end(id(shard))

    def add(self, shard: Shard, nbytes: int) -> None:
        """Account for ``shard``'s newly loaded sidecar; evict least recently used others."""
        with self._lock:
            if self._pid != os.getpid():
                self._lru.clear()
                self._bytes = 0
                self._pid = os.getpid()
            old = self._lru.pop(id(shard), None)
            if old is not None:
                self._bytes -= old[1]
            self._lru[id(shard)] = (shard, nbytes)
            self._bytes += nbytes
            self.pages.shrink()  # pages go first
            while self._bytes + self.pages.held_bytes > self.max_bytes and len(self._lru) > 1:
                key, (victim, size) = self._lru.popitem(last=False)
                if victim is shard:  # only the newest is left over budget: keep it
                    self._lru[key] = (victim, size)
                    break
                self._bytes -= size
                victim._sidecar = None

    # -- on-disk copies ---------------------------------------------------------------------
    def disk_path(self, index_url: str) -> str | None:
        """Where the whole sidecar of ``index_url`` is kept in ``cache_dir`` (a name derived
        from the URL), or ``None`` without a ``cache_dir``."""
        if self.cache_dir is None:
            return None
        return os.path.join(self.cache_dir, entry_name(index_url))

    def from_disk(self, index_url: str, expect: FileStamp, records: int,
                  body_crc: int | None = None) -> Sidecar | None:
        """The copy kept in ``cache_dir``, if there is a valid one of this version (and, when
        the manifest names it, of this body CRC)."""
        return (None if self.node is None
                else self.node.open_sidecar(index_url, expect, records, body_crc))

    def to_disk(self, index_url: str, raw: bytes) -> Sidecar | None:
        """Keep a fetched sidecar in ``cache_dir``; it memory-mapped from there, or ``None``
        (no usable ``cache_dir``, a full disk …: the caller keeps ``raw`` in memory)."""
        return None if self.node is None else self.node.keep_sidecar(index_url, raw)


class Shard:
    """A data file and its sidecar; the sidecar is (re)opened lazily in each process.

    ``records``/``size`` (and ``fingerprint``, from a manifest) are what the dataset expects;
    the sidecar must agree when it is loaded. With ``data_storage`` the data file is also
    stat-ed once at load and compared with the sidecar's stamp (lazy staleness check).
    """

    __slots__ = (
        "_pid",
        "_sidecar",
        "_unchecked",
        "body_crc",
        "cache",
        "data_storage",
        "data_url",
        "fingerprint",
        "index_path",
        "index_storage",
        "pager",
        "partial",
        "path",
        "records",
        "size",
    )

    def __init__(self, path: str, index_storage: Storage, index_path: str,
                 records: int = -1, size: int = -1, *, fingerprint: str | None = None,
                 data_storage: Storage | None = None, cache: SidecarCache | None = None,
                 url: str | None = None, partial: bool = False,
                 body_crc: int | None = None) -> None:
        self.path = path
        self.body_crc = body_crc  # the sidecar version the manifest names (None: any)
        self.partial = partial
        self.data_url = path if url is None else url
        self.index_storage = index_storage
        self.index_path = index_path
        self.records = records
        self.size = size
        self.fingerprint = fingerprint
        self.data_storage = data_storage
        # local sidecars are memory-mapped (page cache, not heap): only remote ones are counted
        self.cache = None if index_storage.cheap_seeks else cache
        self._sidecar: Sidecar | None = None
        # opened for its header in this process (by open), its offsets not checked yet
        self._unchecked: Sidecar | None = None
        self._pid = -1
        self.pager: Any = None  # paged reads' state in this process (ofindex.read.pages)

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.path, self.index_storage, self.index_path, self.records, self.size,
                self.fingerprint, self.data_storage, self.cache, self.data_url, self.partial,
                self.body_crc)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        (path, ist, ipath, records, size, fingerprint, data_storage, cache, url, partial,
         body_crc) = state
        Shard.__init__(self, path, ist, ipath, records, size, fingerprint=fingerprint,
                       data_storage=data_storage, cache=cache, url=url, partial=partial,
                       body_crc=body_crc)

    def __repr__(self) -> str:
        return f"Shard({self.path!r}, {self.records} records)"

    def unload(self) -> None:
        """Drop this process's copy of the sidecar (it is reopened on the next read)."""
        self._sidecar = self._unchecked = None

    @property
    def loaded(self) -> bool:
        """Whether this process holds the sidecar, its offsets checked, ready for reads."""
        return self._sidecar is not None and self._pid == os.getpid()

    @property
    def opened(self) -> bool:
        """Whether this process holds the sidecar, checked or only its header."""
        return (self._sidecar or self._unchecked) is not None and self._pid == os.getpid()

    @property
    def sidecar(self) -> Sidecar:
        sc = self._sidecar
        if sc is None or self._pid != os.getpid():
            return self.load()
        if self.cache is not None:
            self.cache.touch(self)
        return sc

    @property
    def header(self) -> SidecarHeader:
        """The sidecar's header, checked against what the dataset expects; opening it does not
        check the offsets yet (the first read does)."""
        if self._pid == os.getpid():
            sc = self._sidecar or self._unchecked
            if sc is not None:
                return sc.header
        return self.load(check_body=False).header

    @property
    def index_url(self) -> str:
        return self.index_storage.url(self.index_path)

    def _expected(self) -> FileStamp | None:
        return FileStamp(self.size, self.fingerprint) if self.fingerprint is not None else None

    def _from_disk(self) -> Sidecar | None:
        """A valid on-disk copy of a remote sidecar (only with a manifest's stamps)."""
        expect = self._expected()
        if self.cache is None or expect is None or self.index_storage.cheap_seeks:
            return None
        return self.cache.from_disk(self.index_url, expect, self.records, self.body_crc)

    def _not_found(self) -> IndexNotFoundError:
        return missing_indexes([self], 1)

    def _from_raw(self, raw: bytes) -> tuple[Sidecar, int]:
        """Parse a fetched remote sidecar; keep a disk copy when there is a cache_dir."""
        sc = parse_sidecar(raw, path=self.index_url, data_url=self.data_url)
        cache, expect = self.cache, self._expected()
        if (cache is not None and expect is not None and cache.cache_dir is not None
                and sc.header.count == self.records and sc.header.stamp == expect):
            disk = cache.to_disk(self.index_url, raw)
            if disk is not None:
                return disk, 0
        return sc, len(raw)

    def _fetch(self) -> tuple[Sidecar, int]:
        """The sidecar and the bytes it holds in memory (0 when memory-mapped)."""
        ist = self.index_storage
        sc = self._from_disk()
        if sc is not None:
            return sc, 0
        try:
            if ist.cheap_seeks:
                return load_sidecar(ist, self.index_path), 0
            raw = ist.read_all(self.index_path)
        except FileNotFoundError:
            raise self._not_found() from None
        return self._from_raw(raw)

    def load(self, *, check_body: bool = True) -> Sidecar:
        """Open (or fetch) the sidecar and check it against what the dataset expects (and,
        with ``data_storage``, the data file against it); with ``check_body`` also its offsets
        against their CRC, before any record is read through them.

        Raises:
            IndexNotFoundError: There is no sidecar.
            StaleIndexError: It disagrees with the data file or the manifest.
            SidecarError: It is corrupt.
        """
        pending = self._unchecked if self._pid == os.getpid() else None
        if pending is not None:  # opened for its header in this process: only its offsets
            return pending if not check_body else self._publish(pending, 0)  # are left
        if self.data_storage is self.index_storage and not self.index_storage.cheap_seeks:
            prefetch_sidecars([self], check_body=check_body)  # sidecar and stat: one round
            loaded = self._sidecar or self._unchecked
            assert loaded is not None
            return loaded
        sc, nbytes = self._fetch()
        current = None
        if self.data_storage is not None:
            current = self.data_storage.stamp(self.path)
        return self._accept(sc, nbytes, current, check_body=check_body)

    def _accept(self, sc: Sidecar, nbytes: int, current: FileStamp | None, *,
                check_body: bool = True) -> Sidecar:
        h = sc.header
        self.check_header(h)
        if current is not None and self.data_storage is not None:
            sc.check_fresh(current, self.data_storage.url(self.path))
            self.data_storage.expect(self.path, current)
        self.records = h.count
        self.size = h.stamp.size
        self.partial = h.partial
        self._pid = os.getpid()
        if not check_body and not sc.body_checked:
            self._unchecked = sc
            return sc
        return self._publish(sc, nbytes)

    def _publish(self, sc: Sidecar, nbytes: int) -> Sidecar:
        """Check the offsets (once) and make the sidecar the one reads use in this process."""
        sc.check_offsets(self.data_url)
        self._sidecar, self._unchecked = sc, None
        nbytes += sc.decoded_bytes  # packed offsets, decoded in memory even when mapped
        if self.cache is not None and nbytes:
            self.cache.add(self, nbytes)
        return sc

    def check_header(self, h: SidecarHeader) -> None:
        """Check a sidecar header against what the dataset expects of this shard.

        Raises:
            StaleIndexError: It disagrees with the manifest.
            SidecarError: It changed since the dataset was opened.
        """
        expect = self._expected()
        if self.body_crc is not None and h.body_crc != self.body_crc:
            raise StaleIndexError(
                f"{self.index_url}: this sidecar was rebuilt after the dataset manifest was "
                f"written (its body CRC is 0x{h.body_crc:08x}, the manifest names "
                f"0x{self.body_crc:08x}); the manifest is out of date — run `ofindex build "
                "<dataset directory>` again"
            )
        if expect is not None:
            if h.count != self.records or h.stamp != expect:
                raise StaleIndexError(
                    f"{self.index_url}: the sidecar does not match the dataset manifest "
                    f"({self.records} records, {expect}) but has {h.count} records, {h.stamp}; "
                    "the manifest is out of date — run `ofindex build <dataset directory>` again"
                )
        elif self.records >= 0 and (h.count != self.records or h.stamp.size != self.size):
            raise SidecarError(
                f"{self.index_url}: the index changed since the dataset was opened "
                f"({self.records} -> {h.count} records); reopen the dataset"
            )

    @property
    def format(self) -> RecordFormat:
        return self.header.format


def prefetch_sidecars(shards: Iterable[Shard], *, check_body: bool = True) -> None:
    """Load the sidecars of ``shards`` not loaded yet in this process. Remote ones are fetched
    all at once, together with the data files' stamps for the staleness check (one round trip
    instead of two per shard). ``check_body=False`` leaves the offsets of memory-mapped
    sidecars to be checked against their CRC when their shard is first read."""
    cold = []
    for s in shards:
        if s.loaded:
            continue
        if s.opened:  # its header is checked in this process: nothing to fetch
            s.load(check_body=check_body)
        else:
            cold.append(s)
    if not cold:
        return
    ist = cold[0].index_storage
    dst = cold[0].data_storage
    batched = (  # local sidecars are memory-mapped one by one instead
        not ist.cheap_seeks
        and all(s.index_storage is ist and s.data_storage is dst for s in cold)
    )
    missing: list[Shard] = []
    if not batched:
        for s in cold:
            try:
                s.load(check_body=check_body)
            except IndexNotFoundError:
                missing.append(s)
        if missing:
            raise missing_indexes(missing, len(cold))
        return
    disk = [s._from_disk() for s in cold]
    to_read = [s for s, d in zip(cold, disk, strict=True) if d is None]
    read_paths = [s.index_path for s in to_read]
    stat_paths = [s.path for s in cold] if dst is not None else []
    if dst is None or dst is ist:
        raws, stamps = ist.fetch_many(read_paths, stat_paths)
    else:  # sidecars in another place than the data: both kinds of request at once
        with cf.ThreadPoolExecutor(2) as pool:
            f_raw = pool.submit(ist.fetch_many, read_paths, [])
            f_stat = pool.submit(dst.fetch_many, [], stat_paths)
            raws, stamps = f_raw.result()[0], f_stat.result()[1]
    raw_of = dict(zip(map(id, to_read), raws, strict=True))
    for k, s in enumerate(cold):
        on_disk = disk[k]
        if on_disk is not None:
            sc, nbytes = on_disk, 0
        else:
            raw = raw_of[id(s)]
            if isinstance(raw, FileNotFoundError):
                missing.append(s)
                continue
            if isinstance(raw, BaseException):
                raise raw
            sc, nbytes = s._from_raw(raw)
        current = stamps[k] if stat_paths else None
        if isinstance(current, BaseException):
            raise current
        s._accept(sc, nbytes, current, check_body=check_body)
    if missing:
        raise missing_indexes(missing, len(cold))


def missing_indexes(missing: list[Shard], total: int) -> IndexNotFoundError:
    """One error for every shard of a dataset that has no sidecar, with the command that
    builds them all."""
    urls = [s.data_url for s in missing]
    dirs = {u.rstrip("/").rsplit("/", 1)[0] for u in urls}
    target = dirs.pop() if len(dirs) == 1 and len(missing) > 1 else " ".join(urls[:3])
    if len(missing) == 1:
        what = f"{missing[0].index_url}: no index for {urls[0]}"
    else:
        shown = ", ".join(urls[:5]) + (f" and {len(urls) - 5} more" if len(urls) > 5 else "")
        what = f"{len(missing)} of {total} shards have no index ({shown})"
    web = all(u.startswith(("http://", "https://")) for u in urls)
    elsewhere = hint(" and open with index_dir='DIR'", " and pass --index-dir DIR here too")
    also = (f" (a web server usually takes no uploads: then `ofindex build {target} "
            f"--index-dir DIR`{elsewhere})" if web
            else hint(" (or open with build_missing=True)", ""))
    return IndexNotFoundError(
        f"{what}; build {'it' if len(missing) == 1 else 'them'} with `ofindex build {target}`"
        f"{also}"
    )
