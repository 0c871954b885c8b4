#!/usr/bin/env python3
"""Read speed: ofindex vs ArrayRecord, TensorFlow's TFRecordDataset and vahidk's tfrecord,
on the same records, measured in the same run.

Goals (issue 3), on 1 M records of ~200 B and 10 k records of ~100 KB:
- random ds[i]: >= 250 k records/s single-threaded and >= 1000x ArrayRecord's __getitem__;
- __getitems__ of 256 random indices: >= 500 k records/s and >= 20x ArrayRecord's __getitems__;
- sequential iteration with CRC checks: >= TFRecordDataset (batched) in records/s on the small
  records and >= 2x its GB/s on the large ones; also against vahidk's tfrecord_iterator.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from benchlib import best_of, dataset, parse_args, read_all, report

import ofindex


def _timed_count(it, budget_s: float, total: int | None = None) -> tuple[int, float]:
    """Consume ``it`` until exhausted or ``budget_s`` passes; returns (items, seconds)."""
    n = 0
    t = time.perf_counter()
    for _ in it:
        n += 1
        if n % 4096 == 0 and time.perf_counter() - t > budget_s:
            break
    return n, time.perf_counter() - t


def array_record_copy(paths: list[str], records_of, out_dir: str) -> str:
    from array_record.python.array_record_module import ArrayRecordWriter

    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, "data.array_record")
    if not os.path.exists(out + ".done"):
        w = ArrayRecordWriter(out, "group_size:1")
        for r in records_of():
            w.write(r)
        w.close()
        open(out + ".done", "w").close()
    return out


_VAHIDK = """
import sys, time
from tfrecord.reader import tfrecord_iterator
paths, budget = sys.argv[1:-1], float(sys.argv[-1])
n = 0
t = time.perf_counter()
for p in paths:
    for _ in tfrecord_iterator(p):
        n += 1
        if n % 4096 == 0 and time.perf_counter() - t > budget:
            break
    else:
        continue
    break
