"""Weighted mixing: the written definition (tests/kit/mixref.py, a reference implementation of it,
and the checked-in golden list), exact per-batch proportions, sources of very different
sizes, a source's epoch boundary inside a batch, re-weighting from a checkpoint, resume,
reading through MixtureBatches."""

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import ofindex
from ofindex.shuffle import MixtureSampler
from ofindex.shuffle.mixplan import apportion
from tests.kit import mixref, paths
from tests.kit.helpers import write_shards


def pairs_of(sampler, batch):
    """(source, record within the source) of a batch of global indices."""
    offsets = np.concatenate(([0], np.cumsum(sampler.sizes)[:-1]))
    sources = sampler.source_of(batch)
    return [(int(s), int(i - offsets[s])) for s, i in zip(sources, batch, strict=True)]


def test_golden_first_1000_pairs():
    with open(mixref.GOLDEN, encoding="utf-8") as f:
        golden = json.load(f)
    case = golden["case"]
    expected = [tuple(p) for p in golden["pairs"]]
    assert len(expected) == 1000
    assert mixref.golden_pairs() == expected  # the reference still computes the checked-in list
    sampler = MixtureSampler(case["sizes"], case["weights"], case["batch_size"], seed=case["seed"])
    got = [p for batch in sampler for p in pairs_of(sampler, batch)]
    assert got[:1000] == expected


def test_golden_in_a_fresh_process():
    """The same pairs in another interpreter (no state shared with this one)."""
    code = ("import json, sys; from tests.kit import mixref; "
            "from ofindex.shuffle import MixtureSampler; c = mixref.GOLDEN_CASE; "
            "m = MixtureSampler(c['sizes'], c['weights'], c['batch_size'], seed=c['seed']); "
            "print(json.dumps([i for b in m for i in b][:1000]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=paths.ROOT, capture_output=True,
                         text=True, check=True).stdout
    case = mixref.GOLDEN_CASE
    offsets = np.concatenate(([0], np.cumsum(case["sizes"])[:-1]))
    with open(mixref.GOLDEN, encoding="utf-8") as f:
        golden = json.load(f)["pairs"]
    assert json.loads(out) == [int(offsets[s] + r) for s, r in golden]


@pytest.mark.parametrize("sampled", [False, True])
def test_matches_the_reference(sampled):
    sizes, weights = [37, 1000, 5], [2.0, 1.0, 0.5]
    sampler = MixtureSampler(sizes, weights, 24, seed=99, sampled=sampled, epoch_size=24 * 12)
    got = [pairs_of(sampler, b) for b in sampler]
    assert got == mixref.batches(sizes, weights, 24, 99, 12, sampled=sampled)


@pytest.mark.parametrize(("weights", "batch", "counts"), [
    ([0.7, 0.3], 256, [179, 77]),
    ([0.5, 0.3, 0.2], 256, [128, 77, 51]),
    ([1, 1, 1], 10, [4, 3, 3]),           # ties: the lower source first
    ([0.999, 0.001], 8, [8, 0]),
    ([3, 1], 4, [3, 1]),
])
def test_exact_counts_every_batch(weights, batch, counts):
    assert apportion(weights, batch) == counts == mixref.exact_counts(weights, batch)
    sampler = MixtureSampler([1000, 300, 50][:len(weights)], weights, batch, seed=3,
                             epoch_size=batch * 9)
    for b in sampler:
        assert np.bincount(sampler.source_of(b), minlength=len(weights)).tolist() == counts


def test_sampled_counts_vary_and_follow_the_weights():
    sampler = MixtureSampler([1000, 1000], [0.7, 0.3], 256, seed=5, sampled=True,
                             epoch_size=256 * 200)
    per_batch = [np.bincount(sampler.source_of(b), minlength=2)[0] for b in sampler]
    assert len(set(per_batch)) > 5  # drawn, not fixed
    assert abs(np.mean(per_batch) / 256 - 0.7) < 0.01


