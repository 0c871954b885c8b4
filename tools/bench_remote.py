"""Remote random access benchmark: ofindex batches vs one request per record, at +20 ms RTT.

Serves a 16-shard dataset from Debian nginx behind a delaying TCP proxy on loopback
(``tools/latency_proxy.py``) and measures, in one run:

* open through the manifest (requests, wall time);
* the first batch of 256 random records after opening, in a fresh process each time (as a
  training job starts: no connection open but the manifest's, the server not known, every
  page of index to fetch), ``--repeats`` times, interleaved with its floor (in a fresh
  process too, after the same open: two rounds, one after the other, of one bare 1 KB GET
  per shard) and with
* a warm batch of 256 random records (every page of index cached: one round of data reads),
  and two floors measured alongside: one bare 1 KB range GET, and one round of bare 1 KB range
  GETs, one per shard, all at once (what any client pays for one round of that many requests
  on this machine now), both through fsspec's HTTP session and written on raw sockets (no
  HTTP client library: what the proxy and the server alone cost; likewise two rounds, the
  first on new connections, for the first batch);
* random batches right after the first (pages of index cached as they come), at the default
  ``max_gap`` and at 64 KiB;
* the naive peer: the same 256 records, one request per record in a loop;
* contiguous slices ``ds[a:a+256]``;
* sequential iteration over the whole dataset (large streamed reads);
* one file of ``--single-records`` records opened without a manifest (its sidecar read by
  pages after a 512-byte header at open) and 16 random records read from it, against the
  same with the whole sidecar fetched (ofindex before issue 30): bytes and requests by file
  kind, wall time.

Wall time is reported in RTTs (median and range over rounds), plus requests per batch, bytes
transferred vs bytes used, the rounds of requests the client sent (outermost storage calls
that made requests: each is one concurrent round), and request *rounds* as nginx saw them
(from its log: a request that arrived at least 0.9 RTT after another one was answered is
taken to have waited for it; rounds are the longest chain of such waits — less sensitive to
the machine's load than wall time, but requests of one round sent far apart by a starved
client count as two). ``--out`` writes the figures as JSON.

    python tools/bench_remote.py --out bench_remote.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

import numpy as np  # noqa: E402
from benchlib import parse_args  # noqa: E402

import ofindex  # noqa: E402
from ofindex.cli.synthetic import write_dataset  # noqa: E402
from tests.kit import servers  # noqa: E402

_LOG = re.compile(r'"(?:GET|HEAD) (\S+) [^"]*" (\d{3}) (\d+)')
_TIMED = re.compile(r'"(GET|HEAD) (\S+) [^"]*" (\d{3}) (\d+) .* ([\d.]+) ([\d.]+)$')


def request_rounds(requests: list[tuple[float, float]], rtt: float) -> int:
    """Rounds of requests as the server saw them: ``requests`` are ``(arrived, answered)``
    times; one that arrived at least 0.9 RTT after another was answered is taken to have
    waited for it (the answer travels half an RTT to the client, the next request another
    half: requests of one round sent apart by less than that are not mistaken for two).
    Returns the longest chain of such waits (0 for no requests)."""
    order = sorted(requests)
    depth: list[int] = []
    for k, (arrived, _) in enumerate(order):
        before = [depth[j] for j in range(k) if order[j][1] + 0.9 * rtt <= arrived]
        depth.append(1 + max(before, default=0))
    return max(depth, default=0)


class AccessLog:
    """Requests and response bytes seen by nginx since the last ``take()``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pos = 0

    def take(self) -> tuple[int, int, int]:
        """(requests, data bytes sent, sidecar/manifest requests) since the last call."""
        return self.take_split()[:3]

    def take_split(self) -> tuple[int, int, int, int]:
        """(requests, bytes sent, index requests, index bytes sent) since the last call."""
        with open(self.path, "rb") as f:
            f.seek(self.pos)
            chunk = f.read().decode("utf-8", "replace")
            self.pos = f.tell()
        n = sent = meta = meta_sent = 0
        for m in _LOG.finditer(chunk):
            if not m.group(1).startswith(("/data/", "/data.ofindex/")):
                continue  # e.g. nginx's readiness probe, logged late
            n += 1
            sent += int(m.group(3))
            if m.group(1).endswith((".ofidx", ".json")):
                meta += 1
                meta_sent += int(m.group(3))
        return n, sent, meta, meta_sent

    def take_timed(self) -> list[tuple[str, str, int, int, float, float]]:
        """``(method, path, status, bytes sent, arrived, answered)`` of every request since the
        last call (nginx started with ``timed=True``)."""
        with open(self.path, "rb") as f:
            f.seek(self.pos)
            chunk = f.read().decode("utf-8", "replace")
            self.pos = f.tell()
        out = []
        for line in chunk.splitlines():
            m = _TIMED.search(line)
            if m and m.group(2).startswith(("/data/", "/data.ofindex/")):
                end, took = float(m.group(5)), float(m.group(6))
                out.append((m.group(1), m.group(2), int(m.group(3)), int(m.group(4)),
                            end - took, end))
        return out


