"""The parts of ``ofindex.transport``'s request policy against what would replace them, in one
run, interleaved (issue 44):

* **hedging**: batches of 64 random records from nginx through ``tests/kit/faultproxy.py``, one
  request per record (as from an object store), with 2 requests of each batch stalled for
  ``--stall`` seconds, and without any stall, with the default policy and with hedging off
  (``hedge_factor=0``): batch time, CPU per batch, requests sent again;
* **retry**: our policy's retry loop (``RequestPolicy.run``) against tenacity's
  ``AsyncRetrying`` configured for the same behaviour (this file's ``TenacityPolicy``: the
  same waits, deadline, "slow down" bounds and pacer, through tenacity's hooks): the CPU of a
  request that succeeds at once (µs), the outcome of the same scripted failures (attempts,
  waits, the error raised), range reads from nginx through the fault proxy (connections
  dropped, answers cut short, ``503 SlowDown``, delays: reads right, given up, attempts per
  read), and the lines each needs;
* **pacing**: live, ``--live-readers`` readers of one S3-like server that admits
  ``--live-limit`` GET/s and answers ``503 SlowDown`` over it (this file's
  ``serve_throttled``, in a process of its own), through s3fs, paced by our ``AdaptiveRate``,
  by aiobotocore's adaptive retry mode (botocore's, in the same s3fs), or by nothing (backoff
  only): reads/s and throttled answers in each half of a round, the worst second, readers
  that never end when cancelled; and simulated, many readers against one rate-limited store in
  the discrete-event simulation of ``tools/rate_sim.py`` (virtual time, deterministic), each
  reader paced by our ``AdaptiveRate``, by botocore's ``ClientRateLimiter`` (its real classes,
  driven on the virtual clock), or by nothing;
* **multipart**: multi-range answers of nginx parsed by our ``ByteRangesParser`` and by
  aiohttp's ``MultipartReader`` on the same responses: wall and CPU time per response, and
  the bytes checked.

Usage: ``python tools/bench_transport.py [--only hedging,retry,pacing,multipart]``; JSON goes
to ``bench-results/transport.json`` for ``tools/report.py`` (a run of some parts keeps the
others' figures and says so). tenacity is in the ``bench`` extra; without it the retry
comparison is skipped with a line saying so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

import numpy as np  # noqa: E402
from benchlib import parse_args, write_json  # noqa: E402

import ofindex  # noqa: E402
from ofindex.errors import StorageError  # noqa: E402
from ofindex.transport import store  # noqa: E402
from ofindex.transport.failures import classify, give_up, nothing_listens, permanent  # noqa: E402
from ofindex.transport.policy import AdaptiveRate, RequestPolicy  # noqa: E402


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


# -- hedging ------------------------------------------------------------------------------------
def hedging(args: argparse.Namespace) -> dict:
    from ofindex.cli.synthetic import write_dataset
    from ofindex.transport.policy import retry_settings
    from tests.kit import servers
    from tests.kit.faultproxy import FaultProxy

    root = tempfile.mkdtemp(prefix="ofindex-bench-transport-")
    records = args.records
    write_dataset(os.path.join(root, "d"), records, 8, kind="random", record_size=400, seed=3)
    policies = {"hedged (default)": RequestPolicy(), "not hedged": RequestPolicy(hedge_factor=0)}
    rows: dict[str, dict[str, list[float]]] = {
        f"{name}, {case}": {"seconds": [], "hedged": [], "cpu_ms": []}
        for name in policies for case in ("2 stalled", "no stall")}
    rng = np.random.default_rng(4)
    with servers.start_nginx(root) as nginx, \
            FaultProxy(nginx.url, stall_seconds=args.stall) as proxy:
        opened = {}
        for name, policy in policies.items():
            with retry_settings(policy=policy):
                ds = ofindex.open(f"{proxy.url}/d/")
            ds.max_gap = 0
            ds.__getitems__(list(range(0, records, 8)))  # every page of index cached
            opened[name] = ds
        store.SUPPORT[store.host_of(proxy.url)] = False  # one range per request
        for r in range(args.rounds):
            for case in ("2 stalled", "no stall"):
                for name in (policies if r % 2 == 0 else list(policies)[::-1]):
                    ds = opened[name]
                    idx = rng.choice(records, 64, replace=False).tolist()
                    if case == "2 stalled":
                        proxy.stall_next(2)
                    hedged = ds._table.storage.hedged
                    t, cpu = time.perf_counter(), time.process_time()
                    ds.__getitems__(idx)
                    rows[f"{name}, {case}"]["seconds"].append(time.perf_counter() - t)
                    rows[f"{name}, {case}"]["cpu_ms"].append(1e3 * (time.process_time() - cpu))
                    rows[f"{name}, {case}"]["hedged"].append(ds._table.storage.hedged - hedged)
                    time.sleep(args.stall if case == "2 stalled" else 0)  # stalls drained
        for ds in opened.values():
            ds.close()
    out = {}
    for key, row in rows.items():
        out[key] = {"batch_s": spread(row["seconds"]), "hedged_per_batch": spread(row["hedged"]),
                    "cpu_ms": spread(row["cpu_ms"])}
        s, c = out[key]["batch_s"], out[key]["cpu_ms"]
        print(f"hedging  {key:<28} batch {s['median']:.3f} s ({s['min']:.3f}-{s['max']:.3f}), "
              f"CPU {c['median']:.1f} ms ({c['min']:.1f}-{c['max']:.1f}), "
              f"sent again {statistics.mean(row['hedged']):.1f}/batch", flush=True)
    return {"stall_s": args.stall, "batch": 64, "rounds": args.rounds, "cases": out}


# -- retry: ours and tenacity -------------------------------------------------------------------
class TenacityPolicy:
    """Our policy's behaviour (retries, equal-jitter waits from two bases, the deadline that
    cuts an attempt and refuses a wait past it, "slow down" patience, a refused connection
    said at once, the pacer's turn before each attempt) on tenacity's ``AsyncRetrying``."""

    def __init__(self, policy: RequestPolicy) -> None:
        self.policy = policy

    async def run(self, attempt: Callable[[], Awaitable[Any]], what: str,
                  pacer: AdaptiveRate | None = None) -> Any:
        import tenacity

        request = _TenacityRequest(self.policy, what, pacer)
        try:
            async for attempt_state in tenacity.AsyncRetrying(
                    stop=request.stop, wait=request.wait,
                    retry=tenacity.retry_if_exception(request.retry), reraise=True):
                with attempt_state:
                    got = await request.once(attempt)
                    if pacer is not None:
                        pacer.succeeded()
                    return got
        except StorageError:
            raise
        except Exception as exc:
            if classify(exc).transient:
                raise give_up(what, request.attempts, time.monotonic() - request.start,
                              exc) from exc
            raise permanent(what, exc) from exc


class _TenacityRequest:
    """One request's state for :class:`TenacityPolicy`'s hooks."""

    def __init__(self, policy: RequestPolicy, what: str, pacer: AdaptiveRate | None) -> None:
        self.policy, self.what, self.pacer = policy, what, pacer
        self.start, self.attempts = time.monotonic(), 0
        self.failed, self.limited, self.pause, self.ticket = {True: 0, False: 0}, 0.0, 0.0, 0.0

    def left(self) -> float:
        return (self.policy.deadline or float("inf")) - (time.monotonic() - self.start)

    def retry(self, exc: BaseException) -> bool:
        failure = classify(exc)
        if self.pacer is not None and failure.rate_limited:
            self.pacer.throttled(self.ticket)
        if failure.refused and (self.pacer is None or not self.pacer.answered):
            raise nothing_listens(self.what, exc) from exc
        return failure.transient

    def wait(self, retry_state: Any) -> float:
        failure = classify(retry_state.outcome.exception())
        self.failed[failure.throttled] += 1
        self.pause = self.policy.delay(self.failed[failure.throttled], failure.throttled)
        return self.pause

    def stop(self, retry_state: Any) -> bool:
        if retry_state.attempt_number >= self.policy.attempts or self.pause >= self.left():
            return True
        if classify(retry_state.outcome.exception()).rate_limited \
                and self.policy.throttle_patience is not None:
            self.limited += self.pause
            return self.limited > self.policy.throttle_patience
        return False

    async def once(self, attempt: Callable[[], Awaitable[Any]]) -> Any:
        self.attempts += 1
        while self.pacer is not None:
            pause, ticket = self.pacer.reserve()
            await asyncio.sleep(pause)
            if ticket is not None:
                self.ticket = ticket
                break
        async with asyncio.timeout(max(self.left(), 0.001)):
            return await attempt()


def _lines(*objects: Any) -> int:
    """Lines of code of ``objects`` (no docstrings, comments or blank lines)."""
    import ast
    import textwrap

    count = 0
    for o in objects:
        tree = ast.parse(textwrap.dedent(inspect.getsource(o)))
        docs = {n.body[0].lineno for n in ast.walk(tree)
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.body and isinstance(n.body[0], ast.Expr)
                and isinstance(n.body[0].value, ast.Constant)
                for _ in [0]}
        spans = {line for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(
            n.value, ast.Constant) and isinstance(n.value.value, str) and n.lineno in docs
                 for line in range(n.lineno, (n.end_lineno or n.lineno) + 1)}
        lines = textwrap.dedent(inspect.getsource(o)).splitlines()
        count += sum(1 for k, line in enumerate(lines, 1) if k not in spans and line.strip()
                     and not line.strip().startswith("#"))
    return count


class Hang(Exception):
    """In a script: the attempt never answers."""


class Scripted:
    """An attempt that fails (or hangs) as scripted, then answers."""

    def __init__(self, failures: list[BaseException]) -> None:
        self.failures, self.calls = list(failures), 0

    async def __call__(self) -> bytes:
        self.calls += 1
        if self.failures:
            failure = self.failures.pop(0)
            if isinstance(failure, Hang):
                self.failures.insert(0, failure)
                await asyncio.sleep(3600)
            raise failure
        return b"ok"


def _outcome(run: Callable[[Scripted], Awaitable[Any]], script: list[BaseException],
             seed: int) -> dict:
    random.seed(seed)
    attempt = Scripted(script)
    t = time.perf_counter()
    try:
        asyncio.run(run(attempt))
        result = "ok"
    except Exception as exc:
        result = f"{type(exc).__name__}: {str(exc).split(': ', 1)[-1][:60]}"
    return {"attempts": attempt.calls, "seconds": round(time.perf_counter() - t, 3),
            "result": result}


def retrying(args: argparse.Namespace) -> dict:
    import importlib.util

    if importlib.util.find_spec("tenacity") is None:
        print("retry    tenacity is not installed (pip install tenacity): skipped")
        return {"skipped": "tenacity is not installed"}
    from ofindex.transport import policy as ours

    policy = RequestPolicy(base_delay=0.01, throttle_delay=0.02, max_delay=0.05, timeout=2.0)
    theirs = TenacityPolicy(policy)
    reset = ConnectionResetError("reset")
    slow = OSError("Please reduce your request rate.")
    slow.status = 503
    limited = OSError("Too Many Requests")
    limited.status = 429
    refused = ConnectionRefusedError("refused")
    scripts = {"3 resets then ok": [reset] * 3, "11 resets (retries=10)": [reset] * 11,
               "2 SlowDown then ok": [slow] * 2, "a missing file": [FileNotFoundError("x")],
               "429 until the 2 s timeout": [limited] * 1000,
               "refused, never answered": [refused], "hangs past the timeout": [Hang()]}
    behaviour = {}
    for name, script in scripts.items():
        row = {"ours": _outcome(lambda a: policy.run(a, "u: bytes [0, 2)"), script, 1),
               "tenacity": _outcome(lambda a: theirs.run(a, "u: bytes [0, 2)"), script, 1)}
        behaviour[name] = row
        print(f"retry    {name:<24} ours {row['ours']}  tenacity {row['tenacity']}", flush=True)

    async def ok() -> bytes:
        return b"ok"

    async def per_call(run: Callable[[], Awaitable[Any]], n: int) -> float:
        t = time.perf_counter()
        for _ in range(n):
            await run()
        return (time.perf_counter() - t) / n * 1e6

    cost: dict[str, list[float]] = {"ours": [], "tenacity": []}
    pacer = AdaptiveRate()
    for r in range(args.rounds):
        for name in (("ours", "tenacity") if r % 2 == 0 else ("tenacity", "ours")):
            run = ((lambda: RequestPolicy().run(ok, "u", pacer=pacer)) if name == "ours" else
                   (lambda: TenacityPolicy(RequestPolicy()).run(ok, "u", pacer=pacer)))
            cost[name].append(asyncio.run(per_call(run, args.calls)))
    for name, values in cost.items():
        s = spread(values)
        print(f"retry    {name:<9} {s['median']:.1f} us per request that succeeds at once "
              f"({s['min']:.1f}-{s['max']:.1f})", flush=True)
    # the decisions each makes (the error messages, shared, are left out of both)
    request = ours._Request
    lines = {"ours": _lines(ours.RequestPolicy.run, request.__init__, request.left,
                            request.fits, request.turn, request.within_deadline,
                            request.after, request.final),
             "tenacity adapter": _lines(TenacityPolicy, _TenacityRequest)}
    print(f"retry    lines: ours {lines['ours']}, tenacity adapter {lines['tenacity adapter']} "
          f"(and tenacity's own code)", flush=True)
    return {"behaviour": behaviour, "us_per_request": {k: spread(v) for k, v in cost.items()},
            "lines": lines, "faults": retry_under_faults(args)}


def retry_under_faults(args: argparse.Namespace) -> dict:
    """Range reads from nginx through ``tests/kit/faultproxy.py`` (connections dropped, answers
    cut short, ``503 SlowDown``, delays), each retried by our policy or by the tenacity
    adapter with the same short waits, interleaved: reads answered with the right bytes,
    reads given up, attempts per read, seconds per round."""
    import aiohttp

    from ofindex.transport.http import HttpClient
    from tests.kit import servers
    from tests.kit.faultproxy import FaultProxy

    root = tempfile.mkdtemp(prefix="ofindex-bench-transport-")
    data = np.random.default_rng(1).integers(0, 256, 4 << 20, dtype=np.uint8).tobytes()
    with open(os.path.join(root, "object"), "wb") as f:
        f.write(data)
    faults = {"drop": 0.1, "truncate": 0.05, "slowdown": 0.05, "delay": 0.1}
    policy = RequestPolicy(base_delay=0.01, throttle_delay=0.02, max_delay=0.1, timeout=10.0)
    runners = {"ours": policy.run, "tenacity": TenacityPolicy(policy).run}
    rows: dict[str, dict[str, list[float]]] = {
        k: {"right": [], "given_up": [], "wrong": [], "attempts_per_read": [], "seconds": []}
        for k in runners}

    async def one_round(url: str, run: Callable[..., Awaitable[Any]], seed: int) -> dict:
        rng = random.Random(seed)
        client = HttpClient({})
        attempts, right, wrong, given_up = [0], 0, 0, 0
        limit = asyncio.Semaphore(16)

        async def read(offset: int) -> bool | None:
            async def attempt() -> bytes:
                attempts[0] += 1
                return await client.get_range(url, offset, offset + 8192)

            async with limit:
                try:
                    got = await run(attempt, f"{url}: bytes [{offset}, {offset + 8192})")
                except (OSError, aiohttp.ClientError):
                    return None
            return bytes(got) == data[offset : offset + 8192]

        t = time.perf_counter()
        outcomes = await asyncio.gather(*(read(rng.randrange(0, len(data) - 8192))
                                          for _ in range(args.fault_reads)))
        seconds = time.perf_counter() - t
        await client.close()
        right = sum(1 for o in outcomes if o is True)
        wrong = sum(1 for o in outcomes if o is False)
        given_up = sum(1 for o in outcomes if o is None)
        return {"right": right, "wrong": wrong, "given_up": given_up, "seconds": seconds,
                "attempts_per_read": attempts[0] / len(outcomes)}

    with servers.start_nginx(root) as nginx:
        for r in range(args.rounds):
            for name in (list(runners) if r % 2 == 0 else list(runners)[::-1]):
                # the same faults for both in a round: one seed per round
                with FaultProxy(nginx.url, seed=r, **faults) as proxy:
                    got = asyncio.run(one_round(f"{proxy.url}/object", runners[name], r))
                for key, value in got.items():
                    rows[name][key].append(value)
    out = {name: {key: spread(values) for key, values in row.items()}
           for name, row in rows.items()}
    for name, row in out.items():
        print(f"retry    faults {name:<9} right {row['right']['median']:.0f}/"
              f"{args.fault_reads}, given up {row['given_up']['median']:.0f} "
              f"({row['given_up']['min']:.0f}-{row['given_up']['max']:.0f}), wrong "
              f"{row['wrong']['max']:.0f}, attempts/read {row['attempts_per_read']['median']:.2f}"
              f", {row['seconds']['median']:.2f} s ({row['seconds']['min']:.2f}-"
              f"{row['seconds']['max']:.2f})", flush=True)
    return {"faults": faults, "reads": args.fault_reads, "cases": out}


# -- pacing: ours and botocore's adaptive mode -----------------------------------------------
class BotocoreAdaptive:
    """botocore's adaptive retry mode's client rate limiter (``ClientRateLimiter`` with its
    ``CubicCalculator``, ``RateClocker`` and ``TokenBucket``), driven on a virtual clock, with
    our pacer's interface (``reserve`` / ``throttled`` / ``succeeded``)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        from botocore.retries import adaptive, bucket, throttling

        class Clock:
            def current_time(self) -> float:
                return clock()

        virtual = Clock()
        self.clock, self.enabled, self.answered = clock, False, False
        self.bucket = bucket.TokenBucket(max_rate=1, clock=virtual)
        self.limiter = adaptive.ClientRateLimiter(
            rate_adjustor=throttling.CubicCalculator(starting_max_rate=0,
                                                     start_time=virtual.current_time()),
            rate_clocker=adaptive.RateClocker(virtual), token_bucket=self.bucket,
            throttling_detector=self, clock=virtual)

    def is_throttling_error(self, **kwargs: Any) -> bool:
        return bool(kwargs["throttled"])

    def reserve(self) -> tuple[float, float | None]:
        from botocore.exceptions import CapacityNotAvailableError

        now = self.clock()
        if not self.enabled:
            return 0.0, now
        try:
            self.bucket.acquire(block=False)
        except CapacityNotAvailableError:
            return max((1 - self.bucket.available_capacity) / self.bucket.max_rate, 1e-6), None
        return 0.0, now

    def throttled(self, ticket: float) -> None:
        self.limiter.on_receiving_response(throttled=True)
        self.enabled = True

    def succeeded(self) -> None:
        self.limiter.on_receiving_response(throttled=False)


