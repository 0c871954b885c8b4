"""Batches of memory-mapped shards (:meth:`Dataset.iter_batches` on local files): each batch
is one compiled call per shard it touches, over spans planned for a run of batches at once.

A list costs one ``bytes`` object per record. With a core to spare, how a list is made is
chosen in one place, :func:`_filling`:

* lists of small records, and :class:`RecordBatch` buffers: a compiled thread
  (:class:`Checker`) checks each run's TFRecord CRCs ahead of the batch being made, without
  the GIL at any point, and the iterating thread only makes the objects, or copies the
  payloads (:data:`Filling.CHECKED_AHEAD`);
* lists of at least :data:`FILL_AHEAD_BYTES`: the iterating thread makes the objects (not
  filled yet) and the pool's threads copy and check the records into them without the GIL,
  one list ahead of the one handed out (:data:`Filling.FILLED_AHEAD`).

A :class:`RecordBatch` makes no object per record: its payloads are copied, without the GIL,
into a buffer that a big batch takes from the memory earlier big batches released
(:func:`ofindex._accel.pooled_bytes`), and checked as they are when no core is spare.
"""

from __future__ import annotations

import enum
import functools
import os
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, NoReturn

import crc32c as _crc32c
import numpy as np

from ... import _accel
from ...errors import OfindexError
from ...formats.crc import LENGTH_CRCS
from ...formats.sidecar import Sidecar
from ...storage import openfiles
from ..batch_source import BatchSource
from ..mapped_gather import executor, shares
from ..payloads import raise_record_error
from ..sum_checks import check_many, record_namer, sidecar_sums
from .record_batch import RecordBatch


def _compiled(src: BatchSource) -> ModuleType:
    """The compiled module the maps of ``src`` are read by (its access holds it)."""
    native = src.native
    assert native is not None  # iterations over maps are made only with it
    return native


class _SpanArrays:
    """Two int64 buffers for the spans of runs of records, used in turn, and the scratch of
    their checks: reused for every run of an iteration, because glibc hands fresh blocks of
    over 128 KiB back to the system when they are freed, and a new one costs a page fault
    per 4 KiB (about a millisecond for a run's 0.5 MB here).

    Args:
        size: Records of the biggest run (a request for more gets fresh arrays).
    """

    def __init__(self, size: int) -> None:
        self._buffers = [np.empty(size + 1, np.int64), np.empty(size + 1, np.int64)]
        self._diffs = np.empty(size, np.int64)
        self._short = np.empty(size, np.bool_)
        self._turn = 0
        self._used = 0

    def next_run(self) -> None:
        """Start a run: the other buffer is taken (the one before it must be out of use)."""
        self._turn ^= 1
        self._used = 0

    def bounds(self, n: int) -> np.ndarray:
        """``n + 1`` int64 slots of the current buffer (or fresh ones when it is full)."""
        buf = self._buffers[self._turn]
        if self._used + n + 1 > len(buf):
            return np.empty(n + 1, np.int64)
        self._used += n + 1
        return buf[self._used - n - 1 : self._used]

    def short(self, bounds: np.ndarray, overhead: int) -> np.ndarray:
        """Whether each span between consecutive ``bounds`` is shorter than ``overhead``."""
        n = len(bounds) - 1
        if n > len(self._diffs):
            short: np.ndarray = np.diff(bounds) < overhead
            return short
        diffs = np.subtract(bounds[1:], bounds[:-1], out=self._diffs[:n])
        out: np.ndarray = np.less(diffs, overhead, out=self._short[:n])
        return out


