#!/usr/bin/env python3
"""The training input pipeline end to end: ofindex against what users run today, in one run.

Batches of 256 of a globally shuffled epoch (ofindex) against each contender configured as
its documentation recommends (see tools/pipelines.py): ofindex + torch DataLoader and ofindex
+ Grain (2 workers each), tf.data (interleave, shuffle buffer, batch, parse_example,
prefetch, AUTOTUNE), vahidk tfrecord (MultiTFRecordDataset + shuffle queue + DataLoader),
MosaicML Streaming (the same records converted to MDS, local directory) and NVIDIA DALI's
CPU TFRecord reader (when it imports and runs without a GPU).

Two data sets, written once under --root: MNIST-like (784 float32 + label) and ImageNet-like
(a ~110 KB JPEG + label + height + width); every record also has an ``id`` feature (its
record number + 2**35: a constant varint width) so that the order each pipeline delivers can
be scored with tools/bench_shuffle.py's "mixing" (1.0 = as mixed as a full shuffle).
Pipelines stop at the decoded features (JPEG bytes). The ImageNet-like ``+jpeg`` case also
decodes every JPEG to RGB and resizes it to --image-size pixels square with an antialiased
bilinear (triangle) filter, the same output for all: ofindex with its image stage
(``images=`` of TensorBatches/GrainBatches: libjpeg-turbo via simplejpeg, DCT-domain
downscaling where the target is at most half the image, torch's antialiased resize), DALI
with its CPU decoder and ``fn.resize(antialias=True)``, tf.data with ``decode_jpeg`` and
``tf.image.resize(antialias=True)`` in its parallel map; the others give bytes that the
consuming process decodes and resizes with Pillow.

Every run is a fresh process (cold start: imports done, then pipeline construction to the
first batch is the first-batch latency); rounds interleave the contenders. Reported:
batches/s (median and range over rounds), first-batch latency, mixing, and ofindex's ratio
to the best other contender per round (and to tf.data's, for the TensorFlow path). Goal:
ofindex >= 1.5x the best contender. With ``--fit`` (the default), a Keras ``model.fit`` of a
small MLP on the MNIST-like data from our PyDataset, our tf.data path and the tf.data pipeline
they replace: steps/s of its second epoch (interleaved rounds) and the first epoch's time.

    python tools/bench_pipeline.py [--rounds 3] [--out bench-results/pipeline.json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

from benchlib import parse_args, read_all, sidecar_path, write_json  # noqa: E402
from pipelines import _torchvision_standin  # noqa: E402

import ofindex  # noqa: E402
from ofindex.formats.sidecar import open_local_sidecar  # noqa: E402
from ofindex.formats.textindex import export_text  # noqa: E402
from ofindex.proto import example_pb2  # noqa: E402
from ofindex.shuffle import mixing_of_epoch  # noqa: E402

ALL = ["ofindex-torch", "ofindex-torch-main", "ofindex-grain", "ofindex-tf", "tfdata", "vahidk",
       "streaming", "dali"]
#: The inputs of the Keras ``model.fit`` rows (MNIST-like data): our PyDataset, our tf.data
#: path, and the tf.data pipeline they replace.
FIT = ["ofindex-keras", "ofindex-tf", "tfdata"]
IMAGE = "jpeg"
#: Added to every record's id so that all ids take the same varint width: records of one
#: data set then share one byte layout, as MNIST's do (labels 0-9).
ID_BASE = 1 << 35


def _jpegs(count: int, target: int, seed: int = 0) -> list[tuple[bytes, int, int]]:
    """``count`` distinct JPEGs of about ``target`` bytes (noisy photos-sized images)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        h, w = int(rng.integers(300, 340)), int(rng.integers(360, 400))
        base = rng.integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8)
        img = np.kron(base, np.ones((8, 8, 1), dtype=np.uint8))[:h, :w]
        img = np.clip(img + rng.normal(0, 24, img.shape), 0, 255).astype(np.uint8)
        for quality in (90, 80, 70, 60, 50, 40):
            buf = io.BytesIO()
            Image.fromarray(img).save(buf, format="JPEG", quality=quality)
            if buf.tell() <= target * 1.15:
                break
        out.append((buf.getvalue(), h, w))
    return out


