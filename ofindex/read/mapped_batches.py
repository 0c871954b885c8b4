"""Batches of memory-mapped shards (:meth:`Dataset.iter_batches` on local files): each batch
is one compiled call per shard it touches, over spans planned for a run of batches at once.

A list costs one ``bytes`` object per record. With a core to spare, a compiled thread
(:class:`Checker`) checks each run's TFRecord CRCs ahead of the batch being made, so that
the checks are usually done when the batch is, and its records are in the shared cache when
their objects are made. A :class:`RecordBatch` makes no object per record: its records are
checked as they are copied, without the GIL, into a buffer that a big batch takes from the
memory earlier big batches released (:func:`ofindex._accel.pooled_bytes`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import crc32c as _crc32c
import numpy as np

from .. import _accel
from .._threads import usable_cores
from ..errors import OfindexError
from ..formats.crc import LENGTH_CRCS
from ..formats.sidecar import Sidecar
from .batch_source import BatchSource
from .payloads import raise_record_error
from .record_batch import RecordBatch
from .sum_checks import check_many, record_namer, sidecar_sums


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
    bounds[-1] = int(sidecar.offsets[hi]) if hi < len(sidecar.offsets) else sidecar.indexed_end
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
    is shorter than its index says (the batch is then read otherwise)."""
    parts: list[_Part] = []
    shard_no = int(np.searchsorted(src.table.cumulative, a, side="right"))
    pos = a
    while pos < b:  # the shards the run touches (usually one)
        first = int(src.table.first[shard_no])
        shard = src.table.shards[shard_no]
        lo, hi = pos - first, min(b - first, shard.records)
        if hi > lo:
            if shard.sidecar.compressed:  # offsets into the inflated stream: no map to cut
                return None
            starts, ends = _run_spans(shard.sidecar, lo, hi, arrays)
            buf = src.table.storage.mapped(shard.path, int(ends[-1]))
            if buf is None:
                return None
            parts.append((shard_no, lo, hi, starts, ends, buf))
        pos = first + hi
        shard_no += 1
    return parts


def _cut(src: BatchSource, parts: list[_Part], a: int, as_buffer: bool, spare_core: bool,
         checks: list[_Check] | None = None) -> Any:
    """The batch of records ``a..`` made from its planned parts by the compiled loops (the
    checks and copies run without the GIL; with ``spare_core``, a list's checks run on a
    second thread while its objects are made; with ``checks``, one per part, the parts'
    records were checked ahead by a run's :func:`_checkers`, and only waited for here)."""
    native = _accel.native
    assert native is not None  # checked by the caller
    if checks is not None and len(parts) == 1:  # the common case, with the least overhead
        return src.finish(_checked_ahead(src, parts[0], checks[0]), a, False)
    fmt, tf_verify = src.checks.format, src.checks.tfrecord_crcs
    hs, fs = fmt.header_size, fmt.footer_size
    compiled_checks = not tf_verify or native.hw_crc()  # checks without the GIL
    sums = [sidecar_sums(src.table.shards[s].sidecar, src.checks.verify) for s, *_ in parts]
    use_pack = as_buffer and compiled_checks and all(x is None for x in sums)
    n = sum(hi - lo for _, lo, hi, _, _, _ in parts)
    if use_pack:
        # room for the payloads (an upper bound: their framed size); a big batch on memory
        # that an earlier one released (pooled_bytes)
        data = _accel.pooled_bytes(sum(int(e[-1] - st[0]) for _, _, _, st, e, _ in parts))
        offsets = np.empty(n + 1, dtype=np.int64)
    out: list[Any] = []
    k0 = used = 0
    for p, ((shard_no, lo, hi, starts, ends, buf), part_sums) in enumerate(zip(parts, sums,
                                                                        strict=True)):
        if checks is not None:  # checked ahead (raises for a bad record)
            got = _checked_ahead(src, parts[p], checks[p])
            bad = -1
        elif use_pack:
            bad = native.pack(buf, starts, ends, hs, fs, tf_verify, data,
                              offsets[k0:k0 + hi - lo + 1], used)
        elif not compiled_checks:
            got = native.cut(buf, starts, ends, hs, fs, tf_verify, _crc32c.crc32c, LENGTH_CRCS)
            bad = -1 if isinstance(got, list) else got
        else:  # checked without the GIL (on a second core when there is one); objects made
            got = native.slices(buf, starts, ends, hs, fs, tf_verify, spare_core)
            bad = -1 if isinstance(got, list) else got
        if bad >= 0:
            _raise_at(src, parts[p], bad)
        if use_pack:
            k0 += hi - lo
            used = int(offsets[k0])
        else:
            if part_sums is not None:  # OFRecord payloads against the sidecar's CRC32C
                url = src.table.url(shard_no)
                check_many(got, part_sums[lo:hi], record_namer(url, starts, lo))
            if len(parts) == 1:  # the batch is this list (no copy into another)
                out = got
            else:
                out += got
    if use_pack:
        return RecordBatch(data[:used], offsets, a)
    return src.finish(out, a, as_buffer)


