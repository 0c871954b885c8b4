"""Totals of record counts and sizes that never wrap.

numpy sums 64-bit integers modulo 2^64: five counts of 2^62 add up to 2^62, which would pass a
check against a forged total. A manifest's and a dataset's totals are summed here instead.
"""

from __future__ import annotations

import numpy as np

#: Values summed per step: each is cut into halves of at most 2^32, so that a step's sums of
#: halves stay below 2^62 and fit an int64 whatever the values.
_STEP = 1 << 30


def exact_sum(values: np.ndarray) -> int:
    """The sum of a 1-d array of integers (any integer dtype up to 64 bits), as a Python
    int: never wrapped, whatever the values and however many.

    Args:
        values: The integers.

    Returns:
        Their exact sum.
    """
    total = 0
    for at in range(0, len(values), _STEP):
        part = values[at : at + _STEP]
        if part.dtype.itemsize < 8:  # below 2^32 each: their sum fits an int64
            total += int(part.sum(dtype=np.int64))
        elif part.dtype.kind == "u":
            total += (int((part >> np.uint64(32)).sum(dtype=np.int64)) << 32) + int(
                (part & np.uint64(0xFFFFFFFF)).sum(dtype=np.int64))
        else:  # the arithmetic shift keeps the sign in the high half
            total += (int((part >> 32).sum()) << 32) + int((part & 0xFFFFFFFF).sum())
    return total
