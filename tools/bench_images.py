#!/usr/bin/env python3
"""JPEG decoding and resizing: images per CPU-second (per core) and per second on every core,
ofindex's image stage against NVIDIA DALI's CPU decoder and Pillow, in one run.

The images are tools/bench_pipeline.py's ImageNet-like JPEGs (noisy photo-like images of
about 330 x 380). Every contender turns a batch of them into ``uint8`` RGB arrays:

* ``ofindex``: ``ofindex.decode.images.decode_images`` (libjpeg-turbo through simplejpeg,
  DCT-domain downscaling at 1/2, 1/4 or 1/8 when the target is at most half the image, then
  an antialiased bilinear resize: torch's kernel), on a thread per core, into one array.
* ``dali``: ``fn.decoders.image(device="cpu")`` then ``fn.resize(antialias=True,
  interp_type=INTERP_LINEAR)`` in a CPU pipeline (``device_id=None``) fed by
  ``fn.external_source``, ``num_threads`` = cores (and 1 for the per-core figure).
* ``pillow``: ``Image.open(...).convert("RGB").resize(size, BILINEAR)`` (antialiased) in a
  loop in one thread.

Cases: ``decode`` (no resize: the batch is made of the JPEGs of one size), ``224`` (resize
to 224 x 224: a scale of ~0.6-0.7, no DCT downscaling) and ``112`` (112 x 112: decoded at
1/2 by ofindex first). Each round runs every
contender in turn (interleaved) on the same batch: images per CPU-second of the process
(one thread; for DALI one thread, counted with its own threads) and images per second of
wall time on every core. ``quality``: the PSNR (dB) of each output against a reference
resize in floating point of the fully decoded image (Pillow's antialiased bilinear on
each channel as float32), so that the contenders are compared at the same quality.

    python tools/bench_images.py [--rounds 5] [--out bench-results/images.json]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

from bench_pipeline import _jpegs  # noqa: E402
from benchlib import parse_args, write_json  # noqa: E402

from ofindex._threads import usable_cores  # noqa: E402
from ofindex.decode import Ragged  # noqa: E402

CASES = {"decode": None, "224": (224, 224), "112": (112, 112)}
Size = tuple[int, int] | None


def ofindex_stage(jpegs: list[bytes], size: Size, threads: int) -> Callable[[], np.ndarray]:
    from ofindex.decode import images

    packed = Ragged(np.frombuffer(b"".join(jpegs), np.uint8), [len(j) for j in jpegs])
    if threads == 1:  # one core: no pool
        def one() -> np.ndarray:
            pool, images._POOL.get = images._POOL.get, lambda: None  # type: ignore[method-assign]
            try:
                return images.decode_images(packed, size)
            finally:
                images._POOL.get = pool  # type: ignore[method-assign]
        return one
    return lambda: images.decode_images(packed, size)


def pillow(jpegs: list[bytes], size: Size, threads: int) -> Callable[[], np.ndarray] | None:
    from PIL import Image

    if threads != 1:
        return None  # one thread: what a Pillow decode in a training loop does

    def run() -> np.ndarray:
        out = []
        for j in jpegs:
            with Image.open(io.BytesIO(j)) as im:
                rgb = im.convert("RGB")
                if size is not None:
                    rgb = rgb.resize((size[1], size[0]), Image.Resampling.BILINEAR)
                out.append(np.asarray(rgb))
        return np.stack(out)
    return run


def dali(jpegs: list[bytes], size: Size, threads: int) -> Callable[[], np.ndarray]:
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types
    from nvidia.dali import pipeline_def

    arrays = [np.frombuffer(j, np.uint8) for j in jpegs]

    @pipeline_def(batch_size=len(jpegs), num_threads=threads, device_id=None,
                  prefetch_queue_depth=1, exec_async=False, exec_pipelined=False)
    def pipe() -> Any:
        encoded = fn.external_source(source=lambda: arrays, batch=True, dtype=types.UINT8)
        image = fn.decoders.image(encoded, device="cpu", output_type=types.RGB)
        if size is not None:
            image = fn.resize(image, resize_y=size[0], resize_x=size[1], antialias=True,
                              interp_type=types.INTERP_LINEAR)
        return image

    p = pipe()
    p.build()

    def run() -> np.ndarray:
        (out,) = p.run()
        return np.stack([np.array(out[k]) for k in range(len(out))])
    return run


CONTENDERS = {"ofindex": ofindex_stage, "dali": dali, "pillow": pillow}


def reference(jpegs: list[bytes], size: Size) -> np.ndarray:
    """Each image fully decoded and resized in floating point (Pillow's antialiased bilinear
    on float32 channels), rounded: what a resize to ``size`` should give."""
    from PIL import Image

    out = []
    for j in jpegs:
        with Image.open(io.BytesIO(j)) as im:
            rgb = np.asarray(im.convert("RGB"))
        if size is None:
            out.append(rgb)
            continue
        chans = [np.asarray(Image.fromarray(rgb[..., c].astype(np.float32), mode="F").resize(
            (size[1], size[0]), Image.Resampling.BILINEAR)) for c in range(3)]
        out.append(np.clip(np.rint(np.stack(chans, axis=-1)), 0, 255).astype(np.uint8))
    return np.stack(out)


def _one_size(jpegs: list[bytes]) -> list[bytes]:
    """As many JPEGs, all of the size of the first (without a resize a batch has one
    size)."""
    import simplejpeg

    first = simplejpeg.decode_jpeg_header(jpegs[0])[:2]
    same = [j for j in jpegs if simplejpeg.decode_jpeg_header(j)[:2] == first]
    return [same[k % len(same)] for k in range(len(jpegs))]


def psnr(got: np.ndarray, want: np.ndarray) -> float | None:
    error = float(np.mean((got.astype(np.float64) - want.astype(np.float64)) ** 2))
    return None if error == 0 else 10 * np.log10(255.0 ** 2 / error)


def measure(run: Callable[[], np.ndarray], count: int) -> tuple[float, float, np.ndarray]:
    """``(images per CPU-second, images per second, output)`` of one run."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return count / max(cpu, 1e-9), count / wall, out


