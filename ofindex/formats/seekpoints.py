"""Seek points of a compressed data file: where a decompressor can start in the middle.

A seek point pairs a position in the uncompressed stream with the compressed position where
inflating can resume, in the manner of zlib's ``examples/zran.c``. Some points need nothing
but a byte offset (the start of a gzip member or zlib stream, a byte-aligned point after a
full flush); the others are deflate block boundaries that begin inside a byte (``bits`` of
the byte before ``in`` belong to the next block) and need the 32 KiB of output before them
(the window), stored zlib-compressed in the sidecar's windows blob.

On disk each point is 32 bytes (:data:`SEEK_DTYPE`), in the order of ``out``.
"""

from __future__ import annotations

import enum

import numpy as np

#: One seek point as stored in a sidecar (32 bytes, little-endian).
SEEK_DTYPE = np.dtype([
    ("out", "<u8"),         # offset in the uncompressed stream
    ("in", "<u8"),          # offset in the compressed file where inflating resumes
    ("bits", "u1"),         # bits of byte in-1 that belong to the next deflate block (0..7)
    ("kind", "u1"),         # a SeekKind
    ("reserved", "<u2"),
    ("window_len", "<u4"),  # bytes of the compressed window in the blob (0: none needed)
    ("window_at", "<u8"),   # where the compressed window starts in the blob
])
assert SEEK_DTYPE.itemsize == 32


class SeekKind(enum.IntEnum):
    """How inflating starts at a seek point."""

    #: A deflate block boundary inside a member: prime ``bits``, set the window, inflate raw.
    PRIMED = 0
    #: The first byte of a gzip member (its header follows).
    GZIP_MEMBER = 1
    #: The first byte of a zlib stream (its 2-byte header follows).
    ZLIB_STREAM = 2
    #: A byte-aligned point that needs no window (after a full flush): inflate raw.
    ALIGNED = 3


def empty_table() -> np.ndarray:
    """A table of no seek points."""
    return np.zeros(0, dtype=SEEK_DTYPE)


def make_table(out: list[int], in_: list[int], bits: list[int], kinds: list[int],
               window_len: list[int], window_at: list[int]) -> np.ndarray:
    """Build a seek table from columns (all of one length)."""
    table = np.zeros(len(out), dtype=SEEK_DTYPE)
    table["out"], table["in"], table["bits"] = out, in_, bits
    table["kind"], table["window_len"], table["window_at"] = kinds, window_len, window_at
    return table


def table_from_bytes(raw: bytes | memoryview, count: int) -> np.ndarray:
    """A read-only view of ``count`` seek points stored in ``raw``."""
    return np.frombuffer(raw, dtype=SEEK_DTYPE, count=count)