def pacing(args: argparse.Namespace) -> dict:
    import rate_sim

    from ofindex.planning.stores import store_limits

    shape = rate_sim.BatchShape((300, 256), (300 * 300.0, 256 * 400.0), 256)
    limits = store_limits("s3", reads_per_second=args.limit)
    pacers = {"ours (AdaptiveRate)": (True, AdaptiveRate),
              "botocore adaptive": (True, BotocoreAdaptive),
              "none (backoff only)": (False, AdaptiveRate)}
    out: dict[str, dict] = {}
    # steady state (the first third left out), and the onset: the first seconds of throttling
    spans = {"steady": (args.sim_seconds, args.sim_seconds / 3),
             "onset": (args.sim_seconds / 6, 0.0)}
    for readers in args.readers:
        for phase, (seconds, warmup) in spans.items():
            for name, (paced, make) in pacers.items():
                got = rate_sim.Simulation(shape, readers, limits, rtt=0.02, bandwidth=1e9,
                                          concurrency=64, seconds=seconds, warmup=warmup,
                                          pacing=paced, seed=1, make_pacer=make).run()
                row = {"records_per_s": got.records_per_s,
                       "requests_per_s": got.requests_per_s,
                       "throttled_fraction": got.throttled_fraction,
                       "worst_second": min(got.per_second, default=0)}
                out[f"{readers} readers, {phase}, {name}"] = row
                print(f"pacing   {readers:>3} readers {phase:<6} {name:<20} "
                      f"{row['records_per_s']:6.0f} rec/s {row['requests_per_s']:5.0f} req/s "
                      f"answered, throttled {100 * row['throttled_fraction']:5.1f} %, worst "
                      f"second {row['worst_second']} req", flush=True)
    return {"limit_per_s": args.limit, "seconds": args.sim_seconds, "cases": out,
            "live": pacing_live(args)}


