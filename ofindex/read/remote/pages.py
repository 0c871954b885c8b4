"""Paged remote sidecars: a batch reads only the pages of each sidecar that it needs.

A version 2 sidecar has a fixed 512-byte header, so the offsets of records ``[a, b)`` lie at
bytes ``[512 + 8a, 512 + 8b)`` whatever the file. When a dataset is opened through its
manifest (which gives each shard's record count and stamp), or without one (each remote
sidecar's header is then fetched and pinned at open: :mod:`ofindex.read.remote.header_round`), a
remote shard's sidecar is not fetched whole: a batch asks, for every shard it touches, for the
*pages* (runs of ``page_records`` consecutive offsets, plus the next offset) holding its
records, and for the header of each sidecar not validated yet in this process, all in one
concurrent round with the other shards' pages and the data files' staleness ``stat``; the
data ranges follow in a second round. With every page cached, a batch costs one round.

The page size follows the shard's mean record size: a page holds about as many bytes of
offsets as one record holds data (a power of two between 16 and 8192 records), so a random
record moves about twice its size (``tools/bench_scale.py`` measures the trade-off).

Pages are kept in the dataset's cache chain (:class:`~ofindex.cache.chain.Chain`): this
process's memory (bounded by ``cache_bytes``) and, with ``cache_dir``, the machine's. A
header is checked when it arrives (record count and stamp, and the body CRC when known,
against the manifest or the pinned header: :meth:`Shard.check_header`), before any of its
pages is used or cached. Version 1 sidecars
(variable header), compressed-file sidecars (seek points) and small sidecars (a few pages)
are fetched whole instead, as before.
"""

from __future__ import annotations

import math
import os
import struct

import numpy as np

from ...cache.keys import sidecar_key
from ...errors import SidecarError
from ...formats.sidecar_header import HEADER_SIZE, VERSION, Compression, SidecarHeader
from ...formats.sidecar_header import decode_header as _decode_header
from ..shards import Shard

#: Where a version 2 header's fingerprint starts (see :mod:`ofindex.formats.sidecar_header`).
_FINGERPRINT_AT = 96
MIN_PAGE_RECORDS = 16
MAX_PAGE_RECORDS = 8192
#: Sidecars whose offsets fit in this many pages are fetched whole (one request).
WHOLE_BELOW_PAGES = 4


def page_records_for(records: int, size: int) -> int:
    """Records per page for a shard of ``records`` records in ``size`` bytes: about one
    record's bytes of offsets (a power of two, clamped to [16, 8192])."""
    mean = size / max(records, 1)
    p = 1 << max(0, round(math.log2(max(mean / 8.0, 1.0))))
    return min(max(p, MIN_PAGE_RECORDS), MAX_PAGE_RECORDS)


class Pager:
    """This process's paged-read state of one shard.

    Attributes:
        page_records: Records per page.
        checked: The sidecar header was fetched and checked against the manifest.
        end: The indexed end it gives (closes the last page); -1 until checked.
        overhead: Framing bytes of one record.
        fresh: The data file's stamp was checked against the header, or is checked by its
            storage on its first read (:meth:`Storage.expect_indexed`), or needs no check.
        whole: The shard is read through its whole sidecar instead (small, version 1 or
            compressed).
        key: The shard's key in the node cache (sidecar URL and stamp).
    """

    __slots__ = ("end", "fresh", "key", "overhead", "page_records", "pid", "whole")

    def __init__(self, page_records: int, key: bytes, whole: bool, fresh: bool) -> None:
        self.page_records = page_records
        self.key = key
        self.whole = whole
        self.fresh = fresh
        self.end = -1
        self.overhead = 0
        self.pid = os.getpid()

    @property
    def checked(self) -> bool:
        return self.end >= 0

    @property
    def keyed(self) -> bool:
        """Whether the node-cache key is known (not before the shard's stamp is: a compact
        manifest's stamps page comes in the round that fetches the first pages)."""
        return bool(self.key)

    def accept(self, header: SidecarHeader) -> None:
        """Keep what reads need of a checked header (a few integers per shard)."""
        self.end = header.indexed_end
        self.overhead = header.format.overhead

    def page_key(self, page: int) -> bytes:
        """The node-cache key of one page."""
        return self.key + struct.pack("<iq", self.page_records, page)

    @property
    def header_key(self) -> bytes:
        """The node-cache key of the header."""
        return self.key + b"header"