print(n, time.perf_counter() - t)
"""


def _vahidk_iterate(paths: list[str], budget: float, n: int, nbytes: int) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", _VAHIDK, *paths, str(budget)], check=True,
                         capture_output=True, text=True).stdout.split()
    cnt, t = int(out[0]), float(out[1])
    return cnt / t, cnt / n * nbytes / t / 1e9


def bench_case(name: str, paths: list[str], root: str, budget: float, reads: int = 50_000,
               nbatches: int = 100) -> list[dict]:
    """Rows for one data set: ``reads`` random ``ds[i]`` and ``nbatches`` batches of 256 per
    timed loop of ofindex (best of 3), the peers within ``budget`` seconds."""
    rows = []
    read_all(paths)
    ds = ofindex.open(paths)
    n = len(ds)
    nbytes = sum(os.path.getsize(p) for p in paths)
    rng = np.random.default_rng(0)
    singles = rng.integers(0, n, size=200_000).tolist()
    batches = [rng.integers(0, n, size=256).tolist() for _ in range(400)]

    # every loop drops each result before the next read, as ArrayRecord's loop below does
    # (keeping them all alive would time the allocator's fresh pages, not the reader)
    def singles_loop(d):
        for i in singles[:reads]:
            d[i]

    def batches_loop(d):
        for b in batches[:nbatches]:
            d.__getitems__(b)

    ours_single_rps = reads / best_of(lambda: singles_loop(ds), 3)
    ours_batch_rps = nbatches * 256 / best_of(lambda: batches_loop(ds), 3)
    # with mmap=False: os.pread per record (see ofindex.storage.mapped)
    dm = ofindex.open(paths, mmap=False)
    pread_single_rps = reads / best_of(lambda: singles_loop(dm), 3)
    pread_batch_rps = nbatches * 256 / best_of(lambda: batches_loop(dm), 3)
    assert dm.__getitems__(batches[0]) == ds.__getitems__(batches[0])

    # ArrayRecord with group_size:1 on the same records
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    ar_path = array_record_copy(paths, lambda: iter(ds), os.path.join(root, f"ar-{n}-{nbytes}"))
    read_all([ar_path])
    src = ArrayRecordDataSource([ar_path])
    assert src[singles[0]] == ds[singles[0]] and len(src) == n
    k = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < budget and k < len(singles):
        src[singles[k]]
        k += 1
    ar_single_rps = k / (time.perf_counter() - t0)
    k = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < budget and k < len(batches):
        src.__getitems__(batches[k])
        k += 1
    ar_batch_rps = k * 256 / (time.perf_counter() - t0)
    assert src.__getitems__(batches[0]) == ds.__getitems__(batches[0])

    # sequential, CRC-verified
    cnt, t = _timed_count(iter(ds), 1e9)
    assert cnt == n
    ours_seq = (n / t, nbytes / t / 1e9)

    import tensorflow as tf

    tfds = tf.data.TFRecordDataset(paths, buffer_size=8 << 20).batch(256)
    def run_tf():
        c = 0
        for b in tfds:
            c += int(b.shape[0])
        return c
    run_tf()  # warm-up (graph building)
    t0 = time.perf_counter()
    assert run_tf() == n
    t = time.perf_counter() - t0
    tf_seq = (n / t, nbytes / t / 1e9)

    # vahidk's package registers 'tensorflow.BytesList' too: measure it in its own process
    vk_seq = _vahidk_iterate(paths, budget * 4, n, nbytes)

    rows += [
        {"name": f"{name}: ofindex ds[i] random", "records_per_s": round(ours_single_rps),
         "ratio_vs_array_record": round(ours_single_rps / ar_single_rps, 1)},
        {"name": f"{name}: ofindex ds[i] random, mmap=False",
         "records_per_s": round(pread_single_rps),
         "ratio_vs_array_record": round(pread_single_rps / ar_single_rps, 1)},
        {"name": f"{name}: ArrayRecord __getitem__", "records_per_s": round(ar_single_rps)},
        {"name": f"{name}: ofindex __getitems__(256)", "records_per_s": round(ours_batch_rps),
         "ratio_vs_array_record": round(ours_batch_rps / ar_batch_rps, 1)},
        {"name": f"{name}: ofindex __getitems__(256), mmap=False",
         "records_per_s": round(pread_batch_rps),
         "ratio_vs_array_record": round(pread_batch_rps / ar_batch_rps, 1)},
        {"name": f"{name}: ArrayRecord __getitems__(256)", "records_per_s": round(ar_batch_rps)},
        {"name": f"{name}: ofindex iterate (CRC verified)", "records_per_s": round(ours_seq[0]),
         "GB_per_s": round(ours_seq[1], 3), "ratio_vs_tf": round(ours_seq[0] / tf_seq[0], 2),
         "ratio_vs_vahidk": round(ours_seq[0] / vk_seq[0], 1)},
        {"name": f"{name}: tf.data.TFRecordDataset.batch(256)", "records_per_s": round(tf_seq[0]),
         "GB_per_s": round(tf_seq[1], 3)},
        {"name": f"{name}: vahidk tfrecord_iterator", "records_per_s": round(vk_seq[0]),
         "GB_per_s": round(vk_seq[1], 3)},
    ]
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "ofindex-bench"))
    p.add_argument("--small-records", type=int, default=1_000_000)
    p.add_argument("--large-records", type=int, default=10_000)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--budget", type=float, default=3.0, help="seconds per slow peer measurement")
    p.add_argument("--reads", type=int, default=50_000, help="random ds[i] per timed loop")
    p.add_argument("--batches", type=int, default=100, help="batches of 256 per timed loop")
    p.add_argument("--out", default="bench-results/read.json")
    a = parse_args(p, small_records=20_000, large_records=200, budget=0.3, reads=2_000,
                   batches=5)
    rows = []
    for name, n, size in (("small", a.small_records, 200), ("large", a.large_records, 100_000)):
        paths = dataset(a.root, f"read-{name}-{n}", n, a.shards, size)
        rows += bench_case(f"{name} ({n} x ~{size} B)", paths, a.root, a.budget, a.reads,
                           a.batches)
    report(rows, a.out)


if __name__ == "__main__":
    main()