def _run_spans(sidecar: Sidecar, lo: int, hi: int,
               arrays: _SpanArrays | None = None) -> tuple[np.ndarray, np.ndarray]:
    """File byte ranges of records ``lo..hi-1`` of one shard (a contiguous run of offsets),
    in ``arrays`` when given."""
    bounds = arrays.bounds(hi - lo) if arrays is not None else np.empty(hi - lo + 1, np.int64)
    bounds[:-1] = sidecar.offsets[lo:hi]  # starts and ends: two views of one array
    if hi < len(sidecar.offsets):  # cast as the slice is: an offset past int64 (corrupt)
        bounds[-1:] = sidecar.offsets[hi:hi + 1]  # reads as negative, and is refused below
    else:
        bounds[-1] = sidecar.indexed_end
    starts, ends = bounds[:-1], bounds[1:]
    short = (arrays.short(bounds, sidecar.format.overhead) if arrays is not None
             else np.diff(bounds) < sidecar.format.overhead)
    if short.any():
        k = int(np.argmax(short))
        raise sidecar.bad_span(lo + k, int(starts[k]), int(ends[k]))
    return starts, ends


#: A part of a batch: (shard number, first and end record in the shard, their file spans,
#: the shard's map).
_Part = tuple[int, int, int, np.ndarray, np.ndarray, Any]


def _plan_parts(src: BatchSource, a: int, b: int,
          arrays: _SpanArrays | None = None) -> list[_Part] | None:
    """The shard runs of records ``a..b-1`` with their spans (in ``arrays`` when given) and
    maps (sidecars and maps are opened here, in the iterating thread); ``None`` when a shard
    is shorter than its index says, or the records are in more shards than a read may hold
    at once (:func:`~ofindex.storage.openfiles.limits`): they are then read otherwise, each
    shard streamed in turn."""
    parts: list[_Part] = []
    shard_no = int(np.searchsorted(src.table.cumulative, a, side="right"))
    pos = a
    most = openfiles.limits().per_read
    while pos < b:  # the shards the run touches (usually one)
        if len(parts) == most:
            return None
        first = int(src.table.first[shard_no])
        shard = src.table.shards[shard_no]
        lo, hi = pos - first, min(b - first, shard.records)
        if hi > lo:
            if shard.sidecar.compressed:  # offsets into the inflated stream: no map to cut
                return None
            starts, ends = _run_spans(shard.sidecar, lo, hi, arrays)
            buf = shard.storage.mapped(shard.path, int(ends[-1]))
            if buf is None:
                return None
            parts.append((shard_no, lo, hi, starts, ends, buf))
        pos = first + hi
        shard_no += 1
    return parts


def _cut(src: BatchSource, parts: list[_Part], a: int, as_buffer: bool,
         checks: list[_Check] | None = None) -> Any:
    """The batch of records ``a..`` made from its planned parts by the compiled loops in this
    thread (the checks and copies run without the GIL); with ``checks`` (one per part), the
    parts' CRCs were checked ahead by their run's :class:`Checker`: each part's are waited
    for before it is cut, and only its framing is checked as it is."""
    native = _compiled(src)
    fmt = src.checks.format
    tf_verify = src.checks.tfrecord_crcs and checks is None
    hs, fs = fmt.header_size, fmt.footer_size
    compiled_checks = not tf_verify or native.hw_crc()  # checks without the GIL
    sums = [sidecar_sums(src.table.shards[s].sidecar, src.checks.verify) for s, *_ in parts]
    use_pack = as_buffer and compiled_checks and all(x is None for x in sums)
    n = sum(hi - lo for _, lo, hi, _, _, _ in parts)
    if use_pack:
        # room for the payloads (an upper bound: their framed size), on memory that an
        # earlier batch released (pooled_bytes)
        data = _accel.pooled_bytes(sum(int(e[-1] - st[0]) for _, _, _, st, e, _ in parts),
                                   BUFFER_POOLED_BYTES)
        offsets = np.empty(n + 1, dtype=np.int64)
    out: list[Any] = []
    k0 = used = 0
    for p, ((shard_no, lo, hi, starts, ends, buf), part_sums) in enumerate(zip(parts, sums,
                                                                        strict=True)):
        if checks is not None:  # its CRCs, checked ahead: the first bad record is raised
            _wait_checks(src, parts[p], checks[p])
        if use_pack:
            bad = native.pack(buf, starts, ends, hs, fs, tf_verify, data,
                              offsets[k0:k0 + hi - lo + 1], used)
        elif not compiled_checks:
            got = native.cut(buf, starts, ends, hs, fs, tf_verify, _crc32c.crc32c, LENGTH_CRCS)
            bad = -1 if isinstance(got, list) else got
        else:  # checked without the GIL, then the objects made
            got = native.slices(buf, starts, ends, hs, fs, tf_verify, False)
            bad = -1 if isinstance(got, list) else got
        if bad >= 0:
            _raise_at(src, parts[p], bad)
        if use_pack:
            k0 += hi - lo
            used = int(offsets[k0])
        else:
            if part_sums is not None:  # OFRecord payloads against the sidecar's CRC32C
                check_many(got, part_sums[lo:hi], record_namer(src.table.url(shard_no),
                                                               starts, lo))
            if len(parts) == 1:  # the batch is this list (no copy into another)
                out = got
            else:
                out += got
    if use_pack:
        return RecordBatch(data[:used], offsets, a)
    return src.finish(out, a, as_buffer)


