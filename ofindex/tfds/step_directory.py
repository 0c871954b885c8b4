"""Where a global step number lies: its episode and its step in that episode, in constant time
on average, from the step counts the build stored.

The directory holds, for every block of ``2**shift`` global steps, the first episode that
reaches into the block (``shift`` from the mean episode length, so the directory has about
one entry per episode, as many as the counts themselves). A step's episode is its block's
entry, moved past the episodes that end before the step: at most the episodes that lie
wholly inside that block, fewer than two on average whatever the number of episodes, where a
binary search of the cumulative counts takes ``log2(episodes)`` probes (20 for a million).
"""

from __future__ import annotations

import numpy as np


class StepDirectory:
    """The episode and step of global step numbers.

    Args:
        counts: Each episode's number of steps, in the split's order (zero allowed).
    """

    def __init__(self, counts: np.ndarray) -> None:
        self.counts = np.asarray(counts, dtype=np.int64)
        #: ``ends[e]``: the global number one past episode ``e``'s last step.
        self.ends = np.cumsum(self.counts)
        total = int(self.ends[-1]) if len(self.ends) else 0
        mean = total // max(1, len(self.counts))
        #: log2 of the steps per block: the mean episode length rounded down to a power of 2
        self.shift = max(0, mean.bit_length() - 1)
        block_starts = np.arange(0, total, 1 << self.shift, dtype=np.int64)
        #: ``first[b]``: the first episode holding a step of block ``b``.
        self.first = np.searchsorted(self.ends, block_starts, side="right").astype(np.int64)

    def __len__(self) -> int:
        """The number of steps of all the episodes."""
        return int(self.ends[-1]) if len(self.ends) else 0

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The episode and step of each global step number.

        Args:
            positions: Global step numbers, each in ``[0, len(self))``.

        Returns:
            ``(episodes, steps)``: each one's episode (its position in the split) and its step
            number in that episode.
        """
        positions = np.asarray(positions, dtype=np.int64)
        episode = self.first[positions >> self.shift]
        behind = self.ends[episode] <= positions
        while behind.any():  # past the episodes that end inside the block, before the step
            episode[behind] += 1
            behind = self.ends[episode] <= positions
        starts = self.ends[episode] - self.counts[episode]
        return episode, positions - starts
