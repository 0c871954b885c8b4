"""The read-through chain of caches a remote dataset reads through: this process's memory,
then the machine's ``cache_dir``, then the remote store, and the data's blocks on the machine.

* **memory** (:class:`MemoryTier`, ``cache_bytes``): sidecar pages and whole sidecars of
  this process, one LRU bounded in bytes (whole sidecars are held by their shards, which let
  go of them when they are evicted; the newest entry is kept even when it alone is over
  budget: a read needs it);
* **machine** (:class:`~.machine.NodeCache`, ``cache_dir`` and ``cache_dir_bytes``): pages,
  headers, compact manifests' stamps pages, identity checks and whole sidecars, shared by
  every process of the machine;
* **data blocks** (:class:`~.data.DataCache`, ``data_cache_bytes``): blocks of the remote data
  files, in the same directory.

Every entry is keyed by the identity of what it copies (:mod:`.keys`). A read works out the
keys of what it needs (:class:`Want`) and makes one call, :meth:`Chain.read`: what memory
holds is taken from there, what the machine holds is checked as a fetched piece would be and
taken (and held in memory), the rest is fetched in one round by the caller's ``fetch`` and
kept in both tiers. Picklable: a new process starts with an empty memory and the machine's
verdict on ``cache_dir``.
"""

import dataclasses
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from .data import DataCache
from .machine import DEFAULT_NODE_BYTES, NodeCache

__all__ = ["DEFAULT_CACHE_BYTES", "DEFAULT_NODE_BYTES", "Chain", "Kept", "MemoryTier", "Want"]

#: Bytes a cached page costs besides its offsets (dict entry, key, array object).
PAGE_OVERHEAD = 160

#: Default bound on remote sidecar bytes held in memory per process (8 bytes per record).
DEFAULT_CACHE_BYTES = 256 << 20

#: What an entry holds: ``(value, bytes it costs, what lets go of it on eviction, what says
#: whether it was used since it last came up for eviction)``.
_Entry = tuple[Any, int, Callable[[], None] | None, Callable[[], bool] | None]


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
        """How many entries are held."""
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
        """The value held under a key, now the most recently used.

        Args:
            key: Its key.

        Returns:
            The value, or ``None`` when none is held.
        """
        with self._lock:
            self._check_pid()
            entry = self._lru.get(key)
            if entry is None:
                return None
            self._lru.move_to_end(key)
            return entry[0]

    def touch(self, key: Hashable) -> None:
        """Mark an entry as just used (evicted last).

        Args:
            key: Its key (one not held is ignored).
        """
        try:  # (once per shard of every batch: no lock; a miss is harmless)
            self._lru.move_to_end(key)
        except KeyError:  # not held here, or evicted meanwhile by another thread
            return

    def put(self, key: Hashable, value: Any, nbytes: int,
            on_evict: Callable[[], None] | None = None,
            used: Callable[[], bool] | None = None) -> None:
        """Hold a value; evict the least recently used entries while over budget, never
        this one.

        An entry read without asking the tier (a shard's whole sidecar, read by every batch
        of its shard) says instead whether it was used since it last came up for eviction:
        one that was is spared once, moved to the newest (the "second chance" approximation
        of LRU), so a read marks it with a plain store, not a call with the tier's lock.

        Args:
            key: Its key.
            value: What to hold (not ``None``).
            nbytes: The bytes it costs.
            on_evict: Lets go of it when it is evicted, or ``None``.
            used: Whether it was used since it last came up for eviction (and forget that),
                or ``None`` (recency from :meth:`get` and :meth:`touch`).
        """
        victims: list[Callable[[], None]] = []
        with self._lock:
            self._check_pid()
            old = self._lru.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._lru[key] = (value, nbytes, on_evict, used)
            self._bytes += nbytes
            spared = 0
            while self._bytes > self.max_bytes and len(self._lru) > 1:
                victim, (_, size, release, was_used) = next(iter(self._lru.items()))
                if victim == key:
                    break
                if was_used is not None and spared < len(self._lru) and was_used():
                    spared += 1  # (bounded: a reader may mark it again meanwhile)
                    self._lru.move_to_end(victim)
                    self._lru.move_to_end(key)  # (the entry put stays the newest)
                    continue
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


@dataclasses.dataclass(eq=False)
class Want:
    """One piece a read needs, looked for tier by tier.

    Attributes:
        memory_key: Its key in this process's memory, or ``None`` (not held there).
        machine_key: Its key on the machine, or ``None`` (not kept there, or its key is not
            known before the fetch).
        check: Makes the value of bytes the machine held, or returns ``None`` when they are
            not a valid copy (a damaged or tampered entry: a miss). A machine holds data, not
            values: what it gives is checked as a fetched piece is.
        value: What was found (``None``: still missing).
    """

    memory_key: Hashable | None
    machine_key: bytes | None
    check: Callable[[bytes], Any]
    value: Any = None


