"""Pure byte-range planning: merge nearby record ranges into few reads (no I/O here)."""

from __future__ import annotations

import dataclasses

import numpy as np

#: Default largest gap (bytes) between two wanted ranges that is read through rather than split.
DEFAULT_MAX_GAP = 64 << 10
#: Default largest single merged read.
DEFAULT_MAX_BYTES = 16 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class ByteRange:
    """Bytes ``[start, end)`` of one file."""

    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start


@dataclasses.dataclass(frozen=True)
class ReadPlan:
    """Reads to issue and where each wanted range lies inside them.

    ``fetch_starts``/``fetch_ends`` are the merged reads in file order; wanted range ``k`` is
    ``read[item_fetch[k]][item_offset[k] : item_offset[k] + (ends[k] - starts[k])]``.
    """

    fetch_starts: np.ndarray
    fetch_ends: np.ndarray
    item_fetch: np.ndarray
    item_offset: np.ndarray
    fetch_files: np.ndarray

    @property
    def fetches(self) -> list[ByteRange]:
        return [ByteRange(int(s), int(e))
                for s, e in zip(self.fetch_starts, self.fetch_ends, strict=True)]

    @property
    def bytes_fetched(self) -> int:
        return int((self.fetch_ends - self.fetch_starts).sum())


def coalesce(
    starts: np.ndarray,
    ends: np.ndarray,
    max_gap: int = DEFAULT_MAX_GAP,
    max_bytes: int = DEFAULT_MAX_BYTES,
    files: np.ndarray | None = None,
) -> ReadPlan:
    """Plan reads for wanted ranges ``[starts[k], ends[k])``, in any order.

    ``files[k]`` (default: all 0) says which file range ``k`` is in; ranges of different files
    never share a read. Within a file, ranges are taken by start; a range joins the current
    read when it starts at most ``max_gap`` bytes after the furthest end so far and the read
    stays within ``max_bytes`` (reads split only between ranges that do not overlap, so a
    range larger than ``max_bytes``, or a chain of overlapping ones, is one read).
    Duplicates and overlaps share a read. Reads come out ordered by file, then offset;
    ``fetch_files`` says which file each read is in.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    n = len(starts)
    files = np.zeros(n, dtype=np.int64) if files is None else np.asarray(files, dtype=np.int64)
    if n == 0:
        empty = np.empty(0, dtype=np.int64)
        return ReadPlan(empty, empty, empty, empty, empty)
    order = np.lexsort((starts, files))
    s, e, f = starts[order], ends[order], files[order]
    new_file = np.concatenate(([True], f[1:] != f[:-1]))
    reach = _reach_per_file(e, f, new_file)  # furthest end so far, restarting at every file
    breaks = new_file.copy()
    breaks[1:] |= s[1:] > reach[:-1] + max_gap
    group_first = np.flatnonzero(breaks)
    group_end = np.maximum.reduceat(e, group_first)
    if np.any(group_end - s[group_first] > max_bytes):
        group_first = _split_large(s, e, group_first, max_bytes)
        group_end = np.maximum.reduceat(e, group_first)
    group_of_sorted = np.repeat(np.arange(len(group_first)), np.diff(np.append(group_first, n)))
    fetch_starts = s[group_first]
    item_fetch = np.empty(n, dtype=np.int64)
    item_fetch[order] = group_of_sorted
    item_offset = starts - fetch_starts[item_fetch]
    return ReadPlan(fetch_starts, group_end, item_fetch, item_offset, f[group_first])


def _reach_per_file(e: np.ndarray, f: np.ndarray, new_file: np.ndarray) -> np.ndarray:
    """Running maximum of ``e`` that restarts where ``new_file`` is set."""
    rank = np.cumsum(new_file) - 1          # 0, 1, 2 … per file, in sorted order
    span = int(e.max()) - int(e.min()) + 1
    if int(rank[-1]) * span < (1 << 62):     # lift each file above the previous ones
        lifted = e - int(e.min()) + rank * span
        reached: np.ndarray = np.maximum.accumulate(lifted) - rank * span + int(e.min())
        return reached
    reach: np.ndarray = e.copy()
    first = np.flatnonzero(new_file)
    for a, b in zip(first, np.append(first[1:], len(e)), strict=True):
        np.maximum.accumulate(reach[a:b], out=reach[a:b])
    return reach


def _split_large(
    s: np.ndarray, e: np.ndarray, group_first: np.ndarray, max_bytes: int
) -> np.ndarray:
    """Split groups whose read would exceed ``max_bytes`` (greedy, in file order), only
    where the next range starts at or after everything read so far."""
    firsts: list[int] = []
    bounds = [*list(group_first), len(s)]
    for g in range(len(group_first)):
        lo, hi = bounds[g], bounds[g + 1]
        first, reach = lo, int(e[lo])
        firsts.append(lo)
        for k in range(lo + 1, hi):
            new_reach = max(reach, int(e[k]))
            if new_reach - int(s[first]) > max_bytes and int(s[k]) >= reach:
                firsts.append(k)
                first, reach = k, int(e[k])
            else:
                reach = new_reach
    return np.asarray(firsts, dtype=np.int64)


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
