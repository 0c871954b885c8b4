"""Which blocks of their files a batch of byte ranges lies in, and the ranges copied out of
them: the pure planning half of the data cache (:mod:`ofindex.cache.data`), no I/O.

Block ``k`` of a file is its bytes ``[k*B, (k+1)*B)`` (the last one shorter). A batch's ranges
are planned at once with numpy: each range inside one block (small records: nearly all) gets
that block's slot and its offset in it; a range across blocks lists its blocks; a range the
file's version does not hold (or of a file whose version is unknown) is fetched as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from ..formats.framing import Buffer
from ..storage import FileStamp
from .keys import block_key

#: ``slot`` of a range fetched as it is; of a range across several blocks.
DIRECT, SPANNING = -2, -1


@dataclasses.dataclass(frozen=True)
class Block:
    """One block of one version of a remote file.

    Attributes:
        key: Its key (:func:`~ofindex.cache.keys.block_key`).
        path: The file.
        start: Its first byte in the file.
        end: One past its last byte.
    """

    key: bytes
    path: str
    start: int
    end: int


class FileBlocks:
    """The blocks of one version of one remote file, their keys worked out once.

    Args:
        url: The file's URL (part of the keys).
        path: The file, as its storage names it.
        stamp: The version (size and ETag / generation / mtime).
        step: Bytes per block.
    """

    __slots__ = ("_blocks", "path", "seen", "stamp", "step", "url")

    def __init__(self, url: str, path: str, stamp: FileStamp, step: int) -> None:
        self.url, self.path, self.stamp, self.step = url, path, stamp, step
        self._blocks: dict[int, Block] = {}
        #: The blocks this process found kept or fetched (by number): when it holds every
        #: one, the file can be mapped whole (:meth:`DataCache.resident`).
        self.seen: set[int] = set()

    @property
    def count(self) -> int:
        """How many blocks the file has."""
        return -(-self.stamp.size // self.step)

    def number(self, block: Block) -> int:
        """The number of ``block`` (a block of this file) in the file."""
        return block.start // self.step

    def block(self, number: int) -> Block:
        """Block ``number`` of the file."""
        block = self._blocks.get(number)
        if block is None:
            block = self._blocks[number] = Block(
                block_key(self.url, self.stamp, self.step, number), self.path,
                number * self.step, min((number + 1) * self.step, self.stamp.size))
        return block


@dataclasses.dataclass
class BlockPlan:
    """Where each range of a batch is.

    Attributes:
        blocks: The blocks the ranges lie in, each once (indexed by *slot*).
        slot: Per range: the slot of the block holding it, :data:`SPANNING` or
            :data:`DIRECT`.
        offset: Per range inside one block: its offset in the block.
        spanning: Range -> the slots of its blocks, for ranges across blocks.
        direct: The ranges fetched as they are.
        positions: Where each range goes in the concatenation (one more: the total).
    """

    blocks: list[Block]
    slot: np.ndarray
    offset: np.ndarray
    spanning: dict[int, list[int]]
    direct: list[int]
    positions: np.ndarray

    def assemble(self, begin: np.ndarray, views: Sequence[Buffer],
                 fetched: dict[int, Buffer]) -> bytearray:
        """The ranges concatenated, copied out of their blocks' ``views`` (by slot) and the
        ``fetched`` bytes of the direct ones."""
        positions = self.positions
        out = bytearray(int(positions[-1]))
        inside = np.flatnonzero(self.slot >= 0)
        lengths = positions[1:] - positions[:-1]
        for at, slot, offset, length in zip(positions[inside].tolist(),
                                            self.slot[inside].tolist(),
                                            self.offset[inside].tolist(),
                                            lengths[inside].tolist(), strict=True):
            out[at : at + length] = views[slot][offset : offset + length]
        for k in self.spanning:
            out[int(positions[k]) : int(positions[k + 1])] = self.range_bytes(k, begin, views,
                                                                               fetched)
        for k, data in fetched.items():
            out[int(positions[k]) : int(positions[k]) + len(data)] = data
        return out

    def range_bytes(self, k: int, begin: np.ndarray, views: Sequence[Buffer],
                    fetched: dict[int, Buffer]) -> Buffer:
        """The bytes of range ``k`` alone (one across blocks joined)."""
        if k in fetched:
            return fetched[k]
        start = int(begin[k])
        end = start + int(self.positions[k + 1] - self.positions[k])
        slots = self.spanning.get(k)
        if slots is None:
            block = self.blocks[int(self.slot[k])]
            return views[int(self.slot[k])][start - block.start : end - block.start]
        out = bytearray(end - start)
        at = 0
        for slot in slots:
            block = self.blocks[slot]
            lo, hi = max(start, block.start), min(end, block.end)
            out[at : at + hi - lo] = views[slot][lo - block.start : hi - block.start]
            at += hi - lo
        return out


def runs(blocks: Sequence[Block], max_bytes: int) -> list[list[Block]]:
    """``blocks`` gathered into runs of neighbours (blocks of one file, each starting where
    the one before ends) of at most ``max_bytes`` each (a block larger than that is a run of
    its own), so that a run is one request: a globally shuffled first batch wants nearly
    every block of every file, which would otherwise be a request (or a part of a
    multi-range response) per block.

    Args:
        blocks: The blocks, each once, in any order.
        max_bytes: The most bytes a run of several blocks may hold.

    Returns:
        The runs, each in file order.
    """
    out: list[list[Block]] = []
    size = 0
    for block in sorted(blocks, key=lambda b: (b.path, b.start)):
        last = out[-1][-1] if out else None
        length = block.end - block.start
        if (last is not None and last.path == block.path and last.end == block.start
                and size + length <= max_bytes):
            out[-1].append(block)
            size += length
        else:
            out.append([block])
            size = length
    return out


def _block(per_file: list[FileBlocks | None], file: int, number: int) -> Block:
    blocks = per_file[file]
    assert blocks is not None  # only ranges of known files are planned over blocks
    return blocks.block(number)


def plan(names: Sequence[str], files: np.ndarray, begin: np.ndarray, end: np.ndarray,
         file_blocks: Callable[[str], FileBlocks | None]) -> BlockPlan:
    """Plan the ranges ``[begin[k], end[k])`` of files ``names[files[k]]``.

    Args:
        names: The files.
        files: Each range's file (an index into ``names``).
        begin: First byte of each range (int64).
        end: One past the last byte of each (int64).
        file_blocks: The blocks of a file, or ``None`` when its ranges are fetched as they
            are (its version is unknown).

    Returns:
        The plan.
    """
    n = len(begin)
    positions = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(end - begin, out=positions[1:])
    result = BlockPlan([], np.full(n, DIRECT, dtype=np.int64), np.zeros(n, dtype=np.int64),
                       {}, [], positions)
    slot_of: dict[bytes, int] = {}

    def slot(block: Block) -> int:
        found = slot_of.get(block.key)
        if found is None:
            found = slot_of[block.key] = len(result.blocks)
            result.blocks.append(block)
        return found

    per_file = [file_blocks(name) for name in names]
    if not n or not any(blocks is not None for blocks in per_file):
        result.direct = list(range(n))
        return result
    step = next(blocks.step for blocks in per_file if blocks is not None)
    sizes = np.array([-1 if blocks is None else blocks.stamp.size for blocks in per_file],
                     dtype=np.int64)
    limit = sizes[files]
    held = (limit >= 0) & (begin >= 0) & (begin < end) & (end <= limit)
    first, last = begin // step, (end - 1) // step
    inside = np.flatnonzero(held & (first == last))
    span = int(first[inside].max()) + 1 if len(inside) else 1
    if len(names) * span < 1 << 62:  # one number per (file, block): a cheap unique
        pairs = files[inside] * span + first[inside]
        uniques, which = np.unique(pairs, return_inverse=True)
        found = [divmod(pair, span) for pair in uniques.tolist()]
    else:
        columns, which = np.unique(np.stack([files[inside], first[inside]]), axis=1,
                                   return_inverse=True)
        found = list(zip(columns[0].tolist(), columns[1].tolist(), strict=True))
    slots = np.array([slot(_block(per_file, file, number)) for file, number in found],
                     dtype=np.int64)
    result.slot[inside] = slots[which] if len(slots) else slots
    result.offset[inside] = begin[inside] - first[inside] * step
    for k in np.flatnonzero(held & (first != last)).tolist():
        result.slot[k] = SPANNING
        result.spanning[k] = [slot(_block(per_file, int(files[k]), b))
                              for b in range(int(first[k]), int(last[k]) + 1)]
    result.direct = np.flatnonzero(result.slot == DIRECT).tolist()
    return result
