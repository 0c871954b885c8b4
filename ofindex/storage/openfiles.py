"""How many files ofindex keeps open in a process: the one place that decides it.

Each local data file read holds a descriptor (``mmap=False``) or a memory map (which holds a
descriptor of its own: CPython's ``mmap`` keeps a duplicate), and so does each local sidecar,
memory-mapped, and each sidecar a remote dataset keeps in its ``cache_dir``. Held without a
bound, a dataset of more shards than the process may open failed with "Too many open files"
(about 770 shards under Linux's common soft limit of 1,024, 400 under macOS's 256).

:func:`limits` derives the bounds from the process's soft limit (``RLIMIT_NOFILE``), read
each time they are asked for (a program may raise it): ofindex keeps at most half of it open
between reads (at most :data:`MOST_HELD`), leaving the rest to the program's own files,
sockets and pipes, and a read holds at most an eighth of that many shards at once (a batch
over more shards is read in parts, an iteration streams them one by one; a dataset takes this
bound when its shards' accesses are chosen, not again for each batch). What is kept is
counted in one process-wide :class:`OpenFiles` (:data:`OPEN_FILES`), across datasets: beyond
the bound, what was opened longest ago is let go of (a file then closes once no read in
flight uses it, and is opened and checked again when it is next read).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Protocol

try:
    import resource
except ImportError:  # Windows: no RLIMIT_NOFILE (the C runtime's default is 512 files)
    resource = None  # type: ignore[assignment]

#: The share of the soft limit ofindex keeps open between reads: one half (the rest is the
#: program's own files, sockets, pipes, and the files reads in flight hold beyond it).
HELD_SHARE = 2
#: At most this many kept open whatever the limit: each file also costs a memory map (the
#: kernel allows 65,530 per process by default), and reopening a file costs ~10 µs.
MOST_HELD = 4096
#: At least this many (a soft limit below 32 leaves ofindex too little to read at all).
LEAST_HELD = 16
#: The limit assumed where the platform has no ``RLIMIT_NOFILE`` (Windows' C runtime).
DEFAULT_LIMIT = 512


@dataclasses.dataclass(frozen=True)
class FileLimits:
    """The bounds on files ofindex holds open.

    Attributes:
        soft_limit: The process's soft limit on open files.
        held: Files (descriptors and memory maps of data files and sidecars) kept open
            between reads, in the whole process.
        per_read: Shards one read holds at once (a batch over more is read in parts).
    """

    soft_limit: int
    held: int
    per_read: int


def limits() -> FileLimits:
    """The bounds on files ofindex holds open, from the process's soft limit now (one
    ``getrlimit`` call, about 0.5 µs).

    Returns:
        The bounds.
    """
    soft = DEFAULT_LIMIT
    if resource is not None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY or soft < 0:
            soft = 1 << 20
    known = _KNOWN.get(soft)
    if known is None:
        held = max(LEAST_HELD, min(MOST_HELD, soft // HELD_SHARE))
        known = _KNOWN[soft] = FileLimits(soft, held, max(2, held // 8))
    return known


#: The bounds worked out for each soft limit seen.
_KNOWN: dict[int, FileLimits] = {}


class Holder(Protocol):
    """What holds open files counted by :class:`OpenFiles`: it lets go of one on request."""

    def release_held(self, key: Hashable) -> None:
        """Let go of what ``key`` names (it closes once nothing in use refers to it)."""
        ...


class OpenFiles:
    """Files held open between reads in this process, counted: the oldest are let go of
    (:meth:`Holder.release_held`) once there are more than :func:`limits` allows.

    Holders are referred to weakly: the holdings of one that was garbage collected (its files
    closed with it) are dropped when they come up for release. A forked child starts with
    none (each holder drops its parent's files by itself).
    """

    def __init__(self) -> None:
        self._reset()
        if hasattr(os, "register_at_fork"):  # a forked child starts afresh, with a lock of
            os.register_at_fork(after_in_child=self._reset)  # its own (the parent's may be
            # held by another of its threads at the fork)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        #: (holder's id, key) -> (the holder, weakly; the descriptors the holding counts)
        self._held: OrderedDict[tuple[int, Hashable], tuple[weakref.ref[Holder], int]] = (
            OrderedDict())
        self._count = 0

    def __len__(self) -> int:
        """Files counted now (a holding may count several)."""
        return self._count

    def hold(self, holder: Holder, key: Hashable, files: int = 1) -> None:
        """Count the files ``holder`` keeps open under ``key`` (again: moved to the newest),
        and let go of the oldest holdings over the bound.

        Args:
            holder: What keeps them.
            key: What names them to the holder.
            files: How many descriptors they hold.
        """
        victims = []
        with self._lock:
            entry = (id(holder), key)
            old = self._held.pop(entry, None)
            if old is not None:
                self._count -= old[1]
            self._held[entry] = (weakref.ref(holder), files)
            self._count += files
            bound = limits().held
            while self._count > bound and len(self._held) > 1:
                (_, oldest), (ref, n) = self._held.popitem(last=False)
                self._count -= n
                victims.append((ref, oldest))
        for ref, oldest in victims:  # (outside the lock: letting go may close files)
            victim = ref()
            if victim is not None:
                victim.release_held(oldest)

    def drop(self, holder: Holder, key: Hashable) -> None:
        """Stop counting what ``holder`` let go of by itself."""
        with self._lock:
            old = self._held.pop((id(holder), key), None)
            if old is not None:
                self._count -= old[1]

    def drop_all(self, holder: Holder) -> None:
        """Stop counting everything ``holder`` held (it let go of all of it)."""
        owner = id(holder)
        with self._lock:
            for entry in [e for e in self._held if e[0] == owner]:  # (at most the bound)
                self._count -= self._held.pop(entry)[1]


#: The process's count of files ofindex holds open.
OPEN_FILES = OpenFiles()
