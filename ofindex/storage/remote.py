"""Any fsspec filesystem (``s3://``, ``gs://``, ``https://``, ``memory://`` …).

Reads go through the filesystem's ``_cat_file(path, start=, end=)`` coroutine (keyword
arguments only), many at once on fsspec's event loop with bounded concurrency and a bound on
bytes in flight — never a buffered ``open()`` whose readahead multiplies small random reads.
Every response is checked: exactly ``end - start`` bytes, and for HTTP a ``206`` whose
``Content-Range`` is the range asked for (a server that ignores ``Range`` answers ``200`` with
the whole file). Over HTTP the ranges of one file in a batch go out as a few multi-range
requests where the server answers them (:mod:`.multirange`). Transient failures are retried
with backoff within a deadline (:mod:`.retry`), a request of a batch far slower than its peers
is sent again (:mod:`.hedge`), and a write the server refuses says the location is read-only.

The filesystem is this process's one client of the protocol and options
(:func:`.clients.shared_filesystem`), taken on first use in each process: fsspec's async
filesystems hold an event loop and sessions that must not cross a ``fork``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import IO, Any, TypeVar

from ..errors import DataFileNotFoundError, RangeReadError
from . import multirange
from .aio import HTTP_PROTOCOLS, StampCheck, awaitable, http_range, run_now
from .base import CHECKED_READ_BYTES, Storage, check_length, check_range
from .clients import ORPHANS, shared_filesystem
from .content import content_digest, content_regions
from .failures import not_writable
from .gather import gather_ranges, gather_results
from .listing import list_files, list_matches
from .pacing import AdaptiveRate, pacer_for
from .patterns import has_magic
from .retry import RetryPolicy, current_policy, retry_async, retry_sync
from .stamp import ExpectedFiles, FileStamp, fingerprint_from_info

T = TypeVar("T")

#: The response headers that identify a file's version, as a stat reports them.
STAMP_HEADERS = ("ETag", "Last-Modified")


class FsspecStorage(Storage):
    """Byte access through an fsspec filesystem of one protocol.

    ``max_concurrency`` requests run at once; at most ``max_inflight_bytes`` of responses are
    held before being copied out (a range larger than that runs alone). ``retry`` says how a
    request is retried and hedged (default: the policy of :func:`.retry.retry_settings` in force
    when the storage is made). ``requests`` / ``bytes_read`` count this process's data reads,
    ``retries`` / ``hedged`` the requests sent again after a failure / for being slow.
    """

    is_local = False
    #: Read through gaps up to this size: with many requests in flight at once the link's
    #: bandwidth x RTT is shared between them, so a gap worth one round trip is smaller than
    #: for a lone request (measured at +20 ms RTT: 256 KiB beat 1 MiB and 64 KiB).
    default_max_gap = 256 << 10

    def __init__(
        self,
        protocol: str,
        storage_options: dict[str, Any] | None = None,
        *,
        max_concurrency: int = 64,
        max_inflight_bytes: int = 128 << 20,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.protocol = protocol
        self.storage_options = dict(storage_options or {})
        self.max_concurrency = max(1, int(max_concurrency))
        self.max_inflight_bytes = max(1, int(max_inflight_bytes))
        self.retry = retry or current_policy()
        self._fs = None
        self._pid = -1
        self._sizes: dict[str, int] = {}
        self._lock = threading.Lock()
        self.requests = self.bytes_read = self.retries = self.hedged = 0
        self.expected = ExpectedFiles()
        #: HTTP responses carry the file's ETag and size: each read checks them
        self.checks_stamp_on_read = protocol in HTTP_PROTOCOLS

    def __getstate__(self) -> dict[str, Any]:
        return {"protocol": self.protocol, "storage_options": self.storage_options,
                "max_concurrency": self.max_concurrency,
                "max_inflight_bytes": self.max_inflight_bytes, "retry": self.retry,
                "expected": self.expected}

    def __setstate__(self, state: dict[str, Any]) -> None:
        expected = state.pop("expected", None)
        FsspecStorage.__init__(self, state.pop("protocol"), state.pop("storage_options"), **state)
        if isinstance(expected, ExpectedFiles):
            self.expected = expected

    def __repr__(self) -> str:
        return f"FsspecStorage({self.protocol!r})"

    # -- the per-process filesystem ----------------------------------------------------------
    @property
    def fs(self) -> Any:
        """This process's fsspec filesystem of the protocol and options (taken on first use in
        each process; shared with the other storages of the same filesystem)."""
        fs = self._fs
        if fs is not None and self._pid == os.getpid():
            return fs
        with self._lock:
            if self._fs is not None and self._pid != os.getpid():
                ORPHANS.append(self._fs)  # the parent's: never finalize it here
                self._fs = None
            if self._fs is None:
                self._fs = shared_filesystem(self.protocol, self.storage_options,
                                             self.max_concurrency)
                self._pid = os.getpid()
                self.requests = self.bytes_read = self.retries = self.hedged = 0
            return self._fs

    def count_retry(self) -> None:
        """Count a request sent again after a transient failure."""
        self.retries += 1

    def count_hedge(self) -> None:
        """Count a request sent again for being far slower than its batch's others."""
        self.hedged += 1

    def pacer(self, path: str) -> AdaptiveRate:
        """This process's request rate to the bucket or host of ``path`` (:mod:`.pacing`):
        shared by every storage of the process, lowered when the store answers "slow down"."""
        return pacer_for(self.protocol, self.url(path))

    def url(self, path: str) -> str:
        if self.protocol in HTTP_PROTOCOLS or "://" in path:
            return path
        return f"{self.protocol}://{path}"

    def preferred_gap(self, path: str) -> int:
        # far-apart ranges share a multi-range request: read only through gaps worth a part.
        # A web server not tried yet is taken to answer them, as most do (nginx, Apache,
        # Caddy...): one that does not has the ranges it did not serve read again through
        # default_max_gap gaps (gather.gather_ranges), so a first batch costs what it did
        if self.protocol in HTTP_PROTOCOLS and multirange.SUPPORT.get(
                multirange.host_of(self.url(path))) is not False:
            return multirange.MULTI_RANGE_GAP
        return self.default_max_gap

    def multirange(self, path: str) -> bool:
        return self.protocol in HTTP_PROTOCOLS and bool(
            multirange.SUPPORT.get(multirange.host_of(self.url(path))))

    def _call(self, path: str, action: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """``await attempt()`` retried under the policy (naming ``action`` on ``path``), from
        synchronous code: on an asynchronous filesystem's loop, where the deadline cuts an
        attempt that hangs (its client's own timeout is minutes); a synchronous filesystem's
        attempt runs at once."""
        fs = self.fs
        what = f"{self.url(path)}: {action}"
        if getattr(fs, "async_impl", False):
            from fsspec.asyn import sync

            got: T = sync(fs.loop, retry_async, attempt, self.retry, what, self.count_retry,
                          self.pacer(path))
            return got
        return retry_sync(lambda: run_now(attempt()), self.retry, what, self.count_retry,
                          self.pacer(path))

    # -- metadata ---------------------------------------------------------------------------
    def stamp(self, path: str) -> FileStamp:
        fs = self.fs
        fs.invalidate_cache(path)  # the file now, not an earlier listing (see _round_async)
        try:
            info = self._call(path, "info", lambda: awaitable(fs, "info")(path))
        except FileNotFoundError:
            raise DataFileNotFoundError(f"{self.url(path)}: data file not found") from None
        stamp = self._stamp_of(path, info)
        if self.expected.owes(path):
            from fsspec.asyn import sync

            sync(fs.loop, self._observe, fs, path, stamp)
        return stamp

    async def _observe(self, fs: Any, path: str, stamp: FileStamp) -> None:
        """Check the stamp a stat or a response reported for ``path`` (see
        :meth:`ExpectedFiles.observe`): against its index the first time, reading its content
        regions when the stamps cannot tell.

        Raises:
            StaleIndexError: It is not the file its index (or the dataset) expects.
        """
        owed = self.expected.observe(path, stamp, self.url(path))
        if owed is not None:
            digest = await self._content_digest(fs, path, stamp.size)
            self.expected.observe_content(path, stamp, self.url(path), digest)

    async def _content_digest(self, fs: Any, path: str, size: int,
                              note: StampCheck | None = None) -> int:
        """The content digest of ``path`` (:mod:`.identity`): its regions in one gather,
        retried, their stamps not checked against the index (this is the check; ``note``, over
        HTTP, is given each response's headers)."""
        async def region(start: int, end: int) -> bytes:
            async def get() -> bytes:
                data: bytes = await (http_range(fs, path, start, end, note)
                                     if self.protocol in HTTP_PROTOCOLS
                                     else fs._cat_file(path, start=start, end=end))
                return self._counted(path, start, end, data)

            return await retry_async(get, self.retry, self.describe_range(path, start, end),
                                     self.count_retry, self.pacer(path))

        parts = await asyncio.gather(*(region(start, end)
                                       for start, end in content_regions(size)))
        return content_digest(size, parts)

    def _stamp_of(self, path: str, info: dict[str, Any]) -> FileStamp:
        size = int(info["size"]) if info.get("size") is not None else -1
        if size < 0:
            raise RangeReadError(f"{self.url(path)}: the server does not report the file size")
        self._sizes[path] = size
        return FileStamp(size, fingerprint_from_info(info))

    async def _stat_async(self, fs: Any, path: str) -> FileStamp:
        """The file's stamp now (one ``HEAD`` over HTTP), retried."""
        # a stamp checks that the file is still the one indexed: never from the listings
        # s3fs and gcsfs cache (a glob of an earlier open, in this shared filesystem)
        fs.invalidate_cache(path)
        info = await retry_async(lambda: fs._info(path), self.retry, f"{self.url(path)}: info",
                                 self.count_retry, self.pacer(path))
        stamp = self._stamp_of(path, info)
        if self.expected.owes(path):
            await self._observe(fs, path, stamp)
        return stamp

    def _read_check(self, fs: Any, path: str) -> StampCheck | None:
        """What checks the stamp a response reports for ``path`` (its ``ETag`` and the size
        its ``Content-Range`` gives, as a stat reports them), or ``None`` when there is
        nothing to check it against."""
        if not self.checks_stamp_on_read or not self.expected.watches(path):
            return None

        async def check(headers: Mapping[str, str], size: int | None) -> None:
            if size is None:  # the answer does not say: ask (a HEAD)
                stamp = await self._stat_async(fs, path)
            else:
                info: dict[str, Any] = {"size": size}
                for key in STAMP_HEADERS:
                    if headers.get(key):
                        info[key] = headers[key]
                stamp = self._stamp_of(path, info)
            await self._observe(fs, path, stamp)

        return check

    def _size(self, path: str) -> int:
        size = self._sizes.get(path)
        return self.stamp(path).size if size is None else size

    # -- reads ------------------------------------------------------------------------------
    def read(self, path: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        return self.read_ranges([path], [start], [end])[0]

    def read_ranges(
        self, paths: Sequence[str], starts: Sequence[int], ends: Sequence[int]
    ) -> list[bytes]:
        out: list[bytes] = [b""] * len(paths)

        def sink(k: int, data: bytes | memoryview) -> None:
            out[k] = data if isinstance(data, bytes) else bytes(data)

        self._fetch_all(paths, starts, ends, sink)
        return out

    def read_ranges_each(
        self, paths: Sequence[str], starts: Sequence[int], ends: Sequence[int],
        each: Callable[[int, bytes | memoryview], None],
    ) -> None:
        self._fetch_all(paths, starts, ends, each)

    def read_ranges_concat(
        self, paths: Sequence[str], starts: Sequence[int], ends: Sequence[int]
    ) -> bytearray:
        pos = [0] * (len(starts) + 1)
        ordered = True
        for k, (s, e) in enumerate(zip(starts, ends, strict=True)):
            pos[k + 1] = pos[k] + (int(e) - int(s))
            ordered = ordered and 0 <= s <= e
        if pos[-1] > CHECKED_READ_BYTES or not ordered:  # check the files before allocating
            for p, s, e in zip(paths, starts, ends, strict=True):
                check_range(self.url(p), int(s), int(e), self._size(p))
        out = bytearray(pos[-1])

        def sink(k: int, data: bytes | memoryview) -> None:
            out[pos[k] : pos[k + 1]] = data

        self._fetch_all(paths, starts, ends, sink)
        return out

    def read_block(self, path: str, start: int, size: int) -> bytes:
        end = min(start + size, self._size(path))
        return self.read(path, start, end) if end > start else b""

    def read_all(self, path: str) -> bytes:
        if self.expected.owes(path):  # a whole-file GET is not checked: stat it first
            self.stamp(path)

        fs = self.fs
        data: bytes = self._call(path, "whole file", lambda: awaitable(fs, "cat_file")(path))
        self.requests += 1
        self.bytes_read += len(data)
        return data

    def _fetch_all(self, paths: Sequence[str], starts: Sequence[int], ends: Sequence[int],
                   sink: Callable[[int, bytes | memoryview], None]) -> None:
        n = len(paths)
        if n == 0:
            return
        begin = [int(s) for s in starts]
        stop = [int(e) for e in ends]
        fs = self.fs
        if getattr(fs, "async_impl", False):
            from fsspec.asyn import sync

            sync(fs.loop, gather_ranges, self, fs, list(paths), begin, stop, sink)
            return
        for k in range(n):  # a synchronous filesystem (memory://, …): one at a time
            p, s, e = paths[k], begin[k], stop[k]
            if e <= s:
                sink(k, b"")
                continue

            def cat(p: str = p, s: int = s, e: int = e) -> bytes:
                return self._cat_sync(fs, p, s, e)

            sink(k, retry_sync(cat, self.retry, self.describe_range(p, s, e), self.count_retry,
                               self.pacer(p)))

    def fetch_many(
        self, read_paths: Sequence[str], stat_paths: Sequence[str] = ()
    ) -> tuple[list[bytes | BaseException], list[FileStamp | BaseException]]:
        """Whole contents of ``read_paths`` and stamps of ``stat_paths``, all requests at once
        (for sidecars and their data files on first touch). Each result is the value or the
        exception raised for that path."""
        if not getattr(self.fs, "async_impl", False):
            return super().fetch_many(read_paths, stat_paths)
        _, raws, stamps, _ = self.fetch_round((), read_paths, stat_paths)
        return raws, stamps

    def fetch_round(
        self, ranges: Sequence[tuple[str, int, int]], read_paths: Sequence[str] = (),
        stat_paths: Sequence[str] = (), identify: Sequence[tuple[str, int]] = (),
    ) -> tuple[list[bytes | BaseException], list[bytes | BaseException],
               list[FileStamp | BaseException], list[FileStamp | BaseException]]:
        """Ranges, whole files, stamps and stamps with content digests in one concurrent
        round (see :meth:`Storage.fetch_round`)."""
        fs = self.fs
        if not getattr(fs, "async_impl", False):
            return super().fetch_round(ranges, read_paths, stat_paths, identify)
        from fsspec.asyn import sync

        got: tuple[list[bytes | BaseException], list[bytes | BaseException],
                   list[FileStamp | BaseException], list[FileStamp | BaseException]] = sync(
            fs.loop, self._round_async, fs, list(ranges), list(read_paths), list(stat_paths),
            list(identify))
        return got

    def identify(self, path: str, size: int) -> FileStamp:
        """The stamp of ``path`` with its content digest (see :meth:`Storage.identify`): over
        HTTP from the responses of the regions' GETs alone (no HEAD)."""
        fs = self.fs
        if not getattr(fs, "async_impl", False):
            return super().identify(path, size)
        from fsspec.asyn import sync

        stamp: FileStamp = sync(fs.loop, self._identify_async, fs, path, size)
        return stamp

    async def _identify_async(self, fs: Any, path: str, size: int) -> FileStamp:
        """:meth:`identify` on the event loop: the stamp and the content regions at once."""
        if self.protocol not in HTTP_PROTOCOLS:
            stat, regions = await asyncio.gather(self._stat_async(fs, path),
                                                 self._content_digest(fs, path, size),
                                                 return_exceptions=True)
            if isinstance(stat, BaseException):
                raise stat
            if stat.size != size:  # another file: its regions (maybe past its end) say nothing
                return stat
            if isinstance(regions, BaseException):
                raise regions
            return dataclasses.replace(stat, content=regions)
        seen: list[FileStamp] = []

        async def note(headers: Mapping[str, str], reported: int | None) -> None:
            info: dict[str, Any] = {"size": reported}
            info.update({key: headers[key] for key in STAMP_HEADERS if headers.get(key)})
            seen.append(self._stamp_of(path, info) if reported is not None
                        else FileStamp(-1))

        digest: int | None
        try:
            digest = await self._content_digest_http(fs, path, size, note, seen)
        except (RangeReadError, FileNotFoundError):
            digest = None  # shorter than the index says (416), or gone: the stat says which
        if not seen or len(set(seen)) != 1 or seen[0].size < 0:
            return await self._stat_async(fs, path)  # answers that disagree: look again
        if seen[0].size != size or digest is None:
            return seen[0]  # another size: another file, whatever its content
        return dataclasses.replace(seen[0], content=digest)

    async def _content_digest_http(self, fs: Any, path: str, size: int, note: StampCheck,
                                   seen: list[FileStamp]) -> int:
        """The content digest of ``path`` over HTTP: its regions in one multi-range request
        where the server answers them (one request per file), else one GET each; ``note`` is
        given the headers of every response."""
        regions = content_regions(size)
        if len(regions) > 1 and multirange.SUPPORT.get(multirange.host_of(self.url(path))) \
                is not False:
            parts: list[bytes] = [b""] * len(regions)
            delivered: set[int] = set()

            def keep(j: int, data: memoryview) -> None:
                parts[j] = bytes(data)
                delivered.add(j)

            got = await retry_async(lambda: multirange.fetch_spans(fs, path, regions, keep, note),
                                    self.retry, f"{self.url(path)}: content regions",
                                    self.count_retry, self.pacer(path))
            answered = got is not None and len(delivered) == len(regions)
            multirange.SUPPORT[multirange.host_of(self.url(path))] = answered
            if answered:
                self.requests += 1
                self.bytes_read += got or 0
                return content_digest(size, parts)
            seen.clear()  # fewer parts than asked: one GET each, their answers noted afresh
        return await self._content_digest(fs, path, size, note)

    async def _round_async(
        self, fs: Any, ranges: list[tuple[str, int, int]], read_paths: list[str],
        stat_paths: list[str], identify: list[tuple[str, int]],
    ) -> tuple[list[bytes | BaseException], list[bytes | BaseException],
               list[FileStamp | BaseException], list[FileStamp | BaseException]]:
        sem = asyncio.Semaphore(self.max_concurrency)

        async def whole(path: str) -> bytes:
            async with sem:
                data: bytes = await retry_async(lambda: fs._cat_file(path), self.retry,
                                                f"{self.url(path)}: whole file",
                                                self.count_retry, self.pacer(path))
            self.requests += 1
            self.bytes_read += len(data)
            return data

        async def stat(path: str) -> FileStamp:
            async with sem:
                return await self._stat_async(fs, path)

        async def ident(path: str, size: int) -> FileStamp:
            async with sem:
                return await self._identify_async(fs, path, size)

        parts = gather_results(self, fs, ranges)
        raws = asyncio.gather(*(whole(p) for p in read_paths), return_exceptions=True)
        stamps = asyncio.gather(*(stat(p) for p in stat_paths), return_exceptions=True)
        idents = asyncio.gather(*(ident(p, size) for p, size in identify),
                                return_exceptions=True)
        got_parts, got_raws, got_stamps, got_idents = await asyncio.gather(parts, raws, stamps,
                                                                           idents)
        for got, paths in ((got_stamps, stat_paths), (got_idents, [p for p, _ in identify])):
            for k, p in enumerate(paths):
                if isinstance(got[k], FileNotFoundError):
                    got[k] = DataFileNotFoundError(f"{self.url(p)}: data file not found")
        return list(got_parts), list(got_raws), list(got_stamps), list(got_idents)

    def describe_range(self, path: str, start: int, end: int) -> str:
        """A range as messages name it."""
        return f"{self.url(path)}: bytes [{start}, {end})"

    def _counted(self, path: str, start: int, end: int, data: bytes) -> bytes:
        """Count one response and check it holds exactly the bytes asked for."""
        self.requests += 1
        self.bytes_read += len(data)
        check_length(self.url(path), start, end, len(data))
        return data

    def _cat_sync(self, fs: Any, path: str, start: int, end: int) -> bytes:
        try:
            data: bytes = fs.cat_file(path, start=start, end=end)
        except FileNotFoundError:
            raise DataFileNotFoundError(f"{self.url(path)}: data file not found") from None
        return self._counted(path, start, end, data)

    async def fetch_file_ranges(self, fs: Any, path: str, spans: list[tuple[int, int]],
                                deliver: Callable[[int, memoryview], None]) -> int | None:
        """Ranges of one file in one multi-range request (HTTP), each handed to
        ``deliver(j, data)`` as it arrives; returns the bytes moved (see
        :func:`.multirange.fetch_spans`)."""
        try:
            got = await multirange.fetch_spans(fs, path, spans, deliver,
                                               self._read_check(fs, path))
        except FileNotFoundError:
            raise DataFileNotFoundError(f"{self.url(path)}: data file not found") from None
        self.requests += 1
        self.bytes_read += got or 0
        return got

    async def fetch_range(self, fs: Any, path: str, start: int, end: int) -> bytes:
        """Exactly the bytes ``[start, end)`` of ``path`` in one request (checked, counted)."""
        coro: Awaitable[bytes]
        if self.protocol in HTTP_PROTOCOLS:
            coro = http_range(fs, path, start, end, self._read_check(fs, path))
        else:
            coro = fs._cat_file(path, start=start, end=end)
        try:
            data = await coro
        except FileNotFoundError:
            raise DataFileNotFoundError(f"{self.url(path)}: data file not found") from None
        return self._counted(path, start, end, data)

    # -- writes and listing -----------------------------------------------------------------
    def write_atomic(self, path: str, parts: list[bytes | memoryview]) -> None:
        # One object PUT is atomic on object stores: readers see the old object or the new one.
        data = b"".join(bytes(p) for p in parts)
        fs = self.fs
        try:
            self._call(path, "write", lambda: awaitable(fs, "pipe_file")(path, data))
        except Exception as exc:  # a read-only web server or bucket: say so, and what to do
            refused = not_writable(self.url(path), exc)
            if refused is None:
                raise
            raise refused from exc

    def open_write(self, path: str) -> IO[bytes]:
        f: IO[bytes] = self.fs.open(path, "wb")
        return f

    def exists(self, path: str) -> bool:
        if self.protocol in HTTP_PROTOCOLS:  # fsspec's HTTP exists() says False on a 503
            try:
                self.stamp(path)
            except FileNotFoundError:
                return False
            return True
        fs = self.fs
        return bool(self._call(path, "exists", lambda: awaitable(fs, "exists")(path)))

    def is_dir(self, path: str) -> bool:
        fs = self.fs
        return bool(self._call(path, "isdir", lambda: awaitable(fs, "isdir")(path)))

    def remove(self, path: str) -> None:
        fs = self.fs
        with contextlib.suppress(FileNotFoundError):
            self._call(path, "delete", lambda: awaitable(fs, "rm_file")(path))
        self._sizes.pop(path, None)

    def expand(self, pattern: str) -> list[str]:
        fs = self.fs
        if self.protocol in HTTP_PROTOCOLS and not pattern.endswith("/"):
            # listing a web page downloads it: a URL without a trailing slash is a file, if it
            # exists (whatever its characters); a glob only if it does not
            if self.exists(pattern):
                return [pattern]
            if not has_magic(pattern):
                return []
            return self._call(pattern, "listing", lambda: list_matches(fs, pattern))
        return self._call(pattern, "listing", lambda: list_files(fs, pattern))

    def find(self, directory: str) -> list[str]:
        fs = self.fs
        fs.invalidate_cache(directory)  # the directory now, not an earlier listing
        found = self._call(directory, "listing",
                           lambda: awaitable(fs, "find")(directory.rstrip("/") + "/"))
        return [str(path) for path in found]

    def join(self, directory: str, name: str) -> str:
        return directory.rstrip("/") + "/" + name

    def basename(self, path: str) -> str:
        return path.rstrip("/").rsplit("/", 1)[-1]
