"""``ofindex convert`` from the data people have: a Hugging Face vision dataset (``Image()`` of
~100 KB JPEGs and a ``ClassLabel``) and Parquet files with dictionary (categorical) and list
columns, against the dataset's own ``save_to_disk`` and against pyarrow reading the same file
alone (the bound of any conversion from it; the dataset's own Arrow files are memory-mapped,
so reading them alone touches no byte and bounds nothing: its Parquet export is the file).

Each workload times its contenders in turn within each of ``--rounds`` interleaved rounds
(the machine's drift falls on all alike); records/s as median (min–max), and each ratio taken
within its round. Convert runs in its default batches (Parquet and Hugging Face: about 4 MiB
of columns, records above 4 KiB about 16 MiB; ``--batch`` sets one size for all); pyarrow
reads the file in batches of 1,024 and in convert's batches, and convert is compared with the
faster of the two in each round.
Results go to ``--out`` (JSON, read by tools/report.py as convert.json)::

    python tools/bench_convert.py --out bench-results/convert.json
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import machine_load, parse_args, spread, write_json

import ofindex

#: Records a batch of pyarrow's reads (and of the Parquet files' row groups: 64 of them).
BATCH = 1024
#: Records a batch of convert and of pyarrow's reads alike when --batch is given (None:
#: convert's own default, and pyarrow reads in batches of BATCH and in convert's).
CONVERT_BATCH: int | None = None


def _jpegs(count: int, seed: int = 0) -> list[bytes]:
    """Photo-like JPEGs of ~100 KB (384 x 384: blocks of colour plus noise, 4:2:0, quality
    94)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        base = rng.integers(0, 256, (48, 48, 3), dtype=np.uint8)
        pixels = np.kron(base, np.ones((8, 8, 1), np.uint8))
        pixels = np.clip(pixels + rng.normal(0, 18, pixels.shape), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=94)
        out.append(buffer.getvalue())
    return out


def vision_dataset(records: int, root: str) -> Any:
    """An HF dataset of ``Image()`` + ``ClassLabel``, saved and loaded back (memory-mapped
    Arrow, as a dataset from the Hub is)."""
    import datasets

    jpegs = _jpegs(min(records, 64))
    features = datasets.Features({"image": datasets.Image(),
                                  "label": datasets.ClassLabel(names=[f"c{k}" for k in
                                                                      range(10)])})
    made = datasets.Dataset.from_dict(
        {"image": [{"bytes": jpegs[k % len(jpegs)], "path": f"{k}.jpg"}
                   for k in range(records)], "label": [k % 10 for k in range(records)]},
        features=features)
    made.save_to_disk(os.path.join(root, "vision-src"))
    return datasets.load_from_disk(os.path.join(root, "vision-src"))


