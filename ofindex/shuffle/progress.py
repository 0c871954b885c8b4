"""Checkpoints of what the training loop consumed: :class:`ResumableLoader`.

A loader that prefetches (a ``torch.utils.data.DataLoader`` with workers, Grain's
``mp_prefetch``) takes batches from its sampler ahead of the training loop, so the sampler's
own position is past what was trained on.  :class:`ResumableLoader` wraps the loader, counts
the batches it hands to the loop, and turns that count into the sampler's *global* state
(seed, epoch, position; for a mixture also the per-source stream offsets): the state of the
first ``j`` batches of the pass on every rank.  It depends on neither the number of workers
nor the loader's prefetching, so a run resumes exactly with another ``num_workers``,
``prefetch_factor``, ``persistent_workers``, loader class or number of ranks (the remaining
positions are split over the new ranks; every rank must save after the same number of
batches, as synchronous data-parallel training does).

What a wrapped loader needs is a *tracker* (:class:`Tracker`): an object that can say, when a
pass starts, where it starts (:meth:`Tracker.pass_mark`), and the state after ``j`` of its
batches (:meth:`Tracker.state_after`).  ofindex's ``BatchSampler``, ``MixtureSampler`` and
``GrainBatches`` are trackers; a record sampler under a DataLoader's ``batch_size`` is wrapped
by :class:`RecordBatches`.  For a torch ``DataLoader`` (or torchdata's
``StatefulDataLoader``) the tracker is found on the loader (``batch_sampler`` / ``sampler`` /
``batch_size``); for other loaders give it as ``tracker=``.
"""

from collections.abc import Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

from ._epoch import _EpochSampler
from .cursor import PassMark

__all__ = ["RecordBatches", "ResumableLoader", "Tracker"]


@runtime_checkable
class Tracker(Protocol):
    """What :class:`ResumableLoader` needs of the sampler (or dataset) behind a loader."""

    def pass_mark(self) -> Any:
        """Where the next pass starts (called just before the loader is iterated).

        Returns:
            A mark for :meth:`state_after`.
        """
        ...

    def state_after(self, mark: Any, batches: int, finished: bool) -> dict[str, Any]:
        """The state once ``batches`` batches of the pass started at ``mark`` are consumed.

        Args:
            mark: From :meth:`pass_mark` at the start of the pass.
            batches: Batches the loop received.
            finished: The loader ended the pass.

        Returns:
            A JSON-serialisable state for :meth:`load_state_dict`.
        """
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at a saved state.

        Args:
            state: A dict from :meth:`state_after`.
        """
        ...

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next pass.

        Args:
            epoch: The epoch number.
        """
        ...


