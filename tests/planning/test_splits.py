"""The split planner (issue 50): a dataset cut into partitions of splits ``(file, first_record,
last_record, byte_range)``, balanced by records or bytes, cut inside files, at seek points in
GZIP/ZLIB files; every record in exactly one partition, read back equal to ``ds[i]``."""

from __future__ import annotations

import itertools
import os
import zlib

import numpy as np
import pytest

import ofindex
from ofindex.formats.seekpoints import SeekKind
from ofindex.planning.splits import (
    FileLayout,
    FileOffsets,
    partition_dataset,
    plan_dataset,
    plan_splits,
)


def _never() -> FileOffsets:
    raise AssertionError("the planner loaded the offsets of a file no cut falls in")


def _uncompressed(url: str, sizes: list[int]) -> FileLayout:
    """A file of records of ``sizes`` bytes (16 of framing each), its offsets in memory."""
    framed = np.array(sizes, dtype=np.int64) + 16
    starts = np.concatenate([[0], np.cumsum(framed)[:-1]])
    end = int(framed.sum())
    return FileLayout(url, len(sizes), end, lambda: FileOffsets(starts, end), compressed=False)


def _covered(plan, total: int) -> list[int]:
    """Every record number the plan's splits hold, in order, checked against the bounds."""
    got = []
    for lo_hi, part in zip(plan.bounds(), plan.partitions, strict=True):
        lo = lo_hi[0]
        for split in part:
            assert split.start == lo and split.records >= 1
            got.extend(range(split.start, split.stop))
            lo = split.stop
        assert lo == lo_hi[1]
    assert plan.records == total
    return got


def test_one_file_gives_as_many_partitions_as_asked():
    layout = _uncompressed("f0", [100] * 1000)
    plan = plan_splits([layout], 7)
    assert len(plan) == 7
    assert _covered(plan, 1000) == list(range(1000))
    counts = [p[0].records for p in plan]
    assert max(counts) - min(counts) <= 1  # 1000 records in 7: 142 or 143
    # byte ranges are the records' own bytes: record r starts at 116 * r
    for part in plan:
        (split,) = part
        assert split.byte_range == (116 * split.first_record, 116 * (split.last_record + 1))


def test_whole_files_need_no_index():
    files = [FileLayout(f"f{k}", 10, 1000, _never, compressed=None) for k in range(8)]
    plan = plan_splits(files, 4)
    assert [[s.url for s in p] for p in plan] == [["f0", "f1"], ["f2", "f3"], ["f4", "f5"],
                                                  ["f6", "f7"]]
    assert all(s.byte_range == (0, 1000) for p in plan for s in p)
    assert plan.divisions() == [0, 20, 40, 60, 80]


def test_bytes_balance_cuts_the_big_file_finer():
    big = _uncompressed("big", [20_000] * 200)
    small = _uncompressed("small", [10] * 20_000)
    by_records = plan_splits([big, small], 4, "records")
    by_bytes = plan_splits([big, small], 4, "bytes", record_cost=64)
    sizes = np.array([20_000] * 200 + [10] * 20_000) + 16 + 64
    for plan in (by_records, by_bytes):
        assert _covered(plan, 20_200) == list(range(20_200))
    costs = [int(sizes[a:b].sum()) for a, b in by_bytes.bounds()]
    assert max(costs) < 1.1 * min(costs)
    assert by_bytes.bounds()[1][0] < 200 and by_bytes.bounds()[2][0] < 200
    counts = [b - a for a, b in by_records.bounds()]
    assert counts == [5050] * 4


def test_min_records_and_empty_files():
    files = [_uncompressed("a", [1] * 3), FileLayout("empty", 0, 0, _never, compressed=False),
             _uncompressed("b", [1] * 3)]
    plan = plan_splits(files, 6, min_records=2)
    assert _covered(plan, 6) == list(range(6))
    assert all(b - a >= 2 for a, b in plan.bounds())
    assert all(s.url != "empty" for p in plan for s in p)
    assert len(plan_splits([FileLayout("e", 0, 0, _never)], 3)) == 0
    for bad in ({"count": 0}, {"count": 2, "min_records": 0}, {"count": 2, "balance": "rows"},
                {"count": 2, "record_cost": -1.0}):
        with pytest.raises(ValueError):
            plan_splits(files, **bad)


