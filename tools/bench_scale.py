"""Scale simulation: 1e7 … 1e10 records in a synthetic object store (``tools/sim_store.py``).

For each scale (1e5 records per shard, ~200-byte records), a fresh child process opens the
dataset through its manifest and reads batches of 256 globally shuffled records
(``GlobalShuffleSampler``). Reported per scale:

* manifest size, open time, requests to open, RSS after open and peak RSS;
* per batch, **cold** (every cache emptied before the batch), **steady** (every sidecar
  header already checked, as after the first pass of a long epoch, and the page cache as it
  is: an epoch over a dataset far larger than the cache) and **warm** (the same batches
  again: their pages cached): request rounds, requests, bytes by kind, bytes moved per
  useful payload byte, and the modelled time per batch:
  ``sum over rounds of ceil(requests / concurrency) * RTT + bytes / bandwidth``;
* the same cold batches with whole sidecars (ofindex before paging), and the bytes a
  whole-shard downloader (MosaicML Streaming's model: a shard is fetched whole on first use)
  would move for them (computed, not run).

A page-size sweep at one scale measures bytes and modelled time per page size (the default
page size follows the mean record size: ``ofindex.read.pages.page_records_for``).

Usage: ``python tools/bench_scale.py [--scales 1e7,1e8,1e9,1e10] [--batches 8]``; JSON goes
to ``bench-results/scale.json``. ``--rate-limits`` runs the request-rate table instead (1, 64
and 1,024 readers against S3's limit: ``tools/bench_ratelimit.py``). Nothing is stored: the
store generates bytes on demand.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchlib import parse_args  # noqa: E402

PER_SHARD = 100_000
MEAN = 200
BATCH = 256


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Rounds:
    """Counts request rounds: each outermost storage call is one concurrent round."""

    NAMES = ("fetch_round", "fetch_many", "read_ranges", "read_ranges_concat", "read_all",
             "read", "stamp", "read_block")

    def __init__(self, storage, stats) -> None:
        self.stats, self.depth, self.log = stats, 0, []
        for name in self.NAMES:
            setattr(storage, name, self._wrap(getattr(storage, name)))

    def _wrap(self, fn):
        def wrapped(*args, **kwargs):
            self.depth += 1
            before = self.stats.snapshot()
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    after = self.stats.snapshot()
                    req = (after[0] - before[0]) + (after[2] - before[2])
                    if req:
                        self.log.append((req, after[1] - before[1]))
        return wrapped


def _model(rounds, rtt: float, bandwidth: float, concurrency: int) -> float:
    return sum(math.ceil(r / concurrency) * rtt + b / bandwidth for r, b in rounds)


def _clear(ds) -> None:
    cache = ds._table.shards[0].cache
    cache.pages.clear()
    for s in ds._table.shards:
        s.pager = None
        s.unload()


def _measure(ds, batches, stats, rounds, args, clear: bool) -> dict:
    from sim_store import OVERHEAD

    rows = []
    for idx in batches:
        if clear:
            _clear(ds)
        stats.reset()
        rounds.log.clear()
        t = time.perf_counter()
        got = ds.__getitems__(idx)
        wall = time.perf_counter() - t
        useful = sum(len(g) for g in got)
        by_kind = dict(stats.bytes)
        moved = sum(by_kind.values())
        rows.append({
            "rounds": len(rounds.log), "requests": sum(r for r, _ in rounds.log),
            "bytes": moved, "useful": useful, "data_bytes": by_kind.get("data", 0),
            "index_bytes": by_kind.get("sidecar", 0),
            "framing": OVERHEAD * len(idx),
            "modelled_s": _model(rounds.log, args.rtt, args.bandwidth, args.concurrency),
            "wall_s": wall,
        })
    n = len(rows)
    out = {k: sum(r[k] for r in rows) / n for k in rows[0]}
    out["max_rounds"] = max(r["rounds"] for r in rows)
    out["moved_per_useful"] = out["bytes"] / out["useful"]
    return out


def _headers_known(ds, sim) -> None:
    """Every shard's header checked already, as after the first pass of a long epoch (set
    directly: fetching 1e5 headers would take as long as the rest of the run)."""
    from ofindex.formats.framing import RecordFormat
    from ofindex.formats.sidecar_header import SidecarHeader, decode_header, encode_header
    from ofindex.read.pages import pager_of

    for k, shard in enumerate(ds._table.shards):
        pg = pager_of(shard)
        if pg is None:
            continue
        raw = encode_header(SidecarHeader(RecordFormat.TFRECORD, sim.count(k), sim.stamp(k),
                                          sim.shard_size(k)))
        pg.accept(decode_header(raw, path=shard.index_url))
        pg.fresh = True


def child(args) -> dict:
    import numpy as np
    import sim_store

    import ofindex
    from ofindex.read import pages
    from ofindex.shuffle import GlobalShuffleSampler

    records = int(float(args.child))
    shards = max(1, records // PER_SHARD)
    url = sim_store.dataset_url(records, shards, MEAN)
    sim = sim_store.dataset_named(url.split("://", 1)[1])
    manifest_bytes = len(sim.manifest)  # generated before timing
    if args.mode == "whole":
        pages.WHOLE_BELOW_PAGES = 1 << 62
    elif args.page_records:
        pages.MIN_PAGE_RECORDS = pages.MAX_PAGE_RECORDS = args.page_records
    stats = sim_store.STATS
    rss0 = _rss_mb()
    stats.reset()
    t = time.perf_counter()
    ds = ofindex.open(url, max_concurrency=args.concurrency)
    open_s = time.perf_counter() - t
    open_requests = stats.snapshot()[0] + stats.snapshot()[2]
    rss_open = _rss_mb()
    rounds = Rounds(ds._table.storage, stats)
    sampler = GlobalShuffleSampler(len(ds), seed=0)
    order = iter(sampler)
    need = args.batches * 2
    flat = np.fromiter((next(order) for _ in range(need * BATCH)), dtype=np.int64,
                       count=need * BATCH)
    batches = [flat[k * BATCH : (k + 1) * BATCH] for k in range(need)]
    first, second = batches[: args.batches], batches[args.batches :]
    out = {"records": records, "shards": shards, "mode": args.mode,
           "page_records": pages.page_records_for(PER_SHARD, PER_SHARD * (MEAN + 16))
           if args.mode == "paged" else None,
           "manifest_bytes": manifest_bytes, "open_s": open_s, "open_requests": open_requests,
           "rss_before_open_mb": rss0, "rss_after_open_mb": rss_open}
    out["cold"] = _measure(ds, first, stats, rounds, args, clear=True)
    if args.mode == "paged":
        _clear(ds)
        _headers_known(ds, sim)
        ds.__getitems__(np.concatenate(first))  # pages of `first` cached
        out["steady"] = _measure(ds, second, stats, rounds, args, clear=False)
        out["warm"] = _measure(ds, first, stats, rounds, args, clear=False)
    touched = [np.unique(np.searchsorted(ds.cumulative_counts, b, side="right")) for b in first]
    sizes = np.array([s.size for s in ds._table.shards], dtype=np.int64)
    useful = out["cold"]["useful"]
    whole_shards = float(np.mean([sizes[t].sum() for t in touched]))
    out["whole_shards"] = {"requests": float(np.mean([len(t) for t in touched])),
                           "bytes": whole_shards, "moved_per_useful": whole_shards / useful,
                           "modelled_s": args.rtt + whole_shards / args.bandwidth}
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def run_child(scale: str, mode: str, args, page_records: int = 0) -> dict:
    cmd = [sys.executable, __file__, "--child", scale, "--mode", mode, "--batches",
           str(args.batches), "--rtt", str(args.rtt), "--bandwidth", str(args.bandwidth),
           "--concurrency", str(args.concurrency), "--page-records", str(page_records)]
    got = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(got.stdout.strip().splitlines()[-1])


def _line(r: dict) -> str:
    c = r["cold"]
    text = (f"{r['records']:.0e} rec {r['shards']:>6} shards {r['mode']:<5} "
            f"manifest {r['manifest_bytes'] / 1e6:6.2f} MB open {r['open_s']:.2f} s "
            f"({r['open_requests']} req) rss {r['rss_after_open_mb']:.0f}/"
            f"{r['peak_rss_mb']:.0f} MB | cold: {c['max_rounds']} rounds "
            f"{c['requests']:.0f} req {c['bytes'] / 1e3:.0f} kB x{c['moved_per_useful']:.1f} "
            f"(index x{c['index_bytes'] / c['useful']:.1f}) {c['modelled_s'] * 1e3:.0f} ms")
    for k in ("steady", "warm"):
        if k in r:
            s = r[k]
            text += (f" | {k}: {s['max_rounds']} rounds {s['requests']:.0f} req "
                     f"x{s['moved_per_useful']:.1f} (index x{s['index_bytes'] / s['useful']:.1f}) "
                     f"{s['modelled_s'] * 1e3:.0f} ms")
    w = r["whole_shards"]
    text += f" | whole shards: x{w['moved_per_useful']:.0f} {w['modelled_s'] * 1e3:.0f} ms"
    return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scales", default="1e7,1e8,1e9,1e10")
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--rtt", type=float, default=0.020, help="seconds per request round trip")
    p.add_argument("--bandwidth", type=float, default=1e9, help="bytes per second")
    p.add_argument("--concurrency", type=int, default=256, help="requests in flight")
    p.add_argument("--whole-scales", default="1e7,1e8,1e9,1e10",
                   help="scales also run with whole sidecars (ofindex before paging)")
    p.add_argument("--sweep-scale", default="1e9", help="scale of the page-size sweep ('' skips)")
    p.add_argument("--sweep", default="16,32,64,256,1024,8192")
    p.add_argument("--out", default="bench-results/scale.json")
    p.add_argument("--rate-limits", action="store_true",
                   help="instead: the request-rate table of 1, 64 and 1,024 readers "
                   "(tools/bench_ratelimit.py, to bench-results/ratelimit.json)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="paged", help=argparse.SUPPRESS)
    p.add_argument("--page-records", type=int, default=0, help=argparse.SUPPRESS)
    args = parse_args(p, None, scales="1e7", batches=2, whole_scales="1e7", sweep_scale="")
    if args.child:
        print(json.dumps(child(args)))
        return
    if args.rate_limits:
        rate_limit_table(args.smoke)
        return
    results: dict = {"settings": {k: getattr(args, k) for k in
                                  ("batches", "rtt", "bandwidth", "concurrency")},
                     "per_shard": PER_SHARD, "mean_record_bytes": MEAN, "scales": [],
                     "sweep": []}
    whole = set(args.whole_scales.split(",")) if args.whole_scales else set()
    for scale in args.scales.split(","):
        for mode in ("paged", "whole") if scale in whole else ("paged",):
            r = run_child(scale, mode, args)
            results["scales"].append(r)
            print(_line(r), flush=True)
    if args.sweep_scale:
        for pr in (int(x) for x in args.sweep.split(",")):
            r = run_child(args.sweep_scale, "paged", args, pr)
            r["page_records"] = pr
            results["sweep"].append(r)
            c, s = r["cold"], r["steady"]
            print(f"sweep {args.sweep_scale}: page {pr:>5} records ({8 * pr} B): cold "
                  f"x{c['moved_per_useful']:.2f} {c['modelled_s'] * 1e3:.1f} ms, steady "
                  f"x{s['moved_per_useful']:.2f} {s['modelled_s'] * 1e3:.1f} ms", flush=True)
    if args.out is None:
        return  # a smoke run
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {args.out}")


# -- request-rate limits: 1, 64 and 1,024 readers (tools/bench_ratelimit.py) ------------------
def rate_limit_table(smoke: bool) -> None:
    """The request-rate table, measured and modelled by ``tools/bench_ratelimit.py``."""
    import bench_ratelimit

    bench_ratelimit.main(["--smoke"] if smoke else [])


if __name__ == "__main__":
    main()
