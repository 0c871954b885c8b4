"""A batch of framed records read out of byte ranges, and checked: the reads planned
(neighbours merged into few ranges: :func:`coalesce`), then the records cut out of the buffer
they were read into, with their checks done in bulk (:func:`extract_payloads`); or a large
record read straight into its own bytes (:func:`read_record_direct`).

What a read checks in each record comes from the dataset's framing and ``verify``
(:class:`RecordChecks`): always that a record's framing agrees with the span its index gives
it (the stored length); with ``verify``, TFRecord's length and data CRCs, and OFRecord
payloads against the sidecar's checksums where it has them (:mod:`ofindex.read.sum_checks`).
"""

from __future__ import annotations

import dataclasses
import mmap
from collections.abc import Callable
from types import ModuleType
from typing import NoReturn

import crc32c as _crc32c
import numpy as np

from ..errors import IndexMismatchError
from ..formats.crc import LENGTH_CRCS, length_crc, mask_crc, masked_length_crcs, unmask_crcs
from ..formats.framing import (
    Buffer,
    Payload,
    RecordFormat,
    data_crc_error,
    payload_matches,
    unframe,
    unframe_ofrecord,
    unframe_tfrecord,
)
from ..storage import Storage


@dataclasses.dataclass(frozen=True)
class RecordChecks:
    """The checks of one dataset's reads.

    Attributes:
        format: The framing.
        verify: Whether records are verified at all.
        tfrecord_crcs: Check TFRecord length and data CRCs.
        payload_sums: Check OFRecord payloads against their sidecar's checksums (where it
            has them).
        header: Framing bytes before a payload.
        footer: Framing bytes after a payload.
        overhead: ``header + footer``: no record's span is shorter.
        unframe: Strips (and checks) the framing of one record's bytes.
    """

    format: RecordFormat
    verify: bool
    tfrecord_crcs: bool
    payload_sums: bool
    header: int
    footer: int
    overhead: int
    unframe: Callable[[Buffer, bool, str, int, int], Payload]

    @classmethod
    def of(cls, fmt: RecordFormat, verify: bool) -> RecordChecks:
        """The checks of a dataset of framing ``fmt`` read with ``verify``."""
        tf = fmt is RecordFormat.TFRECORD
        return cls(fmt, verify, verify and tf, verify and not tf, fmt.header_size,
                   fmt.footer_size, fmt.overhead, unframe_tfrecord if tf else unframe_ofrecord)


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


_A4 = np.arange(4)
_A8 = np.arange(8)
_A12 = np.arange(12)
#: Up to this many records, expected length CRCs come from a memo, not numpy table lookups.
_FEW = 512


