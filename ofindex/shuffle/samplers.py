"""Resumable, distributed samplers over record indices (no torch dependency).

A sampler yields global record indices for one rank: ``ds[i]`` / ``ds.__getitems__(batch)``.
It combines an epoch *order* (:mod:`ofindex.shuffle.orders`) with a strided
:class:`~ofindex.shuffle.partition.Partition` of the epoch over ranks.

* What to sample: every sampler takes the same first argument, ``data``: an ofindex
  ``Dataset``, any object with ``len()`` (e.g. a ``TorchDataset``), or a record count
  (``int``).  :class:`BlockShuffleSampler` also needs the shard boundaries: it reads them from
  the ``cumulative_counts`` of a ``Dataset`` (records in shards ``0..k``); an object with only
  ``len()`` (or an int) is one shard; sizes can be given as ``shard_sizes=[...]``, and a
  list/tuple/array of numbers passed as ``data`` is read as shard sizes too (the older form).
* ``set_epoch(e)``: a new order per epoch (call it before each epoch, as with torch's
  ``DistributedSampler``).  After ``load_state_dict`` of a state saved in epoch ``E``, the
  same loop resumes it: epochs before ``E`` give empty passes, ``E`` continues at the saved
  position (:mod:`ofindex.shuffle.cursor`).
* ``state_dict()`` / ``load_state_dict()``: the state is the *global epoch position* reached
  (every rank takes the same number of items per step, so after ``j`` items per rank the ranks
  together have consumed the epoch prefix ``[0, j * world_size)``).  Resuming costs O(1): the
  next ``__iter__`` starts exactly at the next record, without replaying the order.  Because the
  state is global, resuming with a **different world size** is supported: the remaining
  positions are re-split over the new ranks.  This assumes all ranks saved after the same
  number of items (synchronous data parallel training).  Loading a state of another dataset
  size, seed or order parameters, or with a field missing, mistyped or out of range, raises
  :class:`~ofindex.errors.StateError` (a ``ValueError``; :mod:`ofindex.shuffle.state`).
* The sampler is picklable (DataLoader ``spawn`` workers) and implements torchdata's
  ``Stateful`` protocol, so ``StatefulDataLoader`` checkpoints it directly.
"""

from collections.abc import Iterator
from typing import Any, TypeVar

from ._data import Data, ShardSizes, shard_sizes_of
from ._epoch import _EpochSampler
from .cursor import PassMark
from .orders import BlockShuffleOrder, EpochOrder, GlobalShuffleOrder, SequentialOrder
from .permutation import DEFAULT_ROUNDS
from .progress import RecordBatches

__all__ = ["BatchSampler", "BlockShuffleSampler", "GlobalShuffleSampler", "SequentialSampler"]

_B = TypeVar("_B", bound="BlockShuffleSampler")


class SequentialSampler(_EpochSampler):
    """Records in dataset order, split over ranks (``seed`` and epochs do not change it).

    Args:
        data: What to sample: an ofindex ``Dataset``, any object with ``len()``, or a number
            of records.
        num_replicas: The number of ranks (``None``: from ``torch.distributed`` if a process
            group is initialised, else 1).
        rank: This rank (``None``: from ``torch.distributed``, else 0).
        drop_last: Drop the epoch's last positions that do not split evenly over the ranks
            instead of repeating a few records (with a warning).
        seed: Accepted for symmetry with the other samplers; it does not change the order.

    Raises:
        TypeError: ``data`` is none of the accepted forms.
        ValueError: ``data`` has no records, or ``num_replicas``/``rank`` are invalid.
    """

    def _make_order(self, epoch: int) -> EpochOrder:
        return SequentialOrder(self.n)


