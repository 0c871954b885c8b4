"""This process's cache of sidecar pages: an LRU bounded in bytes, shared with whole sidecars.

A *page* is the offsets of ``page_records`` consecutive records of one shard, plus the
offset just past them (the next record's, or the indexed end for the last page), as an
``uint64`` array: every record of the page has its span in it. Pages and whole sidecars of
one dataset share one budget (``ofindex.open(cache_bytes=...)``): the cache drops least
recently used pages while pages and whole sidecars together hold more.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np

#: Bytes a cached page costs besides its offsets (dict entry, key, array object).
PAGE_OVERHEAD = 160


class PageCache:
    """LRU of pages keyed by ``(shard key, page number)``.

    Args:
        max_bytes: Bound on the bytes of pages plus ``others()``.
        others: Bytes held by the other users of the budget (whole sidecars).
    """

    def __init__(self, max_bytes: int, others: Callable[[], int] = lambda: 0) -> None:
        self.max_bytes = int(max_bytes)
        self._others = others
        self._lru: OrderedDict[Hashable, np.ndarray] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._lru)

    def __repr__(self) -> str:
        return f"PageCache({len(self._lru)} pages, {self._bytes} of {self.max_bytes} bytes)"

    @property
    def held_bytes(self) -> int:
        """Bytes of pages held (offsets plus bookkeeping)."""
        return self._bytes

    def _check_pid(self) -> None:
        if self._pid != os.getpid():  # a forked child starts empty
            self._lru.clear()
            self._bytes = 0
            self._pid = os.getpid()

    def get(self, key: Hashable) -> np.ndarray | None:
        """The page cached under ``key`` (now the most recently used), or ``None``."""
        with self._lock:
            self._check_pid()
            page = self._lru.get(key)
            if page is None:
                self.misses += 1
                return None
            self._lru.move_to_end(key)
            self.hits += 1
            return page

    def put(self, key: Hashable, page: np.ndarray) -> None:
        """Cache ``page``; drop least recently used pages while over budget."""
        size = page.nbytes + PAGE_OVERHEAD
        with self._lock:
            self._check_pid()
            old = self._lru.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes + PAGE_OVERHEAD
            self._lru[key] = page
            self._bytes += size
            self._shrink(keep=key)

    def shrink(self) -> None:
        """Drop least recently used pages while pages and the others exceed the budget."""
        with self._lock:
            self._check_pid()
            self._shrink(keep=None)

    def _shrink(self, keep: Hashable | None) -> None:
        others = self._others()
        while self._lru and self._bytes + others > self.max_bytes:
            key, victim = self._lru.popitem(last=False)
            if key == keep:  # the newest page alone is over budget: keep it
                self._lru[key] = victim
                break
            self._bytes -= victim.nbytes + PAGE_OVERHEAD

    def clear(self) -> None:
        """Drop every page."""
        with self._lock:
            self._lru.clear()
            self._bytes = 0