def test_sizes_100_and_1_000_000_epoch_boundary_inside_a_batch():
    sampler = MixtureSampler([100, 1_000_000], [0.5, 0.5], 64, seed=11, epoch_size=64 * 10)
    assert len(pickle.dumps(sampler)) < 4096  # O(1) memory: nothing per record
    small = [r for b in sampler for s, r in pairs_of(sampler, b) if s == 0]
    assert len(small) == 320
    epochs = [small[k:k + 100] for k in range(0, 300, 100)]
    for epoch in epochs:  # every source epoch is the whole small source, once
        assert sorted(epoch) == list(range(100))
    assert epochs[0] != epochs[1] != epochs[2]  # and a new order each time
    # batch 1 holds stream items 32..63, batch 3 items 96..127: epoch 0's end and epoch 1's start
    third = pairs_of(sampler, list(MixtureSampler([100, 1_000_000], [0.5, 0.5], 64, seed=11,
                                                  epoch_size=640))[3])
    assert [r for s, r in third if s == 0][:4] == epochs[0][96:]
    assert [r for s, r in third if s == 0][4:] == epochs[1][:28]
    big = [r for b in sampler for s, r in pairs_of(sampler, b) if s == 1]
    assert len(set(big)) == len(big) == 320


def test_epoch_size_choices():
    assert MixtureSampler([1000, 500], [1, 1], 100).num_batches == 15
    assert MixtureSampler([1000, 500], [1, 1], 100, epoch_size="first").num_batches == 20
    assert MixtureSampler([1000, 500], [1, 1], 100, epoch_size=450).num_batches == 4
    assert MixtureSampler([10, 500], [1, 1], 100, epoch_size=1).num_batches == 1
    for bad in ("all", 0, -5, 2.5, True):
        with pytest.raises(ValueError, match="epoch_size"):
            MixtureSampler([10, 10], [1, 1], 4, epoch_size=bad)
    with pytest.raises(ValueError, match="first"):
        MixtureSampler([10, 10], [0.01, 1], 4, epoch_size="first")
    with pytest.raises(ValueError, match="weights"):
        MixtureSampler([10, 10], [1, 0], 4)
    with pytest.raises(ValueError, match="2 sources but 3 weights"):
        MixtureSampler([10, 10], [1, 1, 1], 4)


def test_reweighting_from_a_checkpoint_continues_the_streams():
    sizes = [50, 70]
    first = MixtureSampler(sizes, [0.5, 0.5], 10, seed=2, epoch_size=200)
    it = iter(first)
    head = [next(it) for _ in range(7)]
    state = json.loads(json.dumps(first.state_dict()))
    assert state["offsets"] == [35, 35] and state["position"] == 7
    second = MixtureSampler(sizes, [0.9, 0.1], 10, seed=2, epoch_size=200)
    second.load_state_dict(state)
    tail = list(second)
    assert len(tail) == 13
    for b in tail:
        assert np.bincount(second.source_of(b), minlength=2).tolist() == [9, 1]
    # the streams continue: source 0's items 35.. (reference: offsets carried over)
    ref_tail = mixref.batches(sizes, [0.9, 0.1], 10, 2, 13, first=7, offsets=[35, 35])
    assert [pairs_of(second, b) for b in tail] == ref_tail
    small = [r for b in head + tail for s, r in pairs_of(second, b) if s == 0]
    assert sorted(small[:50]) == list(range(50))  # no record of source 0's epoch repeated


def test_state_checks():
    sampler = MixtureSampler([10, 20], [1, 1], 4, seed=1)
    state = sampler.state_dict()
    for key, value in (("seed", 2), ("sizes", [10, 21]), ("batch_size", 8), ("version", 9),
                       ("position", 99), ("offsets", [1])):
        with pytest.raises(ValueError):
            sampler.load_state_dict({**state, key: value})


