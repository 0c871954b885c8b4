"""Async pieces of the remote storage: a bound on bytes in flight, and an HTTP range GET that
insists on getting exactly the range it asked for."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from ..errors import RangeReadError

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class ByteBudget:
    """At most ``limit`` bytes held at once (a single larger request may run alone)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.cond = asyncio.Condition()

    def hold(self, n: int) -> _Hold:
        return _Hold(self, n)


class _Hold:
    def __init__(self, budget: ByteBudget, n: int) -> None:
        self.budget, self.n = budget, n

    async def __aenter__(self) -> None:
        b = self.budget
        async with b.cond:
            await b.cond.wait_for(lambda: b.used == 0 or b.used + self.n <= b.limit)
            b.used += self.n

    async def __aexit__(self, *exc: object) -> None:
        b = self.budget
        async with b.cond:
            b.used -= self.n
            b.cond.notify_all()


async def http_range(fs: Any, url: str, start: int, end: int) -> bytes:
    """GET ``Range: bytes=start-(end-1)`` and insist on ``206`` with that exact range."""
    kw = dict(getattr(fs, "kwargs", {}) or {})
    headers = dict(kw.pop("headers", None) or {})
    headers["Range"] = f"bytes={start}-{end - 1}"
    session = await fs.set_session()
    async with session.get(fs.encode_url(url), headers=headers, **kw) as r:
        if r.status == 404:
            raise FileNotFoundError(url)
        if r.status >= 400:
            r.raise_for_status()
        if r.status != 206:
            r.release()
            raise RangeReadError(
                f"{url}: asked for bytes [{start}, {end}) but the server answered "
                f"{r.status} instead of 206 Partial Content: it ignores Range requests, so the "
                "body is not the bytes asked for — refusing to return wrong data (serve the "
                "files from a server that supports ranges, e.g. nginx, or a bucket)"
            )
        got = _CONTENT_RANGE.fullmatch(r.headers.get("Content-Range", "").strip())
        if got is None or int(got.group(1)) != start or int(got.group(2)) != end - 1:
            raise RangeReadError(
                f"{url}: asked for bytes [{start}, {end}) but the server sent Content-Range "
                f"{r.headers.get('Content-Range')!r} — refusing to return wrong data"
            )
        data: bytes = await r.read()
        return data