def bench(jpegs: list[bytes], rounds: int, contenders: list[str], cases: list[str],
          cores: int) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        size = CASES[case]
        batch = jpegs if size is not None else _one_size(jpegs)
        want = reference(batch, size)
        runners: dict[tuple[str, int], Callable[[], np.ndarray]] = {}
        for name in contenders:
            for threads in sorted({1, cores}):
                try:
                    made = CONTENDERS[name](batch, size, threads)
                except ImportError as exc:
                    print(f"  {name} unavailable: {exc}", flush=True)
                    break
                if made is not None:
                    made()  # warm up: pools, pipelines, first allocations
                    runners[(name, threads)] = made
        got: dict[tuple[str, int], list[tuple[float, float]]] = {k: [] for k in runners}
        quality: dict[str, float | None] = {}
        for r in range(rounds):
            for key, run in runners.items():
                per_cpu, per_s, out = measure(run, len(batch))
                got[key].append((per_cpu, per_s))
                quality.setdefault(key[0], psnr(out, want))
                print(f"  {case} round {r}: {key[0]:8s} threads={key[1]} {per_cpu:8.0f} "
                      f"images/CPU-s {per_s:8.0f} images/s", flush=True)
        rows += _rows(case, got, quality, cores)
    return rows


def _rows(case: str, got: dict[tuple[str, int], list[tuple[float, float]]],
          quality: dict[str, float | None], cores: int) -> list[dict[str, Any]]:
    rows = []
    for name in dict.fromkeys(k[0] for k in got):
        one = [c for c, _ in got.get((name, 1), [])]
        every = [s for _, s in got.get((name, cores), [])]
        row: dict[str, Any] = {"case": case, "contender": name, "psnr_db": quality.get(name)}
        if one:
            row.update(per_core=statistics.median(one), per_core_min=min(one),
                       per_core_max=max(one))
        if every:
            row.update(all_cores=statistics.median(every), all_cores_min=min(every),
                       all_cores_max=max(every))
        rows.append(row)
    for row in rows:  # ratios per round against DALI and Pillow
        for peer in ("dali", "pillow"):
            if row["contender"] == peer:
                continue
            for field, threads in (("per_core", 1), ("all_cores", cores)):
                mine = got.get((row["contender"], threads if field == "all_cores" else 1))
                theirs = got.get((peer, threads if field == "all_cores" else 1))
                if not mine or not theirs:
                    continue
                k = 0 if field == "per_core" else 1
                ratios = [a[k] / b[k] for a, b in zip(mine, theirs, strict=False)]
                row[f"{field}_vs_{peer}"] = statistics.median(ratios)
                row[f"{field}_vs_{peer}_min"] = min(ratios)
                row[f"{field}_vs_{peer}_max"] = max(ratios)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=256, help="images per batch")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--out", default="bench-results/images.json")
    a = parse_args(p, argv, images=16, rounds=1, cases="224")
    distinct = _jpegs(min(32, a.images), 110_000)
    jpegs = [distinct[k % len(distinct)][0] for k in range(a.images)]
    cores = usable_cores()
    print(f"{a.images} JPEGs of {np.mean([len(j) for j in jpegs]) / 1000:.0f} KB on average, "
          f"{cores} cores, load {os.getloadavg()[0]:.1f}", flush=True)
    rows = bench(jpegs, a.rounds, a.contenders.split(","), a.cases.split(","), cores)
    print(f"\n{'case':7s} {'contender':9s} {'per core (images/CPU-s)':>26s} "
          f"{'all cores (images/s)':>24s} {'PSNR dB':>8s}")
    for r in rows:
        per_core = (f"{r['per_core']:.0f} ({r['per_core_min']:.0f}-{r['per_core_max']:.0f})"
                    if "per_core" in r else "-")
        every = (f"{r['all_cores']:.0f} ({r['all_cores_min']:.0f}-{r['all_cores_max']:.0f})"
                 if "all_cores" in r else "-")
        quality = f"{r['psnr_db']:.1f}" if r["psnr_db"] is not None else "exact"
        print(f"{r['case']:7s} {r['contender']:9s} {per_core:>26s} {every:>24s} {quality:>8s}")
    write_json({"config": {**vars(a), "cores": cores,
                           "load": os.getloadavg()[0],
                           "jpeg_bytes": float(np.mean([len(j) for j in jpegs]))},
                "rows": rows}, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
