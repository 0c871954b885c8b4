"""obstore (Rust's ``object_store``) against the fsspec path (issue 45, goal 7), in one run of
interleaved rounds: each round reads the same way through both backends, in turn (the order
swapped every round), so that the machine's drift falls on both alike.

* **Sequential**: a whole dataset in order (``ds.iter_batches(as_buffer=True)``: 8 MiB range
  reads) from the moto S3 server and fake-gcs-server on 127.0.0.1 with no added latency: GB/s
  and the client's CPU seconds per GB (every thread of the process: obstore's Rust runtime's
  too).
* **Remote batch rows** (as ``tools/bench_remote.py``'s): warm batches of ``--batch`` random
  records (every page of index cached) from both servers, and from moto behind a
  +``--rtt-ms`` latency proxy ("far"): the first batch after opening, in a fresh process each
  time, a warm batch and a slice ``ds[a:a+batch]``. moto reads a whole object for each ranged
  GET and closes the connection after each answer: its objects are kept small.

Web servers are not measured any more: obstore lost there (one request per range against our
client's multi-range requests: the run in docs/design.md, made by this tool at the commit that
added it) and ``http(s)://`` is read through our client only. Every batch is checked against
the local records. ``--out`` writes the figures as JSON; ``tools/report.py`` renders them
(docs/benchmarks.md).

    python tools/bench_obstore.py --out bench-results/obstore.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

import numpy as np  # noqa: E402
from bench_remote import _proxy_process  # noqa: E402
from benchlib import machine_load, parse_args, spread, write_json  # noqa: E402

import ofindex  # noqa: E402
from ofindex.cli.synthetic import write_dataset  # noqa: E402
from tests.kit import servers  # noqa: E402

BACKENDS = ("fsspec", "obstore")


def options(store: str, backend: str, url: str) -> dict:
    """The storage options of ``store``'s server at ``url`` through ``backend``."""
    if backend == "obstore":
        return servers.obstore_options(store, url)
    return servers.s3_options(url) if store == "s3" else servers.gcs_options(url)


def make_data(root: str, name: str, shards: int, shard_mb: int, record_size: int) -> str:
    """A dataset of ``shards`` files of about ``shard_mb`` MiB, indexed locally."""
    d = os.path.join(root, name)
    records = shards * (shard_mb << 20) // (record_size + 16)
    write_dataset(d, records, shards, kind="random", record_size=record_size, index=False,
                  seed=3)
    ofindex.build_index(d)
    return d


def upload(fs, local: str, prefix: str) -> None:
    """``local`` and its index directory to ``<prefix>`` through the fsspec filesystem
    ``fs``."""
    if not fs.exists(prefix.split("/")[0]):
        fs.mkdir(prefix.split("/")[0])
    for source, target in ((local, prefix), (local + ".ofindex", prefix + ".ofindex")):
        for name in os.listdir(source):
            fs.put_file(os.path.join(source, name), f"{target}/{name}")


class Rows:
    """Wall and CPU seconds of each row and backend over the rounds."""

    def __init__(self) -> None:
        self.wall: dict[str, dict[str, list[float]]] = {}
        self.cpu: dict[str, dict[str, list[float]]] = {}

    def add(self, row: str, backend: str, wall: float, cpu: float) -> None:
        self.wall.setdefault(row, {}).setdefault(backend, []).append(wall)
        self.cpu.setdefault(row, {}).setdefault(backend, []).append(cpu)


def measured(rows: Rows, row: str, backend: str, fn, *args):
    """``fn(*args)``, its wall and CPU seconds (every thread of this process) added to
    ``rows``; returns what it returned."""
    cpu, wall = time.process_time(), time.perf_counter()
    got = fn(*args)
    rows.add(row, backend, time.perf_counter() - wall, time.process_time() - cpu)
    return got


def sequential(ds) -> None:
    for _ in ds.iter_batches(4096, as_buffer=True):
        pass


