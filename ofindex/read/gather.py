"""Batched reads: many records of many shards fetched at once, in the order asked for.

Memory-mapped shards are served by one compiled pass over the maps (no sorting); otherwise
the batch is read shard by shard: cut out of the maps, read record by record for big local
records, or fetched through a read plan (neighbours merged into ranges, ranges fetched
concurrently on remote storage) and cut out of one buffer.
"""

from __future__ import annotations

import itertools
from typing import Any

import crc32c as _crc32c
import numpy as np

from .. import _accel
from ..formats.crc import LENGTH_CRCS
from ..formats.framing import Buffer, RecordFormat
from ..formats.sidecar import Sidecar
from ..storage import Storage
from ..storage.ranges import coalesce
from . import bigbatch
from .checksums import check_many
from .compressed import read_batch
from .pageround import batch_spans
from .payloads import (
    DIRECT_RECORD_BYTES,
    extract_payloads,
    raise_record_error,
    read_record_direct,
)
from .shards import Shard

#: Groups of one batch: ``(shard number, first item, one past the last item)``.
Groups = list[tuple[int, int, int]]

#: The memory-mapped shards of a batch: ``(touched shard numbers, which (an int64 index into
#: them per record), local record numbers, their maps, their sidecar offsets, their indexed
#: ends)``.
MappedShards = tuple[list[int], np.ndarray, np.ndarray, list[Buffer], list[np.ndarray],
                     list[int]]


