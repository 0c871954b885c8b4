"""The read-through chain of caches a remote dataset reads through: this process's memory,
then the machine's ``cache_dir``, then the remote store, and the data's blocks on the machine.

* **memory** (:class:`~.memory.MemoryTier`, ``cache_bytes``): sidecar pages and whole
  sidecars of this process;
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
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from .data import DataCache
from .machine import DEFAULT_NODE_BYTES, NodeCache
from .memory import DEFAULT_CACHE_BYTES, PAGE_OVERHEAD, MemoryTier

__all__ = ["DEFAULT_CACHE_BYTES", "DEFAULT_NODE_BYTES", "Chain", "Kept", "Want"]


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
    def hold_sidecar(self, key: Hashable, nbytes: int, release: Callable[[], None]) -> None:
        """Count a whole sidecar held by a shard against the memory bound.

        Args:
            key: The shard's key in memory.
            nbytes: The bytes the sidecar holds.
            release: Lets go of the sidecar when it is evicted.
        """
        self.memory.put(key, release, nbytes, release)