def cold_child(url: str, data: str, seed: int, batch: int, backend: str,
               endpoint: str) -> dict:
    """In a fresh process: open ``url`` through ``backend``, read one random batch, check it."""
    opts = options("s3", backend, endpoint)
    t = time.perf_counter()
    ds = ofindex.open(url, storage_options=opts)
    opened = time.perf_counter()
    idx = np.random.default_rng(seed).choice(len(ds), size=batch, replace=False).tolist()
    cpu = time.process_time()
    t_batch = time.perf_counter()
    got = ds.__getitems__(idx)
    done = time.perf_counter()
    cpu = time.process_time() - cpu
    with ofindex.open(data) as local:
        ok = got == local.__getitems__(idx)
    return {"open_s": opened - t, "batch_s": done - t_batch, "cpu_s": cpu, "ok": ok}


def rounds(args, work: str, moto_url: str, gcs_url: str, far_url: str) -> dict:
    """Every row through both backends, ``args.rounds`` rounds."""
    bucket, far = os.path.join(work, "bucket"), os.path.join(work, "far")
    with ofindex.open(bucket) as local_bucket, ofindex.open(far) as local_far:
        bucket_records, far_records = local_bucket[:], local_far[:]
    opened = {}
    for backend in BACKENDS:
        opened["s3", backend] = ofindex.open(
            "s3://bench/bucket", storage_options=options("s3", backend, moto_url))
        opened["gcs", backend] = ofindex.open(
            "gs://bench/bucket", storage_options=options("gcs", backend, gcs_url))
        opened["far", backend] = ofindex.open(
            "s3://bench/far", storage_options=options("s3", backend, far_url))
    for ds in opened.values():
        ds[list(range(0, len(ds), 16))]  # every page of index, cached
    sizes = {store: sum(s.bytes for s in opened[store, "fsspec"].shards)
             for store in ("s3", "gcs")}
    rng = np.random.default_rng(args.seed)
    rows = Rows()
    for k in range(args.rounds):
        order = BACKENDS if k % 2 == 0 else BACKENDS[::-1]
        idx = rng.choice(len(bucket_records), args.batch, replace=False).tolist()
        far_idx = rng.choice(len(far_records), args.batch, replace=False).tolist()
        start = int(rng.integers(0, len(far_records) - args.batch))
        for backend in order:
            for store in ("s3", "gcs"):
                measured(rows, f"sequential_{store}", backend, sequential,
                         opened[store, backend])
                got = measured(rows, f"warm_batch_{store}", backend,
                               opened[store, backend].__getitems__, idx)
                assert got == [bucket_records[i] for i in idx], f"{store} batch, {backend}"
            got = measured(rows, "warm_batch_far", backend, opened["far", backend].__getitems__,
                           far_idx)
            assert got == [far_records[i] for i in far_idx], f"far batch, {backend}"
            got = measured(rows, "slice_far", backend, opened["far", backend].__getitem__,
                           slice(start, start + args.batch))
            assert got == far_records[start:start + args.batch], f"slice, {backend}"
            out = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--cold-child", "s3://bench/far",
                 far, str(args.seed + 100 + k), str(args.batch), backend, far_url],
                capture_output=True, text=True, check=True)
            child = json.loads(out.stdout.strip().splitlines()[-1])
            assert child["ok"], f"first batch differs from the local copy, {backend}"
            rows.add("first_batch_far", backend, child["batch_s"], child["cpu_s"])
            rows.add("open_far", backend, child["open_s"], float("nan"))
    for ds in opened.values():
        ds.close()
    return summarize(rows, sizes)


