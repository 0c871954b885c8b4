"""Local files: ``os.pread`` on cached descriptors, ``mmap`` for sidecars."""

from __future__ import annotations

import contextlib
import errno
import glob as _glob
import os
import secrets
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import IO

from ..errors import DataFileNotFoundError, OfindexError, StorageError, hint
from ..transport.failures import not_writable
from . import openfiles
from .base import CHECKED_READ_BYTES, Storage, check_length, check_range
from .openfiles import OPEN_FILES
from .patterns import has_magic, literal_heads, with_literal_head
from .special import is_special, write_in_place
from .stamp import ExpectedFiles, FileStamp


class _Handle:
    """A read-only file descriptor that closes itself when its last user lets go of it.

    Cached handles are shared by concurrent reads: dropping one from the cache (eviction,
    :meth:`LocalStorage.close`, a fork) must not close a descriptor a read is still using,
    so the descriptor is closed with the object itself, without a ResourceWarning.
    """

    __slots__ = ("fd", "size")

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        #: The file's size when last looked at: a read past it looks again before allocating.
        self.size = os.fstat(self.fd).st_size

    def fileno(self) -> int:
        return self.fd

    def covers(self, end: int) -> bool:
        if end > self.size:  # it may have grown since
            self.size = os.fstat(self.fd).st_size
        return end <= self.size

    # os.close bound now: at interpreter exit, a handle still cached may outlive the module
    # globals it would look up (with some libraries loaded, "'NoneType' object is not
    # callable" was printed at exit)
    def __del__(self, _close: Callable[[int], None] = os.close) -> None:
        fd = getattr(self, "fd", -1)  # unset when os.open failed
        self.fd = -1
        if fd >= 0:
            _close(fd)