# -- pacing, live: a store that answers "503 SlowDown" over its rate ------------------------
_SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code><Message>'
             b"Please reduce your request rate.</Message></Error>")
#: The object the throttled store serves (``/bench/object``).
OBJECT_BYTES = 1 << 20


def serve_throttled(port: int, rate: float) -> None:
    """An S3-like server on ``127.0.0.1:port`` (run in a process of its own) of one object,
    ``/bench/object``, that admits ``rate`` GET/s (a token bucket holding a tenth of a second
    of them, as ``tools/sim_limits.py``) and answers the others ``503 SlowDown``, as S3 does
    over a prefix's rate. ``GET /_stats`` says what it answered; ``POST /_reset`` starts over
    with a full bucket."""
    from aiohttp import web
    from sim_limits import TokenBucket

    data = np.random.default_rng(0).integers(0, 256, OBJECT_BYTES, dtype=np.uint8).tobytes()
    state: dict[str, Any] = {}

    def reset() -> None:
        state.update(bucket=TokenBucket(rate, rate / 10, time.monotonic()), ok=0, throttled=0)

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"ok": state["ok"], "throttled": state["throttled"]})

    async def restart(request: web.Request) -> web.Response:
        reset()
        return web.Response(text="ok")

    async def get(request: web.Request) -> web.Response:
        if not state["bucket"].take(time.monotonic()):
            state["throttled"] += 1
            return web.Response(status=503, body=_SLOWDOWN, content_type="application/xml")
        state["ok"] += 1
        headers = {"ETag": '"bench"', "Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT",
                   "Accept-Ranges": "bytes"}
        spec = request.headers.get("Range", "")
        if not spec.startswith("bytes=") or request.method == "HEAD":
            return web.Response(body=b"" if request.method == "HEAD" else data,
                                headers={**headers, "Content-Length": str(len(data))})
        first, last = (int(x) for x in spec[6:].split("-"))
        last = min(last, len(data) - 1)
        headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
        return web.Response(status=206, body=data[first : last + 1], headers=headers)

    reset()
    app = web.Application()
    app.router.add_get("/_stats", stats)
    app.router.add_post("/_reset", restart)
    app.router.add_route("*", "/bench/object", get)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


