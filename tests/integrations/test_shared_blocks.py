"""DataLoader workers decode batches into their ring of shared-memory blocks
(``ofindex.integrations._shared_ring``) and hand tensors on it to the main process as
references (``_shared_blocks``): a block is reused only once nothing refers to it, in the
worker or in the main process. Batches that are kept are never overwritten."""

from __future__ import annotations

import gc
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest

from tests.kit.helpers import need

torch = need("torch")
from torch.utils.data import DataLoader  # noqa: E402

import ofindex  # noqa: E402
from ofindex.decode import BatchDecoder, FixedLen  # noqa: E402
from ofindex.integrations._shared_blocks import RING, LentTensor, lend, shared_bytes  # noqa: E402
from ofindex.integrations._shared_ring import AVAILABLE, SharedRing  # noqa: E402
from ofindex.integrations.torch import BatchSampler, GlobalShuffleSampler, TensorBatches  # noqa: E402
from ofindex.proto import example_pb2  # noqa: E402
from tests.kit.helpers import memfd, write_shards  # noqa: E402


def sent(tensor):
    """``tensor`` pickled as a DataLoader worker sends it and read back."""
    return pickle.loads(bytes(ForkingPickler.dumps(tensor)))


def test_a_lent_tensor_travels_as_a_reference_and_comes_back_when_its_storage_dies():
    memfd(AVAILABLE)
    ring = SharedRing(slots=1)
    mem = ring.take(128)
    header = mem._block.header
    lent = lend(mem, np.dtype(np.int64), (16,))
    assert type(lent) is LentTensor
    lent.copy_(torch.arange(16))
    got = sent(lent)
    assert type(got) is torch.Tensor and got.tolist() == list(range(16))
    assert header[0] == 1 and header[1] == 0
    del mem, lent
    view = got[3:]
    del got
    gc.collect()
    assert header[1] == 0  # a view keeps the storage alive
    del view
    gc.collect()
    assert header[1] == 1
    again = ring.take(128)
    assert again.view(np.int64).tolist() == list(range(16))  # the same block, reused
    ring.retire_all()


def test_lent_tensors_pickle_their_data_elsewhere_and_operations_are_plain():
    memfd(AVAILABLE)
    mem = SharedRing(slots=1).take(40)
    lent = lend(mem, np.dtype(np.int64), (5,))
    lent.copy_(torch.arange(5))
    assert pickle.loads(pickle.dumps(lent)).tolist() == [0, 1, 2, 3, 4]  # e.g. torch.save
    assert mem._block.header[0] == 0
    assert type(lent * 2) is torch.Tensor


@pytest.mark.parametrize("ring", [True, False])
def test_shared_bytes_and_lend_give_tensors_of_the_layout(monkeypatch, ring):
    if not ring:  # no memfd_create (not Linux): fresh shared memory that torch shares
        from ofindex.integrations import _shared_blocks

        monkeypatch.setattr(_shared_blocks, "AVAILABLE", False)
    else:
        memfd(AVAILABLE)
    mem = shared_bytes(64)
    t = lend(mem, np.dtype(np.float32), (4, 4))
    t.copy_(torch.arange(16, dtype=torch.float32).view(4, 4))
    assert t.shape == (4, 4) and t.dtype == torch.float32
    assert type(t) is (LentTensor if ring else torch.Tensor)
    assert sent(t).tolist() == torch.arange(16, dtype=torch.float32).view(4, 4).tolist()


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
        got["blocks"][:] = [RING.blocks, RING.fresh]
        return got


@pytest.mark.parametrize(("keep", "context"), [(True, "fork"), (False, "fork"),
                                              (False, "spawn")])
def test_workers_reuse_blocks_and_kept_batches_stay_intact(tmp_path, keep, context):
    ds = ofindex.open(write_shards(tmp_path, [300, 200], example))
    data = TensorBatches(ds, RingWatcher(SPEC))
    sampler = BatchSampler(GlobalShuffleSampler(data, seed=1), 10)
    loader = DataLoader(data, sampler=sampler, batch_size=None, num_workers=2,
                        multiprocessing_context=context)
    kept, stats = [], []
    for batch, idx in zip(loader, list(sampler), strict=True):
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
