#!/usr/bin/env python3
"""Cost of issue 16's read-path checks: ``ds[i]`` and ``__getitems__`` of 256 random records,
this checkout against a base one, on the same files, in interleaved rounds.

Each round runs one subprocess per checkout (their order alternating from round to round),
each timing the best of 3 loops of random single reads and of 256-record batches, with memory
maps and with ``pread`` (``mmap=False``), on TFRecord and on OFRecord (whose sidecars carry
payload checksums, which this checkout checks on read and the base one ignores). Prints the
per-round throughput ratios (this / base, < 1 = slower) and their median, and writes JSON.

    git archive <base commit> | tar -x -C /tmp/ofindex-base
    (cd /tmp/ofindex-base && python setup.py -q build_ext --inplace)
    python tools/bench_hardening.py --base /tmp/ofindex-base --records 200000 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Runs in each subprocess: times the loops on one checkout, prints JSON.
PROBE = r"""
import json, sys, time
import numpy as np
import ofindex
paths, n_single, n_batch = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

def best(fn, repeat=3):
    out = float("inf")
    for _ in range(repeat):
        t = time.perf_counter(); fn(); out = min(out, time.perf_counter() - t)
    return out

rng = np.random.default_rng(0)
result = {}
for fmt, files in paths.items():
    n = len(ofindex.open(files))
    singles = rng.integers(0, n, size=n_single).tolist()
    batches = [rng.integers(0, n, size=256) for _ in range(n_batch)]
    for mmap in (True, False):
        ds = ofindex.open(files, mmap=mmap)
        def one():
            for i in singles:
                ds[i]
        def many():
            for b in batches:
                ds.__getitems__(b)
        key = f"{fmt} {'mmap' if mmap else 'pread'}"
        result[key + " ds[i] rec/s"] = n_single / best(one)
        result[key + " getitems(256) rec/s"] = n_batch * 256 / best(many)
print(json.dumps(result))
"""


def make_data(root: str, records: int, size: int) -> dict[str, list[str]]:
    sys.path.insert(0, HERE)
    from ofindex.cli.synthetic import write_dataset

    out = {}
    for fmt in ("tfrecord", "ofrecord"):
        d = os.path.join(root, f"{fmt}-{records}-{size}")
        marker = os.path.join(d, "_COMPLETE")
        if not os.path.exists(marker):
            write_dataset(d, records, 2, kind="random", record_size=size, format=fmt)
            open(marker, "w").close()
        out[fmt] = sorted(os.path.join(d, f) for f in os.listdir(d)
                          if f.startswith("part-") and "." not in f)
    return out


def probe(checkout: str, paths: dict[str, list[str]], singles: int, batches: int) -> dict:
    env = {**os.environ, "PYTHONPATH": checkout}
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(paths), str(singles),
                           str(batches)], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="a checkout of ofindex to compare with (its "
                   "compiled module built in place)")
    p.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "ofindex-bench"))
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--size", type=int, default=200, help="mean record size in bytes")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--singles", type=int, default=50_000)
    p.add_argument("--batches", type=int, default=100)
    p.add_argument("--out", default="bench-results/hardening.json")
    args = p.parse_args()
    paths = make_data(args.root, args.records, args.size)
    rounds = []
    for r in range(args.rounds):
        order = [("this", HERE), ("base", args.base)]
        if r % 2:
            order.reverse()
        got = {name: probe(where, paths, args.singles, args.batches) for name, where in order}
        rounds.append({k: got["this"][k] / got["base"][k] for k in got["this"]})
        print(f"round {r + 1}: " + "  ".join(f"{k}={v:.3f}" for k, v in rounds[-1].items()),
              flush=True)
    summary = {k: {"median_ratio": statistics.median(r[k] for r in rounds),
                   "ratios": [round(r[k], 4) for r in rounds]} for k in rounds[0]}
    print("\nthis / base throughput (median of the rounds; < 1: this checkout is slower)")
    for k, v in summary.items():
        print(f"  {k:<40} {v['median_ratio']:.3f}   rounds {v['ratios']}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"records": args.records, "size": args.size, "rounds": args.rounds,
                   "summary": summary}, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