def test_compressed_files_are_cut_at_seek_points():
    # 100 records of 100 bytes; seek points at uncompressed 0, 2900, 6000 (records 25 and
    # 52 are the first to start at or after them), compressed at 0, 1000 and 2000
    starts = np.arange(100, dtype=np.int64) * 116
    offsets = FileOffsets(starts, 11_600, np.array([0, 2900, 6000]), np.array([0, 999, 2000]),
                          np.array([0, 1000, 2000]))
    layout = FileLayout("gz", 100, 3000, lambda: offsets, compressed=True)
    plan = plan_splits([layout], 3)
    assert [p[0].first_record for p in plan] == [0, 25, 52]
    # record 24 ends at 2900 (a point: compressed 1000); record 51 ends at 6032, past the
    # point at 6000, so its split reads to the end of the file
    assert [p[0].byte_range for p in plan] == [(0, 1000), (999, 3000), (2000, 3000)]
    # more partitions than seek points: as many as there are places
    assert [p[0].first_record for p in plan_splits([layout], 50)] == [0, 25, 52]
    by_bytes = plan_splits([layout], 3, "bytes")
    assert [p[0].first_record for p in by_bytes] == [0, 25, 52]


def _write(path: str, n: int, compression: str | None = None) -> list[bytes]:
    rng = np.random.default_rng(5)
    records = [rng.integers(0, 4, size=int(rng.integers(50, 400)), dtype=np.uint8).tobytes()
               for _ in range(n)]
    with ofindex.Writer(path, compression=compression, seek_spacing=4096) as writer:
        writer.write_many(records)
    return records


@pytest.mark.parametrize("balance", ["records", "bytes"])
@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_real_dataset_partitions_read_back(tmp_path, balance, compression):
    d = tmp_path / "ds"
    d.mkdir()
    expected = []
    for k, n in enumerate((3000, 5, 0, 1200)):
        expected += _write(str(d / f"part-{k}"), n, compression)
    if balance == "bytes":  # the builder's seek points (primed), not the writer's (aligned)
        ofindex.build_index(str(d), manifest=True, progress=False, seek_spacing=4096)
    with ofindex.open(str(d)) as ds:
        plan = plan_dataset(ds, 9, balance)
        assert _covered(plan, len(ds)) == list(range(len(ds)))
        assert len(plan) >= 5  # the big file is cut inside
        for part in plan:
            subset, lo, hi = partition_dataset(ds, part)
            got = [bytes(r) for r in subset.iter_records(lo, hi)]
            assert got == expected[part[0].start:part[-1].stop]
            subset.close()
        _check_byte_ranges(ds, plan, str(d), compression)


def _check_byte_ranges(ds, plan, directory: str, compression: str | None) -> None:
    """Each split's bytes hold its records: the records themselves (plain files), or a
    stream that inflates from a seek point to past the split's last record (compressed
    files: inflated here when the point starts on a byte)."""
    for split in itertools.chain.from_iterable(plan):
        shard = ds._table.shards[split.file]
        sidecar = shard.sidecar
        with open(os.path.join(directory, os.path.basename(split.url)), "rb") as f:
            data = f.read()
        a, b = split.byte_range
        starts = sidecar.offsets
        first = int(starts[split.first_record])
        last_end = (int(starts[split.last_record + 1]) if split.last_record + 1 < len(sidecar)
                    else sidecar.indexed_end)
        if compression is None:
            assert (a, b) == (first, last_end)
            continue
        seeks = sidecar.seeks
        k = seeks.point_before(first)
        assert a == seeks.compressed_start(k)
        if split.first_record:  # cut at the first record after a seek point
            assert int(starts[split.first_record - 1]) < int(seeks.out[k]) <= first
        assert b == seeks.compressed_end(last_end)
        kind = SeekKind(int(seeks.kind[k]))
        if kind is SeekKind.PRIMED:  # starts inside a byte: Python's zlib cannot prime it
            continue
        inflater = zlib.decompressobj({SeekKind.GZIP_MEMBER: 31, SeekKind.ZLIB_STREAM: 15,
                                       SeekKind.ALIGNED: -15}[kind])
        out = inflater.decompress(data[a:b])
        need = last_end - int(seeks.out[k])
        assert len(out) >= need  # the range holds everything up to the split's last record
