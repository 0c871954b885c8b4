#!/usr/bin/env python3
"""Local reads: ofindex against ArrayRecord, Hugging Face ``datasets``, TensorFlow's
TFRecordDataset, vahidk's tfrecord and a bare Python loop over memory maps, on the same
records, in one long-lived process that runs every contender, in interleaved rounds.

Each round times every contender once, in turn, for about ``--round-seconds``; the figures
are the median and the range over ``--rounds`` rounds, and each ratio is taken round by
round. ofindex checks every TFRecord CRC (and each record's length against its index); the
peers check nothing unless said.

Goals (issue 33), on 1 M records of ~200 B and 10 k records of ~100 KB, page cache warm:

- random ``ds[i]`` (small): >= 0.5x a bare Python loop of memory-map slices (the spans
  given to it as Python lists, nothing checked: the floor of any Python-level reader);
- ``for record in ds`` (large): >= 1.0x vahidk's ``tfrecord_iterator`` (which checks nothing
  and yields views of one reused buffer), the CRCs checked on both cores;
- random ``__getitems__(256)`` (large): >= 1.5x Hugging Face's Arrow gather -> ``bytes``;
- ``mmap=False`` (files that may be truncated in place): ``__getitems__(256)`` (large)
  >= 1.5x ArrayRecord's ``__getitems__``.

    python tools/bench_read.py [--rounds 7] [--round-seconds 0.5] [--out ...]
"""

from __future__ import annotations

import argparse
import bisect
import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (
    Contender,
    dataset,
    hf_copy,
    interleaved,
    machine_load,
    parse_args,
    ratios,
    read_all,
    spread,
    write_json,
)

import ofindex

#: Which contender each of ours is compared with (per case, where both ran).
COMPARED = {
    "ofindex ds[i] random": ["bare Python loop of memory-map slices", "ArrayRecord __getitem__"],
    "ofindex ds[i] random, mmap=False": ["ofindex ds[i] random", "ArrayRecord __getitem__"],
    "ofindex __getitems__(256)": ["Hugging Face Arrow gather(256) -> bytes",
                                  "ArrayRecord __getitems__(256)"],
    "ofindex __getitems__(256), mmap=False": ["ArrayRecord __getitems__(256)",
                                              "ofindex __getitems__(256)"],
    "ofindex for record in ds": ["vahidk tfrecord_iterator (no checks)",
                                 "tf.data.TFRecordDataset.batch(256)"],
}


def array_record_copy(records: Callable[[], Any], n: int, out_dir: str) -> str:
    """The records written once as an ArrayRecord file (``group_size:1``, for random access)."""
    from array_record.python.array_record_module import ArrayRecordWriter

    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, "data.array_record")
    if not os.path.exists(out + ".done"):
        w = ArrayRecordWriter(out, "group_size:1")
        for r in records():
            w.write(r)
        w.close()
        open(out + ".done", "w").close()
    return out


_VAHIDK = """
import sys, time
from tfrecord.reader import tfrecord_iterator
paths, budget = sys.argv[1:-1], float(sys.argv[-1])
n = 0
cpu = time.process_time()
t = time.perf_counter()
while time.perf_counter() - t < budget:
    for p in paths:
        for _ in tfrecord_iterator(p):
            n += 1
            if n % 256 == 0 and time.perf_counter() - t > budget:
                break
        else:
            continue
        break
print(n, time.perf_counter() - t, time.process_time() - cpu)
"""


def vahidk_contender(paths: list[str], seconds: float) -> Contender:
    """vahidk's ``tfrecord_iterator`` over the files for about ``units / 10`` x ``seconds``
    (in its own process: its package registers protobuf names TensorFlow registers too)."""

    def run(units: int) -> tuple[int, float, float]:
        out = subprocess.run([sys.executable, "-c", _VAHIDK, *paths, str(seconds)], check=True,
                             capture_output=True, text=True).stdout.split()
        return int(out[0]), float(out[1]), float(out[2])

    return Contender("vahidk tfrecord_iterator (no checks)", run, units=1, warm_up=False)


class Picks:
    """Random record numbers, handed out in turn (each round reads other records)."""

    def __init__(self, n: int, count: int, seed: int = 0) -> None:
        self.values = np.random.default_rng(seed).integers(0, n, size=count).tolist()
        self.at = 0

    def take(self, k: int) -> list[int]:
        if self.at + k > len(self.values):
            self.at = 0
        k = min(k, len(self.values))
        self.at += k
        return self.values[self.at - k:self.at]


def bare_loop(ds: ofindex.Dataset, picks: Picks) -> Contender:
    """A bare Python loop of memory-map slices: one map per file, each record's payload span
    given as Python lists (found before timing), nothing located or checked while timed."""
    maps = []
    for info in ds.shards:
        with open(info.url, "rb") as f:
            maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    bounds: list[list[int]] = []
    for info in ds.shards:
        with ofindex.open(info.url) as one:
            starts = one.record_lengths(np.arange(len(one)))  # payload sizes
        bounds.append(np.concatenate([[0], np.cumsum(starts + 16)]).tolist())
    cumulative = ds.cumulative_counts.tolist()
    firsts = [0, *cumulative[:-1]]

    def timed(units: int) -> tuple[int, float, float]:
        chosen = picks.take(units)
        where = [(bisect.bisect_right(cumulative, i), i) for i in chosen]
        located = [(maps[j], bounds[j], i - firsts[j]) for j, i in where]
        cpu = time.process_time()
        t = time.perf_counter()
        for mm, b, k in located:
            mm[b[k] + 12:b[k + 1] - 4]
        return len(chosen), time.perf_counter() - t, time.process_time() - cpu

    return Contender("bare Python loop of memory-map slices", timed)


