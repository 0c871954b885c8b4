"""The per-process cache of remote sidecars and sidecar pages, with the machine's node cache.

Fetched remote sidecars (and pages, :class:`~ofindex.read.pagecache.PageCache`) are kept in a
per-process LRU bounded in bytes; with ``cache_dir`` whole sidecars are also kept on local disk
and memory-mapped from there, valid as long as their header stamp matches the manifest
(:class:`~ofindex.read.nodecache.NodeCache`).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Protocol

from ..formats.sidecar import Sidecar
from ..storage import FileStamp
from .cachedir import entry_name
from .nodecache import DEFAULT_NODE_BYTES, NodeCache
from .pagecache import PageCache

#: Default bound on remote sidecar bytes held in memory per process (8 bytes per record).
DEFAULT_CACHE_BYTES = 256 << 20


class Evictable(Protocol):
    """What the cache holds: something whose sidecar it can drop (a shard)."""

    def unload(self) -> None: ...


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
        self._lru: OrderedDict[int, tuple[Evictable, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.pages = PageCache(self.max_bytes, lambda: self._bytes)
        self.node = (None if self.cache_dir is None
                     else NodeCache(self.cache_dir, self.cache_dir_bytes))
        #: Read remote sidecars whole, not by pages: set when the dataset's data is kept
        #: whole on this machine (:mod:`ofindex.read.datacache`), which its sidecars are a
        #: small part of; a batch then finds its records' spans with one array lookup per
        #: shard instead of a page lookup per record (a third of a cached batch's time).
        self.whole = False

    def __getstate__(self) -> tuple[int, int, NodeCache | None, bool]:
        return (self.max_bytes, self.cache_dir_bytes, self.node, self.whole)

    def __setstate__(self, state: tuple[int, int, NodeCache | None, bool]) -> None:
        max_bytes, cache_dir_bytes, node, whole = state
        SidecarCache.__init__(self, max_bytes, None, cache_dir_bytes)
        self.cache_dir = None if node is None else node.directory
        self.node = node  # not checked again: a directory found unusable was warned about
        self.whole = whole

    def __repr__(self) -> str:
        return f"SidecarCache({len(self._lru)} sidecars, {self._bytes} of {self.max_bytes} bytes)"

    @property
    def held_bytes(self) -> int:
        """Bytes of sidecars held in memory."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._lru)

    def touch(self, shard: Evictable) -> None:
        """Mark ``shard``'s sidecar as just used (it is evicted last).

        Args:
            shard: A shard whose sidecar this cache accounts for (others are ignored).
        """
        try:  # (once per shard of every batch: no context manager)
            self._lru.move_to_end(id(shard))
        except KeyError:  # not accounted for here, or evicted meanwhile by another thread
            return

    def add(self, shard: Evictable, nbytes: int) -> None:
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
                victim.unload()

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
