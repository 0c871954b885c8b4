"""Ray Data: ``read_ofindex(...).iter_batches()`` against ``ray.data.read_tfrecords`` on the
same TFRecord files (issue 30, item 3).

Two data sets of Examples (``write_dataset``): many small records (default 1 M of ~200 B in 8
shards) and fewer big ones (10 k of ~100 KB). For each, a local Ray instance (``--cpus``
CPUs) reads every record with ``iter_batches`` (raw bytes: ``read_ofindex(paths)``, and
Ray's reader, which parses each Example into columns; ``read_ofindex(paths, spec)`` decodes
the same features), the readers **alternated** over ``--repeats`` rounds, each round a new
Ray dataset. Reported per reader: rows/s (median, min and max over the rounds) and the ratio
of medians against ``read_tfrecords``. ``--out`` writes JSON for ``tools/report.py``.

    python tools/bench_ray.py --out bench-results/ray.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

from benchlib import parse_args  # noqa: E402


def _examples(directory: str, records: int, shards: int, payload: int) -> None:
    """TFRecord shards of Examples with a ``label`` (int64) and a ``data`` (bytes) feature."""
    import numpy as np

    import ofindex
    from ofindex.proto import example_pb2

    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(0)
    blob = rng.bytes(payload * 2)
    per = -(-records // shards)
    for k in range(shards):
        n = min(per, records - k * per)
        with ofindex.Writer(os.path.join(directory, f"part-{k:05d}.tfrecord")) as w:
            for i in range(n):
                ex = example_pb2.Example()
                ex.features.feature["label"].int64_list.value.append(i % 10)
                start = (i * 7919) % payload
                ex.features.feature["data"].bytes_list.value.append(blob[start:start + payload])
                w.write(ex.SerializeToString())
    ofindex.build_index(directory)


def _rows_per_s(make, batch_size: int) -> tuple[float, int]:
    t = time.perf_counter()
    rows = 0
    for batch in make().iter_batches(batch_size=batch_size, batch_format="pyarrow"):
        rows += batch.num_rows
    return rows / (time.perf_counter() - t), rows


def run(args) -> dict:
    import ray

    from ofindex.decode import FixedLen
    from ofindex.integrations.ray import read_ofindex

    work = args.dir or tempfile.mkdtemp(prefix="bench-ray-")
    cases = [("small", args.small_records, args.small_shards, args.small_bytes),
             ("big", args.big_records, args.big_shards, args.big_bytes)]
    spec = {"label": FixedLen((), "int64"), "data": FixedLen((), "bytes")}
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    ray.data.range(10_000).materialize()  # warm up: worker processes started, not measured
    out: dict = {"config": {"cpus": args.cpus, "repeats": args.repeats,
                            "batch_size": args.batch_size, "ray": ray.__version__}, "cases": []}
    try:
        for name, records, shards, payload in cases:
            d = os.path.join(work, f"{name}-{records}-{shards}-{payload}")
            if not os.path.exists(os.path.join(d, "_COMPLETE")):
                _examples(d, records, shards, payload)
                open(os.path.join(d, "_COMPLETE"), "w").close()
            files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".tfrecord"))
            readers = {
                "read_tfrecords": lambda files=files: ray.data.read_tfrecords(files),
                "read_ofindex_raw": lambda files=files: read_ofindex(files),
                "read_ofindex_decoded": lambda files=files: read_ofindex(files, spec),
            }
            speeds: dict[str, list[float]] = {k: [] for k in readers}
            for _ in range(args.repeats):
                for reader, make in readers.items():
                    rate, rows = _rows_per_s(make, args.batch_size)
                    assert rows == records, (reader, rows)
                    speeds[reader].append(rate)
            case = {"name": name, "records": records, "shards": shards,
                    "payload_bytes": payload, "readers": {}}
            base = statistics.median(speeds["read_tfrecords"])
            for reader, rates in speeds.items():
                med = statistics.median(rates)
                case["readers"][reader] = {"rows_per_s": med, "min": min(rates),
                                           "max": max(rates), "runs": rates,
                                           "vs_read_tfrecords": med / base}
            out["cases"].append(case)
            for reader, r in case["readers"].items():
                print(f"{name:5s} {records:>8d} x {payload:>6d} B  {reader:22s} "
                      f"{r['rows_per_s']:>11,.0f} rows/s [{r['min']:,.0f}-{r['max']:,.0f}] "
                      f"{r['vs_read_tfrecords']:.2f}x", flush=True)
    finally:
        ray.shutdown()
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small-records", type=int, default=1_000_000)
    p.add_argument("--small-shards", type=int, default=8)
    p.add_argument("--small-bytes", type=int, default=180, help="payload of the data feature")
    p.add_argument("--big-records", type=int, default=10_000)
    p.add_argument("--big-shards", type=int, default=8)
    p.add_argument("--big-bytes", type=int, default=100_000)
    p.add_argument("--cpus", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--dir", help="where the data sets are written (reused when complete)")
    p.add_argument("--out", help="write the results as JSON here")
    args = parse_args(p, argv, small_records=2000, big_records=40, big_bytes=10_000, repeats=1)
    result = run(args)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
