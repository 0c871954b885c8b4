"""DataLoader workers reuse their shared-memory blocks (``ofindex.integrations._shared_blocks``)
only once nothing refers to them: not in the worker, not in the main process (where a tensor
lent out counts itself back when its storage dies). Batches that are kept are never
overwritten."""

from __future__ import annotations

import gc
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers import write_shards  # noqa: E402
from torch.multiprocessing.reductions import shared_cache  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import ofindex  # noqa: E402
from ofindex.decode import BatchDecoder, FixedLen  # noqa: E402
from ofindex.integrations._shared_blocks import BLOCKS, SharedBlocks, lend  # noqa: E402
from ofindex.integrations.torch import BatchSampler, GlobalShuffleSampler, TensorBatches  # noqa: E402
from ofindex.proto import example_pb2  # noqa: E402


def sent(tensor):
    """``tensor`` pickled as a DataLoader worker sends it, and unpickled as the main process
    receives it (mapping the shared memory anew, as another process does: torch's cache of
    this process's own shared storages is cleared first)."""
    raw = bytes(ForkingPickler.dumps(tensor))
    shared_cache.clear()
    return pickle.loads(raw)


def test_a_block_is_reused_only_once_no_tensor_of_the_worker_refers_to_it():
    ring = SharedBlocks(slots=2)
    mem, counter = ring.take(1000)
    first = mem.data_ptr()
    kept = lend(mem[:10], counter)
    del mem
    other, _ = ring.take(1000)
    assert other.data_ptr() != first  # a view of the first block is still alive
    del kept, other
    again, _ = ring.take(500)  # both free and as big: the first
    assert again.data_ptr() == first and ring.fresh == 0


def test_a_block_lent_to_the_main_process_comes_back_when_its_last_view_dies():
    ring = SharedBlocks(slots=1)
    mem, counter = ring.take(64)
    mem.copy_(torch.arange(64, dtype=torch.uint8))
    lent = lend(mem[:16].view(torch.int64), counter)
    got = sent(lent)
    assert counter.item() == 1 and got.is_shared()
    assert got.tolist() == mem[:16].view(torch.int64).tolist()
    del mem, lent
    view = got[1:]
    del got
    gc.collect()
    busy, none = ring.take(64)
    assert none is None and ring.fresh == 1  # lent out: a fresh block, not this one
    del busy
    del view
    gc.collect()
    assert counter.item() == 0
    again, c2 = ring.take(64)
    assert c2 is not None and again.tolist() == list(range(64))  # the same block, reused


def test_tensors_not_from_the_ring_pickle_as_plain_tensors():
    t = lend(torch.arange(5), None)
    assert type(t) is torch.Tensor and sent(t).tolist() == [0, 1, 2, 3, 4]
    mem, counter = SharedBlocks(slots=1).take(40)
    derived = lend(mem[:40].view(torch.int64), counter) * 2  # an operation: a plain tensor
    assert type(derived) is torch.Tensor and counter.item() == 0


SPEC = {"x": FixedLen((64,), "float32"), "label": FixedLen((), "int64"),
        "blocks": FixedLen((2,), "int64")}


def example(s, i):
    ex = example_pb2.Example()
    f = ex.features.feature
    f["x"].float_list.value.extend(np.full(64, s * 1000 + i, np.float32).tolist())
    f["label"].int64_list.value.append(s * 1000 + i)
    f["blocks"].int64_list.value.extend([0, 0])
    return ex.SerializeToString()


class RingWatcher(BatchDecoder):
    """Decodes as ``BatchDecoder`` and records, in every row of ``blocks``, how many blocks
    the worker's ring holds and how many batches found none free."""

    def __call__(self, records, out=None):
        got = super().__call__(records, out)
        got["blocks"][:] = [len(BLOCKS._blocks), BLOCKS.fresh]
        return got


@pytest.mark.parametrize("keep", [True, False])
def test_workers_reuse_blocks_and_kept_batches_stay_intact(tmp_path, keep):
    ds = ofindex.open(write_shards(tmp_path, [300, 200], example))
    data = TensorBatches(ds, RingWatcher(SPEC))
    sampler = BatchSampler(GlobalShuffleSampler(data, seed=1), 10)
    loader = DataLoader(data, sampler=sampler, batch_size=None, num_workers=2,
                        multiprocessing_context="fork")
    kept, stats = [], []
    for batch, idx in zip(loader, list(sampler), strict=True):
        assert batch["label"].is_shared()
        want = [(i // 300) * 1000 + i % 300 if i < 300 else 1000 + i - 300 for i in idx]
        assert batch["label"].tolist() == want
        stats.append(batch["blocks"][0].tolist())
        if keep:
            kept.append((batch, want))
        del batch
    for batch, want in kept:  # nothing kept was overwritten by a later batch
        assert batch["label"].tolist() == want
        assert (batch["x"][:, 0].to(torch.int64)).tolist() == want
    blocks = max(b for b, _ in stats)
    assert blocks <= 8 and len(stats) == 50
    if keep:  # every block stays lent out: later batches get fresh blocks
        assert stats[-1][1] > 0
    else:  # 25 batches per worker on a few blocks
        assert stats[-1][1] == 0 and blocks <= 4
