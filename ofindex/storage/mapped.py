"""Local files read through memory maps: no system call per record.

The default for local data (``ofindex.open(..., mmap=False)`` turns it off): about 1.5x faster
random access to small records than ``pread``, and batches are cut straight out of the maps.
The catch every mmap reader has (``numpy.memmap``, Arrow, LMDB): if another process
*truncates* a data file in place, or rewrites it in place, while it is mapped, touching the
lost pages raises SIGBUS, which kills the process without a message. So this storage hands
its maps (:class:`DataMap`, which name their file) only to the compiled module's reads, which
copy out of them in guarded calls and raise :class:`~ofindex.errors.StaleIndexError` naming the
file instead (ofindex/csrc/guard.c); its own reads (:meth:`read`, :meth:`read_into`, …) and
every read without the compiled module use ``pread``, which a shrunk file answers short. Files
replaced by rename (as :class:`ofindex.Writer` does) are safe either way: the map keeps the
old file. Reads past the size a file had when it was mapped fall back to ``pread``, so files
that grow are fine.
"""

from __future__ import annotations

import mmap
import os
from collections import OrderedDict
from collections.abc import Hashable

from ..errors import DataFileNotFoundError
from .local import LocalStorage
from .openfiles import OPEN_FILES


class DataMap(mmap.mmap):
    """A read-only memory map of a data file, which names the file (:attr:`path`): the
    compiled reads' error for a map whose file shrank names it.

    Attributes:
        path: The file.
    """

    path: str


class MappedLocalStorage(LocalStorage):
    """:class:`LocalStorage` that hands out per-process memory maps of its files to the
    compiled reads (:meth:`mapped`); its own reads use ``pread``."""

    can_mmap = True

    def __init__(self) -> None:
        super().__init__()
        self._maps: OrderedDict[str, tuple[DataMap | None, int]] = OrderedDict()

    def _reset(self) -> None:
        super()._reset()
        self._maps = OrderedDict()

    def __repr__(self) -> str:
        return "MappedLocalStorage()"

    def _map(self, path: str) -> tuple[DataMap | None, int]:
        if self._pid != os.getpid():
            self._reset()
        entry = self._maps.get(path)
        if entry is None:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                raise DataFileNotFoundError(f"{path}: data file not found") from None
            try:  # the map holds its own descriptor: ours is closed right away
                self.check_opened(path, fd)
                size = os.fstat(fd).st_size
                mm = DataMap(fd, size, access=mmap.ACCESS_READ) if size else None
            finally:
                os.close(fd)
            if mm is not None:
                mm.path = path
            entry = (mm, size)
            self._maps[path] = entry
            if mm is not None:  # a map holds a descriptor of its own
                OPEN_FILES.hold(self, ("map", path))  # (may let go of the oldest files)
        return entry

    def release_held(self, key: Hashable) -> None:
        """Let go of a cached map (``("map", path)``) or handle the process's count of open
        files asks for (it is unmapped once no read uses it)."""
        if isinstance(key, tuple) and key[0] == "map":
            self._maps.pop(key[1], None)
        else:
            super().release_held(key)

    def close(self) -> None:
        self._maps = OrderedDict()
        super().close()

    def forget(self, path: str) -> None:
        """Drop the map and handle of ``path`` (made at its old size, or of a file since
        replaced); a read still using them keeps them."""
        if self._maps.pop(path, None) is not None:
            OPEN_FILES.drop(self, ("map", path))
        super().forget(path)

    def mapped(self, path: str, end: int) -> DataMap | None:
        """The map of ``path`` when it covers ``[0, end)``, else ``None``: for the compiled
        module's reads only, which read it in guarded calls (see the module)."""
        entry = self._maps.get(path) if self._pid == os.getpid() else None
        mm, size = entry if entry is not None else self._map(path)
        return mm if mm is not None and end <= size else None
