"""Grain: GrainBatches and GrainMixture checkpoints through ResumableLoader are global, so a
run stopped on W hosts resumes on W' hosts (and another number of Grain worker processes)
and every record of the epoch is read exactly once."""

import collections
import os

import pytest

from tests.kit.helpers import need

grain = need("grain")
import ofindex  # noqa: E402
from ofindex.integrations.grain import GrainBatches  # noqa: E402
from ofindex.integrations.grain_mixing import GrainMixture  # noqa: E402
from ofindex.shuffle import MixtureSampler, ResumableLoader  # noqa: E402
from tests.kit.helpers import write_shards  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*repeated this epoch as padding:UserWarning")


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    d = write_shards(tmp_path_factory.mktemp("gr"), [50, 33], lambda s, i: b"%d-%d" % (s, i),
                     "g-{}.tfrecord")
    return ofindex.open(os.path.join(d, "g-*.tfrecord"))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("grmix")
    return [ofindex.open(os.path.join(write_shards(root / f"s{s}", [n],
                                                   lambda _, i, s=s: b"s%d-%d" % (s, i),
                                                   "m-{}.tfrecord"), "m-*.tfrecord"))
            for s, n in enumerate([40, 25])]


def _take(dataset, stop, state=None, workers=0):
    """A loader over ``dataset`` (after ``state``) through the end of epoch 0; the batches
    the loop received (``stop`` of them, or all) and the state after them."""
    if state is not None:
        dataset.load_state_dict(state)
    pipeline = dataset.until_epoch(1).to_iter_dataset()
    if workers:
        pipeline = pipeline.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    loader = ResumableLoader(pipeline, tracker=dataset)
    got = []
    for batch in loader:
        got.append(batch)
        if len(got) == stop:
            break
    return got, loader.state_dict()


@pytest.mark.parametrize(("world", "world2", "stop", "drop"), [
    (2, 3, 2, False), (3, 1, 1, True), (1, 4, 5, False), (4, 2, 3, True)])
def test_grain_batches_resume_on_other_hosts(ds, world, world2, stop, drop):
    seen, states = [], []
    for rank in range(world):
        batches = GrainBatches(ds, 4, seed=5, num_replicas=world, rank=rank, drop_remainder=drop)
        got, state = _take(batches, stop)
        seen += [r for b in got for r in b]
        states.append(state)
    assert all(s == states[0] for s in states)
    for rank in range(world2):
        batches = GrainBatches(ds, 4, seed=5, num_replicas=world2, rank=rank,
                               drop_remainder=drop)
        got, _ = _take(batches, None, states[0])
        seen += [r for b in got for r in b]
    counts = collections.Counter(seen)
    every = {ds[i] for i in range(len(ds))}
    assert set(counts) <= every
    if drop:
        assert max(counts.values()) == 1 and len(every) - len(counts) < world2 * 5
    else:
        assert set(counts) == every and sum(counts.values()) - len(every) < world2


def test_grain_batches_state_runs_into_the_next_epoch(ds):
    batches = GrainBatches(ds, 10, seed=1)
    assert len(batches) == 9
    loader = ResumableLoader(batches.until_epoch(2).to_iter_dataset(), tracker=batches)
    got = [b for _, b in zip(range(12), loader, strict=False)]
    state = loader.state_dict()
    assert (state["epoch"], state["position"]) == (1, 30)
    resumed = GrainBatches(ds, 10, seed=1)
    resumed.load_state_dict(state)
    rest = list(resumed.until_epoch(2).to_iter_dataset())
    assert len(rest) == 6
    second_epoch = [r for b in got[9:] + rest for r in b]
    assert sorted(second_epoch) == sorted(ds[i] for i in range(len(ds)))
    assert got[9:] + rest == list(GrainBatches(ds, 10, seed=1).repeat(2))[9:]


def test_grain_mixture_resume_on_other_hosts(mixed):
    def make(world, rank, weights=(0.6, 0.4)):
        sampler = MixtureSampler(mixed, list(weights), 5, seed=2, num_replicas=world,
                                 rank=rank, drop_last=True)
        return GrainMixture(mixed, sampler)

    whole = [tuple(b["records"]) for b in make(1, 0).until_epoch(1)]
    assert len(whole) == 13  # 65 records // 5 per batch
    seen, states = [], []
    for rank in range(3):
        got, state = _take(make(3, rank), 2)
        seen += [tuple(b["records"]) for b in got]
        states.append(state)
    assert states[0] == states[1] == states[2] and states[0]["position"] == 6
    for rank in range(2):
        got, _ = _take(make(2, rank), None, states[0])
        for b in got:
            assert b["source"].tolist() == [0, 0, 0, 1, 1]
        seen += [tuple(b["records"]) for b in got]
    assert sorted(seen) == sorted(whole[:12])  # 7 batches left on 2 hosts: the last dropped


def test_grain_with_worker_processes_resumes_elsewhere(ds):
    first = GrainBatches(ds, 4, seed=9)
    head, state = _take(first, 7, workers=2)
    assert state["position"] == 28
    rest, _ = _take(GrainBatches(ds, 4, seed=9), None, state, workers=1)
    assert sorted(r for b in head + rest for r in b) == sorted(ds[i] for i in range(len(ds)))
