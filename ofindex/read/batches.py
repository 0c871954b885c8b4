"""Sequential reading in batches (``Dataset.iter_batches``): a list of payloads per batch, or
one buffer of payloads back to back per batch (:class:`RecordBatch`).

On memory-mapped shards with the compiled module, a batch is one compiled call over the map
(spans, checks, copies): a list costs one ``bytes`` object per record (its CRCs checked on a
second core, when there is one, while the objects are made), a :class:`RecordBatch` none
(its CRC checks run without the GIL). Elsewhere (remote storage,
``mmap=False``, pure Python) the shards are streamed with large reads and regrouped.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import crc32c as _crc32c
import numpy as np

from .. import _accel
from .._threads import usable_cores
from ..errors import RecordIndexError, SidecarError
from ..formats.crc import LENGTH_CRCS
from ..formats.sidecar import Sidecar
from . import compressed_stream, streaming
from .checksums import check_many, record_namer, sidecar_sums
from .payloads import raise_record_error

#: An ofindex ``Dataset`` (not imported here: it imports this module).
Dataset = Any


class RecordBatch:
    """Payloads of consecutive records, back to back in one buffer (Arrow's binary layout).

    No Python object is made per record: ``data[offsets[k]:offsets[k + 1]]`` is record
    ``first + k``. Indexing or iterating copies a record out as ``bytes``; :meth:`view`
    gives a zero-copy ``memoryview``. The batch owns its buffer (it does not refer to the
    files), so it stays valid after the dataset is closed.

    Args:
        data: The payloads, back to back (a 1-d ``uint8`` array).
        offsets: ``len + 1`` int64 positions in ``data``: record ``k`` spans
            ``offsets[k]:offsets[k + 1]``.
        first: The global number of the batch's first record.
    """

    __slots__ = ("data", "first", "offsets")

    def __init__(self, data: np.ndarray, offsets: np.ndarray, first: int) -> None:
        self.data = data
        self.offsets = offsets
        self.first = first

    def __len__(self) -> int:
        """The number of records in the batch."""
        return len(self.offsets) - 1

    def __getitem__(self, k: int) -> bytes:
        """Record ``first + k``'s payload (a copy).

        Args:
            k: The position in the batch (negative counts from the end).

        Returns:
            The payload bytes.

        Raises:
            IndexError: ``k`` is out of range.
        """
        return bytes(self.view(k))

    def view(self, k: int) -> memoryview:
        """Record ``first + k``'s payload without a copy.

        Args:
            k: The position in the batch (negative counts from the end).

        Returns:
            A read-only view into :attr:`data`.

        Raises:
            IndexError: ``k`` is out of range.
        """
        n = len(self)
        if not -n <= k < n:
            raise IndexError(f"record {k} is out of range for a batch of {n} records")
        k %= n
        a, b = int(self.offsets[k]), int(self.offsets[k + 1])
        return memoryview(self.data.data).toreadonly()[a:b]

    def __iter__(self) -> Iterator[bytes]:
        """Iterate over the payloads (copies), in order."""
        mv = self.data.data
        offs = self.offsets.tolist()
        for a, b in itertools.pairwise(offs):
            yield bytes(mv[a:b])

    @property
    def lengths(self) -> np.ndarray:
        """Payload lengths in bytes (int64)."""
        lengths: np.ndarray = np.diff(self.offsets)
        return lengths

    def to_list(self) -> list[bytes]:
        """The payloads as a list of ``bytes`` (one copy each)."""
        return list(self)

    def __repr__(self) -> str:
        return (f"RecordBatch(records {self.first}..{self.first + len(self) - 1}, "
                f"{len(self.data)} bytes)")


def iter_batches(ds: Dataset, batch_size: int, start: int, stop: int | None,
                 as_buffer: bool, block_bytes: int) -> Iterator[Any]:
    """The batches of :meth:`Dataset.iter_batches` (its arguments are documented there)."""
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be a whole number >= 1, got {batch_size!r}")
    batch_size = int(batch_size)
    n = len(ds)
    stop = n if stop is None else min(stop, n)
    if start < 0 or start > stop:
        raise RecordIndexError(f"iteration range [{start}, {stop}) is invalid for a dataset "
                               f"of {n} records")
    if _accel.native is not None and ds._storage.maps_files and not ds._compressed:
        yield from _mapped(ds, batch_size, start, stop, as_buffer)
        return
    # streamed shard by shard: a compressed shard is inflated once, its gzip CRC32 / zlib
    # Adler-32 checked at the end of a whole pass
    yield from _regrouped(ds, batch_size, start, stop, as_buffer, block_bytes)


def _regrouped(ds: Dataset, batch_size: int, start: int, stop: int, as_buffer: bool,
               block_bytes: int) -> Iterator[Any]:
    """Batches regrouped from the streamed blocks of each shard."""
    pending: list[Any] = []
    first = start
    for s, shard in enumerate(ds._shards):
        lo = max(start - int(ds._first[s]), 0)
        hi = min(stop - int(ds._first[s]), shard.records)
        if lo >= hi:
            continue
        for block in shard_blocks(ds, s, lo, hi, block_bytes):
            pending += block
            k = 0
            while len(pending) - k >= batch_size:
                yield _finish(ds, pending[k:k + batch_size], first, as_buffer)
                first += batch_size
                k += batch_size
            del pending[:k]
    if pending:
        yield _finish(ds, pending, first, as_buffer)


def shard_blocks(ds: Dataset, s: int, lo: int, hi: int,
                 block_bytes: int = 8 << 20) -> Iterator[list[bytes]]:
    """Payloads of records ``lo..hi-1`` of shard ``s``, in order, a list at a time: streamed
    with large reads, or inflated once from the start for a compressed shard."""
    shard = ds._shards[s]
    sc = shard.sidecar
    if not sc.compressed:
        yield from streaming.stream_blocks(ds._storage, shard.path, sc, lo, hi, ds.verify,
                                           block_bytes)
        return
    records = compressed_stream.stream_compressed(ds._storage, shard.path, sc, lo, hi,
                                                  ds.verify, block_bytes)
    while block := list(itertools.islice(records, _INFLATED_BLOCK)):
        yield block


#: Records per list when a compressed shard is streamed.
_INFLATED_BLOCK = 4096


def _finish(ds: Dataset, payloads: list[bytes], first: int, as_buffer: bool) -> Any:
    """A batch of payloads as the caller asked for it."""
    if as_buffer:
        offsets = np.zeros(len(payloads) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in payloads], out=offsets[1:])
        return RecordBatch(np.frombuffer(b"".join(payloads), dtype=np.uint8).copy(), offsets,
                           first)
    return payloads if ds.decode is None else [ds.decode(p) for p in payloads]


def _run_spans(sc: Sidecar, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """File byte ranges of records ``lo..hi-1`` of one shard (a contiguous run of offsets)."""
    starts = sc.offsets[lo:hi].astype(np.int64)
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    ends[-1] = int(sc.offsets[hi]) if hi < len(sc.offsets) else sc.indexed_end
    short = ends - starts < sc.format.overhead
    if short.any():
        k = int(np.argmax(short))
        raise sc.bad_span(lo + k, int(starts[k]), int(ends[k]))
    return starts, ends


#: A part of a batch: (shard number, first and end record in the shard, their file spans,
#: the shard's map).
_Part = tuple[int, int, int, np.ndarray, np.ndarray, Any]


def _plan(ds: Dataset, a: int, b: int) -> list[_Part] | None:
    """The shard runs of records ``a..b-1`` with their spans and maps (sidecars and maps are
    opened here, in the iterating thread); ``None`` when a shard is shorter than its index
    says (the batch is then read otherwise)."""
    parts: list[_Part] = []
    s = int(np.searchsorted(ds._cum, a, side="right"))
    pos = a
    while pos < b:  # the shards the run touches (usually one)
        first = int(ds._first[s])
        shard = ds._shards[s]
        lo, hi = pos - first, min(b - first, shard.records)
        if hi > lo:
            if shard.sidecar.compressed:  # offsets into the inflated stream: no map to cut
                return None
            starts, ends = _run_spans(shard.sidecar, lo, hi)
            buf = ds._storage.mapped(shard.path, int(ends[-1]))
            if buf is None:
                return None
            parts.append((s, lo, hi, starts, ends, buf))
        pos = first + hi
        s += 1
    return parts


def _cut(ds: Dataset, parts: list[_Part], a: int, as_buffer: bool, spare_core: bool) -> Any:
    """The batch of records ``a..`` made from its planned parts by the compiled loops (the
    checks and copies run without the GIL; with ``spare_core``, a list's checks run on a
    second thread while its objects are made)."""
    native = _accel.native
    assert native is not None  # checked by the caller
    fmt, tf_verify = ds.format, ds._tf_verify
    hs, fs = fmt.header_size, fmt.footer_size
    compiled_checks = not tf_verify or native.hw_crc()  # checks without the GIL
    sums = [sidecar_sums(ds._shards[s].sidecar, ds.verify) for s, *_ in parts]
    use_pack = as_buffer and compiled_checks and all(x is None for x in sums)
    n = sum(hi - lo for _, lo, hi, _, _, _ in parts)
    if use_pack:
        # room for the payloads (an upper bound: their framed size), on plain numpy memory
        # (the decode pool's few slots are kept for big decoded outputs)
        data = np.empty(sum(int(e[-1] - st[0]) for _, _, _, st, e, _ in parts), np.uint8)
        offsets = np.empty(n + 1, dtype=np.int64)
    out: list[Any] = []
    k0 = used = 0
    for (s, lo, hi, starts, ends, buf), part_sums in zip(parts, sums, strict=True):
        if use_pack:
            bad = native.pack(buf, starts, ends, hs, fs, tf_verify, data,
                              offsets[k0:k0 + hi - lo + 1], used)
        elif not compiled_checks:
            got = native.cut(buf, starts, ends, hs, fs, tf_verify, _crc32c.crc32c, LENGTH_CRCS)
            bad = -1 if isinstance(got, list) else got
        else:  # checked without the GIL (on a second core when there is one); objects made
            got = native.slices(buf, starts, ends, hs, fs, tf_verify, spare_core)
            bad = -1 if isinstance(got, list) else got
        if bad >= 0:
            st, en = int(starts[bad]), int(ends[bad])
            raise_record_error(buf[st:en], fmt, ds.verify,
                               path=ds._storage.url(ds._shards[s].path), offset=st,
                               record=lo + bad)
        if use_pack:
            k0 += hi - lo
            used = int(offsets[k0])
        else:
            if part_sums is not None:  # OFRecord payloads against the sidecar's CRC32C
                url = ds._storage.url(ds._shards[s].path)
                check_many(got, part_sums[lo:hi], record_namer(url, starts, lo))
            out += got
    if use_pack:
        return RecordBatch(data[:used], offsets, a)
    return _finish(ds, out, a, as_buffer)


def _mapped(ds: Dataset, batch_size: int, start: int, stop: int,
            as_buffer: bool) -> Iterator[Any]:
    """Batches of memory-mapped shards, each made by one compiled call per shard it touches.

    (Made in the calling thread. With a core to spare, a list's CRCs are checked on a
    compiled thread while this one makes its objects; a Python pool thread measured slower,
    as it waits for the GIL that making the objects holds; see the issue 15 report.)
    """
    spare_core = usable_cores() > 1  # a list's CRCs are then checked on a second thread
    step = max(batch_size, _PLAN_RECORDS // batch_size * batch_size)
    for run_start in range(start, stop, step):  # spans planned a run of batches at a time
        run_stop = min(run_start + step, stop)
        try:
            run = _plan(ds, run_start, run_stop)
        except SidecarError:  # a corrupt span: plan batch by batch, to raise at its batch
            run = None
        for a in range(run_start, run_stop, batch_size):
            b = min(a + batch_size, run_stop)
            parts = _plan(ds, a, b) if run is None else _within(ds, run, a, b)
            if parts is None:  # a shard is shorter than its index says: read it otherwise
                yield _finish(ds, _streamed(ds, a, b), a, as_buffer)
            else:
                yield _cut(ds, parts, a, as_buffer, spare_core)


#: Records whose spans ``_mapped`` plans at once (a few numpy calls for many batches).
_PLAN_RECORDS = 1 << 16


def _within(ds: Dataset, run: list[_Part], a: int, b: int) -> list[_Part]:
    """The parts of a planned run that hold records ``a..b-1`` (views, no copies)."""
    parts: list[_Part] = []
    for s, lo, hi, starts, ends, buf in run:
        first = int(ds._first[s]) + lo  # the run part's first global record
        x, y = max(a - first, 0), min(b - first, hi - lo)
        if x < y:
            parts.append((s, lo + x, lo + y, starts[x:y], ends[x:y], buf))
    return parts


def _streamed(ds: Dataset, a: int, b: int) -> list[bytes]:
    """Payloads of records ``a..b-1`` read by the streaming path (no map)."""
    out: list[bytes] = []
    for s, shard in enumerate(ds._shards):
        lo = max(a - int(ds._first[s]), 0)
        hi = min(b - int(ds._first[s]), shard.records)
        if lo < hi:
            for block in shard_blocks(ds, s, lo, hi):
                out += block
    return out
