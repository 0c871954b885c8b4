"""Spark, Beam and Dask on ofindex datasets against their own readers and writers (issue 50).

One file of Examples (``--size`` bytes of TFRecord, default 2 GB: ``label`` int64 in 0..99,
``value`` float32, ``payload`` bytes of ``--payload`` letters that compress about 3x), the same
rows in one Parquet file (Snappy, row groups of 128 MiB), and the same records in one GZIP
TFRecord file (ofindex's writer: seek points every 256 KiB), generated once under ``--dir``.
Every engine runs on this machine's 2 cores; each contender is timed ``--repeats`` times,
alternated, after a warm-up run of each: rows/s of the median round with the slowest and
fastest (``*_range``), ratios taken within each round (median, min, max; the machine is
shared: its load is recorded).

* **Spark** (``local[2]``): every row's three columns summed (``sum(label)``, ``sum(value)``,
  ``sum(length(payload))``) through ``spark.read.format("ofindex")`` with the split
  planner's partitions (``--spark-partitions``, one per core by default), through the same
  source with one partition (a reader that can only take the file whole, as Spark's TFRecord
  connectors split files), and through Spark's Parquet reader; then writing the rows read
  from Parquet with ``df.write.format("ofindex")`` against ``df.write.parquet``. **Filter
  pushdown**: the same sums over ``label < 10`` (10 % of the records; ``label`` is
  ``record % 100``, so a ``label == k`` would keep 1 %), with the column ``label`` built
  (``build_index(columns=["label"])``, once, untimed): through the source with the filter
  pushed down (only the matching records are read) against the same source with
  ``option("pushdown", "false")`` (Spark filters every record itself).
* **Beam** (DirectRunner, 2 worker processes): every record of the GZIP file counted through
  ``ReadFromOfindex`` (split at its seek points) against ``ReadFromTFRecord``
  (``splittable=False``: one worker inflates the whole file); then the records of the plain
  file written as GZIP by ``WriteToOfindex`` (shards, sidecars and manifest) against
  ``WriteToTFRecord`` alone and ``WriteToTFRecord`` followed by ``ofindex build``.
* **Dask** (``LocalCluster`` of 2 single-thread workers): ``read(path, {label, value})`` then
  ``groupby("label")["value"].mean()`` against ``dask.dataframe.read_parquet`` of those two
  columns and the same groupby.

Ratios are rows/s against the peer. ``--out`` writes JSON.

    python tools/bench_engines.py --out bench-results/engines.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]
# the engines' worker processes (Spark's Python workers, Beam's SDK workers) import ofindex
# from this tree and run this interpreter
os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # Spark on the loopback interface only

import numpy as np  # noqa: E402
from benchlib import machine_load, parse_args  # noqa: E402

import ofindex  # noqa: E402
from ofindex.decode import FixedLen  # noqa: E402

SPEC = {"label": FixedLen((), "int64"), "value": FixedLen((), "float32"),
        "payload": FixedLen((), "bytes")}
#: Rows generated at once.
_CHUNK = 100_000


def _chunks(records: int, payload: int, seed: int = 0):
    """Arrow tables of the benchmark's rows, ``_CHUNK`` at a time."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    for start in range(0, records, _CHUNK):
        n = min(_CHUNK, records - start)
        letters = rng.integers(97, 105, size=n * payload, dtype=np.uint8)  # 8 letters: ~3x gzip
        offsets = pa.array(np.arange(n + 1, dtype=np.int32) * payload)
        payloads = pa.BinaryArray.from_buffers(pa.binary(), n,
                                               [None, offsets.buffers()[1],
                                                pa.py_buffer(letters.tobytes())])
        yield pa.table({"label": pa.array((np.arange(start, start + n) % 100).astype(np.int64)),
                        "value": pa.array(rng.random(n, dtype=np.float32)),
                        "payload": payloads})


