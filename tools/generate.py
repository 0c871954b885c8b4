#!/usr/bin/env python3
"""Generate a synthetic TFRecord/OFRecord dataset (MNIST-like Examples or random bytes).

    python tools/generate.py out/ --records 1000000 --shards 8 --kind random --record-size 200
"""

from __future__ import annotations

import argparse
import time

from ofindex.cli.synthetic import write_dataset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("directory")
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--kind", choices=["mnist", "random"], default="mnist")
    p.add_argument("--record-size", type=int, default=200, help="mean size for --kind random")
    p.add_argument("--format", choices=["tfrecord", "ofrecord"], default="tfrecord")
    p.add_argument("--no-index", action="store_true", help="write no sidecars")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    t = time.perf_counter()
    paths = write_dataset(a.directory, a.records, a.shards, kind=a.kind, record_size=a.record_size,
                          format=a.format, index=not a.no_index, seed=a.seed)
    print(f"wrote {a.records} records in {len(paths)} files to {a.directory} "
          f"in {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
