"""The machine-level data cache against diskcache and fsspec's block cache, in the same run.

The workload the data cache serves (``ofindex.open(url, cache_dir=..., data_cache_bytes=...)``):
globally shuffled batches of 256 records over a dataset served by nginx (the tests' server)
behind the latency proxy (+``--rtt``), epoch 1 with an empty cache directory, epoch 2 in the
same process, epoch 3 in a new process (a new run on the same machine), and the same epochs 1
and 2 read by two processes at once that share the directory (DataLoader workers: each reads
its half of every batch). Every contender delivers the framed bytes of the batch's records;
the bytes are checked against the local files after the clock stops.

* ``ours``: :class:`ofindex.cache.data.DataCache` (1 MiB blocks as files, registered in
  SQLite, memory-mapped), read through its planner as the read path does;
* ``diskcache``: the same blocks, fetched alike (the same planner and runs of neighbouring
  blocks in one concurrent round), stored in a ``diskcache.Cache`` (SQLite plus a file per
  value, least-recently-used eviction, the same bound) and read as files mapped in this
  process (``get(read=True)``: its fastest read);
* ``fsspec``: ``fsspec.filesystem("blockcache", target_protocol="http")`` (sparse files and a
  JSON list of the blocks held, 1 MiB blocks), each record read with ``seek``/``read`` on a
  file kept open for the run, as its API reads;
* ``ofindex``: the whole read path for reference (``ds[batch]``: index round, record checks,
  files mapped whole once every block is seen).

Rounds are interleaved (each round runs every contender once, in a rotated order); the JSON
(``bench-results/cache.json``, for ``tools/report.py``) gives medians with min and max.

A second part times the machine's page store (``cache_dir``'s pages, headers and checks:
:class:`ofindex.cache.machine.NodeCache`) against a ``diskcache.Cache`` doing the same: per
batch, one look-up of 256 page keys and the missing pages stored, epoch 1 (all missing) and
2 (all held), alone and by two processes at once. fsspec has no such store.

Usage: ``python tools/bench_cache.py [--rounds 3] [--shards 8] [--records 4096]
[--record-size 1000] [--rtt 0.02] [--part all|blocks|pages]``; diskcache comes with
``pip install 'ofindex[bench]'`` (without it, it is left out with a line saying so).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import mmap
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import crc32c
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 256
BLOCK = 1 << 20
CONTENDERS = ("ours", "diskcache", "fsspec", "ofindex")


# -- the contenders, each in a worker process -------------------------------------------------
class Ours:
    """The data cache's blocks, read as the read path reads them."""

    def __init__(self, url: str, names: list[str], cache_dir: str, budget: int) -> None:
        import ofindex
        from ofindex.cache.data import DataCache

        self.ds = ofindex.open(url, check_stale=False)
        self.storage = self.ds._table.storage
        self.paths = [shard.path for shard in self.ds._table.shards]
        for path in self.paths:  # the version the blocks are keyed by (a stat each)
            self.storage.expected.expect(path, self.storage.stamp(path), self.storage.url(path))
        self.cache = DataCache(cache_dir, budget, block_bytes=BLOCK)

    def read(self, files: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> bytes:
        got = self.cache.read(self.storage, self.paths, files, starts, ends, check_blocks=False)
        return bytes(got.buffer())

    def close(self) -> None:
        self.cache.close()
        self.ds.close()


class DiskcacheBlocks(Ours):
    """The same blocks and fetches, kept in a ``diskcache.Cache``."""

    def __init__(self, url: str, names: list[str], cache_dir: str, budget: int) -> None:
        import diskcache

        super().__init__(url, names, cache_dir, budget)
        self.store = diskcache.Cache(cache_dir, size_limit=budget,
                                     eviction_policy="least-recently-used")
        self.mapped: dict[bytes, memoryview] = {}

    def _find(self, key: bytes) -> memoryview | None:
        view = self.mapped.get(key)
        if view is None:
            handle = self.store.get(key, read=True)
            if handle is None:
                return None
            if isinstance(handle, bytes):  # a small block (a file's last): kept in SQLite
                view = self.mapped[key] = memoryview(handle)
                return view
            with handle:
                view = self.mapped[key] = memoryview(mmap.mmap(handle.fileno(), 0,
                                                               access=mmap.ACCESS_READ))
        return view

    def read(self, files: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> bytes:
        from ofindex.cache import block_plan
        from ofindex.cache.data import MAX_RUN_BYTES

        plan = block_plan.plan(self.paths, files, starts, ends, self._blocks)
        found = {block.key: view for block in plan.blocks
                 if (view := self._find(block.key)) is not None}
        missing = [block for block in plan.blocks if block.key not in found]
        runs = block_plan.runs(missing, MAX_RUN_BYTES)
        fetched = self.storage.read_ranges([run[0].path for run in runs],
                                           [run[0].start for run in runs],
                                           [run[-1].end for run in runs]) if runs else []
        for run, data in zip(runs, fetched, strict=True):
            whole = memoryview(data)
            for block in run:
                found[block.key] = whole[block.start - run[0].start : block.end - run[0].start]
                self.store.set(block.key, bytes(found[block.key]))
        views = [found[block.key] for block in plan.blocks]
        return bytes(plan.assemble(starts, views, {}))

    def _blocks(self, path: str) -> Any:
        from ofindex.cache.block_plan import FileBlocks

        stamp = self.storage.expected.stamp_of(path)
        return FileBlocks(self.storage.url(path), path, stamp, BLOCK)

    def close(self) -> None:
        self.mapped.clear()
        self.store.close()
        super().close()


class FsspecBlocks:
    """fsspec's block cache (``blockcache::http``), a file per shard kept open."""

    def __init__(self, url: str, names: list[str], cache_dir: str, budget: int) -> None:
        import fsspec

        self.fs = fsspec.filesystem("blockcache", target_protocol="http",
                                    cache_storage=cache_dir, check_files=False,
                                    expiry_time=False)
        self.files = [self.fs.open(f"{url}/{name}", block_size=BLOCK) for name in names]

    def read(self, files: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> bytes:
        out = []
        for file, start, end in zip(files.tolist(), starts.tolist(), ends.tolist(),
                                    strict=True):
            handle = self.files[file]
            handle.seek(start)
            out.append(handle.read(end - start))
        return b"".join(out)

    def close(self) -> None:
        for handle in self.files:
            handle.close()  # saves the list of blocks held, for the next process


class WholePath:
    """``ofindex.open(url, cache_dir=..., data_cache_bytes=...)`` and ``ds[batch]``."""

    def __init__(self, url: str, names: list[str], cache_dir: str, budget: int) -> None:
        import ofindex

        self.ds = ofindex.open(url, cache_dir=cache_dir, data_cache_bytes=budget)

    def read_records(self, indices: np.ndarray) -> bytes:
        return b"".join(self.ds[indices])

    def close(self) -> None:
        self.ds.close()


KINDS = {"ours": Ours, "diskcache": DiskcacheBlocks, "fsspec": FsspecBlocks,
         "ofindex": WholePath}


def worker(kind: str, url: str, layout: str, cache_dir: str, budget: int,
           epochs: list[list[int]], batch: int) -> list[dict[str, Any]]:
    """Read ``epochs`` (record numbers, in batches of ``batch``) with contender ``kind``; per
    epoch its wall time, first and median batch, and the CRC32C of each batch's bytes."""
    spans = np.load(layout)
    names = [str(n) for n in spans["names"]]
    reader = KINDS[kind](url, names, cache_dir, budget)
    rows = []
    try:
        for order in epochs:
            records = np.asarray(order, dtype=np.int64)
            crcs, batches = [], []
            start = last = time.perf_counter()
            for k in range(0, len(records), batch):
                chosen = records[k : k + batch]
                if kind == "ofindex":
                    got = reader.read_records(chosen)
                else:
                    got = reader.read(spans["files"][chosen], spans["start"][chosen],
                                      spans["end"][chosen])
                now = time.perf_counter()
                batches.append(now - last)
                last = now
                crcs.append(crc32c.crc32c(got))
            rows.append({"wall_s": time.perf_counter() - start, "first_batch_s": batches[0],
                         "median_batch_ms": statistics.median(batches) * 1e3, "crcs": crcs})
    finally:
        reader.close()
    return rows


# -- the machine's page store: NodeCache against diskcache ------------------------------------
def page_worker(kind: str, directory: str, pages: int, page_bytes: int, seed: int,
                epochs: int) -> list[dict[str, float]]:
    """An index round's use of the machine's page store: per batch, one look-up of 256 page
    keys, then the missing pages stored in one call; the keys of a shuffled epoch over
    ``pages`` pages. Per epoch: wall time and the median batch."""
    order = np.random.default_rng(seed).permutation(pages)
    keys = [k.to_bytes(8, "little") * 2 for k in range(pages)]
    value = bytes(page_bytes)
    if kind == "ours":
        from ofindex.cache.machine import NodeCache

        node = NodeCache(directory, 1 << 34)

        def get(wanted: list[bytes]) -> dict[bytes, bytes]:
            return node.get(wanted)

        def put(items: list[tuple[bytes, bytes]]) -> None:
            node.put(items)
    else:
        import diskcache

        store = diskcache.Cache(directory, size_limit=1 << 34,
                                eviction_policy="least-recently-used")

        def get(wanted: list[bytes]) -> dict[bytes, bytes]:
            return {key: got for key in wanted if (got := store.get(key)) is not None}

        def put(items: list[tuple[bytes, bytes]]) -> None:
            with store.transact():
                for key, data in items:
                    store.set(key, data)
    rows = []
    for _ in range(epochs):
        batches = []
        start = time.perf_counter()
        for k in range(0, pages, BATCH):
            t = time.perf_counter()
            wanted = [keys[j] for j in order[k : k + BATCH].tolist()]
            held = get(wanted)
            put([(key, value) for key in wanted if key not in held])
            batches.append(time.perf_counter() - t)
        rows.append({"wall_s": time.perf_counter() - start,
                     "median_batch_ms": statistics.median(batches) * 1e3})
    return rows


def page_rounds(rounds: int, pages: int, page_bytes: int) -> dict[str, Any]:
    """Epochs 1 and 2 of :func:`page_worker`, alone and by two processes at once sharing the
    store (each its own shuffled order), interleaved rounds."""
    context = multiprocessing.get_context("spawn")
    kinds = ("ours", "diskcache") if _have("diskcache") else ("ours",)
    runs: dict[str, dict[str, list[list[dict[str, float]]]]] = {
        kind: {"single": [], "shared": []} for kind in kinds}
    for r in range(rounds):
        for kind in kinds[r % len(kinds) :] + kinds[: r % len(kinds)]:
            for workload, procs in (("single", 1), ("shared", 2)):
                directory = tempfile.mkdtemp(prefix="bench-pages-")
                with cf.ProcessPoolExecutor(procs, mp_context=context) as pool:
                    got = [f.result() for f in [pool.submit(page_worker, kind, directory,
                                                            pages, page_bytes, seed, 2)
                                                for seed in range(procs)]]
                shutil.rmtree(directory, ignore_errors=True)
                runs[kind][workload].append([
                    {key: max(g[epoch][key] for g in got) for key in got[0][epoch]}
                    for epoch in range(2)])
                print(f"pages round {r} {kind:>9} {workload}: " + ", ".join(
                    f"{row['wall_s']:.2f} s" for row in runs[kind][workload][-1]), flush=True)
    return {"pages": pages, "page_bytes": page_bytes, "batch": BATCH,
            "contenders": {kind: {w: _summary(rows) for w, rows in by.items()}
                           for kind, by in runs.items()}}


# -- the parent: dataset, server, rounds --------------------------------------------------------
def _expected(data: str, spans: dict[str, np.ndarray], order: np.ndarray,
              payloads: bool, batch: int = BATCH) -> list[int]:
    """Each batch's CRC32C from the local files (framed ranges, or the payloads)."""
    import ofindex

    local = ofindex.open(data)
    out = []
    contents = {}
    for k in range(0, len(order), batch):
        chosen = order[k : k + batch]
        if payloads:
            out.append(crc32c.crc32c(b"".join(local[chosen])))
            continue
        parts = []
        for record in chosen.tolist():
            name = str(spans["names"][spans["files"][record]])
            if name not in contents:
                with open(os.path.join(data, name), "rb") as f:
                    contents[name] = f.read()
            parts.append(contents[name][spans["start"][record] : spans["end"][record]])
        out.append(crc32c.crc32c(b"".join(parts)))
    local.close()
    return out


def _layout(data: str, path: str) -> dict[str, np.ndarray]:
    """Each record's file and framed span, from the local index (saved for the workers)."""
    import ofindex

    local = ofindex.open(data)
    names, files, starts, ends = [], [], [], []
    for number, shard in enumerate(local._table.shards):
        begin, end = shard.sidecar.spans(np.arange(shard.records))
        names.append(os.path.basename(shard.path))
        files.append(np.full(shard.records, number, dtype=np.int64))
        starts.append(begin)
        ends.append(end)
    local.close()
    spans = {"names": np.array(names), "files": np.concatenate(files),
             "start": np.concatenate(starts), "end": np.concatenate(ends)}
    np.savez(path, **spans)
    return spans


def _run(kind: str, url: str, layout: str, cache_dir: str, budget: int,
         parts: list[list[list[int]]], batch: int = BATCH) -> list[list[dict[str, Any]]]:
    """One worker process per part, all at once (fresh processes: spawned)."""
    context = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(len(parts), mp_context=context) as pool:
        futures = [pool.submit(worker, kind, url, layout, cache_dir, budget, part, batch)
                   for part in parts]
        return [future.result() for future in futures]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--records", type=int, default=4096, help="records per shard")
    p.add_argument("--record-size", type=int, default=1000)
    p.add_argument("--rtt", type=float, default=0.020, help="seconds the proxy adds")
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--pages", type=int, default=16384, help="pages in the page-store part")
    p.add_argument("--page-bytes", type=int, default=1032, help="bytes per page (128 offsets)")
    p.add_argument("--part", choices=("all", "blocks", "pages"), default="all",
                   help="run one part alone (the other's figures in --out are kept)")
    p.add_argument("--out", default="bench-results/cache.json")
    sys.path[:0] = [os.path.dirname(HERE), HERE]
    from benchlib import parse_args

    args = parse_args(p, argv, rounds=1, shards=2, records=256, rtt=0.005, pages=512)
    if not _have("diskcache"):
        print("diskcache is not installed (pip install 'ofindex[bench]'): measured without it")
    results: dict[str, Any] = {}
    if args.out and os.path.exists(args.out) and args.part != "all":
        with open(args.out) as f:
            results = json.load(f)
    if args.part != "blocks":
        results["pages"] = page_rounds(args.rounds, args.pages, args.page_bytes)
    if args.part != "pages":
        results.update(blocks(args))
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def blocks(args: argparse.Namespace) -> dict[str, Any]:
    """The data blocks part: every contender over the served dataset (see the module)."""
    from bench_remote import _proxy_process
    from bench_scale import DataLog
    from benchlib import machine_load

    import ofindex
    from ofindex.cli.synthetic import write_dataset
    from tests.kit import servers

    work = tempfile.mkdtemp(prefix="bench-cache-")
    data = os.path.join(work, "data")
    total = args.shards * args.records
    write_dataset(data, total, args.shards, kind="random", record_size=args.record_size,
                  index=False, seed=1)
    ofindex.build_index(data)
    layout = os.path.join(work, "layout.npz")
    spans = _layout(data, layout)
    size = sum(os.path.getsize(os.path.join(data, str(n))) for n in spans["names"])
    budget = 2 * size
    rng = np.random.default_rng(0)
    epochs = [rng.permutation(total) for _ in range(3)]
    halves = [[np.concatenate([e[k : k + BATCH][side::2] for k in range(0, total, BATCH)])
               for e in epochs[:2]] for side in (0, 1)]
    expected = {payloads: ([_expected(data, spans, order, payloads) for order in epochs],
                           [[_expected(data, spans, order, payloads, BATCH // 2)
                             for order in side] for side in halves])
                for payloads in (False, True)}
    contenders = [c for c in args.contenders.split(",") if c != "diskcache" or _have(c)]
    runs: dict[str, dict[str, list[list[dict[str, Any]]]]] = {
        c: {"single": [], "shared": []} for c in contenders}
    with servers.start_nginx(work) as nginx:
        port = int(nginx.url.rsplit(":", 1)[1])
        with _proxy_process(port, args.rtt * 1000) as proxy_port:
            url = f"http://127.0.0.1:{proxy_port}/data"
            log = DataLog(nginx.log)
            for r in range(args.rounds):
                for c in contenders[r % len(contenders):] + contenders[: r % len(contenders)]:
                    single, shared = expected[c == "ofindex"]
                    runs[c]["single"].append(_single(c, url, layout, work, budget, epochs,
                                                     log, single))
                    runs[c]["shared"].append(_shared(c, url, layout, work, budget, halves,
                                                     log, shared))
                    print(f"round {r} {c:>9}: " + " | ".join(
                        ", ".join(f"{row['wall_s']:.2f} s {row['data_requests']} req"
                                  for row in runs[c][w][-1]) for w in ("single", "shared")),
                          flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return {"config": {"rtt_ms": args.rtt * 1000, "shards": args.shards, "records": total,
                          "record_size": args.record_size, "dataset_bytes": size,
                          "cache_bytes": budget, "block_bytes": BLOCK, "batch": BATCH,
                          "rounds": args.rounds, **machine_load()},
               "contenders": {c: {w: _summary(rows) for w, rows in by.items()}
                              for c, by in runs.items()}}


def _single(kind, url, layout, work, budget, epochs, log, expected) -> list[dict]:
    """Epochs 1 and 2 in one process, epoch 3 in a new one, over one fresh directory."""
    cache_dir = tempfile.mkdtemp(dir=work)
    log.take()
    rows = _run(kind, url, layout, cache_dir, budget, [[e.tolist() for e in epochs[:2]]])[0]
    first = log.take()
    rows += _run(kind, url, layout, cache_dir, budget, [[epochs[2].tolist()]])[0]
    third = log.take()
    shutil.rmtree(cache_dir, ignore_errors=True)
    for row, want in zip(rows, expected, strict=True):
        if row.pop("crcs") != want:
            raise AssertionError(f"{kind}: the bytes read differ from the local files'")
    rows[0].update(first)  # the requests of epochs 1 and 2 fall in epoch 1 (2 makes none)
    rows[1].update(dict.fromkeys(first, 0))
    rows[1]["note"] = "requests counted with epoch 1"
    rows[2].update(third)
    return rows


def _shared(kind, url, layout, work, budget, halves, log, expected) -> list[dict]:
    """Epochs 1 and 2 read by two processes at once, each its half of every batch."""
    cache_dir = tempfile.mkdtemp(dir=work)
    log.take()
    got = _run(kind, url, layout, cache_dir, budget,
               [[order.tolist() for order in side] for side in halves], BATCH // 2)
    moved = log.take()
    shutil.rmtree(cache_dir, ignore_errors=True)
    for side, want in zip(got, expected, strict=True):
        if [row.pop("crcs") for row in side] != want:
            raise AssertionError(f"{kind}: the bytes read differ from the local files'")
    rows = []
    for epoch in range(2):
        row = {key: max(got[side][epoch][key] for side in (0, 1))
               for key in ("wall_s", "first_batch_s", "median_batch_ms")}
        rows.append({**row, **(moved if epoch == 0 else dict.fromkeys(moved, 0))})
    return rows


def _summary(rows: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per epoch: the median of each figure over the rounds, with its min and max."""
    out = []
    for epoch in range(len(rows[0])):
        summary: dict[str, Any] = {}
        for key, value in rows[0][epoch].items():
            if not isinstance(value, (int, float)):
                continue
            values = [r[epoch][key] for r in rows]
            summary[key] = statistics.median(values)
            summary[key + "_min"], summary[key + "_max"] = min(values), max(values)
        out.append(summary)
    return out


if __name__ == "__main__":
    sys.exit(main())
