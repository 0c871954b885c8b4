"""Resumable, distributed samplers over record indices (no torch dependency).

A sampler yields global record indices for one rank: ``ds[i]`` / ``ds.__getitems__(batch)``.
It combines an epoch *order* (:mod:`ofindex.shuffle.orders`) with a strided
:class:`~ofindex.shuffle.partition.Partition` of the epoch over ranks.

* ``set_epoch(e)``: a new order per epoch (call it before each epoch, as with torch's
  ``DistributedSampler``).
* ``state_dict()`` / ``load_state_dict()``: the state is the *global epoch position* reached
  (every rank takes the same number of items per step, so after ``j`` items per rank the ranks
  together have consumed the epoch prefix ``[0, j * world_size)``).  Resuming costs O(1): the
  next ``__iter__`` starts exactly at the next record, without replaying the order.  Because the
  state is global, resuming with a **different world size** is supported: the remaining
  positions are re-split over the new ranks.  This assumes all ranks saved after the same
  number of items (synchronous data parallel training).  Loading a state of another dataset
  size, seed or order parameters raises ``ValueError``.
* The sampler is picklable (DataLoader ``spawn`` workers) and implements torchdata's
  ``Stateful`` protocol, so ``StatefulDataLoader`` checkpoints it directly.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .orders import BlockShuffleOrder, GlobalShuffleOrder, SequentialOrder
from .partition import Partition, resolve_distributed
from .permutation import DEFAULT_ROUNDS

__all__ = ["BatchSampler", "BlockShuffleSampler", "GlobalShuffleSampler", "SequentialSampler"]

_STATE_VERSION = 1
_CHUNK = 1 << 14


def _length(data) -> int:
    n = data if isinstance(data, (int, np.integer)) else len(data)
    if int(n) < 1:
        raise ValueError(f"cannot sample from an empty dataset (n={n})")
    return int(n)


class _EpochSampler:
    """Common machinery; subclasses define ``_make_order()`` and ``_params()``."""

    def __init__(
        self,
        data,
        *,
        num_replicas: int | None = None,
        rank: int | None = None,
        drop_last: bool = False,
        seed: int = 0,
    ) -> None:
        self.n = _length(data)
        self.num_replicas, self.rank = resolve_distributed(num_replicas, rank)
        self.drop_last = bool(drop_last)
        self.seed = int(seed)
        self.epoch = 0
        self._resume = 0  # global epoch position where the next __iter__ starts
        self._pass_start = 0  # global epoch position where the current pass started
        self._consumed = 0  # items yielded by the current pass on this rank
        self._order_cache: tuple[int, Any] | None = None

    # -- order ------------------------------------------------------------------------------
    def _make_order(self):
        raise NotImplementedError

    def _params(self) -> dict:
        return {}

    def order(self):
        """The epoch order (positions -> record indices) of the current epoch."""
        if self._order_cache is None or self._order_cache[0] != self.epoch:
            self._order_cache = (self.epoch, self._make_order())
        return self._order_cache[1]

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_order_cache"] = None
        return state

    # -- epochs and partition ---------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Select epoch ``epoch``'s order; drops a loaded resume point of another epoch."""
        epoch = int(epoch)
        if epoch != self.epoch:
            self._resume = 0
        self.epoch = epoch

    def partition(self, start: int | None = None) -> Partition:
        start = self._resume if start is None else start
        return Partition(self.n, self.num_replicas, self.rank, self.drop_last, start)

    def __len__(self) -> int:
        """Items the next ``__iter__`` yields on this rank (the rest of the epoch if resumed)."""
        return len(self.partition())

    def _iter_chunks(self, chunk: int = _CHUNK) -> Iterator[np.ndarray]:
        part = self.partition()
        part.warn_if_padding()
        self._pass_start, self._consumed, self._resume = part.start, 0, 0
        order = self.order()
        for j in range(0, len(part), chunk):
            yield order(part.positions(j, j + chunk))

    def __iter__(self) -> Iterator[int]:
        for idx in self._iter_chunks():
            for i in idx.tolist():
                self._consumed += 1
                yield i

    # -- checkpointing ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Where to resume: JSON-serialisable, O(1) size."""
        part = self.partition(self._pass_start)
        return {
            "version": _STATE_VERSION,
            "sampler": type(self).__name__,
            "n": self.n,
            "seed": self.seed,
            "params": self._params(),
            "epoch": self.epoch,
            "position": part.global_position(self._consumed),
            "num_replicas": self.num_replicas,
            "rank": self.rank,
            "consumed": self._consumed,
        }

    def load_state_dict(self, state: dict) -> None:
        """Resume: the next ``__iter__`` continues at the saved global position."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"unsupported sampler state version {state.get('version')!r}")
        mine = {"sampler": type(self).__name__, "n": self.n, "seed": self.seed,
                "params": self._params()}  # fmt: skip
        theirs = {k: state.get(k) for k in mine}
        if theirs != mine:
            raise ValueError(
                f"sampler state does not match this sampler: saved {theirs}, current {mine}; "
                "resume with the same dataset, seed and order parameters"
            )
        position = int(state["position"])
        if not 0 <= position <= self.n:
            raise ValueError(f"saved position {position} outside [0, {self.n}]")
        self.epoch = int(state["epoch"])
        self._resume = self._pass_start = position
        self._consumed = 0


class SequentialSampler(_EpochSampler):
    """Records in dataset order, split over ranks (``seed`` and epochs do not change it)."""

    def _make_order(self):
        return SequentialOrder(self.n)


class GlobalShuffleSampler(_EpochSampler):
    """A full shuffle of all records of all shards, different for every ``(seed, epoch)``.

    ``data`` is a dataset (anything with ``len``) or a record count.
    """

    def __init__(self, data, *, num_replicas=None, rank=None, drop_last=False, seed=0,
                 rounds: int = DEFAULT_ROUNDS) -> None:  # fmt: skip
        super().__init__(data, num_replicas=num_replicas, rank=rank, drop_last=drop_last, seed=seed)
        self.rounds = int(rounds)

    def _params(self) -> dict:
        return {"rounds": self.rounds}

    def _make_order(self):
        return GlobalShuffleOrder(self.n, self.seed, self.epoch, self.rounds)


class BlockShuffleSampler(_EpochSampler):
    """Locality-aware shuffle for cloud reads (see :class:`.orders.BlockShuffleOrder`).

    ``shard_sizes``: per-shard record counts in dataset order (their sum is the dataset size).
    """

    def __init__(self, shard_sizes: Sequence[int], *, block_size: int = 64, window: int = 16,
                 num_replicas=None, rank=None, drop_last=False, seed=0,
                 rounds: int = DEFAULT_ROUNDS) -> None:  # fmt: skip
        self.shard_sizes = [int(c) for c in np.asarray(shard_sizes, dtype=np.int64).reshape(-1)]
        self.block_size, self.window, self.rounds = int(block_size), int(window), int(rounds)
        super().__init__(sum(self.shard_sizes), num_replicas=num_replicas, rank=rank,
                         drop_last=drop_last, seed=seed)  # fmt: skip
        self._make_order()  # validate parameters now

    @classmethod
    def for_dataset(cls, dataset, **kwargs) -> BlockShuffleSampler:
        """Build from a dataset exposing ``cumulative_counts`` (records in shards ``0..k``)."""
        cum = dataset.cumulative_counts
        cum = np.asarray(cum() if callable(cum) else cum, dtype=np.int64)
        return cls(np.diff(cum, prepend=0), **kwargs)

    def _params(self) -> dict:
        return {"block_size": self.block_size, "window": self.window, "rounds": self.rounds,
                "num_shards": len(self.shard_sizes),
                "shards_hash": hash(tuple(self.shard_sizes))}  # fmt: skip

    def _make_order(self):
        return BlockShuffleOrder(self.shard_sizes, self.block_size, self.window, self.seed,
                                 self.epoch, self.rounds)  # fmt: skip


class BatchSampler:
    """Groups a sampler's indices into lists of ``batch_size`` (for ``DataLoader(batch_sampler=)``).

    ``drop_last`` drops a final short batch.  Checkpointing delegates to the wrapped sampler, whose
    position advances one batch at a time.
    """

    def __init__(self, sampler: _EpochSampler, batch_size: int, drop_last: bool = False) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.sampler, self.batch_size, self.drop_last = sampler, int(batch_size), bool(drop_last)

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        s, bs = self.sampler, self.batch_size
        total = len(s)
        buf: list[int] = []
        for idx in s._iter_chunks():
            buf.extend(idx.tolist())
            while len(buf) >= bs:
                batch, buf = buf[:bs], buf[bs:]
                s._consumed += bs
                yield batch
        if buf and not self.drop_last:
            s._consumed += len(buf)
            yield buf
        elif buf:
            s._consumed = total  # the dropped tail counts as consumed for this epoch

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def state_dict(self) -> dict:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state)
