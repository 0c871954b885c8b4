#!/usr/bin/env python3
"""Benchmark batched Example decoding: ofindex vs tf.io.parse_example vs vahidk tfrecord.

Usage::

    python tools/bench_decode.py [--out results.json] [--batch 256] [--repeat 15]

Two workloads, generated here (numpy random values, serialized by protobuf):

- ``mnist``: Examples with ``image`` = 784 float32 and ``label`` = one int64;
- ``big``: Examples with ``image`` = 150,528 float32 (a 224x224x3 image);

Each is decoded in batches of ``--batch`` records, from the same list of serialized
bytes, by

- ``ofindex``: ``ofindex.decode.decode_batch(records, {image: FixedLen, label: FixedLen})``,
  new output arrays every batch; each round drops the previous batch, as a training loop does,
  so big outputs take memory that the dropped batch released (``ofindex.decode.memory_pool``);
- ``ofindex_out``: the same into arrays reused from batch to batch (``out=``), as a training
  loop that copies each batch onward (e.g. to a GPU) can do;
- ``tf``: ``tf.io.parse_example(tf.constant(records), {FixedLenFeature...})`` (the
  ``tf.constant`` is built once, outside the timing; outputs fetched with ``.numpy()``);
- ``vahidk``: ``tfrecord.reader.extract_feature_dict`` (the decoding used by vahidk's
  ``tfrecord_loader``/``example_loader``) on ``tfrecord.example_pb2.Example`` parsed per
  record, then ``np.stack`` into the same batch arrays. vahidk's ``tfrecord`` registers the
  ``tensorflow.*`` protobuf symbols too, so it runs in a child process (it cannot be
  imported next to TensorFlow); ofindex is timed again in that process.

Measurements are interleaved (each contender runs once per round), so the machine's speed
drifting affects all alike. Reported: the median time per batch over ``--repeat`` rounds,
records/s, and the ratios ofindex/tf and ofindex/vahidk (throughput; the vahidk ratio uses
the timings taken in rounds with vahidk). Missing competitors are reported as skipped.
``fresh_output_floor`` is the time to allocate and fill a fresh ``(batch, floats)`` float32
array with numpy: what a decoder that takes new memory from the system for each batch cannot
beat (tf and vahidk do so).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from benchlib import parse_args  # noqa: E402

WORKLOADS = {"mnist": 784, "big": 150_528}


def make_records(size: int, n: int, seed: int) -> list[bytes]:
    from ofindex.proto import example_pb2

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ex = example_pb2.Example()
        ex.features.feature["image"].float_list.value.extend(rng.random(size, np.float32))
        ex.features.feature["label"].int64_list.value.append(int(rng.integers(10)))
        out.append(ex.SerializeToString())
    return out


def interleaved(fns: dict, repeat: int) -> dict:
    """Time several functions in rounds (each runs once per round, in turn), so a machine
    whose speed drifts affects all of them alike; {name: timing dict}."""
    for fn in fns.values():
        fn()  # warm-up
    times: dict = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: {"median_s": statistics.median(t), "best_s": min(t), "runs": repeat}
            for name, t in times.items()}


def ofindex_runs(records: list[bytes], size: int) -> dict:
    """The two ofindex variants: fresh output arrays, and arrays reused batch to batch."""
    from ofindex.decode import FixedLen, decode_batch

    spec = {"image": FixedLen((size,), np.float32), "label": FixedLen((), np.int64)}
    out = {"image": np.zeros((len(records), size), np.float32),
           "label": np.zeros(len(records), np.int64)}
    return {"ofindex": lambda: decode_batch(records, spec),
            "ofindex_out": lambda: decode_batch(records, spec, out=out)}


def tf_run(records: list[bytes], size: int):
    try:
        import tensorflow as tf
    except ImportError:
        return None
    spec = {"image": tf.io.FixedLenFeature([size], tf.float32),
            "label": tf.io.FixedLenFeature([], tf.int64)}
    serialized = tf.constant(records)

    def run():
        out = tf.io.parse_example(serialized, spec)
        return {k: v.numpy() for k, v in out.items()}

    return run


def vahidk_worker(path: str, size: int, repeat: int) -> None:
    """Child process: time vahidk tfrecord's example decoding; print JSON."""
    from tfrecord import example_pb2
    from tfrecord.reader import extract_feature_dict

    records = _load(path)
    description = {"image": "float", "label": "int"}
    mapping = {"byte": "bytes_list", "float": "float_list", "int": "int64_list"}

    def run():
        rows = []
        for rec in records:
            ex = example_pb2.Example()
            ex.ParseFromString(rec)
            rows.append(extract_feature_dict(ex.features, description, mapping))
        return {"image": np.stack([r["image"] for r in rows]),
                "label": np.stack([r["label"] for r in rows]).reshape(-1)}

    # ofindex is timed again here, in rounds with vahidk: the ratio does not depend on the
    # machine's speed drifting between processes
    fns = {"vahidk": run, **ofindex_runs(records, size)}
    result = interleaved(fns, repeat)
    out = run()
    result["checksum"] = [float(out["image"].astype(np.float64).sum()),
                          int(out["label"].sum())]
    print(json.dumps(result))


def _save(records: list[bytes], path: str) -> None:
    with open(path, "wb") as f:
        for r in records:
            f.write(len(r).to_bytes(8, "little"))
            f.write(r)


