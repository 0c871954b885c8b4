"""The data cache's planner (ofindex.cache.block_plan): which blocks of their files a batch
of byte ranges lies in, and the ranges copied back out of them, with no I/O."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ofindex.cache import block_plan
from ofindex.cache.block_plan import DIRECT, SPANNING, FileBlocks
from ofindex.storage import FileStamp

CONTENT = {name: np.random.default_rng(k).bytes(size)
           for k, (name, size) in enumerate([("a", 10_000), ("b", 4_097), ("c", 1)])}


def _files(step: int, unknown: frozenset[str] = frozenset()):
    def file_blocks(name: str):
        if name in unknown:
            return None
        return FileBlocks(f"s3://bucket/{name}", name, FileStamp(len(CONTENT[name]), "etag:1"),
                          step)
    return file_blocks


def _expected(names, files, begin, end) -> bytes:
    return b"".join(CONTENT[names[f]][s:e] for f, s, e in zip(files, begin, end, strict=True))


def _read(names, files, begin, end, step, unknown=frozenset()):
    """Plan, then assemble from the blocks cut out of CONTENT (and direct ranges as asked)."""
    plan = block_plan.plan(names, np.asarray(files, dtype=np.int64),
                             np.asarray(begin, dtype=np.int64), np.asarray(end, dtype=np.int64),
                             _files(step, unknown))
    views = [memoryview(CONTENT[b.path][b.start : b.end]) for b in plan.blocks]
    direct = {k: CONTENT[names[files[k]]][begin[k] : end[k]] for k in plan.direct}
    return plan, bytes(plan.assemble(np.asarray(begin, dtype=np.int64), views, direct))


def test_ranges_inside_across_and_outside_blocks():
    names = ["a", "b", "a", "c"]
    files = [0, 1, 0, 0, 2, 1, 3]  # "a" twice in names: the same blocks
    begin = [10, 4090, 4096, 9000, 0, 4096, 0]
    end = [20, 4097, 8192, 10_000, 1, 4097, 1]
    plan, got = _read(names, files, begin, end, 4096)
    assert got == _expected(names, files, begin, end)
    assert plan.slot[1] == SPANNING and len(plan.spanning[1]) == 2  # b: blocks 0 and 1
    assert plan.slot[0] >= 0 and plan.offset[0] == 10
    blocks = {(b.path, b.start, b.end) for b in plan.blocks}
    assert ("a", 8192, 10_000) in blocks  # the last block of a file is shorter
    assert ("c", 0, 1) in blocks and len(blocks) == len(plan.blocks)  # each block once
    assert plan.direct == []


def test_unknown_files_and_ranges_the_file_does_not_hold_are_fetched_as_they_are():
    names = ["a", "b"]
    plan, got = _read(names, [0, 1, 0], [5, 0, 9_990], [9, 3, 10_000], 4096,
                      unknown=frozenset({"b"}))
    assert plan.direct == [1]
    assert got == CONTENT["a"][5:9] + CONTENT["b"][0:3] + CONTENT["a"][9_990:10_000]
    plan = block_plan.plan(["a"], np.zeros(3, np.int64), np.array([-1, 50, 9_000]),
                             np.array([4, 40, 10_001]), _files(4096))
    assert plan.direct == [0, 1, 2] and plan.blocks == []  # negative, reversed, past the end


def test_keys_differ_by_file_block_and_block_size():
    one = _files(4096)("a")
    assert one.block(0).key != one.block(1).key != _files(8192)("a").block(0).key
    assert one.block(1) is one.block(1)  # worked out once
    with pytest.raises(AssertionError):
        block_plan._block([None], 0, 0)


@given(st.lists(st.tuples(st.sampled_from([0, 1, 2]), st.integers(0, 10_000),
                          st.integers(0, 5_000)), max_size=40),
       st.sampled_from([1, 7, 512, 4096, 1 << 20]))
def test_any_ranges_come_back_as_the_bytes_of_the_files(ranges, step):
    names = ["a", "b", "c"]
    files, begin, end = [], [], []
    for f, start, length in ranges:
        size = len(CONTENT[names[f]])
        start = min(start, size - 1)
        files.append(f)
        begin.append(start)
        end.append(min(size, start + max(1, length)))
    _, got = _read(names, files, begin, end, step)
    assert got == _expected(names, files, begin, end)


def test_empty_batch():
    plan = block_plan.plan([], np.zeros(0, np.int64), np.zeros(0, np.int64),
                             np.zeros(0, np.int64), _files(4096))
    assert plan.blocks == [] and plan.direct == [] and plan.assemble(
        np.zeros(0, np.int64), [], {}) == bytearray()
    assert DIRECT != SPANNING
