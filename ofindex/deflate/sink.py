"""Compressing what :class:`~ofindex.write.writer.Writer` writes: one gzip member or zlib
stream, with seek points placed as it goes.

Every ``spacing`` uncompressed bytes, at the next record boundary, the compressor is
full-flushed (``Z_FULL_FLUSH``: the deflate stream is brought to a byte boundary and forgets
its history), so the point needs neither bit priming nor a stored window: readers inflate
raw deflate from there. The price is the compression lost by restarting the history (see
``tools/bench_compressed.py``) and 5 bytes per point. TensorFlow, gzip and zlib read such
streams like any other.
"""

from __future__ import annotations

import zlib
from typing import IO

import numpy as np

from ..formats.compression import WBITS
from ..formats.seekpoints import SeekKind, make_table
from ..formats.sidecar_header import Compression


class DeflateSink:
    """A binary sink that compresses into ``file`` and records full-flush seek points.

    Args:
        file: Where the compressed bytes go.
        compression: GZIP or ZLIB.
        spacing: Uncompressed bytes between seek points.
        level: zlib compression level (0-9, -1 for zlib's default, 6).
        start: ``(uncompressed, compressed)`` offsets where the member starts in its file: a
            member appended after others (``Writer(..., append=True)``); its seek points are
            placed in the file's terms.
    """

    def __init__(self, file: IO[bytes], compression: Compression, spacing: int,
                 level: int = -1, start: tuple[int, int] = (0, 0)) -> None:
        if not -1 <= level <= 9:
            raise ValueError(f"compression_level must be -1..9, not {level}")
        if spacing < 1:
            raise ValueError(f"seek_spacing must be a positive number of bytes, not {spacing}")
        self._file = file
        self._c = zlib.compressobj(level, zlib.DEFLATED, WBITS[compression])
        self.spacing = int(spacing)
        self.written = 0  # compressed bytes so far
        self._in = start[1]  # where the member starts in the file
        first = SeekKind.ZLIB_STREAM if compression is Compression.ZLIB else SeekKind.GZIP_MEMBER
        self._points: list[tuple[int, int, int]] = [(start[0], start[1], int(first))]

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Compress ``data`` into the file."""
        self._put(self._c.compress(data))

    def boundary(self, out: int) -> None:
        """A record starts at uncompressed offset ``out``: place a seek point there when one
        is due."""
        if out - self._points[-1][0] >= self.spacing:
            self._put(self._c.flush(zlib.Z_FULL_FLUSH))
            self._points.append((out, self._in + self.written, int(SeekKind.ALIGNED)))

    @property
    def next_point(self) -> int:
        """The uncompressed offset from which a record start gets the next seek point."""
        return self._points[-1][0] + self.spacing

    def sync(self) -> None:
        """Bring the stream to a byte boundary (``Z_SYNC_FLUSH``): a reader of the file
        inflates everything written so far."""
        self._put(self._c.flush(zlib.Z_SYNC_FLUSH))

    def finish(self) -> None:
        """End the stream (gzip trailer / Adler-32); the file is not closed."""
        self._put(self._c.flush(zlib.Z_FINISH))

    def seek_table(self) -> np.ndarray:
        """The seek points placed (no windows needed)."""
        n = len(self._points)
        out, in_, kinds = (list(c) for c in zip(*self._points, strict=True))
        return make_table(out, in_, [0] * n, kinds, [0] * n, [0] * n)

    def _put(self, chunk: bytes) -> None:
        if chunk:
            self._file.write(chunk)
            self.written += len(chunk)
