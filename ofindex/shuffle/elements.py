"""Element ``k`` of an endless run of epochs that starts at a resume point, as map-style
pipelines (Grain's ``MapDataset``) index their elements.

A run starts at epoch ``e0``, global position ``p0`` (``(0, 0)`` for a fresh run; a
checkpoint's ``(epoch, position)`` on resume, possibly saved with another number of ranks).
Its elements are this rank's batches: first those of the rest of epoch ``e0`` (its strided
share of ``[p0, n)``), then every following epoch whole.  An element is ``per_element``
items of the rank's share (the last one of an epoch shorter unless ``drop``), and the state
after ``k`` elements is the global position all ranks reached together.
"""

from collections.abc import Callable
from dataclasses import dataclass

from .partition import Partition

__all__ = ["ElementIndex", "Located"]


@dataclass(frozen=True)
class Located:
    """Where element ``k`` lies: its epoch, the rank's partition of that epoch, and the
    items ``[begin, end)`` of the partition it holds."""

    epoch: int
    partition: Partition
    begin: int
    end: int


class ElementIndex:
    """Maps element numbers to epochs and items, and element counts to states.

    Args:
        partition_of: This rank's partition of an epoch from a given start position.
        per_element: Items (records or batches) per element.
        drop: Drop an epoch's last element when it is short.
        epoch: The epoch the run starts in.
        position: The global position the run starts at, in that epoch.
    """

    def __init__(self, partition_of: Callable[[int], Partition], per_element: int,
                 drop: bool, epoch: int = 0, position: int = 0) -> None:
        self.partition_of, self.per_element, self.drop = partition_of, int(per_element), drop
        self.epoch, self.position = int(epoch), int(position)
        self.first = partition_of(self.position)
        self.full = partition_of(0)

    def count(self, part: Partition) -> int:
        """Elements of one epoch's partition."""
        items = len(part)
        return items // self.per_element if self.drop else -(-items // self.per_element)

    @property
    def per_epoch(self) -> int:
        """Elements of a whole epoch."""
        return self.count(self.full)

    def locate(self, index: int) -> Located:
        """Where element ``index`` lies.

        Args:
            index: The element number (from the start of the run), ``>= 0``.

        Returns:
            The :class:`Located` epoch, partition and items.

        Raises:
            IndexError: ``index`` is negative, or a whole epoch has no element.
        """
        if index < 0:
            raise IndexError(f"element {index} is negative")
        head = self.count(self.first)
        if index < head:
            epoch, part, k = self.epoch, self.first, index
        else:
            if self.per_epoch < 1:
                raise IndexError(f"an epoch has no element for this rank (element {index})")
            later, k = divmod(index - head, self.per_epoch)
            epoch, part = self.epoch + 1 + later, self.full
        begin = k * self.per_element
        return Located(epoch, part, begin, min(begin + self.per_element, len(part)))

    def state(self, elements: int) -> tuple[int, int]:
        """``(epoch, global position)`` once every rank has consumed ``elements`` elements.

        Args:
            elements: Elements consumed from the start of the run.

        Returns:
            The epoch and position to resume at (an epoch's end is the next epoch's start).
        """
        head = self.count(self.first)
        if elements < head:
            part = self.first
            return self.epoch, part.global_position(elements * self.per_element)
        if self.per_epoch < 1:
            return self.epoch + 1, 0
        later, k = divmod(elements - head, self.per_epoch)
        return self.epoch + 1 + later, self.full.global_position(k * self.per_element)

    def until(self, epoch: int) -> int:
        """Elements from the start of the run to the end of epoch ``epoch - 1``.

        Args:
            epoch: The first epoch not to include.

        Returns:
            The number of elements (0 if ``epoch`` is not after the start's epoch).
        """
        if epoch <= self.epoch:
            return 0
        return self.count(self.first) + (epoch - self.epoch - 1) * self.per_epoch
