#!/usr/bin/env python3
"""Shuffle quality beside speed, on data stored class by class (issue 45, goal 6).

DALI's documentation says its TFRecord reader shuffles with a buffer: with ``initial_fill=1024``
on data sorted by label the first batch holds 2 of 20 classes and ~80 % of a batch comes from 2
classes. This benchmark measures that, for every input pipeline of tools/pipelines.py that
shuffles, on MNIST-like records written in label order (``--classes`` classes of equal size,
each record's ``id`` its file position):

* ``classes per batch``: distinct labels in a batch of ``--batch-size`` (mean over the epoch;
  ``first``: in the first batch), and ``top-2 share``: the part of a batch its two largest
  classes take (``ofindex.shuffle.class_balance``);
* ``moved``: how far records moved from their place in the files, ``mean |p - id| / (n/3)``
  (1.0 as a uniform shuffle; ``ofindex.shuffle.displacement``), and ``mixing``: how far file
  neighbours end up apart (``ofindex.shuffle.mixing_of_epoch``, 1.0 as a uniform shuffle);
* ``batches/s``: one epoch read in a fresh process (interleaved rounds; median and range).

Contenders: ofindex's global shuffle (``ofindex-torch-main``: torch DataLoader in the loop's
process; ``ofindex-grain``: GrainBatches with 2 workers), its block shuffle
(``ofindex-block``), Grain's own ``MapDataset.shuffle`` over an ofindex dataset (``grain``),
tf.data's ``shuffle(--buffer)`` after interleaving the files (``tfdata``), vahidk's shuffle
queue (``vahidk``) and DALI's ``fn.readers.tfrecord(random_shuffle=True,
initial_fill=--buffer)`` on the CPU (``dali``, when ``nvidia-dali`` is installed). The buffer
sizes are the same for every buffer-based reader. Writes a JSON that tools/report.py turns
into a table and a plot of classes per batch against batches/s.

    python tools/bench_shuffle_quality.py [--records 40000] [--classes 20] [--rounds 3]
        [--out bench-results/shuffle_quality.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

from bench_pipeline import ID_BASE, run_one  # noqa: E402
from benchlib import machine_load, parse_args, read_all, sidecar_path, write_json  # noqa: E402

import ofindex  # noqa: E402
from ofindex.formats.sidecar import open_local_sidecar  # noqa: E402
from ofindex.formats.textindex import export_text  # noqa: E402
from ofindex.proto import example_pb2  # noqa: E402
from ofindex.shuffle import class_balance, displacement, mixing_of_epoch  # noqa: E402

CONTENDERS = ["ofindex-torch-main", "ofindex-grain", "ofindex-block", "grain", "tfdata",
              "vahidk", "dali"]


def make_sorted_dataset(root: str, records: int, classes: int, shards: int) -> str:
    """MNIST-like records (784 float32, label, id) written in label order: record ``i`` has
    label ``i * classes // records``; with text indexes for DALI and vahidk. Written once."""
    d = os.path.join(root, f"sorted-{records}-{classes}-{shards}")
    if os.path.exists(os.path.join(d, "_COMPLETE")):
        return d
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(1)
    per = [records // shards + (k < records % shards) for k in range(shards)]
    rid = 0
    for k, count in enumerate(per):
        path = os.path.join(d, f"part-{k:05d}")
        with ofindex.Writer(path) as writer:
            for _ in range(count):
                example = example_pb2.Example()
                feature = example.features.feature
                feature["image"].float_list.value.extend(rng.random(784, dtype=np.float32))
                feature["label"].int64_list.value.append(rid * classes // records)
                feature["id"].int64_list.value.append(rid + ID_BASE)
                writer.write(example.SerializeToString())
                rid += 1
        with open(path + ".idx", "wb") as text_index:
            text_index.write(export_text(open_local_sidecar(sidecar_path(path))))
    open(os.path.join(d, "_COMPLETE"), "w").close()
    return d


def quality(ids: list[int], records: int, classes: int, batch_size: int) -> dict[str, Any]:
    """The class balance, displacement and mixing of one delivered epoch (``ids`` are file
    positions, in delivery order)."""
    delivered = np.asarray(ids, dtype=np.int64)
    balance = class_balance(delivered * classes // records, batch_size)
    dense = np.empty(len(delivered), dtype=np.int64)  # the delivered records renumbered 0..m-1
    dense[np.argsort(delivered, kind="stable")] = np.arange(len(delivered))
    return {"classes_per_batch": round(balance.classes_per_batch, 2),
            "first_batch_classes": balance.first_batch_classes,
            "top2_share": round(balance.top2_share, 3),
            "moved": round(displacement(dense), 3), "mixing": round(mixing_of_epoch(dense), 3),
            "records_delivered": len(delivered)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "ofindex-bench"))
    p.add_argument("--records", type=int, default=40_000)
    p.add_argument("--classes", type=int, default=20)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--buffer", type=int, default=1024,
                   help="shuffle buffer of tf.data and vahidk, DALI's initial_fill (DALI's "
                        "documented example: 1024)")
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--window", type=int, default=16)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--out", default="bench-results/shuffle_quality.json")
    a = parse_args(p, argv, records=2_000, shards=2, rounds=1, buffer=200,
                   contenders="ofindex-torch-main,ofindex-block,grain")
    d = make_sorted_dataset(a.root, a.records, a.classes, a.shards)
    read_all([os.path.join(d, f) for f in sorted(os.listdir(d)) if f.startswith("part-")])
    config = {"kind": "mnist", "files": os.path.join(d, "part-?????"), "mds": "",
              "batch_size": a.batch_size, "workers": a.workers, "buffer": a.buffer,
              "block_size": a.block_size, "window": a.window, "jpeg": False, "image": "image",
              "image_size": [0, 0], "batches": a.records // a.batch_size - 1}
    names = [c for c in a.contenders.split(",") if c]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    unavailable: dict[str, str] = {}
    for round_number in range(a.rounds):  # interleaved: every contender once per round
        for name in names:
            if name in unavailable:
                continue
            result = run_one(name, dict(config, ids=round_number == 0), a.timeout)
            if "error" in result:
                unavailable[name] = result["error"]
                print(f"{name}: unavailable: {result['error']}", flush=True)
                continue
            runs[name].append(result)
            print(f"round {round_number}: {name:18s} {result['batches_per_s']:8.2f} batches/s",
                  flush=True)
    rows = []
    for name, results in runs.items():
        if not results:
            continue
        rates = [r["batches_per_s"] for r in results]
        rows.append({"contender": name, "batches_per_s": statistics.median(rates),
                     "batches_per_s_min": min(rates), "batches_per_s_max": max(rates),
                     **quality(results[0]["ids"], a.records, a.classes, a.batch_size)})
    print(f"\n{a.records:,} records in {a.classes} classes stored in label order, batches of "
          f"{a.batch_size}, buffers of {a.buffer}:")
    print(f"{'contender':20s} {'classes/batch':>13s} {'first':>5s} {'top-2':>6s} "
          f"{'moved':>6s} {'mixing':>6s} {'batches/s':>16s}")
    for row in rows:
        print(f"{row['contender']:20s} {row['classes_per_batch']:13.2f} "
              f"{row['first_batch_classes']:5d} {row['top2_share']:6.2f} {row['moved']:6.3f} "
              f"{row['mixing']:6.3f} {row['batches_per_s']:7.1f} "
              f"({row['batches_per_s_min']:.1f}-{row['batches_per_s_max']:.1f})")
    write_json({"config": {k: v for k, v in vars(a).items() if k != "root"}, "rows": rows,
                "unavailable": unavailable, "load": machine_load()}, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
