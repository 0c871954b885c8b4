"""Random reads from gzip/zlib shards: inflate from the seek point before a record.

A record costs one read of the compressed bytes from its seek point to the next point past
its end (one range request on remote storage, a ``pread`` locally: zlib's inflate, which
cannot be guarded against a map whose file shrank, never reads a memory map), then
inflating from the point to the record's end (about ``spacing / 2`` bytes on average). A batch
is sorted by offset and cut into *pieces*: runs of records served by one inflate pass from
one seek point (a record joins the current piece when its own point lies before the end of
what the piece inflates anyway). Each piece's compressed span is read once (remote pieces
all at once) and inflated once (big batches: pieces on a few threads); records are cut out
of the result and checked as in an uncompressed file (TFRecord CRCs with ``verify``).
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import itertools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from .._threads import ProcessPool
from ..deflate.inflate import InflateFailure, check_inflatable, in_stream_error, inflate_span
from ..errors import CorruptRecordError, TruncatedRecordError
from ..formats.framing import Buffer, RecordFormat
from ..formats.seekpoints import SeekTable
from ..formats.sidecar import Sidecar
from ..storage import Storage
from .payloads import DEFAULT_MAX_BYTES, coalesce, extract_payloads
from .sum_checks import check_many, check_one, record_namer_of, sidecar_sums

#: A piece inflates at most about this many bytes before the next one starts afresh.
MAX_PIECE_BYTES = 64 << 20
#: From this many bytes to inflate in a batch on, its pieces are inflated on a few threads
#: (zlib runs without the GIL in the compiled module, and largely so in Python's).
PARALLEL_INFLATE_BYTES = 2 << 20



def read_record(storage: Storage, path: str, sidecar: Sidecar, record: int, fmt: RecordFormat,
                verify: bool, native: ModuleType | None) -> bytes:
    """The payload of record ``record`` of a compressed shard (see the module docstring),
    cut out of what is inflated by the compiled module ``native`` (or the pure-Python loops).

    Raises:
        CorruptRecordError, TruncatedRecordError: The record or the compressed data around it
            is bad (naming the file, the record and the compressed offset).
        SidecarError: The sidecar's offsets or seek points are corrupt.
    """
    start, end = sidecar.span(record)
    if end - start < fmt.overhead or end > sidecar.indexed_end:
        raise sidecar.bad_span(record, start, end)
    seeks = sidecar.seeks
    k = seeks.point_before(start)
    a = seeks.compressed_start(k)
    rec = np.array([record], dtype=np.int64)
    url = storage.url(path)
    piece = Piece(k, end, a, seeks.compressed_end(end), np.array([end]), rec)
    src = storage.read(path, a, int(_fetch_ends(storage, seeks, np.array([k]),
                                               np.array([end]))[0]))
    buf, base = _inflate_piece(CompressedShard(storage, path, url, sidecar), piece, src)
    try:
        got: bytes = extract_payloads(buf, np.array([start - base]), np.array([end - base]),
                                      fmt, verify, url, np.array([start]), rec, native)[0]
    except CorruptRecordError as exc:
        raise in_stream_error(exc, sidecar.compression, a) from None
    sums = sidecar_sums(sidecar, verify)
    if sums is not None:
        check_one(got, int(sums[record]), path=url, offset=start, record=record)
    return got


def read_records(storage: Storage, path: str, sidecar: Sidecar, records: np.ndarray,
                 fmt: RecordFormat, verify: bool, native: ModuleType | None) -> list[Any]:
    """Payloads of records of one compressed shard, read piece by piece (see the module).

    Args:
        storage: Storage of the data file.
        path: The data file.
        sidecar: Its sidecar.
        records: Local record numbers (int64), any order, duplicates allowed.
        fmt: The framing.
        verify: Check TFRecord CRCs.
        native: The compiled module that cuts the records out, or ``None``.

    Returns:
        The payloads, in the order of ``records``.

    Raises:
        CorruptRecordError, TruncatedRecordError: As for :func:`read_record`.
        SidecarError: The sidecar's offsets or seek points are corrupt.
    """
    starts, ends = sidecar.spans(records)
    seeks = sidecar.seeks
    order = np.argsort(starts, kind="stable")
    by_start, by_end, by_record = starts[order], ends[order], records[order]
    pieces = plan_pieces(by_start, by_end, seeks)
    url = storage.url(path)
    shard = CompressedShard(storage, path, url, sidecar)
    ks = np.array([k for k, _, _ in pieces], dtype=np.int64)
    reaches = np.maximum.reduceat(by_end, [lo for _, lo, _ in pieces]) if pieces else by_end[:0]
    reach = reaches.tolist()
    first_in = seeks.compressed_starts(ks)
    full_ends = seeks.compressed_ends(reaches)
    spans = list(zip(first_in.tolist(), full_ends.tolist(), strict=True))

    sums = sidecar_sums(sidecar, verify)

    def inflate_piece(j: int, src: Buffer) -> list[Any]:
        k, lo, hi = pieces[j]
        piece = Piece(k, reach[j], spans[j][0], spans[j][1], by_end[lo:hi], by_record[lo:hi])
        buf, base = _inflate_piece(shard, piece, src)
        try:
            got = extract_payloads(buf, by_start[lo:hi] - base, by_end[lo:hi] - base, fmt,
                                   verify, url, by_start[lo:hi], by_record[lo:hi], native)
        except CorruptRecordError as exc:
            raise in_stream_error(exc, sidecar.compression, piece.compressed_start) from None
        if sums is not None:
            check_many(got, sums[piece.records],
                       record_namer_of(url, by_start[lo:hi], piece.records))
        return got

    work = int((reaches - seeks.out[ks]).sum())
    pool = _executor() if len(pieces) > 1 and work >= PARALLEL_INFLATE_BYTES else None
    wanted = list(zip(first_in.tolist(), _fetch_ends(storage, seeks, ks, reaches).tolist(),
                      strict=True))
    done = _fetch_and_inflate(storage, path, wanted, inflate_piece, pool)
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


@dataclasses.dataclass(frozen=True)
class CompressedShard:
    """A compressed shard being read: where its data is and its sidecar."""

    storage: Storage
    path: str
    url: str
    sidecar: Sidecar


@dataclasses.dataclass(frozen=True)
class Piece:
    """A run of records served by one inflate pass from one seek point.

    Attributes:
        point: The seek point inflating starts at.
        reach: The uncompressed offset to inflate up to (the run's last record's end).
        compressed_start: The first compressed byte read (the point's).
        compressed_end: Where the compressed bytes that can hold ``reach`` surely end.
        ends: The run's records' uncompressed ends (to name the first cut short).
        records: Their record numbers.
    """

    point: int
    reach: int
    compressed_start: int
    compressed_end: int
    ends: np.ndarray
    records: np.ndarray


def _inflate_piece(shard: CompressedShard, piece: Piece,
                   src: Buffer) -> tuple[bytearray | bytes, int]:
    """:func:`_inflate`, reading the rest of the span up to ``piece.compressed_end`` and
    inflating again when ``src`` (an estimate of what is needed) ends too early."""
    try:
        return _inflate(shard, piece, src)
    except CorruptRecordError as exc:
        have = piece.compressed_start + len(src)
        if have >= piece.compressed_end or not isinstance(exc, TruncatedRecordError):
            raise
    rest = shard.storage.read(shard.path, have, piece.compressed_end)
    return _inflate(shard, piece, bytes(src) + rest)


def _inflate(shard: CompressedShard, piece: Piece,
             src: Buffer) -> tuple[bytearray | bytes, int]:
    """Inflate from the piece's point to its reach; returns the bytes and the uncompressed
    offset of their start. Failures name the first record they cut short."""
    seeks, k, compression = shard.sidecar.seeks, piece.point, shard.sidecar.compression
    base = int(seeks.out[k])
    check_inflatable(shard.url, int(piece.records[-1]), piece.reach - base,
                     piece.compressed_end - piece.compressed_start)
    try:
        buf = inflate_span(src, piece.compressed_start, int(seeks.kind[k]), int(seeks.bits[k]),
                           seeks.window(k), compression, piece.reach - base)
    except InflateFailure as failure:
        cut = int(np.argmax(piece.ends > base + failure.produced))
        raise failure.error(shard.url, int(piece.records[cut]), compression) from None
    return buf, base