def _load(path: str) -> list[bytes]:
    data = Path(path).read_bytes()
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 8], "little")
        out.append(data[pos + 8:pos + 8 + n])
        pos += 8 + n
    return out


def bench_vahidk(records: list[bytes], size: int, repeat: int) -> dict | None:
    try:
        import importlib.util

        if importlib.util.find_spec("tfrecord") is None:
            return None
    except Exception:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "records.bin")
        _save(records, path)
        proc = subprocess.run(
            [sys.executable, __file__, "--vahidk-worker", path, "--size", str(size),
             "--repeat", str(repeat)],
            capture_output=True, text=True, check=True,
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="ofindex decode benchmark")
    ap.add_argument("--out", help="write the results as JSON to this path")
    ap.add_argument("--batch", type=int, default=256, help="records per batch")
    ap.add_argument("--repeat", type=int, default=15, help="timed runs per measurement")
    ap.add_argument("--big-repeat", type=int, default=11,
                    help="timed runs for the 150,528-float workload")
    ap.add_argument("--workloads", default="mnist,big")
    ap.add_argument("--vahidk-worker", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ns = parse_args(ap, argv, repeat=2, big_repeat=2, batch=16)
    if ns.vahidk_worker:
        vahidk_worker(ns.vahidk_worker, ns.size, ns.repeat)
        return 0

    results: dict = {
        "batch": ns.batch, "python": platform.python_version(),
        "machine": platform.machine(), "cpus": os.cpu_count(), "workloads": {},
    }
    for name in ns.workloads.split(","):
        size = WORKLOADS[name]
        repeat = ns.repeat if name == "mnist" else ns.big_repeat
        records = make_records(size, ns.batch, seed=42)
        entry: dict = {"floats_per_record": size,
                       "bytes_per_record": len(records[0]), "records": len(records)}
        runs = ofindex_runs(records, size)
        ours_out = runs["ofindex"]()
        reused = runs["ofindex_out"]()
        entry["ofindex_out_equal"] = bool(
            np.array_equal(reused["image"], ours_out["image"])
            and np.array_equal(reused["label"], ours_out["label"]))
        del reused
        # the least any decoder producing a fresh (batch, size) float32 array must pay:
        # allocating it and writing every byte once (page faults + memory bandwidth)
        runs["fresh_output_floor"] = (
            lambda size=size: np.empty((ns.batch, size), np.float32).fill(1.0))
        tf_fn = tf_run(records, size)
        if tf_fn is not None:
            tf_out = tf_fn()
            entry["tf_outputs_equal"] = bool(
                np.array_equal(ours_out["image"], tf_out["image"])
                and np.array_equal(ours_out["label"], tf_out["label"]))
            del tf_out
            runs["tf"] = tf_fn
        else:
            entry["tf"] = "skipped (tensorflow not installed)"
        entry.update(interleaved(runs, repeat))
        vk = bench_vahidk(records, size, repeat)
        if vk is not None:
            checksum = vk.pop("checksum")
            entry["vahidk_outputs_equal"] = checksum == [
                float(ours_out["image"].astype(np.float64).sum()), int(ours_out["label"].sum())]
            entry["vahidk"] = vk.pop("vahidk")
            entry["in_vahidk_process"] = vk  # ofindex timed in rounds with vahidk
        else:
            entry["vahidk"] = "skipped (tfrecord not installed)"
        for key in ("ofindex", "ofindex_out", "tf", "vahidk", "fresh_output_floor"):
            if isinstance(entry[key], dict):
                entry[key]["records_per_s"] = ns.batch / entry[key]["median_s"]
        for ours_key in ("ofindex", "ofindex_out"):
            if isinstance(entry["tf"], dict):
                entry[f"{ours_key}_ratio_vs_tf"] = (
                    entry["tf"]["median_s"] / entry[ours_key]["median_s"])
            if isinstance(entry["vahidk"], dict):
                entry[f"{ours_key}_ratio_vs_vahidk"] = (
                    entry["vahidk"]["median_s"] / entry["in_vahidk_process"][ours_key]["median_s"])
        results["workloads"][name] = entry
        del records, ours_out
        _print(name, entry)
    if ns.out:
        Path(ns.out).write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {ns.out}")
    return 0


def _print(name: str, entry: dict) -> None:
    print(f"{name}: {entry['records']} records x {entry['floats_per_record']} floats "
          f"({entry['bytes_per_record']} bytes each)")
    for key in ("ofindex", "ofindex_out", "tf", "vahidk", "fresh_output_floor"):
        r = entry[key]
        if isinstance(r, dict):
            print(f"  {key:18s} {r['records_per_s']:>12,.0f} records/s "
                  f"(median {r['median_s'] * 1e3:.2f} ms/batch)")
        else:
            print(f"  {key:18s} {r}")
    for ours_key in ("ofindex", "ofindex_out"):
        for key in ("tf", "vahidk"):
            if f"{ours_key}_ratio_vs_{key}" in entry:
                print(f"  {ours_key} / {key}: {entry[f'{ours_key}_ratio_vs_{key}']:.2f}x")
    print(f"  outputs equal: tf {entry.get('tf_outputs_equal')}, vahidk "
          f"{entry.get('vahidk_outputs_equal')}, out= {entry['ofindex_out_equal']}")


if __name__ == "__main__":
    raise SystemExit(main())