@dataclasses.dataclass
class Kept:
    """A fetched piece to keep, checked as it was fetched.

    Attributes:
        memory_key: Its key in this process's memory, or ``None`` (not held there).
        machine_key: Its key on the machine, or ``None`` (not kept there).
        value: What memory holds (costing ``len(data)`` and the overhead of an entry).
        data: What the machine keeps.
    """

    memory_key: Hashable | None
    machine_key: bytes | None
    value: Any
    data: bytes


class Chain:
    """The caches of one dataset, memory → machine → remote (see the module).

    Args:
        max_bytes: Bound on this process's memory tier (``cache_bytes``).
        cache_dir: The machine's cache directory, or ``None`` (no machine tier).
        cache_dir_bytes: Bound on the machine's pages and sidecars.
        data_bytes: Bound on the machine's data blocks (``data_cache_bytes``; 0: none).

    Raises:
        ValueError: ``data_bytes`` is negative.
    """

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES, cache_dir: str | None = None,
                 cache_dir_bytes: int = DEFAULT_NODE_BYTES, data_bytes: int = 0) -> None:
        self.memory = MemoryTier(max_bytes)
        self.machine = (None if cache_dir is None
                        else NodeCache(cache_dir, int(cache_dir_bytes)))
        self.data = (None if self.machine is None or not data_bytes
                     else DataCache(self.machine.directory, data_bytes,
                                    problem=self.machine.problem))
        #: Read remote sidecars whole, not by pages: set when the dataset's data is kept
        #: whole on this machine (:attr:`data`), which its sidecars are a small part of; a
        #: batch then finds its records' spans with one array lookup per shard instead of a
        #: page lookup per record (a third of a cached batch's time).
        self.whole = False

    def __getstate__(self) -> tuple[int, NodeCache | None, DataCache | None, bool]:
        return (self.memory.max_bytes, self.machine, self.data, self.whole)

    def __setstate__(self, state: tuple[int, NodeCache | None, DataCache | None, bool]) -> None:
        max_bytes, self.machine, self.data, self.whole = state
        self.memory = MemoryTier(max_bytes)  # the machine is not checked again: a directory
        # found unusable was warned about

    def __repr__(self) -> str:
        return f"Chain({self.memory!r}, {self.machine!r}, {self.data!r})"

    @property
    def max_bytes(self) -> int:
        """The bound on this process's memory tier."""
        return self.memory.max_bytes

    # -- the read-through ---------------------------------------------------------------------
    def recall(self, wants: Sequence[Want]) -> list[Want]:
        """Fill ``wants`` from memory, then from the machine (in their order: a check may
        depend on one made before it, a page on its sidecar's header); what the machine gave
        is held in memory too.

        Args:
            wants: What a read needs, each with its keys.

        Returns:
            The wants still missing.
        """
        missing: list[Want] = []
        for want in wants:
            if want.memory_key is not None:
                want.value = self.memory.get(want.memory_key)
            if want.value is None:
                missing.append(want)
        machine = self.machine
        asked = [want for want in missing if want.machine_key is not None]
        if machine is None or not asked:
            return missing
        held = machine.get([want.machine_key for want in asked if want.machine_key])
        if not held:
            return missing
        still: list[Want] = []
        for want in missing:
            data = None if want.machine_key is None else held.get(want.machine_key)
            if data is not None:
                want.value = want.check(data)
                if want.value is not None and want.memory_key is not None:
                    self.memory.put(want.memory_key, want.value, len(data) + PAGE_OVERHEAD)
            if want.value is None:
                still.append(want)
        return still

    def keep(self, kept: Iterable[Kept]) -> None:
        """Keep fetched pieces in memory and on the machine.

        Args:
            kept: The pieces (see :class:`Kept`), each checked as fetched.
        """
        to_machine: list[tuple[bytes, bytes]] = []
        for piece in kept:
            if piece.memory_key is not None:
                self.memory.put(piece.memory_key, piece.value, len(piece.data) + PAGE_OVERHEAD)
            if piece.machine_key is not None:
                to_machine.append((piece.machine_key, piece.data))
        if self.machine is not None and to_machine:
            self.machine.put(to_machine)

    def read(self, wants: Sequence[Want],
             fetch: Callable[[list[Want], list[Kept]], None]) -> None:
        """Fill ``wants``: from memory, from the machine, the rest fetched and kept.

        Args:
            wants: What a read needs, each with its keys.
            fetch: ``fetch(missing, kept)``, the caller's one round for every missing piece:
                it fills their values and adds what to keep to ``kept`` as each is checked.
                What it added is kept even when it fails part way (it was checked).

        Raises:
            Exception: What ``fetch`` raises.
        """
        kept: list[Kept] = []
        try:
            fetch(self.recall(wants), kept)
        finally:
            self.keep(kept)

    # -- whole sidecars -------------------------------------------------------------------
    def hold_sidecar(self, key: Hashable, nbytes: int, release: Callable[[], None],
                     used: Callable[[], bool]) -> None:
        """Count a whole sidecar held by a shard against the memory bound.

        Args:
            key: The shard's key in memory.
            nbytes: The bytes the sidecar holds.
            release: Lets go of the sidecar when it is evicted.
            used: Whether reads used it since it last came up for eviction (see
                :meth:`MemoryTier.put`).
        """
        self.memory.put(key, release, nbytes, release, used)
