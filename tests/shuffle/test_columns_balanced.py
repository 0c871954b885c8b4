"""Class-balanced sampling (issue 48, step 3): ``BalancedSampler(ds, by="label")`` draws every
batch in the given class proportions (exactly), each class globally shuffled and read exactly
once per class epoch, the same for a seed; it resumes exactly and elastically, on other
numbers of ranks and DataLoader worker processes (W x K -> W' x K'), and refuses a state of
other classes."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import ofindex
from ofindex.errors import StateError
from ofindex.proto import example_pb2
from ofindex.shuffle import BalancedSampler
from tests.kit.columns_data import cut, write_dataset

pytestmark = pytest.mark.filterwarnings("ignore:.*repeated this epoch as padding:UserWarning")

#: Skewed classes: 7 has 300 records, 8 has 90, 9 has 17 (and 13 records have no label).
COUNTS = {7: 300, 8: 90, 9: 17}


def _record(label, number):
    msg = example_pb2.Example()
    if label is not None:
        msg.features.feature["label"].int64_list.value.append(label)
    msg.features.feature["number"].int64_list.value.append(number)  # every record differs
    return msg.SerializeToString()


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    labels = [label for label, n in COUNTS.items() for _ in range(n)] + [None] * 13
    labels = [labels[i] for i in np.random.default_rng(5).permutation(len(labels))]
    data = write_dataset(str(tmp_path_factory.mktemp("balanced") / "data"),
                         cut([_record(v, i) for i, v in enumerate(labels)],
                             [100, 150, 0, 170]))
    ofindex.build_index(data, columns=["label"])
    return ofindex.open(data), labels


def _label_of(labels):
    return lambda index: labels[index]


def test_every_batch_holds_the_proportions_asked_for(skewed):
    ds, labels = skewed
    uniform = BalancedSampler(ds, by="label", batch_size=9, seed=1)
    assert uniform.classes == [7, 8, 9] and uniform.counts == [3, 3, 3]
    weighted = BalancedSampler(ds, by="label", weights={7: 2, 9: 1}, batch_size=6, seed=1)
    assert weighted.classes == [7, 9] and weighted.counts == [4, 2]
    for sampler, want in ((uniform, {7: 3, 8: 3, 9: 3}), (weighted, {7: 4, 9: 2})):
        batches = list(sampler)
        assert len(batches) == len(sampler) > 0
        for batch in batches:
            assert collections.Counter(labels[i] for i in batch) == want
            assert sampler.class_of(batch).tolist() == sorted(sampler.class_of(batch).tolist())


def test_each_class_is_shuffled_and_read_once_per_class_epoch(skewed):
    ds, labels = skewed
    sampler = BalancedSampler(ds, by="label", batch_size=9, seed=2, epoch_size=9 * 400)
    stream = collections.defaultdict(list)
    for batch in sampler:
        for index in batch:
            stream[labels[index]].append(index)
    for label, n in COUNTS.items():
        members = [i for i, v in enumerate(labels) if v == label]
        drawn = stream[label]
        assert len(drawn) >= 2 * n  # several class epochs (the small class's many)
        for start in range(0, len(drawn) - n + 1, n):  # each class epoch: a permutation
            assert sorted(drawn[start:start + n]) == members
        assert drawn[:n] != drawn[n:2 * n] or n == 1  # a new order each class epoch
        assert drawn[:n] != sorted(drawn[:n])  # shuffled, not in order


def test_a_seed_gives_the_same_batches_and_another_seed_others(skewed):
    ds, _ = skewed
    first = list(BalancedSampler(ds, by="label", batch_size=9, seed=4))
    assert first == list(BalancedSampler(ds, by="label", batch_size=9, seed=4))
    assert first != list(BalancedSampler(ds, by="label", batch_size=9, seed=5))


def test_ranks_resume_on_other_ranks_exactly_once(skewed):
    ds, _ = skewed

    def make(world, rank):
        return BalancedSampler(ds, by="label", batch_size=9, seed=6, num_replicas=world,
                               rank=rank, drop_last=True, epoch_size=9 * 31)

    whole = [tuple(b) for b in make(1, 0)]
    seen, states = [], []
    for rank in range(3):  # 3 ranks take 4 batches each, then 2 ranks finish the epoch
        sampler = make(3, rank)
        walk = iter(sampler)
        seen += [tuple(next(walk)) for _ in range(4)]
        states.append(sampler.state_dict())
    assert states[0] == states[1] == states[2] and states[0]["position"] == 12
    for rank in range(2):
        sampler = make(2, rank)
        sampler.load_state_dict(states[0])
        seen += [tuple(b) for b in sampler]
    assert collections.Counter(seen) == collections.Counter(whole[:30])  # 19 left: 1 dropped


def test_a_state_of_other_classes_or_another_column_is_refused(skewed, tmp_path):
    ds, _ = skewed
    sampler = BalancedSampler(ds, by="label", batch_size=9, seed=1)
    state = sampler.state_dict()
    other = BalancedSampler(ds, by="label", weights={7: 1, 8: 1, 9: 1}, batch_size=9, seed=1)
    other.load_state_dict(state)  # the same classes: weights may change on resume
    fewer = BalancedSampler(ds, by="label", weights={7: 1, 8: 2}, batch_size=9, seed=1)
    with pytest.raises(StateError):
        fewer.load_state_dict(state)
    doctored = {**state, "classes": "0" * 16}
    with pytest.raises(StateError, match="classes"):
        sampler.load_state_dict(doctored)


def test_bad_weights_and_data_without_columns_are_refused(skewed):
    ds, _ = skewed
    with pytest.raises(ValueError, match="which no record"):
        BalancedSampler(ds, by="label", weights={7: 1, 10: 1})
    with pytest.raises(ValueError, match="number >= 0"):
        BalancedSampler(ds, by="label", weights={7: -1})
    with pytest.raises(ValueError, match="every class has weight 0"):
        BalancedSampler(ds, by="label", weights={7: 0})
    with pytest.raises(TypeError, match="mapping"):
        BalancedSampler(ds, by="label", weights=[1, 2, 3])
    with pytest.raises(TypeError, match="Dataset"):
        BalancedSampler(1000, by="label")


def test_a_view_is_balanced_in_its_own_numbers(skewed):
    ds, labels = skewed
    view = ds.where(label=[8, 9])
    sampler = BalancedSampler(view, by="label", batch_size=4, seed=0)
    for batch in sampler:
        got = collections.Counter(labels[int(view.global_positions([i])[0])] for i in batch)
        assert got == {8: 2, 9: 2}




def _loader(ds, world, rank, workers, drop):
    from torch.utils.data import DataLoader

    from ofindex.integrations.torch import BalancedSampler as TorchBalanced
    from ofindex.integrations.torch import ResumableLoader, TorchDataset

    sampler = TorchBalanced(ds, by="label", batch_size=6, seed=8, num_replicas=world,
                            rank=rank, drop_last=drop, epoch_size=6 * 23)
    extra = {"num_workers": workers}
    if workers:
        extra.update(multiprocessing_context="fork", prefetch_factor=2)
    return ResumableLoader(DataLoader(TorchDataset(ds), batch_sampler=sampler,
                                      collate_fn=list, **extra))


@pytest.mark.parametrize(("first", "second", "stop", "drop"), [
    ((2, 1), (3, 0), 3, False), ((1, 2), (2, 2), 5, True), ((3, 0), (1, 1), 2, False)])
def test_resume_on_other_ranks_and_workers_is_exactly_once(skewed, first, second, stop, drop):
    """W x K DataLoaders stop after ``stop`` batches each, save, and W' x K' finish the epoch:
    the batches seen are the epoch's batches on one rank (each once; padding repeats fewer
    than W' of them, drop_last leaves out fewer than W' at the end)."""
    ds, _ = skewed
    whole = collections.Counter(tuple(b) for b in _loader(ds, 1, 0, 0, False))
    seen, states = collections.Counter(), []
    for rank in range(first[0]):
        loader = _loader(ds, first[0], rank, first[1], drop)
        for k, batch in enumerate(loader):
            seen[tuple(batch)] += 1
            if k + 1 == stop:
                break
        states.append(loader.state_dict())
        del loader
    assert all(s == states[0] for s in states)
    for rank in range(second[0]):
        loader = _loader(ds, second[0], rank, second[1], drop)
        loader.load_state_dict(states[0])
        for batch in loader:
            seen[tuple(batch)] += 1
    assert len(whole) == 23 and max(whole.values()) == 1  # batches of distinct records
    missing = whole - seen
    repeats = seen - whole
    assert not (set(seen) - set(whole))
    if drop:
        assert not repeats and sum(missing.values()) < max(first[0], second[0])
    else:
        assert not missing and sum(repeats.values()) < max(first[0], second[0])