@contextlib.contextmanager
def _proxy_process(upstream_port: int, rtt_ms: float, rate: float = 0.0):
    """The latency proxy in a process of its own (as a network would be: its work must not
    compete with the client for this interpreter's GIL); yields its port, stops it by PID.
    ``rate``: bytes per second of the responses, all connections together (0: no cap)."""
    proc = subprocess.Popen(
        [sys.executable,
         os.path.join(os.path.dirname(os.path.abspath(__file__)), "latency_proxy.py"),
         "--upstream", f"127.0.0.1:{upstream_port}", "--rtt-ms", str(rtt_ms), "--duration", "3600",
         "--rate", str(rate)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline()  # "listening on 127.0.0.1:PORT -> ..."
        if not line.startswith("listening on"):
            raise RuntimeError(f"latency proxy did not start: {line!r}")
        yield int(line.split()[2].rsplit(":", 1)[1])
    finally:
        proc.kill()
        proc.wait(10)


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def spread(values: list[float]) -> dict:
    """Median, min and max of one figure over the rounds."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


class StorageCalls:
    """Counts the outermost calls into a storage that sent requests: each is one concurrent
    round (as the client issued them, whatever the machine's load)."""

    NAMES = ("fetch_round", "fetch_many", "read_ranges", "read_ranges_concat", "read_all",
             "read", "stamp", "read_block")

    def __init__(self, storage) -> None:
        self.storage, self.rounds, self.depth = storage, 0, 0
        for name in self.NAMES:
            setattr(storage, name, self._wrap(getattr(storage, name)))

    def _wrap(self, fn):
        def wrapped(*args, **kwargs):
            self.depth += 1
            before = self.storage.requests
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0 and (self.storage.requests > before or fn.__name__ == "stamp"):
                    self.rounds += 1
        return wrapped

    def take(self) -> int:
        rounds, self.rounds = self.rounds, 0
        return rounds


def cold_child(url: str, data: str, seed: int, batch: int) -> dict:
    """In a fresh process: open ``url``, read its first batch, check it against ``data``."""
    import fsspec.implementations.http  # noqa: F401  imports are not the batch's cost

    t = time.perf_counter()
    ds = ofindex.open(url)
    opened = time.perf_counter()
    calls = StorageCalls(ds._table.storage)
    idx = np.random.default_rng(seed).choice(len(ds), size=batch, replace=False).tolist()
    began = time.time()  # nginx's clock: its log tells the open's requests from the batch's
    t_batch = time.perf_counter()
    got = ds.__getitems__(idx)
    done = time.perf_counter()
    with ofindex.open(data) as local:
        ok = got == local.__getitems__(idx)
    return {"open_s": opened - t, "batch_s": done - t_batch, "ok": ok,
            "client_rounds": calls.take(), "began": began}


def cold_floor_child(url: str) -> dict:
    """In a fresh process, the floor of a first batch: open ``url`` (its manifest), then two
    rounds, one after the other, of one bare 1 KB GET per shard (new connections in the
    first, as a first batch's index round has)."""
    import fsspec.implementations.http  # noqa: F401

    ds = ofindex.open(url)
    storage, files = ds._table.storage, [s.url for s in ds.shards]
    began = time.time()
    t = time.perf_counter()
    run_floor(storage, files)
    run_floor(storage, files)
    return {"batch_s": time.perf_counter() - t, "began": began}


def run_floor(storage, urls: list[str], size: int = 1000) -> None:
    """One range GET of ``size`` bytes per URL, all at once, through the HTTP session the
    storage reads through: the floor of one round of that many requests (no planning, no
    checks)."""
    import asyncio

    client = storage.client

    async def go() -> None:
        session = await client.http_client.open_session()

        async def one(u: str) -> None:
            async with session.get(u, headers={"Range": f"bytes=0-{size - 1}"}) as r:
                await r.read()

        await asyncio.gather(*(one(u) for u in urls))

    client.run(go())


class RawFloor:
    """Rounds of bare 1 KB range GETs written on raw sockets (asyncio streams, HTTP/1.1
    keep-alive, no HTTP client library, nothing checked but the status and length): what the
    proxy and the server of this machine cost a round of requests before any client's own
    work. Runs an event loop of its own in the calling thread."""

    def __init__(self, port: int, paths: list[str], size: int = 1000) -> None:
        import asyncio

        self.loop = asyncio.new_event_loop()
        self.port, self.paths, self.size = port, paths, size
        self.conns: list = []

    def round(self) -> None:
        """One GET per path, all at once (the first after :meth:`reset` on new
        connections)."""
        self.loop.run_until_complete(self._round())

    def reset(self) -> None:
        """Close the connections: the next round opens new ones."""
        self.loop.run_until_complete(self._close())

    async def _round(self) -> None:
        import asyncio

        if not self.conns:
            self.conns = list(await asyncio.gather(
                *(asyncio.open_connection("127.0.0.1", self.port) for _ in self.paths)))
        await asyncio.gather(*(self._get(c, p) for c, p in zip(self.conns, self.paths,
                                                                strict=True)))

    async def _get(self, conn, path: str) -> None:
        reader, writer = conn
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     f"Range: bytes=0-{self.size - 1}\r\n\r\n".encode())
        head = (await reader.readuntil(b"\r\n\r\n")).lower()
        assert head.startswith(b"http/1.1 206"), head[:40]
        length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
        assert len(await reader.readexactly(length)) == self.size

    async def _close(self) -> None:
        for _, writer in self.conns:
            writer.close()
        for _, writer in self.conns:
            await writer.wait_closed()
        self.conns = []

    def close(self) -> None:
        """Close the connections (the proxy sees them end) and the event loop."""
        self.loop.run_until_complete(self._close())
        self.loop.close()


def interleaved(args, url: str, data: str, log: AccessLog, rtt: float) -> dict:
    """The first batch after open (a fresh process each), a warm batch (every page of index
    cached) and the two floors, one of each per round, ``args.repeats`` rounds."""
    total = args.shards * args.records_per_shard
    ds = ofindex.open(url)
    ds[list(range(0, total, 16))]  # every page of index (pages hold at least 16 records)
    with ofindex.open(data) as local:
        expected = [local[i] for i in range(total)]
    storage = ds._table.storage
    calls = StorageCalls(ds._table.storage)
    files = [s.url for s in ds.shards]
    rng = np.random.default_rng(args.seed + 7)
    rows: dict[str, list[dict]] = {"cold": [], "cold_floor": [], "raw_cold_floor": [],
                                   "warm": [], "floor_round": [], "raw_floor_round": [],
                                   "floor_request": []}
    proxy_port = int(url.split(":")[2].split("/")[0])
    raw = RawFloor(proxy_port, ["/" + u.split("/", 3)[3] for u in files])

    def timed_rounds(fn) -> dict:
        log.take_timed()
        calls.take()
        t = time.perf_counter()
        fn()
        wall = time.perf_counter() - t
        reqs = log.take_timed()
        return {"wall_s": wall, "requests": len(reqs),
                "rounds": request_rounds([(q[4], q[5]) for q in reqs], rtt),
                "client_rounds": calls.take() or 1}  # (the floors: one gather)

    for k in range(args.repeats):
        log.take_timed()
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--cold-child", url,
                              data, str(args.seed + 100 + k), str(args.batch)],
                             capture_output=True, text=True, check=True)
        child = json.loads(out.stdout.strip().splitlines()[-1])
        assert child["ok"], "first batch differs from the local copy"
        reqs = [q for q in log.take_timed() if q[4] >= child["began"] - 0.002]  # not the open's
        rows["cold"].append({
            "wall_s": child["batch_s"], "open_s": child["open_s"], "requests": len(reqs),
            "heads": sum(q[0] == "HEAD" for q in reqs),
            "index_requests": sum(q[1].endswith(".ofidx") for q in reqs),
            "rounds": request_rounds([(q[4], q[5]) for q in reqs], rtt),
            "client_rounds": child["client_rounds"]})
        log.take_timed()
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--cold-floor-child",
                              url], capture_output=True, text=True, check=True)
        floor = json.loads(out.stdout.strip().splitlines()[-1])
        reqs = [q for q in log.take_timed() if q[4] >= floor["began"] - 0.002]
        rows["cold_floor"].append({
            "wall_s": floor["batch_s"], "requests": len(reqs), "client_rounds": 2,
            "rounds": request_rounds([(q[4], q[5]) for q in reqs], rtt)})
        idx = rng.choice(total, size=args.batch, replace=False).tolist()
        got: list = []
        rows["warm"].append(timed_rounds(lambda idx=idx, got=got: got.extend(ds.__getitems__(idx))))
        assert got == [expected[i] for i in idx], "warm batch"
        raw.reset()
        rows["raw_cold_floor"].append(timed_rounds(lambda: (raw.round(), raw.round())))
        rows["raw_cold_floor"][-1]["client_rounds"] = 2
        rows["floor_round"].append(timed_rounds(lambda: run_floor(storage, files)))
        rows["raw_floor_round"].append(timed_rounds(raw.round))
        rows["floor_request"].append(timed_rounds(lambda: run_floor(storage, files[:1])))
    out_rows: dict = {"repeats": args.repeats}
    for name, got_rows in rows.items():
        row = {key: spread([r[key] for r in got_rows]) for key in got_rows[0]}
        row["rtts"] = {key: v / rtt for key, v in row["wall_s"].items()}
        out_rows[name] = row
    ratios = [w["wall_s"] / f["wall_s"] for w, f in zip(rows["warm"], rows["floor_round"],
                                                         strict=True)]
    out_rows["warm_over_floor_round"] = spread(ratios)
    ratios = [c["wall_s"] / f["wall_s"] for c, f in zip(rows["cold"], rows["cold_floor"],
                                                         strict=True)]
    out_rows["cold_over_floor"] = spread(ratios)
    raw.close()
    ds.close()
    return out_rows


