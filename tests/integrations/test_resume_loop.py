"""A run's own loop resumes a loaded state: ``for epoch in range(N): loader.set_epoch(epoch)``
after ``load_state_dict`` of a state saved in epoch E at position P gives empty passes for the
epochs before E (finished before the checkpoint), resumes E at P, and starts later epochs
whole. Held for every tracker: the record samplers under a DataLoader's batch_size, the
BatchSampler over each order, the mixture, GrainBatches and GrainMixture; the README's loop
end to end with DataLoader worker processes. Interrupted and resumed, every record of every
epoch is trained exactly once (record ids compared, not counts)."""

from __future__ import annotations

import collections
import json
import os

import pytest

from tests.kit.helpers import need

torch = need("torch")
grain = need("grain")
from torch.utils.data import DataLoader  # noqa: E402

import ofindex  # noqa: E402
from ofindex.decode import BatchDecoder, FixedLen  # noqa: E402
from ofindex.errors import StateError  # noqa: E402
from ofindex.integrations.grain import GrainBatches  # noqa: E402
from ofindex.integrations.grain_mixing import GrainMixture  # noqa: E402
from ofindex.integrations.torch import (  # noqa: E402
    BatchSampler,
    BlockShuffleSampler,
    GlobalShuffleSampler,
    MixtureBatches,
    MixtureSampler,
    ResumableLoader,
    SequentialSampler,
    TensorBatches,
    TorchDataset,
)
from ofindex.proto import example_pb2  # noqa: E402
from tests.kit import paths  # noqa: E402
from tests.kit.helpers import write_shards  # noqa: E402

SHARDS = [37, 60, 63]  # 160 records: 10 batches of 16
BATCH = 16
MIX = [23, 41]  # records of the two mixed sources


def example(s, i):
    ex = example_pb2.Example()
    ex.features.feature["label"].int64_list.value.append(s * 1000 + i)
    return ex.SerializeToString()


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return ofindex.open(write_shards(tmp_path_factory.mktemp("loop"), SHARDS, example))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("loopmix")
    return [ofindex.open(os.path.join(write_shards(root / f"s{s}", [n],
                                                   lambda _, i, s=s: b"s%d-%d" % (s, i),
                                                   "m-{}.tfrecord"), "m-*.tfrecord"))
            for s, n in enumerate(MIX)]


def every_label():
    return sorted(s * 1000 + i for s, n in enumerate(SHARDS) for i in range(n))


class Preempted(Exception):
    """The job is killed here (after the checkpoint of the batch it just trained)."""


def readme_run(ds, workers, trained, stop_after=None, checkpoint=None):
    """The README's loop, verbatim but for the bookkeeping: ``trained[epoch]`` gets the
    labels of every batch the loop trains on, and the job dies after ``stop_after`` batches
    (its last checkpoint then holds them all). Returns the last checkpoint (JSON text)."""
    spec = {"label": FixedLen((), "int64")}
    data = TensorBatches(ds, BatchDecoder(spec))
    sampler = BatchSampler(GlobalShuffleSampler(data, seed=0), BATCH, drop_last=True)
    loader = ResumableLoader(DataLoader(data, sampler=sampler, batch_size=None,
                                        num_workers=workers))
    if checkpoint is not None:
        loader.load_state_dict(json.loads(checkpoint))
    saved, steps = checkpoint, 0
    try:
        for epoch in range(2):
            loader.set_epoch(epoch)
            for step, batch in enumerate(loader):  # noqa: B007 (the README's loop)
                trained[epoch] += batch["label"].tolist()   # the training step
                state = loader.state_dict()
                saved, steps = json.dumps(state), steps + 1
                if steps == stop_after:
                    raise Preempted
    except Preempted:
        pass
    return saved


