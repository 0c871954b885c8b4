"""Limits and crashes on the read side (issue 43): ``close()`` while other threads read,
descriptors bounded by the process's limit whatever the number of shards, a data file
rewritten in place under a memory map."""

from __future__ import annotations

import os
import sys
import threading

import numpy as np
import pytest

import ofindex


def _record(k: int, i: int) -> bytes:
    """Record ``i`` of shard ``k``: its numbers, then a byte pattern of its own (a record read
    through another descriptor, or at another offset, cannot pass for it)."""
    return b"%03d:%05d:" % (k, i) + bytes([(7 * k + i) % 251]) * (40 + (i * 37) % 900)


@pytest.fixture(scope="module", params=[None, "gzip"], ids=["plain", "gzip"])
def shards(request, tmp_path_factory):
    """Eight shards of 300 records of 50-950 bytes (plain or gzip), and their records."""
    directory = tmp_path_factory.mktemp(f"close-{request.param}") / "data"
    records = []
    with ofindex.ShardedWriter(directory, shard_records=300, compression=request.param) as w:
        for k in range(8):
            for i in range(300):
                records.append(_record(k, i))
                w.write(records[-1])
    return str(directory), records


def _reads(ds: ofindex.Dataset, records: list[bytes], seed: int, rounds: int,
           problems: list[str]) -> None:
    """Read through every path, ``rounds`` times, recording what went wrong."""
    rng = np.random.default_rng(seed)
    n = len(records)
    for r in range(rounds):
        way = (seed + r) % 5
        try:
            if way == 0:
                i = int(rng.integers(n))
                got, want = [ds[i]], [records[i]]
            elif way == 1:
                a = int(rng.integers(n - 40))
                got, want = ds[a : a + 40], records[a : a + 40]
            elif way == 2:
                picks = rng.integers(0, n, 32).tolist()
                got, want = ds.__getitems__(picks), [records[i] for i in picks]
            elif way == 3:
                a = int(rng.integers(n - 60))
                got, want = list(ds.iter_records(a, a + 60)), records[a : a + 60]
            else:
                a = int(rng.integers(n - 60))
                got = [x for b in ds.iter_batches(16, a, a + 60) for x in b]
                want = records[a : a + 60]
            if got != want:
                problems.append(f"way {way}: wrong records")
        except Exception as exc:  # every failure is one: close() must never show
            problems.append(f"way {way}: {type(exc).__name__}: {str(exc)[:200]}")


@pytest.mark.parametrize("mapped", [False, True], ids=["pread", "mmap"])
def test_close_while_other_threads_read(shards, impl, mapped, tmp_path):
    """``ds.close()`` again and again while four threads read through every path (with
    ``mmap=False`` or maps) and a fifth opens and closes other files (which then get the descriptor
    numbers close() freed): every read completes with the right records. Reads that took a
    descriptor, let go of it, then used its number gave EBADF, RangeReadError, corruption
    errors, and records of whatever file had just reused it."""
    root, records = shards
    decoy = tmp_path / "decoy"
    decoy.write_bytes(bytes(range(256)) * 4096)
    ds = ofindex.open(root, mmap=mapped)
    problems: list[str] = []
    done = threading.Event()

    def closer() -> None:
        while not done.is_set():
            ds.close()

    def reuser() -> None:
        while not done.is_set():
            for fd in [os.open(decoy, os.O_RDONLY) for _ in range(8)]:
                os.close(fd)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: between a descriptor's use and reuse
    try:
        others = [threading.Thread(target=closer), threading.Thread(target=reuser)]
        readers = [threading.Thread(target=_reads, args=(ds, records, seed, 300, problems))
                   for seed in range(4)]
        for t in others + readers:
            t.start()
        for t in readers:
            t.join()
    finally:
        done.set()
        for t in others:
            t.join()
        sys.setswitchinterval(old)
        ds.close()
    assert problems == []
