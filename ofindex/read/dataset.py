"""The dataset: a sequence of records over many shards, with O(1) random access."""

from __future__ import annotations

import itertools
from bisect import bisect_right as _bisect_right
from collections.abc import Callable, Iterator, Sequence
from os import getpid as _getpid
from typing import Any

import crc32c as _crc32c
import numpy as np

from .. import _accel
from ..errors import RecordIndexError
from ..formats.crc import LENGTH_CRCS
from ..formats.framing import RecordFormat, unframe_ofrecord, unframe_tfrecord
from ..storage import Storage
from ..storage.ranges import DEFAULT_MAX_BYTES, coalesce
from . import streaming
from .payloads import (
    DIRECT_RECORD_BYTES,
    extract_payloads,
    raise_record_error,
    read_record_direct,
)
from .shards import Shard, ShardInfo, prefetch_sidecars

Decode = Callable[[bytes], Any]


class Dataset:
    """Records of one or more TFRecord/OFRecord shards, addressable by a global record number.

    Records are numbered shard by shard, in the order the shards were given (a directory or glob
    expands in natural name order). ``ds[i]`` reads one record in O(1); slices, integer arrays
    and ``__getitems__`` fetch many at once with coalesced reads; iteration streams each shard
    with large sequential reads. TFRecord CRCs are checked on read unless ``verify=False``.
    The dataset pickles without open handles and reopens lazily in a new process.
    """

    def __init__(
        self,
        storage: Storage,
        shards: Sequence[Shard],
        fmt: RecordFormat,
        *,
        verify: bool = True,
        decode: Decode | None = None,
        max_gap: int | None = None,
        max_read_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self._storage = storage
        self._shards = list(shards)
        self.format = fmt
        self._unframe = unframe_tfrecord if fmt is RecordFormat.TFRECORD else unframe_ofrecord
        self.verify = verify
        self.decode = decode
        self.max_gap = storage.default_max_gap if max_gap is None else max_gap
        self.max_read_bytes = max_read_bytes
        counts = np.array([s.records for s in self._shards], dtype=np.int64)
        self._cum = np.cumsum(counts)                  # records up to and including shard k
        self._first = self._cum - counts               # global number of each shard's record 0
        self._first_list = self._first.tolist()
        self._overhead = fmt.overhead
        self._header, self._footer = fmt.header_size, fmt.footer_size
        self._cum_list = self._cum.tolist()
        self._len = int(self._cum[-1]) if len(counts) else 0

    @property
    def verify(self) -> bool:
        """Whether TFRecord CRCs are checked on read."""
        return self._verify

    @verify.setter
    def verify(self, value: bool) -> None:
        self._verify = bool(value)
        self._tf_verify = self._verify and self.format is RecordFormat.TFRECORD

    # -- sequence protocol -------------------------------------------------------------------
    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return (f"Dataset({len(self._shards)} shards, {self._len} records, "
                f"{self.format.name.lower()}, verify={self.verify})")

    def __getitem__(self, key):
        if type(key) is not int:
            if isinstance(key, np.integer):
                key = int(key)
            elif isinstance(key, slice):
                return self._get_many(np.arange(*key.indices(self._len), dtype=np.int64))
            else:
                idx = np.asarray(key)
                if idx.dtype == bool or not np.issubdtype(idx.dtype, np.integer) or idx.ndim != 1:
                    raise TypeError("dataset indices must be integers, slices or 1-d integer "
                                    f"arrays, not {key!r:.60}")
                return self._get_many(idx.astype(np.int64))
        # one record: the hot path, kept flat
        n = self._len
        i = key + n if key < 0 else key
        if not 0 <= i < n:
            self._check_index(key)
        s = _bisect_right(self._cum_list, i)
        shard = self._shards[s]
        local = i - self._first_list[s]
        sc = shard._sidecar
        if sc is None or shard.cache is not None or shard._pid != _getpid():
            sc = shard.sidecar  # first touch, a new process, or an LRU-managed sidecar
        native = _accel.native
        if native is not None and self._storage.maps_files:
            buf = self._storage.mapped(shard.path, 0)
            if buf is not None:  # span, cut and checks in one compiled call
                got = native.record(buf, sc.offsets, sc.indexed_end, local, self._header,
                                    self._footer, self._tf_verify, _crc32c.crc32c, LENGTH_CRCS)
                if type(got) is bytes:
                    return got if self.decode is None else self.decode(got)
                self._raise_problem(got, shard, sc, buf, local)  # or past the map: read below
        start, end = sc.span(local)
        if end - start < self._overhead:  # corrupt offsets (batches: checked by spans())
            raise sc.bad_span(local, start, end)
        payload = self._unframe(self._storage.read(shard.path, start, end), self.verify,
                                shard.path, start, local)
        return payload if self.decode is None else self.decode(payload)

    def __getitems__(self, indices: Sequence[int]) -> list:
        """Batched fetch (PyTorch's protocol): records for ``indices``, in that order."""
        return self._get_many(np.asarray(indices, dtype=np.int64).reshape(-1))

    def __iter__(self) -> Iterator:
        return self.iter_records()

    # -- metadata without reading data -------------------------------------------------------
    @property
    def shards(self) -> list[ShardInfo]:
        """Path, record count and size of every shard."""
        return [
            ShardInfo(self._storage.url(s.path), s.records, s.size,
                      s.index_storage.url(s.index_path))
            for s in self._shards
        ]

    @property
    def cumulative_counts(self) -> np.ndarray:
        """``cumulative_counts[k]`` = records in shards ``0..k`` (for samplers)."""
        return self._cum.copy()

    def check_indexes(self) -> None:
        """Check every sidecar's offsets block against its CRC (reads all sidecars)."""
        for shard in self._shards:
            shard.sidecar.check_offsets()

    def locate(self, index: int) -> tuple[int, int]:
        """``(shard number, record number inside the shard)`` of a global record number."""
        i = self._check_index(index)
        s = _bisect_right(self._cum_list, i)
        return s, i - int(self._first[s])

    def record_lengths(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Payload lengths of records, from the index alone (no data read)."""
        idx = self._normalize(np.asarray(indices, dtype=np.int64).reshape(-1))
        shard_of = np.searchsorted(self._cum, idx, side="right")
        out = np.empty(len(idx), dtype=np.int64)
        for s in np.unique(shard_of):
            sel = np.flatnonzero(shard_of == s)
            sc = self._shards[s].sidecar
            starts, ends = sc.spans(idx[sel] - self._first[s])
            out[sel] = ends - starts - sc.format.overhead
        return out

    # -- reading -----------------------------------------------------------------------------
    def _check_index(self, index: int) -> int:
        n = self._len
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise RecordIndexError(
                f"record index {index} is out of range for a dataset of {n} records "
                f"(valid: {-n} to {n - 1})" if n else f"record index {index}: the dataset is empty"
            )
        return i

    def _normalize(self, idx: np.ndarray) -> np.ndarray:
        n = self._len
        fixed = np.where(idx < 0, idx + n, idx)
        bad = (fixed < 0) | (fixed >= n)
        if bad.any():
            self._check_index(int(idx[np.argmax(bad)]))
        return fixed

    def _get_many(self, idx: np.ndarray) -> list:
        if len(idx) == 0:
            return []
        idx = self._normalize(idx)
        payloads = None
        if _accel.native is not None and self._storage.maps_files:
            payloads = self._gather_mapped(idx)
        if payloads is None:
            payloads = self._get_by_shard(idx)
        return payloads if self.decode is None else [self.decode(p) for p in payloads]

    def _gather_mapped(self, idx: np.ndarray) -> list | None:
        """Payloads of memory-mapped shards in one compiled pass, in the order asked for (no
        sorting); ``None`` when a shard cannot be served from its map."""
        if len(self._shards) == 1:
            touched, which, local = [0], np.zeros(len(idx), dtype=np.int64), idx
        else:
            shard_of = np.searchsorted(self._cum, idx, side="right")
            found, which = np.unique(shard_of, return_inverse=True)
            touched, local = found.tolist(), idx - self._first[shard_of]
        bufs, offsets, ends = [], [], []
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
        got = _accel.native.gather(bufs, offsets, ends, which.astype(np.int64, copy=False),
                                   local, self._header, self._footer, self._tf_verify,
                                   _crc32c.crc32c, LENGTH_CRCS)
        if type(got) is list:
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

    def _raise_problem(self, problem: int, shard: Shard, sc, buf, record: int) -> None:
        """Raise the precise error for a record the compiled loop refused; return for
        :data:`~ofindex._accel.PAST_MAPPED_END` (the caller reads the record otherwise)."""
        if problem == _accel.PAST_MAPPED_END:
            return
        start, end = sc.span(record)
        if problem == _accel.SPAN_TOO_SHORT:
            raise sc.bad_span(record, start, end)
        raise_record_error(buf[start:end], self.format, self.verify,
                           path=self._storage.url(shard.path), offset=start, record=record)

    def _get_by_shard(self, idx: np.ndarray) -> list:
        """Payloads read shard by shard (mapped, planned or direct reads), in the order asked
        for."""
        n = len(idx)
        # work shard by shard: sort by shard (stable), read, then restore the order asked for
        if len(self._shards) == 1:
            order, shard_of, bounds = None, np.zeros(n, dtype=np.int64), [0, n]
        else:
            shard_of = np.searchsorted(self._cum, idx, side="right")
            order = np.argsort(shard_of, kind="stable")
            idx, shard_of = idx[order], shard_of[order]
            bounds = [0, *(np.flatnonzero(np.diff(shard_of)) + 1).tolist(), n]
            if len(bounds) > 2:  # fetch the batch's not-yet-loaded remote sidecars concurrently
                prefetch_sidecars([self._shards[s] for s in shard_of[bounds[:-1]].tolist()])
        local = idx - self._first[shard_of]
        groups = [(int(shard_of[lo]), lo, hi) for lo, hi in itertools.pairwise(bounds)]
        starts = np.empty(n, dtype=np.int64)
        ends = np.empty(n, dtype=np.int64)
        for s, lo, hi in groups:  # offsets live in each shard's sidecar
            starts[lo:hi], ends[lo:hi] = self._shards[s].sidecar.spans(local[lo:hi])
        payloads = None
        if self._storage.maps_files:
            payloads = self._read_mapped(groups, starts, ends, local)
        if payloads is None:
            payloads = self._read_planned(shard_of, starts, ends, local)
        if order is not None:
            out = np.empty(n, dtype=object)
            out[order] = payloads
            payloads = out.tolist()
        return payloads

    def _read_mapped(self, groups, starts, ends, local) -> list | None:
        """Payloads cut straight out of memory-mapped shards (no planning, no staging buffer);
        ``None`` when a shard cannot be served from its map."""
        out: list = []
        for s, lo, hi in groups:
            path = self._shards[s].path
            st, en = starts[lo:hi], ends[lo:hi]
            buf = self._storage.mapped(path, int(en.max()))
            if buf is None:
                return None
            url = self._storage.url(path)
            out += extract_payloads(buf, st, en, self.format, self.verify,
                                    lambda k, url=url: url, st, local[lo:hi])
        return out

    def _read_planned(self, shard_of, starts, ends, local) -> list:
        """Payloads fetched by a read plan: neighbours merged into ranges, ranges fetched
        (concurrently on remote storage) into one buffer, records cut out of it."""
        storage, shards, fmt, verify = self._storage, self._shards, self.format, self.verify
        if storage.cheap_seeks and int((ends - starts).mean()) >= DIRECT_RECORD_BYTES:
            return [read_record_direct(storage, shards[s].path, a, b, fmt, verify, r)
                    for s, a, b, r in zip(shard_of.tolist(), starts.tolist(), ends.tolist(),
                                          local.tolist(), strict=True)]
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

    def iter_records(self, start: int = 0, stop: int | None = None,
                     block_bytes: int = 8 << 20) -> Iterator:
        """Records ``start..stop-1`` in order, streamed with large reads per shard."""
        stop = self._len if stop is None else min(stop, self._len)
        if start < 0 or start > stop:
            raise RecordIndexError(f"iteration range [{start}, {stop}) is invalid for "
                                   f"a dataset of {self._len} records")
        for s, shard in enumerate(self._shards):
            lo = max(start - int(self._first[s]), 0)
            hi = min(stop - int(self._first[s]), shard.records)
            if lo >= hi:
                continue
            for payload in streaming.stream_shard(
                self._storage, shard.path, shard.sidecar, lo, hi, self.verify, block_bytes
            ):
                yield self.decode(payload) if self.decode is not None else payload

