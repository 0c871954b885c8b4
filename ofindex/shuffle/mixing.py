"""Weighted mixing of several datasets: :class:`MixtureSampler`, a resumable batch sampler.

Each batch draws from the sources in fixed proportions (exact per batch, or sampled), each
source globally shuffled and restarting on its own next epoch (a new order) when it runs
out: see :mod:`ofindex.shuffle.mixplan` for the exact definition.  Memory is O(number of
sources), whatever the sizes.

* **Epochs.**  A mixture epoch is ``len`` batches, chosen by ``epoch_size``: ``"sum"`` (the
  default) as many records as all sources hold together, ``"first"`` the batches in which
  source 0 is read once (``ceil(n_0 / c_0)``), or a number of records; rounded down to whole
  batches (at least one).  Source epochs run on independently of mixture epochs.
* **Ranks.**  Batch ``p`` of an epoch goes to rank ``p mod W`` (a strided
  :class:`~ofindex.shuffle.partition.Partition` of the epoch's batches), so every rank's
  batch has the exact proportions, and every rank gets the same number of batches:
  ``drop_last=True`` drops the last ``len mod W`` batches of the epoch, ``False`` repeats
  the first ones of the epoch instead (with a warning).  ``len(sampler)`` is exact before
  the epoch starts.
* **Checkpoints.**  The state is global: the mixture epoch, the batch position reached and
  every source's stream offset.  Resume with any number of ranks or DataLoader workers
  (through :class:`~ofindex.shuffle.progress.ResumableLoader`, which counts the batches the
  training loop received), and with new weights: they apply from the saved position on,
  the streams continue where they were.  After ``load_state_dict`` the run's own loop over
  epochs resumes it (:mod:`ofindex.shuffle.cursor`); a state is checked field by field
  (:mod:`ofindex.shuffle.state`).
* Batches are lists of global indices ``offset_s + record`` (``offset_s`` the records of the
  sources before ``s``), the indices of
  :class:`ofindex.integrations.torch.MixtureBatches` and of the sources read one after the
  other; :meth:`MixtureSampler.source_of` gives each index's source.
"""

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ._data import Data, identity_of, record_count
from .cursor import Passes, PassMark
from .lookahead import Driver, batches_ahead, called_by, driving_loader
from .mixplan import MixturePlan
from .partition import resolve_distributed
from .permutation import DEFAULT_ROUNDS
from .state import STATE_VERSION, check_mixture_epoch, epoch_number, read_mixture_state

__all__ = ["MixtureSampler"]

_CHUNK = 64  # batches made together (one permutation call per source for all of them)


class _Offsets:
    """``K(g)``, the stream offsets at a batch, walked from the last batch asked (O(1) in
    exact mode, O(batches walked) in sampled mode)."""

    def __init__(self, plan: MixturePlan, batch: int, offsets: np.ndarray) -> None:
        self.plan, self.batch, self.offsets = plan, batch, offsets.astype(np.int64)

    def at(self, batch: int) -> np.ndarray:
        if batch != self.batch:
            self.offsets = self.offsets + self.plan.counts_between(self.batch, batch)
            self.batch = batch
        return self.offsets


