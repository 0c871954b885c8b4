"""Worker processes reuse their shared-memory blocks (``ofindex.integrations._shared_ring``)
only once nothing refers to them: not in the worker, not in the main process (where an array
received counts itself back when its last view dies). Sent through a multiprocessing queue an
array on a block is a reference to it (the block's descriptor travels only until the receiver
mapped it); any other pickler copies the data. Batches that are kept are never overwritten,
and what arrives equals what the main process decodes itself."""

from __future__ import annotations

import gc
import multiprocessing
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest

from ofindex.integrations import _shared_ring as ring_mod
from ofindex.integrations._shared_ring import SharedArray, SharedRing, attach, ring_arrays
from tests.kit.helpers import memfd

memfd(ring_mod.AVAILABLE)


def _header(array):
    return array._block.header


def test_a_block_is_reused_only_once_no_array_of_the_worker_refers_to_it():
    ring = SharedRing(slots=2)
    mem = ring.take(1000)
    first = mem.__array_interface__["data"][0]
    kept = mem[:10].view(np.int16)
    del mem
    other = ring.take(1000)
    assert other.__array_interface__["data"][0] != first  # a view of the first block lives
    del kept, other
    again = ring.take(500)  # both free and as big: the first one
    assert again.__array_interface__["data"][0] == first and ring.fresh == 0
    ring.retire_all()


def test_a_full_ring_gives_fresh_blocks_and_retires_them_once_free():
    ring = SharedRing(slots=1)
    held = [ring.take(100), ring.take(100), ring.take(100)]
    assert ring.blocks == 1 and ring.fresh == 2
    extra = held[1]._block
    held.clear()
    ring.take(100)  # the spent fresh blocks are retired on the next take
    assert extra.fd == -1 and extra.header[2] == 1
    ring.retire_all()


def _round_trip(array):
    """``array`` pickled for a multiprocessing queue and read back."""
    return pickle.loads(bytes(ForkingPickler.dumps(array)))


def test_a_queue_carries_a_reference_and_the_block_comes_back_when_the_last_view_dies():
    ring = SharedRing(slots=1)
    mem = ring.take(800)
    values = mem.view(np.float64)
    values[:] = np.arange(100)
    raw = bytes(ForkingPickler.dumps(values))
    assert len(raw) < 800  # a reference, not the data
    got = pickle.loads(raw)
    assert type(got) is np.ndarray and got.tolist() == list(range(100))
    header = _header(values)
    assert header[0] == 1 and header[1] == 0  # lent out, not back yet
    del mem, values
    view = got[10:20]
    del got
    gc.collect()
    assert ring.take(800).__array_interface__["data"][0] != view.__array_interface__["data"][0]
    del view
    gc.collect()
    assert header[1] == 1  # counted back: the block is free again
    again = ring.take(800)
    assert again.view(np.float64).tolist() == list(range(100))  # the same block
    ring.retire_all()


def test_other_picklers_and_copies_carry_the_data():
    ring = SharedRing(slots=1)
    values = ring.take(80).view(np.int64)
    values[:] = np.arange(10)
    plain = pickle.loads(pickle.dumps(values))
    assert type(plain) is np.ndarray and plain.tolist() == list(range(10))
    copy = values.copy()  # keeps the type, but not the block's memory
    assert type(copy) is SharedArray
    got = _round_trip(copy)
    assert got.tolist() == list(range(10)) and _header(values)[0] == 0
    strided = _round_trip(values[::2])  # not contiguous: the data
    assert strided.tolist() == [0, 2, 4, 6, 8] and _header(values)[0] == 0
    assert type(values + 1) is np.ndarray  # results of operations are ordinary arrays
    ring.retire_all()


def test_a_reference_without_its_mapping_says_so():
    with pytest.raises(RuntimeError, match="not mapped in process"):
        attach("no-such-block", 4096, None, 0, (4,), np.dtype(np.int64))


def test_ring_arrays_lay_out_every_output_on_one_block():
    shapes = {"x": ((3, 5), np.dtype(np.float32)), "y": ((3,), np.dtype(np.int64))}
    arrays = ring_arrays(shapes)
    assert arrays["x"].shape == (3, 5) and arrays["y"].dtype == np.int64
    assert arrays["x"]._block is arrays["y"]._block
    assert arrays["y"].__array_interface__["data"][0] % 64 == 0


def _worker_sends(queue, done):
    ring = SharedRing(slots=2)
    for k in range(6):
        out = ring.take(4096).view(np.int64)
        out[:] = k
        queue.put(out)
        del out
    done.wait(30)
    ring.retire_all()


def test_another_process_receives_views_that_stay_intact_while_kept():
    ctx = multiprocessing.get_context("spawn")
    queue, done = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_worker_sends, args=(queue, done))
    proc.start()
    try:
        got = [queue.get(timeout=60) for _ in range(6)]
        assert [a.tolist() == [k] * 512 for k, a in enumerate(got)] == [True] * 6
    finally:
        done.set()
        proc.join(60)
    assert proc.exitcode == 0
    # the worker retired its blocks on exit; what the main process kept is intact
    assert [int(a[0]) for a in got] == list(range(6))
    # (only this worker's blocks: workers of earlier tests that a loader killed outright
    # retired nothing, and theirs stay mapped until this process exits, as documented)
    idents = {e for e in ring_mod._MAPPINGS._entries if e.startswith(f"{proc.pid}-")}
    assert idents
    del got
    gc.collect()
    ring_mod._MAPPINGS.sweep()
    assert not set(ring_mod._MAPPINGS._entries) & idents  # retired and given back: unmapped