def summarize(rows: Rows, sizes: dict[str, int]) -> dict:
    """Spreads of each row and backend, and obstore's ratio to fsspec round by round (above
    1: obstore is faster, or costs less CPU)."""
    out: dict = {}
    for row, walls in rows.wall.items():
        cpus = rows.cpu[row]
        entry: dict = {}
        for backend in BACKENDS:
            entry[backend] = {"wall_s": spread(walls[backend], 4),
                              "cpu_s": spread(cpus[backend], 4)}
            if row.startswith("sequential_"):
                gb = sizes[row.split("_", 1)[1]] / 1e9
                entry[backend]["gb_per_s"] = spread([gb / w for w in walls[backend]])
                entry[backend]["cpu_s_per_gb"] = spread([c / gb for c in cpus[backend]])
        entry["speedup"] = spread([f / o for f, o in zip(walls["fsspec"], walls["obstore"],
                                                          strict=True)])
        if all(c == c for c in cpus["fsspec"] + cpus["obstore"]):  # no NaN: CPU was measured
            entry["cpu_saving"] = spread([f / o for f, o in zip(cpus["fsspec"], cpus["obstore"],
                                                                 strict=True)])
        out[row] = entry
    return out


def run(args) -> dict:
    import gcsfs
    import s3fs

    work = tempfile.mkdtemp(prefix="bench-obstore-")
    try:
        make_data(work, "bucket", args.shards, args.shard_mb, args.record_size)
        make_data(work, "far", args.shards, args.far_shard_mb, args.record_size)
        load_before = machine_load()
        with servers.start_moto() as moto, servers.start_fake_gcs() as gcs:
            s3 = s3fs.S3FileSystem(skip_instance_cache=True, **servers.s3_options(moto.url))
            upload(s3, os.path.join(work, "bucket"), "bench/bucket")
            upload(s3, os.path.join(work, "far"), "bench/far")
            with warnings.catch_warnings():  # aiohttp's advice on sending MBs as bytes
                warnings.simplefilter("ignore", ResourceWarning)
                upload(gcsfs.GCSFileSystem(skip_instance_cache=True,
                                           **servers.gcs_options(gcs.url)),
                       os.path.join(work, "bucket"), "bench/bucket")
            port = int(moto.url.rsplit(":", 1)[1])
            with _proxy_process(port, args.rtt_ms) as proxy_port:
                results = rounds(args, work, moto.url, gcs.url,
                                 f"http://127.0.0.1:{proxy_port}")
        import obstore

        return {"config": {"rounds": args.rounds, "shards": args.shards,
                           "shard_mb": args.shard_mb, "far_shard_mb": args.far_shard_mb,
                           "record_size": args.record_size, "batch": args.batch,
                           "rtt_ms": args.rtt_ms, "obstore": obstore.__version__,
                           "load_before": load_before, "load_after": machine_load()},
                "rows": results}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(r: dict) -> None:
    for row, entry in r["rows"].items():
        cells = []
        for backend in BACKENDS:
            got = entry[backend]
            if "gb_per_s" in got:
                cells.append(f"{backend} {got['gb_per_s']['median']:.2f} GB/s "
                             f"{got['cpu_s_per_gb']['median']:.2f} CPU s/GB")
            else:
                cells.append(f"{backend} {got['wall_s']['median'] * 1000:.1f} ms")
        print(f"{row:<18} " + "  ".join(cells)
              + f"  obstore {entry['speedup']['median']:.2f}x "
              f"[{entry['speedup']['min']:.2f}-{entry['speedup']['max']:.2f}]")


def main(argv: list[str] | None = None) -> None:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--cold-child":
        url, data, seed, batch, backend, endpoint = sys.argv[2:8]
        print(json.dumps(cold_child(url, data, int(seed), int(batch), backend, endpoint)))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--shard-mb", type=int, default=8,
                   help="MiB per object in the buckets (moto reads a whole object per ranged "
                        "GET)")
    p.add_argument("--far-shard-mb", type=int, default=2,
                   help="MiB per object of moto behind the latency proxy")
    p.add_argument("--record-size", type=int, default=4000)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--rtt-ms", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the results as JSON here")
    args = parse_args(p, argv, rounds=1, shards=2, shard_mb=1, far_shard_mb=1, batch=16)
    r = run(args)
    report(r)
    write_json(r, args.out)


if __name__ == "__main__":
    main()
