"""Benchmark ofindex's shuffling: throughput, O(1) memory, and the block-shuffle trade-off.

    python tools/bench_shuffle.py [--count 10000000] [--out bench_shuffle.json]

* throughput: indices/s generating ``--count`` shuffled positions of ``range(count)`` with
  FeistelPermutation (chunked, bounded memory) vs ``numpy.random.permutation`` and
  ``torch.randperm`` (if torch is importable), which materialise the whole permutation;
* memory: peak traced allocation (tracemalloc) while streaming the first ``--mem-count``
  positions for n = 1e6 and n = 1e12 (the same, O(chunk), whatever n);
* locality: for the block shuffle, distinct blocks (range requests) per batch vs how close the
  order is to a full shuffle ("mixing": mean epoch distance between records adjacent in the
  files, relative to a full shuffle: 1.0 = as well mixed, ~0 = neighbours stay together).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchlib import best_of, parse_args

from ofindex.shuffle import BlockShuffleOrder, FeistelPermutation, mixing_of_epoch


def throughput(count: int, repeat: int) -> dict:
    perm = FeistelPermutation(count, seed=1, epoch=0)

    def ours():
        for _ in perm.iter_chunks():
            pass

    res = {"count": count, "ofindex_feistel": count / best_of(ours, repeat)}
    rng = np.random.default_rng(0)
    res["numpy_generator_permutation"] = count / best_of(lambda: rng.permutation(count), repeat)
    res["numpy_random_permutation"] = count / best_of(lambda: np.random.permutation(count), repeat)
    try:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        res["torch_randperm"] = count / best_of(lambda: torch.randperm(count), repeat)
    except ImportError:
        res["torch_randperm"] = None
    big = FeistelPermutation(10**12, seed=1)
    res["ofindex_feistel_n1e12"] = count / best_of(lambda: list(big.iter_chunks(0, count)), 1)
    return res


def memory(mem_count: int) -> dict:
    out = {}
    for n in (10**6, 10**12):
        p = FeistelPermutation(n, seed=1)
        tracemalloc.start()
        for _ in p.iter_chunks(0, min(n, mem_count)):
            pass
        out[f"peak_bytes_n={n:.0e}"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    tracemalloc.start()
    np.random.permutation(10**6)
    out["numpy_permutation_peak_bytes_n=1e6"] = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    out["numpy_permutation_bytes_n=1e12_estimate"] = 8 * 10**12
    return out


_GAP = 64  # records read through rather than split (the planner's max_gap, in records)


def _batch_stats(order: np.ndarray, n: int, batch: int, shard_size: int) -> tuple[float, float]:
    """Mean range requests per batch (sorted records, a new range where the gap exceeds
    ``_GAP`` records, as the read planner coalesces) and mean distinct shards per batch."""
    batches = np.sort(order[: n // batch * batch].reshape(-1, batch), axis=1)
    runs = 1 + (np.diff(batches, axis=1) > _GAP).sum(axis=1)
    shards = np.array([len(np.unique(b // shard_size)) for b in batches])
    return float(runs.mean()), float(shards.mean())


def locality(n: int, batch: int, block_sizes: list[int], windows: list[int]) -> list[dict]:
    """The block shuffle's trade-off: range requests per batch (cost on cloud storage) against
    how close the order is to a full shuffle (``mixing`` of file neighbours, 1.0 = full
    shuffle; distinct shards per batch)."""
    shards = [n // 8] * 8
    pos = np.arange(n)
    rows = []
    for block_size in block_sizes:
        for w in windows:
            order = BlockShuffleOrder(shards, block_size, w, seed=0)(pos)
            runs, nshards = _batch_stats(order, n, batch, n // 8)
            rows.append({"block_size": block_size, "window": w, "batch": batch,
                         "ranges_per_batch": runs, "shards_per_batch": nshards,
                         "mixing": mixing_of_epoch(order)})
    full = FeistelPermutation(n, seed=0).range()
    runs, nshards = _batch_stats(full, n, batch, n // 8)
    rows.append({"block_size": "-", "window": "full shuffle", "batch": batch,
                 "ranges_per_batch": runs, "shards_per_batch": nshards,
                 "mixing": mixing_of_epoch(full)})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mem-count", type=int, default=1_000_000)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = parse_args(ap, argv, count=100_000, repeat=1, mem_count=10_000)
    res = {"throughput_indices_per_s": throughput(args.count, args.repeat),
           "memory": memory(args.mem_count),
           "locality": locality(1 << 20, 256, [8, 64, 512], [1, 16, 256])}
    t = res["throughput_indices_per_s"]
    print(f"{'generator':32s} {'M indices/s':>12s}")
    for k, v in t.items():
        if k != "count" and v is not None:
            print(f"{k:32s} {v / 1e6:12.1f}")
    for k, v in res["memory"].items():
        print(f"{k:40s} {v / 2**20:12.2f} MiB")
    print(f"{'block':>6s} {'window':>12s} {'ranges/batch':>13s} {'shards/batch':>13s} "
          f"{'mixing':>8s}")
    for row in res["locality"]:
        print(f"{row['block_size']!s:>6s} {row['window']!s:>12s} {row['ranges_per_batch']:13.1f} "
              f"{row['shards_per_batch']:13.1f} {row['mixing']:8.4f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
