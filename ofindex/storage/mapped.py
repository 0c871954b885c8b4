"""Local files read through memory maps: no system call per record.

The default for local data (``ofindex.open(..., mmap=False)`` turns it off): about 1.5x faster
random access to small records than ``pread``, and batches are cut straight out of the maps.
The catch is the one every mmap reader has (``numpy.memmap``, Arrow, LMDB): if another process
*truncates* a data file in place while it is mapped, touching the lost pages kills the process
with SIGBUS instead of raising an error. Files replaced by rename (as :class:`ofindex.Writer`
does) are safe: the map keeps the old file. Reads past the size a file had when it was mapped
fall back to ``pread``, so files that grow are fine.
"""

from __future__ import annotations

import mmap
import os
from collections import OrderedDict
from collections.abc import Hashable, Sequence

from ..errors import DataFileNotFoundError
from .base import check_length
from .local import LocalStorage
from .openfiles import OPEN_FILES


class MappedLocalStorage(LocalStorage):
    """:class:`LocalStorage` whose record reads copy out of per-process memory maps."""

    can_mmap = True

    def __init__(self) -> None:
        super().__init__()
        self._maps: OrderedDict[str, tuple[mmap.mmap | None, int]] = OrderedDict()

    def _reset(self) -> None:
        super()._reset()
        self._maps = OrderedDict()

    def __repr__(self) -> str:
        return "MappedLocalStorage()"

    def _map(self, path: str) -> tuple[mmap.mmap | None, int]:
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
                mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else None
            finally:
                os.close(fd)
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

    def mapped(self, path: str, end: int) -> mmap.mmap | None:
        entry = self._maps.get(path) if self._pid == os.getpid() else None
        mm, size = entry if entry is not None else self._map(path)
        return mm if mm is not None and end <= size else None

    def read(self, path: str, start: int, end: int) -> bytes:
        entry = self._maps.get(path) if self._pid == os.getpid() else None
        mm, size = entry if entry is not None else self._map(path)
        if end <= size and mm is not None:
            return mm[start:end]
        return super().read(path, start, end)  # grew since it was mapped (or is empty)

    def read_into(self, path: str, start: int, buffer: memoryview) -> int:
        mm, size = self._map(path)
        n = min(len(buffer), size - start)
        if mm is None or n <= 0:
            return super().read_into(path, start, buffer)
        view = memoryview(mm)
        try:
            buffer[:n] = view[start : start + n]
        finally:
            view.release()
        return n

    def read_ranges_concat(
        self, paths: Sequence[str], starts: Sequence[int], ends: Sequence[int]
    ) -> bytes:
        blobs = []
        last_path, mm, size = None, None, 0
        for path, s, e in zip(paths, starts, ends, strict=True):
            if path is not last_path:
                (mm, size), last_path = self._map(path), path
            if e <= size and mm is not None:
                blobs.append(mm[s:e])
            else:
                data = super().read(path, s, e)
                check_length(path, s, e, len(data))
                blobs.append(data)
        return b"".join(blobs)