def make_dataset(root: str, kind: str, records: int, shards: int) -> str:
    """TFRecord shards (with sidecars and DALI/vahidk text indexes) and an MDS copy, written
    once; returns the directory."""
    d = os.path.join(root, f"pipeline2-{kind}-{records}-{shards}")
    if os.path.exists(os.path.join(d, "_COMPLETE")):
        return d
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(1)
    jpegs = _jpegs(32, 110_000) if kind == "imagenet" else []
    try:
        _torchvision_standin()
        from streaming import MDSWriter
    except ImportError:  # the streaming contender will report itself unavailable
        MDSWriter = None
    columns = ({"image": "ndarray:float32:784", "label": "int64", "id": "int64"} if kind == "mnist"
               else {IMAGE: "bytes", "label": "int64", "id": "int64", "height": "int64",
                     "width": "int64"})
    per = [records // shards + (k < records % shards) for k in range(shards)]
    rid = 0
    with contextlib.ExitStack() as stack:
        mds = (stack.enter_context(MDSWriter(out=os.path.join(d, "mds"), columns=columns,
                                             size_limit=1 << 27)) if MDSWriter else None)
        for k, n in enumerate(per):
            path = os.path.join(d, f"part-{k:05d}")
            with ofindex.Writer(path) as w:
                for _ in range(n):
                    ex = example_pb2.Example()
                    f = ex.features.feature
                    sample: dict[str, Any] = {
                        "id": rid + ID_BASE,
                        "label": int(rng.integers(0, 10 if kind == "mnist" else 1000))}
                    if kind == "mnist":
                        img = rng.random(784, dtype=np.float32)
                        f["image"].float_list.value.extend(img.tolist())
                        sample["image"] = img
                    else:
                        jpeg, h, wd = jpegs[rid % len(jpegs)]
                        f[IMAGE].bytes_list.value.append(jpeg)
                        f["height"].int64_list.value.append(h)
                        f["width"].int64_list.value.append(wd)
                        sample.update({IMAGE: jpeg, "height": h, "width": wd})
                    f["label"].int64_list.value.append(sample["label"])
                    f["id"].int64_list.value.append(rid + ID_BASE)
                    w.write(ex.SerializeToString())
                    if mds is not None:
                        mds.write(sample)
                    rid += 1
            with open(path + ".idx", "wb") as idx:
                idx.write(export_text(open_local_sidecar(sidecar_path(path))))
    open(os.path.join(d, "_COMPLETE"), "w").close()
    return d


def run_one(name: str, cfg: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One cold run of a contender in its own process."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]), TF_CPP_MIN_LOG_LEVEL="2")
    try:
        proc = subprocess.run([sys.executable, os.path.join(HERE, "pipelines.py"), name,
                               json.dumps(cfg)], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"contender": name, "error": f"no result within {timeout:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[7:])
            return result
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"contender": name, "error": " | ".join(tail) or f"exit code {proc.returncode}"}


def mixing_of(ids: list[int], n: int) -> float | None:
    """tools/bench_shuffle.py's mixing of the delivered order, over the records delivered."""
    if len(ids) < 3:
        return None
    got = np.asarray(ids, dtype=np.int64)
    dense = np.empty(len(got), dtype=np.int64)  # the delivered records numbered 0..m-1
    dense[np.argsort(got, kind="stable")] = np.arange(len(got))  # in file order
    return mixing_of_epoch(dense)


def bench_case(case: str, cfg: dict[str, Any], contenders: list[str], rounds: int,
               n: int, timeout: float) -> tuple[list[dict], dict[str, str]]:
    """Interleaved rounds of every contender on one data set; rows and failures."""
    runs: dict[str, list[dict]] = {c: [] for c in contenders}
    failed: dict[str, str] = {}
    for r in range(rounds):
        for name in contenders:
            if name in failed:
                continue
            res = run_one(name, dict(cfg, ids=r == 0), timeout)
            if "error" in res:
                failed[name] = res["error"]
                print(f"  {case}: {name} unavailable: {res['error']}", flush=True)
                continue
            runs[name].append(res)
            cpu = res.get("cpu_ms_per_batch")
            print(f"  {case} round {r}: {name:14s} {res['batches_per_s']:8.2f} batches/s, "
                  f"first batch {res['first_batch_s']:.2f} s"
                  + (f", {cpu:.2f} CPU ms/batch" if cpu is not None else ""), flush=True)
    rows = []
    ok = {k: v for k, v in runs.items() if v}
    peers = [k for k in ok if not k.startswith("ofindex")]
    for name, rs in ok.items():
        rates = [x["batches_per_s"] for x in rs]
        first = [x["first_batch_s"] for x in rs]
        row = {"case": case, "contender": name, "batches_per_s": statistics.median(rates),
               "batches_per_s_min": min(rates), "batches_per_s_max": max(rates),
               "first_batch_s": statistics.median(first), "first_batch_s_min": min(first),
               "first_batch_s_max": max(first), "runs": rates,
               "records_per_batch": rs[0]["records_per_batch"],
               "cpu_ms_per_batch": _median_of(rs, "cpu_ms_per_batch"),
               "load": [x.get("load") for x in rs],
               "mixing": mixing_of(rs[0]["ids"], n) if rs[0].get("ids") else None}
        if name.startswith("ofindex") and peers:
            ratios = [rates[i] / max(ok[p][i]["batches_per_s"] for p in peers
                                     if i < len(ok[p]))
                      for i in range(len(rates))]
            row.update(ratio_vs_best_peer=statistics.median(ratios),
                       ratio_vs_best_peer_min=min(ratios), ratio_vs_best_peer_max=max(ratios))
        for peer in ("dali", "ofindex-torch"):  # the peer; Grain against our torch path
            if name.startswith("ofindex") and peer in ok and peer != name:
                row.update(_ratios(f"ratio_vs_{peer.replace('-', '_')}", rates,
                                   [x["batches_per_s"] for x in ok[peer]]))
        if name.startswith("ofindex") and "tfdata" in ok:  # the pipeline TensorFlow users run
            tf_ratios = [rates[i] / ok["tfdata"][i]["batches_per_s"]
                         for i in range(min(len(rates), len(ok["tfdata"])))]
            row.update(ratio_vs_tfdata=statistics.median(tf_ratios),
                       ratio_vs_tfdata_min=min(tf_ratios), ratio_vs_tfdata_max=max(tf_ratios))
        rows.append(row)
    return rows, failed


def _median_of(runs: list[dict], key: str) -> float | None:
    values = [x[key] for x in runs if x.get(key) is not None]
    return statistics.median(values) if values else None


def _ratios(key: str, mine: list[float], theirs: list[float]) -> dict[str, float]:
    """Median, min and max over the rounds of ``mine[i] / theirs[i]`` (same round)."""
    ratios = [a / b for a, b in zip(mine, theirs, strict=False)]
    return {key: statistics.median(ratios), f"{key}_min": min(ratios),
            f"{key}_max": max(ratios)}


def bench_fit(cfg: dict[str, Any], rounds: int, timeout: float) -> tuple[list[dict],
                                                                          dict[str, str]]:
    """Keras ``model.fit`` of a small MLP on MNIST-like data from each input of FIT,
    interleaved rounds: steps/s of the second epoch, and the first (cold) epoch's seconds."""
    runs: dict[str, list[dict]] = {name: [] for name in FIT}
    failed: dict[str, str] = {}
    for r in range(rounds):
        for name in FIT:
            if name in failed:
                continue
            res = run_one(f"fit:{name}", cfg, timeout)
            if "error" in res:
                failed[name] = res["error"]
                print(f"  keras fit: {name} unavailable: {res['error']}", flush=True)
                continue
            runs[name].append(res)
            print(f"  keras fit round {r}: {name:14s} {res['steps_per_s']:8.2f} steps/s, "
                  f"first epoch {res['first_epoch_s']:.2f} s", flush=True)
    rows = []
    for name, rs in runs.items():
        if not rs:
            continue
        rates = [x["steps_per_s"] for x in rs]
        first = [x["first_epoch_s"] for x in rs]
        row = {"case": "mnist keras fit", "contender": name, "steps": rs[0]["steps"],
               "steps_per_s": statistics.median(rates), "steps_per_s_min": min(rates),
               "steps_per_s_max": max(rates), "runs": rates,
               "first_epoch_s": statistics.median(first), "first_epoch_s_min": min(first),
               "first_epoch_s_max": max(first)}
        if name != "tfdata" and runs["tfdata"]:
            ratios = [a / b["steps_per_s"] for a, b in zip(rates, runs["tfdata"], strict=False)]
            row.update(ratio_vs_tfdata=statistics.median(ratios),
                       ratio_vs_tfdata_min=min(ratios), ratio_vs_tfdata_max=max(ratios))
        rows.append(row)
    return rows, failed


def _ratio_text(row: dict[str, Any], key: str) -> str:
    if key not in row:
        return ""
    return f"{row[key]:.2f}x ({row[key + '_min']:.2f}-{row[key + '_max']:.2f})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "ofindex-bench"))
    p.add_argument("--mnist-records", type=int, default=60_000)
    p.add_argument("--imagenet-records", type=int, default=20_000,
                   help="more than --buffer: a buffer holding the whole set is not a stream")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--buffer", type=int, default=10_000,
                   help="shuffle buffer of tf.data, vahidk's queue and DALI's initial_fill")
    p.add_argument("--imagenet-batches", type=int, default=40,
                   help="batches timed per ImageNet-like run (MNIST-like: one epoch)")
    p.add_argument("--jpeg-batches", type=int, default=12,
                   help="batches timed per run of the +jpeg case (each decodes 256 JPEGs)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--image-size", type=int, default=224,
                   help="the +jpeg case resizes every image to this many pixels square")
    p.add_argument("--contenders", default=",".join(ALL))
    p.add_argument("--cases", default="mnist,imagenet,imagenet+jpeg")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--fit", action=argparse.BooleanOptionalAction, default=True,
                   help="also time a Keras model.fit on MNIST-like data from each input")
    p.add_argument("--out", default="bench-results/pipeline.json")
    a = parse_args(p, argv, mnist_records=2_000, shards=2, rounds=1, buffer=500, cases="mnist",
                   fit=False)  # the suite runs --smoke: the model.fit rows are tested elsewhere
    contenders = [c for c in a.contenders.split(",") if c]
    result: dict[str, Any] = {"config": {k: v for k, v in vars(a).items() if k != "root"},
                              "rows": [], "unavailable": {}, "load": os.getloadavg()}
    for case in a.cases.split(","):
        kind = case.split("+")[0]
        n = a.mnist_records if kind == "mnist" else a.imagenet_records
        d = make_dataset(a.root, kind, n, a.shards)
        read_all([os.path.join(d, f) for f in sorted(os.listdir(d)) if f.startswith("part-")])
        batches = (n // a.batch_size - 1 if kind == "mnist" else
                   a.jpeg_batches if case.endswith("+jpeg") else a.imagenet_batches)
        cfg = {"kind": kind, "files": os.path.join(d, "part-?????"), "mds": os.path.join(d, "mds"),
               "batch_size": a.batch_size, "workers": a.workers, "buffer": a.buffer,
               "batches": max(1, batches), "image": IMAGE, "jpeg": case.endswith("+jpeg"),
               "image_size": [a.image_size, a.image_size]}
        print(f"{case}: {n} records in {a.shards} shards, {cfg['batches']} batches per run",
              flush=True)
        rows, failed = bench_case(case, cfg, contenders, a.rounds, n, a.timeout)
        result["rows"] += rows
        result["unavailable"].update({f"{case}: {k}": v for k, v in failed.items()})
        if kind == "mnist" and a.fit and "fit" not in result:
            print(f"keras fit: {n // a.batch_size} steps per epoch", flush=True)
            result["fit"], failed = bench_fit(dict(cfg, batches=n // a.batch_size), a.rounds,
                                              a.timeout)
            result["unavailable"].update({f"keras fit: {k}": v for k, v in failed.items()})
    print(f"\n{'case':16s} {'contender':18s} {'batches/s':>22s} {'first batch s':>14s} "
          f"{'mixing':>7s} {'vs best peer':>18s} {'vs dali':>18s} {'vs ofindex-torch':>18s}")
    for r in result["rows"]:
        ratios = [_ratio_text(r, key) for key in ("ratio_vs_best_peer", "ratio_vs_dali",
                                                  "ratio_vs_ofindex_torch")]
        mix = f"{r['mixing']:.3f}" if r["mixing"] is not None else "-"
        print(f"{r['case']:16s} {r['contender']:18s} {r['batches_per_s']:8.2f} "
              f"({r['batches_per_s_min']:.2f}-{r['batches_per_s_max']:.2f}) "
              f"{r['first_batch_s']:14.2f} {mix:>7s} " + " ".join(f"{x:>18s}" for x in ratios))
    if result.get("fit"):
        print(f"\n{'keras model.fit':16s} {'input':14s} {'steps/s':>22s} {'first epoch s':>14s} "
              f"{'vs tf.data':>18s}")
    for r in result.get("fit", []):
        ratio = (f"{r['ratio_vs_tfdata']:.2f}x ({r['ratio_vs_tfdata_min']:.2f}-"
                 f"{r['ratio_vs_tfdata_max']:.2f})" if "ratio_vs_tfdata" in r else "")
        print(f"{'':16s} {r['contender']:14s} {r['steps_per_s']:8.2f} "
              f"({r['steps_per_s_min']:.2f}-{r['steps_per_s_max']:.2f}) "
              f"{r['first_epoch_s']:14.2f} {ratio:>18s}")
    write_json(result, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