class RecordBatches:
    """A record sampler seen in batches of a loader's ``batch_size`` (a tracker).

    Args:
        sampler: One of the record samplers of :mod:`ofindex.shuffle.samplers`.
        batch_size: Records per batch of the loader.
        drop_last: The loader drops a short last batch.

    Raises:
        ValueError: ``batch_size < 1``.
    """

    def __init__(self, sampler: _EpochSampler, batch_size: int, drop_last: bool = False) -> None:
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.sampler, self.batch_size, self.drop_last = sampler, int(batch_size), drop_last

    def pass_mark(self) -> PassMark:
        """Where the next pass starts: the sampler's :meth:`next_pass`.

        Returns:
            The :class:`~ofindex.shuffle.cursor.PassMark`.
        """
        return self.sampler.next_pass()

    def state_after(self, mark: PassMark, batches: int, finished: bool) -> dict[str, Any]:
        """The sampler's state once every rank consumed ``batches`` batches of the pass.

        Args:
            mark: From :meth:`pass_mark` at the start of the pass.
            batches: Batches the loop received.
            finished: The loader ended the pass (a dropped short batch counts as consumed).

        Returns:
            The sampler's state dict.
        """
        items = len(mark) if finished else min(len(mark), int(batches) * self.batch_size)
        return self.sampler.state_at(mark.epoch, mark.position(items, finished), items)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the sampler (see its ``load_state_dict``).

        Args:
            state: A dict from :meth:`state_after` or the sampler's ``state_dict()``.

        Raises:
            StateError: The state does not fit the sampler, or a field is invalid.
        """
        self.sampler.load_state_dict(state)

    def set_epoch(self, epoch: int) -> None:
        """Select the sampler's epoch (after a loaded state, see its ``set_epoch``).

        Args:
            epoch: The epoch number.

        Raises:
            StateError: ``epoch`` is not a whole number ``>= 0``.
        """
        self.sampler.set_epoch(epoch)


def tracker_of(loader: object) -> Tracker:
    """The tracker behind a torch ``DataLoader`` (or anything with the same attributes).

    Args:
        loader: The loader.

    Returns:
        Its batch sampler, or its record sampler seen in batches of its ``batch_size``.

    Raises:
        TypeError: The loader's sampler is not one of ofindex's, or the loader hands
            batches out of order (``in_order=False``).
    """
    if getattr(loader, "in_order", True) is False:
        raise TypeError("ResumableLoader: this DataLoader hands batches to the loop out of "
                        "order (in_order=False), so the batches received are not the first "
                        "ones of the pass and no position describes them; use in_order=True")
    for name in ("batch_sampler", "sampler"):
        found = getattr(loader, name, None)
        if isinstance(found, Tracker):
            return found
    sampler = getattr(loader, "sampler", None)
    if isinstance(sampler, _EpochSampler):
        batch_size = getattr(loader, "batch_size", None)
        return RecordBatches(sampler, 1 if batch_size is None else int(batch_size),
                             bool(getattr(loader, "drop_last", False)))
    raise TypeError(
        f"ResumableLoader: {type(loader).__name__} is not driven by an ofindex sampler "
        f"(its sampler is {type(sampler).__name__}); give the DataLoader one of "
        "ofindex.shuffle's samplers (sampler=..., or a BatchSampler/MixtureSampler), or pass "
        "tracker= for another kind of loader")


class ResumableLoader:
    """A loader whose ``state_dict()`` is what the training loop consumed.

    ``for batch in loader`` iterates the wrapped loader once (one pass: the rest of the
    current epoch); :meth:`state_dict` can be saved at any step, and
    :meth:`load_state_dict` makes the next pass continue right after the last batch the loop
    received when it was saved, with any number of workers or ranks.

    Args:
        loader: An iterable of batches: a ``torch.utils.data.DataLoader`` or torchdata
            ``StatefulDataLoader`` over an ofindex sampler, or any loader with ``tracker=``.
        tracker: What turns a count of batches into a state (see :class:`Tracker`);
            ``None``: found on ``loader``.

    Raises:
        TypeError: No tracker is given and the loader has no ofindex sampler.
    """

    def __init__(self, loader: Iterable[Any], tracker: Tracker | None = None) -> None:
        self.loader = loader
        self.tracker = tracker_of(loader) if tracker is None else tracker
        self._mark: Any = None
        self._batches = 0
        self._finished = False

    def __iter__(self) -> Iterator[Any]:
        """One pass of the wrapped loader, counting the batches handed to the loop.

        Yields:
            The wrapped loader's batches.
        """
        self._mark, self._batches, self._finished = self.tracker.pass_mark(), 0, False
        for batch in self.loader:
            self._batches += 1
            yield batch
        self._finished = True

    def __len__(self) -> int:
        """The wrapped loader's ``len()``: batches of the next pass on this rank.

        Raises:
            TypeError: The wrapped loader has no length.
        """
        return len(self.loader)  # type: ignore[arg-type]

    @property
    def batches(self) -> int:
        """Batches handed to the loop in the current pass."""
        return self._batches

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next pass (the sampler's ``set_epoch``).

        After :meth:`load_state_dict` of a state saved in epoch ``E``, the run's own loop
        resumes it: ``set_epoch(e)`` for ``e < E`` gives an empty pass (that epoch was
        finished before the checkpoint), ``set_epoch(E)`` continues right after the last
        batch saved, and a later epoch starts at its beginning.

        Args:
            epoch: The epoch number.

        Raises:
            StateError: ``epoch`` is not a whole number ``>= 0``.
        """
        self.tracker.set_epoch(epoch)
        self._mark, self._batches, self._finished = None, 0, False

    def state_dict(self) -> dict[str, Any]:
        """The state after the batches the loop received (JSON-serialisable, O(1) size).

        Returns:
            The sampler's state at that point (a global position: valid for any number of
            workers and ranks).
        """
        mark = self.tracker.pass_mark() if self._mark is None else self._mark
        return self.tracker.state_after(mark, self._batches, self._finished)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the next pass right after a saved state.

        Args:
            state: A dict from :meth:`state_dict` (possibly through JSON).

        Raises:
            StateError: The state does not fit the sampler (another dataset, seed or order),
                or a field is missing, unknown, of the wrong type or out of range.
        """
        self.tracker.load_state_dict(state)
        self._mark, self._batches, self._finished = None, 0, False
