"""Splitting one epoch's order across distributed ranks and DataLoader workers in O(1).

An epoch is a sequence of ``n`` *epoch positions* ``0 .. n-1`` (an order maps each position to a
record index).  A :class:`Partition` gives one consumer (a rank, or a rank's worker) its share:

* strided: consumer ``r`` of ``W`` gets positions ``start + j*W + r`` for ``j = 0, 1, ...``, so
  after every consumer has taken ``j`` items the consumed set is exactly the prefix
  ``[start, start + j*W)`` of the epoch.  That makes a checkpoint a single number (the global
  position) and lets a run resume with a different number of ranks.
* equal-sized: every consumer gets ``len(partition)`` items, so collective ops never hang.
  - ``drop_last=False`` (default, like ``torch.utils.data.DistributedSampler``): the share is
    ``ceil(remaining / W)`` and the missing tail positions wrap to the start of the epoch
    (``position % n``), i.e. **padding repeats up to W-1 records** in that epoch (a warning is
    emitted).  Evaluation code that must see each record once should use ``drop_last=True`` or
    ``world_size`` dividing ``n``.
  - ``drop_last=True``: the share is ``floor(remaining / W)``; the last ``remaining % W``
    positions of the epoch are not visited in that epoch (another epoch's order drops others).
* disjoint and complete: the shares of all consumers are disjoint and together cover every
  position of ``[start, n)`` (without drop_last), plus the padding.

Workers: ``partition.split(num_workers, worker_id)`` subdivides with the same strided rule over
``W * num_workers`` consumers (worker ``k`` of rank ``r`` is consumer ``k*W + r``).  This is for
iterable-style pipelines; with a map-style dataset the sampler runs in the main process and
DataLoader workers only fetch, so no worker split is needed.
"""

import sys
import warnings
from dataclasses import dataclass

import numpy as np

__all__ = ["Partition", "resolve_distributed"]


def resolve_distributed(
    num_replicas: int | None = None, rank: int | None = None
) -> tuple[int, int]:
    """Resolve the world size and this process's rank.

    torch is never imported here: if it is not already imported, no process group can exist.

    Args:
        num_replicas: The number of ranks; ``None``: ``torch.distributed``'s world size when
            a process group is initialised, else 1.
        rank: This process's rank; ``None``: ``torch.distributed``'s rank when a process
            group is initialised, else 0.

    Returns:
        ``(num_replicas, rank)`` as ints.

    Raises:
        ValueError: ``num_replicas < 1`` or ``rank`` is outside ``[0, num_replicas)``.
    """
    if num_replicas is None or rank is None:
        world, me = 1, 0
        torch = sys.modules.get("torch")
        dist = getattr(torch, "distributed", None) if torch is not None else None
        if dist is not None and dist.is_available() and dist.is_initialized():
            world, me = dist.get_world_size(), dist.get_rank()
        num_replicas = world if num_replicas is None else num_replicas
        rank = me if rank is None else rank
    num_replicas, rank = int(num_replicas), int(rank)
    if num_replicas < 1:
        raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
    if not 0 <= rank < num_replicas:
        raise ValueError(f"rank must be in [0, {num_replicas}), got {rank}")
    return num_replicas, rank


@dataclass(frozen=True)
class Partition:
    """One consumer's strided share of the epoch positions ``[start, n)``.

    Consumer ``rank`` of ``num_replicas`` gets the positions ``start + j*num_replicas + rank``
    for ``j = 0 .. len(partition) - 1`` (see the module docstring for padding and
    ``drop_last``). ``len(partition)`` is the same for every consumer.

    Args:
        n: The number of positions in the epoch.
        num_replicas: The number of consumers sharing the epoch.
        rank: This consumer's number, in ``[0, num_replicas)``.
        drop_last: Drop the last ``remaining % num_replicas`` positions instead of padding
            the shares with positions from the start of the epoch.
        start: The first epoch position still to visit (a resume point), in ``[0, n]``.

    Raises:
        ValueError: ``n < 0``, ``num_replicas < 1``, ``rank`` outside
            ``[0, num_replicas)`` or ``start`` outside ``[0, n]``.
    """

    n: int
    num_replicas: int = 1
    rank: int = 0
    drop_last: bool = False
    start: int = 0

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError(f"n must be >= 0, got {self.n}")
        if self.num_replicas < 1 or not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"bad rank {self.rank} for num_replicas {self.num_replicas}")
        if not 0 <= self.start <= max(self.n, 0):
            raise ValueError(f"start must be in [0, {self.n}], got {self.start}")

    @property
    def remaining(self) -> int:
        """Epoch positions from ``start`` to the end of the epoch."""
        return self.n - self.start

    def __len__(self) -> int:
        """The number of items of this consumer's share (equal for all consumers)."""
        w = self.num_replicas
        return self.remaining // w if self.drop_last else -(-self.remaining // w)

    @property
    def padding(self) -> int:
        """How many positions, over all consumers, repeat a record to equalise the shares."""
        return 0 if self.drop_last else len(self) * self.num_replicas - self.remaining

    def warn_if_padding(self) -> None:
        """Emit a ``UserWarning`` when padding repeats records this epoch (see :attr:`padding`)."""
        if self.padding:
            warnings.warn(
                f"{self.remaining} positions do not split evenly over {self.num_replicas} "
                f"consumers: {self.padding} record(s) are repeated this epoch as padding "
                "(pass drop_last=True to drop them instead)",
                stacklevel=3,
            )

    def positions(self, begin: int = 0, end: int | None = None) -> np.ndarray:
        """The epoch positions of this consumer's items ``begin .. end-1``.

        Args:
            begin: The first item of the share (clipped to 0).
            end: The end item, exclusive (clipped to ``len(self)``; ``None``: ``len(self)``).

        Returns:
            An int64 array of positions in ``[0, n)`` (padding wraps to the epoch's start).
        """
        end = len(self) if end is None else min(int(end), len(self))
        begin = max(0, int(begin))
        j = np.arange(begin, max(begin, end), dtype=np.int64)
        p = self.start + j * self.num_replicas + self.rank
        if not self.drop_last and p.size and p[-1] >= self.n:
            np.remainder(p, self.n, out=p)  # padding wraps to the start of the epoch
        return p

    def global_position(self, consumed: int) -> int:
        """The epoch position reached once every consumer has taken ``consumed`` items.

        Args:
            consumed: Items taken by each consumer since ``start``.

        Returns:
            ``start + consumed * num_replicas``, at most ``n``.
        """
        return min(self.n, self.start + int(consumed) * self.num_replicas)

    def split(self, num_workers: int, worker_id: int) -> "Partition":
        """This share split further over the workers of this consumer.

        Worker ``k`` of consumer ``r`` becomes consumer ``k * num_replicas + r`` of
        ``num_replicas * num_workers`` (see the module docstring).

        Args:
            num_workers: The number of workers of this consumer.
            worker_id: The worker's number, in ``[0, num_workers)``.

        Returns:
            The worker's :class:`Partition` (same ``n``, ``drop_last`` and ``start``).

        Raises:
            ValueError: ``num_workers < 1`` or ``worker_id`` outside ``[0, num_workers)``.
        """
        if num_workers < 1 or not 0 <= worker_id < num_workers:
            raise ValueError(f"bad worker_id {worker_id} for num_workers {num_workers}")
        return Partition(
            self.n,
            self.num_replicas * num_workers,
            worker_id * self.num_replicas + self.rank,
            self.drop_last,
            self.start,
        )