#: RecordBatch buffers of at least this many bytes are made on pooled memory: glibc maps
#: fresh ones of a few hundred KB afresh at every batch (1 M x 200 B in buffers of 4,096
#: records: 92 page faults a batch, 11 M records/s; pooled: none, 17 M records/s).
BUFFER_POOLED_BYTES = 256 << 10

#: A list's parts of at least this many bytes are filled on two threads (100 KB records in
#: lists of ~4 MB: 6.0 GB/s against 4.9 on one, the machine loaded).
_SPLIT_BYTES = 1 << 20


def _start_fill(src: BatchSource, parts: list[_Part], a: int) -> Callable[[], Any]:
    """Start copying and checking the records of a list (records ``a..``) on the pool's
    threads, without the GIL, into ``bytes`` objects made here; returns what waits for them
    and gives the list (or raises the error of its first bad record)."""
    native, pool = _compiled(src), executor()
    assert pool is not None  # checked by the caller
    header, footer, verify = src.checks.header, src.checks.footer, src.checks.tfrecord_crcs
    pid = os.getpid()
    jobs = []
    for shard_no, lo, hi, starts, ends, buf in parts:
        # copies: the run's span buffers are reused while a fill may still read them
        part = (shard_no, lo, hi, starts.copy(), ends.copy(), buf)
        outs = native.blank(part[4] - part[3] - src.checks.overhead)
        which = np.zeros(hi - lo, np.int64)
        sizes = part[4] - part[3]
        cuts = shares(sizes, 2 if int(sizes.sum()) >= _SPLIT_BYTES else 1)
        fill = functools.partial(native.fill, [buf], which, part[3], outs)
        jobs.append((part, outs, fill, cuts,
                     [pool.submit(fill, x, y, header, footer, verify) for x, y in cuts]))

    def finish() -> Any:
        out: list[Any] = []
        for part, outs, fill, cuts, futures in jobs:
            if os.getpid() != pid:  # a forked child: the parent's threads are not here
                results = [fill(x, y, header, footer, verify) for x, y in cuts]
            else:
                results = [f.result() for f in futures]
            bad = min((r for r in results if r >= 0), default=-1)
            if bad >= 0:
                _raise_at(src, part, bad)
            shard_no, lo, hi, starts, _, _ = part
            part_sums = sidecar_sums(src.table.shards[shard_no].sidecar, src.checks.verify)
            if part_sums is not None:  # OFRecord payloads against the sidecar's CRC32C
                check_many(outs, part_sums[lo:hi], record_namer(src.table.url(shard_no),
                                                                starts, lo))
            out = outs if len(jobs) == 1 else out + outs
        return src.finish(out, a, False)

    return finish


class Filling(enum.Enum):
    """How the lists of an iteration are made (:func:`_filling` chooses)."""

    #: In the iterating thread: copied and checked by one compiled call per part.
    INLINE = "inline"
    #: CRCs checked ahead by a compiled thread per run part; the objects (or the buffer)
    #: made here.
    CHECKED_AHEAD = "checked ahead"
    #: Copied and checked on the pool's threads, one list ahead of the one handed out (lists
    #: only).
    FILLED_AHEAD = "filled ahead"


