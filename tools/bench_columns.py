#!/usr/bin/env python3
"""Columns, key lookups, filters and balanced sampling against the tools that do part of it
(issue 48), in one run:

* **build**: ``build_index`` of ``--records`` small Examples (``label``, ``id``, ``score``)
  without columns, with ``columns=["label", "id"]`` (their column sidecars) and with their
  key indexes too (``keys=True``), interleaved rounds; the columns' bytes per record;
* **lookup, local**: random keys read as parsed ``Example``s, ofindex (``ds.lookup`` then the
  record) against tfd-utils' ``TFRecordRandomAccess.get_record(key)`` (its index: a pickled
  dict from key to file and offset, loaded first, not timed; ofindex's key index pages are
  read by one untimed pass over the keys likewise), one key a call, and ofindex a batch at a
  time, in ``--lookup-rounds`` interleaved rounds, wall and CPU time; ofindex's lookups alone
  (record numbers, no read) for scale; the memory each holds for its index (tracemalloc,
  after the lookups);
* **lookup, remote**: a batch of random keys in the simulated store's 1e9-record key index
  with a real 20 ms sleep per request: request rounds of the key index and wall time in RTTs;
* **where(label=3)** on ``--where-records`` records, each including what it must load first:
  ofindex (open, then ``where``) against Hugging Face ``datasets`` (``load_from_disk``, then
  ``filter``, batched over the label column) and tfr-reader (its polars index loaded from its
  Parquet file, then SQL ``SELECT ... WHERE label = 3``);
* **balanced sampling**: ``BalancedSampler`` batches/s of record numbers against the plain
  global shuffle (``BatchSampler(GlobalShuffleSampler)``) on skewed classes, and what their
  batches hold (``ofindex.shuffle.class_balance``).

    python tools/bench_columns.py [--records 1000000] [--where-records 10000000]
        [--rounds 3] [--out bench-results/columns.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

from benchlib import machine_load, parse_args, spread, write_json  # noqa: E402

import ofindex  # noqa: E402
from ofindex.proto import example_pb2  # noqa: E402
from ofindex.shuffle import (  # noqa: E402
    BalancedSampler,
    BatchSampler,
    GlobalShuffleSampler,
    class_balance,
)

#: The benchmark's parts (``--sections``); a run of some of them keeps the others' figures
#: from the JSON already at ``--out``.
ALL_SECTIONS = {"build", "lookup", "remote", "where", "balanced"}

#: Classes of the skewed label: class k has a share proportional to 1 / (k + 1).
CLASSES = 10


def labels_of(n: int, seed: int = 0) -> np.ndarray:
    """Skewed labels: class ``k`` with probability proportional to ``1 / (k + 1)``."""
    weights = 1.0 / np.arange(1, CLASSES + 1)
    return np.random.default_rng(seed).choice(CLASSES, n, p=weights / weights.sum())


def write_data(root: str, n: int, shards: int) -> tuple[str, np.ndarray]:
    """``n`` Examples (``label``, ``id`` = ``img-<i, 9 digits>``, ``score``) in ``shards`` files
    ``part-*.tfrecord`` (the ids in a shuffled order), written once; their labels."""
    directory = os.path.join(root, f"data-{n}-{shards}")
    labels = labels_of(n)
    if os.path.exists(os.path.join(directory, "_COMPLETE")):
        return directory, labels
    shutil.rmtree(directory, ignore_errors=True)
    ids = np.random.default_rng(1).permutation(n)
    step = 1 << 18
    with ofindex.ShardedWriter(directory, shard_records=-(-n // shards),
                               pattern="part-{shard:05d}.tfrecord") as writer:
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            writer.write_columns({
                "label": labels[lo:hi], "score": (np.arange(lo, hi) % 1000 / 1000).astype(
                    np.float32),
                "id": np.array([b"img-%09d" % i for i in ids[lo:hi].tolist()], dtype=object)})
    open(os.path.join(directory, "_COMPLETE"), "w").close()
    return directory, labels


def index_dir(directory: str) -> str:
    return directory.rstrip("/") + ".ofindex"


def _has_key_index(directory: str) -> bool:
    """Whether the dataset's index has a key index (columns built)."""
    place = index_dir(directory)
    return os.path.isdir(place) and any(f.endswith(".ofkey") for f in os.listdir(place))