@contextlib.contextmanager
def throttled_store(rate: float) -> Iterator[str]:
    """The URL of a :func:`serve_throttled` store admitting ``rate`` GET/s, for the block."""
    import subprocess

    from tests.kit import servers

    port = servers.free_port()
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve-throttled",
                             str(port), str(rate)])
    url = f"http://127.0.0.1:{port}"
    try:
        servers.wait_http(f"{url}/_stats", proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _post(url: str) -> None:
    import urllib.request

    with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10):
        pass


def _stats(url: str) -> dict[str, int]:
    import json
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as r:
        got: dict[str, int] = json.load(r)
    return got


def _s3(url: str, adaptive: bool) -> Any:
    """A new s3fs filesystem on ``url`` made as ofindex makes them (s3fs's and botocore's
    retries off), or with botocore's adaptive retry mode (11 attempts: our ``retries=10``)."""
    from ofindex.transport.clients import make_filesystem

    options: dict[str, Any] = {"endpoint_url": url, "key": "bench", "secret": "bench",
                               "client_kwargs": {"region_name": "us-east-1"}}
    if adaptive:
        options["config_kwargs"] = {"retries": {"mode": "adaptive", "max_attempts": 11}}
    return make_filesystem("s3", options, 64)


#: Readers that did not end when cancelled (kept referenced: never collected while pending).
ABANDONED: set[asyncio.Future[None]] = set()


