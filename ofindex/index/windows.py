"""Shorter windows for primed seek points: keep only the history the data after a point uses.

A primed seek point stores the 32 KiB of output before it, because deflate may copy from
that far back. Often much less is used: incompressible data (JPEG images in Examples) is
stored in raw blocks that refer to nothing. Once 32 KiB of output follow a point, no later
copy can reach behind it, so inflating those 32 KiB from the point with only the last ``w``
bytes of the window tells whether ``w`` bytes suffice: zlib refuses a copy from further
back ("invalid distance too far back") instead of inventing bytes. :class:`PendingWindow`
keeps the compressed bytes that follow a point until then and tries a few shorter windows.
"""

from __future__ import annotations

from ..formats.compression import RAW_WBITS
from .inflate import STATUS_DATA_ERROR, WINDOW, new_inflater

#: Window lengths tried, shortest first (the full window is kept when none suffices).
CANDIDATES = (0, 1024, 8192)


class PendingWindow:
    """A primed point's window, waiting for the 32 KiB of output that follow the point.

    Args:
        index: The point's number in the seek table.
        out: Its uncompressed offset.
        bits: Its primed bits.
        window: The full window.
        first: The byte before the point's compressed offset when ``bits`` (else empty).
    """

    def __init__(self, index: int, out: int, bits: int, window: bytes, first: bytes) -> None:
        self.index, self.out, self.bits, self.window = index, out, bits, window
        self.captured = bytearray(first)

    def feed(self, consumed: memoryview | bytes) -> None:
        """Compressed bytes inflated after the point."""
        self.captured += consumed

    def ready(self, total_out: int) -> bool:
        """Whether enough output followed the point to test shorter windows."""
        return total_out - self.out >= WINDOW

    def shortest(self) -> bytes:
        """The shortest candidate suffix of the window that inflates the 32 KiB after the
        point without reaching further back (call once :meth:`ready`, or at the end of the
        stream)."""
        for w in CANDIDATES:
            if w >= len(self.window):
                break
            if self._suffices(self.window[len(self.window) - w :]):
                return self.window[len(self.window) - w :]
        return self.window

    def _suffices(self, window: bytes) -> bool:
        inf = new_inflater(RAW_WBITS)
        data = memoryview(self.captured)
        if self.bits:
            inf.prime(self.bits, data[0] >> (8 - self.bits))
            data = data[1:]
        inf.set_dictionary(window)
        status = inf.inflate(data, bytearray(WINDOW))[2]
        return bool(status != STATUS_DATA_ERROR)
