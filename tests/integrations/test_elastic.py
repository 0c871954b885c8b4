"""Exact and elastic resume with real DataLoaders: stop at some batch on W ranks x K worker
processes, save ResumableLoader's state, resume on W' ranks x K' workers, finish the epoch;
every record of the epoch is seen exactly once (counted), for the global shuffle, the block
shuffle and the mixture, with drop_last both ways. Ranks are separate DataLoaders (each with
its own worker processes) run one after the other, as synchronous data-parallel ranks would
consume the same number of batches.

The default tier runs every cell of the grid W in 1..4 x K in 0..3 (forked workers) for
each order and drop_last both ways, resumed on another W' x K' at a batch that differs by
cell, and a few resizes with spawned workers; the same grid resumed on drawn W' x K' at
drawn batches is the ``fuzz`` tier. A property test checks any sequence of save / resize /
resume in-process."""

from __future__ import annotations

import collections
import os

import pytest

from tests.kit.helpers import need

torch = need("torch")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import ofindex  # noqa: E402
from ofindex.integrations.torch import (  # noqa: E402
    BatchSampler,
    BlockShuffleSampler,
    GlobalShuffleSampler,
    MixtureBatches,
    MixtureSampler,
    ResumableLoader,
    TorchDataset,
)
from ofindex.shuffle import BatchSampler as PlainBatchSampler  # noqa: E402
from ofindex.shuffle import GlobalShuffleOrder  # noqa: E402
from tests.kit.fuzzkit import budget, explore  # noqa: E402
from tests.kit.helpers import write_shards  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*repeated this epoch as padding:UserWarning")

SIZES = [61, 40, 36]  # 137 records: splits unevenly over 2, 3 and 4 ranks
BATCH = 5
MIX = ([70, 30], [0.6, 0.4])  # records of the two mixed sources, weights


def _records(s, i):
    return b"%d/%d" % (s, i)


def _mix_record(s, i):
    return b"m%d/%d" % (s, i)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("elastic")
    main = write_shards(root / "main", SIZES, _records, "p-{}.tfrecord")
    mixed = [write_shards(root / f"mix{s}", [n], lambda _, i, s=s: _mix_record(s, i),
                          "m-{}.tfrecord") for s, n in enumerate(MIX[0])]
    return (ofindex.open(os.path.join(main, "p-*.tfrecord")),
            [ofindex.open(os.path.join(d, "m-*.tfrecord")) for d in mixed])


def _loader(sources, kind, world, rank, workers, drop, ctx):
    ds, mixed = sources
    extra = {"num_workers": workers}
    if workers:
        extra.update(multiprocessing_context=ctx, prefetch_factor=3, persistent_workers=True)
    if kind == "mixture":
        sampler = MixtureSampler(mixed, MIX[1], BATCH, seed=3, num_replicas=world, rank=rank,
                                 drop_last=drop, epoch_size=sum(MIX[0]))
        return ResumableLoader(DataLoader(MixtureBatches(mixed), sampler=sampler,
                                          batch_size=None, **extra))
    data = TorchDataset(ds)
    if kind == "global":
        records = GlobalShuffleSampler(data, seed=3, num_replicas=world, rank=rank,
                                       drop_last=drop)
    else:
        records = BlockShuffleSampler(data, block_size=4, window=3, seed=3, num_replicas=world,
                                      rank=rank, drop_last=drop)
    return ResumableLoader(DataLoader(data, batch_sampler=BatchSampler(records, BATCH, drop),
                                      collate_fn=list, **extra))


def _batch_records(kind, batch):
    return batch["records"] if kind == "mixture" else batch