#: Lists expected to hold at least this many bytes are filled ahead on the pool's threads;
#: smaller ones are checked ahead by a :class:`Checker`. Measured on the 2-core machine
#: (interleaved, idle): 200-byte records, lists of 1,024: checked ahead 15.3 M records/s,
#: inline 10.7, filled ahead 4.9 (the pool's thread waits for the GIL the iterating thread
#: holds while it makes objects, to start and to end each fill); 100 KB records, lists of 64
#: (6.4 MB): filled ahead 10 GB/s, checked ahead 8, inline 5.
FILL_AHEAD_BYTES = 1 << 20


def _filling(src: BatchSource, batch_size: int, as_buffer: bool) -> Filling:
    """How batches of ``batch_size`` records are made: ahead of the one handed out when a
    core is spare (the pool exists) and the checks can run without the GIL (no TFRecord
    CRCs, or the CPU's CRC32C instruction); by the pool's threads for big lists, by a
    :class:`Checker` for small lists and :class:`RecordBatch` buffers of TFRecords (nothing
    to check ahead otherwise)."""
    native = _compiled(src)
    if executor() is None or (src.checks.tfrecord_crcs and not native.hw_crc()):
        return Filling.INLINE
    if not as_buffer and batch_size * src.table.mean_record_bytes >= FILL_AHEAD_BYTES:
        return Filling.FILLED_AHEAD
    return Filling.CHECKED_AHEAD if src.checks.tfrecord_crcs else Filling.INLINE


def _raise_at(src: BatchSource, part: _Part, k: int) -> NoReturn:
    """Raise the error of the ``k``-th record of a part (it failed a compiled check)."""
    shard_no, lo, _, starts, ends, buf = part
    st, en = int(starts[k]), int(ends[k])
    native = _compiled(src)  # (maps are read only by it, in guarded calls)
    raise_record_error(native.copy_out(buf, st, en), src.checks.format, src.checks.verify,
                       path=src.table.url(shard_no), offset=st, record=lo + k)