def pager_of(shard: Shard) -> Pager | None:
    """The shard's pager, or ``None`` when its sidecar is read whole (local sidecars, no
    manifest, a loaded sidecar, a small, version 1 or compressed one, a dataset whose data
    is cached on the machine)."""
    cache = shard.cache
    if cache is None or cache.whole or shard.records <= 0 or shard.loaded or (
            not shard.stamp_pending and shard.fingerprint is None):
        return None
    pager: Pager | None = shard.pager
    if pager is None or pager.pid != os.getpid():
        pager = shard.pager = new_pager(shard)
    return None if pager.whole else pager


def new_pager(shard: Shard) -> Pager:
    """A fresh pager for a shard whose record count, size and stamp are known (from a
    manifest, or from the header pinned when it was opened); its header not checked yet."""
    p = page_records_for(shard.records, shard.size)
    pager = Pager(p, b"", whole=shard.records <= WHOLE_BELOW_PAGES * p,
                  fresh=shard.data_storage is None)
    if not shard.stamp_pending:
        key_pager(shard, pager)
    return pager


def key_pager(shard: Shard, pager: Pager) -> None:
    """Give a pager its node-cache key, once the shard's stamp is known."""
    expect = shard.expected_stamp()
    assert expect is not None
    pager.key = sidecar_key(shard.index_url, expect, shard.body_crc)


def page_range(pager: Pager, records: int, first: int, last: int) -> tuple[int, int]:
    """Byte range of pages ``first..last`` (and the offset after them) in the sidecar."""
    a = first * pager.page_records
    b = min((last + 1) * pager.page_records + 1, records)
    return HEADER_SIZE + 8 * a, HEADER_SIZE + 8 * b


def split_pages(pager: Pager, count: int, first: int, last: int,
                raw: bytes | memoryview, shard: Shard) -> dict[int, np.ndarray]:
    """Cut the bytes of :func:`page_range` into pages; the last page of the sidecar gets
    the indexed end as its closing offset.

    Pages are not covered by the sidecar's body CRC (only whole sidecars are), so each run
    is checked as it arrives: its offsets must rise by at least one record's framing and end
    within the indexed end, as every offsets block the builder writes does.

    Raises:
        SidecarError: The run breaks that rule (a corrupt sidecar, or a bad transfer).
    """
    offsets = np.frombuffer(raw, dtype="<u8")
    n, p = count, pager.page_records
    closed = first * p + len(offsets) >= n  # the run reaches the last record: the end closes it
    check_bounds(shard, pager, first * p,
                 np.append(offsets, np.uint64(pager.end)) if closed else offsets)
    out = {}
    for page in range(first, last + 1):
        lo = (page - first) * p
        a = page * p
        if a + p < n:
            out[page] = offsets[lo : lo + p + 1].copy()
        else:
            out[page] = np.append(offsets[lo : lo + (n - a)], np.uint64(pager.end))
    return out