# -- build ----------------------------------------------------------------------------------------
def bench_build(directory: str, n: int, rounds: int) -> dict[str, Any]:
    """Build times without and with two columns, interleaved; column bytes per record."""
    builds = (("offsets only", [], False), ("with label, id", ["label", "id"], False),
              ("with label, id and key indexes", ["label", "id"], True))
    times: dict[str, list[float]] = {name: [] for name, _, _ in builds}
    cpu: dict[str, list[float]] = {name: [] for name in times}
    for _ in range(rounds):
        for name, columns, keys in builds:
            for path in os.listdir(index_dir(directory)):
                if path.endswith((".ofcol", ".ofkey")):
                    os.remove(os.path.join(index_dir(directory), path))
            start, start_cpu = time.perf_counter(), time.process_time()
            ofindex.build_index(directory, columns=columns, keys=keys, resume=False)
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    sizes: dict[str, int] = {}
    for path in os.listdir(index_dir(directory)):
        kind = ("label column" if ".label.ofcol" in path else "id column" if ".id.ofcol" in path
                else "label key index" if path.endswith("label.ofkey")
                else "id key index" if path.endswith("id.ofkey") else "sidecars"
                if path.endswith(".ofidx") else None)
        if kind:
            sizes[kind] = sizes.get(kind, 0) + os.path.getsize(
                os.path.join(index_dir(directory), path))
    def ratios(of: dict[str, list[float]], name: str) -> dict[str, float]:
        return spread([w / o for w, o in zip(of[name], of["offsets only"], strict=True)], 3)

    return {"records": n, "seconds": {k: spread(v, 3) for k, v in times.items()},
            "ratio": ratios(times, "with label, id"),
            "ratio_with_key_indexes": ratios(times, "with label, id and key indexes"),
            # CPU seconds of the process (its threads too): what the work costs, whatever
            # share of a loaded machine's cores the process got
            "cpu_seconds": {k: spread(v, 3) for k, v in cpu.items()},
            "cpu_ratio": ratios(cpu, "with label, id"),
            "cpu_ratio_with_key_indexes": ratios(cpu, "with label, id and key indexes"),
            "bytes_per_record": {k: round(v / n, 3) for k, v in sizes.items()}}