class GlobalShuffleSampler(_EpochSampler):
    """A full shuffle of all records of all shards, different for every ``(seed, epoch)``.

    Args:
        data: What to sample: an ofindex ``Dataset``, any object with ``len()``, or a number
            of records.
        num_replicas: The number of ranks (``None``: from ``torch.distributed`` if a process
            group is initialised, else 1).
        rank: This rank (``None``: from ``torch.distributed``, else 0).
        drop_last: Drop the epoch's last positions that do not split evenly over the ranks
            instead of repeating a few records (with a warning).
        seed: Selects the order, with the epoch.
        rounds: Feistel rounds of the permutation (more mix better and cost more time).

    Raises:
        TypeError: ``data`` is none of the accepted forms.
        ValueError: ``data`` has no records, ``num_replicas``/``rank`` are invalid, or
            ``rounds < 2`` (when the first order is made).
    """

    def __init__(self, data: Data, *, num_replicas: int | None = None, rank: int | None = None,
                 drop_last: bool = False, seed: int = 0, rounds: int = DEFAULT_ROUNDS) -> None:
        super().__init__(data, num_replicas=num_replicas, rank=rank, drop_last=drop_last, seed=seed)
        self.rounds = int(rounds)

    def _params(self) -> dict[str, Any]:
        return {"rounds": self.rounds}

    def _make_order(self, epoch: int) -> EpochOrder:
        return GlobalShuffleOrder(self.n, self.seed, epoch, self.rounds)


class BlockShuffleSampler(_EpochSampler):
    """Locality-aware shuffle for cloud reads (see :class:`.orders.BlockShuffleOrder`).

    Blocks of ``block_size`` consecutive records of one shard are shuffled globally, then
    the records of each window of ``window`` blocks are shuffled together: a batch touches
    about ``window`` blocks (one range read each) instead of one range per record.

    Args:
        data: What to sample, as for the other samplers: an ofindex ``Dataset`` (its
            ``cumulative_counts`` give the shard boundaries), any object with ``len()``
            (one shard, unless it has ``cumulative_counts`` too), or a number of records
            (one shard). A list, tuple or array of numbers is read as per-shard record
            counts (the older form of ``shard_sizes``).
        shard_sizes: Per-shard record counts in dataset order, instead of ``data``.
        block_size: Consecutive records per block.
        window: Blocks per shuffling window.
        num_replicas: The number of ranks (``None``: from ``torch.distributed`` if a process
            group is initialised, else 1).
        rank: This rank (``None``: from ``torch.distributed``, else 0).
        drop_last: Drop the epoch's last positions that do not split evenly over the ranks
            instead of repeating a few records (with a warning).
        seed: Selects the order, with the epoch.
        rounds: Feistel rounds of the permutations.

    Raises:
        TypeError: Neither or both of ``data`` and ``shard_sizes`` are given, or either is
            none of the accepted forms.
        ValueError: There are no records, a shard size is negative or not whole,
            ``block_size``/``window`` is below 1, ``rounds < 2``, or
            ``num_replicas``/``rank`` are invalid.
    """

    def __init__(self, data: Data | None = None, *, shard_sizes: ShardSizes | None = None,
                 block_size: int = 64, window: int = 16, num_replicas: int | None = None,
                 rank: int | None = None, drop_last: bool = False, seed: int = 0,
                 rounds: int = DEFAULT_ROUNDS) -> None:  # fmt: skip
        self.shard_sizes = shard_sizes_of(data, shard_sizes)
        self.block_size, self.window, self.rounds = int(block_size), int(window), int(rounds)
        super().__init__(sum(self.shard_sizes), num_replicas=num_replicas, rank=rank,
                         drop_last=drop_last, seed=seed)  # fmt: skip
        self._make_order(0)  # validate parameters now

    @classmethod
    def for_dataset(cls: type[_B], dataset: Data, **kwargs: Any) -> _B:
        """Build from a dataset; the same as ``BlockShuffleSampler(dataset, **kwargs)``.

        Args:
            dataset: An ofindex ``Dataset`` (or anything the constructor accepts as data).
            **kwargs: The constructor's keyword arguments (``block_size``, ``seed``...).

        Returns:
            The sampler.

        Raises:
            TypeError: ``dataset`` is none of the accepted forms.
            ValueError: As for the constructor.
        """
        return cls(dataset, **kwargs)

    def _params(self) -> dict[str, Any]:
        return {"block_size": self.block_size, "window": self.window, "rounds": self.rounds,
                "num_shards": len(self.shard_sizes),
                "shards_hash": hash(tuple(self.shard_sizes))}  # fmt: skip

    def _make_order(self, epoch: int) -> EpochOrder:
        return BlockShuffleOrder(self.shard_sizes, self.block_size, self.window, self.seed,
                                 epoch, self.rounds)  # fmt: skip


