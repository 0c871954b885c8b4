#!/usr/bin/env python3
"""Index-building speed: ofindex vs vahidk's `tfrecord2idx`, measured in the same run.

Goals (issue 2): >= 5x tfrecord2idx on 1 M records of ~200 B without verification, and
>= 5 GB/s verified on ~100 KB records from the page cache.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import crc32c
import numpy as np
from benchlib import best_of, dataset, parse_args, read_all, report

import ofindex


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "ofindex-bench"))
    p.add_argument("--small-records", type=int, default=1_000_000)
    p.add_argument("--large-records", type=int, default=10_000)
    p.add_argument("--out", default="bench-results/build.json")
    a = parse_args(p, small_records=20_000, large_records=200)
    from tfrecord.tools.tfrecord2idx import create_index

    rows = []
    for name, n, size in (("small", a.small_records, 200), ("large", a.large_records, 100_000)):
        (path,) = dataset(a.root, f"build-{name}-{n}", n, 1, size, index=False)
        read_all([path])
        nbytes = os.path.getsize(path)
        theirs = best_of(lambda p=path: create_index(p, p + ".tfindex"), repeat=3)
        ours = best_of(lambda p=path: ofindex.build_index(p, workers=1, resume=False),
                       repeat=5)
        ours_v = best_of(lambda p=path: ofindex.build_index(p, workers=1, verify=True), repeat=5)
        got = len(ofindex.open(path))
        with open(path + ".tfindex") as f:
            assert got == n == sum(1 for _ in f), "indexes disagree"
        rows += [
            {"name": f"tfrecord2idx  {name} ({n} x ~{size} B)", "records_per_s": round(n / theirs),
             "GB_per_s": round(nbytes / theirs / 1e9, 3)},
            {"name": f"ofindex build {name}", "records_per_s": round(n / ours),
             "GB_per_s": round(nbytes / ours / 1e9, 3),
             "ratio_vs_tfrecord2idx": round(theirs / ours, 1)},
            {"name": f"ofindex build --verify {name}", "records_per_s": round(n / ours_v),
             "GB_per_s": round(nbytes / ours_v / 1e9, 3),
             "ratio_vs_tfrecord2idx": round(theirs / ours_v, 1)},
        ]
    buf = np.random.default_rng(0).bytes(256 << 20)
    t = best_of(lambda: crc32c.crc32c(buf), repeat=5)
    rows.append({"name": "crc32c alone (reference)", "GB_per_s": round(len(buf) / t / 1e9, 2)})
    report(rows, a.out)


if __name__ == "__main__":
    main()