def extract_payloads(
    buf: bytes | bytearray | memoryview | mmap.mmap,
    starts: np.ndarray,
    ends: np.ndarray,
    fmt: RecordFormat,
    verify: bool,
    url: str | Callable[[int], str],
    file_offsets: np.ndarray,
    records: np.ndarray,
    native: ModuleType | None,
) -> list[bytes]:
    """Payloads of the framed records at ``buf[starts[k]:ends[k]]``.

    Every header must agree with the index (length, and for TFRecord with ``verify`` the
    length CRC); with ``verify`` each TFRecord payload's CRC is checked. Header and footer
    checks run in the compiled loop of ``native`` (the compiled module the caller's access
    reads with), or without it in bulk with numpy and one copy and one CRC call per record
    (the pure-Python fallback, and the compiled loop's test oracle). ``url`` (or
    ``url(k)``), ``file_offsets[k]`` and ``records[k]`` name record ``k`` in error messages.
    """
    if len(starts) == 0:
        return []
    tf_verify = fmt is RecordFormat.TFRECORD and verify
    if native is not None:
        got = native.cut(buf, starts, ends, fmt.header_size, fmt.footer_size, tf_verify,
                         _crc32c.crc32c, LENGTH_CRCS)
        if type(got) is list:
            return got
        _raise_bad(buf, got, starts, ends, fmt, verify, url, file_offsets, records, native)
    raw = np.frombuffer(buf, dtype=np.uint8)
    sizes = ends - starts - fmt.overhead
    if not tf_verify:
        bad = raw[starts[:, None] + _A8].view("<u8").ravel() != sizes.astype(np.uint64)
    else:
        heads = raw[starts[:, None] + _A12]  # length and its masked CRC
        lengths = heads[:, :8].copy()
        bad = lengths.view("<u8").ravel() != sizes.astype(np.uint64)
        if len(sizes) <= _FEW:  # memoised per length: cheaper than the table lookups
            known = LENGTH_CRCS.get
            expected = np.array([known(n) or length_crc(n) for n in sizes.tolist()], np.uint32)
        else:  # lengths below 2**24 (most datasets) need 3 table lookups, not 8
            expected = masked_length_crcs(lengths, 3 if int(sizes.max()) < (1 << 24) else 8)
        bad |= heads[:, 8:].copy().view("<u4").ravel() != expected
    if bad.any():
        _raise_bad(buf, int(np.argmax(bad)), starts, ends, fmt, verify, url, file_offsets,
                   records, None)
    p0 = (starts + fmt.header_size).tolist()
    p1 = (ends - fmt.footer_size).tolist()
    if isinstance(buf, (bytes, mmap.mmap)):  # slicing these gives bytes: one copy
        out = [buf[a:b] for a, b in zip(p0, p1, strict=True)]
    else:
        view = memoryview(buf)
        out = [bytes(view[a:b]) for a, b in zip(p0, p1, strict=True)]
    if tf_verify:
        stored = unmask_crcs(raw[(ends - 4)[:, None] + _A4].view("<u4").ravel()).tolist()
        crc = _crc32c.crc32c
        computed = [crc(p) for p in out]
        if computed != stored:
            k = next(k for k, (c, t) in enumerate(zip(computed, stored, strict=True)) if c != t)
            raise data_crc_error(mask_crc(stored[k]), mask_crc(computed[k]),
                                 path=url if isinstance(url, str) else url(k),
                                 offset=int(file_offsets[k]), record=int(records[k]))
    return out


def _raise_bad(buf: Buffer, k: int, starts: np.ndarray, ends: np.ndarray, fmt: RecordFormat,
               verify: bool, url: str | Callable[[int], str], file_offsets: np.ndarray,
               records: np.ndarray, native: ModuleType | None) -> NoReturn:
    """Raise the precise error for record ``k``, which failed a check (its bytes copied in a
    guarded call by the compiled module ``native``, when it read them: ``buf`` may be a
    memory map)."""
    s, e = int(starts[k]), int(ends[k])
    path = url if isinstance(url, str) else url(k)
    raw = native.copy_out(buf, s, e) if native is not None else bytes(buf[s:e])
    raise_record_error(raw, fmt, verify, path=path, offset=int(file_offsets[k]),
                       record=int(records[k]))


def raise_record_error(raw: Buffer, fmt: RecordFormat, verify: bool, *, path: str, offset: int,
                       record: int) -> NoReturn:
    """Raise the precise error for a record (its framed bytes ``raw``) that failed a check."""
    unframe(raw, fmt, verify=verify, path=path, offset=offset, record=record)
    raise IndexMismatchError(f"{path}: record {record} at byte offset {offset} does not match "
                             f"its index; rebuild the index with `ofindex build {path}`",
                             path=path, offset=offset, record=record)


#: Records at least this large (on average) are read one by one, each payload straight into
#: its own bytes object: cheaper than copying it out of a staging buffer.
DIRECT_RECORD_BYTES = 64 << 10


def read_record_direct(storage: Storage, path: str, start: int, end: int, fmt: RecordFormat,
                       verify: bool, record: int) -> bytes:
    """The payload of the framed record at ``[start, end)`` of ``path``, read without staging
    (header, payload and footer as three reads), checked like :func:`unframe`."""
    hs, fs = fmt.header_size, fmt.footer_size
    payload = storage.read(path, start + hs, end - fs)
    head = storage.read(path, start, start + hs)
    foot = storage.read(path, end - fs, end) if fs else b""
    if not payload_matches(head, payload, foot, fmt, verify):
        raise_record_error(head + payload + foot, fmt, verify, path=storage.url(path),
                           offset=start, record=record)
    return payload
