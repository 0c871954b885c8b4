"""HTTP ranged GETs: a small client of our own on aiohttp's public API, and the parser of
multi-range answers.

Why our own client: fsspec's HTTP filesystem answers ``cat_file(url, start=, end=)`` with the
body of whatever came back, and gives neither its status, its ``Content-Range`` nor its
``ETag``. Correctness needs all three on every response: a server that ignores ``Range``
answers ``200`` and the whole file, a cache may answer another range, and the ``ETag`` and the
size in ``Content-Range`` are what say that the file is still the version indexed (a read is
checked on arrival, before any byte is handed out). Its session is reachable only through
undocumented methods. So the ranged and multi-range GETs over ``http(s)://`` go through
:class:`HttpClient`: one :class:`aiohttp.ClientSession` per process and set of options, made
with the options fsspec's HTTP filesystem takes (``client_kwargs`` / ``get_client`` for the
session, ``encoded`` for URLs, every other option — ``headers``, ``auth`` … — for each
request), so that one ``storage_options`` serves both. Stats, listings and whole files still
go through fsspec.

Static-file servers such as nginx and Apache answer ``Range: bytes=a-b,c-d,…`` with one ``206``
response of ``multipart/byteranges`` parts, one per range (RFC 9110 §14.6). The body is read
into one buffer and its parts are cut out as they arrive (:class:`ByteRangesParser`), so that
the first ranges of a long answer can be worked on while the rest is still on its way. Each
part's length is taken from its ``Content-Range``, so the parser steps from part to part
without scanning the data for the boundary; the line break and boundary after each part are
checked before the part is handed out. On the same answers from nginx it takes 2-4 times less
CPU than aiohttp's ``MultipartReader`` (``tools/bench_transport.py``, docs/design.md).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import inspect
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, NamedTuple

from ..errors import RangeReadError

#: What a read tells of the file it read, for its stamp check: ``await check(response
#: headers, the file's size from Content-Range or None)``, before any byte is handed out.
StampCheck = Callable[[Mapping[str, str], "int | None"], Awaitable[None]]

_CONTENT_RANGE_VALUE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
#: Per-part overhead (boundary and headers) allowed in a response beyond the bytes asked for.
PART_OVERHEAD = 512
#: fsspec's storage options that are not request options (as its HTTP filesystem sorts them).
_NOT_PER_REQUEST = {"use_listings_cache", "listings_expiry_time", "max_paths",
                    "skip_instance_cache"}


def content_range(value: str) -> tuple[int, int, int | None] | None:
    """The first and last byte of a ``Content-Range: bytes a-b/size`` value and the file's
    size (``None`` when not given), or ``None`` for another value."""
    got = _CONTENT_RANGE_VALUE.fullmatch(value.strip())
    if got is None:
        return None
    size = None if got.group(3) == "*" else int(got.group(3))
    return int(got.group(1)), int(got.group(2)), size


def range_header(spans: Sequence[tuple[int, int]]) -> str:
    """The ``Range`` header value asking for ``[start, end)`` spans (touching ones merged)."""
    merged: list[list[int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return "bytes=" + ",".join(f"{a}-{b - 1}" for a, b in merged)


class HttpClient:
    """Ranged GETs through one aiohttp session, made on first use on the running event loop.

    Args:
        options: fsspec's HTTP storage options (see the module).
    """

    def __init__(self, options: Mapping[str, Any]) -> None:
        from fsspec.implementations.http import HTTPFileSystem

        named = set(inspect.signature(HTTPFileSystem.__init__).parameters) | _NOT_PER_REQUEST
        self.requests = {k: v for k, v in options.items() if k not in named}
        self.headers = dict(self.requests.pop("headers", None) or {})
        # the bytes of the file as stored (as fsspec's HEAD asks): a compressed answer would
        # be other bytes, and its ETag another version's
        self.headers["Accept-Encoding"] = "identity"
        self.client_kwargs = dict(options.get("client_kwargs") or {})
        self.get_client = options.get("get_client")
        self.encoded = bool(options.get("encoded", False))
        self.session: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None  # the session's

    async def open_session(self) -> Any:
        """The :class:`aiohttp.ClientSession` of this client (made on first use, on the
        running event loop)."""
        if self.session is None:
            import aiohttp

            made = (aiohttp.ClientSession(**self.client_kwargs) if self.get_client is None
                    else await self.get_client(loop=asyncio.get_running_loop(),
                                               **self.client_kwargs))
            if self.session is None:
                self.session, self.loop = made, asyncio.get_running_loop()
            else:  # made meanwhile by a concurrent first request
                await made.close()
        return self.session

    async def session_for_fsspec(self, **kwargs: Any) -> Any:
        """fsspec's HTTP filesystem's ``get_client``: this client's session (``kwargs``, the
        same options, were used to make it), so that its stats and whole files and our ranged
        GETs share one pool of connections."""
        return await self.open_session()

    async def close(self) -> None:
        """Close the session (reopened on next use)."""
        session, self.session = self.session, None
        if session is not None:
            await session.close()

    @contextlib.asynccontextmanager
    async def get(self, url: str, spec: str) -> AsyncIterator[Any]:
        """The response to ``GET url`` with ``Range: spec``.

        Raises:
            FileNotFoundError: The server answered 404.
            aiohttp.ClientResponseError: It answered another 4xx or 5xx.
        """
        session = await self.open_session()
        target: Any = url
        if self.encoded:
            import yarl

            target = yarl.URL(url, encoded=True)
        async with session.get(target, headers={**self.headers, "Range": spec},
                               **self.requests) as response:
            if response.status == 404:
                raise FileNotFoundError(url)
            if response.status >= 400:
                response.raise_for_status()
            yield response

    async def get_range(self, url: str, start: int, end: int,
                        check: StampCheck | None = None) -> bytes:
        """GET ``Range: bytes=start-(end-1)`` and insist on ``206`` with that exact range.

        Args:
            url: The file.
            start: First byte.
            end: One past the last.
            check: Awaited with the response's headers and the file's size before its body is
                read.

        Returns:
            The body.

        Raises:
            RangeReadError: Another status or another range came back.
        """
        async with self.get(url, f"bytes={start}-{end - 1}") as r:
            if r.status != 206:
                raise RangeReadError(
                    f"{url}: asked for bytes [{start}, {end}) but the server answered "
                    f"{r.status} instead of 206 Partial Content: it ignores Range requests, so "
                    "the body is not the bytes asked for — refusing to return wrong data "
                    "(serve the files from a server that supports ranges, e.g. nginx, or a "
                    "bucket)")
            got = content_range(r.headers.get("Content-Range", ""))
            if got is None or got[:2] != (start, end - 1):
                raise RangeReadError(
                    f"{url}: asked for bytes [{start}, {end}) but the server sent "
                    f"Content-Range {r.headers.get('Content-Range')!r} — refusing to return "
                    "wrong data")
            if check is not None:
                await check(r.headers, got[2])
            data: bytes = await r.read()
            return data

    async def get_spans(self, url: str, spans: Sequence[tuple[int, int]],
                        deliver: Callable[[int, memoryview], None],
                        check: StampCheck | None = None) -> int | None:
        """GET the ``[start, end)`` spans of ``url`` in one request, handing each span out as
        soon as the part that holds it has arrived.

        Args:
            url: The file.
            spans: The ranges.
            deliver: Called as ``deliver(j, bytes of span j)`` (from the event loop), once per
                span the answer holds.
            check: Awaited with the response's headers and the file's size before the first
                span is handed out (the storage's stamp check).

        Returns:
            The bytes of the body read, or ``None`` when the server answered with the whole
            file or with far more bytes than asked for (its body is not read).

        Raises:
            FileNotFoundError: The file does not exist.
            RangeReadError: The answer is malformed (the spans delivered before stay good).
            aiohttp.ClientResponseError: The server failed (retried by the caller when
                transient).
        """
        limit = sum(b - a for a, b in spans) + PART_OVERHEAD * (len(spans) + 1)
        order = sorted(range(len(spans)), key=lambda j: spans[j])
        firsts = [spans[j][0] for j in order]

        def hand_out(part: Part) -> None:
            i = bisect.bisect_left(firsts, part.start)
            while i < len(order) and firsts[i] < part.end:
                j = order[i]
                if spans[j][1] <= part.end:
                    deliver(j, part.data[spans[j][0] - part.start : spans[j][1] - part.start])
                i += 1

        async with self.get(url, range_header(spans)) as r:
            length = r.headers.get("Content-Length")
            if r.status != 206 or length is None or int(length) > limit:
                return None  # the whole file, or a span much larger than asked: not read
            body = bytearray(int(length))
            view = memoryview(body)
            content_type = r.headers.get("Content-Type", "")
            parser = (ByteRangesParser(body, content_type, url)
                      if content_type.lower().startswith("multipart/") else None)
            headers = r.headers
            got = 0
            async for chunk in r.content.iter_any():
                if got + len(chunk) > len(body):
                    raise malformed(url, f"the body is longer than its Content-Length {length}")
                view[got : got + len(chunk)] = chunk
                got += len(chunk)
                for part in parser.feed(got) if parser is not None else ():
                    if check is not None:  # before any byte of the file is handed out
                        await check(headers, part.size)
                        check = None
                    hand_out(part)
            if got != len(body):
                raise malformed(url, f"the body ends after {got} of {length} bytes")
        if parser is not None:
            parser.finish()
            return got
        # one range for all (a server may coalesce ranges, or answer the first only)
        single = content_range(headers.get("Content-Range", ""))
        if single is None or single[1] - single[0] + 1 != len(body):
            raise malformed(url, f"Content-Range {headers.get('Content-Range')!r} for a body "
                            f"of {len(body)} bytes")
        if check is not None:
            await check(headers, single[2])
        hand_out(Part(single[0], single[1] + 1, view))
        return got


_BOUNDARY = re.compile(r'boundary="?([^";]+)"?', re.IGNORECASE)
_CONTENT_RANGE = re.compile(rb"content-range:[ \t]*bytes[ \t]+(\d+)-(\d+)/(\d+|\*)",
                            re.IGNORECASE)
#: The most bytes of a preamble or of a part's headers.
_MAX_HEAD = 16 << 10


class Part(NamedTuple):
    """One part of a response: the bytes ``[start, end)`` of the file (whose size its
    ``Content-Range`` gives, or ``None``). A tuple: a batch's answer holds hundreds."""

    start: int
    end: int
    data: memoryview
    size: int | None = None


def malformed(url: str, why: str) -> RangeReadError:
    """The error for a multi-range answer that cannot be parsed."""
    return RangeReadError(f"{url}: the server's multi-range answer is malformed ({why}) — "
                          "refusing to return wrong data")


class ByteRangesParser:
    """Cuts the parts out of a ``multipart/byteranges`` body as it fills a buffer.

    Args:
        body: The buffer the body is read into (its final size).
        content_type: The response's ``Content-Type`` (holds the boundary).
        url: The file, for messages.

    Raises:
        RangeReadError: ``content_type`` names no boundary.
    """

    def __init__(self, body: bytes | bytearray, content_type: str, url: str) -> None:
        got = _BOUNDARY.search(content_type)
        if got is None or not content_type.lower().startswith("multipart/byteranges"):
            raise malformed(url, f"Content-Type {content_type!r} names no boundary")
        self.delimiter = b"--" + got.group(1).strip().encode("latin-1")
        self.body, self.url = body, url
        self.view = memoryview(body)
        self.done = False  # the closing boundary was seen
        self._at: int | None = None  # where the next part's boundary starts, once found
        self._pos = 0

    def feed(self, avail: int) -> list[Part]:
        """The parts completed by the first ``avail`` bytes of the body, not given before.

        Raises:
            RangeReadError: The body is malformed.
        """
        out: list[Part] = []
        while not self.done:
            if self._at is None and not self._find_first_boundary(avail):
                break
            assert self._at is not None
            part = self._next_part(self._at + len(self.delimiter), avail)
            if part is None:
                break
            out.append(part)
        return out

    def _find_first_boundary(self, avail: int) -> bool:
        """Find the first boundary, after an optional preamble; ``False``: not there yet."""
        i = self.body.find(self.delimiter, self._pos, avail)
        if i < 0:
            if avail > _MAX_HEAD:
                raise malformed(self.url, "a part's boundary is missing")
            return False
        self._at = i
        return True

    def _next_part(self, p: int, avail: int) -> Part | None:
        """The part whose boundary ends at ``p``, once all of it is within ``avail`` bytes
        (then the next boundary is noted); ``None`` when it is not complete yet, or the
        closing boundary was reached (:attr:`done`)."""
        body, d = self.body, self.delimiter  # (startswith: no slice copied, ~250 parts a batch)
        if avail < p + 2:
            return None
        if body.startswith(b"--", p):
            self.done = True
            return None
        while p < avail and body[p] in (32, 9):  # transport padding (RFC 2046)
            p += 1
        if avail < p + 2:
            return None
        if not body.startswith(b"\r\n", p):
            raise malformed(self.url, f"no line break after the boundary at byte {p}")
        head_end = body.find(b"\r\n\r\n", p, avail)
        if head_end < 0:
            if avail - p > _MAX_HEAD or avail == len(body):
                raise malformed(self.url, f"the headers of the part at byte {p} do not end")
            return None
        a, b, size = self._content_range(p, head_end)
        start = head_end + 4
        stop = start + (b - a + 1)
        after = stop + 2 + len(d)
        if b < a or after > len(body):
            raise malformed(self.url, self._cut(p, a, b))
        if avail < after:
            return None
        if not body.startswith(b"\r\n", stop):
            raise malformed(self.url, self._cut(p, a, b))
        if not body.startswith(d, stop + 2):
            raise malformed(self.url, f"no boundary after the part at byte {p}")
        self._at = stop + 2
        return Part(a, b + 1, self.view[start:stop], size)

    @staticmethod
    def _cut(p: int, a: int, b: int) -> str:
        return (f"the part at byte {p} (bytes {a}-{b}) is cut short or longer than its "
                "Content-Range")

    def _content_range(self, p: int, head_end: int) -> tuple[int, int, int | None]:
        """The first and last byte of the part whose headers are ``[p, head_end)``, and the
        file's size (``None`` when not given)."""
        found = _CONTENT_RANGE.search(self.body, p, head_end + 2)
        if found is None:
            raise malformed(self.url, f"the part at byte {p} has no Content-Range")
        size = None if found.group(3) == b"*" else int(found.group(3))
        return int(found.group(1)), int(found.group(2)), size

    def finish(self) -> None:
        """Check that the whole body was parsed.

        Raises:
            RangeReadError: The closing boundary is missing.
        """
        self.feed(len(self.body))
        if not self.done:
            raise malformed(self.url, "the closing boundary is missing")
