"""Ray Data: ``read_ofindex(...).iter_batches()`` against ``ray.data.read_tfrecords`` on the
same TFRecord files (issue 30, item 3).

Two data sets of Examples (``write_dataset``): many small records (default 1 M of ~200 B in 8
shards) and fewer big ones (10 k of ~100 KB). For each, a local Ray instance of its own
(``--cpus`` CPUs) reads every record with ``iter_batches`` (``pyarrow`` batches of
``--batch-size`` rows, the same consumer for every reader): Ray's reader, which parses each
Example into columns; ``read_ofindex(paths)`` (raw payloads); ``read_ofindex(paths, spec)``
(the same features decoded); ``read_ofindex(paths, verify=False)`` (raw payloads without
their CRCs checked, as ``read_tfrecords`` reads them). Each reader runs once unmeasured (the
worker processes import it: TensorFlow for ``read_tfrecords``), then the readers are
**alternated** over ``--repeats`` rounds, each round a new Ray dataset.

The bound Ray sets, measured the same way: ``in_memory_blocks`` hands Ray Data blocks of the
same rows and bytes (the size and number of ``read_ofindex``'s) that are already in memory,
so it costs only Ray's part: its object store, scheduling and ``iter_batches``. The object
store's own throughput (``ray.put`` then ``ray.get`` of 128 MiB Arrow tables from the driver)
is given too.

Reported per reader: rows/s (median, min and max over the rounds), the ratio of medians
against ``read_tfrecords``, and rows per CPU-second of every process of the Ray instance
(driver, workers, raylet, object store...), which the machine's other load disturbs less than
wall time. The load average is recorded. ``--out`` writes JSON for ``tools/report.py``.

    python tools/bench_ray.py --out bench-results/ray.json
"""

from __future__ import annotations

import argparse
import itertools
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


def _cpu_seconds() -> float:
    """CPU seconds used so far by this process and every process it started (Ray's)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:  # ended meanwhile
            continue
        total += times.user + times.system
    return total


def _run(make, batch_size: int) -> tuple[float, float, int]:
    """Rows/s, rows per CPU-second and rows of one pass of ``iter_batches`` over ``make()``."""
    cpu, start = _cpu_seconds(), time.perf_counter()
    rows = 0
    for batch in make().iter_batches(batch_size=batch_size, batch_format="pyarrow"):
        rows += batch.num_rows
    wall, used = time.perf_counter() - start, _cpu_seconds() - cpu
    return rows / wall, rows / max(used, 1e-9), rows


def _in_memory_blocks(records: int, payload: int, rows_per_block: int, tasks: int):
    """A Ray ``Datasource`` of ``records`` rows of ``payload`` bytes in one binary column, in
    blocks of ``rows_per_block`` rows (one chunk each) that its tasks do not read: their
    bytes are memory the task takes from ofindex's pool, already there after the first."""
    import numpy as np
    import pyarrow as pa
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    def blocks(lo: int, hi: int):
        from ofindex._accel import pooled_bytes

        for at in range(lo, hi, rows_per_block):
            n = min(rows_per_block, hi - at)
            offsets = np.arange(n + 1, dtype=np.int64) * payload
            data = pooled_bytes(n * payload)
            yield pa.table({"bytes": pa.LargeBinaryArray.from_buffers(
                pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])})

    class InMemory(Datasource):
        def estimate_inmemory_data_size(self):
            return records * payload

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            cuts = np.linspace(0, records, tasks + 1).astype(np.int64).tolist()
            return [ReadTask(lambda lo=lo, hi=hi: blocks(lo, hi),
                             BlockMetadata(num_rows=hi - lo, size_bytes=(hi - lo) * payload,
                                           input_files=None, exec_stats=None))
                    for lo, hi in itertools.pairwise(cuts)]

    return InMemory()


def _store_bytes_per_s(total: int, rounds: int = 3) -> float:
    """Bytes/s through the object store: ``ray.put`` then ``ray.get`` of 128 MiB Arrow tables
    from the driver, ``total`` bytes per round, best of ``rounds``."""
    import numpy as np
    import pyarrow as pa
    import ray

    size = min(128 << 20, total)
    table = pa.table({"bytes": pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), 1, [None, pa.py_buffer(np.array([0, size], np.int64)),
                               pa.py_buffer(np.ones(size, np.uint8))])})
    best = 0.0
    for _ in range(rounds):
        start, moved = time.perf_counter(), 0
        while moved < total:
            ref = ray.put(table)
            assert ray.get(ref).num_rows == 1
            del ref
            moved += size
        best = max(best, moved / (time.perf_counter() - start))
    return best