async def _paced_round(read: Callable[[int], Awaitable[bytes]], workers: int,
                       seconds: float, seed: int, stats_url: str) -> dict[str, Any]:
    """``workers`` readers each reading one 4 KiB range after another for ``seconds``: when
    each answer came (seconds from the start), the reads given up, what the store had
    answered halfway, and the readers that did not end when cancelled at the end."""
    rng = random.Random(seed)
    start = time.monotonic()
    done: list[float] = []
    failed = [0]

    async def reader() -> None:
        while time.monotonic() - start < seconds:
            offset = rng.randrange(0, OBJECT_BYTES - 4096)
            try:
                data = await read(offset)
            except Exception:  # given up: counted, and the reader goes on
                failed[0] += 1
                continue
            assert len(data) == 4096
            done.append(time.monotonic() - start)

    async def halfway() -> dict[str, int]:
        await asyncio.sleep(seconds / 2)
        return await asyncio.to_thread(_stats, stats_url)

    middle = asyncio.ensure_future(halfway())
    tasks = [asyncio.ensure_future(reader()) for _ in range(workers)]
    _, late = await asyncio.wait(tasks, timeout=seconds)
    for task in late:  # in a backoff or a paced wait at the end: not counted
        task.cancel()
    # aiobotocore's token bucket waits with asyncio.wait_for(Condition.wait()): on Python
    # 3.11 a reader cancelled there can wait forever for the condition's lock (seen in this
    # benchmark: 9 of 32 readers of a round); counted, and left behind
    _, stuck = await asyncio.wait(tasks, timeout=10)
    ABANDONED.update(stuck)
    return {"times": [t for t in done if t < seconds], "failed": failed[0],
            "stuck": len(stuck), "halfway": await middle}


