"""Remote random access benchmark: ofindex batches vs one request per record, at +20 ms RTT.

Serves a 16-shard dataset from Debian nginx behind a delaying TCP proxy on loopback
(``tools/latency_proxy.py``) and measures, in one run:

* open through the manifest (requests, wall time);
* 256 random records with ``ds.__getitems__`` (one coalesced, concurrent batch), cold (the
  shards' sidecars fetched on first touch) and warm, at the default ``max_gap`` and at 64 KiB;
* the naive peer: the same 256 records, one request per record in a loop;
* contiguous slices ``ds[a:a+256]``;
* sequential iteration over the whole dataset (large streamed reads);
* one file of ``--single-records`` records opened without a manifest (its sidecar read by
  pages after a 512-byte header at open) and 16 random records read from it, against the
  same with the whole sidecar fetched (ofindex before issue 30): bytes and requests by file
  kind, wall time.

Wall time is reported in RTTs, plus requests per batch and bytes transferred vs bytes used
(from nginx's access log). ``--out`` writes the figures as JSON.

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
sys.path[:0] = [os.path.dirname(HERE), os.path.join(os.path.dirname(HERE), "tests"), HERE]

import numpy as np  # noqa: E402
import servers  # noqa: E402
from benchlib import parse_args  # noqa: E402

import ofindex  # noqa: E402
from ofindex.cli.synthetic import write_dataset  # noqa: E402

_LOG = re.compile(r'"(?:GET|HEAD) (\S+) [^"]*" (\d{3}) (\d+)')


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
                   "dataset_bytes": sum(s.bytes for s in local.shards)},
    }
    with servers.start_nginx(work) as nginx:
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
            batch_case("batch_cold", rand_idx, lambda idx: getitems(idx.tolist()), 1)
            default_gap = ds.max_gap
            batch_case("batch_warm", rand_idx, lambda idx: getitems(idx.tolist()), args.repeats)
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
    b, naive = results["batch_warm"], results["naive_one_request_per_record"]
    results["summary"] = {
        "batch_rtts": b["rtts"],
        "batch_goal_rtts": 5,
        "speedup_vs_naive": naive["wall_s"] / b["wall_s"],
        "speedup_goal": 20,
        "batch_requests": b["requests"],
        "slice_requests": results["slice"]["requests"],
    }
    return results


def single_file(args, work: str, proxy_port: int, log: AccessLog) -> dict:
    """16 random records of one big remote file opened without a manifest: paged sidecar
    (the default) against the whole sidecar, alternated, ``--repeats`` times each."""
    from ofindex.read import pages

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
    for name in ("batch_cold", "batch_warm", "batch_warm_gap64k", "naive_one_request_per_record",
                 "slice"):
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
    print(f"batch of 256 warm: {s['batch_rtts']:.1f} RTT (goal <= {s['batch_goal_rtts']}), "
          f"{s['speedup_vs_naive']:.1f}x faster than one request per record "
          f"(goal >= {s['speedup_goal']}x)")


def main(argv: list[str] | None = None) -> None:
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
    args = parse_args(p, argv, shards=4, records_per_shard=200, repeats=2, rtt_ms=5.0,
                      single_records=5000)
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

    names = ["open_manifest", "batch_cold", "batch_warm", "batch_warm_gap64k", "slice",
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
