"""Bytes values packed back to back with their offsets (Arrow's binary layout), the way a
column holds them: no Python object per value (a million ids would take about 60 MB and a
second to make as ``bytes`` objects; packed they take their own size and are compared with
numpy and compiled CRC32Cs)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

import crc32c as _crc32c
import numpy as np

from ..decode._plans import loops


class PackedBytes:
    """``n`` bytes values: value ``k`` is ``data[offsets[k]:offsets[k + 1]]``.

    Args:
        data: The values back to back (uint8).
        offsets: ``n + 1`` int64 offsets into ``data``, from 0, not decreasing.
    """

    __slots__ = ("data", "offsets")

    def __init__(self, data: np.ndarray, offsets: np.ndarray) -> None:
        self.data = data
        self.offsets = offsets

    @classmethod
    def from_list(cls, items: Sequence[bytes]) -> PackedBytes:
        """Pack ``bytes`` objects."""
        lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
        offsets = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(np.frombuffer(b"".join(items), dtype=np.uint8), offsets)

    @classmethod
    def empty(cls, n: int) -> PackedBytes:
        """``n`` empty values."""
        return cls(np.zeros(0, dtype=np.uint8), np.zeros(n + 1, dtype=np.int64))

    @classmethod
    def concat(cls, parts: Iterable[PackedBytes]) -> PackedBytes:
        """The values of ``parts``, one after the other."""
        parts = list(parts)
        if not parts:
            return cls.empty(0)
        data = np.concatenate([p.data[p.offsets[0]:p.offsets[-1]] for p in parts])
        shifts = np.cumsum([0] + [int(p.offsets[-1] - p.offsets[0]) for p in parts[:-1]])
        offsets = np.concatenate(
            [[0]] + [p.offsets[1:] - p.offsets[0] + shift
                     for p, shift in zip(parts, shifts.tolist(), strict=True)])
        return cls(data, offsets.astype(np.int64))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __repr__(self) -> str:
        return f"PackedBytes({len(self)} values, {int(self.offsets[-1] - self.offsets[0])} bytes)"

    @property
    def lengths(self) -> np.ndarray:
        """Each value's length (int64)."""
        lengths: np.ndarray = np.diff(self.offsets)
        return lengths

    def item(self, k: int) -> bytes:
        """Value ``k``."""
        return self.data[int(self.offsets[k]):int(self.offsets[k + 1])].tobytes()

    def tolist(self) -> list[bytes]:
        """Every value as ``bytes``."""
        base = int(self.offsets[0])
        raw = self.data[base:int(self.offsets[-1])].tobytes()
        bounds = (self.offsets - base).tolist()
        return [raw[a:b] for a, b in itertools.pairwise(bounds)]

    def width(self) -> int | None:
        """The length every value has, or ``None`` when they differ (or there are none)."""
        lengths = self.lengths
        if not len(lengths) or int(lengths.min()) != int(lengths.max()):
            return None
        return int(lengths[0])

    def take(self, indices: np.ndarray) -> PackedBytes:
        """The values at ``indices`` (int64), in that order."""
        width = self.width()
        if width:  # values of one length: rows of a table (a million 13-byte ids: 10x faster)
            base = int(self.offsets[0])
            # each value one item of a void dtype: a million 13-byte ids taken in 18 ms,
            # where indexing the rows of a uint8 table takes 62 ms
            rows = np.ascontiguousarray(self.data[base:base + width * len(self)]).view(
                np.dtype((np.void, width)))
            chosen = np.take(rows, np.asarray(indices, dtype=np.int64)).view(np.uint8).reshape(-1)
            return PackedBytes(chosen, np.arange(len(indices) + 1, dtype=np.int64) * width)
        starts, ends = self.offsets[indices], self.offsets[np.asarray(indices) + 1]
        lengths = ends - starts
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if not len(lengths) or int(offsets[-1]) == 0:
            return PackedBytes(np.zeros(0, dtype=np.uint8), offsets)
        at = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
        return PackedBytes(self.data[at], offsets)

    def __getitem__(self, key: slice) -> PackedBytes:
        """The values of a slice (step 1), sharing ``data``."""
        start, stop, step = key.indices(len(self))
        if step != 1:
            return self.take(np.arange(start, stop, step))
        return PackedBytes(self.data, self.offsets[start:stop + 1])

    def prefixes(self) -> np.ndarray:
        """Each value's first 8 bytes, zero-padded, as big-endian uint64: comparing them
        compares the values' first 8 bytes."""
        n = len(self)
        if not n or not len(self.data):
            return np.zeros(n, dtype=">u8")
        width = self.width()
        if width is not None and width >= 8:  # rows of a table: their first 8 bytes as they
            # are (a page of 16,384 13-byte ids: 0.1 ms; the gather below takes 2 ms)
            base = int(self.offsets[0])
            table = self.data[base:base + width * n].reshape(n, width)
            head: np.ndarray = np.ascontiguousarray(table[:, :8]).view(">u8").reshape(n)
            return head
        columns = np.arange(8)
        at = self.offsets[:-1, None] + columns
        inside = columns < self.lengths[:, None]
        gathered = np.where(inside, self.data[np.minimum(at, len(self.data) - 1)], 0)
        prefixes: np.ndarray = gathered.astype(np.uint8).view(">u8").reshape(n)
        return prefixes

    def crcs(self) -> np.ndarray:
        """Each value's CRC32C (uint32): the compiled module's, without the GIL."""
        out = np.empty(len(self), dtype=np.uint32)
        starts = np.ascontiguousarray(self.offsets[:-1])
        ends = np.ascontiguousarray(self.offsets[1:])
        native = loops()
        if native is not None and len(self.data):
            native.crcs(self.data, starts, ends, out, _crc32c.crc32c)
            return out
        raw = self.data.tobytes()
        for k, (a, b) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            out[k] = _crc32c.crc32c(raw[a:b])
        return out

    def equal_to(self, targets: Sequence[bytes]) -> np.ndarray:
        """Which values equal one of ``targets``."""
        out = np.zeros(len(self), dtype=bool)
        if not targets or not len(self):
            return out
        lengths, crcs = self.lengths, self.crcs()
        for target in targets:
            maybe = np.flatnonzero((lengths == len(target)) & (crcs == _crc32c.crc32c(target)))
            for k in maybe.tolist():
                if not out[k] and self.item(k) == target:
                    out[k] = True
        return out

    def compare(self, bound: bytes) -> np.ndarray:
        """``-1``, ``0`` or ``1`` as each value is less than, equal to or greater than
        ``bound`` (int8), the first 8 bytes compared with numpy, ties one by one."""
        mine = self.prefixes()
        theirs = np.frombuffer(bound[:8].ljust(8, b"\0"), dtype=">u8")[0]
        out: np.ndarray = (mine > theirs).astype(np.int8) - (mine < theirs).astype(np.int8)
        for k in np.flatnonzero(mine == theirs).tolist():
            value = self.item(k)
            out[k] = (value > bound) - (value < bound)
        return out
