"""The chain's first tier: this process's remote sidecar pages and whole sidecars, one LRU
bounded in bytes (``ofindex.open(cache_bytes=...)``).

A *page* is the offsets of ``page_records`` consecutive records of one shard, plus the offset
just past them, as a ``uint64`` array; a *whole sidecar* is held by its shard, and the tier
asks the shard to let go of it (``unload``) when it is evicted. Both share one budget: the
least recently used entry goes first, whichever kind it is; the newest entry is kept even
when it alone is over budget (a read needs it).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

#: Bytes a cached page costs besides its offsets (dict entry, key, array object).
PAGE_OVERHEAD = 160

#: Default bound on remote sidecar bytes held in memory per process (8 bytes per record).
DEFAULT_CACHE_BYTES = 256 << 20

#: What an entry holds: ``(value, bytes it costs, what lets go of it on eviction)``.
_Entry = tuple[Any, int, Callable[[], None] | None]


class MemoryTier:
    """LRU of pages and whole sidecars of this process, bounded by ``max_bytes``.

    Args:
        max_bytes: Bound on the bytes of every entry.
    """

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = int(max_bytes)
        self._lru: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def __len__(self) -> int:
        return len(self._lru)

    def __repr__(self) -> str:
        return f"MemoryTier({len(self._lru)} entries, {self._bytes} of {self.max_bytes} bytes)"

    @property
    def held_bytes(self) -> int:
        """Bytes of the entries held."""
        return self._bytes

    def _check_pid(self) -> None:
        if self._pid != os.getpid():  # a forked child starts empty
            self._lru.clear()
            self._bytes = 0
            self._pid = os.getpid()

    def get(self, key: Hashable) -> Any:
        """The value held under ``key`` (now the most recently used), or ``None``."""
        with self._lock:
            self._check_pid()
            entry = self._lru.get(key)
            if entry is None:
                return None
            self._lru.move_to_end(key)
            return entry[0]

    def touch(self, key: Hashable) -> None:
        """Mark ``key`` as just used (evicted last); a key not held is ignored."""
        try:  # (once per shard of every batch: no lock; a miss is harmless)
            self._lru.move_to_end(key)
        except KeyError:  # not held here, or evicted meanwhile by another thread
            return

    def put(self, key: Hashable, value: Any, nbytes: int,
            on_evict: Callable[[], None] | None = None) -> None:
        """Hold ``value`` under ``key``, costing ``nbytes``; evict the least recently used
        entries (calling their ``on_evict``) while over budget, never this one."""
        victims: list[Callable[[], None]] = []
        with self._lock:
            self._check_pid()
            old = self._lru.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._lru[key] = (value, nbytes, on_evict)
            self._bytes += nbytes
            while self._bytes > self.max_bytes and len(self._lru) > 1:
                victim, (_, size, release) = next(iter(self._lru.items()))
                if victim == key:
                    break
                del self._lru[victim]
                self._bytes -= size
                if release is not None:
                    victims.append(release)
        for release in victims:  # outside the lock: a shard's unload takes its own locks
            release()

    def clear(self) -> None:
        """Drop every entry (without calling their ``on_evict``)."""
        with self._lock:
            self._lru.clear()
            self._bytes = 0
