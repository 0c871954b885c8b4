"""A delaying TCP proxy on 127.0.0.1: emulates a remote bucket's round-trip time on loopback.

Every chunk is forwarded RTT/2 after it arrived, in each direction, in order — so one request
and its response cost one RTT, while pipelined and concurrent connections still overlap (the
delay is latency, not a bandwidth cap). ``tc netem`` is not available on these machines.

With ``--rate`` (bytes per second) the responses also pass a link of that bandwidth, shared by
every connection (a chunk leaves when the link has carried it, then takes RTT/2): the
throughput one client gets from the store, e.g. ~100 MB/s for one S3 or GCS connection
stream (AWS: 85-90 MB/s per connection). ``--rate-per-connection`` caps each connection
on its own instead (a client that opens more connections gets more).

    python tools/latency_proxy.py --upstream 127.0.0.1:8080 --rtt-ms 20 --duration 120

or in-process::

    with LatencyProxy("127.0.0.1", 8080, rtt=0.020) as proxy:
        url = f"http://127.0.0.1:{proxy.port}/..."
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import struct
import threading
import time


class LatencyProxy:
    """Runs in a background thread with its own event loop; ``port`` is where it listens."""

    def __init__(self, upstream_host: str, upstream_port: int, rtt: float = 0.020,
                 port: int = 0, reset_first: int = 0, rate: float = 0.0,
                 rate_per_connection: float = 0.0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.rtt = rtt
        #: bytes per second of the responses, over all connections / per connection (0: none)
        self.rate = rate
        self.rate_per_connection = rate_per_connection
        self._link_free = 0.0  # when the shared link has carried what it was given
        self.port = port
        #: the first ``reset_first`` connections are reset (RST) once the client has sent a
        #: request: a transient failure for retry tests
        self.reset_first = reset_first
        self.connections = 0
        self.bytes_up = 0
        self.bytes_down = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> LatencyProxy:
        self._thread = threading.Thread(target=self._run, name="latency-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("latency proxy did not start")
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._server = loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            loop.set_exception_handler(lambda _loop, _ctx: None)  # connections cut at exit
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()

    # -- one connection ---------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.connections <= self.reset_first:
            await reader.read(1)  # the request has started arriving
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return
        writers = [writer]
        try:  # close both ends however this ends (the proxy may be stopped mid-transfer)
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            writers.append(up_writer)
            await asyncio.gather(
                self._pipe(reader, up_writer, up=True),
                self._pipe(up_reader, writer, up=False),
                return_exceptions=True,
            )
        except OSError:
            pass
        finally:
            for w in writers:
                w.close()

    async def _pipe(self, reader, writer, up: bool) -> None:
        """Forward chunks, each ``rtt/2`` after it was read, preserving order."""
        queue: asyncio.Queue = asyncio.Queue()
        half = self.rtt / 2

        async def send() -> None:
            while True:
                due, chunk = await queue.get()
                if chunk is None:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(chunk)
                await writer.drain()
            if writer.can_write_eof():
                with contextlib.suppress(OSError):
                    writer.write_eof()

        sender = asyncio.ensure_future(send())
        own_free = 0.0  # when this connection's own link has carried what it was given
        try:
            while True:
                chunk = await reader.read(1 << 20)
                if not chunk:
                    break
                now = time.monotonic()
                if up:
                    self.bytes_up += len(chunk)
                else:
                    self.bytes_down += len(chunk)
                    if self.rate_per_connection:
                        own_free = max(now, own_free) + len(chunk) / self.rate_per_connection
                        now = own_free
                    if self.rate:
                        self._link_free = max(now, self._link_free) + len(chunk) / self.rate
                        now = self._link_free
                queue.put_nowait((now + half, chunk))
        except (ConnectionError, OSError):
            pass
        finally:
            queue.put_nowait((0.0, None))
            with contextlib.suppress(ConnectionError, OSError):
                await sender


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--upstream", required=True, help="HOST:PORT to forward to")
    p.add_argument("--rtt-ms", type=float, default=20.0)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--duration", type=float, default=300.0, help="stop after this many seconds")
    p.add_argument("--rate", type=float, default=0.0,
                   help="bytes per second of the responses, all connections together (0: none)")
    p.add_argument("--rate-per-connection", type=float, default=0.0,
                   help="bytes per second of each connection's responses (0: none)")
    args = p.parse_args(argv)
    host, _, port = args.upstream.rpartition(":")
    with LatencyProxy(host, int(port), args.rtt_ms / 1000, args.port, rate=args.rate,
                      rate_per_connection=args.rate_per_connection) as proxy:
        print(f"listening on 127.0.0.1:{proxy.port} -> {args.upstream}, RTT {args.rtt_ms} ms",
              flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            time.sleep(args.duration)


if __name__ == "__main__":
    main()
