"""Any fsspec filesystem (``s3://``, ``gs://``, ``https://``, ``memory://`` …) as a
:class:`Storage`: what the bytes are (stamps, the data files' identity, content digests) on top
of the requests of :mod:`ofindex.transport` (:class:`~ofindex.transport.store.StoreClient`:
retried, paced, hedged, checked and counted; many at once on fsspec's event loop).

Every response is checked: exactly ``end - start`` bytes, and over HTTP a ``206`` whose
``Content-Range`` is the range asked for and whose ``ETag`` and size are those of the file
expected (a data file's check against its index rides on its first read). A write the server
refuses says the location is read-only.

The clients are this process's (:mod:`ofindex.transport.clients`), taken on first use in each
process: fsspec's async filesystems hold an event loop and sessions that must not cross a
``fork``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import IO, Any, TypeVar

from ..errors import DataFileNotFoundError, RangeReadError
from ..transport.failures import not_writable
from ..transport.http import StampCheck
from ..transport.policy import RequestPolicy, current_policy
from ..transport.store import MULTI_RANGE_GAP, StoreClient
from .base import CHECKED_READ_BYTES, Storage, check_range
from .listing import list_files, list_matches
from .patterns import has_magic
from .stamp import ExpectedFiles, FileStamp, content_digest, content_regions, fingerprint_from_info

T = TypeVar("T")

#: The response headers that identify a file's version, as a stat reports them.
STAMP_HEADERS = ("ETag", "Last-Modified")
#: The results of :meth:`Storage.fetch_round`.
Round = tuple[list[bytes | BaseException], list[bytes | BaseException],
              list[FileStamp | BaseException], list[FileStamp | BaseException]]


class FsspecStorage(Storage):
    """Byte access through an fsspec filesystem of one protocol.

    ``max_concurrency`` requests run at once; at most ``max_inflight_bytes`` of responses are
    held before being copied out (a range larger than that runs alone). ``policy`` says how a
    request is retried, bounded, paced and hedged (default: the policy of
    :func:`ofindex.transport.policy.retry_settings` in force when the storage is made).
    ``requests`` / ``bytes_read`` count this process's data reads, ``retries`` / ``hedged``
    the requests sent again after a failure / for being slow.
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
        policy: RequestPolicy | None = None,
    ) -> None:
        self.protocol = protocol
        self.storage_options = dict(storage_options or {})
        self.max_concurrency = max(1, int(max_concurrency))
        self.max_inflight_bytes = max(1, int(max_inflight_bytes))
        self.requests = self.bytes_read = self.retries = self.hedged = 0
        self.client = StoreClient(protocol, self.storage_options, policy or current_policy(),
                                  max_concurrency=self.max_concurrency,
                                  max_inflight_bytes=self.max_inflight_bytes,
                                  merge_gap=self.default_max_gap, counts=self)
        self._sizes: dict[str, int] = {}
        self.expected = ExpectedFiles()
        #: path -> what the last response whose stamp was judged for it said (the file's
        #: size, ETag and Last-Modified: all a response's stamp is made of), and the
        #: ``growing`` it was judged under: a response that says the same is that version
        #: again, judged once (a batch's responses compare a tuple, no stamp is made); forgotten
        #: when what the path must be changes (:meth:`expect`, :meth:`expect_indexed`)
        self._agreed: dict[str, tuple[tuple[int, str | None, str | None], bool]] = {}
        #: HTTP responses carry the file's ETag and size: each read checks them
        self.checks_stamp_on_read = self.client.http

    @property
    def policy(self) -> RequestPolicy:
        """How this storage's requests are retried, bounded, paced and hedged."""
        return self.client.policy

    def __getstate__(self) -> dict[str, Any]:
        return {"protocol": self.protocol, "storage_options": self.storage_options,
                "max_concurrency": self.max_concurrency,
                "max_inflight_bytes": self.max_inflight_bytes, "policy": self.policy,
                "expected": self.expected}

    def __setstate__(self, state: dict[str, Any]) -> None:
        expected = state.pop("expected", None)
        FsspecStorage.__init__(self, state.pop("protocol"), state.pop("storage_options"), **state)
        if isinstance(expected, ExpectedFiles):
            self.expected = expected

    def __repr__(self) -> str:
        return f"FsspecStorage({self.protocol!r})"

    def url(self, path: str) -> str:
        return self.client.url(path)

    def preferred_gap(self, path: str) -> int:
        # far-apart ranges share a multi-range request: read only through gaps worth a part.
        # A web server not tried yet is taken to answer them, as most do (nginx, Apache,
        # Caddy...): one that does not has the ranges it did not serve read again through
        # default_max_gap gaps, so a first batch costs what it did
        if self.client.http and self.client.multirange(path) is not False:
            return MULTI_RANGE_GAP
        return self.default_max_gap

    def multirange(self, path: str) -> bool:
        return bool(self.client.multirange(path))

    def _requested(self, path: str, action: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """``await attempt()`` under the policy (naming ``action`` on ``path``), from
        synchronous code."""
        client = self.client
        return client.run(client.request(path, f"{self.url(path)}: {action}", attempt))

    # -- metadata ---------------------------------------------------------------------------
    def stamp(self, path: str) -> FileStamp:
        return self.client.run(self._stat(path))

    async def _stat(self, path: str) -> FileStamp:
        """The file's stamp now (one ``HEAD`` over HTTP), retried, and checked where it is
        expected."""
        # a stamp checks that the file is still the one indexed: never from the listings
        # s3fs and gcsfs cache (a glob of an earlier open, in this shared filesystem)
        self.client.fs.invalidate_cache(path)
        try:
            info = await self.client.call(path, "info", "info")
        except FileNotFoundError:
            raise DataFileNotFoundError(f"{self.url(path)}: data file not found") from None
        stamp = self._stamp_of(path, info)
        if self.expected.owes(path):
            await self._observe(path, stamp)
        return stamp

    async def _observe(self, path: str, stamp: FileStamp) -> None:
        """Check the stamp a stat or a response reported for ``path`` (see
        :meth:`ExpectedFiles.observe`): against its index the first time, reading its content
        regions when the stamps cannot tell.

        Raises:
            StaleIndexError: It is not the file its index (or the dataset) expects.
        """
        owed = self.expected.observe(path, stamp, self.url(path))
        if owed is not None:
            digest = await self._content_digest(path, stamp.size)
            self.expected.observe_content(path, stamp, self.url(path), digest)

    async def _content_digest(self, path: str, size: int, note: StampCheck | None = None) -> int:
        """The content digest of ``path`` (:mod:`.identity`): its regions in one gather,
        retried, their stamps not checked against the index (this is the check; ``note``, over
        HTTP, is given each response's headers)."""
        parts = await asyncio.gather(*(self.client.read_range(path, start, end, note)
                                       for start, end in content_regions(size)))
        return content_digest(size, parts)

    def _stamp_of(self, path: str, info: Mapping[str, Any]) -> FileStamp:
        size = int(info["size"]) if info.get("size") is not None else -1
        if size < 0:
            raise RangeReadError(f"{self.url(path)}: the server does not report the file size")
        self._sizes[path] = size
        return FileStamp(size, fingerprint_from_info(dict(info)))

    def _check_of(self, path: str) -> StampCheck | None:
        """What checks the stamp a response reports for ``path`` (its ``ETag`` and the size
        its ``Content-Range`` gives, as a stat reports them), or ``None`` when there is
        nothing to check it against."""
        if not self.checks_stamp_on_read:
            return None
        if path not in self._agreed and not self.expected.watches(path):
            return None

        async def check(headers: Mapping[str, str], size: int | None) -> None:
            expected = self.expected
            if size is None:  # the answer does not say: ask (a HEAD)
                await self._observe(path, await self._stat(path))
                return
            said = (size, headers.get(STAMP_HEADERS[0]), headers.get(STAMP_HEADERS[1]))
            if self._agreed.get(path) == (said, expected.growing):
                return  # the version judged already
            await self._observe(path, self._stamp_of(path, self._info_of(headers, size)))
            if not expected.owes(path):
                self._agreed[path] = (said, expected.growing)

        return check

    def expect(self, path: str, stamp: FileStamp) -> None:
        self._agreed.pop(path, None)
        super().expect(path, stamp)

    def expect_indexed(self, path: str, indexed: FileStamp, index_url: str) -> None:
        self._agreed.pop(path, None)
        super().expect_indexed(path, indexed, index_url)

    @staticmethod
    def _info_of(headers: Mapping[str, str], size: int | None) -> dict[str, Any]:
        """What a stat would report, from a response's headers and the size it gives."""
        info: dict[str, Any] = {"size": size}
        info.update({key: headers[key] for key in STAMP_HEADERS if headers.get(key)})
        return info

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
        return self.client.run(self.client.read_file(path))

    def _fetch_all(self, paths: Sequence[str], starts: Sequence[int], ends: Sequence[int],
                   sink: Callable[[int, bytes | memoryview], None]) -> None:
        if len(paths) == 0:
            return
        self.client.run(self.client.read_ranges(list(paths), [int(s) for s in starts],
                                                [int(e) for e in ends], sink, self._check_of))

    def fetch_many(
        self, read_paths: Sequence[str], stat_paths: Sequence[str] = ()
    ) -> tuple[list[bytes | BaseException], list[FileStamp | BaseException]]:
        """Whole contents of ``read_paths`` and stamps of ``stat_paths``, all requests at once
        (for sidecars and their data files on first touch). Each result is the value or the
        exception raised for that path."""
        _, raws, stamps, _ = self.fetch_round((), read_paths, stat_paths)
        return raws, stamps

    def fetch_round(
        self, ranges: Sequence[tuple[str, int, int]], read_paths: Sequence[str] = (),
        stat_paths: Sequence[str] = (), identify: Sequence[tuple[str, int]] = (),
    ) -> Round:
        """Ranges, whole files, stamps and stamps with content digests in one concurrent
        round (see :meth:`Storage.fetch_round`)."""
        return self.client.run(self._round(list(ranges), list(read_paths), list(stat_paths),
                                           list(identify)))

    async def _round(self, ranges: list[tuple[str, int, int]], read_paths: list[str],
                     stat_paths: list[str], identify: list[tuple[str, int]]) -> Round:
        sem = asyncio.Semaphore(self.max_concurrency)

        async def bounded(coro: Awaitable[T]) -> T:
            async with sem:
                return await coro

        got_parts, got_raws, got_stamps, got_idents = await asyncio.gather(
            self.client.read_results(ranges, self._check_of),
            asyncio.gather(*(bounded(self.client.read_file(p)) for p in read_paths),
                           return_exceptions=True),
            asyncio.gather(*(bounded(self._stat(p)) for p in stat_paths),
                           return_exceptions=True),
            asyncio.gather(*(bounded(self._identify(p, size)) for p, size in identify),
                           return_exceptions=True))
        return list(got_parts), list(got_raws), list(got_stamps), list(got_idents)

    def identify(self, path: str, size: int) -> FileStamp:
        """The stamp of ``path`` with its content digest (see :meth:`Storage.identify`): over
        HTTP from the responses of the regions' GETs alone (no HEAD)."""
        return self.client.run(self._identify(path, size))

    async def _identify(self, path: str, size: int) -> FileStamp:
        """:meth:`identify` on the event loop: the stamp and the content regions at once."""
        if not self.client.http:
            stat, regions = await asyncio.gather(self._stat(path),
                                                 self._content_digest(path, size),
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
            seen.append(self._stamp_of(path, self._info_of(headers, reported))
                        if reported is not None else FileStamp(-1))

        digest: int | None
        try:
            digest = await self._content_digest_http(path, size, note, seen)
        except (RangeReadError, FileNotFoundError):
            digest = None  # shorter than the index says (416), or gone: the stat says which
        if not seen or len(set(seen)) != 1 or seen[0].size < 0:
            return await self._stat(path)  # answers that disagree: look again
        if seen[0].size != size or digest is None:
            return seen[0]  # another size: another file, whatever its content
        return dataclasses.replace(seen[0], content=digest)

    async def _content_digest_http(self, path: str, size: int, note: StampCheck,
                                   seen: list[FileStamp]) -> int:
        """The content digest of ``path`` over HTTP: its regions in one multi-range request
        where the server answers them (one request per file), else one GET each; ``note`` is
        given the headers of every response."""
        regions = content_regions(size)
        if len(regions) > 1 and self.client.multirange(path) is not False:
            parts: list[bytes] = [b""] * len(regions)
            delivered: set[int] = set()

            def keep(j: int, data: memoryview) -> None:
                parts[j] = bytes(data)
                delivered.add(j)

            got = await self.client.read_spans(path, regions, keep, note)
            answered = got is not None and len(delivered) == len(regions)
            self.client.remember_multirange(path, answered)
            if answered:
                return content_digest(size, parts)
            seen.clear()  # fewer parts than asked: one GET each, their answers noted afresh
        return await self._content_digest(path, size, note)

    # -- writes and listing -----------------------------------------------------------------
    def write_atomic(self, path: str, parts: list[bytes | memoryview]) -> None:
        # One object PUT is atomic on object stores: readers see the old object or the new one.
        data = b"".join(bytes(p) for p in parts)
        try:
            self.client.run(self.client.call(path, "write", "pipe_file", data))
        except Exception as exc:  # a read-only web server or bucket: say so, and what to do
            refused = not_writable(self.url(path), exc)
            if refused is None:
                raise
            raise refused from exc

    def open_write(self, path: str) -> IO[bytes]:
        f: IO[bytes] = self.client.fs.open(path, "wb")
        return f

    def create_new(self, path: str, data: bytes) -> None:
        try:
            self.client.run(self.client.call(path, "create", "pipe_file", data, mode="create"))
        except FileExistsError:
            if self.read_all(path) == data:  # our own attempt, whose answer was lost, retried
                return
            raise
        if self.read_all(path) != data:  # a store that ignored the precondition
            raise FileExistsError(path)

    def rename(self, src: str, dst: str) -> None:
        # what fsspec's mv does, in its documented async calls: a server-side copy, then delete
        self.client.run(self.client.call(src, "rename", "copy", dst))
        self.client.run(self.client.call(src, "rename", "rm"))

    def exists(self, path: str) -> bool:
        if self.client.http:  # fsspec's HTTP exists() says False on a 503
            try:
                self.stamp(path)
            except FileNotFoundError:
                return False
            return True
        return bool(self.client.run(self.client.call(path, "exists", "exists")))

    def is_dir(self, path: str) -> bool:
        return bool(self.client.run(self.client.call(path, "isdir", "isdir")))

    def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.client.run(self.client.call(path, "delete", "rm_file"))
        self._sizes.pop(path, None)

    def expand(self, pattern: str) -> list[str]:
        fs = self.client.fs
        if self.client.http and not pattern.endswith("/"):
            # listing a web page downloads it: a URL without a trailing slash is a file, if it
            # exists (whatever its characters); a glob only if it does not
            if self.exists(pattern):
                return [pattern]
            if not has_magic(pattern):
                return []
            return self._requested(pattern, "listing", lambda: list_matches(fs, pattern))
        return self._requested(pattern, "listing", lambda: list_files(fs, pattern))

    def find(self, directory: str) -> list[str]:
        client = self.client
        client.fs.invalidate_cache(directory)  # the directory now, not an earlier listing
        found = client.run(client.call(directory.rstrip("/") + "/", "listing", "find"))
        return [str(path) for path in found]

    def join(self, directory: str, name: str) -> str:
        return directory.rstrip("/") + "/" + name

    def basename(self, path: str) -> str:
        return path.rstrip("/").rsplit("/", 1)[-1]
