"""Random reads from gzip/zlib shards: inflate from the seek point before a record.

A record costs one read of the compressed bytes from its seek point to the next point past
its end (one range request on remote storage; none on a memory-mapped local file), then
inflating from the point to the record's end (about ``spacing / 2`` bytes on average). A batch
is sorted by offset and cut into *pieces*: runs of records served by one inflate pass from
one seek point (a record joins the current piece when its own point lies before the end of
what the piece inflates anyway). Each piece's compressed span is read once (remote pieces
all at once) and inflated once (big batches: pieces on a few threads); records are cut out
of the result and checked as in an uncompressed file (TFRecord CRCs with ``verify``).
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from .._threads import ProcessPool
from ..errors import CorruptRecordError, TruncatedRecordError
from ..formats.framing import RecordFormat
from ..formats.seekpoints import SeekTable
from ..formats.sidecar import Sidecar
from ..index.inflate import InflateFailure, in_stream_error, inflate_span
from ..storage import Storage
from ..storage.ranges import DEFAULT_MAX_BYTES, coalesce
from .checksums import check_many, check_one, sidecar_sums
from .index_round import load_sidecars
from .payloads import extract_payloads
from .record_checks import RecordChecks
from .table import ShardTable

#: A piece inflates at most about this many bytes before the next one starts afresh.
MAX_PIECE_BYTES = 64 << 20
#: From this many bytes to inflate in a batch on, its pieces are inflated on a few threads
#: (zlib runs without the GIL in the compiled module, and largely so in Python's).
PARALLEL_INFLATE_BYTES = 2 << 20



def read_record(storage: Storage, path: str, sc: Sidecar, record: int, fmt: RecordFormat,
                verify: bool) -> bytes:
    """The payload of record ``record`` of a compressed shard (see the module docstring).

    Raises:
        CorruptRecordError, TruncatedRecordError: The record or the compressed data around it
            is bad (naming the file, the record and the compressed offset).
        SidecarError: The sidecar's offsets or seek points are corrupt.
    """
    start, end = sc.span(record)
    if end - start < fmt.overhead or end > sc.indexed_end:
        raise sc.bad_span(record, start, end)
    seeks = sc.seeks
    k = seeks.point_before(start)
    a = seeks.compressed_start(k)
    rec = np.array([record], dtype=np.int64)
    url = storage.url(path)
    full = seeks.compressed_end(end)
    views = _mapped_views(storage, path, [(a, full)])
    src = views[0] if views is not None else storage.read(path, a, int(_fetch_ends(
        storage, seeks, np.array([k]), np.array([end]))[0]))
    buf, base = _inflate_piece(storage, path, url, sc, k, end, src, a, full, np.array([end]),
                               rec)
    try:
        got: bytes = extract_payloads(buf, np.array([start - base]), np.array([end - base]),
                                      fmt, verify, url, np.array([start]), rec)[0]
    except CorruptRecordError as exc:
        raise in_stream_error(exc, sc.compression, a) from None
    sums = sidecar_sums(sc, verify)
    if sums is not None:
        check_one(got, int(sums[record]), path=url, offset=start, record=record)
    return got


def read_records(storage: Storage, path: str, sc: Sidecar, records: np.ndarray,
                 fmt: RecordFormat, verify: bool) -> list[Any]:
    """Payloads of records of one compressed shard, read piece by piece (see the module).

    Args:
        storage: Storage of the data file.
        path: The data file.
        sc: Its sidecar.
        records: Local record numbers (int64), any order, duplicates allowed.
        fmt: The framing.
        verify: Check TFRecord CRCs.

    Returns:
        The payloads, in the order of ``records``.

    Raises:
        CorruptRecordError, TruncatedRecordError: As for :func:`read_record`.
        SidecarError: The sidecar's offsets or seek points are corrupt.
    """
    starts, ends = sc.spans(records)
    seeks = sc.seeks
    order = np.argsort(starts, kind="stable")
    s, e, r = starts[order], ends[order], records[order]
    pieces = plan_pieces(s, e, seeks)
    url = storage.url(path)
    ks = np.array([k for k, _, _ in pieces], dtype=np.int64)
    reaches = np.maximum.reduceat(e, [lo for _, lo, _ in pieces]) if pieces else e[:0]
    reach = reaches.tolist()
    first_in = seeks.compressed_starts(ks)
    full_ends = seeks.compressed_ends(reaches)
    spans = list(zip(first_in.tolist(), full_ends.tolist(), strict=True))

    sums = sidecar_sums(sc, verify)

    def piece(j: int, src: Any) -> list[Any]:
        k, lo, hi = pieces[j]
        a = spans[j][0]
        buf, base = _inflate_piece(storage, path, url, sc, k, reach[j], src, a, spans[j][1],
                                   e[lo:hi], r[lo:hi])
        try:
            got = extract_payloads(buf, s[lo:hi] - base, e[lo:hi] - base, fmt, verify, url,
                                   s[lo:hi], r[lo:hi])
        except CorruptRecordError as exc:
            raise in_stream_error(exc, sc.compression, a) from None
        if sums is not None:
            starts_of = s[lo:hi]
            check_many(got, sums[r[lo:hi]],
                       lambda m: (url, int(starts_of[m]), int(r[lo + m])))
        return got

    work = int((reaches - seeks.out[ks]).sum())
    pool = _executor() if len(pieces) > 1 and work >= PARALLEL_INFLATE_BYTES else None
    views = _mapped_views(storage, path, spans)
    if views is not None:
        done = (list(pool.map(piece, range(len(pieces)), views)) if pool is not None
                else [piece(j, views[j]) for j in range(len(pieces))])
    else:
        wanted = list(zip(first_in.tolist(), _fetch_ends(storage, seeks, ks, reaches).tolist(),
                          strict=True))
        done = _fetch_and_inflate(storage, path, wanted, piece, pool)
    out = np.empty(len(records), dtype=object)
    for (_, lo, hi), got in zip(pieces, done, strict=True):
        out[order[lo:hi]] = got
    return list(out.tolist())


#: Threads that inflate the pieces of a batch.
_POOL = ProcessPool("ofindex-inflate")


def _executor() -> cf.ThreadPoolExecutor | None:
    """This process's pool: threads that inflate the pieces of a batch (``None`` on one core)."""
    return _POOL.get()