def run(sources, kind, drop, first, second, stop, ctx="fork", epoch=1):
    """Stop after ``stop`` batches per rank on ``first = (W, K)``, resume on
    ``second = (W', K')``; the records seen, per batch, in both runs."""
    seen, states = [], []
    for rank in range(first[0]):
        loader = _loader(sources, kind, first[0], rank, first[1], drop, ctx)
        loader.set_epoch(epoch)
        for k, batch in enumerate(loader):
            seen.append(_batch_records(kind, batch))
            if k + 1 == stop:
                break
        states.append(loader.state_dict())
        del loader
    assert all(s == states[0] for s in states), "every rank saves the same global state"
    for rank in range(second[0]):
        loader = _loader(sources, kind, second[0], rank, second[1], drop, ctx)
        loader.load_state_dict(states[0])
        loader.set_epoch(epoch)
        expected = len(loader)  # exact before the epoch starts
        got = [_batch_records(kind, b) for b in loader]
        assert len(got) == expected
        seen += got
    return seen


def check_once(sources, kind, drop, seen, world):
    """Every record (every mixture batch) of the epoch exactly once; padding repeats at most
    ``world - 1`` of them, drop_last leaves out only the end of the epoch."""
    ds, mixed = sources
    if kind == "mixture":
        whole = whole_mixture_epoch(mixed)
        counts = collections.Counter(tuple(b) for b in seen)
        assert set(counts) <= set(whole)
        missing = [b for b in whole if b not in counts]
        repeats = sum(c - 1 for c in counts.values())
    else:
        whole = [ds[i] for i in range(len(ds))]
        counts = collections.Counter(r for b in seen for r in b)
        assert set(counts) <= set(whole)
        missing = [r for r in whole if r not in counts]
        repeats = sum(c - 1 for c in counts.values())
    if drop:
        assert repeats == 0
        assert len(missing) < world * (BATCH + 1)
        if kind == "global":  # the records left out are the last ones of the epoch's order
            order = GlobalShuffleOrder(len(ds), 3, 1)
            tail = {ds[int(i)] for i in order(range(len(ds) - len(missing), len(ds)))}
            assert set(missing) == tail
    else:
        assert missing == []
        assert repeats < world


def whole_mixture_epoch(mixed):
    """Epoch 1 of the mixture on one rank, in-process: its batches' records."""
    sampler = MixtureSampler(mixed, MIX[1], BATCH, seed=3, epoch_size=sum(MIX[0]))
    sampler.set_epoch(1)
    data = MixtureBatches(mixed)
    return [tuple(data[b]["records"]) for b in sampler]


SCENARIOS = [  # (kind, drop_last, (W, K), (W', K'), stop, context)
    ("global", False, (2, 2), (3, 1), 7, "spawn"),
    ("mixture", True, (3, 1), (2, 2), 3, "spawn"),
    ("global", True, (1, 3), (4, 0), 11, "fork"),
    ("block", False, (4, 1), (1, 2), 4, "fork"),
    ("block", True, (3, 0), (2, 3), 5, "fork"),
    ("mixture", False, (2, 0), (3, 1), 2, "fork"),
    ("mixture", True, (1, 2), (4, 2), 9, "fork"),
    ("global", False, (3, 3), (3, 0), 1, "fork"),
]


@pytest.mark.parametrize(("kind", "drop", "first", "second", "stop", "ctx"), SCENARIOS)
@pytest.mark.slow
def test_resume_on_other_ranks_and_workers(sources, kind, drop, first, second, stop, ctx):
    seen = run(sources, kind, drop, first, second, stop, ctx)
    check_once(sources, kind, drop, seen, max(first[0], second[0]))


#: The whole grid W in 1..4 x K in 0..3 of the runs saved, for each order and drop_last both
#: ways, each resumed on another W' x K' (a fixed rotation) at a batch that differs by cell.
GRID = [(kind, drop, (world, workers), (world % 4 + 1, (workers + 2) % 4),
         1 + (3 * world + 5 * workers + 7 * drop) % 12)
        for kind in ("global", "block", "mixture") for drop in (False, True)
        for world in range(1, 5) for workers in range(4)]