def run(args) -> dict:
    rtt = args.rtt_ms / 1000
    work = tempfile.mkdtemp(prefix="bench-remote-")
    data = os.path.join(work, "data")
    total = args.shards * args.records_per_shard
    write_dataset(data, total, args.shards, kind="random", record_size=args.record_size,
                  index=False, seed=1)
    ofindex.build_index(data)
    local = ofindex.open(data)
    rng = np.random.default_rng(args.seed)
    results: dict = {
        "config": {"rtt_ms": args.rtt_ms, "shards": args.shards, "records": total,
                   "record_size": args.record_size, "batch": args.batch,
                   "dataset_bytes": sum(s.bytes for s in local.shards),
                   "load_average": os.getloadavg(), "cpus": os.cpu_count()},
    }
    with servers.start_nginx(work, timed=True) as nginx:
        port = int(nginx.url.rsplit(":", 1)[1])
        with _proxy_process(port, args.rtt_ms) as proxy_port:
            url = f"http://127.0.0.1:{proxy_port}/data"
            log = AccessLog(nginx.log)
            log.take()

            wall, ds = timed(lambda: ofindex.open(url))
            n, sent, _ = log.take()
            results["open_manifest_first"] = {"wall_s": wall, "rtts": wall / rtt, "requests": n,
                                              "note": "includes importing aiohttp/fsspec.http"}
            wall, ds = timed(lambda: ofindex.open(url))
            n, sent, _ = log.take()
            results["open_manifest"] = {"wall_s": wall, "rtts": wall / rtt, "requests": n}
            results["rounds"] = interleaved(args, url, data, log, rtt)

            def batch_case(name, make_idx, fetch, repeats, check=True):
                walls, reqs, sents, useds = [], [], [], []
                for _ in range(repeats):
                    idx = make_idx()
                    log.take()
                    wall, got = timed(lambda idx=idx: fetch(idx))
                    n, sent, _ = log.take()
                    if check:
                        assert got == [local[int(i)] for i in idx], name
                    walls.append(wall)
                    reqs.append(n)
                    sents.append(sent)
                    useds.append(sum(len(r) for r in got))
                w = statistics.median(walls)
                results[name] = {
                    "wall_s": w, "rtts": w / rtt, "requests": statistics.median(reqs),
                    "rtts_min": min(walls) / rtt, "rtts_max": max(walls) / rtt,
                    "bytes_transferred": int(statistics.median(sents)),
                    "bytes_used": int(statistics.median(useds)),
                    "transfer_over_used":
                        statistics.median(sents) / max(1, statistics.median(useds)),
                    "repeats": repeats,
                }
                return results[name]

            def rand_idx():
                return rng.choice(total, size=args.batch, replace=False)

            getitems = ds.__getitems__
            # in this process (connections open, the server known): pages fetched as they come
            batch_case("batch_first_in_process", rand_idx, lambda idx: getitems(idx.tolist()), 1)
            default_gap = ds.max_gap
            batch_case("batch_fresh_pages", rand_idx, lambda idx: getitems(idx.tolist()),
                       args.repeats)
            ds.max_gap = 64 << 10
            batch_case("batch_warm_gap64k", rand_idx, lambda idx: getitems(idx.tolist()),
                       args.repeats)
            ds.max_gap = default_gap
            batch_case("naive_one_request_per_record", rand_idx,
                       lambda idx: [ds[int(i)] for i in idx], 1)

            def slice_idx():
                a = int(rng.integers(0, total - args.batch))
                return np.arange(a, a + args.batch)

            batch_case("slice", slice_idx, lambda idx: ds[int(idx[0]) : int(idx[-1]) + 1],
                       args.repeats)

            log.take()
            wall, n_iter = timed(lambda: sum(1 for _ in ds))
            n, sent, _ = log.take()
            results["iterate_all"] = {
                "wall_s": wall, "records": n_iter, "requests": n, "bytes_transferred": sent,
                "MB_per_s": sent / wall / 1e6, "requests_per_shard": n / args.shards,
            }
            results["single_file"] = single_file(args, work, proxy_port, log)
    shutil.rmtree(work, ignore_errors=True)
    rounds, naive = results["rounds"], results["naive_one_request_per_record"]
    results["batch_cold"] = {"wall_s": rounds["cold"]["wall_s"]["median"],
                             "rtts": rounds["cold"]["rtts"]["median"],
                             "requests": rounds["cold"]["requests"]["median"]}
    results["batch_warm"] = {"wall_s": rounds["warm"]["wall_s"]["median"],
                             "rtts": rounds["warm"]["rtts"]["median"],
                             "requests": rounds["warm"]["requests"]["median"]}
    results["summary"] = {
        "batch_rtts": rounds["warm"]["rtts"]["median"],
        "batch_goal_rtts": 1.2,
        "cold_rtts": rounds["cold"]["rtts"]["median"],
        "cold_goal_rtts": 3,
        "cold_requests": rounds["cold"]["requests"]["median"],
        "cold_rounds": rounds["cold"]["rounds"]["median"],
        "cold_rounds_sent": rounds["cold"]["client_rounds"]["max"],
        "warm_rounds": rounds["warm"]["rounds"]["median"],
        "warm_rounds_sent": rounds["warm"]["client_rounds"]["max"],
        "floor_round_rtts": rounds["floor_round"]["rtts"]["median"],
        "raw_floor_round_rtts": rounds["raw_floor_round"]["rtts"]["median"],
        "raw_cold_floor_rtts": rounds["raw_cold_floor"]["rtts"]["median"],
        "cold_floor_rtts": rounds["cold_floor"]["rtts"]["median"],
        "cold_over_floor": rounds["cold_over_floor"]["median"],
        "warm_over_floor_round": rounds["warm_over_floor_round"]["median"],
        "speedup_vs_naive": naive["wall_s"] / rounds["warm"]["wall_s"]["median"],
        "speedup_goal": 20,
        "batch_requests": rounds["warm"]["requests"]["median"],
        "slice_requests": results["slice"]["requests"],
    }
    return results