def _readers(files: list[str], spec, records: int, payload: int) -> dict:
    """The readers of one data set: name -> a function making its Ray dataset."""
    import ray

    import ofindex
    from ofindex.integrations.ray import OfindexDatasource, read_ofindex

    with ofindex.open(files) as ds:
        source = OfindexDatasource(ds)
        rows_per_block, tasks = source.rows_per_block(
            ray.data.DataContext.get_current().target_max_block_size), source.task_count()
    bound = _in_memory_blocks(records, payload, rows_per_block, tasks)
    return {
        "read_tfrecords": lambda: ray.data.read_tfrecords(files),
        "read_ofindex_raw": lambda: read_ofindex(files),
        "read_ofindex_decoded": lambda: read_ofindex(files, spec),
        # read_tfrecords checks no CRC; ofindex checks every record's unless told not to
        "read_ofindex_raw_unchecked": lambda: read_ofindex(files, verify=False),
        "in_memory_blocks": lambda: ray.data.read_datasource(bound, override_num_blocks=tasks),
    }


def _case(name: str, files: list[str], records: int, shards: int, payload: int, spec,
          args) -> dict:
    """Every reader of one data set: a warm-up pass each, then alternated rounds."""
    readers = _readers(files, spec, records, payload)
    for reader, make in readers.items():  # warm-up: the workers import the readers
        assert _run(make, args.batch_size)[2] == records, reader
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in readers}
    for _ in range(args.repeats):
        for reader, make in readers.items():
            rate, per_cpu, rows = _run(make, args.batch_size)
            assert rows == records, (reader, rows)
            runs[reader].append((rate, per_cpu))
    store = _store_bytes_per_s(records * payload)
    case = {"name": name, "records": records, "shards": shards, "payload_bytes": payload,
            "object_store_put_get_mb_per_s": store / 1e6,
            "object_store_rows_per_s": store / payload, "readers": {}}
    base = statistics.median(r for r, _ in runs["read_tfrecords"])
    for reader, got in runs.items():
        rates, per_cpu = [r for r, _ in got], [c for _, c in got]
        med = statistics.median(rates)
        case["readers"][reader] = {"rows_per_s": med, "min": min(rates), "max": max(rates),
                                   "runs": rates, "vs_read_tfrecords": med / base,
                                   "rows_per_cpu_s": statistics.median(per_cpu),
                                   "rows_per_cpu_s_runs": per_cpu}
    return case


def run(args) -> dict:
    import ray

    from ofindex.decode import FixedLen

    work = args.dir or tempfile.mkdtemp(prefix="bench-ray-")
    cases = [(name, records, shards, payload) for name, records, shards, payload in (
        ("small", args.small_records, args.small_shards, args.small_bytes),
        ("big", args.big_records, args.big_shards, args.big_bytes)
    ) if args.only in (None, name)]
    spec = {"label": FixedLen((), "int64"), "data": FixedLen((), "bytes")}
    load_before = os.getloadavg()
    # a Ray of its own (never a cluster another program started on this host)
    ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    ray.data.range(10_000).materialize()  # warm up: worker processes started, not measured
    out: dict = {"config": {"cpus": args.cpus, "repeats": args.repeats,
                            "batch_size": args.batch_size, "ray": ray.__version__,
                            "machine_cores": os.cpu_count()}, "cases": []}
    try:
        for name, records, shards, payload in cases:
            d = os.path.join(work, f"{name}-{records}-{shards}-{payload}")
            if not os.path.exists(os.path.join(d, "_COMPLETE")):
                _examples(d, records, shards, payload)
                open(os.path.join(d, "_COMPLETE"), "w").close()
            files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".tfrecord"))
            case = _case(name, files, records, shards, payload, spec, args)
            out["cases"].append(case)
            for reader, r in case["readers"].items():
                print(f"{name:5s} {records:>8d} x {payload:>6d} B  {reader:22s} "
                      f"{r['rows_per_s']:>11,.0f} rows/s [{r['min']:,.0f}-{r['max']:,.0f}] "
                      f"{r['vs_read_tfrecords']:.2f}x  {r['rows_per_cpu_s']:>11,.0f} "
                      "rows/CPU-s", flush=True)
            print(f"{name:5s} object store put+get {case['object_store_put_get_mb_per_s']:,.0f}"
                  f" MB/s = {case['object_store_rows_per_s']:,.0f} rows/s", flush=True)
    finally:
        ray.shutdown()
    out["config"]["load_average"] = {"before": load_before[0], "after": os.getloadavg()[0]}
    return out


def _merged_into(path: str, result: dict, case: str) -> dict:
    """The results in ``path`` with case ``case`` replaced by this run's (its settings listed
    under ``config.reruns``)."""
    with open(path) as f:
        kept = json.load(f)
    fresh = next(c for c in result["cases"] if c["name"] == case)
    kept["cases"] = [fresh if c["name"] == case else c for c in kept.get("cases", [])]
    if all(c["name"] != case for c in kept["cases"]):
        kept["cases"].append(fresh)
    kept.setdefault("config", {}).setdefault("reruns", []).append(
        {"case": case, **result["config"]})
    return kept


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
    p.add_argument("--only", choices=["small", "big"],
                   help="one case; its entry replaces that case's in an existing --out file "
                        "(the other case's figures are kept)")
    args = parse_args(p, argv, small_records=2000, big_records=40, big_bytes=10_000, repeats=1)
    result = run(args)
    if args.only and args.out and os.path.exists(args.out):
        result = _merged_into(args.out, result, args.only)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
