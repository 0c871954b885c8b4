"""``ofindex demo``: generate a small dataset, index it, and read random records with timings."""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np

from .._accel import implementation
from ..index.builder import build_index
from ..opening import open as open_dataset
from .synthetic import write_dataset


def run_demo(directory: str | None, records: int = 100_000, shards: int = 8) -> int:
    """``ofindex demo``: write an MNIST-like dataset, index it, read it at random, in
    batches and in order, printing each step's time, and decode three records.

    Args:
        directory: Where to write the dataset (``None``: a temporary directory, removed
            with its index at the end).
        records: Records to write.
        shards: Files to write them in.

    Returns:
        The exit code (0).
    """
    tmp = None
    if directory is None:  # the dataset and its index directory beside it, removed together
        tmp = tempfile.TemporaryDirectory(prefix="ofindex-demo-")
        directory = os.path.join(tmp.name, "mnist")
    try:
        t = time.perf_counter()
        write_dataset(directory, records, shards, kind="mnist", index=False)
        size = sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory))
        print(f"wrote {records:,} MNIST-like tf.train.Examples in {shards} shards "
              f"({size / 1e6:.1f} MB) to {directory} in {time.perf_counter() - t:.2f} s")

        t = time.perf_counter()
        results = build_index(directory, workers=1)
        dt = time.perf_counter() - t
        print(f"indexed {sum(r.records for r in results):,} records in {dt:.3f} s "
              f"({sum(r.records for r in results) / dt:,.0f} records/s)")

        t = time.perf_counter()
        ds = open_dataset(directory)
        print(f"opened {ds!r} in {(time.perf_counter() - t) * 1e3:.1f} ms "
              f"(per-record loops: {implementation()})")

        rng = np.random.default_rng(1)
        idx = rng.integers(0, len(ds), size=20_000).tolist()
        t = time.perf_counter()
        for i in idx:
            ds[i]
        dt = time.perf_counter() - t
        print(f"ds[i] for {len(idx):,} random i (CRC-verified): {len(idx) / dt:,.0f} records/s")

        batch = rng.integers(0, len(ds), size=256)
        t = time.perf_counter()
        for _ in range(20):
            ds.__getitems__(batch)
        dt = time.perf_counter() - t
        print(f"ds.__getitems__ of 256 random indices: {20 * 256 / dt:,.0f} records/s")

        t = time.perf_counter()
        n = sum(1 for _ in ds)
        dt = time.perf_counter() - t
        print(f"sequential iteration over {n:,} records: {n / dt:,.0f} records/s")

        from ..decode import decode_example, format_decoded

        for i in rng.integers(0, len(ds), size=3).tolist():
            shard, local = ds.locate(i)
            print(f"\nrecord {i} (shard {shard}, record {local}):")
            print(format_decoded(decode_example(ds[i])))
        return 0
    finally:
        if tmp is not None:
            tmp.cleanup()
