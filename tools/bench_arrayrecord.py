#!/usr/bin/env python3
"""ofindex against ArrayRecord in ArrayRecord's own layout: single, batched and sequential
reads, per compression, the same records, in one run of interleaved rounds.

ArrayRecord's docs/performance.md measures 65,536 records of 200 lorem-ipsum words (~1.3 KB,
text), written with ``group_size:1`` (the only size its ``ArrayRecordDataSource`` reads) and,
for sequential reads, ``group_size:256``, in zstd, brotli (level 3 both) and snappy and
uncompressed; reads are by a ``numpy`` permutation of all records (seed 42): *individual
access* (one record a call), *batch access* (``read(indices)`` / ``__getitems__``) and
*sequential* (``read()`` called once per record after a seek, and ``read_all()``), on a local
file system. It publishes no code: this tool follows the text. The word list is our own (the
``lorem_text`` package is not a dependency here): the records are as long (~1.4 KB) and a
little more compressible (zstd:3 at ``group_size:1`` keeps 46 % of the bytes here, 54 % in
its table).

The same records are written once as ArrayRecord (each codec of its doc) and as ofindex
TFRecord (uncompressed, GZIP and ZLIB with ``ofindex.Writer``'s default seek spacing, and GZIP
with a seek point every 4 KiB, the random-access setting), and
every contender is timed once in each round, in turn (the machine's drift falls on all
alike); records/s are the median (min-max) over ``--rounds`` rounds and each ratio is taken
within its round, against the fastest of ArrayRecord's APIs and group sizes that serve the
same access pattern. ofindex checks every TFRecord CRC; ArrayRecord's Riegeli reader checks
its chunks' hashes.

*Warm* rows read from the page cache (the files are read once first). *Cold* rows read
copies of the files whose pages are dropped (``posix_fadvise(DONTNEED)``, checked with
``mincore``) before each run, and open the reader anew each time: the first batch, or the
first pass, of a program that has just started.

    python tools/bench_arrayrecord.py --out bench-results/arrayrecord.json
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (
    Contender,
    interleaved,
    machine_load,
    parse_args,
    read_all,
    spread,
    write_json,
)

import ofindex

#: ArrayRecord's codecs as its performance doc measures reads (level 3 where there is one).
AR_CODECS = {"uncompressed": "uncompressed", "zstd": "zstd:3", "brotli": "brotli:3",
             "snappy": "snappy"}
#: Ours: what TensorFlow's TFRecordWriter writes, with ``ofindex.Writer``'s default seek
#: spacing (256 KiB), and GZIP with a seek point every 4 KiB, the setting for random access
#: as ``group_size:1`` is ArrayRecord's (a random record inflates ~2 KB instead of ~128 KB;
#: on these records the file grows from 25 % to 35 % of the records' bytes, still smaller
#: than ArrayRecord's zstd at ``group_size:1``): ``{name: (compression, seek spacing)}``.
OUR_CODECS: dict[str, tuple[str | None, int]] = {
    "uncompressed": (None, 1 << 18), "GZIP": ("gzip", 1 << 18), "ZLIB": ("zlib", 1 << 18),
    "GZIP, 4 KiB seek points": ("gzip", 1 << 12)}
#: ArrayRecord's group sizes: 1 for random access (its data source reads no other), 256 for
#: its sequential table.
GROUP_SIZES = (1, 256)
#: The access patterns, in the report's order: (key, words).
PATTERNS = (
    ("single", "single, random (one record a call)"),
    ("batch_all", "batched, random (the whole permutation in one call, as ArrayRecord's doc)"),
    ("batch_loader", "batched, random ({loader} a call, a loader's batch)"),
    ("seq_records", "sequential, record by record"),
    ("seq_all", "sequential, whole file in batches (ArrayRecord: read_all())"),
    ("cold_batch", "cold: first batch of {loader}, reader opened anew, pages dropped"),
    ("cold_seq", "cold: one pass, reader opened anew, pages dropped"),
)

#: Lorem-ipsum vocabulary (Cicero's passage, as lorem generators use it).
LOREM = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt "
    "ut labore et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco "
    "laboris nisi aliquip ex ea commodo consequat duis aute irure in reprehenderit voluptate "
    "velit esse cillum eu fugiat nulla pariatur excepteur sint occaecat cupidatat non proident "
    "sunt culpa qui officia deserunt mollit anim id est laborum perspiciatis unde omnis iste "
    "natus error voluptatem accusantium doloremque laudantium totam rem aperiam eaque ipsa quae "
    "ab illo inventore veritatis quasi architecto beatae vitae dicta explicabo nemo ipsam quia "
    "voluptas aspernatur aut odit fugit consequuntur magni dolores eos ratione sequi nesciunt "
    "neque porro quisquam dolorem adipisci numquam eius modi tempora incidunt magnam aliquam "
    "quaerat")
WORDS = LOREM.split()


def lorem_records(count: int, words: int, seed: int = 0) -> list[bytes]:
    """``count`` records of ``words`` random lorem-ipsum words, as ArrayRecord's doc makes them
    (``lorem.words(200).encode()``): space-separated, the first capitalised, a full stop."""
    rng = np.random.default_rng(seed)
    vocabulary = np.array(WORDS, dtype=object)
    out = []
    for picks in rng.integers(0, len(WORDS), size=(count, words)):
        text = " ".join(vocabulary[picks])
        out.append((text[:1].upper() + text[1:] + ".").encode())
    return out


# -- files -----------------------------------------------------------------------------------
def file_paths(directory: str) -> dict[str, str]:
    """Where :func:`write_files` puts each file: ``{"ours:<codec>" | "ar:<codec>:<group
    size>": path}`` (ours index into ``directory/index``: see :func:`index_dir`)."""
    paths: dict[str, str] = {}
    for codec, (compression, _) in OUR_CODECS.items():
        suffix = {"gzip": ".gz", "zlib": ".zz"}.get(compression or "", "")
        stem = codec.replace(", ", "-").replace(" ", "")
        paths[f"ours:{codec}"] = os.path.join(directory, "ofindex", f"{stem}.tfrecord{suffix}")
    for codec in AR_CODECS:
        for group in GROUP_SIZES:
            paths[f"ar:{codec}:{group}"] = os.path.join(directory, "arrayrecord",
                                                        f"{codec}-g{group}.array_record")
    return paths


def index_dir(path: str) -> str:
    """The index directory of one of our files: beside the data, so that a copy of the
    directory (the cold files) takes its indexes along."""
    return os.path.join(os.path.dirname(os.path.dirname(path)), "index")


def write_files(directory: str, records: list[bytes]) -> dict[str, str]:
    """The records as ofindex TFRecords (one file per codec, indexed as written) and as
    ArrayRecord (one file per codec and group size), under ``directory``; reused when there.
    Returns :func:`file_paths`."""
    from array_record.python.array_record_module import ArrayRecordWriter

    paths = file_paths(directory)
    marker = os.path.join(directory, "_COMPLETE")
    if os.path.exists(marker):
        return paths
    os.makedirs(os.path.join(directory, "ofindex"), exist_ok=True)
    os.makedirs(os.path.join(directory, "arrayrecord"), exist_ok=True)
    for codec, (compression, spacing) in OUR_CODECS.items():
        path = paths[f"ours:{codec}"]
        with ofindex.Writer(path, compression=compression, seek_spacing=spacing,
                            index_dir=index_dir(path)) as ours:
            for record in records:
                ours.write(record)
    for codec, option in AR_CODECS.items():
        for group in GROUP_SIZES:
            theirs = ArrayRecordWriter(paths[f"ar:{codec}:{group}"], f"group_size:{group},{option}")
            for record in records:
                theirs.write(record)
            theirs.close()
    open(marker, "w").close()
    return paths


def copy_files(source: str, target: str) -> dict[str, str]:
    """A copy of :func:`write_files`' directory (indexes included, times kept), made once."""
    marker = os.path.join(target, "_COMPLETE")
    if not os.path.exists(marker):
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("_COMPLETE"))
        open(marker, "w").close()
    return file_paths(target)


