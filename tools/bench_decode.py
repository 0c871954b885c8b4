#!/usr/bin/env python3
"""Benchmark Example decoding: batches against tf.io.parse_example and vahidk tfrecord, one
record at a time against protobuf's Example.FromString and Hugging Face datasets.

Usage::

    python tools/bench_decode.py [--out results.json] [--batch 256] [--repeat 15]

Four batch workloads, generated here (numpy random values, serialized by protobuf):

- ``mnist``: Examples with ``image`` = 784 float32 and ``label`` = one int64;
- ``big``: Examples with ``image`` = 150,528 float32 (a 224x224x3 image);
- ``varlen``: one batch of 10,000 Examples of 8 features, 6 ``FixedLen`` (id, label, score,
  a 16-float embedding, a language tag, a 4-int mask) and 2 ``VarLen`` (token ids, 1-200
  of them below 50,000; 0-7 optional floats, missing from a third of the records): issue
  45's case, against ``tf.io.parse_example`` with ``RaggedFeature`` (``tf``) and with
  ``VarLenFeature`` (``tf_sparse``), outputs fetched with ``.numpy()``;
- ``tokens``: batches of 256 Examples of one ``VarLen`` int64 feature, 1-512 token ids below
  50,000 each (16 batches a run), against the same two.

Both decode the same records, interleaved round by round; for ``varlen`` and ``tokens`` the
JSON holds each round's wall and CPU time (all threads) and the ratios of the rounds (median,
min, max) by either: on a machine shared with other work the CPU-time ratio is the steadier
one, the wall-clock one is what a user waits.

One record at a time (``--single-records`` Examples of 3 features: ``key`` bytes, ``label``
int64, ``payload`` ~200 random bytes, written to a TFRecord file under ``--root``), random
record numbers, records/s in interleaved rounds (tools/benchlib.py):

- ``ds[i]`` alone (the bytes), ``Example.FromString(ds[i])`` (protobuf's own parser, upb),
  ``Decoder(spec)(ds[i])``, ``ofindex.open(..., decode=Decoder(spec))[i]``,
  ``decode_example(ds[i])`` (every feature as stored), and Hugging Face ``datasets``'
  ``ds[i]`` on the same columns saved with ``save_to_disk`` (a dict of the three values).
  Ratios of the rounds by the wall clock and per CPU second.

On the same file, the peers that index TFRecord files for random access in place, tfr-reader
and tfd-utils: random records, random batches of 256 and the index build
(tools/decode_peers.py says how each is measured).

For the batch workloads mnist and big, each is decoded in batches of ``--batch`` records,
from the same list of serialized bytes, by

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
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from benchlib import (  # noqa: E402
    Contender,
    machine_load,
    parse_args,
    ratios,
    spread,
)
from benchlib import interleaved as interleaved_rates  # noqa: E402
from decode_peers import peers_section, print_peers  # noqa: E402

WORKLOADS = {"mnist": 784, "big": 150_528}
#: Workloads of VarLen features (see the module doc): records in all, records a batch.
VARLEN_WORKLOADS = {"varlen": (10_000, 10_000), "tokens": (16 * 256, 256)}


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
    whose speed drifts affects all of them alike; {name: timing dict}, with each run's wall
    time and CPU time (all the process's threads: what a run costs a machine busy with other
    work)."""
    for fn in fns.values():
        fn()  # warm-up
    times: dict = {name: [] for name in fns}
    cpu: dict = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    return {name: {"median_s": statistics.median(t), "best_s": min(t), "runs": repeat,
                   "times_s": t, "cpu_s": cpu[name]}
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


# ---- VarLen workloads: ofindex against tf.io.parse_example ---------------------------------

def varlen_records(n: int, seed: int) -> list[bytes]:
    """Issue 45's case: 8 features, 2 of them VarLen (see the module doc)."""
    from ofindex.proto import example_pb2

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ex = example_pb2.Example()
        f = ex.features.feature
        f["id"].int64_list.value.append(i)
        f["label"].int64_list.value.append(int(rng.integers(1000)))
        f["score"].float_list.value.append(float(rng.random()))
        f["embedding"].float_list.value.extend(rng.random(16, np.float32))
        f["lang"].bytes_list.value.append(b"en" if rng.random() < 0.5 else b"fr")
        f["mask"].int64_list.value.extend(rng.integers(0, 2, 4).tolist())
        f["tokens"].int64_list.value.extend(
            rng.integers(0, 50_000, int(rng.integers(1, 201))).tolist())
        if rng.random() < 0.7:
            f["extra"].float_list.value.extend(rng.random(int(rng.integers(0, 8)), np.float32))
        out.append(ex.SerializeToString())
    return out


def token_records(n: int, seed: int) -> list[bytes]:
    """The token-list case: 1-512 token ids below 50,000 per record."""
    from ofindex.proto import example_pb2

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ex = example_pb2.Example()
        ex.features.feature["tokens"].int64_list.value.extend(
            rng.integers(0, 50_000, int(rng.integers(1, 513))).tolist())
        out.append(ex.SerializeToString())
    return out


def varlen_specs(name: str) -> tuple[dict, Any]:
    """(our spec, a function of TF's VarLen feature class giving TF's spec) of a workload."""
    from ofindex.decode import FixedLen, VarLen

    if name == "tokens":
        return {"tokens": VarLen("int64")}, lambda tf, var: {"tokens": var(tf.int64)}
    ours = {"id": FixedLen((), "int64"), "label": FixedLen((), "int64"),
            "score": FixedLen((), "float32"), "embedding": FixedLen((16,), "float32"),
            "lang": FixedLen((), "bytes"), "mask": FixedLen((4,), "int64"),
            "tokens": VarLen("int64"), "extra": VarLen("float32")}

    def theirs(tf: Any, var: Any) -> dict:
        return {"id": tf.io.FixedLenFeature([], tf.int64),
                "label": tf.io.FixedLenFeature([], tf.int64),
                "score": tf.io.FixedLenFeature([], tf.float32),
                "embedding": tf.io.FixedLenFeature([16], tf.float32),
                "lang": tf.io.FixedLenFeature([], tf.string),
                "mask": tf.io.FixedLenFeature([4], tf.int64),
                "tokens": var(tf.int64), "extra": var(tf.float32)}

    return ours, theirs


def _tf_numpy(out: dict) -> dict:
    """TF's outputs as numpy: dense arrays, (values, row lengths) for ragged and sparse."""
    import tensorflow as tf

    result = {}
    for k, v in out.items():
        if isinstance(v, tf.RaggedTensor):
            result[k] = (v.flat_values.numpy(), v.row_lengths().numpy())
        elif isinstance(v, tf.SparseTensor):
            result[k] = (v.values.numpy(), v.indices.numpy(), v.dense_shape.numpy())
        else:
            result[k] = v.numpy()
    return result


def varlen_workload(name: str, repeat: int, smoke: bool) -> dict:
    """One VarLen workload: ofindex and TF's two VarLen forms, interleaved round by round."""
    from ofindex.decode import BatchDecoder, Ragged

    total, per_batch = VARLEN_WORKLOADS[name]
    if smoke:
        total, per_batch = min(total, 64), min(per_batch, 32)
    records = (varlen_records if name == "varlen" else token_records)(total, seed=45)
    batches = [records[i:i + per_batch] for i in range(0, total, per_batch)]
    ours, theirs = varlen_specs(name)
    decoder = BatchDecoder(ours)
    fns: dict = {"ofindex": lambda: [decoder(b) for b in batches]}
    entry: dict = {"records": total, "batch": per_batch,
                   "bytes_per_record": round(sum(map(len, records)) / total, 1)}
    try:
        import tensorflow as tf
    except ImportError:
        entry["tf"] = entry["tf_sparse"] = "skipped (tensorflow not installed)"
        entry.update(interleaved(fns, repeat))
        return entry
    constants = [tf.constant(b) for b in batches]
    for key, var in (("tf", tf.io.RaggedFeature), ("tf_sparse", tf.io.VarLenFeature)):
        spec = theirs(tf, var)
        fns[key] = lambda spec=spec: [_tf_numpy(tf.io.parse_example(c, spec))
                                      for c in constants]
    got, want = fns["ofindex"](), fns["tf"]()
    entry["tf_outputs_equal"] = all(
        all(np.array_equal(g[k].values, w[k][0]) and np.array_equal(g[k].row_lengths, w[k][1])
            if isinstance(g[k], Ragged) else np.array_equal(g[k], w[k]) for k in ours)
        for g, w in zip(got, want, strict=True))
    entry.update(interleaved(fns, repeat))
    for peer in ("tf", "tf_sparse"):
        for clock, suffix in (("times_s", ""), ("cpu_s", "_cpu")):
            per_round = [theirs_s / ours_s if ours_s > 0 else float("nan")
                         for theirs_s, ours_s in zip(entry[peer][clock],
                                                     entry["ofindex"][clock], strict=True)]
            entry[f"ofindex_vs_{peer}{suffix}"] = spread(per_round)
    for key in ("ofindex", "tf", "tf_sparse"):
        entry[key]["records_per_s"] = total / entry[key]["median_s"]
    return entry


# ---- one record at a time ------------------------------------------------------------------

SINGLE_SPEC_NAMES = ("key", "label", "payload")


def single_dataset(root: str, n: int) -> tuple[str, str]:
    """The Examples of the one-record rows as a TFRecord file and as a Hugging Face dataset
    of the same columns, made once under ``root``."""
    from ofindex.proto import example_pb2

    base = os.path.join(root, f"decode-single-{n}")
    path, hf_path, done = (os.path.join(base, "data.tfrecord"), os.path.join(base, "hf"),
                           os.path.join(base, "_COMPLETE"))
    if os.path.exists(done):
        return path, hf_path
    import datasets

    import ofindex

    os.makedirs(base, exist_ok=True)
    rng = np.random.default_rng(0)
    columns: dict = {"key": [], "label": [], "payload": []}
    with ofindex.Writer(path) as writer:
        for i in range(n):
            key, label = b"key-%08d" % i, int(rng.integers(1000))
            payload = rng.bytes(int(rng.integers(150, 251)))
            ex = example_pb2.Example()
            ex.features.feature["key"].bytes_list.value.append(key)
            ex.features.feature["label"].int64_list.value.append(label)
            ex.features.feature["payload"].bytes_list.value.append(payload)
            writer.write(ex.SerializeToString())
            for name, value in (("key", key), ("label", label), ("payload", payload)):
                columns[name].append(value)
    features = datasets.Features({"key": datasets.Value("binary"),
                                  "label": datasets.Value("int64"),
                                  "payload": datasets.Value("binary")})
    datasets.Dataset.from_dict(columns, features=features).save_to_disk(hf_path)
    open(done, "w").close()
    return path, hf_path


def single_contenders(path: str, hf_path: str, n: int) -> tuple[list[Contender], dict]:
    """The one-record contenders (see the module doc), each reading random record numbers,
    and the checks that they return the same values."""
    import datasets

    import ofindex
    from ofindex.decode import Decoder, FixedLen, decode_example
    from ofindex.proto import example_pb2

    spec = {"key": FixedLen((), "bytes"), "label": FixedLen((), "int64"),
            "payload": FixedLen((), "bytes")}
    ds = ofindex.open(path)
    decoded_ds = ofindex.open(path, decode=Decoder(spec))
    hf = datasets.load_from_disk(hf_path)
    decoder, parse = Decoder(spec), example_pb2.Example.FromString
    order = np.random.default_rng(7).integers(0, n, 1 << 20).tolist()

    def loop(get: Any) -> Any:
        def run(units: int) -> int:
            for i in order[:units]:
                get(i)
            return units
        return run

    probe = order[:50]
    parsed = [parse(ds[i]).features.feature for i in probe]
    checks = {
        "Decoder equals FromString": all(
            d["key"] == p["key"].bytes_list.value[0] and d["label"] == p["label"].int64_list
            .value[0] and d["payload"] == p["payload"].bytes_list.value[0]
            for d, p in zip([decoder(ds[i]) for i in probe], parsed, strict=True)),
        "open(decode=) equals Decoder": all(
            all(np.array_equal(decoded_ds[i][k], decoder(ds[i])[k]) for k in spec)
            for i in probe),
        "HF ds[i] equals Decoder": all(
            hf[i] == {k: decoder(ds[i])[k].item() for k in SINGLE_SPEC_NAMES} for i in probe),
        "decode_example equals Decoder": all(
            all(decode_example(ds[i])[k].item() == decoder(ds[i])[k].item() for k in spec)
            for i in probe),
    }
    contenders = [
        Contender("ds[i] (bytes)", loop(ds.__getitem__)),
        Contender("Example.FromString(ds[i])", loop(lambda i: parse(ds[i]))),
        Contender("Decoder(spec)(ds[i])", loop(lambda i: decoder(ds[i]))),
        Contender("open(decode=Decoder(spec))[i]", loop(decoded_ds.__getitem__)),
        Contender("decode_example(ds[i])", loop(lambda i: decode_example(ds[i]))),
        Contender("Hugging Face ds[i]", loop(hf.__getitem__)),
    ]
    return contenders, checks


#: The one-record rows compared, and with whom.
SINGLE_COMPARED = {
    "Decoder(spec)(ds[i])": ["Example.FromString(ds[i])", "Hugging Face ds[i]"],
    "open(decode=Decoder(spec))[i]": ["Example.FromString(ds[i])", "Hugging Face ds[i]"],
    "decode_example(ds[i])": ["Example.FromString(ds[i])", "Hugging Face ds[i]"],
}


def single_section(root: str, n: int, rounds: int, seconds: float) -> dict:
    """The one-record rows: records/s per contender (median, min, max over the rounds) and
    the ratios of the rounds against the peers."""
    path, hf_path = single_dataset(root, n)
    contenders, checks = single_contenders(path, hf_path, n)
    load_before = machine_load()
    rates, cpu_rates = interleaved_rates(contenders, rounds, seconds)
    rows = []
    for c in contenders:
        row: dict = {"contender": c.name, **{f"records_per_s{'' if k == 'median' else '_' + k}":
                                             v for k, v in spread(rates[c.name], 0).items()}}
        peers = SINGLE_COMPARED.get(c.name, [])
        if peers:  # by the wall clock, and per CPU second (less swayed by the machine's load)
            row["vs"] = {peer: ratios(rates, c.name, peer) for peer in peers}
            row["vs_cpu"] = {peer: ratios(cpu_rates, c.name, peer) for peer in peers}
        rows.append(row)
    return {"records": n, "rounds": rounds, "round_seconds": seconds, "checks": checks,
            "load": {"before": load_before, "after": machine_load()}, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="ofindex decode benchmark")
    ap.add_argument("--out", help="write the results as JSON to this path")
    ap.add_argument("--batch", type=int, default=256, help="records per batch")
    ap.add_argument("--repeat", type=int, default=15, help="timed runs per measurement")
    ap.add_argument("--big-repeat", type=int, default=11,
                    help="timed runs for the 150,528-float workload")
    ap.add_argument("--workloads", default="mnist,big,varlen,tokens")
    ap.add_argument("--single-records", type=int, default=200_000,
                    help="Examples of the one-record rows (0: no such rows)")
    ap.add_argument("--rounds", type=int, default=7,
                    help="interleaved rounds of the one-record rows")
    ap.add_argument("--round-seconds", type=float, default=0.5,
                    help="about how long each one-record contender runs per round")
    ap.add_argument("--build-rounds", type=int, default=5,
                    help="interleaved rounds of the peers' index builds (tools/decode_peers.py)")
    ap.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "ofindex-bench"),
                    help="where the one-record rows' dataset is made (once)")
    ap.add_argument("--vahidk-worker", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ns = parse_args(ap, argv, repeat=2, big_repeat=2, batch=16, single_records=2000, rounds=1,
                    round_seconds=0.05, build_rounds=1)
    if ns.vahidk_worker:
        vahidk_worker(ns.vahidk_worker, ns.size, ns.repeat)
        return 0

    results: dict = {
        "batch": ns.batch, "repeat": ns.repeat, "python": platform.python_version(),
        "machine": platform.machine(), "cpus": os.cpu_count(), "workloads": {},
    }
    results["machine_load"] = machine_load()
    for name in filter(None, ns.workloads.split(",")):
        if name in VARLEN_WORKLOADS:
            entry = varlen_workload(name, ns.repeat, ns.smoke)
            results["workloads"][name] = entry
            _print_varlen(name, entry)
            continue
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
    if ns.single_records:
        single = single_section(ns.root, ns.single_records, ns.rounds, ns.round_seconds)
        results["single"] = single
        _print_single(single)
        from ofindex.decode import FixedLen

        spec = {name: FixedLen((), "int64" if name == "label" else "bytes")
                for name in SINGLE_SPEC_NAMES}
        peers = peers_section(single_dataset(ns.root, ns.single_records)[0], ns.root,
                              ns.single_records, spec, ns.rounds, ns.round_seconds,
                              ns.build_rounds)
        results["peers"] = peers
        print_peers(peers)
    if ns.out:
        os.makedirs(os.path.dirname(os.path.abspath(ns.out)), exist_ok=True)
        Path(ns.out).write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {ns.out}")
    return 0


def _print_varlen(name: str, entry: dict) -> None:
    print(f"{name}: {entry['records']} records in batches of {entry['batch']} "
          f"({entry['bytes_per_record']} bytes each on average)")
    for key in ("ofindex", "tf", "tf_sparse"):
        r = entry[key]
        print(f"  {key:10s} " + (f"{r['records_per_s']:>12,.0f} records/s (median "
                                 f"{r['median_s'] * 1e3:.2f} ms a run)" if isinstance(r, dict)
                                 else r))
    for peer in ("tf", "tf_sparse"):
        v, c = entry.get(f"ofindex_vs_{peer}"), entry.get(f"ofindex_vs_{peer}_cpu")
        if v and c:
            print(f"  ofindex / {peer}: {v['median']:.2f}x ({v['min']:.2f}-{v['max']:.2f}); "
                  f"per CPU second {c['median']:.2f}x ({c['min']:.2f}-{c['max']:.2f})")
    print(f"  outputs equal tf: {entry.get('tf_outputs_equal')}")


def _print_single(single: dict) -> None:
    print(f"one record at a time: {single['records']} Examples, random record numbers")
    for row in single["rows"]:
        print(f"  {row['contender']:32s} {row['records_per_s']:>12,.0f}/s "
              f"({row['records_per_s_min']:,.0f}-{row['records_per_s_max']:,.0f})")
        for peer, v in row.get("vs", {}).items():
            c = row["vs_cpu"][peer]
            print(f"      {v['median']:.2f}x {peer} ({v['min']:.2f}-{v['max']:.2f}); per CPU "
                  f"second {c['median']:.2f}x ({c['min']:.2f}-{c['max']:.2f})")
    print(f"  checks: {single['checks']}")


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