def _throttled_share(answered: dict[str, int]) -> float:
    return answered["throttled"] / max(1, answered["ok"] + answered["throttled"])


def pacing_live(args: argparse.Namespace) -> dict:
    """Readers of one throttled S3-like store through s3fs: our policy with our pacer, with
    botocore's adaptive retry mode (aiobotocore's, in the same s3fs), and with backoff only;
    the first half of each round (the onset of throttling) and the second (steady)."""
    from fsspec.asyn import sync

    from ofindex.transport.clients import call

    path = "bench/object"
    policy = RequestPolicy()

    def ours(fs: Any, pacer: AdaptiveRate | None) -> Callable[[int], Awaitable[bytes]]:
        async def read(offset: int) -> bytes:
            got: bytes = await policy.run(
                lambda: call(fs, "cat_file", path, start=offset, end=offset + 4096),
                f"s3://{path}: bytes [{offset}, {offset + 4096})", pacer=pacer)
            return got
        return read

    def botocore(fs: Any, pacer: AdaptiveRate | None) -> Callable[[int], Awaitable[bytes]]:
        async def read(offset: int) -> bytes:
            got: bytes = await call(fs, "cat_file", path, start=offset, end=offset + 4096)
            return got
        return read

    kinds = {"ours (AdaptiveRate)": (False, ours, True),
             "botocore adaptive": (True, botocore, False),
             "none (backoff only)": (False, ours, False)}
    seconds = args.live_seconds
    half = seconds / 2
    keys = ("ok_per_s", "onset_ok_per_s", "steady_ok_per_s", "throttled_fraction",
            "onset_throttled_fraction", "steady_throttled_fraction", "worst_second", "failed",
            "stuck_when_cancelled")
    rows: dict[str, dict[str, list[float]]] = {k: {key: [] for key in keys} for k in kinds}
    with throttled_store(args.live_limit) as url:
        for r in range(args.live_rounds):
            for name in (list(kinds) if r % 2 == 0 else list(kinds)[::-1]):
                adaptive, make, paced = kinds[name]
                fs = _s3(url, adaptive)
                read = make(fs, AdaptiveRate() if paced else None)
                sync(fs.loop, read, 0)  # the connection made before the clock starts
                _post(f"{url}/_reset")
                got = sync(fs.loop, _paced_round, read, args.live_readers, seconds, r,
                           f"{url}/_stats")
                end, mid = _stats(f"{url}/_stats"), got["halfway"]
                late = {k: end[k] - mid[k] for k in end}
                times = got["times"]
                row = rows[name]
                row["ok_per_s"].append(len(times) / seconds)
                row["onset_ok_per_s"].append(sum(1 for t in times if t < half) / half)
                row["steady_ok_per_s"].append(sum(1 for t in times if t >= half) / half)
                row["throttled_fraction"].append(_throttled_share(end))
                row["onset_throttled_fraction"].append(_throttled_share(mid))
                row["steady_throttled_fraction"].append(_throttled_share(late))
                row["worst_second"].append(min(sum(1 for t in times if k <= t < k + 1)
                                               for k in range(int(seconds))))
                row["failed"].append(got["failed"])
                row["stuck_when_cancelled"].append(got["stuck"])
    out = {}
    for name, row in rows.items():
        out[name] = o = {key: spread(values) for key, values in row.items()}

        def cell(key: str, scale: float = 1.0, o: dict = o) -> str:
            v = o[key]
            return (f"{scale * v['median']:.1f} ({scale * v['min']:.1f}-"
                    f"{scale * v['max']:.1f})")

        print(f"pacing   live {name:<20} reads/s {cell('ok_per_s')}: first {half:g} s "
              f"{cell('onset_ok_per_s')}, then {cell('steady_ok_per_s')}; throttled % "
              f"{cell('onset_throttled_fraction', 100)}, then "
              f"{cell('steady_throttled_fraction', 100)}; worst second "
              f"{o['worst_second']['median']:.0f}, given up {o['failed']['max']:.0f}, readers "
              f"stuck when cancelled {o['stuck_when_cancelled']['max']:.0f}", flush=True)
    return {"limit_per_s": args.live_limit, "readers": args.live_readers, "seconds": seconds,
            "rounds": args.live_rounds, "cases": out}