def open_ours(path: str) -> ofindex.Dataset:
    """One of our files, opened with its index."""
    return ofindex.open(path, index_dir=index_dir(path))


def sidecar_of(path: str) -> str:
    """The index file of one of our files."""
    with open_ours(path) as ds:
        return str(ds.shards[0].index_url)


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def resident_share(path: str) -> float:
    """The share of ``path``'s pages in the page cache (``mincore`` on a mapping that touches
    none of them)."""
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        address = _LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap of {path}")
        pages = -(-size // mmap.PAGESIZE)
        vector = (ctypes.c_ubyte * pages)()
        try:
            if _LIBC.mincore(address, size, vector) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {path}")
        finally:
            _LIBC.munmap(address, size)
    finally:
        os.close(fd)
    return sum(v & 1 for v in vector) / pages


def drop_pages(paths: list[str]) -> None:
    """Ask the kernel to drop the files' pages from the page cache (written back first: dirty
    pages stay; so do pages that a live mapping holds, which is why the cold contenders read
    copies that nothing else maps)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# -- contenders ------------------------------------------------------------------------------
class Picks:
    """The permutation of all records (ArrayRecord's doc: ``default_rng(42).permutation``),
    handed out in turn, so that each call reads other records."""

    def __init__(self, count: int, seed: int = 42) -> None:
        self.order = [int(v) for v in np.random.default_rng(seed).permutation(count)]
        self.at = 0

    def take(self, k: int) -> list[int]:
        k = min(k, len(self.order))
        if self.at + k > len(self.order):
            self.at = 0
        self.at += k
        return self.order[self.at - k:self.at]


def singles(read: Callable[[int], object], picks: Picks) -> Callable[[int], int]:
    def run(units: int) -> int:
        left = units
        while left:  # more records than the permutation holds: from its start again
            chunk = picks.take(left)
            for index in chunk:
                read(index)
            left -= len(chunk)
        return units
    return run


def batches(fetch: Callable[[list[int]], object], picks: Picks,
            size: int) -> Callable[[int], int]:
    def run(units: int) -> int:
        for _ in range(units):  # each batch dropped before the next, as a loader does
            fetch(picks.take(size))
        return units * min(size, len(picks.order))
    return run


def passes(one_pass: Callable[[], int]) -> Callable[[int], int]:
    return lambda units: sum(one_pass() for _ in range(units))


def _record_loop(ds: ofindex.Dataset) -> Callable[[], int]:
    def run() -> int:
        for _record in ds:
            pass
        return len(ds)
    return run


def _batch_loop(ds: ofindex.Dataset, size: int) -> Callable[[], int]:
    return lambda: sum(len(batch) for batch in ds.iter_batches(size))


def _reader_loop(reader: Any, count: int) -> Callable[[], int]:
    def run() -> int:
        reader.seek(0)
        for _ in range(count):
            reader.read()
        return count
    return run


def cold_passes(files: list[str], one_pass: Callable[[], int]
                ) -> Callable[[int], tuple[int, float, float]]:
    """``units`` runs of ``one_pass`` (which opens its reader), each after the files' pages
    are dropped; timed without the dropping: (records, wall seconds, CPU seconds)."""
    def run(units: int) -> tuple[int, float, float]:
        count, wall, cpu = 0, 0.0, 0.0
        for _ in range(units):
            drop_pages(files)
            cpu_start, start = time.process_time(), time.perf_counter()
            count += one_pass()
            wall += time.perf_counter() - start
            cpu += time.process_time() - cpu_start
        return count, wall, cpu
    return run


def _cold_ours(path: str, work: Callable[[ofindex.Dataset], int]) -> Callable[[], int]:
    def run() -> int:
        with open_ours(path) as ds:
            return work(ds)
    return run


def _cold_ar_source(path: str, work: Callable[[Any], int]) -> Callable[[], int]:
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    def run() -> int:
        with ArrayRecordDataSource([path]) as source:
            return work(source)
    return run


def _cold_ar_reader(path: str) -> Callable[[], int]:
    from array_record.python.array_record_module import ArrayRecordReader

    def run() -> int:
        reader = ArrayRecordReader(path)
        try:
            return len(reader.read_all())
        finally:
            reader.close()
    return run


class Bench:
    """Every contender, named ``pattern | library | codec | API``, with what it needs open."""

    def __init__(self, warm: dict[str, str], cold: dict[str, str], count: int, loader: int,
                 batch_all: int) -> None:
        self.warm, self.cold, self.count = warm, cold, count
        self.loader, self.batch_all = loader, batch_all
        self.contenders: list[Contender] = []
        self.closers: list[Callable[[], object]] = []
        self.cold_checks: dict[str, float] = {}

    def add(self, pattern: str, library: str, codec: str, api: str,
            run: Callable[[int], int | tuple[int, float, float]]) -> None:
        self.contenders.append(Contender(" | ".join((pattern, library, codec, api)), run))

    def ours(self, codec: str) -> None:
        path = self.warm[f"ours:{codec}"]
        ds = open_ours(path)
        self.closers.append(ds.close)
        picks = Picks(self.count)
        self.add("single", "ofindex", codec, "ds[i]", singles(ds.__getitem__, picks))
        self.add("batch_all", "ofindex", codec, "ds.__getitems__",
                 batches(ds.__getitems__, Picks(self.count), self.batch_all))
        self.add("batch_loader", "ofindex", codec, "ds.__getitems__",
                 batches(ds.__getitems__, Picks(self.count), self.loader))
        self.add("seq_records", "ofindex", codec, "for record in ds",
                 passes(_record_loop(ds)))
        self.add("seq_all", "ofindex", codec, "ds.iter_batches(1024)",
                 passes(_batch_loop(ds, 1024)))
        cold = self.cold[f"ours:{codec}"]
        files = [cold, sidecar_of(cold)]
        cold_picks = Picks(self.count)
        self.add("cold_batch", "ofindex", codec, "open, ds.__getitems__",
                 cold_passes(files, _cold_ours(cold, lambda d: len(
                     d.__getitems__(cold_picks.take(self.loader))))))
        self.add("cold_seq", "ofindex", codec, "open, ds.iter_batches(1024)",
                 cold_passes(files, _cold_ours(cold, lambda d: _batch_loop(d, 1024)())))
        drop_pages(files)
        self.cold_checks[f"ofindex {codec}"] = max(resident_share(f) for f in files)

    def arrayrecord(self, codec: str) -> None:
        from array_record.python.array_record_data_source import ArrayRecordDataSource
        from array_record.python.array_record_module import ArrayRecordReader

        path = self.warm[f"ar:{codec}:1"]
        source = ArrayRecordDataSource([path])
        random_reader = ArrayRecordReader(path, "readahead_buffer_size:0")
        self.closers += [lambda: source.__exit__(None, None, None), random_reader.close]
        self.add("single", "ArrayRecord", codec, "ArrayRecordDataSource[i]",
                 singles(source.__getitem__, Picks(self.count)))
        self.add("single", "ArrayRecord", codec, "ArrayRecordReader.read([i])",
                 singles(lambda i: random_reader.read([i]), Picks(self.count)))
        for pattern, size in (("batch_all", self.batch_all), ("batch_loader", self.loader)):
            self.add(pattern, "ArrayRecord", codec, "ArrayRecordDataSource.__getitems__",
                     batches(source.__getitems__, Picks(self.count), size))
            self.add(pattern, "ArrayRecord", codec, "ArrayRecordReader.read(indices)",
                     batches(random_reader.read, Picks(self.count), size))
        for group in GROUP_SIZES:
            reader = ArrayRecordReader(self.warm[f"ar:{codec}:{group}"])
            self.closers.append(reader.close)
            self.add("seq_records", "ArrayRecord", codec,
                     f"ArrayRecordReader.read(), group_size {group}",
                     passes(_reader_loop(reader, self.count)))
            self.add("seq_all", "ArrayRecord", codec,
                     f"ArrayRecordReader.read_all(), group_size {group}",
                     passes(lambda r=reader: len(r.read_all())))
            cold = self.cold[f"ar:{codec}:{group}"]
            self.add("cold_seq", "ArrayRecord", codec,
                     f"ArrayRecordReader(...).read_all(), group_size {group}",
                     cold_passes([cold], _cold_ar_reader(cold)))
            drop_pages([cold])
            self.cold_checks[f"ArrayRecord {codec} group_size {group}"] = resident_share(cold)
        cold, cold_picks = self.cold[f"ar:{codec}:1"], Picks(self.count)
        self.add("cold_batch", "ArrayRecord", codec, "ArrayRecordDataSource(...).__getitems__",
                 cold_passes([cold], _cold_ar_source(cold, lambda s: len(
                     s.__getitems__(cold_picks.take(self.loader))))))

    def close(self) -> None:
        for close in self.closers:
            close()


def check_same(paths: dict[str, str], records: list[bytes]) -> None:
    """Every file holds the records, in order, and a random batch reads the same from each."""
    from array_record.python.array_record_module import ArrayRecordReader

    probe = Picks(len(records)).take(64)
    want = [records[i] for i in probe]
    for key, path in paths.items():
        if key.startswith("ours:"):
            with open_ours(path) as ds:
                assert ds.__getitems__(probe) == want and list(ds) == records, path
        else:
            reader = ArrayRecordReader(path)
            try:
                assert reader.read_all() == records, path
                assert reader.read(probe) == want, path
            finally:
                reader.close()


# -- results ---------------------------------------------------------------------------------
def _parts(name: str) -> dict[str, str]:
    pattern, library, codec, api = name.split(" | ")
    return {"pattern": pattern, "library": library, "codec": codec, "api": api}


def _best(rates: dict[str, list[float]], names: list[str]) -> list[float]:
    """Per round, the fastest of ``names``."""
    return [max(rates[n][k] for n in names) for k in range(len(rates[names[0]]))]


def summarize(rates: dict[str, list[float]], cpu_rates: dict[str, list[float]]
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows per contender, and per access pattern the comparisons: each of our codecs
    against ArrayRecord uncompressed and against its fastest compressed codec (each taken as
    the fastest of its APIs and group sizes in the round)."""
    rows = []
    for name, values in rates.items():
        cpu = [x for x in cpu_rates[name] if x == x]  # not NaN
        rows.append({"name": name, **_parts(name), "records_per_s": spread(values, 0),
                     "records_per_cpu_s": round(statistics.median(cpu)) if cpu else None,
                     "runs": [round(x) for x in values]})
    comparisons = []
    for pattern, _ in PATTERNS:
        ar = {codec: [n for n in rates if _parts(n)["pattern"] == pattern
                      and _parts(n)["library"] == "ArrayRecord" and _parts(n)["codec"] == codec]
              for codec in AR_CODECS}
        ar = {codec: names for codec, names in ar.items() if names}
        if not ar:
            continue
        peers = {"uncompressed": _best(rates, ar["uncompressed"]),
                 "compressed": _best(rates, [n for c, names in ar.items()
                                             if c != "uncompressed" for n in names])}
        fastest = {codec: max(names, key=lambda n: statistics.median(rates[n]))
                   for codec, names in ar.items()}
        for codec in OUR_CODECS:
            ours = [n for n in rates if _parts(n)["pattern"] == pattern
                    and _parts(n)["library"] == "ofindex" and _parts(n)["codec"] == codec]
            for which, best in peers.items():
                comparisons.append({
                    "pattern": pattern, "ours": ours[0], "codec": codec, "against": which,
                    "ratio": spread([a / b for a, b in zip(rates[ours[0]], best, strict=True)]),
                    "arrayrecord_fastest": {c: _parts(n)["api"] for c, n in fastest.items()}})
    return rows, comparisons


def file_sizes(paths: dict[str, str], records: list[bytes]) -> dict[str, Any]:
    """Each file's size as a share of the records' bytes (ArrayRecord's compression table);
    ours counts the data file and its index."""
    raw = sum(len(r) for r in records)
    sizes = {}
    for key, path in paths.items():
        size = os.path.getsize(path)
        if key.startswith("ours:"):
            size += os.path.getsize(sidecar_of(path))
        sizes[key] = {"bytes": size, "share": round(size / raw, 4)}
    return sizes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "ofindex-bench"))
    p.add_argument("--records", type=int, default=65_536, help="as ArrayRecord's doc")
    p.add_argument("--words", type=int, default=200, help="lorem words a record, as its doc")
    p.add_argument("--loader-batch", type=int, default=256, help="records a loader's batch")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians)")
    p.add_argument("--round-seconds", type=float, default=0.2,
                   help="about how long each contender runs per round")
    p.add_argument("--out", default="bench-results/arrayrecord.json")
    a = parse_args(p, argv, records=2000, words=20, rounds=1, round_seconds=0.01)
    load_before = machine_load()
    records = lorem_records(a.records, a.words)
    root = os.path.join(a.root, f"arrayrecord-{a.records}-{a.words}")
    warm = write_files(os.path.join(root, "warm"), records)
    cold = copy_files(os.path.join(root, "warm"), os.path.join(root, "cold"))
    check_same(warm, records)
    check_same(cold, records)
    read_all(list(warm.values()) + [sidecar_of(p) for k, p in warm.items()
                                    if k.startswith("ours:")])
    bench = Bench(warm, cold, a.records, a.loader_batch, a.records)
    try:
        for codec in OUR_CODECS:
            bench.ours(codec)
        for codec in AR_CODECS:
            bench.arrayrecord(codec)
        rates, cpu_rates = interleaved(bench.contenders, a.rounds, a.round_seconds)
    finally:
        bench.close()
    rows, comparisons = summarize(rates, cpu_rates)
    load_after = machine_load()
    for row in rows:
        r = row["records_per_s"]
        print(f"{row['name']:<110s} {r['median']:>12,.0f}/s ({r['min']:,.0f}-{r['max']:,.0f})")
    for c in comparisons:
        r = c["ratio"]
        print(f"{c['pattern']:<13s} ofindex {c['codec']:<13s} vs ArrayRecord {c['against']:<13s}"
              f" {r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})")
    print(f"machine load: before {load_before}, after {load_after}")
    write_json({"config": {
        "records": a.records, "words": a.words,
        "mean_record_bytes": round(sum(len(r) for r in records) / len(records), 1),
        "loader_batch": a.loader_batch, "rounds": a.rounds, "round_seconds": a.round_seconds,
        "arrayrecord_codecs": AR_CODECS, "group_sizes": list(GROUP_SIZES),
        "our_codecs": list(OUR_CODECS), "patterns": dict(PATTERNS),
        "cold_resident_share_after_drop": bench.cold_checks,
        "inflater": _inflater(), "load_before": load_before, "load_after": load_after},
        "sizes": file_sizes(warm, records), "rows": rows, "comparisons": comparisons}, a.out)
    return 0


def _inflater() -> str:
    from ofindex.deflate import fast_inflate

    return "isal" if fast_inflate.ISAL is not None else "zlib"


if __name__ == "__main__":
    raise SystemExit(main())
