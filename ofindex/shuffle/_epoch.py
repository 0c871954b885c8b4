"""The machinery every sampler shares: epochs, the rank partition, iteration, checkpoints."""

from collections.abc import Iterator
from typing import Any

import numpy as np

from ._data import Data, record_count
from .lookahead import Driver, batches_ahead, called_by, driving_loader
from .orders import EpochOrder
from .partition import Partition, resolve_distributed

_STATE_VERSION = 1
_CHUNK = 1 << 14


class _EpochSampler:
    """Common machinery; subclasses define ``_make_order()`` and ``_params()``.

    Args:
        data: What to sample: an ofindex ``Dataset``, any object with ``len()``, or a number
            of records.
        num_replicas: The number of ranks (``None``: from ``torch.distributed`` if a process
            group is initialised, else 1).
        rank: This rank (``None``: from ``torch.distributed``, else 0).
        drop_last: Drop the epoch's last positions that do not split evenly over the ranks,
            instead of repeating a few records (with a warning) to even out the shares.
        seed: Selects the order, with the epoch (see :meth:`set_epoch`).

    Raises:
        TypeError: ``data`` is none of the accepted forms.
        ValueError: ``data`` has no records, or ``num_replicas``/``rank`` are invalid.
    """

    def __init__(
        self,
        data: Data,
        *,
        num_replicas: int | None = None,
        rank: int | None = None,
        drop_last: bool = False,
        seed: int = 0,
    ) -> None:
        self.n = record_count(data, type(self).__name__)
        self.num_replicas, self.rank = resolve_distributed(num_replicas, rank)
        self.drop_last = bool(drop_last)
        self.seed = int(seed)
        self.epoch = 0
        self._resume = 0  # global epoch position where the next __iter__ starts
        self._pass_start = 0  # global epoch position where the current pass started
        self._consumed = 0  # items yielded by the current pass on this rank
        self._order_cache: tuple[int, EpochOrder] | None = None
        self._driver: Driver | None = None  # the DataLoader pulling the current pass, if any

    # -- order ------------------------------------------------------------------------------
    def _make_order(self) -> EpochOrder:
        raise NotImplementedError

    def _params(self) -> dict[str, Any]:
        return {}

    def order(self) -> EpochOrder:
        """The order of the current epoch.

        Returns:
            A callable mapping epoch positions (int64 array) to record indices, with ``n``.
        """
        if self._order_cache is None or self._order_cache[0] != self.epoch:
            self._order_cache = (self.epoch, self._make_order())
        return self._order_cache[1]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_order_cache"] = None
        state["_driver"] = None
        return state

    # -- epochs and partition ---------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Select the order of epoch ``epoch`` for the next ``__iter__``.

        A resume point loaded by :meth:`load_state_dict` for another epoch is dropped.

        Args:
            epoch: The epoch number.
        """
        epoch = int(epoch)
        if epoch != self.epoch:
            self._resume = 0
        self.epoch = epoch

    def partition(self, start: int | None = None) -> Partition:
        """This rank's share of the epoch positions.

        Args:
            start: The first epoch position to share out (``None``: the resume point,
                0 unless a state was loaded).

        Returns:
            The :class:`~ofindex.shuffle.partition.Partition` of ``[start, n)`` for this rank.

        Raises:
            ValueError: ``start`` is outside ``[0, n]``.
        """
        start = self._resume if start is None else start
        return Partition(self.n, self.num_replicas, self.rank, self.drop_last, start)

    def __len__(self) -> int:
        """Items the next ``__iter__`` yields on this rank (the rest of the epoch if resumed)."""
        return len(self.partition())

    def _iter_chunks(self, chunk: int = _CHUNK) -> Iterator[np.ndarray]:
        part = self.partition()
        part.warn_if_padding()
        self._pass_start, self._consumed, self._resume = part.start, 0, 0
        self._driver = driving_loader()
        order = self.order()
        for j in range(0, len(part), chunk):
            yield order(part.positions(j, j + chunk))

    def __iter__(self) -> Iterator[int]:
        """Iterate over this rank's share of the epoch, from the resume point if one was loaded.

        Warns with a ``UserWarning`` when the shares are padded with repeated records.

        Yields:
            Global record indices (Python ints), ``len(self)`` of them.
        """
        for idx in self._iter_chunks():
            for i in idx.tolist():
                self._consumed += 1
                yield i

    # -- checkpointing ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where to resume: the epoch and the global epoch position reached.

        Exact when the sampler is iterated by the training loop itself, by a ``DataLoader``
        without workers, or saved by torchdata's ``StatefulDataLoader``.  A ``DataLoader``
        with workers takes batches ahead of the loop: save
        :class:`~ofindex.shuffle.progress.ResumableLoader`'s state instead.

        Returns:
            A JSON-serialisable dict of O(1) size for :meth:`load_state_dict`.

        Raises:
            RuntimeError: A DataLoader with workers has taken indices from this sampler that
                the training loop has not received yet (its position is ahead of training).
        """
        ahead = batches_ahead(self._driver)
        if ahead and not (self._driver is not None and called_by(self._driver)):
            raise RuntimeError(self._ahead_message(ahead))
        part = self.partition(self._pass_start)
        return self.state_at(self.epoch, part.global_position(self._consumed), self._consumed)

    def _ahead_message(self, ahead: int) -> str:
        workers = self._driver.num_workers if self._driver is not None else 0
        held = "some batches" if ahead < 0 else f"{ahead} batch(es)"
        position = self.partition(self._pass_start).global_position(self._consumed)
        return (f"{type(self).__name__}.state_dict(): a DataLoader with {workers} worker(s) "
                f"has taken {held} of indices from this sampler that the training loop has "
                f"not received yet, so the sampler's position ({position} of {self.n}) is "
                "ahead of training and resuming from it would skip those records; save the "
                "loader's state instead: loader = ofindex.shuffle.ResumableLoader("
                "DataLoader(...)) and loader.state_dict() (or torchdata's StatefulDataLoader "
                "and its state_dict())")

    def state_at(self, epoch: int, position: int, consumed: int = 0) -> dict[str, Any]:
        """The state of this sampler at a given place of an epoch.

        Args:
            epoch: The epoch.
            position: The global epoch position reached, in ``[0, n]``.
            consumed: Items this rank took in the pass (informational).

        Returns:
            A JSON-serialisable dict of O(1) size for :meth:`load_state_dict`.
        """
        return {
            "version": _STATE_VERSION,
            "sampler": type(self).__name__,
            "n": self.n,
            "seed": self.seed,
            "params": self._params(),
            "epoch": int(epoch),
            "position": int(position),
            "num_replicas": self.num_replicas,
            "consumed": int(consumed),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next ``__iter__`` continues at the saved global position.

        The saved state may come from a run with another number of ranks.

        Args:
            state: A dict from :meth:`state_dict` (possibly through JSON).

        Raises:
            ValueError: The state has another version, or was saved by another kind of
                sampler, or for another dataset size, seed or order parameters, or its
                position is outside ``[0, n]``.
            KeyError: The state lacks ``"position"`` or ``"epoch"``.
        """
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