def plan_pieces(starts: np.ndarray, ends: np.ndarray,
                seeks: SeekTable) -> list[tuple[int, int, int]]:
    """Cut records sorted by start into pieces ``(seek point, first, one past the last)``.

    A record joins the current piece while its own seek point lies before the end of what
    the piece inflates anyway, and the piece stays under :data:`MAX_PIECE_BYTES`.
    """
    n = len(starts)
    if not n:
        return []
    points = seeks.points_before(starts)
    at = seeks.out[points]
    reach = np.maximum.accumulate(ends)
    fresh = np.zeros(n, dtype=bool)  # starting afresh at the record's own point redoes nothing
    fresh[1:] = at[1:] >= reach[:-1]
    if int(reach[-1]) - int(at[0]) > MAX_PIECE_BYTES:  # long runs: also split at later points
        first = 0
        for j in range(1, n):
            if fresh[j]:
                first = j
            elif points[j] > points[first] and reach[j - 1] - at[first] > MAX_PIECE_BYTES:
                fresh[j] = True
                first = j
    bounds = [*np.flatnonzero(fresh).tolist(), n]
    if bounds[0] != 0:
        bounds.insert(0, 0)
    return [(int(points[lo]), lo, hi) for lo, hi in itertools.pairwise(bounds)]


def _mapped_views(storage: Storage, path: str,
                  spans: list[tuple[int, int]]) -> list[memoryview] | None:
    """Views of the memory map for each span, or ``None`` when the file is not mapped."""
    if storage.can_mmap:
        mm = storage.mapped(path, max(b for _, b in spans))
        if mm is not None:
            view = memoryview(mm)
            return [view[a:b] for a, b in spans]
    return None


def _fetch_ends(storage: Storage, seeks: SeekTable, ks: np.ndarray,
                reaches: np.ndarray) -> np.ndarray:
    """Where to stop reading the spans from points ``ks`` to uncompressed ``reaches``: their
    ends on local files, an estimate of what is needed on remote ones (the rest is read only
    when it falls short: :func:`_inflate_piece`)."""
    if storage.is_local:
        return seeks.compressed_ends(reaches)
    return seeks.estimated_ends(ks, reaches)


