"""The machinery every sampler shares: epochs, the rank partition, iteration, checkpoints."""

from collections.abc import Iterator
from typing import Any

import numpy as np

from ._data import Data, identity_of, record_count
from .cursor import Passes
from .lookahead import Driver, batches_ahead, called_by, driving_loader
from .orders import EpochOrder
from .partition import resolve_distributed
from .state import STATE_VERSION, epoch_number, read_sampler_state

_CHUNK = 1 << 14


class _EpochSampler(Passes):
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
        #: The identity of the dataset sampled (states carry it), or ``None``.
        self.dataset = identity_of(data)
        self.num_replicas, self.rank = resolve_distributed(num_replicas, rank)
        self.drop_last = bool(drop_last)
        self.seed = int(seed)
        self._start_passes()
        self._order_cache: tuple[int, EpochOrder] | None = None
        self._driver: Driver | None = None  # the DataLoader pulling the current pass, if any

    # -- order ------------------------------------------------------------------------------
    def _make_order(self, epoch: int) -> EpochOrder:
        raise NotImplementedError

    def _params(self) -> dict[str, Any]:
        return {}

    @property
    def positions(self) -> int:
        """The positions of an epoch: its records."""
        return self.n

    @property
    def epoch(self) -> int:
        """The epoch selected by :meth:`set_epoch` (or by :meth:`load_state_dict`)."""
        return self._cursor.epoch

    def order_of(self, epoch: int) -> EpochOrder:
        """The order of an epoch (the sampler's epoch and resume point stay as they are).

        Args:
            epoch: The epoch.

        Returns:
            A callable mapping epoch positions (int64 array) to record indices, with ``n``.
        """
        if self._order_cache is None or self._order_cache[0] != epoch:
            self._order_cache = (epoch, self._make_order(epoch))
        return self._order_cache[1]

    def order(self) -> EpochOrder:
        """The order of the current epoch.

        Returns:
            A callable mapping epoch positions (int64 array) to record indices, with ``n``.
        """
        return self.order_of(self.epoch)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_order_cache"] = None
        state["_driver"] = None
        return state

    # -- epochs and partition ---------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Select the order of epoch ``epoch`` for the next ``__iter__``.

        After :meth:`load_state_dict` of a state saved in epoch ``E`` at position ``P``, an
        epoch before ``E`` gives an empty pass (it was finished before the checkpoint),
        ``E`` resumes at ``P``, and a later epoch starts at its beginning (see
        :mod:`ofindex.shuffle.cursor`).

        Args:
            epoch: The epoch number, a whole number ``>= 0``.

        Raises:
            StateError: ``epoch`` is not a whole number ``>= 0``.
        """
        self._cursor.select(epoch_number(epoch, f"{type(self).__name__}.set_epoch"))
        self._restart()

    def __len__(self) -> int:
        """Items the next ``__iter__`` yields on this rank (the rest of the epoch if resumed)."""
        return len(self.next_pass())

    def iter_chunks(self, chunk: int = _CHUNK) -> Iterator[np.ndarray]:
        """Start a pass and yield its positions in order, ``chunk`` at a time (the batch
        sampler cuts batches out of them).

        Args:
            chunk: Positions per array.

        Yields:
            Global record positions (int64 arrays).
        """
        mark = self.begin_pass()
        self._driver = driving_loader()
        if mark.held:
            return
        part = mark.partition
        part.warn_if_padding()
        order = self.order_of(mark.epoch)
        for j in range(0, len(part), chunk):
            yield order(part.positions(j, j + chunk))

    def __iter__(self) -> Iterator[int]:
        """Iterate over this rank's share of the epoch, from the resume point if one was loaded.

        Warns with a ``UserWarning`` when the shares are padded with repeated records.

        Yields:
            Global record indices (Python ints), ``len(self)`` of them.
        """
        for idx in self.iter_chunks():
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
        position = self._pass.position(self._consumed, finished=False)
        return self.state_at(self._pass.epoch, position, self._consumed)

    def _ahead_message(self, ahead: int) -> str:
        workers = self._driver.num_workers if self._driver is not None else 0
        held = "some batches" if ahead < 0 else f"{ahead} batch(es)"
        position = self._pass.position(self._consumed, finished=False)
        return (f"{type(self).__name__}.state_dict(): a DataLoader with {workers} worker(s) "
                f"has taken {held} of indices from this sampler that the training loop has "
                f"not received yet, so the sampler's position ({position} of {self.n}) is "
                "ahead of training and resuming from it would skip those records; save the "
                "loader's state instead: loader = ofindex.shuffle.ResumableLoader("
                "DataLoader(...)) and loader.state_dict() (or torchdata's StatefulDataLoader "
                "and its state_dict())")

    def compatibility(self) -> dict[str, Any]:
        """What a state must share with this sampler to be loaded: its kind, dataset size,
        seed, order parameters and the dataset's identity (written into every state, compared
        by
        :func:`ofindex.shuffle.state.check_compatible`).

        Returns:
            The fields and their values.
        """
        return {"sampler": type(self).__name__, "n": self.n, "seed": self.seed,
                "params": self._params(), "dataset": self.dataset}

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
            "version": STATE_VERSION,
            **self.compatibility(),
            "epoch": int(epoch),
            "position": int(position),
            "num_replicas": self.num_replicas,
            "consumed": int(consumed),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next pass of the saved epoch continues at the saved global position.

        The saved state may come from a run with another number of ranks.  Epochs before
        the saved one give empty passes until it is reached (see :meth:`set_epoch`).

        Args:
            state: A dict from :meth:`state_dict` (possibly through JSON).

        Raises:
            StateError: The state has another version, was saved by another kind of sampler
                or for another dataset size, seed or order parameters, or a field is
                missing, unknown, not a whole number or out of range (position outside
                ``[0, n]``, a negative epoch).
        """
        resume = read_sampler_state(state, type(self).__name__, self.compatibility(), self.n)
        self._cursor.load(resume.epoch, resume.position)
        self._restart()
