"""Lists of records made ahead of the one handed out (ofindex/read/sequential/mapped_batches.py,
with a core to spare: filled on the pool's threads, or their CRCs checked by a compiled Checker)
give what the lists made in the iterating thread give: the same records, the same error at
the same batch, the batches before it handed out first (and the pure-Python loops the same
records and error); a forked child goes on with an iteration its parent started.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ofindex
from ofindex import _accel
from ofindex.read.sequential import mapped_batches
from ofindex.read.sequential.mapped_batches import Filling
from tests.kit.corruption import corrupt, spelled_anywhere, write_parts
from tests.kit.helpers import empty_block_pool, implementation


def _batches(ds, size, how):
    """The batches of an iteration up to its error: [("ok", batch) ..., (error, message)];
    ``how``: lists, RecordBatch buffers (as lists) or records one at a time."""
    out = []
    it = (ds.iter_batches(size) if how == "lists" else
          (b.to_list() for b in ds.iter_batches(size, as_buffer=True)) if how == "buffers" else
          ([r] for r in ds.iter_records()))  # one record at a time
    try:
        out.extend(("ok", batch) for batch in it)
    except Exception as exc:
        out.append((type(exc).__name__, str(exc)))
    return out


@settings(max_examples=60, deadline=None)
@given(
    shards=st.lists(st.lists(st.binary(max_size=300), max_size=8), min_size=1, max_size=3),
    fmt=st.sampled_from(["tfrecord", "ofrecord"]),
    verify=st.booleans(),
    how=st.sampled_from(["none", "data byte", "shifted offset", "checksum"]),
    where=st.integers(0, 10_000),
    size=st.sampled_from([1, 2, 3, 5, 64]),
    kind=st.sampled_from(["lists", "buffers", "records"]),
    split=st.booleans(),
)
def test_lists_filled_ahead_are_the_lists_made_inline(tmp_path_factory, shards, fmt, verify,
                                                      how, where, size, kind, split):
    def run(impl, filling):
        paths = write_parts(str(tmp_path_factory.mktemp("ahead")), shards, fmt, True)
        corrupt(paths, shards, how, where)
        with implementation(impl):
            was = mapped_batches._filling
            if filling is not None:
                mapped_batches._filling = lambda src, size, as_buffer: (
                    Filling.INLINE if as_buffer and filling is Filling.FILLED_AHEAD
                    else filling)
            try:
                ds = ofindex.open(paths, verify=verify)
                got = _batches(ds, size, kind)
            finally:
                mapped_batches._filling = was
        here = os.path.dirname(paths[0])
        return [(k, re.sub(r"\d{7,}", "N", spelled_anywhere(v, here)) if isinstance(v, str)
                 else v)
                for k, v in got]

    limit = mapped_batches._SPLIT_BYTES
    mapped_batches._SPLIT_BYTES = 1 if split else limit  # every list on two threads
    try:
        ahead = run("compiled", Filling.FILLED_AHEAD)
        inline = run("compiled", Filling.INLINE)
        pure = run("pure-python", None)
        if fmt == "tfrecord" and verify:  # (the only lists a Checker is for)
            assert run("compiled", Filling.CHECKED_AHEAD) == inline
    finally:
        mapped_batches._SPLIT_BYTES = limit
    assert ahead == inline
    # the pure-Python loops stream each shard by blocks: a bad record may end the iteration
    # at an earlier batch; the same error, and no record they give that the others do not
    ends = [got[-1] if got else ("ok", []) for got in (ahead, pure)]
    assert ends[0][0] == ends[1][0] == "ok" or ends[0] == ends[1]
    handed = [r for kind, batch in ahead if kind == "ok" for r in batch]
    assert [r for kind, batch in pure if kind == "ok" for r in batch] == handed[
        :sum(len(b) for kind, b in pure if kind == "ok")]


def _go_on(it, queue):
    queue.put([len(b) for b in it])


@pytest.mark.parametrize("filling", [Filling.FILLED_AHEAD, Filling.CHECKED_AHEAD])
def test_a_forked_child_goes_on_with_an_iteration_started_before(tmp_path, monkeypatch,
                                                                 filling):
    monkeypatch.setattr(mapped_batches, "_filling", lambda src, size, as_buffer: filling)
    records = [os.urandom(n % 700) for n in range(3000)]
    p = str(tmp_path / "a.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many(records)
    ds = ofindex.open(p)
    it = ds.iter_batches(100)
    assert next(it) == records[:100]  # the next list's fill (or checks) under way
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_go_on, args=(it, queue))
    child.start()
    sizes = queue.get(timeout=60)
    child.join(60)
    assert sizes == [100] * 29
    assert [r for b in it for r in b] == records[100:]  # and the parent too


@pytest.mark.parametrize("filling", [Filling.FILLED_AHEAD, Filling.CHECKED_AHEAD])
@pytest.mark.parametrize("as_list", [True, False])
def test_an_iteration_dropped_half_way_leaves_nothing_behind(tmp_path, monkeypatch, as_list,
                                                             filling):
    monkeypatch.setattr(mapped_batches, "_filling", lambda src, size, as_buffer: filling)
    records = [os.urandom(500) for _ in range(5000)]
    p = str(tmp_path / "a.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many(records)
    ds = ofindex.open(p)
    for _ in range(20):
        it = ds.iter_batches(64) if as_list else iter(ds)
        next(it)
        del it  # a fill still under way finishes on its own
    assert list(ds) == records


@pytest.mark.parametrize("fmt", ["tfrecord", "ofrecord"])
def test_how_lists_are_made_is_chosen_by_their_bytes_the_format_and_a_spare_core(
        tmp_path, monkeypatch, fmt):
    shards = [[os.urandom(1000) for _ in range(50)]]
    ds = ofindex.open(write_parts(str(tmp_path), shards, fmt, True))
    compiled = _accel.native
    src = dataclasses.replace(ds._source(), native=compiled)  # as the mapped access makes it
    small = Filling.CHECKED_AHEAD if fmt == "tfrecord" else Filling.INLINE
    assert mapped_batches._filling(src, 64, False) is small
    big = mapped_batches.FILL_AHEAD_BYTES // 1000 + 50  # (the framing counts a few bytes)
    assert mapped_batches._filling(src, big, False) is Filling.FILLED_AHEAD
    assert mapped_batches._filling(src, big, True) is small  # a RecordBatch: never filled
    os.mkdir(tmp_path / "u")
    unverified = ofindex.open(write_parts(str(tmp_path / "u"), shards, fmt, True), verify=False)
    assert mapped_batches._filling(dataclasses.replace(unverified._source(), native=compiled),
                                   64, False) is Filling.INLINE
    monkeypatch.setattr(mapped_batches, "executor", lambda: None)  # one core
    assert mapped_batches._filling(src, big, False) is Filling.INLINE
    assert mapped_batches._filling(src, 64, False) is Filling.INLINE


def _owner(array):
    """What holds an array's memory (past the numpy views on it)."""
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array


def test_buffers_of_a_few_hundred_kb_reuse_released_memory_and_kept_ones_stay_whole(tmp_path):
    from ofindex import _accel

    records = [os.urandom(200 + n % 50) for n in range(20_000)]
    p = str(tmp_path / "a.tfrecord")
    with ofindex.Writer(p) as w:
        w.write_many(records)
    ds = ofindex.open(p)
    size = 2048  # ~460 KB a buffer: above BUFFER_POOLED_BYTES, far below POOLED_BYTES
    assert mapped_batches.BUFFER_POOLED_BYTES < size * 200 < _accel.POOLED_BYTES
    with empty_block_pool() as native:
        kept = list(ds.iter_batches(size, as_buffer=True))  # every one held: none reused
        assert all(isinstance(_owner(b.data), native.Block) for b in kept)  # pooled memory
        assert [r for b in kept for r in b.to_list()] == records
        del kept
        for b in ds.iter_batches(size, as_buffer=True):  # each dropped before the next
            assert b.to_list() == records[b.first : b.first + len(b)]
        assert native.pool()[0] > 0  # released buffers wait in the pool for the next one
