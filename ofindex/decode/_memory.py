"""Memory for big decoded arrays, reused once the program no longer holds them.

A fresh 154 MB batch (256 images of 150,528 floats) costs the kernel tens of thousands of
page faults and zeroing the first time it is written: on a 2-core VM about as long as
decoding it. Big outputs (at least :data:`POOLED_BYTES`) are therefore made on
``ofindex._native.Block`` memory: when the last array or view on a block is gone, its memory
waits in a small pool (8 blocks, :func:`memory_pool` bytes at most; when it is full, the
block that waited longest makes room) and the next batch of the same size takes it, already
mapped. Only memory nothing refers to is reused, so arrays a
program keeps (or hands to ``torch.from_numpy``) are never overwritten. Without the compiled
module, outputs are plain ``numpy.empty`` arrays.
"""

from typing import Any

import numpy as np

from ofindex._accel import block_pool, pooled_array, pooled_bytes

__all__ = ["POOLED_BYTES", "empty", "memory_pool", "pooled_bytes"]

#: Outputs at least this big come from the pool.
POOLED_BYTES = 4 << 20


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised writable C-contiguous array, from pooled memory when it is big."""
    return pooled_array(shape, dtype, POOLED_BYTES)


def memory_pool(limit: int | None = None) -> tuple[int, int]:
    """Report, and optionally bound, the pool of released decode memory.

    Big decoded outputs (at least :data:`POOLED_BYTES`) are made on memory that earlier
    outputs released once nothing referred to them any more; this pool holds that memory
    between batches (at most 8 blocks).

    Args:
        limit: If given, first set the pool's bound in bytes (the default bound is 1 GiB);
            ``0`` frees what the pool holds and turns pooling off. ``None`` only reports.

    Returns:
        ``(bytes held, limit)`` after the change. ``(0, 0)`` when the compiled module
        ``ofindex._native`` is not available (outputs are then plain ``numpy.empty`` arrays).

    Raises:
        ValueError: ``limit`` is negative (checked by the compiled module).
        TypeError: ``limit`` is not an integer (checked by the compiled module).
    """
    return block_pool(limit)
