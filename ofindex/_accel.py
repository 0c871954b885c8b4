"""Which implementation of the per-record loops runs: the compiled ``ofindex._native`` when it
was built at install time, else the pure-Python loops (same results, same errors, slower).

``OFINDEX_PURE_PYTHON=1`` in the environment turns the compiled loops off; tests switch
:data:`native` to ``None`` to run both implementations.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the compiled types, for annotations in the layers that use them
    from ._native import Reader as Reader

import numpy as np

try:
    from . import _native
except ImportError:  # built without a C compiler: the pure-Python loops run
    _native = None  # type: ignore[assignment]

#: The compiled module, or ``None`` when the pure-Python loops run.
native = _native if os.environ.get("OFINDEX_PURE_PYTHON", "") in ("", "0") else None


#: What the compiled ``record``/``gather`` report instead of a payload (see csrc/records.c).
SPAN_TOO_SHORT = 1  # the sidecar's offsets give a span shorter than a record's framing
RECORD_FAILS_CHECK = 2  # the header or a CRC disagrees: the precise error comes from unframe
PAST_MAPPED_END = 3  # the span lies past the mapped bytes (the file grew): read it otherwise


def implementation() -> str:
    """``"compiled"`` or ``"pure-python"``: what the hot loops currently run on."""
    return "compiled" if native is not None else "pure-python"


#: Byte buffers at least this big come from the compiled module's pool of released memory
#: (:func:`pooled_bytes`). Below it glibc's malloc reuses freed memory by itself; its dynamic
#: mmap threshold stops at 32 MiB, and every bigger buffer is fresh memory whose page faults
#: and zeroing cost more than filling it (a 160 MB batch of 100 KB payloads packed on a 2-core
#: VM: 1.2 GB/s into fresh memory, 3.5 GB/s into reused memory).
POOLED_BYTES = 32 << 20


def pooled_bytes(size: int, least: int = POOLED_BYTES) -> np.ndarray:
    """A writable ``uint8`` array of ``size`` bytes (not initialised).

    A big one is made on memory that an earlier big buffer released once nothing referred to
    it any more (``ofindex._native.Block``'s pool, shared with the decoders' big outputs), so
    that a loop making one per step reuses memory that is already mapped. Its size is rounded
    up to one of 16 to 32 sizes per power of two, so that buffers of similar sizes (batches of
    records of varying lengths) share memory; the rounding is address space only, never
    touched. Memory that anything still refers to is never handed out again.

    Args:
        size: Bytes.
        least: The smallest size taken from the pool (a loop of buffers of a few hundred KB
            that glibc maps afresh each time may ask for less than :data:`POOLED_BYTES`).

    Returns:
        The array (plain ``numpy.empty`` when small or without the compiled module).
    """
    if native is None or size < least:
        return np.empty(size, np.uint8)
    grain = 1 << (int(size).bit_length() - 5)  # 1/32 to 1/16 of the size
    block = native.Block(-(-size // grain) * grain)
    return np.frombuffer(block, np.uint8)[:size]


def pooled_array(shape: tuple[int, ...], dtype: Any, least: int) -> np.ndarray:
    """An uninitialised writable C-contiguous array of exactly its size, made on a compiled
    ``Block`` (memory an earlier block released, see :func:`pooled_bytes`) when it holds at
    least ``least`` bytes.

    Args:
        shape: Its shape.
        dtype: Its type.
        least: The smallest size in bytes taken from the pool.

    Returns:
        The array (plain ``numpy.empty`` when small or without the compiled module).
    """
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if native is None or nbytes < least:
        return np.empty(shape, dtype)
    return np.frombuffer(native.Block(nbytes), dtype).reshape(shape)


def block_pool(limit: int | None = None) -> tuple[int, int]:
    """Report, and optionally bound, the compiled module's pool of released blocks.

    Args:
        limit: If given, first set the pool's bound in bytes; ``0`` frees what it holds and
            turns pooling off. ``None`` only reports.

    Returns:
        ``(bytes held, limit)`` after the change; ``(0, 0)`` without the compiled module.

    Raises:
        ValueError: ``limit`` is negative (checked by the compiled module).
        TypeError: ``limit`` is not an integer (checked by the compiled module).
    """
    if native is None:
        return 0, 0
    held, bound = native.pool(limit)
    return int(held), int(bound)