# -- local lookups --------------------------------------------------------------------------------
def _held(make: Callable[[], Any], use: Callable[[Any], None]) -> tuple[Any, int]:
    """What ``make()`` returns, and the bytes it holds (traced) once ``use`` ran on it."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    made = make()
    use(made)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return made, held


def _per_round(rates: dict[str, list[float]], ours: str, peer: str) -> dict[str, float]:
    """``ours`` against ``peer``, round by round (median, min, max)."""
    return spread([a / b for a, b in zip(rates[ours], rates[peer], strict=True)], 3)


def _lookup_runs(wanted: list[str]) -> dict[str, Callable[[Any], None]]:
    """What the lookup rows time, each given tfd-utils' reader or the dataset; and the
    untimed first uses (``... use``)."""
    parse = example_pb2.Example.FromString

    def tfd_run(tfd: Any) -> None:
        for key in wanted:
            tfd.get_record(key)

    def ours_use(ds: Any) -> None:
        for key in wanted:
            ds[int(ds.lookup("id", key)[0])]

    def ours_one(ds: Any) -> None:
        for key in wanted:
            parse(ds[int(ds.lookup("id", key)[0])])

    def ours_batch(ds: Any) -> None:
        found = ds.lookup("id", wanted)
        for payload in ds[np.concatenate(found)]:
            parse(payload)

    def lookups_one(ds: Any) -> None:
        for key in wanted:
            ds.lookup("id", key)

    def lookups_batch(ds: Any) -> None:
        ds.lookup("id", wanted)

    return {"tfd-utils use": tfd_run, "ofindex use": ours_use,
            "tfd-utils get_record": tfd_run, "ofindex, a key a call": ours_one,
            "ofindex, batches of all keys": ours_batch,
            "ofindex lookup alone, a key a call": lookups_one,
            "ofindex lookup alone, batches": lookups_batch}


def bench_lookup(directory: str, n: int, rounds: int, keys: int) -> dict[str, Any]:
    """Random keys to parsed Examples: ofindex (one key a call, and batches) against tfd-utils'
    ``get_record``; the memory each holds for its index."""
    from tfd_utils import TFRecordRandomAccess

    rng = np.random.default_rng(2)
    wanted = [f"img-{i:09d}" for i in rng.integers(0, n, keys).tolist()]
    files = sorted(os.path.join(directory, f) for f in os.listdir(directory)
                   if f.endswith(".tfrecord"))
    pickle_path = os.path.join(directory + "-tfd", "index.pkl")
    os.makedirs(os.path.dirname(pickle_path), exist_ok=True)
    prebuilt = TFRecordRandomAccess(files, key_feature_name="id", index_file=pickle_path)
    assert len(prebuilt.index) == n  # its index built and pickled once, before the rounds
    prebuilt.close()

    runs = _lookup_runs(wanted)
    # one untimed pass over the keys each: tfd-utils' pickle is loaded whole, ofindex's key
    # index pages the keys need are read
    tfd, tfd_bytes = _held(lambda: TFRecordRandomAccess(files, key_feature_name="id",
                                                         index_file=pickle_path),
                           runs.pop("tfd-utils use"))
    ds, ours_bytes = _held(lambda: ofindex.open(directory), runs.pop("ofindex use"))
    rates: dict[str, list[float]] = {name: [] for name in runs}
    cpu_rates: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            run(tfd if name.startswith("tfd") else ds)
            rates[name].append(keys / (time.perf_counter() - start))
            cpu_rates[name].append(keys / max(time.process_time() - start_cpu, 1e-9))
    tfd.close()
    ds.close()
    peer, one, batch = "tfd-utils get_record", "ofindex, a key a call", \
        "ofindex, batches of all keys"
    return {"keys": keys, "records": n, "rounds": rounds,
            "keys_per_s": {k: spread(v, 0) for k, v in rates.items()},
            "ratio_one": _per_round(rates, one, peer),
            "ratio_batch": _per_round(rates, batch, peer),
            # keys per CPU second of the process (both read on one thread)
            "keys_per_cpu_s": {k: spread(v, 0) for k, v in cpu_rates.items()},
            "cpu_ratio_one": _per_round(cpu_rates, one, peer),
            "cpu_ratio_batch": _per_round(cpu_rates, batch, peer),
            "index_bytes": {"tfd-utils": tfd_bytes, "ofindex": ours_bytes},
            "memory_ratio": round(ours_bytes / max(tfd_bytes, 1), 4)}


# -- remote lookups -------------------------------------------------------------------------------
def bench_remote(keys: int, rtt: float, records: int) -> dict[str, Any]:
    """A batch of random keys in the simulated store's key index, a real ``rtt`` sleep per
    request: the key index's request rounds and the batch's wall time in RTTs (the header and
    root read once before)."""
    import sim_store

    url = sim_store.dataset_url(records, max(1, records // 100_000), 200)
    ds = ofindex.open(url)
    ds.lookup("id", 0)  # the key index's header and root, and the first node: read once
    index = ds._column_queries().key_index("id")
    assert index is not None
    storage = ds._table.shards[0].index_storage
    rounds: list[int] = []
    original = storage.fetch_round

    def counted(*args: Any, **kwargs: Any) -> Any:
        rounds.append(1)
        return original(*args, **kwargs)

    storage.fetch_round = counted  # type: ignore[method-assign]
    sim_store.SimStore.latency = rtt
    rng = np.random.default_rng(3)
    out = []
    try:
        for _ in range(3):
            index.nodes.clear()
            index.leaves.clear()
            rounds.clear()
            wanted = rng.integers(0, records, keys).tolist()
            start = time.perf_counter()
            found = ds.lookup("id", wanted)
            took = time.perf_counter() - start
            assert [f.tolist() for f in found] == [[k] for k in wanted]
            out.append({"rounds": len(rounds), "rtts": round(took / rtt, 2)})
    finally:
        sim_store.SimStore.latency = 0.0
    return {"records": records, "keys": keys, "rtt_ms": rtt * 1000, "levels":
            index.header.levels, "batches": out}


# -- where(label=3) -------------------------------------------------------------------------------
def bench_where(directory: str, labels: np.ndarray, rounds: int) -> dict[str, Any]:
    """``where(label=3)`` against HF datasets' ``filter`` and tfr-reader's SQL, each from
    what it loads first."""
    import datasets
    import polars as pl
    import pyarrow as pa
    from tfr_reader import TFRecordDatasetReader

    n = len(labels)
    want = int((labels == 3).sum())
    hf_path = directory + "-hf"
    if not os.path.exists(hf_path + ".done"):
        datasets.Dataset(pa.table({"label": labels.astype(np.int64)})).save_to_disk(hf_path)
        open(hf_path + ".done", "w").close()
    tfr_dir = directory + "-tfr"
    if not os.path.exists(os.path.join(tfr_dir, "tfrds-reader-index.parquet")):
        _tfr_index(directory, labels, tfr_dir, pl)
    cache = tempfile.mkdtemp(prefix="hf-cache-")

    def ours() -> int:
        with ofindex.open(directory) as ds:
            return len(ds.where(label=3))

    def hf() -> int:
        data = datasets.load_from_disk(hf_path)
        kept = data.filter(lambda batch: np.asarray(batch) == 3, input_columns="label",
                           batched=True, batch_size=100_000,
                           cache_file_name=os.path.join(cache, f"f{time.time_ns()}.arrow"))
        return len(kept)

    def tfr() -> int:
        reader = TFRecordDatasetReader(tfr_dir, verbose=False)
        return reader.query("SELECT * FROM index WHERE label = 3").height

    runs = {"ofindex where": ours, "datasets filter": hf, "tfr-reader SQL": tfr}
    seconds: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            got = run()
            seconds[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
            assert got == want, (name, got, want)
    shutil.rmtree(cache, ignore_errors=True)
    return {"records": n, "matching": want, "seconds": {k: spread(v, 4) for k, v in
                                                        seconds.items()},
            "ratio_vs_hf": spread([b / a for a, b in zip(seconds["ofindex where"],
                                                         seconds["datasets filter"],
                                                         strict=True)], 2),
            "ratio_vs_tfr": spread([b / a for a, b in zip(seconds["ofindex where"],
                                                          seconds["tfr-reader SQL"],
                                                          strict=True)], 2),
            # CPU seconds of the process, its threads too (polars runs on several)
            "cpu_seconds": {k: spread(v, 4) for k, v in cpu.items()},
            "cpu_ratio_vs_hf": spread([b / a for a, b in zip(cpu["ofindex where"],
                                                             cpu["datasets filter"],
                                                             strict=True)], 2),
            "cpu_ratio_vs_tfr": spread([b / a for a, b in zip(cpu["ofindex where"],
                                                              cpu["tfr-reader SQL"],
                                                              strict=True)], 2)}


def _tfr_index(directory: str, labels: np.ndarray, tfr_dir: str, pl: Any) -> None:
    """tfr-reader's index of the files, as its indexer writes it (file name, record span,
    label), made from ofindex's sidecars (its own indexer parses every record in Python)."""
    os.makedirs(tfr_dir, exist_ok=True)
    ds = ofindex.open(directory)
    names, starts, ends = [], [], []
    for shard in ds._table.shards:
        sidecar = shard.sidecar
        offsets = sidecar.offsets.astype(np.int64)
        name = os.path.basename(shard.path)
        os.symlink(os.path.abspath(shard.path), os.path.join(tfr_dir, name))
        names += [name] * len(offsets)
        starts.append(offsets)
        ends.append(np.append(offsets[1:], sidecar.indexed_end))
    pl.DataFrame({"tfrecord_filename": names, "tfrecord_start": np.concatenate(starts),
                  "tfrecord_end": np.concatenate(ends), "label": labels.astype(np.int64)}
                 ).write_parquet(os.path.join(tfr_dir, "tfrds-reader-index.parquet"))
    ds.close()


