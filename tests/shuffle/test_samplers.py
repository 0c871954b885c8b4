"""Samplers, partitions and block orders: coverage, disjointness, resume, locality."""

import functools
import inspect
import json
import operator
import pickle
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ofindex
import ofindex.decode
import ofindex.shuffle
import ofindex.shuffle.cursor
import ofindex.shuffle.state
from ofindex.shuffle import (
    BatchSampler,
    BlockShuffleOrder,
    BlockShuffleSampler,
    GlobalShuffleOrder,
    GlobalShuffleSampler,
    Partition,
    SequentialOrder,
    SequentialSampler,
)
from tests.kit.helpers import write_shards


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 300), w=st.integers(1, 9), k=st.integers(1, 4), drop=st.booleans(),
       start=st.integers(0, 300))
def test_partition_disjoint_complete_equal(n, w, k, drop, start):
    start = min(start, n)
    parts = [Partition(n, w, r, drop, start).split(k, wid) for r in range(w) for wid in range(k)]
    sizes = {len(p) for p in parts}
    assert len(sizes) == 1  # equal-sized
    allpos = np.concatenate([p.positions() for p in parts])
    remaining = n - start
    if drop:
        assert len(allpos) == remaining // (w * k) * (w * k)
        assert len(set(allpos.tolist())) == len(allpos)  # disjoint
        assert set(allpos.tolist()) <= set(range(start, n))
    else:
        assert set(range(start, n)) <= set(allpos.tolist())  # complete
        assert len(allpos) - remaining == parts[0].padding < w * k  # only padding repeats
        assert ((allpos >= 0) & (allpos < n)).all()