def test_ranks_share_the_batches_and_resume_on_other_ranks():
    sizes, weights = [40, 90], [0.6, 0.4]

    def make(world, rank, drop):
        return MixtureSampler(sizes, weights, 8, seed=4, num_replicas=world, rank=rank,
                              drop_last=drop, epoch_size=8 * 11)

    whole = [tuple(b) for b in make(1, 0, False)]
    # 3 ranks take 2 batches each (positions 0..5), then 2 ranks finish the epoch
    seen, states = [], []
    for r in range(3):
        sampler = make(3, r, True)
        it = iter(sampler)
        seen += [tuple(next(it)) for _ in range(2)]
        states.append(sampler.state_dict())
    assert states[0] == states[1] == states[2] and states[0]["position"] == 6
    for r in range(2):
        sampler = make(2, r, True)
        sampler.load_state_dict(states[0])
        assert len(sampler) == 2  # 5 batches left over 2 ranks: the last one dropped
        seen += [tuple(b) for b in sampler]
    assert sorted(seen) == sorted(whole[:10])


def test_mixture_batches_say_the_source(tmp_path):
    from torch.utils.data import DataLoader

    from ofindex.integrations.torch import MixtureBatches, ResumableLoader
    from ofindex.integrations.torch import MixtureSampler as TorchMixtureSampler

    a = write_shards(tmp_path / "a", [30, 20], lambda s, i: b"a%d-%d" % (s, i), "a-{}.tfrecord")
    b = write_shards(tmp_path / "b", [15], lambda s, i: b"b%d-%d" % (s, i), "b-{}.tfrecord")
    sources = [ofindex.open(os.path.join(a, "a-*.tfrecord")),
               ofindex.open(os.path.join(b, "b-*.tfrecord"))]
    data = MixtureBatches(sources)
    sampler = TorchMixtureSampler(sources, [0.75, 0.25], 8, seed=0)
    loader = ResumableLoader(DataLoader(data, sampler=sampler, batch_size=None))
    for batch in loader:
        assert batch["source"].tolist() == [0] * 6 + [1] * 2
        assert [r[:1] for r in batch["records"]] == [b"a"] * 6 + [b"b"] * 2
    assert loader.state_dict()["position"] == len(sampler) == 8
    with pytest.raises(ValueError, match="one decoder per source"):
        MixtureBatches(sources, [None])


def test_mixture_batches_decode_with_a_common_or_per_source_decoders(tmp_path):
    from ofindex.cli.synthetic import write_dataset
    from ofindex.decode import BatchDecoder, FixedLen
    from ofindex.integrations.torch import MixtureBatches

    write_dataset(str(tmp_path / "a"), 40, 2, seed=1)
    write_dataset(str(tmp_path / "b"), 30, 1, seed=2)
    sources = [ofindex.open(str(tmp_path / "a")), ofindex.open(str(tmp_path / "b"))]
    spec = {"image": FixedLen((784,), "float32"), "label": FixedLen((), "int64")}
    sampler = MixtureSampler(sources, [0.7, 0.3], 10, seed=3)
    indices = next(iter(sampler))
    common = MixtureBatches(sources, BatchDecoder(spec))[indices]
    assert common["image"].shape == (10, 784) and common["source"].tolist() == [0] * 7 + [1] * 3
    expected = BatchDecoder(spec)([sources[s][i] for s, i in pairs_of(sampler, indices)])
    assert (common["image"].numpy() == expected["image"]).all()
    assert (common["label"].numpy() == expected["label"]).all()
    parts = MixtureBatches(sources, [BatchDecoder(spec),
                                     BatchDecoder({"label": FixedLen((), "int64")})])[indices]
    assert parts["parts"][0]["image"].shape == (7, 784)
    assert set(parts["parts"][1]) == {"label"}
    assert (parts["parts"][1]["label"].numpy() == expected["label"][7:]).all()


def test_state_follows_set_epoch_before_the_pass():
    sampler = MixtureSampler([10, 20], [1, 1], 4, seed=1)
    list(sampler)
    assert (sampler.state_dict()["epoch"], sampler.state_dict()["position"]) == (0, 7)
    sampler.set_epoch(1)
    assert (sampler.state_dict()["epoch"], sampler.state_dict()["position"]) == (1, 0)
    assert sampler.state_dict()["offsets"] == [14, 14]
