"""PyTorch DataLoader integration on a real multi-shard ofindex dataset."""

import inspect
import os

import pytest

from tests.kit.helpers import need

torch = need("torch")
from torch.utils.data import DataLoader  # noqa: E402

import ofindex  # noqa: E402
import ofindex.integrations.torch as ofindex_torch  # noqa: E402
from ofindex.integrations.torch import (  # noqa: E402
    BatchSampler,
    BlockShuffleSampler,
    GlobalShuffleSampler,
    SequentialSampler,
    ShuffledIterableDataset,
    TorchDataset,
)
from tests.kit.helpers import write_shards  # noqa: E402

SHARDS = [23, 40, 17]


def record(s, i):
    return f"shard{s}/rec{i}".encode()


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    d = write_shards(tmp_path_factory.mktemp("shards"), SHARDS, record, "part-{:02d}.tfrecord")
    data = ofindex.open(os.path.join(d, "part-*.tfrecord"))
    assert len(data) == sum(SHARDS)
    return data


ALL = sorted(record(s, i) for s, c in enumerate(SHARDS) for i in range(c))


class CountingSource:
    def __init__(self, ds):
        self.ds, self.batched, self.single = ds, 0, 0

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        self.single += 1
        return self.ds[i]

    def __getitems__(self, idx):
        self.batched += 1
        return self.ds.__getitems__(idx)


def test_getitems_batched_fetch_in_process(ds):
    src = CountingSource(ds)
    data = TorchDataset(src, transform=bytes.upper)
    loader = DataLoader(data, batch_size=16, sampler=GlobalShuffleSampler(data, seed=1),
                        collate_fn=list)
    got = [r for b in loader for r in b]
    assert sorted(got) == sorted(r.upper() for r in ALL)
    assert src.batched == 5 and src.single == 0


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
@pytest.mark.slow
def test_dataloader_workers(ds, ctx):
    data = TorchDataset(ds)
    sampler = GlobalShuffleSampler(data, seed=3)
    loader = DataLoader(data, batch_sampler=BatchSampler(sampler, 8), num_workers=2,
                        multiprocessing_context=ctx, collate_fn=list)
    epochs = []
    for e in range(2):
        sampler.set_epoch(e)
        got = [r for b in loader for r in b]
        assert sorted(got) == ALL
        epochs.append(got)
    assert epochs[0] != epochs[1]
    # order is the sampler's order, independent of workers
    sampler.set_epoch(1)
    assert epochs[1] == ds.__getitems__(list(sampler))


def test_iterable_dataset_worker_split(ds):
    sampler = BlockShuffleSampler.for_dataset(ds, block_size=4, window=2, seed=7, drop_last=False)
    it = ShuffledIterableDataset(ds, sampler, fetch_size=5)
    loader = DataLoader(it, batch_size=None, num_workers=2, multiprocessing_context="fork")
    got = list(loader)
    assert sorted(got) == ALL  # 80 records split over 2 workers: no padding


def test_stateful_dataloader_resume(ds):
    sdl = need("torchdata.stateful_dataloader")
    data = TorchDataset(ds)

    def make():
        s = GlobalShuffleSampler(data, seed=5)
        s.set_epoch(2)
        return sdl.StatefulDataLoader(data, batch_size=6, sampler=s, num_workers=2,
                                      multiprocessing_context="fork", collate_fn=list)

    ref = list(make())
    loader = make()
    it = iter(loader)
    head = [next(it) for _ in range(5)]
    state = loader.state_dict()
    del it
    resumed = make()
    resumed.load_state_dict(state)
    tail = list(resumed)
    assert head + tail == ref
    assert sorted(r for b in head + tail for r in b) == ALL


def test_samplers_take_the_torch_dataset_and_keep_its_shards(ds):
    data = TorchDataset(ds)
    block = BlockShuffleSampler(data, block_size=4, window=2, seed=1)
    assert block.shard_sizes == SHARDS  # through TorchDataset.cumulative_counts
    assert list(block) == list(BlockShuffleSampler(ds, block_size=4, window=2, seed=1))
    assert BlockShuffleSampler(TorchDataset(list(ALL))).shard_sizes == [len(ALL)]  # len only
    for sampler in (block, GlobalShuffleSampler(data, seed=1), SequentialSampler(data)):
        assert isinstance(sampler, torch.utils.data.Sampler)
        loader = DataLoader(data, batch_size=7, sampler=sampler, collate_fn=list)
        assert sorted(r for b in loader for r in b) == ALL
    with pytest.raises(TypeError, match=r"ofindex Dataset.*len\(\)"):
        GlobalShuffleSampler("part-*.tfrecord")
    with pytest.raises(ValueError, match="fetch_size"):
        ShuffledIterableDataset(ds, block, fetch_size=0)


def test_public_api_has_docstrings_and_runtime_annotations():
    for name in ofindex_torch.__all__:
        cls = getattr(ofindex_torch, name)
        assert inspect.getdoc(cls), name
        members = [cls, *(m for a, m in vars(cls).items()
                          if callable(m) and (not a.startswith("_") or a in (
                              "__getitem__", "__getitems__", "__iter__", "__len__")))]
        for obj in members:
            assert inspect.getdoc(obj), (name, obj)
            sig = inspect.signature(obj)
            hints = [p.annotation for p in sig.parameters.values()] + [sig.return_annotation]
            assert not any(isinstance(h, str) for h in hints), (name, sig)
