"""Global shuffling across shards in O(1) memory: permutations, orders, partitions, samplers.

Typical use with a dataset ``ds`` (``len(ds)``, ``ds[i]``, ``ds.__getitems__(list)``)::

    from ofindex.shuffle import GlobalShuffleSampler
    sampler = GlobalShuffleSampler(ds, seed=1234)   # rank/world from torch.distributed if set up
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for i in sampler:
            record = ds[i]

Every sampler takes the same first argument: an ofindex ``Dataset``, any object with ``len()``,
or a number of records. ``BlockShuffleSampler(ds, block_size=64, window=16)`` keeps its blocks
inside the dataset's shards (from ``ds.cumulative_counts``); shard sizes can also be given
directly, ``BlockShuffleSampler(shard_sizes=[1000, 1000, 500])``.

See :mod:`ofindex.shuffle.permutation` (the Feistel permutation), :mod:`.orders` (sequential,
global and locality-aware block orders), :mod:`.partition` (rank/worker splits, drop_last and
padding), :mod:`.samplers` (set_epoch, state_dict/load_state_dict), :mod:`.cursor` (what a
loaded state means for the epochs after it), :mod:`.state` (states checked field by field,
and whether one belongs to a sampler), :mod:`.progress`
(:class:`ResumableLoader`: checkpoints of what the training loop consumed, exact under a
prefetching DataLoader, for any number of workers and ranks on resume) and :mod:`.mixing`
(weighted mixtures of several datasets), :mod:`.balanced` (class-balanced batches of one
dataset: ``BalancedSampler(ds, by="label")``) and :mod:`.quality` (how well an order mixes:
``neighbour_mixing``).
"""

from .balanced import BalancedSampler
from .mixing import MixtureSampler
from .orders import BlockShuffleOrder, GlobalShuffleOrder, SequentialOrder
from .partition import Partition, resolve_distributed
from .permutation import DEFAULT_ROUNDS, FeistelPermutation
from .progress import RecordBatches, ResumableLoader, Tracker
from .quality import (
    ClassBalance,
    Mixing,
    class_balance,
    displacement,
    mixing_of_epoch,
    neighbour_mixing,
)
from .samplers import BatchSampler, BlockShuffleSampler, GlobalShuffleSampler, SequentialSampler

__all__ = [
    "DEFAULT_ROUNDS",
    "BalancedSampler",
    "BatchSampler",
    "BlockShuffleOrder",
    "BlockShuffleSampler",
    "ClassBalance",
    "FeistelPermutation",
    "GlobalShuffleOrder",
    "GlobalShuffleSampler",
    "Mixing",
    "MixtureSampler",
    "Partition",
    "RecordBatches",
    "ResumableLoader",
    "SequentialOrder",
    "SequentialSampler",
    "Tracker",
    "class_balance",
    "displacement",
    "mixing_of_epoch",
    "neighbour_mixing",
    "resolve_distributed",
]