def contenders(ds: ofindex.Dataset, paths: list[str], root: str,
               seconds: float) -> list[Contender]:
    """Every contender of one data set (see the module)."""
    n = len(ds)
    nbytes = sum(s.bytes for s in ds.shards)
    pread = ofindex.open(paths, mmap=False)
    singles = Picks(n, 1 << 20)
    batches = Picks(n, 1 << 20, seed=1)
    tag = f"{n}-{nbytes}"

    def reads(d: Any) -> Callable[[int], int]:
        def run(units: int) -> int:
            for i in singles.take(units):
                d[i]
            return units
        return run

    def gathers(fetch: Callable[[list[int]], Any]) -> Callable[[int], int]:
        def run(units: int) -> int:
            for _ in range(units):  # each batch dropped before the next, as a loader does
                fetch(batches.take(256))
            return units * 256
        return run

    from array_record.python.array_record_data_source import ArrayRecordDataSource

    ar_path = array_record_copy(lambda: iter(ds), n, os.path.join(root, f"ar-{tag}"))
    read_all([ar_path])
    src = ArrayRecordDataSource([ar_path])
    probe = batches.take(256)
    assert src.__getitems__(probe) == ds.__getitems__(probe) == pread.__getitems__(probe)

    import datasets

    hf = datasets.load_from_disk(hf_copy(lambda: iter(ds), root, tag)).with_format("arrow")
    assert hf[probe]["data"].to_pylist() == ds.__getitems__(probe)

    import tensorflow as tf

    tfds = tf.data.TFRecordDataset(paths, buffer_size=8 << 20).batch(256)

    def tf_batches(units: int) -> int:
        return sum(int(b.shape[0]) for b in tfds.take(units))

    def passes(units: int) -> int:
        for _ in range(units):
            for _record in ds:
                pass
        return units * n

    return [
        Contender("ofindex ds[i] random", reads(ds)),
        bare_loop(ds, singles),
        Contender("ofindex ds[i] random, mmap=False", reads(pread)),
        Contender("ArrayRecord __getitem__", reads(src)),
        Contender("ofindex __getitems__(256)", gathers(ds.__getitems__)),
        Contender("ofindex __getitems__(256), mmap=False", gathers(pread.__getitems__)),
        Contender("ArrayRecord __getitems__(256)", gathers(src.__getitems__)),
        Contender("Hugging Face Arrow gather(256) -> bytes",
                  gathers(lambda b: hf[b]["data"].to_pylist())),
        Contender("ofindex for record in ds", passes),
        Contender("tf.data.TFRecordDataset.batch(256)", tf_batches),
        vahidk_contender(paths, seconds),
    ]


def case_rows(case: str, rates: dict[str, list[float]], cpu_rates: dict[str, list[float]],
              record_bytes: float) -> list[dict]:
    """Rows: median and range per contender (by the wall clock, and the median per CPU
    second), and ours against the peers named in COMPARED."""
    rows = []
    for name, r in rates.items():
        s = spread(r, 0)
        cpu = [x for x in cpu_rates[name] if x == x]  # not NaN
        row: dict[str, Any] = {
            "name": f"{case}: {name}", "case": case, "contender": name,
            "records_per_s": s["median"], "records_per_s_min": s["min"],
            "records_per_s_max": s["max"],
            "GB_per_s": round(s["median"] * record_bytes / 1e9, 3),
            "records_per_cpu_s": round(statistics.median(cpu)) if cpu else None,
            "runs": [round(x) for x in r]}
        vs = {peer: ratios(rates, name, peer) for peer in COMPARED.get(name, []) if peer in rates}
        if vs:
            row["vs"] = vs
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "ofindex-bench"))
    p.add_argument("--small-records", type=int, default=1_000_000)
    p.add_argument("--large-records", type=int, default=10_000)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds (medians)")
    p.add_argument("--round-seconds", type=float, default=0.5,
                   help="about how long each contender runs per round")
    p.add_argument("--cases", default="small,large", help="comma-separated")
    p.add_argument("--out", default="bench-results/read.json")
    a = parse_args(p, argv, small_records=20_000, large_records=200, rounds=1,
                   round_seconds=0.05)
    rows: list[dict] = []
    load = {"before": machine_load()}
    for name, n, size in (("small", a.small_records, 200), ("large", a.large_records, 100_000)):
        if name not in a.cases:
            continue
        paths = dataset(a.root, f"read-{name}-{n}", n, a.shards, size)
        read_all(paths)
        ds = ofindex.open(paths)
        case = f"{name}: {n} x ~{size} B"
        rates, cpu_rates = interleaved(contenders(ds, paths, a.root, a.round_seconds),
                                       a.rounds, a.round_seconds)
        rows += case_rows(case, rates, cpu_rates, sum(s.bytes for s in ds.shards) / len(ds))
    load["after"] = machine_load()
    for r in rows:
        vs = "  ".join(f"{v['median']:.2f}x {peer} ({v['min']:.2f}-{v['max']:.2f})"
                       for peer, v in r.get("vs", {}).items())
        print(f"{r['name']:<70s} {r['records_per_s']:>12,.0f}/s "
              f"({r['records_per_s_min']:,.0f}-{r['records_per_s_max']:,.0f})  {vs}")
    print(f"machine load: {load}")
    write_json({"config": {"rounds": a.rounds, "round_seconds": a.round_seconds,
                           "machine": load}, "rows": rows}, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
