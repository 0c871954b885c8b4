"""Pure byte-range planning for streaming reads: a run of records split into block reads
(no I/O here). A batch's reads are planned where its records are cut out of them
(:func:`ofindex.read.payloads.coalesce`)."""

from __future__ import annotations

import numpy as np


def plan_blocks(offsets: np.ndarray, lo: int, hi: int, block_bytes: int) -> list[tuple[int, int]]:
    """Split records ``lo..hi-1`` into runs ``[a, b)`` for block reads.

    Each run's records start within ``block_bytes`` of the run's first record, so one read is
    about that size; every run holds at least one record.

    Args:
        offsets: Sorted start offsets of all records.
        lo: First record.
        hi: One past the last record.
        block_bytes: Target read size.

    Returns:
        The runs, in order.
    """
    blocks = []
    a = lo
    while a < hi:
        target = int(offsets[a]) + block_bytes
        b = a + 1 + int(np.searchsorted(offsets[a + 1 : hi], target, side="right"))
        blocks.append((a, b))
        a = b
    return blocks
