"""A thread pool per process, for compiled work that runs without the GIL (copies, CRCs,
inflating): made on first use, made again in a child after ``fork`` (a forked pool's threads
do not exist there), and not made at all on a single core."""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading


def usable_cores() -> int:
    """The number of cores this process may run on (its CPU affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class ProcessPool:
    """This process's thread pool of one kind of work.

    Args:
        name: Prefix of the threads' names.
        max_threads: At most this many threads (fewer on fewer cores; none on one core,
            where the caller does the work itself).
    """

    def __init__(self, name: str, max_threads: int = 4) -> None:
        self.name, self.max_threads = name, max_threads
        self._lock = threading.Lock()
        self._pool: cf.ThreadPoolExecutor | None = None
        self._pid = -1
        self._threads = 1

    def get(self) -> cf.ThreadPoolExecutor | None:
        """Return the pool, or ``None`` when this process may use only one core."""
        cores = usable_cores()
        if cores < 2:
            return None
        threads = min(self.max_threads, cores)
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = cf.ThreadPoolExecutor(threads, thread_name_prefix=self.name)
                self._pid, self._threads = os.getpid(), threads
            return self._pool

    @property
    def workers(self) -> int:
        """The threads of the pool :meth:`get` made in this process (1 before it made one,
        and on one core: the caller works alone)."""
        return self._threads if self._pool is not None and self._pid == os.getpid() else 1