def tabular_table(records: int, seed: int = 0) -> Any:
    """Parquet-like columns: a categorical string, token ids (list<int64>, 0–64 a row), tags
    (list<string>, 0–4 a row), an int64 id and a float64 score, with 2 % null lists."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 65, records)
    offsets = np.zeros(records + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(
        rng.integers(0, 50_000, int(offsets[-1]))), mask=pa.array(rng.random(records) < 0.02))
    tag_lengths = rng.integers(0, 5, records)
    tag_offsets = np.zeros(records + 1, np.int32)
    np.cumsum(tag_lengths, out=tag_offsets[1:])
    words = np.array([f"tag{k}" for k in range(200)], object)
    tags = pa.ListArray.from_arrays(pa.array(tag_offsets), pa.array(
        words[rng.integers(0, 200, int(tag_offsets[-1]))].tolist(), pa.string()))
    cities = np.array(["paris", "lyon", "oslo", "lima", "kyoto", "accra"], object)
    category = pa.array(cities[rng.integers(0, len(cities), records)].tolist()
                        ).dictionary_encode()
    return pa.table({"city": category, "tokens": tokens, "tags": tags,
                     "id": np.arange(records), "score": rng.random(records)})


def _timed(fn: Callable[[], object], cpu: list[float] | None = None) -> float:
    """Seconds ``fn`` takes (its CPU seconds, of every thread of the process, appended to
    ``cpu``); a callable it returns (removing what it wrote) runs after the clock stops:
    deleting the output is not part of making it (it took 0.2 s of a 500k-row conversion's
    1.4 s, the kernel freeing the shards' page cache)."""
    start, used = time.perf_counter(), time.process_time()
    cleanup = fn()
    seconds = time.perf_counter() - start
    if cpu is not None:
        cpu.append(time.process_time() - used)
    if callable(cleanup):
        cleanup()
    return seconds


def _read_parquet(path: str, batch: int | None = None) -> None:
    import pyarrow.parquet as pq

    for _ in pq.ParquetFile(path).iter_batches(batch_size=batch or BATCH):
        pass


def _read_as_convert(path: str) -> None:
    """pyarrow reading the file in the batches convert reads it in (its own source)."""
    from ofindex.convert.sources import parquet_source

    for _ in parquet_source([path], CONVERT_BATCH).batches():
        pass


def _pyarrow_readers(path: str) -> dict[str, Callable[[], object]]:
    """pyarrow reading ``path`` alone: in batches of BATCH, and (when convert chooses its
    own) in convert's batches."""
    readers: dict[str, Callable[[], object]] = {
        "pyarrow_read_parquet": lambda: _read_parquet(path, CONVERT_BATCH)}
    if CONVERT_BATCH is None:
        readers["pyarrow_read_parquet_convert_batches"] = lambda: _read_as_convert(path)
    return readers


def _bound_ratio(result: dict[str, Any], ours: str) -> dict[str, float]:
    """Our records/s over pyarrow's, reading alone in whichever batches were faster in that
    round."""
    s = result["seconds"]
    peers = [s[name] for name in ("pyarrow_read_parquet", "pyarrow_read_parquet_convert_batches")
             if name in s]
    fastest = [min(times) for times in zip(*peers, strict=True)]
    return spread([b / a for a, b in zip(s[ours], fastest, strict=True)])


def rounds(contenders: dict[str, Callable[[], object]], n_rounds: int,
           records: int) -> dict[str, Any]:
    """Seconds (and CPU seconds) of each contender in each round, in turn (the order turned
    each round), and records/s as median (min–max). On a machine shared with other work, CPU
    seconds say what each costs where wall time says also how the cores were shared."""
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(n_rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            seconds[name].append(_timed(contenders[name], cpu[name]))
    return {"seconds": seconds, "cpu_seconds": {name: spread(c, 3) for name, c in cpu.items()},
            "records_per_s": {name: spread([records / t for t in s], 0)
                              for name, s in seconds.items()}}


def _ratio(result: dict[str, Any], ours: str, peer: str) -> dict[str, float]:
    s = result["seconds"]
    return spread([b / a for a, b in zip(s[ours], s[peer], strict=True)])


def _converter(source: Any, root: str, tag: str, shards: int,
               records: int) -> Callable[[], object]:
    count = [0]

    def run() -> object:
        out = os.path.join(root, f"{tag}-{count[0]}")
        count[0] += 1
        ofindex.convert(source, out, shard_records=-(-records // shards),
                        batch_size=CONVERT_BATCH)
        return lambda: (shutil.rmtree(out), shutil.rmtree(out + ".ofindex"))

    return run


def _saver(hf: Any, root: str, tag: str) -> Callable[[], object]:
    count = [0]

    def run() -> object:
        out = os.path.join(root, f"{tag}-{count[0]}")
        count[0] += 1
        hf.save_to_disk(out)
        return lambda: shutil.rmtree(out)

    return run


def vision(records: int, n_rounds: int, root: str) -> dict[str, Any]:
    hf = vision_dataset(records, root)
    parquet = os.path.join(root, "vision.parquet")
    hf.to_parquet(parquet, batch_size=BATCH)
    contenders = {
        "convert_hf": _converter(hf, root, "v-hf", 4, records),
        "hf_save_to_disk": _saver(hf, root, "v-save"),
        "convert_parquet": _converter(parquet, root, "v-pq", 4, records),
        **_pyarrow_readers(parquet),
    }
    for run in contenders.values():  # warm: the files in the page cache, imports done
        _timed(run)
    result = rounds(contenders, n_rounds, records)
    size = os.path.getsize(parquet)
    result.update(records=records, parquet_bytes=size, mean_image_bytes=round(
        sum(len(b) for b in hf.data.table["image"].combine_chunks().field("bytes")
            .to_pylist()[:64]) / min(records, 64)),
        ratios={"convert_hf_vs_save_to_disk": _ratio(result, "convert_hf", "hf_save_to_disk"),
                "convert_parquet_vs_pyarrow_read": _bound_ratio(result, "convert_parquet")})
    return result


def tabular(records: int, n_rounds: int, root: str) -> dict[str, Any]:
    import datasets
    import pyarrow.parquet as pq

    parquet = os.path.join(root, "tabular.parquet")
    pq.write_table(tabular_table(records), parquet, row_group_size=64 * BATCH)
    hf = datasets.Dataset.from_parquet(parquet, cache_dir=os.path.join(root, "hf-cache"))
    contenders = {
        "convert_parquet": _converter(parquet, root, "t-pq", 8, records),
        **_pyarrow_readers(parquet),
        "convert_hf": _converter(hf, root, "t-hf", 8, records),
        "hf_save_to_disk": _saver(hf, root, "t-save"),
    }
    for run in contenders.values():
        _timed(run)
    result = rounds(contenders, n_rounds, records)
    result.update(records=records, parquet_bytes=os.path.getsize(parquet),
                  ratios={"convert_parquet_vs_pyarrow_read": _bound_ratio(
                      result, "convert_parquet"),
                      "convert_hf_vs_save_to_disk": _ratio(result, "convert_hf",
                                                           "hf_save_to_disk")})
    return result


def scalar_table(records: int, null_share: float, seed: int = 0) -> Any:
    """The issue's case: int64, float64, float32 and string columns, each with ``null_share``
    of its cells null (independently per column)."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    words = np.array([f"word{k}" for k in range(1000)], object)

    def mask() -> Any:
        return rng.random(records) < null_share if null_share else None

    return pa.table({
        "id": pa.array(rng.integers(0, 1 << 40, records), mask=mask()),
        "score": pa.array(rng.random(records), mask=mask()),
        "weight": pa.array(rng.random(records).astype(np.float32), mask=mask()),
        "word": pa.array(words[rng.integers(0, len(words), records)].tolist(), pa.string(),
                         mask=mask())})


def nulls(records: int, n_rounds: int, root: str) -> dict[str, Any]:
    """Converting the same Parquet columns with 5 % nulls and with none."""
    import pyarrow.parquet as pq

    files = {}
    for tag, share in (("no_nulls", 0.0), ("nulls_5pct", 0.05)):
        files[tag] = os.path.join(root, f"scalars-{tag}.parquet")
        pq.write_table(scalar_table(records, share), files[tag], row_group_size=64 * BATCH)
    contenders = {f"convert_{tag}": _converter(path, root, f"n-{tag}", 4, records)
                  for tag, path in files.items()}
    for run in contenders.values():
        _timed(run)
    result = rounds(contenders, n_rounds, records)
    result.update(records=records, ratios={"convert_nulls_vs_no_nulls": _ratio(
        result, "convert_nulls_5pct", "convert_no_nulls")})
    return result


def _use_batch(records: int | None) -> None:
    global CONVERT_BATCH
    CONVERT_BATCH = records


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=2000, help="records of the vision dataset")
    ap.add_argument("--rows", type=int, default=500_000, help="rows of the Parquet file")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=None,
                    help="records a batch, of convert (batch_size=) and of pyarrow's reads "
                         "(default: convert's own; pyarrow's in batches of 1,024 and in "
                         "convert's)")
    ap.add_argument("--null-rows", type=int, default=200_000,
                    help="rows of the Parquet files converted with and without nulls")
    ap.add_argument("--only", choices=["vision", "tabular", "nulls"], help="one workload")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--out", default=None, help="JSON results (e.g. bench-results/convert.json)")
    args = parse_args(ap, argv, images=16, rows=2000, null_rows=2000, rounds=2)
    _use_batch(args.batch)
    root = args.dir or tempfile.mkdtemp(prefix="ofindex-bench-convert-")
    os.makedirs(root, exist_ok=True)
    load_before = machine_load()
    results: dict[str, Any] = {"config": {
        "rounds": args.rounds, "directory": root,
        "batch": args.batch or "convert's default (about 4 MiB of columns, 1,024 to 65,536 "
                               "records; records above 4 KiB in batches of about 16 MiB, at "
                               "least 16; pyarrow's reads in batches of 1,024 and in "
                               "convert's, the faster one the bound)",
        "load_before": load_before,
        "timed": "a conversion's time includes its fsyncs, not the deletion of its output "
                 "afterwards"}}
    try:
        if args.only in (None, "vision"):
            results["vision"] = vision(args.images, args.rounds, root)
        if args.only in (None, "tabular"):
            results["tabular"] = tabular(args.rows, args.rounds, root)
        if args.only in (None, "nulls"):
            results["nulls"] = nulls(args.null_rows, args.rounds, root)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    results["config"]["load_after"] = machine_load()
    for name in ("vision", "tabular", "nulls"):
        part = results.get(name)
        if part is None:
            continue
        for who, rate in part["records_per_s"].items():
            cpu = part["cpu_seconds"][who]
            print(f"{name:8} {who:38} {rate['median']:>12,.0f} records/s "
                  f"({rate['min']:,.0f}-{rate['max']:,.0f}), CPU {cpu['median']:.3f} s "
                  f"({cpu['min']:.3f}-{cpu['max']:.3f})")
        for what, ratio in part["ratios"].items():
            print(f"{name:8} {what:38} {ratio['median']:.2f}x "
                  f"({ratio['min']:.2f}-{ratio['max']:.2f})")
    write_json(results, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