@pytest.mark.parametrize(("kind", "drop", "first", "second", "stop"), GRID)
def test_resume_every_ranks_by_workers_cell(sources, kind, drop, first, second, stop):
    seen = run(sources, kind, drop, first, second, stop, "fork")
    check_once(sources, kind, drop, seen, max(first[0], second[0]))


@explore(30)
@given(kind=st.sampled_from(["global", "block", "mixture"]), drop=st.booleans(),
       world=st.integers(1, 4), workers=st.integers(0, 3), world2=st.integers(1, 4),
       workers2=st.integers(0, 3), stop=st.integers(1, 12))
def test_resume_grid(sources, kind, drop, world, workers, world2, workers2, stop):
    seen = run(sources, kind, drop, (world, workers), (world2, workers2), stop)
    check_once(sources, kind, drop, seen, max(world, world2))


def test_sampler_state_from_a_prefetching_loader_raises_and_the_loader_is_exact(sources):
    ds, _ = sources
    data = TorchDataset(ds)
    sampler = GlobalShuffleSampler(data, seed=0)
    loader = ResumableLoader(DataLoader(data, batch_size=4, sampler=sampler, num_workers=2,
                                        multiprocessing_context="fork", collate_fn=list))
    it = iter(loader)
    head = [next(it) for _ in range(6)]
    with pytest.raises(RuntimeError, match=r"ResumableLoader.*state_dict"):
        sampler.state_dict()  # 2 workers x 2 prefetched batches ahead of the loop
    state = loader.state_dict()
    assert state["position"] == 24 == sum(map(len, head))
    del it
    again = GlobalShuffleSampler(data, seed=0)
    resumed = ResumableLoader(DataLoader(data, batch_size=4, sampler=again, collate_fn=list))
    resumed.load_state_dict(state)
    tail = list(resumed)
    reference = GlobalShuffleSampler(data, seed=0)
    assert [r for b in head + tail for r in b] == [ds[i] for i in reference]
    assert resumed.state_dict()["position"] == len(ds)


def test_sampler_state_is_exact_once_the_loop_has_every_batch(sources):
    ds, _ = sources
    data = TorchDataset(ds)
    sampler = GlobalShuffleSampler(data, seed=0)
    loader = DataLoader(data, batch_sampler=BatchSampler(sampler, 50), num_workers=2,
                        multiprocessing_context="fork", collate_fn=list)
    assert sum(map(len, loader)) == len(ds)
    assert sampler.state_dict()["position"] == len(ds)  # nothing held back: no error
    for batch in DataLoader(data, batch_sampler=BatchSampler(sampler, 50), collate_fn=list):
        assert sampler.state_dict()["position"] == sampler.state_dict()["consumed"]
        del batch
        break


def test_stateful_dataloader_with_other_workers_on_resume(sources):
    sdl = need("torchdata.stateful_dataloader")
    ds, _ = sources
    data = TorchDataset(ds)

    def make(workers):
        sampler = BatchSampler(GlobalShuffleSampler(data, seed=8), 6)
        return ResumableLoader(sdl.StatefulDataLoader(
            data, batch_sampler=sampler, num_workers=workers, collate_fn=list,
            **({"multiprocessing_context": "fork"} if workers else {})))

    first = make(2)
    it = iter(first)
    head = [next(it) for _ in range(5)]
    state = first.state_dict()
    del it
    second = make(1)  # StatefulDataLoader's own state refuses another num_workers
    second.load_state_dict(state)
    tail = list(second)
    assert sorted(r for b in head + tail for r in b) == sorted(ds[i] for i in range(len(ds)))


def test_balanced_ranks_have_exact_lengths(sources):
    for world in (2, 3, 4):
        for drop in (False, True):
            lengths, real = set(), set()
            for rank in range(world):
                loader = _loader(sources, "global", world, rank, 0, drop, "fork")
                lengths.add(len(loader))
                real.add(sum(1 for _ in loader))
            assert lengths == real and len(lengths) == 1, (world, drop)


