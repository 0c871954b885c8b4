"""The content digest of a data file: the CRC32C of its size and of three small regions of its
bytes (see :mod:`.identity` for what it is for, docs/format.md for the specification)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

import crc32c as _crc32c

#: The digest scheme sidecars name (byte 49 of their header): 1 is the one below.
SCHEME = 1
#: Bytes of each region: a page of most file systems, one small ranged read of a bucket.
REGION_BYTES = 4096
#: Files up to this size are digested whole (the three regions would cover them anyway).
WHOLE_UP_TO = 3 * REGION_BYTES


def content_regions(size: int) -> list[tuple[int, int]]:
    """The byte ranges ``[start, end)`` of a file of ``size`` bytes that its digest covers.

    Args:
        size: The file's size.

    Returns:
        ``[(0, size)]`` for a file of at most :data:`WHOLE_UP_TO` bytes; else its first
        :data:`REGION_BYTES`, the ones starting at ``(size - REGION_BYTES) // 2``, and its
        last ones, in that order.
    """
    if size <= WHOLE_UP_TO:
        return [(0, size)]
    middle = (size - REGION_BYTES) // 2
    return [(0, REGION_BYTES), (middle, middle + REGION_BYTES), (size - REGION_BYTES, size)]


def content_digest(size: int, parts: Sequence[bytes | bytearray | memoryview]) -> int:
    """The content digest of a file: CRC32C of its size (uint64, little-endian) followed by
    the bytes of its :func:`content_regions`, in order.

    Args:
        size: The file's size.
        parts: The bytes of each region, as :func:`content_regions` lists them.

    Returns:
        The digest (a uint32).
    """
    crc = _crc32c.crc32c(struct.pack("<Q", size))
    for part in parts:
        crc = _crc32c.crc32c(part, crc)
    return crc


#: ``read_ranges(paths, starts, ends)``: a storage's reads of byte ranges.
ReadRanges = Callable[[Sequence[str], Sequence[int], Sequence[int]],
                      Sequence[bytes | bytearray | memoryview]]


def read_digest(read_ranges: ReadRanges, path: str, size: int) -> int:
    """Read the regions of ``path`` (``size`` bytes) with ``read_ranges`` and return its
    content digest.

    Raises:
        RangeReadError: The file is shorter than ``size`` (it changed while read).
    """
    regions = content_regions(size)
    parts = read_ranges([path] * len(regions), [start for start, _ in regions],
                        [end for _, end in regions])
    return content_digest(size, parts)
