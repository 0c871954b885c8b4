"""A faulty network between a client and an HTTP server: a TCP proxy on 127.0.0.1 (asyncio,
in a thread of its own) that injects faults into HTTP/1.1 exchanges.

Each connection carries one request (the proxy asks both sides for ``Connection: close``), so
every request draws its own fate:

* ``drop``: the connection is closed before any answer (a reset link);
* ``delay``: the request waits 20-120 ms before it is forwarded;
* ``truncate``: the answer stops halfway through its body (its ``Content-Length`` kept);
* ``full_body``: a ranged GET is forwarded without its ``Range``, so the client gets ``200``
  and the whole object instead of ``206`` and the range (a server or cache ignoring ranges);
* ``flip``: one bit of the body is flipped (memory or a middlebox going bad: TCP's checksum
  does not see it);
* ``slowdown``: the request is answered ``503`` with S3's ``SlowDown`` error (a throttled
  prefix), without reaching the server (``slowdown_first`` answers the first N requests so);
* ``stall``: the request waits ``stall_seconds`` before it is forwarded (a slow server or a
  lost packet: the tail latency that hedged requests cut).

:meth:`FaultProxy.blackout` closes the listening socket for a while (connections are refused,
as while a server restarts or a link is down), then listens again on the same port.

``counts`` tallies the faults injected; ``requests`` the requests seen.

    with FaultProxy(upstream_url, drop=0.1, truncate=0.05, ...) as proxy:
        proxy.url  # talk to this instead of upstream_url
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import re
import threading
from urllib.parse import urlsplit

from tests.kit import paths

_HEAD_END = b"\r\n\r\n"
_SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code><Message>'
             b"Please reduce your request rate.</Message></Error>")
_MAX_HEAD = 64 << 10


def _split_head(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    headers = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
    return lines[0], headers


def _join_head(first: str, headers: list[tuple[str, str]]) -> bytes:
    return (first + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n").encode(
        "latin-1")


def _get(headers: list[tuple[str, str]], name: str) -> str | None:
    return next((v for k, v in headers if k.lower() == name), None)


def _without(headers: list[tuple[str, str]], *names: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers if k.lower() not in names]


class FaultProxy:
    """An HTTP/1.1 fault-injecting proxy in front of ``upstream`` (``http://host:port``).

    Args:
        upstream: The server's URL.
        drop, delay, truncate, full_body, flip, slowdown, stall: Probability of each fault
            per request (``full_body`` applies to ranged GETs only; ``truncate`` and ``flip``
            to answers with a body). At most one fault besides ``delay`` hits a request.
        stall_seconds: How long a stalled request waits.
        slowdown_first: The first this many requests are answered ``503 SlowDown``.
        seed: Seeds the draws.
    """

    def __init__(self, upstream: str, *, drop: float = 0.0, delay: float = 0.0,
                 truncate: float = 0.0, full_body: float = 0.0, flip: float = 0.0,
                 slowdown: float = 0.0, stall: float = 0.0, stall_seconds: float = 3.0,
                 slowdown_first: int = 0, seed: int = 0) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.rates = {"drop": drop, "truncate": truncate, "full_body": full_body,
                      "flip": flip, "slowdown": slowdown, "stall": stall}
        self.stall_seconds = stall_seconds
        self.slowdown_first = int(slowdown_first)
        self._stall_next = 0
        self.port = 0
        self.delay = delay
        self.rng = random.Random(seed)
        self.counts: collections.Counter[str] = collections.Counter()
        self.requests = 0
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fault-proxy")
        self._server: asyncio.AbstractServer | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    def stall_next(self, count: int) -> None:
        """Stall the next ``count`` requests (``stall_seconds`` each) whatever the draws say."""
        self._stall_next = count

    def blackout(self, seconds: float) -> None:
        """Refuse connections for ``seconds`` (the listening socket closed), from now on;
        returns at once."""
        asyncio.run_coroutine_threadsafe(self._blackout(seconds), self._loop).result(10)

    async def _blackout(self, seconds: float) -> None:
        assert self._server is not None
        self._server.close()  # the listening socket is closed now: connecting is refused
        self.counts["blackout"] += 1

        async def listen_again() -> None:
            await asyncio.sleep(seconds)
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

        self._reopening = asyncio.ensure_future(listen_again())

    def stop(self) -> None:
        if self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        self._loop.run_forever()
        if self._server is not None:
            self._server.close()  # the one listening again after a blackout
        # exchanges still running: let them end (each is one short request), then cancel the
        # stragglers; every connection is closed by its handler either way
        while pending := asyncio.all_tasks(self._loop):  # new ones may start meanwhile
            self._loop.run_until_complete(asyncio.wait(pending, timeout=5))
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        for _ in range(3):  # run the transports' pending close callbacks before closing
            self._loop.run_until_complete(asyncio.sleep(0.01))
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    # -- one exchange ---------------------------------------------------------------------------
    def _fate(self, method: str, headers: list[tuple[str, str]]) -> str | None:
        draw = self.rng.random()
        for name, rate in self.rates.items():
            if name == "full_body" and not (method == "GET" and _get(headers, "range")):
                continue
            if draw < rate:
                return name
            draw -= rate
        return None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._exchange(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            await _close(writer)

    async def _exchange(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(_HEAD_END)
        first, headers = _split_head(head[:_MAX_HEAD])
        method = first.split(" ", 1)[0]
        body = await reader.readexactly(int(_get(headers, "content-length") or 0))
        self.requests += 1
        fate = "slowdown" if self.requests <= self.slowdown_first else self._fate(method,
                                                                                  headers)
        if self._stall_next > 0:
            self._stall_next -= 1
            fate = "stall"
        if self.rng.random() < self.delay:
            self.counts["delay"] += 1
            await asyncio.sleep(self.rng.uniform(0.02, 0.12))
        if fate == "drop":
            self.counts["drop"] += 1
            return
        if fate == "slowdown":
            self.counts["slowdown"] += 1
            writer.write(_join_head("HTTP/1.1 503 Slow Down", [
                ("Content-Type", "application/xml"), ("Content-Length", str(len(_SLOWDOWN))),
                ("Connection", "close")]) + (b"" if method == "HEAD" else _SLOWDOWN))
            await writer.drain()
            return
        if fate == "stall":
            self.counts["stall"] += 1
            await asyncio.sleep(self.stall_seconds)
        if fate == "full_body":
            self.counts["full_body"] += 1
            headers = _without(headers, "range")
        close = ("Connection", "close")
        status, answer_headers, answer = await self._forward(
            method, _join_head(first, [*_without(headers, "connection"), close]) + body)
        answer_headers = [*_without(answer_headers, "connection"), close]
        if fate == "flip" and answer:
            self.counts["flip"] += 1
            flipped = bytearray(answer)
            flipped[self.rng.randrange(len(flipped))] ^= 1 << self.rng.randrange(8)
            answer = bytes(flipped)
        elif fate == "truncate" and answer:
            self.counts["truncate"] += 1
            writer.write(_join_head(status, answer_headers) + answer[: len(answer) // 2])
            await writer.drain()
            return
        writer.write(_join_head(status, answer_headers) + answer)
        await writer.drain()

    async def _forward(self, method: str,
                       request: bytes) -> tuple[str, list[tuple[str, str]], bytes]:
        """Send the request upstream; return the answer's status line, headers and body."""
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        try:
            up_writer.write(request)
            await up_writer.drain()
            head = await up_reader.readuntil(_HEAD_END)
            status, headers = _split_head(head)
            code = int(status.split(" ")[1])
            if method == "HEAD" or code in (204, 304) or 100 <= code < 200:
                body = b""
            elif _get(headers, "content-length") is not None:
                body = await up_reader.readexactly(int(_get(headers, "content-length") or 0))
            else:  # chunked or until close: the upstream closes (Connection: close)
                body = await up_reader.read()
                if re.search(r"chunked", _get(headers, "transfer-encoding") or "", re.I):
                    headers = _without(headers, "transfer-encoding")
                    body = _dechunk(body)
                    headers.append(("Content-Length", str(len(body))))
            return status, headers, body
        finally:
            await _close(up_writer)


async def _close(writer: asyncio.StreamWriter) -> None:
    """Close a connection and wait until its transport is gone (no unclosed-socket warning
    when the proxy stops right after)."""
    writer.close()
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await writer.wait_closed()


def _dechunk(raw: bytes) -> bytes:
    out, pos = bytearray(), 0
    while True:
        end = raw.index(b"\r\n", pos)
        size = int(raw[pos:end].split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += raw[end + 2 : end + 2 + size]
        pos = end + 2 + size + 2


class FaultProxyProcess:
    """A :class:`FaultProxy` in a process of its own (as a faulty network would be: its
    sockets and event loop never share the client's process), stopped by its PID.

    Same arguments and attributes as :class:`FaultProxy`; ``counts`` and ``requests`` are
    known once it has stopped.
    """

    def __init__(self, upstream: str, *, seed: int = 0, **rates: float) -> None:
        import json
        import os
        import subprocess
        import sys

        self.counts: collections.Counter[str] = collections.Counter()
        self.requests = 0
        self._proc = subprocess.Popen(
            [sys.executable, "-m", __name__, upstream, str(seed), json.dumps(rates)],
            env={**os.environ, "PYTHONPATH": paths.pythonpath()}, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        self.url = self._proc.stdout.readline().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            self._proc.kill()
            raise RuntimeError(f"fault proxy did not start: {self.url!r}")

    def blackout(self, seconds: float) -> None:
        """:meth:`FaultProxy.blackout` in the proxy's process."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(f"blackout {seconds}\n")
        self._proc.stdin.flush()
        if self._proc.stdout.readline().strip() != "ok":
            raise RuntimeError("fault proxy did not start the blackout")

    def stop(self) -> None:
        import json

        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.close()  # the child stops, then prints what it saw
            report = json.loads(self._proc.stdout.readline() or "{}")
            self.counts.update(report.get("counts", {}))
            self.requests = int(report.get("requests", 0))
            self._proc.wait(30)
        finally:
            if self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait(10)
            self._proc.stdout.close()

    def __enter__(self) -> FaultProxyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    import json
    import sys

    _upstream, _seed, _rates = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    with FaultProxy(_upstream, seed=_seed, **_rates) as _proxy:
        print(_proxy.url, flush=True)
        for _line in sys.stdin:  # commands, until the parent closes our stdin
            _word, _, _arg = _line.partition(" ")
            if _word == "blackout":
                _proxy.blackout(float(_arg))
                print("ok", flush=True)
    print(json.dumps({"counts": dict(_proxy.counts), "requests": _proxy.requests}), flush=True)