class BatchReads:
    """The batch-reading half of :class:`ofindex.Dataset` (which sets these attributes)."""

    _storage: Storage
    _shards: list[Shard]
    _cum: np.ndarray
    _first: np.ndarray
    _header: int
    _footer: int
    _verify: bool
    _tf_verify: bool
    _of_verify: bool
    _mean_record: float
    format: RecordFormat
    max_gap: int
    max_read_bytes: int
    _compressed: bool

    def _payloads(self, idx: np.ndarray) -> list[Any]:
        """Payloads of records ``idx`` (valid, non-negative global numbers), in that order."""
        if self._compressed:  # gzip/zlib shards: see ofindex.read.compressed
            return read_batch(self._storage, self._shards, self._cum, self._first, idx,
                              self.format, self._verify, self._plain_payloads)
        return self._plain_payloads(idx)

    def _plain_payloads(self, idx: np.ndarray) -> list[Any]:
        """:meth:`_payloads` of uncompressed shards."""
        payloads = None
        if _accel.native is not None and self._storage.maps_files:
            if len(idx) * self._mean_record >= bigbatch.PARALLEL_BYTES:
                payloads = bigbatch.gather_parallel(self, idx)  # copies and CRCs on threads
            if payloads is None:
                payloads = self._gather_mapped(idx)
        if payloads is None:
            payloads = self._get_by_shard(idx)
        return payloads

    def _mapped_shards(self, idx: np.ndarray) -> MappedShards | None:
        """Which memory-mapped shards the records ``idx`` are in, for the compiled passes
        over their maps; ``None`` when a shard cannot be served from its map (it is shorter
        than its index says)."""
        if len(self._shards) == 1:
            touched, which, local = [0], np.zeros(len(idx), dtype=np.int64), idx
        else:
            shard_of = np.searchsorted(self._cum, idx, side="right")
            found, which = np.unique(shard_of, return_inverse=True)
            touched, local = found.tolist(), idx - self._first[shard_of]
            which = which.astype(np.int64, copy=False)
        bufs: list[Buffer] = []
        offsets: list[np.ndarray] = []
        ends: list[int] = []
        for s in touched:
            shard = self._shards[s]
            sc = shard.sidecar
            end = sc.indexed_end
            buf = self._storage.mapped(shard.path, end)
            if buf is None:
                return None
            bufs.append(buf)
            offsets.append(sc.offsets)
            ends.append(end)
        return touched, which, local, bufs, offsets, ends

    def _gather_mapped(self, idx: np.ndarray) -> list[Any] | None:
        """Payloads of memory-mapped shards in one compiled pass, in the order asked for (no
        sorting); ``None`` when a shard cannot be served from its map."""
        shards = self._mapped_shards(idx)
        if shards is None:
            return None
        touched, which, local, bufs, offsets, ends = shards
        native = _accel.native
        assert native is not None  # checked by the caller
        got = native.gather(bufs, offsets, ends, which, local, self._header, self._footer,
                            self._tf_verify, _crc32c.crc32c, LENGTH_CRCS)
        if isinstance(got, list):
            if self._of_verify:
                for j, s in enumerate(touched):
                    self._check_sums(got, s, None if len(touched) == 1 else
                                     np.flatnonzero(which == j), local)
            return got
        problem, k = got
        if problem == _accel.PAST_MAPPED_END:  # the general path reads and reports it
            return None
        if problem == _accel.RECORD_FAILS_CHECK:  # a corrupt sidecar explains a bad record:
            for j, s in enumerate(touched):       # report it first
                self._shards[s].sidecar.spans(local[which == j])
        j = int(which[k])
        shard = self._shards[touched[j]]
        self._raise_problem(problem, shard, shard.sidecar, bufs[j], int(local[k]))
        return None

    def _raise_problem(self, problem: int, shard: Shard, sc: Sidecar, buf: Buffer,
                       record: int) -> None:
        """Raise the precise error for a record the compiled loop refused; return for
        :data:`~ofindex._accel.PAST_MAPPED_END` (the caller reads the record otherwise)."""
        if problem == _accel.PAST_MAPPED_END:
            return
        start, end = sc.span(record)
        if problem == _accel.SPAN_TOO_SHORT:
            raise sc.bad_span(record, start, end)
        raise_record_error(buf[start:end], self.format, self._verify,
                           path=self._storage.url(shard.path), offset=start, record=record)

    def _check_sums(self, payloads: list[Any], s: int, items: np.ndarray | None,
                    local: np.ndarray) -> None:
        """Check the OFRecord ``payloads[items]`` (all when ``items`` is ``None``) of shard
        ``s`` (records ``local[items]``) against the checksums of its sidecar, if any."""
        sc = self._shards[s].sidecar
        if sc.checksums is None:
            return
        if items is None:
            chosen, records = payloads, local
        else:
            chosen, records = [payloads[k] for k in items.tolist()], local[items]
        url = self._storage.url(self._shards[s].path)
        check_many(chosen, sc.checksums[records],
                   lambda k: (url, int(sc.offsets[records[k]]), int(records[k])))

    def _get_by_shard(self, idx: np.ndarray) -> list[Any]:
        """Payloads read shard by shard (mapped, planned or direct reads), in the order asked
        for."""
        n = len(idx)
        # work shard by shard: sort by shard (stable), read, then restore the order asked for
        order: np.ndarray | None = None
        if len(self._shards) == 1:
            shard_of, bounds = np.zeros(n, dtype=np.int64), [0, n]
        else:
            shard_of = np.searchsorted(self._cum, idx, side="right")
            order = np.argsort(shard_of, kind="stable")
            idx, shard_of = idx[order], shard_of[order]
            bounds = [0, *(np.flatnonzero(np.diff(shard_of)) + 1).tolist(), n]
        local = idx - self._first[shard_of]
        groups = [(int(shard_of[lo]), lo, hi) for lo, hi in itertools.pairwise(bounds)]
        # offsets from each shard's sidecar; remote ones missing here (pages or whole
        # sidecars) are fetched in one concurrent round
        starts, ends = batch_spans(self._shards, groups, local)
        payloads = None
        if self._storage.maps_files:
            payloads = self._read_mapped(groups, starts, ends, local)
        if payloads is None:
            payloads = self._read_planned(shard_of, starts, ends, local)
        if self._of_verify:
            for s, lo, hi in groups:
                self._check_sums(payloads, s, None if len(groups) == 1 else np.arange(lo, hi),
                                 local)
        if order is not None:
            out = np.empty(n, dtype=object)
            out[order] = payloads
            return list(out.tolist())
        return payloads

    def _read_mapped(self, groups: Groups, starts: np.ndarray, ends: np.ndarray,
                     local: np.ndarray) -> list[Any] | None:
        """Payloads cut straight out of memory-mapped shards (no planning, no staging buffer);
        ``None`` when a shard cannot be served from its map."""
        out: list[Any] = []
        for s, lo, hi in groups:
            path = self._shards[s].path
            st, en = starts[lo:hi], ends[lo:hi]
            buf = self._storage.mapped(path, int(en.max()))
            if buf is None:
                return None
            url = self._storage.url(path)
            out += extract_payloads(buf, st, en, self.format, self._verify,
                                    url, st, local[lo:hi])
        return out

    def _read_planned(self, shard_of: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                      local: np.ndarray) -> list[Any]:
        """Payloads fetched by a read plan: neighbours merged into ranges, ranges fetched
        (concurrently on remote storage) into one buffer, records cut out of it."""
        storage, shards, fmt, verify = self._storage, self._shards, self.format, self._verify
        if storage.cheap_seeks and int((ends - starts).mean()) >= DIRECT_RECORD_BYTES:
            def direct(item: tuple[int, int, int, int]) -> bytes:
                s, a, b, r = item
                return read_record_direct(storage, shards[s].path, a, b, fmt, verify, r)

            items = list(zip(shard_of.tolist(), starts.tolist(), ends.tolist(), local.tolist(),
                             strict=True))
            if int((ends - starts).sum()) >= bigbatch.PARALLEL_BYTES:  # reads and CRCs on
                return bigbatch.map_ordered(direct, items)              # threads, no GIL
            return [direct(item) for item in items]
        plan = coalesce(starts, ends, self.max_gap, self.max_read_bytes, files=shard_of)
        sizes = plan.fetch_ends - plan.fetch_starts
        fetch_base = np.cumsum(sizes) - sizes
        buf = storage.read_ranges_concat(
            [shards[f].path for f in plan.fetch_files.tolist()],
            plan.fetch_starts.tolist(), plan.fetch_ends.tolist(),
        )
        item_start = fetch_base[plan.item_fetch] + plan.item_offset
        return extract_payloads(
            buf, item_start, item_start + (ends - starts), fmt, verify,
            lambda k: storage.url(shards[int(shard_of[k])].path), starts, local,
        )