def mapped(src: BatchSource, batch_size: int, start: int, stop: int, as_buffer: bool,
           streamed: Callable[[BatchSource, int, int], list[bytes]]) -> Iterator[Any]:
    """The batches of records ``start..stop-1`` of memory-mapped shards.

    Args:
        src: The dataset's records (its shards are mapped; checked by the caller).
        batch_size: Records per batch.
        start: First record.
        stop: One past the last record.
        as_buffer: Yield :class:`RecordBatch` objects instead of lists.
        streamed: Reads records ``a..b-1`` without the maps (for a shard shorter than its
            index says).

    Yields:
        The batches, as :func:`finish_batch` makes them.

    Raises:
        CorruptRecordError, SidecarError, OSError: At the batch that holds the record.
    """
    filling = _filling(src, batch_size, as_buffer)
    step = max(batch_size, _PLAN_RECORDS // batch_size * batch_size)
    most = min(step, stop - start)
    arrays = _SpanArrays(most + min(len(src.table.shards), most))  # room for a part per shard
    if filling is Filling.CHECKED_AHEAD:
        yield from _checked_ahead(src, start, stop, step, batch_size, as_buffer, arrays,
                                  streamed)
        return
    batches = _planned(src, start, stop, step, batch_size, arrays)
    if filling is Filling.FILLED_AHEAD:
        yield from _filled_ahead(src, batches, streamed)
        return
    for a, b, parts in batches:
        if parts is None:  # a shard is shorter than its index says: read it otherwise
            yield src.finish(streamed(src, a, b), a, as_buffer)
        else:
            yield _cut(src, parts, a, as_buffer)


def _filled_ahead(src: BatchSource, batches: Iterator[tuple[int, int, list[_Part] | None]],
                  streamed: Callable[[BatchSource, int, int], list[bytes]]) -> Iterator[Any]:
    """Lists filled on the pool's threads one list ahead of the one handed out (see
    :func:`_fills_ahead`); a list is handed out, or its error raised, in order."""
    pending: Callable[[], Any] | None = None
    failed = False
    while not failed:
        try:
            a, b, parts = next(batches)
            ready = (functools.partial(_streamed_list, src, a, b, streamed) if parts is None
                     else _start_fill(src, parts, a))
        except StopIteration:
            break
        except Exception as exc:  # planning this list failed: raised in its turn, after
            ready, failed = functools.partial(_reraise, exc), True  # the list before it
        if pending is not None:
            yield pending()
        pending = ready
    if pending is not None:
        yield pending()


def _reraise(exc: Exception) -> NoReturn:
    raise exc


def _streamed_list(src: BatchSource, a: int, b: int,
                   streamed: Callable[[BatchSource, int, int], list[bytes]]) -> Any:
    """Records ``a..b-1`` read without the maps, as a list."""
    return src.finish(streamed(src, a, b), a, False)


def _planned(src: BatchSource, start: int, stop: int, step: int, batch_size: int,
             arrays: _SpanArrays) -> Iterator[tuple[int, int, list[_Part] | None]]:
    """Each batch's first and end record and parts (``None``: a shard of it is shorter than
    its index says), from runs of ``step`` records planned at once."""
    for run_start in range(start, stop, step):
        run = _Run(src, run_start, min(run_start + step, stop), arrays)
        for a in range(run.start, run.stop, batch_size):
            b = min(a + batch_size, run.stop)
            yield a, b, run.within(a, b)


class _Run:
    """A run of batches: records ``start..stop-1`` planned at once (their spans in the next
    buffer of ``arrays``), with a :class:`Checker` per part when ``checked``. A run that
    cannot be planned (a corrupt span, a missing file) is planned batch by batch instead, so
    that the error comes at the batch that holds the record.

    Args:
        src: The dataset's records.
        start: The run's first record.
        stop: One past its last.
        arrays: The iteration's span buffers (the run takes the next one).
        checked: Start a compiled :class:`Checker` per part (:data:`Filling.CHECKED_AHEAD`).
    """

    def __init__(self, src: BatchSource, start: int, stop: int, arrays: _SpanArrays,
                 checked: bool = False) -> None:
        self.src, self.start, self.stop = src, start, stop
        arrays.next_run()  # the run before the last is out of use: its buffer is reused
        try:
            self.parts: list[_Part] | None = _plan_parts(src, start, stop, arrays)
        except (OfindexError, OSError):  # planned batch by batch: raised at its batch
            self.parts = None
        self.checkers = _checkers(src, self.parts) if checked else None

    def within(self, a: int, b: int) -> list[_Part] | None:
        """The parts of records ``a..b-1`` (see :func:`_within`)."""
        if self.parts is None:
            return _plan_parts(self.src, a, b)
        return _within(self.src, self.parts, a, b)

    def checks_within(self, a: int, b: int) -> tuple[list[_Part] | None, list[_Check] | None]:
        """The parts of records ``a..b-1`` and, when the run has checkers, their checks."""
        if self.parts is None or self.checkers is None:
            return self.within(a, b), None
        positions = _positions(self.src, self.parts, a, b)
        return ([_part_slice(self.parts[p], x, y) for p, x, y in positions],
                [(self.checkers[p], x, y) for p, x, y in positions])

    def allow(self, stop: int) -> None:
        """Let the checks of records up to ``stop - 1`` start (without waiting for them)."""
        for (shard_no, lo, *_), checker in zip(self.parts or [], self.checkers or [],
                                            strict=False):
            first = int(self.src.table.first[shard_no]) + lo
            checker.wait(0, stop - first)


# -- lists checked ahead by a compiled thread (Filling.CHECKED_AHEAD) -------------------------

#: A part's checks made ahead: (its run part's Checker, the part's first and end position
#: in that run part).
_Check = tuple[Any, int, int]

#: Bytes a :class:`Checker` checks at a time, at most (and at most 256 records).
_CHECK_BYTES = 1 << 20


def _checkers(src: BatchSource, run: list[_Part] | None) -> list[Any] | None:
    """One compiled :class:`Checker` per part of a run, which checks the part's TFRecords on
    its own thread ahead of the lists made from it (the records are then in the shared
    cache when their objects are made); ``None`` for a run that could not be planned."""
    if run is None:
        return None
    native = _compiled(src)
    fmt = src.checks.format
    return [native.Checker(buf, starts, ends, fmt.header_size, fmt.footer_size,
                           _check_chunk(starts, ends))
            for _, _, _, starts, ends, buf in run]


def _check_chunk(starts: np.ndarray, ends: np.ndarray) -> int:
    """Records per chunk of a part's checker: about :data:`_CHECK_BYTES` of them."""
    span = int(ends[-1]) - int(starts[0]) if len(starts) else 0
    mean = span / len(starts) if len(starts) and span > 0 else 1.0
    return max(1, min(256, int(_CHECK_BYTES // mean)))


def _checked_ahead(src: BatchSource, start: int, stop: int, step: int, batch_size: int,
                   as_buffer: bool, arrays: _SpanArrays,
                   streamed: Callable[[BatchSource, int, int], list[bytes]]) -> Iterator[Any]:
    """The batches of records ``start..stop-1``, each run's CRCs checked by its checkers a
    batch ahead; the next run is planned (its checks started) while the last batch of the
    run before it is made. A batch is handed out, or its first bad record raised, in
    order."""
    bounds = [(a, min(a + step, stop)) for a in range(start, stop, step)]
    nxt = _Run(src, *bounds[0], arrays, checked=True) if bounds else None
    for r in range(len(bounds)):
        run, nxt = nxt, None
        assert run is not None
        if r + 1 < len(bounds):  # planned now: an error doing so comes at its own batch
            nxt = _Run(src, *bounds[r + 1], arrays, checked=True)
        for a in range(run.start, run.stop, batch_size):
            b = min(a + batch_size, run.stop)
            if b == run.stop and nxt is not None:  # the next run's first checks: on the
                nxt.allow(min(b + batch_size, nxt.stop))  # spare core while this list is made
            parts, checks = run.checks_within(a, b)
            if parts is None:  # a shard is shorter than its index says: read it otherwise
                yield src.finish(streamed(src, a, b), a, as_buffer)
            else:  # (checks is None: the run could not be planned, this batch was alone)
                yield _cut(src, parts, a, as_buffer, checks)


def _wait_checks(src: BatchSource, part: _Part, check: _Check) -> None:
    """Wait for the checks of a part's records (and let its :class:`Checker` go on with the
    next batch's).

    Raises:
        CorruptRecordError: A record of the part is bad (the first one).
    """
    checker, x, y = check
    bad = checker.wait(y, 2 * y - x)
    if bad >= 0:
        _raise_at(src, part, bad - x)


#: Records whose spans ``mapped`` plans at once (a few numpy calls for many batches).
_PLAN_RECORDS = 1 << 16


def _within(src: BatchSource, run: list[_Part], a: int, b: int) -> list[_Part]:
    """The parts of a planned run that hold records ``a..b-1`` (views, no copies)."""
    return [_part_slice(run[p], x, y) for p, x, y in _positions(src, run, a, b)]


def _positions(src: BatchSource, run: list[_Part], a: int,
               b: int) -> list[tuple[int, int, int]]:
    """For each part of a planned run that holds records of ``a..b-1``: its number in the
    run, and the first and end position of those records in it."""
    out = []
    for p, (shard_no, lo, hi, *_) in enumerate(run):
        first = int(src.table.first[shard_no]) + lo  # the run part's first global record
        x, y = max(a - first, 0), min(b - first, hi - lo)
        if x < y:
            out.append((p, x, y))
    return out


def _part_slice(part: _Part, x: int, y: int) -> _Part:
    """Positions ``x..y-1`` of a part (views, no copies)."""
    shard_no, lo, _, starts, ends, buf = part
    return (shard_no, lo + x, lo + y, starts[x:y], ends[x:y], buf)