@budget(60)
@given(steps=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 9)), min_size=1, max_size=5),
       drop=st.booleans(), mixture=st.booleans())
def test_any_sequence_of_save_resize_resume_is_exactly_once(steps, drop, mixture):
    """In-process: each step runs ``W`` ranks for ``b`` batches and saves; the last step
    finishes the epoch. Global-shuffle records (or mixture batches) are seen once."""
    n = 97

    def make(world, rank):
        if mixture:
            return MixtureSampler([13, 50], [0.3, 0.7], 4, seed=1, num_replicas=world,
                                  rank=rank, drop_last=drop, epoch_size=n)
        return PlainBatchSampler(GlobalShuffleSampler(n, seed=1, num_replicas=world, rank=rank,
                                                      drop_last=drop), 4, drop)

    state, seen = None, []
    for k, (world, batches) in enumerate(steps):
        last = k == len(steps) - 1
        states = []
        for rank in range(world):
            tracker = make(world, rank)
            loader = ResumableLoader(_Plain(tracker), tracker)
            if state is not None:
                loader.load_state_dict(state)
            for j, batch in enumerate(loader if last or batches else ()):
                seen.append(tuple(batch))  # a batch the loop received is consumed
                if not last and j + 1 == batches:
                    break
            states.append(loader.state_dict())
        assert all(s == states[0] for s in states)
        state = states[0]
    if mixture:
        whole = [tuple(b) for b in make(1, 0)]
        counts = collections.Counter(seen)
        assert set(counts) <= set(whole)
    else:
        counts = collections.Counter(i for b in seen for i in b)
        assert set(counts) <= set(range(n))
    repeats = sum(c - 1 for c in counts.values())
    total = len(whole) if mixture else n
    widest = max(w for w, _ in steps)  # the run that reaches the epoch's end pads or drops
    if drop:
        assert repeats == 0 and total - len(counts) < widest * 5
    else:
        assert len(counts) == total and repeats < widest


class _Plain:
    """A loader without workers: iterates its sampler anew for each pass."""

    def __init__(self, sampler):
        self.sampler = sampler

    def __iter__(self):
        return iter(self.sampler)


def test_loaders_that_cannot_be_resumed_exactly_are_refused(sources):
    ds, _ = sources
    data = TorchDataset(ds)
    with pytest.raises(TypeError, match="not driven by an ofindex sampler"):
        ResumableLoader(DataLoader(data, batch_size=4))
    with pytest.raises(TypeError, match="in_order=False"):
        ResumableLoader(DataLoader(data, sampler=GlobalShuffleSampler(data), batch_size=4,
                                   num_workers=1, in_order=False))


def test_persistent_workers_across_epochs_then_resume(sources):
    ds, _ = sources
    data = TorchDataset(ds)

    def make(workers):
        sampler = BatchSampler(GlobalShuffleSampler(data, seed=4), 8)
        extra = ({"multiprocessing_context": "fork", "persistent_workers": True,
                  "prefetch_factor": 4} if workers else {})
        return ResumableLoader(DataLoader(data, batch_sampler=sampler, num_workers=workers,
                                          collate_fn=list, **extra))

    loader = make(2)
    epochs = {0: [], 1: []}
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        for step, batch in enumerate(loader):
            epochs[epoch] += batch
            if epoch == 1 and step == 6:
                break
    state = loader.state_dict()
    assert (state["epoch"], state["position"]) == (1, 56)
    resumed = make(3)
    resumed.load_state_dict(state)
    for epoch in range(state["epoch"], 2):
        resumed.set_epoch(epoch)
        for batch in resumed:
            epochs[epoch] += batch
    every = sorted(ds[i] for i in range(len(ds)))
    assert sorted(epochs[0]) == every and sorted(epochs[1]) == every
    assert epochs[0] != epochs[1]