class MixtureSampler(Passes):
    """Batches of a weighted mixture of several datasets, resumable and split over ranks.

    Use it as a DataLoader's ``sampler`` with ``batch_size=None`` over a dataset whose
    indices are the sources' records one after the other
    (:class:`ofindex.integrations.torch.MixtureBatches`).

    Args:
        sources: The sources: ofindex ``Dataset``\\ s, objects with ``len()``, or record counts.
        weights: A positive weight per source (any scale).
        batch_size: Records per batch.
        seed: Selects the sources' orders (and the draws when ``sampled``).
        sampled: Draw each record's source at random with the weights' probabilities instead
            of exact per-batch counts.
        epoch_size: ``"sum"``, ``"first"`` or a number of records (see the module docstring).
        num_replicas: The number of ranks (``None``: from ``torch.distributed`` if a process
            group is initialised, else 1).
        rank: This rank (``None``: from ``torch.distributed``, else 0).
        drop_last: Drop the epoch's last batches that do not split evenly over the ranks
            instead of repeating the epoch's first ones.
        rounds: Feistel rounds of the sources' permutations.

    Raises:
        TypeError: A source is none of the accepted forms.
        ValueError: A source is empty, the weights do not fit the sources, ``batch_size < 1``,
            ``epoch_size`` is neither ``"sum"``, ``"first"`` nor a positive number,
            ``"first"`` gives source 0 no record per batch, or ``num_replicas``/``rank`` are
            invalid.
    """

    def __init__(self, sources: Sequence[Data], weights: Sequence[float], batch_size: int, *,
                 seed: int = 0, sampled: bool = False, epoch_size: str | int = "sum",
                 num_replicas: int | None = None, rank: int | None = None,
                 drop_last: bool = False, rounds: int = DEFAULT_ROUNDS) -> None:
        sizes = [record_count(s, "MixtureSampler") for s in sources]
        #: The identities of the datasets mixed (states carry them; ``None`` for a count).
        self.datasets = [identity_of(s) for s in sources]
        self.plan = MixturePlan(sizes, weights, batch_size, seed, sampled, rounds)
        self.epoch_size = epoch_size
        self.num_batches = self._epoch_batches(epoch_size)
        self.num_replicas, self.rank = resolve_distributed(num_replicas, rank)
        self.drop_last = bool(drop_last)
        self._base = (0, np.zeros(len(sizes), dtype=np.int64))  # (batch g0, K(g0))
        self._start_passes()
        self._driver: Driver | None = None
        self._walker: _Offsets | None = None

    def _epoch_batches(self, epoch_size: str | int) -> int:
        plan, size = self.plan, epoch_size
        if size == "sum":
            return max(1, sum(plan.sizes) // plan.batch_size)
        if size == "first":
            if plan.sampled or plan.counts[0] < 1:
                raise ValueError("epoch_size='first' needs exact counts with at least one "
                                 f"record of source 0 per batch (counts {plan.counts}); "
                                 "give a number of records instead")
            return -(-plan.sizes[0] // plan.counts[0])
        if isinstance(size, (int, np.integer)) and not isinstance(size, bool) and size > 0:
            return max(1, int(size) // plan.batch_size)
        raise ValueError(f"epoch_size must be 'sum', 'first' or a positive number of records, "
                         f"got {size!r}")

    @property
    def sizes(self) -> list[int]:
        """Records per source."""
        return self.plan.sizes

    @property
    def counts(self) -> list[int]:
        """Exact records of each source per batch (the mean counts in sampled mode)."""
        return self.plan.counts

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_driver"] = None
        return state

    # -- epochs, ranks --------------------------------------------------------------------
    @property
    def positions(self) -> int:
        """The positions of an epoch: its batches."""
        return self.num_batches

    @property
    def epoch(self) -> int:
        """The mixture epoch selected by :meth:`set_epoch` (or by :meth:`load_state_dict`)."""
        return self._cursor.epoch

    def set_epoch(self, epoch: int) -> None:
        """Select mixture epoch ``epoch`` for the next pass.

        After :meth:`load_state_dict` of a state saved in epoch ``E`` at batch ``P``, an
        epoch before ``E`` gives an empty pass (finished before the checkpoint), ``E``
        resumes at ``P``, a later epoch starts at its beginning
        (:mod:`ofindex.shuffle.cursor`).

        Args:
            epoch: The mixture epoch, a whole number ``>= 0``.

        Raises:
            StateError: ``epoch`` is not a whole number ``>= 0``, or so large that the
                sources' streams would pass ``2**62`` records.
        """
        who = "MixtureSampler.set_epoch"
        epoch = epoch_number(epoch, who)
        check_mixture_epoch(epoch, self.num_batches, self.plan.batch_size, who)
        self._cursor.select(epoch)
        self._restart()

    def __len__(self) -> int:
        """Batches the next pass yields on this rank (the rest of the epoch if resumed)."""
        return len(self.next_pass())

    def source_of(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The source of each global index.

        Args:
            indices: Global indices (``offset_s + record``).

        Returns:
            An int64 array of source numbers.
        """
        found = np.searchsorted(self.plan.offsets, np.asarray(indices, dtype=np.int64),
                                side="right") - 1
        return found.astype(np.int64)

    def _offsets(self) -> _Offsets:
        """A fresh walker from the base (one per pass)."""
        return _Offsets(self.plan, *self._base)

    def _offsets_at(self, batch: int) -> np.ndarray:
        """``K(batch)`` from the walker kept for checkpoints (they move forward)."""
        if self._walker is None:
            self._walker = self._offsets()
        return self._walker.at(batch)

    def batch_at(self, epoch: int, position: int) -> tuple[np.ndarray, np.ndarray]:
        """One batch of the mixture.

        Args:
            epoch: The mixture epoch.
            position: The batch position within the epoch.

        Returns:
            ``(sources, indices)`` as in :meth:`MixturePlan.batch`.
        """
        g = epoch * self.num_batches + position
        sources, indices = self.plan.batch(g, self._offsets_at(g))
        return sources, self._mapped(indices)

    def _mapped(self, indices: np.ndarray) -> np.ndarray:
        """What the mixture's global indices stand for in what this sampler yields (the
        indices themselves; a subclass drawing from groups of one dataset maps them)."""
        return indices

    def __iter__(self) -> Iterator[list[int]]:
        """This rank's batches of the rest of the epoch.

        Warns with a ``UserWarning`` when the epoch's batches are padded with repeated ones.

        Yields:
            Lists of ``batch_size`` global indices, ``len(self)`` of them.
        """
        mark = self.begin_pass()
        self._driver = driving_loader()
        if mark.held:
            return
        part = mark.partition
        part.warn_if_padding()
        offsets, first = self._offsets(), mark.epoch * self.num_batches
        for j in range(0, len(part), _CHUNK):
            batches = part.positions(j, j + _CHUNK) + first
            starts = np.stack([offsets.at(int(g)) for g in batches])
            _, indices = self.plan.batches(batches, starts)
            for row in self._mapped(indices).tolist():
                self._consumed += 1
                yield row

    # -- checkpoints ----------------------------------------------------------------------
    def pass_mark(self) -> PassMark:
        """Where the next pass starts (for :class:`~ofindex.shuffle.progress.ResumableLoader`).

        Returns:
            :meth:`next_pass`.
        """
        return self.next_pass()

    def state_after(self, mark: PassMark, batches: int, finished: bool) -> dict[str, Any]:
        """The state once every rank consumed ``batches`` batches of a pass.

        Args:
            mark: From :meth:`pass_mark` at the start of the pass.
            batches: Batches the loop received on each rank.
            finished: The pass ended.

        Returns:
            A JSON-serialisable dict for :meth:`load_state_dict`.
        """
        return self.state_at(mark.epoch, mark.position(int(batches), finished))

    def state_at(self, epoch: int, position: int) -> dict[str, Any]:
        """The state at a given batch position of an epoch.

        Args:
            epoch: The mixture epoch.
            position: The batch position reached, in ``[0, len]``.

        Returns:
            A JSON-serialisable dict for :meth:`load_state_dict`.
        """
        g = epoch * self.num_batches + position
        return {
            "version": STATE_VERSION,
            **self.compatibility(),
            "weights": list(self.plan.weights),
            "epoch": int(epoch),
            "position": int(position),
            "offsets": [int(k) for k in self._offsets_at(g)],
        }

    def compatibility(self) -> dict[str, Any]:
        """What a state must share with this sampler to be loaded: its kind, the sources'
        sizes, seed, batch size and mode (written into every state, compared by
        :func:`ofindex.shuffle.state.check_compatible`; the weights may differ).

        Returns:
            The fields and their values.
        """
        plan = self.plan
        return {"sampler": type(self).__name__, "sizes": list(plan.sizes), "seed": plan.seed,
                "batch_size": plan.batch_size, "sampled": plan.sampled, "rounds": plan.rounds,
                "datasets": list(self.datasets)}

    def state_dict(self) -> dict[str, Any]:
        """Where to resume: the epoch, batch position and source stream offsets reached.

        Exact when iterated by the loop itself or a DataLoader without workers; with workers
        save :class:`~ofindex.shuffle.progress.ResumableLoader`'s state.

        Returns:
            A JSON-serialisable dict of O(number of sources) size.

        Raises:
            RuntimeError: A DataLoader with workers holds batches of this sampler that the
                training loop has not received yet.
        """
        ahead = batches_ahead(self._driver)
        if ahead and not (self._driver is not None and called_by(self._driver)):
            raise RuntimeError(
                f"MixtureSampler.state_dict(): a DataLoader with worker processes holds "
                f"{'some' if ahead < 0 else ahead} batch(es) of this sampler that the training "
                "loop has not received yet, so its position is ahead of training; save the "
                "loader's state instead: loader = ofindex.shuffle.ResumableLoader("
                "DataLoader(...)) and loader.state_dict()")
        mark = self._pass
        return self.state_at(mark.epoch, mark.position(self._consumed, finished=False))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at a saved state, with this sampler's weights from there on.

        The state may come from a run with other weights (re-weighting: the sources' streams
        continue at their saved offsets) or another number of ranks.  Epochs before the
        saved one give empty passes until it is reached (see :meth:`set_epoch`).

        Args:
            state: A dict from :meth:`state_dict` or :meth:`state_after` (possibly through
                JSON).

        Raises:
            StateError: The state has another version, or was saved for other sources,
                seed, batch size or mode, or a field is missing, unknown, of the wrong type
                or out of range (a batch position outside the epoch, a negative offset).
        """
        resume = read_mixture_state(state, self.compatibility(), len(self.plan.sizes),
                                    self.num_batches, self.plan.batch_size)
        self._cursor.load(resume.epoch, resume.position)
        self._base = (resume.epoch * self.num_batches + resume.position,
                      np.asarray(resume.offsets, dtype=np.int64))
        self._walker = None
        self._restart()
