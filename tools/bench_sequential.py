#!/usr/bin/env python3
"""Batched reading against the columnar peers, in one run, interleaved rounds.

Goals (issue 15), from the page cache:

* sequential, 1 M x ~200 B records, CRC checks on: ``ds.iter_batches`` >= 1.0x the best of
  Hugging Face ``datasets`` iterating Arrow batches -> Python bytes, pyarrow
  ``ParquetFile.iter_batches`` -> bytes and Lance ``to_batches`` -> bytes (all with the same
  batch size). ofindex is measured as lists of ``bytes`` (like the peers' output) and as
  ``RecordBatch`` buffers (no object per record); ``for r in ds`` is shown too (the peers'
  figures count their lists' records with no loop over them; Hugging Face's lists iterated by
  the same ``for`` loop are shown as well).
* random batches of 256, 10 k x ~100 KB records: ``ds.__getitems__`` with CRC checks (spread
  over the cores) >= 1.5x Hugging Face's Arrow gather (``ds.with_format("arrow")[indices]``
  -> bytes, which checks nothing).

Every contender reads the same payloads (the peers' files are written from ofindex's
records). Each round times every contender once, in turn; the figures are the median and
the range over rounds, and the ratios are per round.

    python tools/bench_sequential.py [--records 1000000] [--rounds 5] [--out ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (
    Contender,
    dataset,
    hf_copy,
    interleaved,
    machine_load,
    parse_args,
    read_all,
    write_json,
)

import ofindex


def peer_files(ds: ofindex.Dataset, root: str) -> dict[str, str]:
    """The dataset's payloads as a Hugging Face dataset, a Parquet file and a Lance dataset
    (written once, reused)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tag = f"{len(ds)}-{sum(s.bytes for s in ds.shards)}"
    paths = {"hf": hf_copy(lambda: iter(ds), root, tag),
             "parquet": os.path.join(root, f"pq-{tag}.parquet"),
             "lance": os.path.join(root, f"lance-{tag}")}
    if all(os.path.exists(p + ".done") for p in paths.values()):
        return paths
    table = pa.table({"data": pa.array(list(ds), type=pa.binary())})
    if not os.path.exists(paths["parquet"] + ".done"):
        pq.write_table(table, paths["parquet"])
    if not os.path.exists(paths["lance"] + ".done"):
        import lance

        lance.write_dataset(table, paths["lance"], mode="overwrite")
    for p in paths.values():
        open(p + ".done", "w").close()
    return paths


def sequential_contenders(ds: ofindex.Dataset, paths: dict[str, str],
                          batch: int) -> dict[str, Callable[[], int]]:
    """Callables that read every record once and return the count."""
    import datasets
    import lance
    import pyarrow.parquet as pq

    hf = datasets.load_from_disk(paths["hf"]).with_format("arrow")
    lance_ds = lance.dataset(paths["lance"])

    def ours_list() -> int:
        return sum(len(b) for b in ds.iter_batches(batch))

    def ours_buffer() -> int:
        return sum(len(b) for b in ds.iter_batches(batch, as_buffer=True))

    def ours_records() -> int:
        # the loop as users write it, and as tools/bench_read.py times it (``sum(1 for _ in
        # ds)`` would add a generator's frame per record, 10-15 ns here, to the loop timed)
        for _record in ds:
            pass
        return len(ds)

    def hf_bytes() -> int:
        return sum(len(b["data"].to_pylist()) for b in hf.iter(batch_size=batch))

    def hf_records() -> int:
        for b in hf.iter(batch_size=batch):  # the same loop over each of HF's lists
            for _record in b["data"].to_pylist():
                pass
        return len(hf)

    def parquet_bytes() -> int:
        f = pq.ParquetFile(paths["parquet"])
        return sum(len(b.column(0).to_pylist()) for b in f.iter_batches(batch_size=batch))

    def lance_bytes() -> int:
        return sum(len(b.column(0).to_pylist()) for b in lance_ds.to_batches(batch_size=batch))

    return {"ofindex iter_batches -> list of bytes": ours_list,
            "ofindex iter_batches(as_buffer=True) -> RecordBatch": ours_buffer,
            "ofindex for r in ds": ours_records,
            "Hugging Face datasets iter -> bytes": hf_bytes,
            "Hugging Face datasets iter -> bytes, for r in each list": hf_records,
            "pyarrow ParquetFile.iter_batches -> bytes": parquet_bytes,
            "Lance to_batches -> bytes": lance_bytes}


def gather_contenders(ds: ofindex.Dataset, paths: dict[str, str],
                      batches: list[list[int]]) -> dict[str, Callable[[], int]]:
    """Callables that fetch the same random batches and return the record count."""
    import datasets

    hf = datasets.load_from_disk(paths["hf"]).with_format("arrow")
    serial = ofindex.open([s.url for s in ds.shards])

    def ours() -> int:
        return sum(len(ds.__getitems__(b)) for b in batches)

    def ours_serial() -> int:
        from ofindex.read import mapped_gather

        limit, mapped_gather.PARALLEL_BYTES = mapped_gather.PARALLEL_BYTES, 1 << 62
        try:
            return sum(len(serial.__getitems__(b)) for b in batches)
        finally:
            mapped_gather.PARALLEL_BYTES = limit

    def hf_gather() -> int:
        return sum(len(hf[b]["data"].to_pylist()) for b in batches)

    return {"ofindex __getitems__(256), CRC checks on the cores": ours,
            "ofindex __getitems__(256), CRC checks on one core": ours_serial,
            "Hugging Face Arrow gather -> bytes (no checks)": hf_gather}


