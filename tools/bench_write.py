"""Writing datasets from numpy columns: ofindex's ShardedWriter (compiled batch encoder,
sidecars and manifest included) against TensorFlow's tutorial path (tf.train.Example built in
Python + tf.io.TFRecordWriter), vahidk tfrecord's TFRecordWriter and MosaicML Streaming's
MDSWriter on the same columns; and Parquet conversion (``ofindex.convert``) against pyarrow
reading the same file alone (the bound).

Workloads: MNIST-like (784 float32 + int64 label, 1 M records) and ImageNet-like (~110 KB of
random "JPEG" bytes + int64 label + 3 int64, 20 k records), each into 8 shards. Every
contender writes the same records (made from one seed) into its own directory, in a process
of its own (vahidk's protobuf classes clash with TensorFlow's in one process); the rounds are
interleaved (round k runs every contender once, in an order rotated by k) and each ratio is
taken within a round, so a slow phase of a shared machine hits both sides of it. Printed and
written: the median over rounds with the min-max spread.

A peer that is not installed is skipped with a line saying how to install it.

Then ``ofindex schema`` on the scale simulation store's 1e10-record, 1e5-shard remote dataset
(``simstore://``, tools/sim_store.py), once per round in a fresh process: seconds, and the
requests it made (by kind of file) -- a bounded number, whatever the dataset's size.

    python tools/bench_write.py --out bench-results/write.json
    python tools/bench_write.py --smoke          # tiny sizes: checks that it runs
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import parse_args, write_json

import ofindex

SHARDS = 8
BATCH = 4096
#: How to install each peer (printed when one is missing).
INSTALL = {
    "tf_tutorial": "pip install 'ofindex[tf]'",
    "vahidk": "pip install 'ofindex[bench]'",
    "mds": "pip install --no-deps mosaicml-streaming brotli python-snappy zstd xxhash "
           "(its pinned requirements would replace torch and numpy)",
}


def columns(kind: str, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The workload's columns: the same for every contender (one seed)."""
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


