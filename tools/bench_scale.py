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
page size follows the mean record size: ``ofindex.read.remote.pages.page_records_for``).

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
import re
import resource
import subprocess
import sys
import time

import numpy as np

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
    cache.memory.clear()
    for s in ds._table.held():  # a compact manifest's shards not made yet hold nothing
        s.pager = None
        s.unload()
    manifest = getattr(ds._table.shards, "manifest", None)
    if manifest is not None:  # and its stamps pages are a cache too
        manifest._stamps.clear()
        ds._table.shards._made.clear()


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
    from ofindex.read.remote.pages import pager_of

    manifest = getattr(ds._table.shards, "manifest", None)
    if manifest is not None:  # a compact manifest's stamps, as after a long epoch
        manifest.fetch_stamps(range(len(manifest)))
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
    from ofindex.read.remote import pages
    from ofindex.shuffle import GlobalShuffleSampler

    records = int(float(args.child))
    shards = max(1, records // PER_SHARD)
    url = sim_store.dataset_url(records, shards, MEAN)
    sim = sim_store.dataset_named(url.split("://", 1)[1])
    manifest_bytes = len(sim_store.served_manifest(sim, sim_store.held_suffix()))  # made now
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


# -- later epochs from local disk (the data cache) ------------------------------------------
# A real HTTP server (nginx) behind the +20 ms latency proxy of tools/bench_remote.py: two
# globally shuffled epochs (batches of 256) and two sequential passes over one dataset,
# without the data cache and with it at several block sizes (whole shards the largest),
# each configuration with a fresh cache_dir, in interleaved rounds. Requests and bytes are
# nginx's (its access log), data and index apart. Peers in the same rounds: the same epochs
# over the local files ("local": what a later epoch from local disk can hope for), and the
# data files fetched whole in one concurrent round through the same proxy ("download": the
# floor of a first epoch that must move every byte). ``--dc-rate`` caps the proxy's
# responses at that many bytes per second, all connections together (the throughput of one
# S3/GCS connection stream is ~100 MB/s); without it the link is loopback, whose speed is
# what the machine's cores can push through nginx, the proxy and the client.

DATA_CACHE_BLOCKS = {"256 KiB": 256 << 10, "1 MiB": 1 << 20, "4 MiB": 4 << 20,
                     "whole shard": 1 << 40}


class DataLog:
    """nginx's requests since the last ``take()``: data GETs (and their bytes), index GETs
    (sidecars, manifest) and HEADs (the staleness checks of data files)."""

    LINE = re.compile(r'"(GET|HEAD) (\S+) [^"]*" (\d{3}) (\d+)')

    def __init__(self, path: str) -> None:
        self.path, self.pos = path, 0

    def take(self) -> dict:
        with open(self.path, "rb") as f:
            f.seek(self.pos)
            chunk = f.read().decode("utf-8", "replace")
            self.pos = f.tell()
        out = {"data_requests": 0, "data_bytes": 0, "index_requests": 0, "head_requests": 0}
        for method, path, _, sent in self.LINE.findall(chunk):
            if not path.startswith(("/data/", "/data.ofindex/")):
                continue  # e.g. nginx's readiness probe
            if method == "HEAD":
                out["head_requests"] += 1
            elif path.endswith((".ofidx", ".json")):
                out["index_requests"] += 1
            else:
                out["data_requests"] += 1
                out["data_bytes"] += int(sent)
        return out


def _data_cache_run(url: str, cache_dir: str, block: int | None, local, log, epochs,
                    budget: int, sequential: bool) -> list[dict]:
    """The epochs of one configuration; each row: wall, first batch, data/index requests."""
    import numpy as np

    import ofindex
    from ofindex.cache.data import DataCache

    ds = ofindex.open(url, cache_dir=cache_dir, data_cache_bytes=budget if block else 0)
    if block == DOWNLOAD:
        return [_download(ds, log)]
    if block:
        ds.data_cache = DataCache(cache_dir, budget, block_bytes=block)
    rows = []
    for epoch, order in enumerate(epochs):
        if epoch == len(epochs) - 1 and block:  # the last epoch: a new open, as a new run
            ds = ofindex.open(url, cache_dir=cache_dir, data_cache_bytes=budget)
            ds.data_cache = DataCache(cache_dir, budget, block_bytes=block)
        log.take()
        got = []  # checked after the clock stops: the figures are the reads alone
        cpu = time.process_time()
        t = last = time.perf_counter()
        batches = []  # each batch's wall time
        if sequential:
            for batch in ds.iter_batches(BATCH):
                got.append(batch)
                now = time.perf_counter()
                batches.append(now - last)
                last = now
        else:
            for k in range(0, len(order), BATCH):
                got.append(ds[order[k : k + BATCH]])
                now = time.perf_counter()
                batches.append(now - last)
                last = now
        wall = time.perf_counter() - t
        cpu = time.process_time() - cpu
        first = batches[0]
        want = local[np.arange(len(local))] if sequential else local[order]
        if [r for batch in got for r in batch] != want:
            raise AssertionError(f"epoch {epoch}: records differ from the local files'")
        # the median batch: what a batch costs when this process is not descheduled (on
        # a loaded machine a few batches of each epoch wait tens of ms for a core)
        rows.append({"wall_s": wall, "first_batch_s": first, "cpu_s": cpu,
                     "median_batch_ms": float(np.median(batches[1:] or batches)) * 1e3,
                     **log.take()})
    return rows


#: The configuration that fetches the data files whole, once (no epochs).
DOWNLOAD = -1


def _download(ds, log) -> dict:
    """The dataset's data files fetched whole in one concurrent round of its storage."""
    storage = ds._table.storage
    paths = [shard.path for shard in ds._table.shards]
    sizes = [shard.bytes for shard in ds.shards]
    log.take()
    cpu = time.process_time()
    t = time.perf_counter()
    got = storage.read_ranges(paths, [0] * len(paths), sizes)
    wall = time.perf_counter() - t
    cpu = time.process_time() - cpu
    if [len(g) for g in got] != sizes:
        raise AssertionError("the download is short")
    return {"wall_s": wall, "first_batch_s": wall, "cpu_s": cpu, "median_batch_ms": wall * 1e3,
            **log.take()}


def data_cache_bench(args) -> dict:
    """Epoch 1 vs epoch 2 with the data cache through the +20 ms proxy (see above)."""
    import shutil
    import statistics
    import tempfile

    import numpy as np

    sys.path[:0] = [os.path.dirname(HERE)]
    from bench_remote import _proxy_process

    import ofindex
    from ofindex.cli.synthetic import write_dataset
    from ofindex.shuffle import GlobalShuffleSampler
    from tests.kit import servers

    work = tempfile.mkdtemp(prefix="bench-datacache-")
    data = os.path.join(work, "data")
    total = args.dc_shards * args.dc_records
    write_dataset(data, total, args.dc_shards, kind="random", record_size=args.dc_record_size,
                  index=False, seed=1)
    ofindex.build_index(data)
    local = ofindex.open(data)
    size = sum(s.bytes for s in local.shards)
    budget = 2 * size
    sampler = GlobalShuffleSampler(total, seed=0)
    epochs = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        epochs.append(np.fromiter(iter(sampler), dtype=np.int64, count=total))
    blocks = {name: DATA_CACHE_BLOCKS[name] for name in args.dc_blocks.split(",") if name}
    configs = ["none", *blocks, "local", "download"]
    runs: dict[str, dict[str, list[list[dict]]]] = {
        c: {"shuffled": [], "sequential": []} for c in configs}
    with servers.start_nginx(work) as nginx:
        port = int(nginx.url.rsplit(":", 1)[1])
        with _proxy_process(port, args.rtt * 1000, args.dc_rate) as proxy_port:
            url = f"http://127.0.0.1:{proxy_port}/data"
            log = DataLog(nginx.log)
            ofindex.open(url)  # imports and the first connection, outside the timings
            for r in range(args.dc_rounds):
                for c in configs[r % len(configs):] + configs[: r % len(configs)]:
                    for pattern in ("shuffled",) if c == "download" else ("shuffled",
                                                                            "sequential"):
                        cache_dir = tempfile.mkdtemp(dir=work)
                        block = DOWNLOAD if c == "download" else blocks.get(c)
                        rows = _data_cache_run(data if c == "local" else url, cache_dir,
                                               block, local, log, epochs, budget,
                                               pattern == "sequential")
                        runs[c][pattern].append(rows)
                        shutil.rmtree(cache_dir)
                        print(f"round {r} {c:>11} {pattern:>10}: " + ", ".join(
                            f"{x['wall_s']:.2f} s {x['data_requests']} req"
                            for x in rows), flush=True)
    shutil.rmtree(work, ignore_errors=True)

    def summary(rows: list[list[dict]], epoch: int) -> dict:
        out = {}
        for key in rows[0][epoch]:
            values = [r[epoch][key] for r in rows]
            out[key] = statistics.median(values)
            out[key + "_min"], out[key + "_max"] = min(values), max(values)
        return out

    results: dict = {"config": {"rtt_ms": args.rtt * 1000, "rate": args.dc_rate,
                                "shards": args.dc_shards,
                                "records": total, "record_size": args.dc_record_size,
                                "dataset_bytes": size, "data_cache_bytes": budget,
                                "batch": BATCH, "rounds": args.dc_rounds,
                                "epochs": "1 and 2 in one open; 3 in a new open",
                                "default_block": "1 MiB"},
                     "configs": {}}
    for c in configs:
        results["configs"][c] = {
            pattern: [summary(runs[c][pattern], e) for e in range(len(runs[c][pattern][0]))]
            for pattern in ("shuffled", "sequential") if runs[c][pattern]}
    base = results["configs"]["none"]["shuffled"][0]["wall_s"]
    default = results["configs"]["1 MiB"]["shuffled"]
    # ratios within each round (the configurations of a round ran one after the other)
    ratios = [r[0]["wall_s"] / r[1]["wall_s"] for r in runs["1 MiB"]["shuffled"]]
    against = [u[0]["wall_s"] / r[1]["wall_s"]
               for u, r in zip(runs["none"]["shuffled"], runs["1 MiB"]["shuffled"], strict=True)]
    results["summary"] = {
        "uncached_epoch_s": base, "epoch1_s": default[0]["wall_s"],
        "epoch2_s": default[1]["wall_s"], "epoch2_data_requests": default[1]["data_requests"],
        "epoch3_new_open_data_requests": default[2]["data_requests"],
        "epoch1_over_epoch2": statistics.median(ratios),
        "epoch1_over_epoch2_min": min(ratios), "epoch1_over_epoch2_max": max(ratios),
        "uncached_over_epoch2": statistics.median(against),
        "uncached_over_epoch2_min": min(against), "uncached_over_epoch2_max": max(against),
        "goal": 10}
    # the peers, within each round: a local epoch, and the whole download
    over_local = [r[1]["wall_s"] / lo[1]["wall_s"]
                  for r, lo in zip(runs["1 MiB"]["shuffled"], runs["local"]["shuffled"],
                                   strict=True)]
    beyond = [r[0]["wall_s"] - d[0]["wall_s"]
              for r, d in zip(runs["1 MiB"]["shuffled"], runs["download"]["shuffled"],
                              strict=True)]
    batch_over_local = [r[1]["median_batch_ms"] / lo[1]["median_batch_ms"]
                        for r, lo in zip(runs["1 MiB"]["shuffled"], runs["local"]["shuffled"],
                                         strict=True)]
    results["summary"].update({
        "epoch2_median_batch_ms": default[1]["median_batch_ms"],
        "local_median_batch_ms": results["configs"]["local"]["shuffled"][1]["median_batch_ms"],
        "median_batch_over_local": statistics.median(batch_over_local),
        "median_batch_over_local_min": min(batch_over_local),
        "median_batch_over_local_max": max(batch_over_local),
        "local_epoch_s": results["configs"]["local"]["shuffled"][1]["wall_s"],
        "epoch2_over_local": statistics.median(over_local),
        "epoch2_over_local_min": min(over_local), "epoch2_over_local_max": max(over_local),
        "download_s": results["configs"]["download"]["shuffled"][0]["wall_s"],
        "epoch1_beyond_download_s": statistics.median(beyond),
        "epoch1_beyond_download_s_min": min(beyond),
        "epoch1_beyond_download_s_max": max(beyond)})
    return results
# -- manifests at 1e5 and 1e6 shards: JSON, compact, Parquet (issue 32) -----------------------
#: Manifest kinds compared: the JSON manifest, the compact one, and the same columns as
#: Parquet (pyarrow) with row groups of 65,536 rows (the compact manifest's eager pages) or
#: of 128 rows (its stamps pages).
MANIFEST_KINDS = ("json", "bin", "parquet-64k", "parquet-128")
PARQUET_ROWS = {"parquet-64k": 1 << 16, "parquet-128": 128}


def _sim_env(directory: str, kind: str) -> dict[str, str]:
    import sim_store

    held = "json" if kind == "json" else "bin"
    return {**os.environ, sim_store.CACHE_ENV: directory, sim_store.KIND_ENV: held}


def generate_manifest(records: int, shards: int, kind: str, directory: str) -> None:
    """Write a synthetic dataset's manifest of ``kind`` to ``directory`` (run in its own
    process: the opening process's RSS must not count the generator's lists)."""
    import sim_store

    sim = sim_store.dataset_named(f"ds-{records}-{shards}-{MEAN}")
    if kind in ("json", "bin"):
        sim_store.manifest_bytes(sim, kind)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    firsts = np.arange(shards + 1, dtype=np.int64) * records // shards
    framed = np.asarray(sim.framed_before(firsts), dtype=np.int64)
    table = pa.table({
        "records": np.diff(firsts), "sizes": np.diff(framed),
        "flags": np.zeros(shards, dtype=np.uint8),
        "names": [f"part-{k:05d}" for k in range(shards)],
        "body_crc": np.zeros(shards, dtype=np.uint32),
        "fingerprint": [f"etag:sim-{sim.name}-{k}" for k in range(shards)]})
    path = os.path.join(directory, f"{sim.name}.{kind}")
    pq.write_table(table, path + ".tmp", row_group_size=PARQUET_ROWS[kind], compression="zstd")
    os.replace(path + ".tmp", path)


def _open_rounds():
    """Counts request rounds of every remote storage (class-wide, so that ``open`` is seen)."""
    import sim_store

    from ofindex.storage.fsspec_storage import FsspecStorage

    return Rounds(FsspecStorage, sim_store.STATS)


def manifest_child(args) -> dict:
    """Open one synthetic dataset through one kind of manifest and read a first batch."""
    import sim_store

    import ofindex
    from ofindex.shuffle import GlobalShuffleSampler

    records, kind = int(float(args.manifest_child)), args.mode
    shards = records // PER_SHARD
    url = sim_store.dataset_url(records, shards, MEAN)
    stats = sim_store.STATS
    if kind.startswith("parquet"):
        return _parquet_child(url, kind, shards, records)
    rounds = _open_rounds()
    rss0 = _rss_mb()
    stats.reset()
    t = time.perf_counter()
    ds = ofindex.open(url, max_concurrency=args.concurrency)
    open_s = time.perf_counter() - t
    opened = {"open_s": open_s, "open_requests": stats.snapshot()[0] + stats.snapshot()[2],
              "open_rounds": len(rounds.log), "open_bytes": stats.snapshot()[1],
              "rss_before_open_mb": rss0, "rss_after_open_mb": _rss_mb()}
    order = iter(GlobalShuffleSampler(len(ds), seed=0))
    batch = np.fromiter((next(order) for _ in range(BATCH)), dtype=np.int64, count=BATCH)
    rounds.log.clear()
    stats.reset()
    t = time.perf_counter()
    got = ds.__getitems__(batch)
    wall = time.perf_counter() - t
    assert [int.from_bytes(g[:8], "little") for g in got] == batch.tolist()
    return {"records": records, "shards": shards, "kind": kind, **opened,
            "manifest_bytes": len(sim_store.served_manifest(
                sim_store.dataset_named(url.split("://", 1)[1]), kind)),
            "first_batch": {"rounds": len(rounds.log), "requests": sum(r for r, _ in rounds.log),
                            "bytes": dict(stats.bytes), "wall_s": wall},
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _parquet_child(url: str, kind: str, shards: int, records: int) -> dict:
    """What opening a Parquet manifest costs: the footer and the four columns every read
    needs (through fsspec's file object, as pyarrow reads a bucket), then the stamps of the
    256 shards of a first batch (their row groups' two columns)."""
    import fsspec
    import pyarrow.parquet as pq
    import sim_store

    from ofindex.shuffle import GlobalShuffleSampler

    stats = sim_store.STATS
    rss0 = _rss_mb()
    stats.reset()
    t = time.perf_counter()
    # no fsspec read-ahead: the bytes pyarrow asks for (its default 5 MB blocks would cache
    # a small manifest whole at open)
    handle = fsspec.filesystem("simstore").open(f"{url}/ofindex-manifest.{kind}", "rb",
                                                cache_type="none")
    pf = pq.ParquetFile(handle)
    eager = pf.read(columns=["records", "sizes", "flags", "names"])
    cumulative = np.cumsum(eager.column("records").to_numpy())
    open_s = time.perf_counter() - t
    opened = {"open_s": open_s, "open_requests": stats.snapshot()[0] + stats.snapshot()[2],
              "open_rounds": stats.snapshot()[0] + stats.snapshot()[2],  # one read at a time
              "open_bytes": stats.snapshot()[1], "rss_before_open_mb": rss0,
              "rss_after_open_mb": _rss_mb()}
    order = iter(GlobalShuffleSampler(records, seed=0))
    batch = np.fromiter((next(order) for _ in range(BATCH)), dtype=np.int64, count=BATCH)
    touched = np.unique(np.searchsorted(cumulative, batch, side="right"))
    groups = sorted(set((touched // PARQUET_ROWS[kind]).tolist()))
    stats.reset()
    t = time.perf_counter()
    pf.read_row_groups(groups, columns=["body_crc", "fingerprint"])
    wall = time.perf_counter() - t
    n = stats.snapshot()[0] + stats.snapshot()[2]
    return {"records": records, "shards": shards, "kind": kind, **opened,
            "manifest_bytes": len(sim_store.served_manifest(
                sim_store.dataset_named(url.split("://", 1)[1]), kind)),
            "first_batch": {"rounds": n, "requests": n, "bytes": dict(stats.bytes),
                            "wall_s": wall, "stamps_only": True},
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_manifests(args) -> dict:
    """Every manifest kind at every scale, ``--manifest-rounds`` times, interleaved."""
    directory = os.path.abspath(args.manifest_cache)
    os.makedirs(directory, exist_ok=True)
    scales = [int(float(x)) for x in args.manifest_scales.split(",")]
    kinds = [k for k in args.manifest_kinds.split(",") if k]
    for records in scales:
        for kind in kinds:
            subprocess.run([sys.executable, __file__, "--generate", str(records), "--mode", kind],
                           check=True, env=_sim_env(directory, kind))
    runs: dict[tuple[int, str], list[dict]] = {}
    for _ in range(args.manifest_rounds):
        for records in scales:
            for kind in kinds:
                cmd = [sys.executable, __file__, "--manifest-child", str(records), "--mode", kind,
                       "--concurrency", str(args.concurrency)]
                got = subprocess.run(cmd, check=True, capture_output=True, text=True,
                                     env=_sim_env(directory, kind))
                row = json.loads(got.stdout.strip().splitlines()[-1])
                runs.setdefault((records, kind), []).append(row)
                print(_manifest_line(row), flush=True)
    return {"settings": {"rounds": args.manifest_rounds, "per_shard": PER_SHARD,
                         "concurrency": args.concurrency, "batch": BATCH,
                         "load": os.getloadavg()[0]},
            "rows": [_summary(rows) for rows in runs.values()]}


def _summary(rows: list[dict]) -> dict:
    """One case over its rounds: the last run's figures, open time and peak RSS as median,
    min and max."""
    out = dict(rows[-1])
    for key in ("open_s", "peak_rss_mb", "rss_after_open_mb"):
        values = sorted(r[key] for r in rows)
        out[key] = float(np.median(values))
        out[key + "_min"], out[key + "_max"] = values[0], values[-1]
    out["runs"] = len(rows)
    return out


def _manifest_line(r: dict) -> str:
    b = r["first_batch"]
    return (f"{r['shards']:>8} shards {r['kind']:<11} manifest {r['manifest_bytes'] / 1e6:6.2f} MB "
            f"open {r['open_s']:.2f} s ({r['open_requests']} req, {r['open_rounds']} rounds, "
            f"{r['open_bytes'] / 1e6:.2f} MB) rss {r['rss_before_open_mb']:.0f}->"
            f"{r['rss_after_open_mb']:.0f}, peak {r['peak_rss_mb']:.0f} MB | first batch: "
            f"{b['rounds']} rounds {b['requests']} req {sum(b['bytes'].values()) / 1e6:.2f} MB "
            f"{b['wall_s']:.2f} s")


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
    p.add_argument("--data-cache", action="store_true",
                   help="instead: epoch 1 vs 2 with the data cache through the +20 ms proxy")
    p.add_argument("--dc-shards", type=int, default=8)
    p.add_argument("--dc-records", type=int, default=8192, help="records per shard")
    p.add_argument("--dc-record-size", type=int, default=1000)
    p.add_argument("--dc-rounds", type=int, default=3)
    p.add_argument("--dc-rate", type=float, default=0.0,
                   help="cap the proxy's responses at this many bytes/s (all connections)")
    p.add_argument("--dc-blocks", default=",".join(DATA_CACHE_BLOCKS),
                   help="the block sizes measured (the default block, 1 MiB, is needed)")
    p.add_argument("--dc-out", default="bench-results/data_cache.json",
                   help="where --data-cache writes (an --out given wins)")
    p.add_argument("--rate-limits", action="store_true",
                   help="instead: the request-rate table of 1, 64 and 1,024 readers "
                   "(tools/bench_ratelimit.py, to bench-results/ratelimit.json)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="paged", help=argparse.SUPPRESS)
    p.add_argument("--page-records", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--manifests", action="store_true",
                   help="only compare manifests (JSON, compact, Parquet) at --manifest-scales")
    p.add_argument("--manifest-scales", default="1e10,1e11",
                   help="records (1e5 per shard): 1e10 = 1e5 shards, 1e11 = 1e6 shards")
    p.add_argument("--manifest-kinds", default=",".join(MANIFEST_KINDS))
    p.add_argument("--manifest-rounds", type=int, default=3)
    p.add_argument("--manifest-cache", default="bench-results/sim-manifests",
                   help="where generated manifests are kept between runs")
    p.add_argument("--manifest-out", default="bench-results/scale_manifest.json")
    p.add_argument("--manifest-child", help=argparse.SUPPRESS)
    p.add_argument("--generate", help=argparse.SUPPRESS)
    args = parse_args(p, None, scales="1e7", batches=2, whole_scales="1e7", sweep_scale="",
                      dc_shards=2, dc_records=600, dc_rounds=1, dc_out=None,
                      manifest_scales="1e7", manifest_rounds=1, manifest_out=None)
    if args.generate:
        import sim_store

        generate_manifest(int(args.generate), int(args.generate) // PER_SHARD, args.mode,
                          os.environ[sim_store.CACHE_ENV])
        return
    if args.manifest_child:
        print(json.dumps(manifest_child(args)))
        return
    if args.data_cache:
        results = data_cache_bench(args)
        print(json.dumps(results["summary"]))
        out = args.dc_out if args.out == p.get_default("out") else args.out
        if out:
            os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
            with open(out, "w") as f:
                json.dump(results, f, indent=2)
            print(f"wrote {out}")
        return
    if args.manifests:
        found = run_manifests(args)
        # tools/report.py --run names the file with --out
        out = args.out if args.out != p.get_default("out") else args.manifest_out
        if out:
            os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
            with open(out, "w") as f:
                json.dump(found, f, indent=2)
            print(f"wrote {out}")
        return
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
