"""What a loaded state means for the passes after it: the epoch cursor of a sampler.

A state saved in epoch ``E`` at global position ``P`` says that every epoch before ``E`` was
trained on, and the first ``P`` positions of epoch ``E``.  Loaded into a sampler, it stands
until the pass that resumes it, so that a run's own loop resumes it exactly::

    loader.load_state_dict(state)           # saved in epoch E at position P
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader: ...

* ``set_epoch(e)`` with ``e < E``: epoch ``e`` was finished before the checkpoint; its pass
  is *held*: it yields nothing, and the state stays ``(E, P)``;
* ``set_epoch(E)``, or no ``set_epoch`` at all: the next pass resumes epoch ``E`` at ``P``;
* ``set_epoch(e)`` with ``e > E``: epoch ``e`` from its start (the rest of ``E`` is skipped,
  as asked).

Once the pass of epoch ``E`` begins, or a later epoch is selected, the loaded state is used
up, and ``set_epoch`` selects whole epochs again (a later ``set_epoch(E)`` is all of ``E``).
Grain's datasets (``GrainBatches``, ``GrainMixture``) have no pass of their own (a pipeline
reads their elements): there the state stands until a later epoch is selected.
"""

from dataclasses import dataclass

from .partition import Partition

__all__ = ["EpochCursor", "PassMark", "Passes", "Start"]


@dataclass(frozen=True)
class Start:
    """Where the next pass starts: the epoch of its positions, the global position, and
    whether it is held (an epoch finished before the loaded state: it yields nothing and
    ``(epoch, position)`` is the loaded state)."""

    epoch: int
    position: int
    held: bool = False


@dataclass(frozen=True)
class PassMark:
    """A pass as a tracker sees it: the epoch, this rank's partition of it from the pass's
    start, and whether the pass is held (it yields nothing; its state is its start).

    Args:
        epoch: The epoch (the loaded state's, for a held pass).
        partition: This rank's share of the epoch from the start position.
        held: The pass yields nothing.
    """

    epoch: int
    partition: Partition
    held: bool = False

    def __len__(self) -> int:
        """Items the pass yields on this rank."""
        return 0 if self.held else len(self.partition)

    def position(self, taken: int, finished: bool) -> int:
        """The global position once every rank took ``taken`` items of the pass.

        Args:
            taken: Items each rank took.
            finished: The pass ended (what it dropped counts as taken).

        Returns:
            The global position reached, in ``[start, n]``.
        """
        if self.held:
            return self.partition.start
        items = len(self.partition) if finished else min(len(self.partition), int(taken))
        return self.partition.global_position(items)


class EpochCursor:
    """The epoch selected for the next pass, and a loaded state until it is used up (see
    the module docstring)."""

    def __init__(self) -> None:
        self.epoch = 0
        self.loaded: Start | None = None

    def select(self, epoch: int) -> None:
        """``set_epoch(epoch)``: a later epoch than a loaded state's uses it up.

        Args:
            epoch: The epoch (checked by the caller).
        """
        self.epoch = epoch
        if self.loaded is not None and epoch > self.loaded.epoch:
            self.loaded = None

    def load(self, epoch: int, position: int) -> None:
        """Hold a loaded state: its epoch is selected, and it resumes at ``position``.

        Args:
            epoch: The state's epoch (checked by the caller).
            position: The state's global position (checked by the caller).
        """
        self.epoch, self.loaded = epoch, Start(epoch, position)

    def peek(self) -> Start:
        """Where the next pass starts, without starting it.

        Returns:
            The :class:`Start`.
        """
        loaded = self.loaded
        if loaded is None:
            return Start(self.epoch, 0)
        return Start(loaded.epoch, loaded.position, held=self.epoch < loaded.epoch)

    def begin(self) -> Start:
        """Start the next pass: a pass that resumes the loaded state uses it up.

        Returns:
            The :class:`Start` of the pass.
        """
        start = self.peek()
        if not start.held:
            self.loaded = None
        return start


class Passes:
    """The passes of a sampler over an epoch's positions shared among ranks (records for a
    sampler, batches for a mixture): the cursor, the current pass and how much of it this
    rank has yielded. A sampler sets ``num_replicas``, ``rank``, ``drop_last`` and calls
    :meth:`_start_passes` in its ``__init__``, and says how many positions an epoch has in
    :attr:`positions`."""

    num_replicas: int
    rank: int
    drop_last: bool
    _cursor: EpochCursor
    _pass: PassMark
    _consumed: int

    @property
    def positions(self) -> int:
        """The positions of an epoch."""
        raise NotImplementedError

    def _start_passes(self) -> None:
        self._cursor = EpochCursor()  # the epoch selected, and a loaded state until used up
        self._restart()

    def _restart(self) -> None:
        """The next pass becomes the current one, nothing of it yielded yet."""
        self._pass, self._consumed = self._mark(self._cursor.peek()), 0

    def partition(self, start: int | None = None) -> Partition:
        """This rank's share of the epoch's positions.

        Args:
            start: The first position to share out (``None``: where the next pass starts: 0,
                a loaded resume point, or the end (nothing) for an epoch finished before a
                loaded state).

        Returns:
            The :class:`~ofindex.shuffle.partition.Partition` of ``[start, positions)`` for
            this rank.

        Raises:
            ValueError: ``start`` is outside ``[0, positions]``.
        """
        if start is None:
            upcoming = self._cursor.peek()
            start = self.positions if upcoming.held else upcoming.position
        return Partition(self.positions, self.num_replicas, self.rank, self.drop_last, start)

    def _mark(self, start: Start) -> PassMark:
        return PassMark(start.epoch, self.partition(start.position), start.held)

    def next_pass(self) -> PassMark:
        """Where the next pass starts, without starting it (for trackers).

        Returns:
            The :class:`PassMark` of the next ``__iter__``.
        """
        return self._mark(self._cursor.peek())

    def begin_pass(self) -> PassMark:
        """Start the next pass: a pass that resumes a loaded state uses it up.

        Returns:
            The pass's :class:`PassMark`.
        """
        self._pass, self._consumed = self._mark(self._cursor.begin()), 0
        return self._pass