def run_ofindex(cols: dict[str, np.ndarray], n: int, out: str) -> None:
    with ofindex.ShardedWriter(out, shard_records=-(-n // SHARDS)) as w:
        for start in range(0, n, BATCH):
            w.write_columns({k: v[start:start + BATCH] for k, v in cols.items()})


def _tf_feature(tf: Any, value: Any) -> Any:
    """TensorFlow's tutorial helpers (_bytes_feature, _float_feature, _int64_feature)."""
    if isinstance(value, bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return tf.train.Feature(float_list=tf.train.FloatList(value=value))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=np.atleast_1d(value)))


def run_tf_tutorial(cols: dict[str, np.ndarray], n: int, out: str) -> None:
    import tensorflow as tf

    os.makedirs(out)
    per = -(-n // SHARDS)
    for shard in range(SHARDS):
        name = os.path.join(out, f"part-{shard:05d}-of-{SHARDS:05d}")
        with tf.io.TFRecordWriter(name) as writer:
            for i in range(shard * per, min(n, (shard + 1) * per)):
                feature = {k: _tf_feature(tf, v[i]) for k, v in cols.items()}
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())


def run_vahidk(cols: dict[str, np.ndarray], n: int, out: str) -> None:
    from tfrecord import TFRecordWriter

    os.makedirs(out)
    per = -(-n // SHARDS)
    kinds = {k: ("float" if v.dtype.kind == "f" else "byte" if v.dtype.kind == "O" else "int")
             for k, v in cols.items()}
    for shard in range(SHARDS):
        writer = TFRecordWriter(os.path.join(out, f"part-{shard:05d}-of-{SHARDS:05d}"))
        for i in range(shard * per, min(n, (shard + 1) * per)):
            writer.write({k: (v[i], kinds[k]) for k, v in cols.items()})
        writer.close()


def mds_writer() -> Any:
    """MosaicML Streaming's MDSWriter, imported without ``streaming/__init__.py``: that file
    also imports its datasets and loaders (torchvision, transformers), which a machine with
    a CPU-only torch may not have; the writer's own modules need none of them."""
    if "streaming" not in sys.modules:
        spec = importlib.util.find_spec("streaming")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("No module named 'streaming'")
        root = next(iter(spec.submodule_search_locations))
        for name, path in (("streaming", root), ("streaming.base", os.path.join(root, "base"))):
            module = types.ModuleType(name)
            module.__path__ = [path]
            sys.modules[name] = module
    from streaming.base.format.mds.writer import MDSWriter

    return MDSWriter


def run_mds(cols: dict[str, np.ndarray], n: int, out: str) -> None:
    writer_class = mds_writer()
    types_ = {}
    for k, v in cols.items():
        if v.dtype.kind == "O":
            types_[k] = "bytes"
        elif v.ndim == 1:
            types_[k] = v.dtype.name  # a numpy scalar: MDS's 'int64' encoding
        else:
            types_[k] = f"ndarray:{v.dtype.name}:{','.join(map(str, v.shape[1:]))}"
    per_record = sum(len(v[0]) if v.dtype.kind == "O" else v[:1].nbytes
                     for v in cols.values())
    limit = max(1 << 20, per_record * n // SHARDS + per_record)
    with writer_class(out=out, columns=types_, size_limit=limit) as w:
        for i in range(n):
            w.write({k: v[i] for k, v in cols.items()})


CONTENDERS = {"ofindex": run_ofindex, "tf_tutorial": run_tf_tutorial, "vahidk": run_vahidk,
              "mds": run_mds}
PEERS = ("tf_tutorial", "vahidk", "mds")
#: The peers that build each record in Python: their time per record does not depend on how
#: many they write, so ``--peer-records`` may cap them on a busy machine.
SLOW_PEERS = ("tf_tutorial", "vahidk")
_IMPORTS = {"ofindex": "ofindex", "tf_tutorial": "tensorflow", "vahidk": "tfrecord",
            "mds": None}


def available(name: str) -> str | None:
    """Why contender ``name`` cannot run here (``None``: it can)."""
    if name == "mds":
        try:
            mds_writer()
        except ImportError as exc:
            return f"not installed ({exc}): {INSTALL['mds']}"
        return None
    module = _IMPORTS[name]
    if module and importlib.util.find_spec(module) is None:
        return f"not installed (no module {module!r}): {INSTALL[name]}"
    return None


def one_run(name: str, kind: str, n: int, root: str, records: int) -> float | str:
    """Seconds of one write of the first ``records`` of the workload's ``n`` records by
    contender ``name`` in a fresh process (the columns are made there, untimed), or why it
    failed."""
    out = os.path.join(root, f"{kind}-{name}")
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--contender", name,
                           "--kind", kind, "--n", str(n), "--records", str(records), "--dir",
                           out], capture_output=True, text=True)
    shutil.rmtree(out, ignore_errors=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"failed ({tail})"
    return float(json.loads(lines[-1])["seconds"])


def spread(values: list[float]) -> dict[str, float]:
    """Median and range of per-round figures."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def write_rounds(kind: str, n: int, root: str, rounds: int,
                 peer_records: int | None = None) -> dict[str, Any]:
    """Every contender ``rounds`` times, interleaved; ratios (of the time per record) taken
    within each round. ``peer_records``: the peers that write record by record in Python
    (TensorFlow's tutorial path, vahidk) write only the first that many records."""
    names = [c for c in CONTENDERS if available(c) is None]
    counts = {c: min(n, peer_records) if peer_records and c in SLOW_PEERS else n
              for c in CONTENDERS}
    entry: dict[str, Any] = {"records": n, "contenders": {}, "ratios": {}}
    for name in CONTENDERS:
        why = available(name)
        if why:
            entry["contenders"][name] = {"unavailable": why}
            print(f"{kind:9} {name:12} skipped: {why}", flush=True)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            got = one_run(name, kind, n, root, counts[name])
            if isinstance(got, str):
                entry["contenders"][name] = {"unavailable": got}
                print(f"{kind:9} {name:12} {got}", flush=True)
                names.remove(name)
                seconds.pop(name)
                continue
            seconds[name].append(got)
            print(f"{kind:9} round {r + 1}/{rounds} {name:12} {got:8.2f} s "
                  f"({counts[name] / got:,.0f} records/s, {counts[name]:,} records)",
                  flush=True)
    for name, times in seconds.items():
        entry["contenders"][name] = {"seconds": times, "records": counts[name],
                                     "records_per_s": spread([counts[name] / t
                                                              for t in times])}
    ours = seconds.get("ofindex")
    for peer in PEERS:
        if ours and peer in seconds and len(seconds[peer]) == len(ours):
            entry["ratios"][peer] = spread([(p / counts[peer]) / (o / n) for p, o in
                                            zip(seconds[peer], ours, strict=True)])
            s = entry["ratios"][peer]
            print(f"{kind:9} ofindex vs {peer}: {s['median']:.2f}x "
                  f"({s['min']:.2f}-{s['max']:.2f}) over {len(ours)} rounds", flush=True)
    return entry


def _parquet_file(cols: dict[str, np.ndarray], path: str) -> int:
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
    pq.write_table(pa.table(arrays), path, row_group_size=BATCH)
    return os.path.getsize(path)


def _read_alone(path: str) -> None:
    """pyarrow reading the file into Arrow batches, nothing else: the bound of any
    conversion from it."""
    import pyarrow.parquet as pq

    for _ in pq.ParquetFile(path).iter_batches(batch_size=BATCH):
        pass


def parquet_rounds(kind: str, n: int, root: str, rounds: int) -> dict[str, Any]:
    """``ofindex.convert`` of a Parquet file of the workload's columns into 8 shards against
    pyarrow reading it alone, alternated; the ratio (bound time / conversion time) within
    each round."""
    path = os.path.join(root, "src.parquet")
    size = _parquet_file(columns(kind, n), path)  # the columns are freed once it is written
    _read_alone(path)  # both sides start with the file in the page cache
    bound, ours = [], []
    for r in range(rounds):
        for step in (("read", "convert") if r % 2 == 0 else ("convert", "read")):
            start = time.perf_counter()
            if step == "read":
                _read_alone(path)
                bound.append(time.perf_counter() - start)
                continue
            out = os.path.join(root, f"conv-{r}")
            ofindex.convert(path, out, shard_records=-(-n // SHARDS), batch_size=BATCH)
            ours.append(time.perf_counter() - start)
            shutil.rmtree(out)
    os.remove(path)
    return {"parquet_bytes": size, "pyarrow_read_s": bound, "convert_s": ours,
            "convert_records_per_s": spread([n / t for t in ours]),
            "convert_mb_per_s": spread([size / t / 1e6 for t in ours]),
            "pyarrow_records_per_s": spread([n / t for t in bound]),
            "pyarrow_mb_per_s": spread([size / t / 1e6 for t in bound]),
            "ratio_of_bound": spread([b / o for b, o in zip(bound, ours, strict=True)])}


#: The scale simulation store's dataset ``ofindex schema`` is timed on (tools/sim_store.py).
SCHEMA_RECORDS, SCHEMA_SHARDS = 10**10, 10**5


def schema_child(records: int, shards: int) -> dict[str, Any]:
    """``ofindex schema`` on a synthetic remote dataset, in this (fresh) process: seconds
    from the command's start to its end (opening the manifest, sampling), and the requests
    the store served."""
    import contextlib
    import io

    import sim_store

    from ofindex.cli.main import main as cli

    url = sim_store.dataset_url(records, shards)
    sim = sim_store.dataset_named(url.split("://", 1)[1])
    manifest = len(sim.manifest)  # generated before the clock starts
    sim_store.STATS.reset()
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()) as text:
        code = cli(["schema", url])
    seconds = time.perf_counter() - start
    stats = sim_store.STATS
    return {"seconds": seconds, "exit": code, "manifest_bytes": manifest,
            "requests": dict(stats.requests), "infos": stats.infos,
            "bytes": dict(stats.bytes), "first_line": text.getvalue().splitlines()[0]}


def schema_rounds(rounds: int, records: int, shards: int) -> dict[str, Any]:
    """:func:`schema_child` in ``rounds`` fresh processes."""
    runs = []
    for _ in range(rounds):
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--schema-child",
                               f"{records},{shards}"], capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:
            return {"unavailable": (done.stderr.strip().splitlines() or ["no output"])[-1]}
        runs.append(json.loads(lines[-1]))
        r = runs[-1]
        print(f"schema    {records:.0e} records, {shards:,} shards: {r['seconds']:.2f} s, "
              f"{sum(r['requests'].values()) + r['infos']} requests {r['requests']} + "
              f"{r['infos']} stats", flush=True)
    return {"records": records, "shards": shards, "runs": runs,
            "seconds": spread([r["seconds"] for r in runs]),
            "requests": max(sum(r["requests"].values()) + r["infos"] for r in runs)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="ofindex write benchmark")
    ap.add_argument("--out", default="bench-results/write.json")
    ap.add_argument("--mnist-records", type=int, default=1_000_000)
    ap.add_argument("--imagenet-records", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=["mnist", "imagenet", "schema"],
                    help="one part; its entry replaces that part's in an existing --out file "
                         "(the other parts' figures are kept)")
    ap.add_argument("--no-parquet", action="store_true", help="skip the Parquet conversions")
    ap.add_argument("--dir", help="where to write (default: a temporary directory)")
    ap.add_argument("--peer-records", type=int,
                    help="TensorFlow's tutorial path and vahidk write only the first N records "
                         "of each workload (compared per record; default: all)")
    ap.add_argument("--no-schema", action="store_true",
                    help="skip `ofindex schema` on the 1e5-shard simulated store")
    ap.add_argument("--schema-child", help=argparse.SUPPRESS)
    ap.add_argument("--contender", help=argparse.SUPPRESS)
    ap.add_argument("--kind", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--records", type=int, help=argparse.SUPPRESS)
    ns = parse_args(ap, argv, mnist_records=2000, imagenet_records=40, rounds=1)
    if ns.schema_child:
        records, shards = (int(v) for v in ns.schema_child.split(","))
        print(json.dumps(schema_child(records, shards)))
        return 0
    if ns.contender:
        records = ns.records or ns.n
        cols = {k: v[:records] for k, v in columns(ns.kind, ns.n).items()}
        if ns.contender == "mds":  # imports happen before the clock starts
            mds_writer()
        elif _IMPORTS[ns.contender]:
            importlib.import_module(str(_IMPORTS[ns.contender]))
        start = time.perf_counter()
        CONTENDERS[ns.contender](cols, records, ns.dir)
        print(json.dumps({"seconds": time.perf_counter() - start}))
        return 0
    root = tempfile.mkdtemp(prefix="bench-write-", dir=ns.dir)
    results: dict[str, Any] = {
        "config": {"python": platform.python_version(), "cpus": os.cpu_count(),
                   "shards": SHARDS, "batch": BATCH, "rounds": ns.rounds,
                   "load_before": os.getloadavg()[0], "directory": root,
                   "peer_records": ns.peer_records,
                   "compiled": ofindex._accel.implementation()},
        "workloads": {}}
    try:
        for kind, n in (("mnist", ns.mnist_records), ("imagenet", ns.imagenet_records)):
            if ns.only and kind != ns.only:
                continue
            entry = write_rounds(kind, n, root, ns.rounds, ns.peer_records)
            if not ns.no_parquet:
                entry["parquet"] = p = parquet_rounds(kind, n, root, ns.rounds)
                print(f"{kind:9} parquet convert {p['convert_records_per_s']['median']:,.0f} "
                      f"records/s, {p['convert_mb_per_s']['median']:,.0f} MB/s; pyarrow alone "
                      f"{p['pyarrow_mb_per_s']['median']:,.0f} MB/s; "
                      f"{p['ratio_of_bound']['median']:.2f}x of the bound "
                      f"({p['ratio_of_bound']['min']:.2f}-{p['ratio_of_bound']['max']:.2f})",
                      flush=True)
            results["workloads"][kind] = entry
        if not ns.no_schema and ns.only in (None, "schema"):
            scale = (SCHEMA_RECORDS, SCHEMA_SHARDS) if not ns.smoke else (10**6, 100)
            results["schema"] = schema_rounds(ns.rounds, *scale)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results["config"]["load_after"] = os.getloadavg()[0]
    if ns.only and ns.out and os.path.exists(ns.out):
        results = _merged_into(ns.out, results, ns.only)
    write_json(results, ns.out)
    return 0


def _merged_into(path: str, results: dict[str, Any], part: str) -> dict[str, Any]:
    """The results in ``path`` with ``part`` (a workload or ``schema``) replaced by this run's,
    and this run's settings listed under ``config.reruns``."""
    with open(path) as f:
        kept: dict[str, Any] = json.load(f)
    if part == "schema":
        kept["schema"] = results["schema"]
    else:
        kept.setdefault("workloads", {})[part] = results["workloads"][part]
    kept.setdefault("config", {}).setdefault("reruns", []).append(
        {"part": part, **results["config"]})
    return kept


if __name__ == "__main__":
    sys.exit(main())