class BatchSampler:
    """Groups a sampler's indices into lists of ``batch_size`` (for ``DataLoader(batch_sampler=)``).

    Checkpointing (``state_dict``/``load_state_dict``) and ``set_epoch`` delegate to the
    wrapped sampler, whose position advances one batch at a time.

    Args:
        sampler: One of the samplers of this module (or their torch versions).
        batch_size: Indices per batch.
        drop_last: Drop a final batch shorter than ``batch_size``.

    Raises:
        TypeError: ``sampler`` is not one of these samplers.
        ValueError: ``batch_size < 1``.
    """

    def __init__(self, sampler: _EpochSampler, batch_size: int, drop_last: bool = False) -> None:
        if not isinstance(sampler, _EpochSampler):
            raise TypeError("BatchSampler wraps a SequentialSampler, GlobalShuffleSampler or "
                            f"BlockShuffleSampler; got {type(sampler).__name__}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.sampler, self.batch_size, self.drop_last = sampler, int(batch_size), bool(drop_last)

    def __len__(self) -> int:
        """Batches the next ``__iter__`` yields (of the rest of the epoch if resumed)."""
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        """Iterate over the wrapped sampler's indices in batches.

        Yields:
            Lists of ``batch_size`` global record indices (the last one shorter unless
            ``drop_last``).
        """
        s, bs = self.sampler, self.batch_size
        total = len(s)
        buf: list[int] = []
        for idx in s.iter_chunks():
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

    def pass_mark(self) -> PassMark:
        """Where the next pass starts (for :class:`~ofindex.shuffle.progress.ResumableLoader`).

        Returns:
            The wrapped sampler's :meth:`next_pass`.
        """
        return self.sampler.next_pass()

    def state_after(self, mark: PassMark, batches: int, finished: bool) -> dict[str, Any]:
        """The wrapped sampler's state once every rank consumed ``batches`` batches of a pass.

        Args:
            mark: From :meth:`pass_mark` at the start of the pass.
            batches: Batches the loop received.
            finished: The pass ended (a dropped short batch counts as consumed).

        Returns:
            The state dict, for :meth:`load_state_dict`.
        """
        return RecordBatches(self.sampler, self.batch_size, self.drop_last).state_after(
            mark, batches, finished)

    def set_epoch(self, epoch: int) -> None:
        """Select epoch ``epoch``'s order of the wrapped sampler (after a loaded state, see
        its ``set_epoch``).

        Args:
            epoch: The epoch number.

        Raises:
            StateError: ``epoch`` is not a whole number ``>= 0``.
        """
        self.sampler.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """The wrapped sampler's ``state_dict()``: its epoch and global position.

        Returns:
            A JSON-serialisable dict for :meth:`load_state_dict`.

        Raises:
            RuntimeError: A DataLoader with workers has taken batches the training loop has
                not received yet (save :class:`~ofindex.shuffle.progress.ResumableLoader`'s
                state instead).
        """
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the wrapped sampler at a saved position.

        Args:
            state: A dict from :meth:`state_dict`.

        Raises:
            StateError: The state does not match the wrapped sampler, or a field is missing
                or invalid (see its ``load_state_dict``).
        """
        self.sampler.load_state_dict(state)