def test_padding_warns_and_repeats():
    s = GlobalShuffleSampler(10, num_replicas=4, rank=3, seed=1)
    with pytest.warns(UserWarning, match="repeated"):
        got = list(s)
    assert len(got) == 3 == len(s)
    s = GlobalShuffleSampler(12, num_replicas=4, rank=3, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(s)


@pytest.mark.parametrize("make", [
    lambda **kw: GlobalShuffleSampler(103, seed=5, **kw),
    lambda **kw: SequentialSampler(103, **kw),
    lambda **kw: BlockShuffleSampler([40, 0, 33, 30], block_size=8, window=3, seed=5, **kw),
])
def test_ranks_cover_epoch_and_epochs_differ(make):
    w = 4
    epochs = []
    for e in range(2):
        seen = []
        for r in range(w):
            s = make(num_replicas=w, rank=r, drop_last=True)
            s.set_epoch(e)
            seen.append(list(s))
        assert len({len(x) for x in seen}) == 1
        flat = functools.reduce(operator.iadd, seen, [])
        assert len(set(flat)) == len(flat) == 100
        epochs.append(flat)
        full = make(num_replicas=1, rank=0)
        full.set_epoch(e)
        order = list(full)
        assert sorted(order) == list(range(103))
        # strided split: rank r's j-th item is epoch position j*w + r
        assert seen[1][:5] == order[1:21:4]
    if not isinstance(make(), SequentialSampler):
        assert epochs[0] != epochs[1]


def test_resume_mid_epoch_exact_and_json():
    s = GlobalShuffleSampler(1000, seed=11)
    s.set_epoch(3)
    full = list(s)
    it = iter(s)
    head = [next(it) for _ in range(377)]
    state = json.loads(json.dumps(s.state_dict()))
    assert state["position"] == 377 and state["epoch"] == 3
    t = GlobalShuffleSampler(1000, seed=11)
    t.load_state_dict(state)
    assert len(t) == 623
    assert head + list(t) == full
    # the resume point is consumed once; the next pass is a whole epoch again
    assert list(t) == full


@pytest.mark.filterwarnings("ignore:.*repeated")
def test_resume_with_different_world_size():
    n, seed = 501, 2
    ref = GlobalShuffleSampler(n, seed=seed)
    ref.set_epoch(1)
    order = list(ref)
    states, seen = [], []
    for r in range(4):  # 4 ranks each take 30 items, then checkpoint
        s = GlobalShuffleSampler(n, num_replicas=4, rank=r, seed=seed)
        s.set_epoch(1)
        it = iter(s)
        seen += [next(it) for _ in range(30)]
        states.append(s.state_dict())
    assert {st_["position"] for st_ in states} == {120}
    assert sorted(seen) == sorted(order[:120])
    for r in range(3):  # resume on 3 ranks
        s = GlobalShuffleSampler(n, num_replicas=3, rank=r, seed=seed, drop_last=False)
        s.load_state_dict(states[0])
        assert s.epoch == 1
        seen += list(s)
    assert set(seen) == set(range(n)) and len(seen) == n  # 381 split 3 ways: no padding needed


def test_state_mismatch_refused():
    s = GlobalShuffleSampler(100, seed=1)
    with pytest.raises(ValueError, match="does not match"):
        GlobalShuffleSampler(101, seed=1).load_state_dict(s.state_dict())
    with pytest.raises(ValueError, match="does not match"):
        GlobalShuffleSampler(100, seed=2).load_state_dict(s.state_dict())
    with pytest.raises(ValueError, match="does not match"):
        SequentialSampler(100).load_state_dict(s.state_dict())
    b = BlockShuffleSampler([50, 50], block_size=4)
    with pytest.raises(ValueError, match="does not match"):
        BlockShuffleSampler([50, 50], block_size=8).load_state_dict(b.state_dict())


def test_set_epoch_drops_resume_of_other_epoch_and_pickle():
    s = GlobalShuffleSampler(50, seed=1)
    it = iter(s)
    [next(it) for _ in range(10)]
    t = GlobalShuffleSampler(50, seed=1)
    t.load_state_dict(s.state_dict())
    t.set_epoch(0)
    assert len(t) == 40
    t.set_epoch(1)
    assert len(t) == 50
    u = pickle.loads(pickle.dumps(t))
    assert list(u) == list(t)


def test_batch_sampler_and_state():
    s = GlobalShuffleSampler(103, seed=4)
    full = list(s)
    b = BatchSampler(s, 10)
    batches = list(b)
    assert len(b) == len(batches) == 11 and functools.reduce(operator.iadd, batches, []) == full
    assert len(list(BatchSampler(s, 10, drop_last=True))) == 10 == len(BatchSampler(s, 10, True))
    it = iter(b)
    first = [next(it) for _ in range(4)]
    state = b.state_dict()
    assert state["position"] == 40
    b2 = BatchSampler(GlobalShuffleSampler(103, seed=4), 10)
    b2.load_state_dict(state)
    assert functools.reduce(operator.iadd, first + list(b2), []) == full


def test_block_order_bijection_and_shard_locality():
    sizes = [1000, 333, 0, 1, 2048, 77]
    for bs, w in [(1, 1), (16, 1), (16, 4), (64, 16), (7, 1000)]:
        o = BlockShuffleOrder(sizes, bs, w, seed=3)
        r = o(np.arange(sum(sizes)))
        assert np.array_equal(np.sort(r), np.arange(sum(sizes))), (bs, w)
    # window=1: each run of block_size positions is one block of one shard (except pooled tails)
    o = BlockShuffleOrder([640, 640], 64, 1, seed=1)
    r = o(np.arange(1280)).reshape(-1, 64)
    assert all(len(set((row // 64).tolist())) == 1 for row in r)
    assert not np.array_equal(np.sort(r, axis=1)[:, 0], np.arange(0, 1280, 64))


def test_block_shuffle_tradeoff():
    n, batch = 64 * 256, 32
    def stats(w):
        r = BlockShuffleOrder([n // 2, n // 2], 64, w, seed=0)(np.arange(n))
        blocks = [len(np.unique(b // 64)) for b in r.reshape(-1, batch)]
        rho = np.corrcoef(np.arange(n), r)[0, 1]
        return np.mean(blocks), abs(rho)
    few, _ = stats(2)
    many, _ = stats(64)
    assert few <= 2 and many > 10  # fewer range requests per batch with small windows
    full = BlockShuffleOrder([n // 2, n // 2], 64, 256, seed=0)(np.arange(n))
    assert len(np.unique(full[:batch] // 64)) > 20  # window covers everything: ~full shuffle
    assert stats(8)[1] < 4 / np.sqrt(256)  # blocks (256 of them) are globally shuffled


# ---- what a sampler takes: a Dataset, anything with len(), a record count, shard sizes ------

SHARDS = [24, 40, 16]  # multiples of the block size 8 below: no pooled tails


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    d = write_shards(tmp_path_factory.mktemp("sampled"), SHARDS,
                     lambda s, i: f"{s}/{i}".encode())
    data = ofindex.open(d)
    assert len(data) == sum(SHARDS)
    return data


class LenOnly:
    """A dataset that only knows its length."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def test_block_shuffle_sampler_takes_a_dataset_and_keeps_blocks_in_shards(ds):
    s = BlockShuffleSampler(ds, seed=0)  # the user-reported failure: ValueError from int(b'...')
    assert s.shard_sizes == SHARDS
    assert sorted(s) == list(range(len(ds)))
    ends = np.cumsum(SHARDS)
    starts = ends - SHARDS
    for epoch in range(2):
        s = BlockShuffleSampler(ds, block_size=8, window=1, seed=3)
        s.set_epoch(epoch)
        order = list(s)
        assert sorted(order) == list(range(len(ds)))
        for block in np.reshape(order, (-1, 8)):
            shard_of = {ds[int(i)].split(b"/")[0] for i in block}
            assert len(shard_of) == 1  # one shard per block ...
            lo = int(block.min())
            assert sorted(block.tolist()) == list(range(lo, lo + 8))  # ... 8 neighbours in it
            shard = int(np.searchsorted(ends, lo, side="right"))
            assert (lo - starts[shard]) % 8 == 0  # blocks are cut from each shard's start
    # windows of several blocks: still a permutation, the same as the other ways to ask
    want = list(BlockShuffleSampler(ds, block_size=8, window=3, seed=5))
    assert sorted(want) == list(range(len(ds)))
    assert want == list(BlockShuffleSampler(shard_sizes=SHARDS, block_size=8, window=3, seed=5))
    assert want == list(BlockShuffleSampler(SHARDS, block_size=8, window=3, seed=5))  # older form
    assert want == list(BlockShuffleSampler(np.array(SHARDS), block_size=8, window=3, seed=5))
    assert want == list(BlockShuffleSampler.for_dataset(ds, block_size=8, window=3, seed=5))


def test_samplers_take_len_only_objects_and_counts(ds):
    n = len(ds)
    for make in (SequentialSampler, GlobalShuffleSampler):
        ref = list(make(n, seed=2))
        assert sorted(ref) == list(range(n))
        for data in (ds, LenOnly(n), np.int64(n), list(range(n))):
            assert list(make(data, seed=2)) == ref, (make, data)
    one_shard = list(BlockShuffleSampler(shard_sizes=[n], block_size=8, seed=2))
    for data in (LenOnly(n), n, np.int64(n), [b"record"] * n):
        s = BlockShuffleSampler(data, block_size=8, seed=2)
        assert s.shard_sizes == [n] and list(s) == one_shard, data
    assert BlockShuffleSampler([24.0, 40.0]).shard_sizes == [24, 40]  # whole floats: counts


@pytest.mark.parametrize("make", [SequentialSampler, GlobalShuffleSampler, BlockShuffleSampler])
@pytest.mark.parametrize("bad", ["data/train-*.tfrecord", b"raw", 3.5, None, object(), True])
def test_bad_data_names_the_accepted_forms(make, bad):
    with pytest.raises(TypeError, match=r"ofindex Dataset.*len\(\).*int") as err:
        make(bad)
    assert make.__name__ in str(err.value)


def test_bad_sizes_and_empty_data_are_refused(ds):
    for make in (SequentialSampler, GlobalShuffleSampler, BlockShuffleSampler):
        for empty in (0, LenOnly(0)):
            with pytest.raises(ValueError, match="empty"):
                make(empty)
    with pytest.raises(ValueError, match="empty"):
        BlockShuffleSampler(shard_sizes=[0, 0])
    with pytest.raises(TypeError, match="not both"):
        BlockShuffleSampler(ds, shard_sizes=SHARDS)
    with pytest.raises(TypeError, match="shard_sizes must be a list"):
        BlockShuffleSampler(shard_sizes=ds)
    with pytest.raises(TypeError, match="shard_sizes must be a list"):
        BlockShuffleSampler(shard_sizes="24,40")
    with pytest.raises(ValueError, match="non-negative"):
        BlockShuffleSampler(shard_sizes=[3, -1])
    with pytest.raises(ValueError, match="non-negative"):
        BlockShuffleSampler([3, -1])
    with pytest.raises(ValueError, match="whole"):
        BlockShuffleSampler(shard_sizes=[1.5, 2])
    with pytest.raises(TypeError, match="BatchSampler wraps"):
        BatchSampler(ds, 4)


def test_orders_refuse_positions_outside_the_epoch():
    for order in (SequentialOrder(10), GlobalShuffleOrder(10, seed=1),
                  BlockShuffleOrder([4, 6], 2, 2, seed=1)):
        assert sorted(order(np.arange(10)).tolist()) == list(range(10))
        for bad in ([10], [-1], [3, 200]):
            with pytest.raises(IndexError, match=r"\[0, 10\)"):
                order(np.array(bad))


def _public_callables(module):
    """(qualified name, callable) for every public callable of ``module.__all__`` and the
    public methods (plus the protocol methods) of its classes."""
    dunders = {"__call__", "__getitem__", "__getitems__", "__iter__", "__len__"}
    for name in module.__all__:
        obj = getattr(module, name)
        if not callable(obj):
            continue
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            continue  # errors: documented in ofindex.errors
        yield name, obj
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if isinstance(member, property):
                    member = member.fget
                if (attr in dunders or not attr.startswith("_")) and callable(member):
                    yield f"{name}.{attr}", member


@pytest.mark.parametrize("module", [ofindex.decode, ofindex.shuffle, ofindex.shuffle.state,
                                    ofindex.shuffle.cursor])
def test_public_api_has_docstrings_and_runtime_annotations(module):
    for name, obj in _public_callables(module):
        assert inspect.getdoc(obj), name
        sig = inspect.signature(obj)
        annotations = [p.annotation for p in sig.parameters.values()] + [sig.return_annotation]
        if name != "Partition.split":  # returns its own class: the one allowed string
            assert not any(isinstance(a, str) for a in annotations), (name, sig)