# -- multipart: ours and aiohttp's MultipartReader --------------------------------------------
def multipart(args: argparse.Namespace) -> dict:
    import aiohttp

    from ofindex.transport.http import ByteRangesParser, range_header
    from tests.kit import servers

    root = tempfile.mkdtemp(prefix="ofindex-bench-transport-")
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, args.file_mb << 20, dtype=np.uint8).tobytes()
    name = f"{uuid.uuid4().hex[:8]}.bin"
    with open(os.path.join(root, name), "wb") as f:
        f.write(data)

    def spans_of(n: int, size: int) -> list[tuple[int, int]]:
        starts = np.sort(rng.choice(len(data) // size - 1, n, replace=False)) * size
        return [(int(s), int(s) + int(rng.integers(size // 2, size))) for s in starts]

    async def ours(session: Any, url: str, spans: list[tuple[int, int]]) -> list[bytes]:
        async with session.get(url, headers={"Range": range_header(spans),
                                             "Accept-Encoding": "identity"}) as r:
            body = bytearray(int(r.headers["Content-Length"]))
            view = memoryview(body)
            parser = ByteRangesParser(body, r.headers["Content-Type"], url)
            got, parts = 0, []
            async for chunk in r.content.iter_any():
                view[got : got + len(chunk)] = chunk
                got += len(chunk)
                parts += parser.feed(got)
            parser.finish()
        return [bytes(p.data) for p in parts]

    async def theirs(session: Any, url: str, spans: list[tuple[int, int]]) -> list[bytes]:
        async with session.get(url, headers={"Range": range_header(spans),
                                             "Accept-Encoding": "identity"}) as r:
            reader = aiohttp.MultipartReader.from_response(r)
            return [bytes(await part.read()) async for part in reader]

    cases = {"64 spans of 2-4 KiB": (64, 4096), "256 spans of 8-16 KiB": (256, 16384),
             "16 spans of 128-256 KiB": (16, 262144)}
    out: dict[str, dict] = {}

    async def run(url: str) -> None:
        async with aiohttp.ClientSession() as session:
            for case, (n, size) in cases.items():
                spans = spans_of(n, size)
                expected = [data[a:b] for a, b in spans]
                times: dict[str, dict[str, list[float]]] = {
                    k: {"wall_ms": [], "cpu_ms": []} for k in ("ours", "MultipartReader")}
                for r in range(args.rounds + 1):
                    order = [("ours", ours), ("MultipartReader", theirs)]
                    for key, fn in (order if r % 2 == 0 else order[::-1]):
                        wall, cpu = time.perf_counter(), time.process_time()
                        got = await fn(session, url, spans)
                        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                        assert got == expected, key
                        if r:  # the first round warms the connection and the page cache
                            times[key]["wall_ms"].append(1e3 * wall)
                            times[key]["cpu_ms"].append(1e3 * cpu)
                out[case] = {k: {m: spread(v) for m, v in t.items()} for k, t in times.items()}
                mb = sum(b - a for a, b in spans) / 1e6
                for key, t in times.items():
                    print(f"multipart {case:<24} ({mb:4.1f} MB) {key:<16} wall "
                          f"{statistics.median(t['wall_ms']):6.2f} ms, cpu "
                          f"{statistics.median(t['cpu_ms']):6.2f} ms "
                          f"({min(t['cpu_ms']):.2f}-{max(t['cpu_ms']):.2f})", flush=True)

    with servers.start_nginx(root) as nginx:
        asyncio.run(run(f"{nginx.url}/{name}"))
    with contextlib.suppress(OSError):
        os.remove(os.path.join(root, name))
    return {"file_mb": args.file_mb, "rounds": args.rounds, "cases": out}


PARTS = {"hedging": hedging, "retry": retrying, "pacing": pacing, "multipart": multipart}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(PARTS), help="comma-separated parts to run")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--records", type=int, default=4000)
    p.add_argument("--stall", type=float, default=3.0)
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--limit", type=float, default=400.0, help="store's GET/s (simulation)")
    p.add_argument("--readers", type=lambda s: [int(x) for x in s.split(",")],
                   default=[16, 64])
    p.add_argument("--sim-seconds", type=float, default=90.0)
    p.add_argument("--file-mb", type=int, default=64)
    p.add_argument("--fault-reads", type=int, default=400,
                   help="range reads per round through the fault proxy")
    p.add_argument("--live-limit", type=float, default=100.0,
                   help="GET/s the throttled store admits")
    p.add_argument("--live-readers", type=int, default=32)
    p.add_argument("--live-seconds", type=float, default=20.0)
    p.add_argument("--live-rounds", type=int, default=5)
    p.add_argument("--out", default="bench-results/transport.json")
    args = parse_args(p, argv, rounds=1, records=400, stall=1.5, calls=50, readers=[4],
                      sim_seconds=6.0, file_mb=8, fault_reads=40, live_readers=4,
                      live_seconds=2.0, live_rounds=1)
    load = {"before": os.getloadavg()[0]}
    results: dict[str, Any] = {"load_average": load, "cpus": os.cpu_count()}
    parts = args.only.split(",")
    for part in parts:
        results[part] = PARTS[part](args)
    load["after"] = os.getloadavg()[0]
    if set(parts) != set(PARTS) and args.out and os.path.exists(args.out):
        results = _merged_into(args.out, results, parts, args.rounds)
    write_json(results, args.out)


def _merged_into(path: str, fresh: dict[str, Any], parts: list[str],
                 rounds: int) -> dict[str, Any]:
    """The results in ``path`` with ``parts`` replaced by this run's (listed, with the
    machine's load then, under ``config.reruns``)."""
    import json

    with open(path) as f:
        kept: dict[str, Any] = json.load(f)
    kept.update({part: fresh[part] for part in parts})
    kept.setdefault("config", {}).setdefault("reruns", []).append(
        {"part": ", ".join(parts), "rounds": rounds, "load_average": fresh["load_average"]})
    return kept


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve-throttled"]:
        serve_throttled(int(sys.argv[2]), float(sys.argv[3]))
    else:
        main()
