"""The one narrow byte-access interface every storage backend implements."""

from __future__ import annotations

import abc
import dataclasses
import mmap
import weakref
from collections.abc import Callable, Sequence
from typing import IO, Any, Protocol, TypeVar

from ..errors import RangeReadError
from .stamp import ExpectedFiles, FileStamp, read_digest


class Closable(Protocol):
    """What :meth:`Storage.close_together` closes with a storage."""

    def close(self) -> None: ...


class FileHandle(Protocol):
    """An open, read-only descriptor of a local file (open while the handle lives)."""

    fd: int

    def covers(self, end: int) -> bool:
        """Whether the file holds bytes up to ``end`` (its size looked at again when the
        last look says it does not)."""
        ...


class Storage(abc.ABC):
    """Byte access to the files of one filesystem (local disk, a bucket, a web server).

    Instances are picklable and hold no open handle across pickling or ``fork``: handles and
    clients are created lazily in the process that uses them.
    """

    #: The files are on this machine's file system: a read costs a system call, not a round
    #: trip (reading only record headers and seeking past payloads is cheap).
    is_local: bool = False
    #: :meth:`mapped` hands out whole files as buffers (memory maps).
    can_mmap: bool = False
    #: Gap (bytes) between two wanted ranges below which one read covers both: about
    #: bandwidth x latency. Remote object stores: 1 MiB.
    default_max_gap: int = 1 << 20
    #: Every read reports the file's stamp (over HTTP: each response's ``ETag`` and size) and
    #: is checked against the stamp expected: a data file's check against its index can then
    #: ride on its first read (:meth:`expect_indexed`) instead of costing a request first.
    checks_stamp_on_read: bool = False

    def close(self) -> None:
        """Let go of this process's handles, maps and clients (reopened on next use), and
        those of every storage joined over this one's files (:meth:`close_together`)."""
        for follower in list(self.__dict__.get("_followers", ())):
            follower.close()

    def forget(self, path: str) -> None:
        """Let go of what this process holds of ``path`` sized as it was (a local file's map),
        after the file grew: the next read sees it whole.

        Args:
            path: A file.
        """
        return  # only local storage holds anything sized (its maps)

    def close_together(self, other: Closable) -> None:
        """Close ``other`` whenever this storage is closed.

        A storage joined over several storages' files (:mod:`.union`, what a mixture of
        datasets reads through) lets go of its handles when any of its sources' datasets
        is closed; so does what holds this storage's maps or handles (a dataset's compiled
        reader). Held weakly, and not pickled: in another process each is on its own.

        Args:
            other: The storage (or anything with a ``close()``) to close with this one.
        """
        followers = self.__dict__.setdefault("_followers", weakref.WeakSet())
        followers.add(other)

    #: The stamps data files were checked against (see :meth:`expect`).
    expected: ExpectedFiles

    def expect(self, path: str, stamp: FileStamp) -> None:
        """Remember that ``path`` must be the file ``stamp`` describes (its index was checked
        against it): every later opening of the file in any process (first read, after
        ``fork``, after :meth:`close`) checks that it still is.

        Args:
            path: A data file.
            stamp: Its stamp as just read with :meth:`stamp` (with a file identity where the
                storage has one).

        Raises:
            StaleIndexError: ``path`` is already expected to be another file.
        """
        self.expected.expect(path, stamp, self.url(path))

    def expect_indexed(self, path: str, indexed: FileStamp, index_url: str) -> None:
        """Check ``path`` against the stamp its index gives on its first read (only where
        :attr:`checks_stamp_on_read`): that read, or :meth:`stamp`, reports the file's stamp
        and raises :class:`StaleIndexError` before any byte of another file is handed out;
        from then on it is expected as after :meth:`expect`.

        Args:
            path: A data file not read yet.
            indexed: The stamp its index (checked against the manifest) gives.
            index_url: The index, as messages name it.

        Raises:
            TypeError: This storage's reads do not report stamps (stat the file instead).
        """
        if not self.checks_stamp_on_read:
            raise TypeError(f"{type(self).__name__} reads report no stamp: check "
                            f"{self.url(path)} with stamp() instead")
        self.expected.expect_indexed(path, indexed, index_url)

    def preferred_gap(self, path: str) -> int:
        """The gap to read through between two wanted ranges of ``path`` for a batch, as it
        stands now (:attr:`default_max_gap` unless the storage reads far-apart ranges more
        cheaply: a web server answering multi-range requests, or not known yet)."""
        return self.default_max_gap

    def multirange(self, path: str) -> bool:
        """Whether many ranges of ``path`` go out in one request (an HTTP server known to
        answer ``multipart/byteranges``; see :mod:`ofindex.transport.store`)."""
        return False

    @abc.abstractmethod
    def stamp(self, path: str) -> FileStamp:
        """Size and fingerprint of ``path``; :class:`DataFileNotFoundError` if it is missing."""

    @abc.abstractmethod
    def read(self, path: str, start: int, end: int) -> bytes:
        """Exactly the bytes ``[start, end)`` of ``path``."""

    def read_ranges(
        self, paths: Sequence[str], starts: Sequence[int], ends: Sequence[int]
    ) -> list[bytes]:
        """Exactly the bytes ``[starts[k], ends[k])`` of ``paths[k]`` for each k (may run
        concurrently)."""
        return [self.read(p, s, e) for p, s, e in zip(paths, starts, ends, strict=True)]

    def read_ranges_each(
        self, paths: Sequence[str], starts: Sequence[int], ends: Sequence[int],
        each: Callable[[int, bytes | memoryview], None],
    ) -> None:
        """Call ``each(k, data)`` with the bytes of range ``k`` of :meth:`read_ranges` (a
        bytes-like object) as it arrives, so that the caller can work on it while the others
        are in flight (remote storages call it in completion order from their event loop: it
        must return quickly, e.g. by handing the work to a thread)."""
        for k, data in enumerate(self.read_ranges(paths, starts, ends)):
            each(k, data)

    def read_ranges_concat(
        self, paths: Sequence[str], starts: Sequence[int], ends: Sequence[int]
    ) -> bytes | bytearray:
        """The ranges of :meth:`read_ranges`, concatenated in order into one buffer."""
        out = bytearray(sum(e - s for s, e in zip(starts, ends, strict=True)))
        pos = 0
        for blob in self.read_ranges(paths, starts, ends):
            out[pos : pos + len(blob)] = blob
            pos += len(blob)
        return out

    def fetch_many(
        self, read_paths: Sequence[str], stat_paths: Sequence[str] = ()
    ) -> tuple[list[bytes | BaseException], list[FileStamp | BaseException]]:
        """Whole contents of ``read_paths`` and stamps of ``stat_paths`` (remote storages run
        all the requests at once). Each result is the value or the exception raised for it."""
        return ([capture(self.read_all, p) for p in read_paths],
                [capture(self.stamp, p) for p in stat_paths])

    def fetch_round(
        self, ranges: Sequence[tuple[str, int, int]], read_paths: Sequence[str] = (),
        stat_paths: Sequence[str] = (), identify: Sequence[tuple[str, int]] = (),
    ) -> tuple[list[bytes | BaseException], list[bytes | BaseException],
               list[FileStamp | BaseException], list[FileStamp | BaseException]]:
        """One round of independent requests: byte ranges ``(path, start, end)``, whole
        files, stamps, and stamps with content digests (``(path, size expected)``: see
        :meth:`identify`); remote storages run them all at once. Each result is the value or
        the exception raised for it (a short or long range is a :class:`RangeReadError`)."""
        got = [capture(self.read, p, s, e) for p, s, e in ranges]
        raws, stamps = self.fetch_many(read_paths, stat_paths)
        return got, raws, stamps, [capture(self.identify, p, size) for p, size in identify]

    def identify(self, path: str, size: int) -> FileStamp:
        """The stamp of ``path`` with its content digest (:mod:`.identity`), read as if the
        file had ``size`` bytes (the size its index gives: a file of another size is another
        file, whatever its content).

        Args:
            path: The file.
            size: The size expected.

        Returns:
            Its stamp; its ``content`` is the digest when the file has ``size`` bytes, else
            ``None``.
        """
        stamp = self.stamp(path)
        if stamp.size != size:
            return stamp
        return dataclasses.replace(stamp, content=read_digest(self.read_ranges, path, size))

    def mapped(self, path: str, end: int) -> mmap.mmap | None:
        """A buffer of the whole file when bytes ``[0, end)`` can be served from a memory
        map, else ``None``."""
        return None

    def open_limit(self) -> int:
        """How many data files this storage keeps open at most (handles or maps; the oldest
        is let go of beyond it; local storages: the process-wide bound of
        :mod:`ofindex.storage.openfiles`): what holds them for it keeps no more."""
        return 256

    def handle(self, path: str) -> FileHandle | None:
        """An open descriptor of ``path`` for compiled reads (``pread``), checked to be the
        file the dataset expects when it was opened; ``None`` when this storage does not
        read local files through descriptors."""
        return None

    def read_block(self, path: str, start: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``start``; fewer only at the end of the file (for scans)."""
        end = min(start + size, self.stamp(path).size)
        return self.read(path, start, end) if end > start else b""

    def read_into(self, path: str, start: int, buffer: memoryview) -> int:
        """Fill ``buffer`` from ``start``; returns the byte count (short only at end of file)."""
        data = self.read_block(path, start, len(buffer))
        buffer[: len(data)] = data
        return len(data)

    @abc.abstractmethod
    def read_all(self, path: str) -> bytes:
        """The whole content of ``path`` (``FileNotFoundError`` when missing)."""

    @abc.abstractmethod
    def write_atomic(self, path: str, parts: list[bytes | memoryview]) -> None:
        """Create or replace ``path`` so that readers never see a partial file."""

    @abc.abstractmethod
    def open_write(self, path: str) -> IO[bytes]:
        """A binary file object that writes ``path``."""

    @abc.abstractmethod
    def create_new(self, path: str, data: bytes) -> None:
        """Create ``path`` holding ``data`` only if nothing is there (``O_EXCL`` locally, a
        conditional PUT on an object store).

        Raises:
            FileExistsError: ``path`` exists (another writer's claim).
        """

    @abc.abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst`` (an atomic ``os.replace`` locally; a server-side copy and
        delete on an object store)."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool: ...

    @abc.abstractmethod
    def is_dir(self, path: str) -> bool: ...

    @abc.abstractmethod
    def remove(self, path: str) -> None:
        """Delete ``path`` if it exists."""

    @abc.abstractmethod
    def expand(self, pattern: str) -> list[str]:
        """The data files a path, directory or glob names (unsorted, sidecars excluded later).

        A path that exists is that path, whatever its characters; only one that does not may
        be a glob (:mod:`.patterns`)."""

    def find(self, directory: str) -> list[str]:
        """Every file below ``directory``, in its subdirectories too (unsorted): what a
        TensorBoard log directory holds (:mod:`ofindex.events`).

        Args:
            directory: A directory.

        Returns:
            The files' paths on this storage.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot list directories below "
                                  f"{self.url(directory)}")

    @abc.abstractmethod
    def join(self, directory: str, name: str) -> str: ...

    @abc.abstractmethod
    def basename(self, path: str) -> str: ...

    def dirname(self, path: str) -> str:
        return path.rsplit("/", 1)[0] if "/" in path else ""

    def url(self, path: str) -> str:
        """A URL for ``path`` usable in messages and in :func:`ofindex.open`."""
        return path


T = TypeVar("T")


def capture(fn: Callable[..., T], *args: Any) -> T | BaseException:
    """``fn(*args)``, or the exception it raised (for rounds of independent requests whose
    failures are reported per request)."""
    try:
        return fn(*args)
    except Exception as exc:
        return exc


#: A read larger than this first checks that the file holds the range (one ``stat``), so
#: that no index, however corrupt, makes a read allocate more memory than the file has.
CHECKED_READ_BYTES = 64 << 20


def check_range(url: str, start: int, end: int, size: int) -> None:
    """Raise :class:`RangeReadError` unless ``0 <= start <= end <= size`` (before a big read).

    Args:
        url: The file, for the message.
        start: First byte wanted.
        end: One past the last byte wanted.
        size: The file's size now.
    """
    if not 0 <= start <= end <= size:
        raise RangeReadError(
            f"{url}: asked for bytes [{start}, {end}) but the file has {size} bytes; the index "
            "does not describe this file (rebuild it with `ofindex build`) — refusing to read"
        )


def check_length(url: str, start: int, end: int, got: int) -> None:
    """Raise :class:`RangeReadError` when a range read did not return ``end - start`` bytes."""
    if got != end - start:
        raise RangeReadError(
            f"{url}: asked for bytes [{start}, {end}) ({end - start} bytes) but the storage "
            f"returned {got} bytes; the server may ignore Range requests, or the file changed "
            "— refusing to return wrong data"
        )