def rounds(contenders: dict[str, Callable[[], int]],
           n_rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Records/s of every contender in each round, by the wall clock and per CPU second (one
    warm-up call each first; each contender's call is one unit of work)."""
    def passes(fn: Callable[[], int]) -> Callable[[int], int]:
        return lambda units: sum(fn() for _ in range(units))

    return interleaved([Contender(name, passes(fn), units=1)
                        for name, fn in contenders.items()], n_rounds, 0.0)


def summarize(case: str, measured: tuple[dict[str, list[float]], dict[str, list[float]]],
              ours: list[str], peers: list[str], nbytes_per_record: float) -> list[dict]:
    """Rows: median and range per contender, and each of ours against the best peer per round."""
    rows = []
    rates, cpu_rates = measured
    best_peer = [max(rates[p][i] for p in peers) for i in range(len(rates[peers[0]]))]
    for name, r in rates.items():
        row = {"name": f"{case}: {name}", "case": case, "contender": name,
               "records_per_s": round(statistics.median(r)),
               "records_per_s_min": round(min(r)), "records_per_s_max": round(max(r)),
               "GB_per_s": round(statistics.median(r) * nbytes_per_record / 1e9, 3),
               "records_per_cpu_s": round(statistics.median(cpu_rates[name])),
               "runs": [round(x) for x in r]}
        if name in ours:
            ratios = [x / b for x, b in zip(r, best_peer, strict=True)]
            row["ratio_vs_best_peer"] = round(statistics.median(ratios), 2)
            row["ratio_vs_best_peer_min"] = round(min(ratios), 2)
            row["ratio_vs_best_peer_max"] = round(max(ratios), 2)
        rows.append(row)
    return rows


def _split(rates: dict[str, list[float]]) -> tuple[list[str], list[str]]:
    """(ofindex's contenders, the peers)."""
    ours = [k for k in rates if k.startswith("ofindex")]
    return ours, [k for k in rates if k not in ours]


def sequential_case(a: argparse.Namespace) -> list[dict]:
    """Rows of the sequential case (small records)."""
    paths = dataset(a.root, f"seq-small-{a.records}", a.records, 4, 200)
    read_all(paths)
    ds = ofindex.open(paths)
    peer = peer_files(ds, a.root)
    case = f"sequential, {a.records} x ~200 B, batches of {a.batch_size}"
    measured = rounds(sequential_contenders(ds, peer, a.batch_size), a.rounds)
    per = sum(s.bytes for s in ds.shards) / len(ds)
    return summarize(case, measured, *_split(measured[0]), per)


def gather_case(a: argparse.Namespace) -> list[dict]:
    """Rows of the random batches case (large records)."""
    paths = dataset(a.root, f"seq-large-{a.large_records}", a.large_records, 4, 100_000)
    read_all(paths)
    ds = ofindex.open(paths)
    peer = peer_files(ds, a.root)
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, len(ds), 256).tolist() for _ in range(a.gather_batches)]
    case = f"random batches of 256, {a.large_records} x ~100 KB"
    measured = rounds(gather_contenders(ds, peer, batches), a.rounds)
    per = sum(s.bytes for s in ds.shards) / len(ds)
    return summarize(case, measured, *_split(measured[0]), per)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "ofindex-bench"))
    p.add_argument("--records", type=int, default=1_000_000, help="~200 B records")
    p.add_argument("--large-records", type=int, default=10_000, help="~100 KB records")
    p.add_argument("--batch-size", type=int, default=4096, help="sequential batch size")
    p.add_argument("--gather-batches", type=int, default=40, help="random batches of 256")
    p.add_argument("--rounds", type=int, default=9, help="interleaved rounds (medians)")
    p.add_argument("--cases", default="sequential,gather", help="comma-separated")
    p.add_argument("--out", default="bench-results/sequential.json")
    a = parse_args(p, argv, records=20_000, large_records=300, rounds=1, gather_batches=3)
    rows: list[dict] = []
    if "sequential" in a.cases:
        rows += sequential_case(a)
    if "gather" in a.cases:
        rows += gather_case(a)
    for r in rows:
        ratio = (f"  {r['ratio_vs_best_peer']:.2f}x best peer "
                 f"({r['ratio_vs_best_peer_min']:.2f}-{r['ratio_vs_best_peer_max']:.2f})"
                 if "ratio_vs_best_peer" in r else "")
        print(f"{r['name']:<96s} {r['records_per_s'] / 1e6:7.2f} M rec/s "
              f"({r['records_per_s_min'] / 1e6:.2f}-{r['records_per_s_max'] / 1e6:.2f}){ratio}")
    load = machine_load()
    print(f"machine load: {load}")
    write_json({"machine": load, "rows": rows}, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