def check_bounds(shard: Shard, pager: Pager, first: int, bounds: np.ndarray) -> None:
    """Refuse a run of record bounds (the starts of records ``first``, ``first + 1`` … and
    what closes the last) that no build writes: fetched pages, and pages found in the node
    cache, are not covered by the sidecar's body CRC.

    Raises:
        SidecarError: Naming the first record whose range is impossible.
    """
    low = bounds[:-1]
    # unsigned comparisons, no subtraction that can wrap: these come from the network
    bad = (bounds[1:] < low) | (bounds[1:] - np.minimum(low, bounds[1:]) < pager.overhead)
    bad |= bounds[1:] > np.uint64(pager.end)
    if bad.any():
        k = int(np.argmax(bad))
        raise SidecarError(
            f"{shard.index_url}: record {first + k}: the index gives the byte range "
            f"[{int(bounds[k])}, {int(bounds[k + 1])}), which no record can have (the offsets "
            "must rise by at least one record's framing, within the indexed end); the "
            f"sidecar is corrupt — rebuild it with `ofindex build {shard.data_url}`"
        )


def pageable(header: SidecarHeader) -> bool:
    """Whether a sidecar can be read by pages: version 2, fixed header, not compressed (a
    version 3 sidecar's offsets are packed: it is always fetched whole)."""
    return (header.version == VERSION and header.header_size == HEADER_SIZE
            and header.compression is Compression.NONE and header.seek_points == 0)


def header_fetch_bytes(shard: Shard) -> int:
    """Bytes of the header to fetch: the fields and the fingerprint the manifest expects; the
    rest of the 512 bytes is zero padding, which the header CRC then vouches for (all 512 when
    the fingerprint is still in a compact manifest's page, fetched in the same round)."""
    if shard.stamp_pending:
        return HEADER_SIZE
    fingerprint = (shard.fingerprint or "").encode("utf-8")
    return min(HEADER_SIZE, (_FINGERPRINT_AT + len(fingerprint) + 7) // 8 * 8)


def parse_page_header(shard: Shard, raw: bytes | memoryview) -> SidecarHeader | None:
    """Decode and check the start of a shard's sidecar (its first 512 bytes, or the part
    :func:`header_fetch_bytes` names, the rest taken as the zero padding it must be).

    Returns:
        The header, or ``None`` when the sidecar is not read by pages (version 1, compressed,
        or a short header that does not check out: the whole fetch then says why).

    Raises:
        SidecarError: A corrupt header.
        StaleIndexError: It disagrees with the manifest.
    """
    if len(raw) < 10 or struct.unpack_from("<H", raw, 8)[0] != VERSION:
        return None  # version 1 or 3 (or not a sidecar at all: the whole fetch says which)
    head = bytes(raw[:HEADER_SIZE])
    short = len(head) < HEADER_SIZE
    try:
        header = _decode_header(head + bytes(HEADER_SIZE - len(head)), path=shard.index_url)
    except SidecarError:
        if short:
            return None
        raise
    if shard.records >= 0 and header.count < shard.records:
        return None  # a sidecar that grew with its file: its segments are read whole
    shard.check_header(header)
    return header if pageable(header) else None


def spans_from_pages(shard: Shard, pager: Pager, pages: dict[int, np.ndarray],
                     local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte spans of local records ``local`` of one shard, from its pages.

    Raises:
        SidecarError: A span too short to hold a record (corrupt offsets).
    """
    p = pager.page_records
    page_of = local // p
    if len(pages) == 1:
        (bounds,) = pages.values()
        at = local - page_of[0] * p
    else:  # the pages end to end, each record looked up in one gather (not a mask a page)
        numbers = sorted(pages)
        bounds = np.concatenate([pages[page] for page in numbers])
        first = np.cumsum([0] + [len(pages[page]) for page in numbers[:-1]])
        at = first[np.searchsorted(numbers, page_of)] + (local - page_of * p)
    starts = bounds[at].astype(np.int64)
    ends = bounds[at + 1].astype(np.int64)
    short = ends - starts < pager.overhead
    if short.any():
        k = int(np.argmax(short))
        raise SidecarError(
            f"{shard.index_url}: record {int(local[k])}: the index gives the byte range "
            f"[{int(starts[k])}, {int(ends[k])}), too short for a record; the sidecar's "
            "offsets are corrupt — rebuild it with `ofindex build`"
        )
    return starts, ends
