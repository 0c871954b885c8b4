#!/usr/bin/env python3
"""TensorBoard logs: ofindex.events against tbparse and TensorBoard's EventAccumulator.

A log directory of 10 runs (one event file each), 100 scalar tags, image and histogram tags,
written deterministically (``Event`` protobufs framed as TensorFlow frames them). The issue's
size (``--full``): 1e5 steps, the scalars every 10 steps (1e7 scalar events), images every
1,000 and histograms every 100 steps, about 1 GB; the default is a smaller log (the scalars
every 100 steps, about 80 MB) that runs in minutes. Measured, each in a fresh process (time
and peak memory above the process's after its imports), interleaved over ``--rounds``:

* ``load``: one scalar tag of every run once the index exists (``ofindex.events(logdir)
  .scalars(tag)``: opening the log, which finds the files unchanged, and the query), against
  tbparse's ``SummaryReader(logdir, pivot=False).scalars`` and
  ``EventAccumulator(run, size_guidance=0)`` of each run (its ``Scalars(tag)``). Goal: >= 100x.
* ``build``: the first ``ofindex.events(logdir)`` (no index) against EventAccumulator's full
  load of every run. Goal: >= 2x.
* ``refresh``: ``EventLog.refresh()`` after the logs grew by 1 % (scalar events appended to
  each file) against the first build. Goal: <= 2 % of its time.
* ``s3``: the same on the S3 emulator (moto): the first build (the indexes written in the
  bucket), the load of one tag, the refresh after 1 % growth (each object uploaded again).

    python tools/bench_events.py [--full] [--rounds 3] [--out bench-results/events.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from benchlib import machine_load, parse_args, write_json  # noqa: E402

RUNS = 10
SCALAR_TAGS = 100
TAG = "scalar/042"
#: The scale of each size: steps, and every how many steps scalars, images and histograms are
#: written; the images' side (random RGB PNGs, about side² × 3 bytes each).
SIZES = {"small": {"steps": 100_000, "scalars": 100, "images": 5_000, "histograms": 1_000,
                   "side": 64},
         "full": {"steps": 100_000, "scalars": 10, "images": 1_000, "histograms": 100,
                  "side": 256}}


# -- the log directory ---------------------------------------------------------------------

def _png(side: int, seed: int) -> bytes:
    """A random RGB image as a PNG (stored deflate: noise does not compress)."""
    import numpy as np

    rows = np.random.default_rng(seed).integers(0, 256, (side, side * 3), dtype=np.uint8)
    raw = b"".join(b"\0" + row.tobytes() for row in rows)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    head = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(raw, 1))
            + chunk(b"IEND", b""))


def _events(run: int, first: int, last: int, size: dict[str, int]) -> list[bytes]:
    """The serialized events of steps ``[first, last)`` of one run, in step order."""
    from ofindex.proto import event_pb2

    tags = [f"scalar/{k:03d}" for k in range(SCALAR_TAGS)]
    out = []
    template = event_pb2.Event()
    for step in range(first, last):
        wall = 1.7e9 + run * 1e6 + step * 0.05
        if step % size["scalars"] == 0:
            for k, tag in enumerate(tags):
                template.Clear()
                template.step, template.wall_time = step, wall
                template.summary.value.add(tag=tag,
                                           simple_value=1.0 / (1 + step) + k + run * 0.001)
                out.append(template.SerializeToString())
        if step % size["histograms"] == 0:
            for name in ("hist/weights", "hist/grads"):
                event = event_pb2.Event(step=step, wall_time=wall)
                h = event.summary.value.add(tag=name).histo
                h.min, h.max, h.num, h.sum, h.sum_squares = -3.0, 3.0, 1000.0, 1.0, 1000.0
                h.bucket_limit.extend(float(x) / 10 for x in range(-30, 31))
                h.bucket.extend(float((step + x) % 37) for x in range(61))
                out.append(event.SerializeToString())
        if step % size["images"] == 0:
            for name in ("images/input", "images/output"):
                event = event_pb2.Event(step=step, wall_time=wall)
                image = event.summary.value.add(tag=name).image
                image.height = image.width = size["side"]
                image.colorspace = 3
                image.encoded_image_string = _png(size["side"], hash((run, step, name)) & 0xFFFF)
                out.append(event.SerializeToString())
    return out


def _frame(payloads: list[bytes]) -> bytes:
    from ofindex.formats.framing import RecordFormat, encode_record

    return b"".join(encode_record(p, RecordFormat.TFRECORD) for p in payloads)


def make_logdir(root: str, size: dict[str, int], steps: int | None = None) -> str:
    """Write the log directory (once: kept between runs of the tool in ``root``)."""
    steps = size["steps"] if steps is None else steps
    logdir = os.path.join(root, "logs")
    done = os.path.join(root, "logs.done")
    if os.path.exists(done):
        return logdir
    shutil.rmtree(logdir, ignore_errors=True)
    for run in range(RUNS):
        path = os.path.join(logdir, f"run-{run:02d}", f"events.out.tfevents.1700000000.bench.{run}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        from ofindex.proto import event_pb2

        head = event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2")
        with open(path, "wb") as f:
            f.write(_frame([head.SerializeToString()]))
            chunk = 10_000
            for first in range(0, steps, chunk):
                f.write(_frame(_events(run, first, min(steps, first + chunk), size)))
    with open(done, "w") as f:
        f.write("ok")
    return logdir


def grow(logdir: str, size: dict[str, int], fraction: float = 0.01) -> int:
    """Append about ``fraction`` of each run's bytes as new scalar events; returns the bytes
    added."""
    added = 0
    for run in range(RUNS):
        directory = os.path.join(logdir, f"run-{run:02d}")
        (name,) = [n for n in os.listdir(directory) if "tfevents" in n]
        path = os.path.join(directory, name)
        target = int(os.path.getsize(path) * fraction)
        step, data = size["steps"], b""
        while len(data) < target:
            data += _frame(_events(run, step, step + size["scalars"],
                                   {**size, "images": 10**12, "histograms": 10**12}))
            step += size["scalars"]
        with open(path, "ab") as f:
            f.write(data)
        added += len(data)
    return added


# -- one measurement, in a process of its own ----------------------------------------------

def _rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _load_ofindex(logdir: str, options: dict[str, Any] | None) -> int:
    import ofindex

    with ofindex.events(logdir, storage_options=options) as log:
        return len(log.scalars(TAG))


def _load_tbparse(logdir: str, _: Any) -> int:
    from tbparse import SummaryReader

    frame = SummaryReader(logdir, pivot=False).scalars
    return int((frame["tag"] == TAG).sum())


def _accumulators(logdir: str) -> list[Any]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = []
    for run in sorted(os.listdir(logdir)):
        ea = EventAccumulator(os.path.join(logdir, run),
                              size_guidance={"scalars": 0, "tensors": 0, "histograms": 0,
                                             "images": 0, "audio": 0,
                                             "compressedHistograms": 0})
        ea.Reload()
        out.append(ea)
    return out


def _load_accumulator(logdir: str, _: Any) -> int:
    return sum(len(ea.Scalars(TAG)) for ea in _accumulators(logdir))


def _build_ofindex(logdir: str, options: dict[str, Any] | None) -> int:
    import ofindex

    with ofindex.events(logdir, storage_options=options) as log:
        return len(log.runs)


def _build_accumulator(logdir: str, _: Any) -> int:
    return len(_accumulators(logdir))


WORK = {"load-ofindex": _load_ofindex, "load-tbparse": _load_tbparse,
        "load-accumulator": _load_accumulator, "build-ofindex": _build_ofindex,
        "build-accumulator": _build_accumulator}


def child(name: str, logdir: str, options: str) -> None:
    """Run one measurement here; print ``{"seconds", "peak_mb", "result"}``."""
    opts = json.loads(options) or None
    import numpy  # noqa: F401  (the imports every contender needs, before the baseline)

    if name.endswith(("tbparse", "accumulator")):
        import tbparse  # noqa: F401
        from tensorboard.backend.event_processing import event_accumulator  # noqa: F401
        from tensorboard.compat import tf  # TensorFlow, when installed: its file reads

        tf.__version__  # noqa: B018  (imported now, not inside the timed part)
    if name.endswith("ofindex") or name.startswith("refresh"):
        import pandas  # noqa: F401

        import ofindex
    base = _rss_mb()
    if name == "refresh-ofindex":
        import ofindex

        with ofindex.events(logdir, storage_options=opts) as log:
            grown = json.loads(os.environ["BENCH_GROWTH"])
            _apply_growth(grown)
            t = time.perf_counter()
            result = log.refresh()
            seconds = time.perf_counter() - t
    else:
        t = time.perf_counter()
        result = WORK[name](logdir, opts)
        seconds = time.perf_counter() - t
    print(json.dumps({"seconds": seconds, "peak_mb": _rss_mb() - base, "result": result}))


def _apply_growth(spec: dict[str, Any]) -> None:
    """Make the grown files current: locally their new bytes appended, on S3 each object
    uploaded again (an object cannot grow)."""
    for source, target in spec["copies"]:
        with open(source, "rb") as f:
            grown = f.read()
        if spec.get("s3"):
            import s3fs

            s3fs.S3FileSystem(skip_instance_cache=True, **spec["s3"]).pipe_file(target, grown)
        else:
            with open(target, "ab") as f:
                f.write(grown[os.path.getsize(target):])


def measure(name: str, logdir: str, options: dict[str, Any] | None = None,
            env: dict[str, str] | None = None) -> dict[str, Any]:
    run = subprocess.run([sys.executable, __file__, "--child", name, logdir,
                          json.dumps(options or {})], capture_output=True, text=True,
                         env={**os.environ, **(env or {})}, check=False, timeout=7200)
    if run.returncode != 0:
        raise RuntimeError(f"{name}: {run.stderr[-3000:]}")
    got: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return got


# -- the benchmark -------------------------------------------------------------------------

def _drop_index(logdir: str) -> None:
    shutil.rmtree(logdir.rstrip("/") + ".ofindex", ignore_errors=True)


def _summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    seconds = [r["seconds"] for r in rows]
    return {"median_s": statistics.median(seconds), "min_s": min(seconds),
            "max_s": max(seconds), "peak_mb": max(r["peak_mb"] for r in rows),
            "result": rows[-1]["result"]}


def run_local(work: str, size: dict[str, int], rounds: int) -> dict[str, Any]:
    logdir = make_logdir(work, size)
    nbytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(logdir)
                 for f in fs)
    out: dict[str, list[dict[str, Any]]] = {}
    for _ in range(rounds):
        _drop_index(logdir)
        out.setdefault("build-ofindex", []).append(measure("build-ofindex", logdir))
        out.setdefault("build-accumulator", []).append(measure("build-accumulator", logdir))
        for name in ("load-ofindex", "load-tbparse", "load-accumulator"):
            out.setdefault(name, []).append(measure(name, logdir))
    out["refresh-ofindex"] = [_refresh_local(work, logdir, size) for _ in range(rounds)]
    stats = {name: _summary(rows) for name, rows in out.items()}
    return {"bytes": nbytes, "stats": stats, "ratios": _ratios(stats)}


def _refresh_local(work: str, logdir: str, size: dict[str, int]) -> dict[str, Any]:
    """A refresh after 1 % growth: the log indexed as it is, the grown files made aside and
    copied over once the log is open, then the refresh timed; the files put back after."""
    grown_dir = os.path.join(work, "grown")
    shutil.rmtree(grown_dir, ignore_errors=True)
    shutil.copytree(logdir, grown_dir)
    added = grow(grown_dir, size)
    saved = os.path.join(work, "saved")
    shutil.rmtree(saved, ignore_errors=True)
    shutil.copytree(logdir, saved)
    copies = []
    for d, _, files in os.walk(grown_dir):
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), grown_dir)
            copies.append((os.path.join(grown_dir, rel), os.path.join(logdir, rel)))
    measure("build-ofindex", logdir)  # indexed as it is
    try:
        row = measure("refresh-ofindex", logdir,
                      env={"BENCH_GROWTH": json.dumps({"copies": copies})})
    finally:  # the log as it was, for the next round (its index rebuilt by the next build)
        for d, _, files in os.walk(saved):
            for f in files:
                rel = os.path.relpath(os.path.join(d, f), saved)
                with open(os.path.join(d, f), "rb") as src, open(
                        os.path.join(logdir, rel), "wb") as dst:
                    shutil.copyfileobj(src, dst)
        _drop_index(logdir)
    row["added_bytes"] = added
    return row


def _ratios(stats: dict[str, dict[str, float]]) -> dict[str, float]:
    load = stats["load-ofindex"]["median_s"]
    return {
        "load_vs_tbparse": stats["load-tbparse"]["median_s"] / load,
        "load_vs_accumulator": stats["load-accumulator"]["median_s"] / load,
        "build_vs_accumulator": stats["build-accumulator"]["median_s"]
        / stats["build-ofindex"]["median_s"],
        "refresh_fraction_of_build": stats["refresh-ofindex"]["median_s"]
        / stats["build-ofindex"]["median_s"],
        "load_memory_vs_tbparse": stats["load-tbparse"]["peak_mb"]
        / max(stats["load-ofindex"]["peak_mb"], 1.0),
    }


def run_s3(work: str, logdir: str, size: dict[str, int], rounds: int) -> dict[str, Any]:
    """The same log in the S3 emulator: build, load and refresh (ofindex)."""
    import s3fs

    from tests.kit import servers

    srv = servers.start_moto()
    try:
        options = servers.s3_options(srv.url)
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
        fs.mkdir("bench")
        url = "s3://bench/logs"
        for d, _, files in os.walk(logdir):
            for f in files:
                rel = os.path.relpath(os.path.join(d, f), logdir)
                fs.put_file(os.path.join(d, f), f"bench/logs/{rel}")
        rows: dict[str, list[dict[str, Any]]] = {}
        grown_dir = os.path.join(work, "grown-s3")
        shutil.rmtree(grown_dir, ignore_errors=True)
        shutil.copytree(logdir, grown_dir)
        grow(grown_dir, size)
        for _ in range(rounds):
            fs.rm("bench/logs.ofindex", recursive=True) if fs.exists("bench/logs.ofindex") else None
            for d, _, files in os.walk(logdir):  # the log as it was
                for f in files:
                    rel = os.path.relpath(os.path.join(d, f), logdir)
                    fs.put_file(os.path.join(d, f), f"bench/logs/{rel}")
            rows.setdefault("build-ofindex", []).append(measure("build-ofindex", url, options))
            rows.setdefault("load-ofindex", []).append(measure("load-ofindex", url, options))
            copies = [(os.path.join(d, f),
                       "bench/logs/" + os.path.relpath(os.path.join(d, f), grown_dir))
                      for d, _, files in os.walk(grown_dir) for f in files]
            rows.setdefault("refresh-ofindex", []).append(measure(
                "refresh-ofindex", url, options,
                env={"BENCH_GROWTH": json.dumps({"copies": copies, "s3": options})}))
        stats = {name: _summary(r) for name, r in rows.items()}
        stats["refresh_fraction_of_build"] = {
            "value": stats["refresh-ofindex"]["median_s"] / stats["build-ofindex"]["median_s"]}
        return stats
    finally:
        srv.stop()


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true",
                        help="the issue's size: 1e7 scalar events, about 1 GB")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--no-s3", action="store_true", help="skip the S3 emulator")
    parser.add_argument("--work", default=None,
                        help="where the log directory is written (kept; default a new "
                        "temporary directory, removed)")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parse_args(parser, argv, rounds=1)
    size = dict(SIZES["full" if args.full else "small"])
    rounds = args.rounds
    if args.smoke:  # a tiny log
        size.update(steps=2_000, scalars=100, images=1_000, histograms=500, side=16)
    work = args.work or tempfile.mkdtemp(prefix="ofindex-bench-events-")
    try:
        load = machine_load()
        local = run_local(work, size, rounds)
        results: dict[str, Any] = {"size": "full" if args.full else "smoke" if args.smoke
                                   else "small", "scale": size, "runs": RUNS,
                                   "scalar_tags": SCALAR_TAGS, "rounds": rounds,
                                   "local": local, "load_before": load,
                                   "load_after": machine_load()}
        if not args.no_s3:
            results["s3"] = run_s3(work, os.path.join(work, "logs"), size, rounds)
        _print(results)
        write_json(results, args.out)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _print(results: dict[str, Any]) -> None:
    local = results["local"]
    print(f"log: {local['bytes'] / 1e6:,.0f} MB, {RUNS} runs, {SCALAR_TAGS} scalar tags "
          f"({results['size']})")
    for name, s in local["stats"].items():
        print(f"  {name:<20} {s['median_s']:9.3f} s (min {s['min_s']:.3f}, max "
              f"{s['max_s']:.3f})  peak {s['peak_mb']:8.1f} MB")
    for name, value in local["ratios"].items():
        print(f"  {name:<28} {value:10.3f}")
    for name, s in results.get("s3", {}).items():
        if "median_s" in s:
            print(f"  s3 {name:<17} {s['median_s']:9.3f} s  peak {s['peak_mb']:8.1f} MB")
        else:
            print(f"  s3 {name:<28} {s['value']:10.4f}")


if __name__ == "__main__":
    raise SystemExit(main())