class LocalStorage(Storage):
    """Local disk. Reads use ``os.pread`` (no buffered file object, no readahead copies)."""

    is_local = True
    default_max_gap = 4096  # a syscall costs about as much as copying a page

    def __init__(self) -> None:
        self._files: OrderedDict[str, _Handle] = OrderedDict()
        self._pid = os.getpid()
        self.expected = ExpectedFiles()

    def _reset(self) -> None:
        """Forget this process's handles (after unpickling or in a forked child)."""
        self._files = OrderedDict()
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, object]:
        return {"expected": self.expected}

    def __setstate__(self, state: dict[str, object]) -> None:
        self._reset()
        expected = state.get("expected")
        self.expected = expected if isinstance(expected, ExpectedFiles) else ExpectedFiles()

    def check_opened(self, path: str, fd: int) -> None:
        """Check a newly opened descriptor of ``path`` against the file the dataset expects
        (same size, mtime and inode): a file replaced by rename since the dataset was opened
        is refused, never read against the old index.

        Raises:
            StaleIndexError: It is another file.
        """
        if len(self.expected):
            self.expected.check(path, stat_stamp(os.fstat(fd)), path)

    def __repr__(self) -> str:
        return "LocalStorage()"

    def _file(self, path: str) -> _Handle:
        """An unbuffered handle of ``path`` (cached, and counted among the process's open
        files, :mod:`.openfiles`; callers hold it while they use its fd, so an evicted handle
        is closed only once no read is using it)."""
        if self._pid != os.getpid():  # after fork: the parent's descriptors are not ours
            self._reset()
        f = self._files.get(path)
        if f is None:
            try:
                f = _Handle(path)
            except FileNotFoundError:
                raise DataFileNotFoundError(f"{path}: data file not found") from None
            self.check_opened(path, f.fd)
            self._files[path] = f
            OPEN_FILES.hold(self, ("file", path))  # (may let go of the oldest files)
        return f

    def release_held(self, key: Hashable) -> None:
        """Let go of a cached handle (``("file", path)``) the process's count of open files
        asks for (it closes once no read uses it)."""
        if isinstance(key, tuple) and key[0] == "file":
            self._files.pop(key[1], None)

    def handle(self, path: str) -> _Handle:
        return self._file(path)

    def open_limit(self) -> int:
        return openfiles.limits().held

    def close(self) -> None:
        """Let go of this process's cached handles (each closes once no read uses it)."""
        self._files = OrderedDict()
        OPEN_FILES.drop_all(self)
        super().close()

    def stamp(self, path: str) -> FileStamp:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise DataFileNotFoundError(f"{path}: data file not found") from None
        held = self._files.get(path) if self._pid == os.getpid() else None
        if held is not None and not _same_file(held, st):
            self.forget(path)  # replaced since it was opened: the next read opens the new one
        return stat_stamp(st)

    def forget(self, path: str) -> None:
        """Drop the cached handle of ``path`` (the file there is another one now); a read
        still using it keeps it."""
        if self._files.pop(path, None) is not None:
            OPEN_FILES.drop(self, ("file", path))

    def read(self, path: str, start: int, end: int) -> bytes:
        f = self._files.get(path) if self._pid == os.getpid() else None
        if f is None:
            f = self._file(path)
        if end > f.size or not 0 <= end - start <= CHECKED_READ_BYTES or start < 0:
            _check_extent(f, path, start, end)  # never allocate past the file's end
        data = os.pread(f.fileno(), end - start, start)
        if len(data) != end - start:
            check_length(path, start, end, len(data))
        return data

    def read_ranges_concat(
        self, paths: Sequence[str], starts: Sequence[int], ends: Sequence[int]
    ) -> bytes:
        pread = os.pread
        last_path: str | None = None
        handle: _Handle | None = None
        blobs: list[bytes] = []
        append = blobs.append
        for path, s, e in zip(paths, starts, ends, strict=True):
            if handle is None or path is not last_path:
                handle = self._file(path)  # held while its descriptor is in use
                last_path = path
            if e > handle.size or not 0 <= e - s <= CHECKED_READ_BYTES or s < 0:
                _check_extent(handle, path, s, e)
            data = pread(handle.fd, e - s, s)
            if len(data) != e - s:
                check_length(path, s, e, len(data))
            append(data)
        return b"".join(blobs)

    def read_block(self, path: str, start: int, size: int) -> bytes:
        handle = self._file(path)  # held while its descriptor is in use (a close() meanwhile
        return os.pread(handle.fd, size, start)  # would close it, and another file reuse it)

    def read_into(self, path: str, start: int, buffer: memoryview) -> int:
        handle = self._file(path)  # held while its descriptor is in use
        return os.preadv(handle.fd, [buffer], start)

    def read_all(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def write_atomic(self, path: str, parts: list[bytes | memoryview]) -> None:
        try:
            write_local_atomic(path, parts)
        except OSError as exc:  # a read-only directory or a full disk: say so, and what next
            refused = not_writable(path, exc) or no_space(
                path, exc, "nothing was changed: free some space, or keep the indexes "
                f"elsewhere with {hint('index_dir=', '--index-dir')}")
            if refused is None:
                raise
            raise refused from exc
        self.forget(path)  # the file at path is another one now

    def open_write(self, path: str) -> IO[bytes]:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return open(path, "wb")

    def create_new(self, path: str, data: bytes) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def expand(self, pattern: str) -> list[str]:
        if os.path.isdir(pattern):
            return [
                os.path.join(pattern, name)
                for name in os.listdir(pattern)
                if os.path.isfile(os.path.join(pattern, name))
            ]
        if os.path.lexists(pattern) or not has_magic(pattern):  # a path that exists is a path
            return [pattern] if os.path.isfile(pattern) else []
        head = next((h for h in literal_heads(pattern, os.sep) if os.path.isdir(h)), None)
        found = _glob.glob(pattern if head is None else with_literal_head(pattern, head))
        return [p for p in found if os.path.isfile(p)]

    def find(self, directory: str) -> list[str]:
        return [os.path.join(top, name) for top, _, names in os.walk(directory)
                for name in names]

    def join(self, directory: str, name: str) -> str:
        return os.path.join(directory, name)

    def basename(self, path: str) -> str:
        return os.path.basename(path)

    def dirname(self, path: str) -> str:
        return os.path.dirname(path)


def _same_file(handle: _Handle, st: os.stat_result) -> bool:
    """Whether ``handle`` is open on the file ``st`` describes (not one since replaced)."""
    held = os.fstat(handle.fd)
    return (held.st_dev, held.st_ino) == (st.st_dev, st.st_ino)


def _check_extent(handle: _Handle, path: str, start: int, end: int) -> None:
    """Check ``[start, end)`` against the file's current size (a file may grow, so a read
    past the size seen at open looks again) before anything is allocated for it.

    Raises:
        RangeReadError: The range is inverted or ends past the file.
    """
    handle.size = os.fstat(handle.fd).st_size
    check_range(path, start, end, handle.size)


def stat_stamp(st: os.stat_result) -> FileStamp:
    """The stamp of a local file from its ``stat``: size, ``mtime_ns`` and device:inode."""
    return FileStamp(st.st_size, f"mtime_ns:{st.st_mtime_ns}", f"{st.st_dev}:{st.st_ino}")


def _create_temporary(path: str) -> tuple[int, str]:
    """A new file beside ``path`` under a unique temporary name, open for writing, with the
    mode ``open(path, "w")`` gives (0666 less the umask, which the kernel applies: reading
    the umask from /proc, as before, took 0.13 ms a file, most of writing a small sidecar).

    Returns:
        The descriptor and the temporary path.

    Raises:
        OSError: The directory is not writable.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(
        os, "O_BINARY", 0)
    while True:
        tmp = f"{path}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # 2**48 names: another writer's, by a one-in-trillions chance
            continue


def write_local_atomic(path: str, parts: list[bytes | memoryview], *,
                       durable: bool = True, owned: bool = False) -> None:
    """Write ``parts`` to ``path`` through a temporary file in the same directory and a rename.

    Readers see the old file or the new one, never a partial one. The file gets the mode
    ``open(path, "w")`` would give it (0666 minus the umask), not ``mkstemp``'s 0600. A
    destination that is not a file to replace (a device, a FIFO, ``/dev/stdout`` or a link to
    one: :mod:`.special`) is written in place instead, never renamed over.

    Args:
        path: Destination file; its directory is created when missing.
        parts: Byte strings written one after another.
        durable: Flush the file to the disk before the rename (``fsync``), so that it
            survives a power loss whole. A cache whose entries carry their own checks skips
            it: a process killed at any point still leaves the old file or the new one.
        owned: ``path`` is ofindex's own (an entry of a cache directory): whatever is there
            is replaced, a FIFO or device planted there included (written in place, a FIFO
            would block the reader until someone reads it).

    Raises:
        OSError: The directory is not writable, the disk is full, …; the temporary file is
            removed and ``path`` is untouched.
        StorageError: A special destination refused the bytes (``/dev/full``).
    """
    if not owned and is_special(path):
        write_in_place(path, parts)
        return
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = _create_temporary(os.path.join(directory, os.path.basename(path)))
    try:
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(part)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


#: A write refused for want of space: a full disk, or the user's quota.
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT}


def no_space(what: str, exc: BaseException, then: str) -> OfindexError | None:
    """The error for a write refused for want of space (``ENOSPC``, ``EDQUOT``), or ``None``
    for other failures. It is an ``OSError`` whose ``errno`` is the cause's.

    Args:
        what: The file written (URL or path), for the message.
        exc: The failure.
        then: What was kept and what to do next, for the message.

    Returns:
        The error to raise (``from exc``), or ``None``.
    """
    seen: BaseException | None = exc
    for _ in range(8):  # the failure and what it was raised from
        if seen is None:
            return None
        code = getattr(seen, "errno", None)
        if code in _NO_SPACE:
            error = StorageError(f"{what}: no space left on its disk ({os.strerror(code)}); "
                                 f"{then}")
            error.errno = code  # (a filename would make str() "[Errno 28] None: 'path'")
            return error
        seen = seen.__cause__ or seen.__context__
    return None