def _data(root: str, size: int, payload: int) -> dict[str, str]:
    """The three files (generated once): ``tfrecord``, ``gzip``, ``parquet`` paths."""
    import pyarrow.parquet as pq

    records = max(1, size // (payload + 40))  # framing and the Example's other features
    tag = f"{records}x{payload}"
    d = os.path.join(root, f"engines-{tag}")
    paths = {"tfrecord": os.path.join(d, "plain"), "gzip": os.path.join(d, "gzip"),
             "parquet": os.path.join(d, "rows.parquet"), "records": str(records)}
    marker = os.path.join(d, "_COMPLETE")
    if os.path.exists(marker):
        return paths
    os.makedirs(d, exist_ok=True)
    for kind, compression in (("tfrecord", None), ("gzip", "gzip")):
        with ofindex.ShardedWriter(paths[kind], spec=SPEC, compression=compression,
                                   shard_bytes=1 << 62) as writer:
            for table in _chunks(records, payload):
                writer.write_columns(table)
    writer_pq = None
    for table in _chunks(records, payload):
        if writer_pq is None:
            writer_pq = pq.ParquetWriter(paths["parquet"], table.schema, compression="snappy")
        writer_pq.write_table(table, row_group_size=max(1, (128 << 20) // (payload + 12)))
    assert writer_pq is not None
    writer_pq.close()
    open(marker, "w").close()
    return paths


def _file_of(directory: str) -> str:
    (name,) = [n for n in os.listdir(directory) if n.startswith("part-")]
    return os.path.join(directory, name)


#: Run each contender once unmeasured first (``--no-warmup``: not; ``--smoke`` sets it).
WARMUP = [True]


def _timed(contenders: dict[str, Callable[[], None]], repeats: int) -> dict[str, list[float]]:
    """The seconds of each contender in ``repeats`` alternated rounds (after one unmeasured
    run each: JVM classes, imports, the page cache)."""
    for fn in contenders.values() if WARMUP[0] else ():
        fn()
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            t = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - t)
    return seconds


def _rates(seconds: dict[str, list[float]], rows: int) -> dict[str, float]:
    """Rows/s of each contender's median round."""
    return {name: rows / float(np.median(s)) for name, s in seconds.items()}


def _ranges(seconds: dict[str, list[float]], rows: int) -> dict[str, list[float]]:
    """Rows/s of each contender's slowest and fastest round."""
    return {name: [rows / max(s), rows / min(s)] for name, s in seconds.items()}


def _ratio(seconds: dict[str, list[float]], ours: str, peer: str) -> dict[str, float]:
    """``ours`` against ``peer`` in rows/s, taken within each round: median, min, max."""
    within = [p / o for o, p in zip(seconds[ours], seconds[peer], strict=True)]
    return {"median": float(np.median(within)), "min": min(within), "max": max(within)}


#: The pushdown row's filter, and the records it keeps of ``n`` (``label`` is ``i % 100``).
PUSHDOWN_FILTER = "label < 10"


def _kept(n: int) -> int:
    return sum(min(10, max(0, n - start)) for start in range(0, n, 100))


def _with_label_column(directory: str) -> None:
    """Build the column ``label`` of the dataset in ``directory`` (once)."""
    with ofindex.open(directory) as ds:
        try:
            ds.column_type("label")
            return
        except ofindex.OfindexError:
            pass
    ofindex.build_index(directory, columns=["label"])


def bench_pushdown(spark, directory: str, rows: int, repeats: int, partitions: int) -> dict:
    """The filter-pushdown row (see the module's docstring): rows/s of the whole dataset."""
    from pyspark.sql import functions as F

    _with_label_column(directory)
    schema = "label bigint, value float, payload binary"
    kept = _kept(rows)

    def query(pushdown: bool) -> Callable[[], None]:
        def run() -> None:
            df = (spark.read.format("ofindex").schema(schema).option("partitions", partitions)
                  .option("pushdown", str(pushdown).lower()).load(directory)
                  .filter(PUSHDOWN_FILTER))
            got = df.agg(F.count("*"), F.sum(F.length("payload"))).collect()[0]
            assert got[0] == kept, (got[0], kept)
        return run

    seconds = _timed({"ofindex_pushdown": query(True), "spark_filter": query(False)}, repeats)
    return {"filter": PUSHDOWN_FILTER, "kept": kept, "rows_per_s": _rates(seconds, rows),
            "rows_per_s_range": _ranges(seconds, rows),
            "pushdown_vs_spark_filter": _ratio(seconds, "ofindex_pushdown", "spark_filter")}


def bench_spark(paths: dict[str, str], rows: int, repeats: int, scratch: str,
                partitions: int, reads_only: bool = False) -> dict:
    """Spark's figures (see the module's docstring)."""
    from pyspark.sql import functions as F

    spark = spark_session()
    plain = _file_of(paths["tfrecord"])
    schema = "label bigint, value float, payload binary"

    def consume(df) -> None:
        got = df.agg(F.sum("label"), F.sum("value"), F.sum(F.length("payload"))).collect()
        assert got[0][0] == sum(i % 100 for i in range(rows)) or rows > 10**7

    def ours(partitions: int) -> Callable[[], None]:
        return lambda: consume(spark.read.format("ofindex").schema(schema)
                               .option("partitions", partitions).load(plain))

    reads = _timed({"ofindex_split": ours(partitions), "ofindex_one_partition": ours(1),
                    "parquet": lambda: consume(spark.read.parquet(paths["parquet"]))}, repeats)
    figures = {"read_rows_per_s": _rates(reads, rows), "read_rows_per_s_range":
               _ranges(reads, rows), "write_rows_per_s": {}, "ratios": {
                   "split_vs_parquet": _ratio(reads, "ofindex_split", "parquet"),
                   "split_vs_one_partition": _ratio(reads, "ofindex_split",
                                                    "ofindex_one_partition")}}
    if reads_only:
        spark.stop()
        return figures
    counter = iter(range(10**6))

    def write_ours() -> None:
        out = os.path.join(scratch, f"spark-ofindex-{next(counter)}")
        spark.read.parquet(paths["parquet"]).write.format("ofindex").mode("append").save(out)

    def write_parquet() -> None:
        out = os.path.join(scratch, f"spark-parquet-{next(counter)}")
        spark.read.parquet(paths["parquet"]).write.parquet(out)

    writes = _timed({"ofindex_write": write_ours, "parquet_write": write_parquet}, repeats)
    pushdown = bench_pushdown(spark, paths["tfrecord"], rows, repeats, partitions)
    spark.stop()
    figures["write_rows_per_s"] = _rates(writes, rows)
    figures["write_rows_per_s_range"] = _ranges(writes, rows)
    figures["ratios"]["write_vs_parquet"] = _ratio(writes, "ofindex_write", "parquet_write")
    return with_pushdown(figures, pushdown)


def with_pushdown(figures: dict, pushdown: dict) -> dict:
    """Spark's figures with the pushdown row's rows/s and ratio added (replaced)."""
    figures = dict(figures)
    for key in ("read_rows_per_s", "read_rows_per_s_range"):
        kept = {name: rate for name, rate in figures.get(key, {}).items()
                if not name.startswith(("ofindex_pushdown", "spark_filter"))}
        kept.update({f"{name} ({pushdown['filter']})": rate
                     for name, rate in pushdown.get(key.removeprefix("read_"), {}).items()})
        figures[key] = kept
    ratios = {**figures["ratios"], "pushdown_vs_spark_filter":
              pushdown["pushdown_vs_spark_filter"]}
    return {**figures, "ratios": ratios, "pushdown": pushdown}


def spark_session():
    """A local Spark of 2 cores with the ofindex source registered."""
    from pyspark.sql import SparkSession

    from ofindex.integrations.spark import register

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def bench_beam(paths: dict[str, str], rows: int, repeats: int, scratch: str,
               reads_only: bool = False) -> dict:
    """Beam's figures (see the module's docstring)."""
    import apache_beam as beam
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.options.pipeline_options import PipelineOptions

    from ofindex.integrations.beam import ReadFromOfindex, WriteToOfindex

    options = PipelineOptions(direct_num_workers=2, direct_running_mode="multi_processing")
    gzip_file = _file_of(paths["gzip"])
    plain = _file_of(paths["tfrecord"])

    def count(read: beam.PTransform) -> None:
        with beam.Pipeline(options=options) as p:
            counted = p | read | beam.combiners.Count.Globally()
            counted | beam.Map(lambda n: _check(n, rows))

    reads = _timed({
        "ofindex_read": lambda: count(ReadFromOfindex(gzip_file, partitions=8)),
        "ReadFromTFRecord": lambda: count(beam.io.ReadFromTFRecord(
            gzip_file, compression_type=CompressionTypes.GZIP))}, repeats)
    figures = {"read_rows_per_s": _rates(reads, rows), "read_rows_per_s_range":
               _ranges(reads, rows), "write_rows_per_s": {}, "ratios": {
                   "read_vs_ReadFromTFRecord": _ratio(reads, "ofindex_read",
                                                      "ReadFromTFRecord")}}
    if reads_only:
        return figures
    counter = iter(range(10**6))

    def write_ours() -> None:
        out = os.path.join(scratch, f"beam-ofindex-{next(counter)}")
        with beam.Pipeline(options=options) as p:
            (p | ReadFromOfindex(plain, partitions=8)
               | WriteToOfindex(out, compression="gzip", shard_bytes=256 << 20))

    def write_theirs(build: bool) -> Callable[[], None]:
        def run() -> None:
            out = os.path.join(scratch, f"beam-tfrecord-{next(counter)}")
            with beam.Pipeline(options=options) as p:
                (p | ReadFromOfindex(plain, partitions=8)
                   | beam.io.WriteToTFRecord(os.path.join(out, "part"),
                                             compression_type=CompressionTypes.GZIP))
            if build:
                ofindex.build_index(out, manifest=True)
        return run

    writes = _timed({"ofindex_write": write_ours, "WriteToTFRecord": write_theirs(False),
                     "WriteToTFRecord_then_build": write_theirs(True)}, repeats)
    figures["write_rows_per_s"] = _rates(writes, rows)
    figures["write_rows_per_s_range"] = _ranges(writes, rows)
    figures["ratios"].update({
        "write_vs_WriteToTFRecord": _ratio(writes, "ofindex_write", "WriteToTFRecord"),
        "write_vs_WriteToTFRecord_then_build": _ratio(writes, "ofindex_write",
                                                      "WriteToTFRecord_then_build")})
    return figures


def _check(counted: int, rows: int) -> None:
    if counted != rows:
        raise AssertionError(f"counted {counted} records, expected {rows}")


def bench_dask(paths: dict[str, str], rows: int, repeats: int) -> dict:
    """Dask's figures (see the module's docstring)."""
    import dask.dataframe as dd
    from dask.distributed import Client, LocalCluster

    from ofindex.integrations.dask import read

    spec = {"label": SPEC["label"], "value": SPEC["value"]}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", silence_logs=40) as cluster, \
            Client(cluster):
        def ours() -> None:
            means = read(paths["tfrecord"], spec).groupby("label")["value"].mean().compute()
            assert len(means) == min(rows, 100)

        def parquet() -> None:
            frame = dd.read_parquet(paths["parquet"], columns=["label", "value"])
            assert len(frame.groupby("label")["value"].mean().compute()) == min(rows, 100)

        seconds = _timed({"ofindex_read_groupby": ours, "read_parquet_groupby": parquet},
                         repeats)
    return {"rows_per_s": _rates(seconds, rows), "rows_per_s_range": _ranges(seconds, rows),
            "ratios": {"vs_read_parquet": _ratio(seconds, "ofindex_read_groupby",
                                                 "read_parquet_groupby")}}


def run(args: argparse.Namespace) -> dict:
    """Every engine's figures, with the run's settings and the machine's load."""
    root = args.dir or os.path.join(tempfile.gettempdir(), "ofindex-bench")
    paths = _data(root, args.size, args.payload)
    rows = int(paths["records"])
    config = {"size": args.size, "payload": args.payload, "records": rows,
              "repeats": args.repeats, "spark_partitions": args.spark_partitions,
              "reads_only": args.reads_only}
    if args.merge:  # an earlier run's figures, those measured now replacing them
        with open(args.merge) as f:
            result: dict = json.load(f)
        if result["config"]["records"] != rows:
            raise SystemExit(f"{args.merge} is a run over {result['config']['records']} "
                             f"records, not {rows}")
    else:
        result = {"config": config, "load_before": machine_load()}
    if args.only == ["pushdown"]:  # the pushdown row alone, into the Spark figures
        load = machine_load()
        spark = spark_session()
        pushdown = bench_pushdown(spark, paths["tfrecord"], rows, args.repeats,
                                  args.spark_partitions)
        spark.stop()
        pushdown.update(repeats=args.repeats, load_before=load, load_after=machine_load())
        result["spark"] = with_pushdown(result.get("spark") or {
            "read_rows_per_s": {}, "write_rows_per_s": {}, "ratios": {}}, pushdown)
        print("pushdown", json.dumps(pushdown, indent=1), flush=True)
        return result
    with tempfile.TemporaryDirectory(dir=root) as scratch:
        for name, bench in (("spark", lambda: bench_spark(paths, rows, args.repeats, scratch,
                                                             args.spark_partitions,
                                                             args.reads_only)),
                            ("beam", lambda: bench_beam(paths, rows, args.repeats, scratch,
                                                        args.reads_only)),
                            ("dask", lambda: bench_dask(paths, rows, args.repeats))):
            if args.only and name not in args.only:
                continue
            result[name] = bench()
            print(name, json.dumps(result[name], indent=1), flush=True)
    result["load_after"] = machine_load()
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=2_000_000_000,
                   help="bytes of the TFRecord file (default 2 GB)")
    p.add_argument("--payload", type=int, default=1000, help="bytes of each record's payload")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", nargs="+", choices=["spark", "beam", "dask", "pushdown"],
                   help="run only these (pushdown: Spark's filter-pushdown row alone, merged "
                        "into the Spark figures of --merge)")
    p.add_argument("--merge", help="a result JSON of an earlier run: its figures are kept, "
                                   "those measured now replace them")
    p.add_argument("--spark-partitions", type=int, default=2,
                   help="partitions of Spark's split read (default: one per executor core; a "
                        "task costs Spark about 0.1 s, and one partition already keeps a "
                        "Python worker and a JVM thread busy)")
    p.add_argument("--reads-only", action="store_true",
                   help="Spark's and Beam's reads only (no writes, no pushdown row)")
    p.add_argument("--dir", help="where the data is generated (reused when complete)")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="measure each contender's first run too")
    args = parse_args(p, argv, size=400_000, payload=200, repeats=1, warmup=False)
    WARMUP[0] = args.warmup
    result = run(args)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