def single_file(args, work: str, proxy_port: int, log: AccessLog) -> dict:
    """16 random records of one big remote file opened without a manifest: paged sidecar
    (the default) against the whole sidecar, alternated, ``--repeats`` times each."""
    from ofindex.read.remote import pages

    d = os.path.join(work, "data", "single")
    write_dataset(d, args.single_records, 1, kind="random", record_size=args.single_record_size,
                  index=True, seed=2)
    path = os.path.join(d, "part-00000")
    url = f"http://127.0.0.1:{proxy_port}/data/single/part-00000"
    rng = np.random.default_rng(args.seed + 1)
    runs: dict[str, list[dict]] = {"paged": [], "whole": []}
    default = pages.WHOLE_BELOW_PAGES
    with ofindex.open(path) as local:
        sidecar_bytes = os.path.getsize(local.shards[0].index_url)
        for _ in range(args.repeats):
            idx = rng.choice(args.single_records, 16, replace=False)
            for mode in ("paged", "whole"):
                pages.WHOLE_BELOW_PAGES = default if mode == "paged" else 1 << 62
                try:
                    log.take()
                    t = time.perf_counter()
                    ds = ofindex.open(url)
                    got = ds[idx]
                    wall = time.perf_counter() - t
                    n, sent, meta, meta_sent = log.take_split()
                finally:
                    pages.WHOLE_BELOW_PAGES = default
                assert got == local[idx], mode
                runs[mode].append({"wall_s": wall, "requests": n, "bytes": sent,
                                   "index_requests": meta, "index_bytes": meta_sent})
    out: dict = {"records": args.single_records, "record_size": args.single_record_size,
                 "sidecar_bytes": sidecar_bytes,
                 "read": 16, "repeats": args.repeats}
    for mode, rows in runs.items():
        out[mode] = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        out[mode]["bytes_min"] = min(r["bytes"] for r in rows)
        out[mode]["bytes_max"] = max(r["bytes"] for r in rows)
        out[mode]["wall_s_min"] = min(r["wall_s"] for r in rows)
        out[mode]["wall_s_max"] = max(r["wall_s"] for r in rows)
    return out


