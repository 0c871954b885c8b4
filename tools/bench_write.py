"""Writing datasets from numpy columns: ofindex's ShardedWriter (batch encoder, sidecars and
manifest included) against TensorFlow's tutorial path (tf.train.Example built in Python +
tf.io.TFRecordWriter), vahidk tfrecord's TFRecordWriter and MosaicML Streaming's MDSWriter on the
same columns; and Parquet conversion against pyarrow reading the same file alone (the bound).

Workloads: MNIST-like (784 float32 + int64 label) and ImageNet-like (~110 KB of random "JPEG"
bytes + label + 3 int64), each into 8 shards. Every contender writes the same records into its
own directory in the same run; times are the median of ``--repeat`` runs (spread: min-max).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import parse_args, write_json

import ofindex

SHARDS = 8
BATCH = 4096


def columns(kind: str, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if kind == "mnist":
        return {"image": rng.random((n, 784), dtype=np.float32),
                "label": rng.integers(0, 10, n)}
    sizes = rng.integers(100_000, 120_000, n)
    blob = rng.bytes(int(sizes.max()) + 4096)
    starts = rng.integers(0, 4096, n)
    images = np.empty(n, dtype=object)
    images[:] = [blob[s:s + z] for s, z in zip(starts.tolist(), sizes.tolist(), strict=True)]
    return {"image": images, "label": rng.integers(0, 1000, n),
            "meta": rng.integers(0, 1 << 40, (n, 3))}


def run_ofindex(cols, n, out):
    with ofindex.ShardedWriter(out, shard_records=-(-n // SHARDS)) as w:
        for start in range(0, n, BATCH):
            w.write_columns({k: v[start:start + BATCH] for k, v in cols.items()})


def _tf_feature(tf, value):
    if isinstance(value, bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return tf.train.Feature(float_list=tf.train.FloatList(value=value))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=np.atleast_1d(value)))


def run_tf(cols, n, out):
    import tensorflow as tf

    os.makedirs(out)
    per = -(-n // SHARDS)
    for shard in range(SHARDS):
        with tf.io.TFRecordWriter(os.path.join(out, f"part-{shard:05d}")) as writer:
            for i in range(shard * per, min(n, (shard + 1) * per)):
                feature = {k: _tf_feature(tf, v[i]) for k, v in cols.items()}
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())


def run_vahidk(cols, n, out):
    from tfrecord import TFRecordWriter

    os.makedirs(out)
    per = -(-n // SHARDS)
    kinds = {k: ("float" if v.dtype.kind == "f" else "byte" if v.dtype.kind == "O" else "int")
             for k, v in cols.items()}
    for shard in range(SHARDS):
        writer = TFRecordWriter(os.path.join(out, f"part-{shard:05d}"))
        for i in range(shard * per, min(n, (shard + 1) * per)):
            writer.write({k: (v[i], kinds[k]) for k, v in cols.items()})
        writer.close()


def run_mds(cols, n, out):
    from streaming import MDSWriter

    types = {k: ("bytes" if v.dtype.kind == "O" else f"ndarray:{v.dtype.name}")
             for k, v in cols.items()}
    total = sum(v[:1].nbytes if v.dtype.kind != "O" else len(v[0]) for v in cols.values())
    with MDSWriter(out=out, columns=types, size_limit=max(1 << 20, total * n // SHARDS)) as w:
        for i in range(n):
            w.write({k: v[i] if v.dtype.kind == "O" else np.atleast_1d(v[i])
                     for k, v in cols.items()})


def timed(fn, cols, n, root, repeat):
    times = []
    for k in range(repeat):
        out = os.path.join(root, f"{fn.__name__}-{k}")
        start = time.perf_counter()
        fn(cols, n, out)
        times.append(time.perf_counter() - start)
        shutil.rmtree(out, ignore_errors=True)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
            "records_per_s": n / statistics.median(times)}


def parquet_conversion(cols, n, root, repeat):
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays = {}
    for k, v in cols.items():
        if v.dtype.kind == "O":
            arrays[k] = pa.array(v.tolist(), pa.binary())
        elif v.ndim == 2:
            arrays[k] = pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), v.shape[1])
        else:
            arrays[k] = pa.array(v)
    path = os.path.join(root, "src.parquet")
    pq.write_table(pa.table(arrays), path, row_group_size=BATCH)
    size = os.path.getsize(path)

    def read_alone():
        for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH):
            for column in batch.columns:
                column.to_numpy(zero_copy_only=False) if column.type.num_fields == 0 else \
                    column.flatten().to_numpy()

    bound, ours = [], []
    for k in range(repeat):
        start = time.perf_counter()
        read_alone()
        bound.append(time.perf_counter() - start)
        out = os.path.join(root, f"conv-{k}")
        start = time.perf_counter()
        ofindex.convert(path, out, shard_records=-(-n // SHARDS), batch_size=BATCH)
        ours.append(time.perf_counter() - start)
        shutil.rmtree(out)
    b, o = statistics.median(bound), statistics.median(ours)
    return {"parquet_bytes": size, "pyarrow_read_s": b, "convert_s": o,
            "convert_min_max_s": [min(ours), max(ours)],
            "convert_records_per_s": n / o, "convert_mb_per_s": size / o / 1e6,
            "pyarrow_records_per_s": n / b, "ratio_of_bound": b / o}


CONTENDERS = {"ofindex": run_ofindex, "tf_tutorial": run_tf, "vahidk": run_vahidk,
              "mds": run_mds}


def in_process(name, kind, n, root, repeat):
    """Time one contender in a process of its own (vahidk's protobuf classes clash with
    TensorFlow's in one process); the columns are made from the same seed there."""
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--contender", name,
                           "--kind", kind, "--n", str(n), "--dir", root,
                           "--repeat", str(repeat)], capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"unavailable ({tail})"
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="ofindex write benchmark")
    ap.add_argument("--out", default="bench-results/write.json")
    ap.add_argument("--mnist-records", type=int, default=1_000_000)
    ap.add_argument("--imagenet-records", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", help="where to write (default: a temporary directory)")
    ap.add_argument("--contender", help=argparse.SUPPRESS)
    ap.add_argument("--kind", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ns = parse_args(ap, argv, mnist_records=2000, imagenet_records=40, repeat=1)
    if ns.contender:
        cols = columns(ns.kind, ns.n)
        print(json.dumps(timed(CONTENDERS[ns.contender], cols, ns.n, ns.dir, ns.repeat)))
        return 0
    root = tempfile.mkdtemp(prefix="bench-write-", dir=ns.dir)
    results: dict = {"python": platform.python_version(), "cpus": os.cpu_count(),
                     "shards": SHARDS, "workloads": {}}
    try:
        for kind, n in (("mnist", ns.mnist_records), ("imagenet", ns.imagenet_records)):
            cols = columns(kind, n)
            entry: dict = {"records": n}
            for name in CONTENDERS:
                entry[name] = in_process(name, kind, n, root, ns.repeat)
                r = entry[name]
                print(f"{kind:9} {name:12} " + (f"{r['records_per_s']:>12,.0f} records/s "
                      f"(median of {ns.repeat}, {r['min_s']:.2f}-{r['max_s']:.2f} s)"
                      if isinstance(r, dict) else r), flush=True)
            for peer in ("tf_tutorial", "vahidk", "mds"):
                if isinstance(entry[peer], dict):
                    entry[f"ratio_vs_{peer}"] = entry[peer]["median_s"] / \
                        entry["ofindex"]["median_s"]
                    print(f"{kind:9} ofindex vs {peer}: {entry[f'ratio_vs_{peer}']:.2f}x")
            entry["parquet"] = parquet_conversion(cols, n, root, ns.repeat)
            p = entry["parquet"]
            print(f"{kind:9} parquet convert {p['convert_records_per_s']:,.0f} records/s, "
                  f"{p['convert_mb_per_s']:,.0f} MB/s; {p['ratio_of_bound']:.2f}x of pyarrow "
                  "reading it alone")
            results["workloads"][kind] = entry
    finally:
        shutil.rmtree(root, ignore_errors=True)
    write_json(results, ns.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