def _fetch_and_inflate(storage: Storage, path: str, spans: list[tuple[int, int]],
                       piece: Callable[[int, Any], list[Any]],
                       pool: cf.ThreadPoolExecutor | None) -> list[list[Any]]:
    """Read the spans (merged where they touch or nearly do, all at once on remote storage)
    and run ``piece(j, bytes of span j)`` for each: on ``pool`` as soon as its read arrives,
    so that inflating overlaps the reads still in flight, or one by one after them."""
    starts = np.array([a for a, _ in spans], dtype=np.int64)
    ends = np.array([b for _, b in spans], dtype=np.int64)
    plan = coalesce(starts, ends, storage.preferred_gap(path), DEFAULT_MAX_BYTES)
    served: list[list[int]] = [[] for _ in range(len(plan.fetch_starts))]
    for j, f in enumerate(plan.item_fetch.tolist()):
        served[f].append(j)
    offset = plan.item_offset.tolist()
    sources: list[Any] = [None] * len(spans)
    futures: list[cf.Future[list[Any]] | None] = [None] * len(spans)

    def arrived(f: int, data: bytes | memoryview) -> None:
        view = memoryview(data)
        for j in served[f]:
            sources[j] = view[offset[j] : offset[j] + (spans[j][1] - spans[j][0])]
            if pool is not None:
                futures[j] = pool.submit(piece, j, sources[j])

    storage.read_ranges_each([path] * len(plan.fetch_starts), plan.fetch_starts.tolist(),
                             plan.fetch_ends.tolist(), arrived)
    return [fut.result() if (fut := futures[j]) is not None else piece(j, sources[j])
            for j in range(len(spans))]


def _inflate_piece(storage: Storage, path: str, url: str, sc: Sidecar, k: int, reach: int,
                   src: Any, a: int, full: int, ends: np.ndarray,
                   records: np.ndarray) -> tuple[bytearray | bytes, int]:
    """:func:`_inflate`, reading the rest of the span up to ``full`` and inflating again when
    ``src`` (an estimate of what is needed) ends too early."""
    try:
        return _inflate(url, sc, k, reach, src, a, ends, records)
    except CorruptRecordError as exc:
        if a + len(src) >= full or not isinstance(exc, TruncatedRecordError):
            raise
    rest = storage.read(path, a + len(src), full)
    return _inflate(url, sc, k, reach, bytes(src) + rest, a, ends, records)


def _inflate(url: str, sc: Sidecar, k: int, reach: int, src: Any, a: int, ends: np.ndarray,
             records: np.ndarray) -> tuple[bytearray | bytes, int]:
    """Inflate from point ``k`` to uncompressed ``reach``; returns the bytes and the
    uncompressed offset of their start. Failures name the first record they cut short."""
    seeks = sc.seeks
    base = int(seeks.out[k])
    try:
        buf = inflate_span(src, a, int(seeks.kind[k]), int(seeks.bits[k]), seeks.window(k),
                           sc.compression, reach - base)
    except InflateFailure as failure:
        cut = int(np.argmax(ends > base + failure.produced))
        raise failure.error(url, int(records[cut]), sc.compression) from None
    return buf, base


def read_batch(table: ShardTable, checks: RecordChecks, indices: np.ndarray,
               plain: Callable[[np.ndarray], list[Any]]) -> list[Any]:
    """Payloads of records of a dataset with compressed shards (any mix).

    Args:
        table: The shards.
        checks: What to check.
        indices: Global record numbers (valid, non-negative).
        plain: Reads the records of uncompressed shards (global numbers).

    Returns:
        The payloads, in the order of ``indices``.
    """
    shard_of = table.shard_numbers(indices)
    touched = np.unique(shard_of).tolist()
    load_sidecars([table.shards[s] for s in touched])
    out = np.empty(len(indices), dtype=object)
    is_plain = np.ones(len(indices), dtype=bool)
    for s in touched:
        shard = table.shards[s]
        sc = shard.sidecar
        if not sc.compressed:
            continue
        sel = np.flatnonzero(shard_of == s)
        is_plain[sel] = False
        out[sel] = read_records(table.storage, shard.path, sc, indices[sel] - table.first[s],
                                checks.format, checks.verify)
    if is_plain.any():
        got = plain(indices[is_plain])
        holder = np.empty(len(got), dtype=object)
        holder[:] = got
        out[is_plain] = holder
    return list(out.tolist())