def test_the_readme_shows_this_loop():
    with open(os.path.join(paths.ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert ("# on restart, here: loader.load_state_dict(state)\n"
            "for epoch in range(2):\n"
            "    loader.set_epoch(epoch)\n"
            "    for step, batch in enumerate(loader):\n"
            "        state = loader.state_dict()") in readme


@pytest.mark.parametrize("stop", [14, 3], ids=["mid-epoch-1", "mid-epoch-0"])
def test_the_readme_loop_resumes_with_workers_each_record_once_per_epoch(ds, stop):
    trained = {0: [], 1: []}
    checkpoint = readme_run(ds, 2, trained, stop_after=stop)
    state = json.loads(checkpoint)
    assert (state["epoch"], state["position"]) == divmod(stop * BATCH, len(ds))
    readme_run(ds, 2, trained, checkpoint=checkpoint)   # the same loop, resumed
    assert sorted(trained[0]) == every_label()
    assert sorted(trained[1]) == every_label()
    assert trained[0] != trained[1]  # two epochs, two orders
    uninterrupted = {0: [], 1: []}
    readme_run(ds, 0, uninterrupted)
    assert trained == uninterrupted


# -- every tracker, in process ------------------------------------------------------------------


def _records_loader(ds, make_sampler, drop=False):
    data = TorchDataset(ds)
    return ResumableLoader(DataLoader(data, sampler=make_sampler(data), batch_size=7,
                                      drop_last=drop, collate_fn=list))


def _batch_loader(ds, make_sampler):
    data = TorchDataset(ds)
    sampler = BatchSampler(make_sampler(data), 9)
    return ResumableLoader(DataLoader(data, batch_sampler=sampler, collate_fn=list))


def _mixture_loader(mixed, sampled):
    sampler = MixtureSampler(mixed, [0.6, 0.4], 5, seed=4, sampled=sampled)
    return ResumableLoader(DataLoader(MixtureBatches(mixed), sampler=sampler,
                                      batch_size=None))


TORCH_KINDS = {
    "records-global": lambda ds, mixed: _records_loader(
        ds, lambda d: GlobalShuffleSampler(d, seed=2)),
    "records-block-drop": lambda ds, mixed: _records_loader(
        ds, lambda d: BlockShuffleSampler(d, block_size=4, window=3, seed=2), drop=True),
    "batches-sequential": lambda ds, mixed: _batch_loader(ds, lambda d: SequentialSampler(d)),
    "batches-global": lambda ds, mixed: _batch_loader(
        ds, lambda d: GlobalShuffleSampler(d, seed=2)),
    "batches-block": lambda ds, mixed: _batch_loader(
        ds, lambda d: BlockShuffleSampler(d, block_size=4, window=3, seed=2)),
    "mixture": lambda ds, mixed: _mixture_loader(mixed, False),
    "mixture-sampled": lambda ds, mixed: _mixture_loader(mixed, True),
}


def _units(batch):
    """What a batch trains on: its records (a mixture batch: the batch itself, in order)."""
    if isinstance(batch, dict):
        return [tuple(batch["records"])]
    return list(batch)


def torch_run(make, epochs, trained, stop_after=None, checkpoint=None):
    loader = make()
    if checkpoint is not None:
        loader.load_state_dict(json.loads(checkpoint))
    saved, steps = checkpoint, 0
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            trained[epoch] += _units(batch)
            saved, steps = json.dumps(loader.state_dict()), steps + 1
            if steps == stop_after:
                return saved
    return saved


def grain_run(make, epochs, trained, stop_after=None, checkpoint=None):
    """Grain's per-epoch loop: select the epoch, read it to its end."""
    batches = make()
    if checkpoint is not None:
        batches.load_state_dict(json.loads(checkpoint))
    saved, steps = checkpoint, 0
    for epoch in range(epochs):
        batches.set_epoch(epoch)
        loader = ResumableLoader(batches.until_epoch(epoch + 1).to_iter_dataset(),
                                 tracker=batches)
        for batch in loader:
            trained[epoch] += _units(batch)
            saved, steps = json.dumps(loader.state_dict()), steps + 1
            if steps == stop_after:
                return saved
    return saved


GRAIN_KINDS = {
    "grain": lambda ds, mixed: GrainBatches(ds, 9, seed=6),
    "grain-drop": lambda ds, mixed: GrainBatches(ds, 9, seed=6, drop_remainder=True),
    "grain-mixture": lambda ds, mixed: GrainMixture(
        mixed, MixtureSampler(mixed, [0.6, 0.4], 5, seed=4)),
}
EPOCHS = 3
STOPS = [1, 6, 18, 19, 24, 37]  # batches before the job dies: epoch 0, its end, 1, 2


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("kind", [*TORCH_KINDS, *GRAIN_KINDS])
def test_the_same_loop_resumes_every_tracker(ds, mixed, kind, stop):
    run = grain_run if kind in GRAIN_KINDS else torch_run
    factory = {**TORCH_KINDS, **GRAIN_KINDS}[kind]

    def make():
        return factory(ds, mixed)

    whole = {e: [] for e in range(EPOCHS)}
    run(make, EPOCHS, whole)
    trained = {e: [] for e in range(EPOCHS)}
    checkpoint = run(make, EPOCHS, trained, stop_after=stop)
    run(make, EPOCHS, trained, checkpoint=checkpoint)
    if kind.startswith(("records", "batches", "grain")) and "mixture" not in kind:
        labels = sorted(ds[i] for i in range(len(ds)))
        for epoch in range(EPOCHS):
            counts = collections.Counter(trained[epoch])
            assert max(counts.values()) == 1, f"epoch {epoch}: a record trained twice"
            if "drop" not in kind:
                assert sorted(counts) == labels, f"epoch {epoch}: records missing"
    assert trained == whole  # each epoch: the uninterrupted epoch, once


# -- the rule itself ----------------------------------------------------------------------------


def _record_samplers():
    return [GlobalShuffleSampler(50, seed=1), SequentialSampler(50),
            BlockShuffleSampler(shard_sizes=[20, 30], block_size=4, window=2, seed=1)]


@pytest.mark.parametrize("index", range(3))
def test_a_loaded_state_holds_until_its_epoch(index):
    first = _record_samplers()[index]
    first.set_epoch(2)
    it = iter(first)
    head = [next(it) for _ in range(13)]
    state = json.loads(json.dumps(first.state_dict()))
    assert (state["epoch"], state["position"]) == (2, 13)
    whole = {e: list(_set(_record_samplers()[index], e)) for e in range(4)}

    sampler = _record_samplers()[index]
    sampler.load_state_dict(state)
    for epoch in (0, 1):  # finished before the checkpoint
        sampler.set_epoch(epoch)
        assert len(sampler) == 0 and list(sampler) == []
        assert where(sampler.state_dict()) == (2, 13)   # the state stands
    sampler.set_epoch(2)
    sampler.set_epoch(2)  # twice (the loader's and the sampler's): still the loaded state
    assert len(sampler) == 37 and where(sampler.state_dict()) == (2, 13)
    assert head + list(sampler) == whole[2]
    sampler.set_epoch(2)  # used up: the whole epoch again
    assert list(sampler) == whole[2]

    later = _record_samplers()[index]
    later.load_state_dict(state)
    later.set_epoch(3)  # a later epoch: from its start, and the state is used up
    assert list(later) == whole[3]
    later.set_epoch(2)
    assert list(later) == whole[2]

    plain = _record_samplers()[index]
    plain.load_state_dict(state)  # no set_epoch: the saved epoch resumes
    assert head + list(plain) == whole[2]


def where(state):
    return state["epoch"], state["position"]


def _set(sampler, epoch):
    sampler.set_epoch(epoch)
    return sampler


def test_a_loaded_mixture_state_holds_until_its_epoch():
    def make():
        return MixtureSampler([13, 29], [0.5, 0.5], 4, seed=3)

    first = _set(make(), 1)
    it = iter(first)
    head = [next(it) for _ in range(4)]
    state = json.loads(json.dumps(first.state_dict()))
    whole = {e: list(_set(make(), e)) for e in range(3)}
    sampler = make()
    sampler.load_state_dict(state)
    sampler.set_epoch(0)
    assert len(sampler) == 0 and list(sampler) == [] and sampler.state_dict() == state
    assert where(state) == (1, 4)
    sampler.set_epoch(1)
    assert head + list(sampler) == whole[1]
    sampler.set_epoch(2)
    assert list(sampler) == whole[2]


def test_a_held_pass_keeps_the_loaders_state():
    sampler = BatchSampler(GlobalShuffleSampler(100, seed=5), 10)
    loader = ResumableLoader(sampler, tracker=sampler)
    loader.set_epoch(1)
    for step, _ in enumerate(loader):
        if step == 2:
            break
    state = loader.state_dict()
    assert (state["epoch"], state["position"]) == (1, 30)
    resumed_sampler = BatchSampler(GlobalShuffleSampler(100, seed=5), 10)
    resumed = ResumableLoader(resumed_sampler, tracker=resumed_sampler)
    resumed.load_state_dict(state)
    resumed.set_epoch(0)
    assert where(resumed.state_dict()) == (1, 30)
    assert list(resumed) == [] and where(resumed.state_dict()) == (1, 30)  # after the pass
    resumed.set_epoch(1)
    assert len(resumed) == 7


@pytest.mark.parametrize("make", [lambda: GlobalShuffleSampler(20, seed=1),
                                  lambda: BatchSampler(SequentialSampler(20), 3)])
def test_the_state_after_set_epoch_is_the_new_epochs_start(make):
    sampler = make()
    list(sampler)  # epoch 0 to its end
    assert (sampler.state_dict()["epoch"], sampler.state_dict()["position"]) == (0, 20)
    sampler.set_epoch(1)  # nothing of epoch 1 was trained yet
    assert (sampler.state_dict()["epoch"], sampler.state_dict()["position"]) == (1, 0)


@pytest.mark.parametrize("bad", [1.5, True, -1, "1", None, 2**40])
def test_set_epoch_takes_whole_epochs(bad, ds, mixed):
    targets = [GlobalShuffleSampler(10), BatchSampler(SequentialSampler(10), 2),
               MixtureSampler([5, 5], [1, 1], 2), GrainBatches(ds, 4),
               GrainMixture(mixed, MixtureSampler(mixed, [1, 1], 2))]
    loader = ResumableLoader([], tracker=targets[1])
    for target in [*targets, loader]:
        with pytest.raises(StateError, match=r"set_epoch.*whole number"):
            target.set_epoch(bad)