def _checked_ahead(src: BatchSource, part: _Part, check: _Check) -> list[bytes]:
    """The payloads of a part whose records its run's :class:`Checker` checks: waits for its
    checks (and lets the checker go on with the next batch), then makes the objects.

    Raises:
        CorruptRecordError: A record of the part is bad (the first one).
    """
    native = _accel.native
    assert native is not None  # a Checker exists
    _, _, _, starts, ends, buf = part
    checker, x, y = check
    bad = checker.wait(y, 2 * y - x)
    if bad < 0:
        got = native.slices(buf, starts, ends, src.checks.header, src.checks.footer,
                            False)  # the framing only: the CRCs passed
        if isinstance(got, list):
            return got
        bad = got + x  # the file changed since the check
    _raise_at(src, part, bad - x)


def _raise_at(src: BatchSource, part: _Part, k: int) -> NoReturn:
    """Raise the error of the ``k``-th record of a part (it failed a compiled check)."""
    shard_no, lo, _, starts, ends, buf = part
    st, en = int(starts[k]), int(ends[k])
    raise_record_error(buf[st:en], src.checks.format, src.checks.verify,
                       path=src.table.url(shard_no), offset=st, record=lo + k)


def mapped(src: BatchSource, batch_size: int, start: int, stop: int, as_buffer: bool,
           streamed: Callable[[BatchSource, int, int], list[bytes]]) -> Iterator[Any]:
    """The batches of records ``start..stop-1`` of memory-mapped shards, made in the calling
    thread.

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
    spare_core = usable_cores() > 1  # a list's CRCs are then checked on a second thread
    step = max(batch_size, _PLAN_RECORDS // batch_size * batch_size)
    most = min(step, stop - start)
    arrays = _SpanArrays(most + min(len(src.table.shards), most))  # room for a part per shard
    runs = [(a, min(a + step, stop)) for a in range(start, stop, step)]
    nxt = _Run(src, *runs[0], arrays, as_buffer, spare_core) if runs else None
    for r in range(len(runs)):
        run, nxt = nxt, None
        assert run is not None
        if r + 1 < len(runs):  # the next run is planned now, its checks started early
            nxt = _Run(src, *runs[r + 1], arrays, as_buffer, spare_core)
        yield from _run_batches(src, run, nxt, batch_size, as_buffer, spare_core, streamed)


def _run_batches(src: BatchSource, run: _Run, nxt: _Run | None, batch_size: int, as_buffer: bool,
                 spare_core: bool,
                 streamed: Callable[[BatchSource, int, int], list[bytes]]) -> Iterator[Any]:
    """The batches of one run (see :func:`mapped`); at its last batch, the next run's checks
    start."""
    for a in range(run.start, run.stop, batch_size):
        b = min(a + batch_size, run.stop)
        if b == run.stop and nxt is not None:  # the next run's first checks: on the spare
            nxt.allow(min(b + batch_size, nxt.stop))  # core while this batch is made
        parts, checks = run.within(a, b)
        if parts is None:  # a shard is shorter than its index says: read it otherwise
            yield src.finish(streamed(src, a, b), a, as_buffer)
        else:
            yield _cut(src, parts, a, as_buffer, spare_core, checks)


class _Run:
    """A run of batches: records ``start..stop-1`` planned at once (their spans in the next
    buffer of ``arrays``), with the :class:`Checker` of each part where it applies. A run
    that cannot be planned (a corrupt span, a missing file) is planned batch by batch
    instead, so that the error comes at the batch that holds the record.

    Args:
        src: The dataset's records.
        start: The run's first record.
        stop: One past its last.
        arrays: The iteration's span buffers (the run takes the next one).
        as_buffer: The batches are :class:`RecordBatch` objects.
        spare_core: Whether a second core is free for the checks.
    """

    def __init__(self, src: BatchSource, start: int, stop: int, arrays: _SpanArrays,
                 as_buffer: bool, spare_core: bool) -> None:
        self.src, self.start, self.stop = src, start, stop
        arrays.next_run()  # the run before the last is out of use: its buffer is reused
        try:
            self.parts: list[_Part] | None = _plan_parts(src, start, stop, arrays)
        except (OfindexError, OSError):  # planned batch by batch: raised at its batch
            self.parts = None
        self.checkers = _checkers(src, self.parts, as_buffer, spare_core)

    def allow(self, stop: int) -> None:
        """Let the checks of records up to ``stop - 1`` start (without waiting for them)."""
        for (shard_no, lo, *_), checker in zip(self.parts or [], self.checkers or [],
                                            strict=False):
            first = int(self.src.table.first[shard_no]) + lo
            checker.wait(0, stop - first)

    def within(self, a: int, b: int) -> tuple[list[_Part] | None, list[_Check] | None]:
        """The parts of records ``a..b-1`` and their checks (see :func:`_within`)."""
        if self.parts is None:
            return _plan_parts(self.src, a, b), None
        return _within(self.src, self.parts, a, b, self.checkers)


def _checkers(src: BatchSource, run: list[_Part] | None, as_buffer: bool,
              spare_core: bool) -> list[Any] | None:
    """One compiled :class:`Checker` per part of a run, which checks the part's TFRecords on
    a second core ahead of the batches made from it (the records are then in the shared
    cache when their objects are made); ``None`` where that does not apply: a
    :class:`RecordBatch` (checked as it is copied), no CRCs to check, no core to spare, no
    CRC instruction, or a run that could not be planned."""
    native = _accel.native
    if (run is None or as_buffer or not spare_core or not src.checks.tfrecord_crcs or native is None
            or not native.hw_crc()):
        return None
    fmt = src.checks.format
    return [native.Checker(buf, starts, ends, fmt.header_size, fmt.footer_size)
            for _, _, _, starts, ends, buf in run]


#: Records whose spans ``mapped`` plans at once (a few numpy calls for many batches).
_PLAN_RECORDS = 1 << 16


#: A part's checks made ahead: (its run part's Checker, the part's first and end position
#: in that run part).
_Check = tuple[Any, int, int]


def _within(src: BatchSource, run: list[_Part], a: int, b: int,
            checkers: list[Any] | None = None) -> tuple[list[_Part], list[_Check] | None]:
    """The parts of a planned run that hold records ``a..b-1`` (views, no copies), and with
    the run's ``checkers``, each part's :data:`_Check`."""
    parts: list[_Part] = []
    checks: list[_Check] = []
    for p, (shard_no, lo, hi, starts, ends, buf) in enumerate(run):
        first = int(src.table.first[shard_no]) + lo  # the run part's first global record
        x, y = max(a - first, 0), min(b - first, hi - lo)
        if x < y:
            parts.append((shard_no, lo + x, lo + y, starts[x:y], ends[x:y], buf))
            if checkers is not None:
                checks.append((checkers[p], x, y))
    return parts, (checks if checkers is not None else None)