# -- balanced sampling ----------------------------------------------------------------------------
def bench_balanced(directory: str, labels: np.ndarray, rounds: int, batch: int,
                   batches: int) -> dict[str, Any]:
    """A training pipeline's batches/s, records read and decoded to arrays in the main process:
    BalancedSampler against the plain global shuffle (``BatchSampler(GlobalShuffleSampler)``);
    the samplers alone (record numbers only); what their batches hold."""
    from ofindex.decode import BatchDecoder, FixedLen

    ds = ofindex.open(directory)
    decoder = BatchDecoder({"label": FixedLen((), "int64"), "score": FixedLen((), "float32")})
    samplers = {"BalancedSampler": lambda: BalancedSampler(ds, by="label", batch_size=batch,
                                                            seed=0),
                "global shuffle": lambda: BatchSampler(GlobalShuffleSampler(ds, seed=0), batch,
                                                       drop_last=True)}

    def pipeline(sampler: Any, read: bool) -> tuple[float, list[list[int]]]:
        drawn = []
        start = time.perf_counter()
        for numbers in sampler:
            if read:
                decoder(ds.__getitems__(numbers))
            drawn.append(numbers)
            if len(drawn) == batches:
                break
        return len(drawn) / (time.perf_counter() - start), drawn

    rates: dict[str, list[float]] = {}
    got: dict[str, list[list[int]]] = {}
    for _ in range(rounds):
        for name, make in samplers.items():
            for read in (True, False):
                key = f"{name}, {'read and decoded' if read else 'record numbers only'}"
                rate, got[name] = pipeline(make(), read)
                rates.setdefault(key, []).append(rate)
    quality = {}
    for name, drawn in got.items():
        order = labels[np.concatenate([np.asarray(b) for b in drawn])]
        balance = class_balance(order, batch)
        counts = np.bincount(order, minlength=CLASSES)
        quality[name] = {"classes_per_batch": round(balance.classes_per_batch, 2),
                         "top2_share": round(balance.top2_share, 3),
                         "smallest_class_share": round(float(counts.min() / counts.sum()), 4)}
    ds.close()

    def ratio(kind: str) -> dict[str, float]:
        return spread([a / b for a, b in zip(rates[f"BalancedSampler, {kind}"],
                                             rates[f"global shuffle, {kind}"], strict=True)], 3)

    return {"batch_size": batch, "batches": batches,
            "class_shares": [round(float(s), 4) for s in np.bincount(labels) / len(labels)],
            "batches_per_s": {k: spread(v, 1) for k, v in rates.items()},
            "ratio": ratio("read and decoded"), "ratio_numbers_only": ratio("record numbers only"),
            "quality": quality}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000, help="build and lookup dataset")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--where-records", type=int, default=10_000_000,
                   help="the where() and sampling dataset")
    p.add_argument("--keys", type=int, default=2000, help="random keys looked up a round")
    p.add_argument("--remote-records", type=int, default=10**9)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--lookup-rounds", type=int, default=9,
                   help="interleaved rounds of the local lookups (a few ms each)")
    p.add_argument("--sections", default="build,lookup,remote,where,balanced",
                   help="which parts to run, comma-separated")
    p.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "ofindex-bench-columns"))
    p.add_argument("--out", default=os.path.join("bench-results", "columns.json"))
    a = parse_args(p, argv, records=3000, shards=2, where_records=5000, keys=50,
                   remote_records=100_000, rounds=1, lookup_rounds=1)
    sections = set(a.sections.split(","))
    os.makedirs(a.root, exist_ok=True)
    result: dict[str, Any] = {"load_before": machine_load(), "config": {
        "records": a.records, "where_records": a.where_records, "rounds": a.rounds}}
    small, _ = write_data(a.root, a.records, a.shards)
    if "build" in sections:
        result["build"] = bench_build(small, a.records, a.rounds)
        print("build", result["build"], flush=True)
    if not _has_key_index(small):
        ofindex.build_index(small, columns=["label", "id"], keys=True)
    if "lookup" in sections:
        result["lookup"] = bench_lookup(small, a.records, a.lookup_rounds, a.keys)
        print("lookup", result["lookup"], flush=True)
    if "remote" in sections:
        result["remote"] = bench_remote(64, 0.02, a.remote_records)
        print("remote", result["remote"], flush=True)
    if {"where", "balanced"} & sections:
        big, labels = write_data(a.root, a.where_records,
                                 max(a.shards, a.where_records // 500_000))
        if not _has_key_index(big):
            ofindex.build_index(big, columns=["label"], keys=True)
    if "where" in sections:
        result["where"] = bench_where(big, labels, a.rounds)
        print("where", result["where"], flush=True)
    if "balanced" in sections:
        result["balanced"] = bench_balanced(big, labels, a.rounds, 256,
                                            2000 if not a.smoke else 5)
        print("balanced", result["balanced"], flush=True)
    result["load_after"] = machine_load()
    if sections != ALL_SECTIONS and a.out and os.path.exists(a.out):
        with open(a.out) as f:  # the other sections as an earlier run measured them
            result = {**json.load(f), **{k: v for k, v in result.items() if k != "config"}}
    result["median_load"] = statistics.median([result["load_before"]["load_average"][0],
                                               result["load_after"]["load_average"][0]])
    write_json(result, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