def report(r: dict) -> None:
    c = r["config"]
    print(f"dataset: {c['shards']} shards, {c['records']} records of ~{c['record_size']} B, "
          f"{c['dataset_bytes'] / 1e6:.1f} MB; RTT {c['rtt_ms']} ms; batch {c['batch']}")
    for name in ("open_manifest_first", "open_manifest"):
        o = r[name]
        print(f"{name:34s} {o['wall_s'] * 1e3:8.1f} ms {o['rtts']:6.1f} RTT "
              f"{o['requests']:6d} req")
    rounds = r["rounds"]
    print(f"interleaved rounds ({rounds['repeats']}; load average {c['load_average'][0]:.1f} "
          f"on {c['cpus']} CPUs): median [min-max]")
    for name, what in (("cold", "first batch after open (new process)"),
                       ("cold_floor", "floor: 2 rounds of bare GETs (new proc.)"),
                       ("raw_cold_floor", "floor: the same on raw sockets"),
                       ("warm", "warm batch (index cached)"),
                       ("floor_round", f"floor: {c['shards']} bare GETs at once"),
                       ("raw_floor_round", "floor: the same on raw sockets"),
                       ("floor_request", "floor: 1 bare GET")):
        x = rounds[name]
        print(f"{what:40s} {x['rtts']['median']:5.2f} RTT [{x['rtts']['min']:.2f}-"
              f"{x['rtts']['max']:.2f}] {x['requests']['median']:5.0f} req "
              f"{x['client_rounds']['max']:2.0f} rounds sent, "
              f"{x['rounds']['median']:.0f} [{x['rounds']['min']:.0f}-"
              f"{x['rounds']['max']:.0f}] seen by nginx")
    ratio = rounds["warm_over_floor_round"]
    print(f"warm batch / one bare round: {ratio['median']:.2f} [{ratio['min']:.2f}-"
          f"{ratio['max']:.2f}]")
    ratio = rounds["cold_over_floor"]
    print(f"first batch / two bare rounds in a new process: {ratio['median']:.2f} "
          f"[{ratio['min']:.2f}-{ratio['max']:.2f}]")
    for name in ("batch_first_in_process", "batch_fresh_pages", "batch_warm_gap64k",
                 "naive_one_request_per_record", "slice"):
        x = r[name]
        print(f"{name:34s} {x['wall_s'] * 1e3:8.1f} ms {x['rtts']:6.1f} RTT "
              f"{x['requests']:6.0f} req  {x['bytes_transferred'] / 1e3:9.1f} kB sent / "
              f"{x['bytes_used'] / 1e3:7.1f} kB used ({x['transfer_over_used']:.1f}x)")
    it = r["iterate_all"]
    print(f"{'iterate all':34s} {it['wall_s'] * 1e3:8.1f} ms {'':10s} {it['requests']:6d} req  "
          f"{it['MB_per_s']:.0f} MB/s, {it['requests_per_shard']:.1f} req/shard")
    one = r.get("single_file")
    if one:
        for mode in ("paged", "whole"):
            x = one[mode]
            print(f"{'1 file, ' + mode + ' sidecar, open+16':34s} {x['wall_s'] * 1e3:8.1f} ms "
                  f"{'':10s} {x['requests']:6.0f} req  {x['bytes'] / 1e3:9.1f} kB sent "
                  f"(index {x['index_bytes'] / 1e3:.1f} kB; {x['bytes_min'] / 1e3:.1f}-"
                  f"{x['bytes_max'] / 1e3:.1f} kB over {one['repeats']} runs)")
    s = r["summary"]
    print(f"first batch after open: {s['cold_rtts']:.2f} RTT (goal <= {s['cold_goal_rtts']}), "
          f"{s['cold_requests']:.0f} requests in {s['cold_rounds_sent']:.0f} rounds")
    print(f"batch of {c['batch']} warm: {s['batch_rtts']:.2f} RTT (goal <= "
          f"{s['batch_goal_rtts']}), "
          f"{s['speedup_vs_naive']:.1f}x faster than one request per record "
          f"(goal >= {s['speedup_goal']}x)")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--cold-child"]:  # one first batch, in a process of its own
        url, data, seed, batch = argv[1:5]
        print(json.dumps(cold_child(url, data, int(seed), int(batch))))
        return
    if argv[:1] == ["--cold-floor-child"]:
        print(json.dumps(cold_floor_child(argv[1])))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rtt-ms", type=float, default=20.0)
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--records-per-shard", type=int, default=2000)
    p.add_argument("--record-size", type=int, default=1000)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--single-records", type=int, default=1_000_000,
                   help="records of the one file opened without a manifest")
    p.add_argument("--single-record-size", type=int, default=16)
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--plot", help="write a PNG bar chart of wall times (RTTs) here")
    # (smoke: batches of 64, so that the one-request-per-record loop pays for the fresh
    # processes of the first batch and its floor)
    args = parse_args(p, argv, shards=4, records_per_shard=200, repeats=1, rtt_ms=5.0,
                      single_records=5000, batch=64)
    r = run(args)
    report(r)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(r, f, indent=2)
    if args.plot:
        plot(r, args.plot)


def plot(r: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["open_manifest", "batch_cold", "batch_warm", "slice",
             "naive_one_request_per_record"]
    rtts = [r[n]["rtts"] for n in names]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.barh(names, rtts)
    ax.set_xscale("log")
    ax.axvline(5, linestyle="--", color="grey")
    ax.set_xlabel(f"wall time in RTTs (RTT = {r['config']['rtt_ms']} ms), log scale")
    ax.set_title(f"{r['config']['batch']} records from {r['config']['shards']} shards over HTTP")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
