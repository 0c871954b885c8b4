"""The dataset: a sequence of records over many shards, with O(1) random access."""


from bisect import bisect_right as _bisect_right
from collections.abc import Callable, Iterator, Sequence
from os import getpid as _getpid
from types import TracebackType
from typing import Any

import crc32c as _crc32c
import numpy as np

from .. import _accel
from ..errors import SidecarError
from ..formats.crc import LENGTH_CRCS
from ..formats.framing import RecordFormat, unframe_ofrecord, unframe_tfrecord
from ..formats.sidecar import Sidecar
from ..storage import Storage
from ..storage.ranges import DEFAULT_MAX_BYTES
from . import batches, bigbatch, compressed
from .checksums import check_one
from .gather import BatchReads
from .info import DatasetInfo, as_indices
from .shards import Shard

#: A callable applied to each record's bytes (``ofindex.open(..., decode=...)``).
Decode = Callable[[Any], Any]
#: More records than this in one dataset can only come from corrupt indexes or manifests.
_MAX_RECORDS = 1 << 62


class Dataset(BatchReads, DatasetInfo):
    """Records of one or more TFRecord/OFRecord shards, addressable by a global record number.

    Made by :func:`ofindex.open`. Records are numbered shard by shard, in the order the shards
    were given (a directory or glob expands in natural name order). ``ds[i]`` reads one record
    in O(1); slices, integer arrays and ``__getitems__`` fetch many at once with coalesced
    reads; iteration streams each shard with large sequential reads. TFRecord CRCs (and the
    sidecar checksums of OFRecord payloads, see :mod:`ofindex.read.checksums`) are checked on
    read unless ``verify=False``.

    The dataset pickles without open handles and reopens lazily in a new process (DataLoader
    workers, fork or spawn). :meth:`close` (or ``with ofindex.open(...) as ds:``) releases
    file handles, memory maps and loaded sidecars now; a later read reopens what it needs.

    Args:
        storage: Storage of the data files.
        shards: The shards, in order.
        fmt: Their record framing.
        verify: Check TFRecord CRCs on read, and OFRecord payloads against their sidecar's
            checksums when it has them.
        decode: Applied to each record's bytes before it is returned.
        max_gap: Largest gap between two wanted byte ranges read through rather than split
            (default: the storage's, as it stands at each batch: 16 KiB once an HTTP server
            has answered a multi-range request, see :mod:`ofindex.storage.multirange`).
        max_read_bytes: Largest merged read.
        compressed: Whether any shard may be gzip/zlib compressed (default: whether a loaded
            sidecar says so).
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
        compressed: bool | None = None,
    ) -> None:
        self._storage = storage
        self._shards = list(shards)
        if compressed is None:
            compressed = any(s.loaded and s.sidecar.compressed for s in self._shards)
        self._compressed = compressed
        self.format = fmt
        self._unframe = unframe_tfrecord if fmt is RecordFormat.TFRECORD else unframe_ofrecord
        self.verify = verify
        self.decode = decode
        self._max_gap = max_gap
        self.max_read_bytes = max_read_bytes
        total = sum(s.records for s in self._shards)
        if total > _MAX_RECORDS:  # only corrupt indexes or manifests add up to this
            raise SidecarError(
                f"the indexes of these {len(self._shards)} shards claim {total} records in "
                "all, more than any dataset can hold; an index or the manifest is corrupt — "
                "rebuild it with `ofindex build`"
            )
        counts = np.array([s.records for s in self._shards], dtype=np.int64)
        self._cum = np.cumsum(counts)                  # records up to and including shard k
        self._first = self._cum - counts               # global number of each shard's record 0
        self._first_list = self._first.tolist()
        self._overhead = fmt.overhead
        self._header, self._footer = fmt.header_size, fmt.footer_size
        self._cum_list = self._cum.tolist()
        self._len = int(self._cum[-1]) if len(counts) else 0
        known = [s for s in self._shards if s.size >= 0 and s.records > 0]
        # mean framed record size: which batches are big enough to spread over threads
        self._mean_record = (sum(s.size for s in known) / sum(s.records for s in known)
                             if known else 0.0)

    @property
    def verify(self) -> bool:
        """Whether records are checked on read (settable): TFRecord CRCs, and OFRecord payloads
        against the checksums of sidecars that have them."""
        return self._verify

    @verify.setter
    def verify(self, value: bool) -> None:
        self._verify = bool(value)
        self._tf_verify = self._verify and self.format is RecordFormat.TFRECORD
        self._of_verify = self._verify and self.format is RecordFormat.OFRECORD  # checksums

    @property
    def max_gap(self) -> int:
        """Largest gap between two wanted byte ranges read through rather than split
        (settable; ``None`` goes back to the storage's, which it may lower once it knows the
        server: see :meth:`ofindex.storage.Storage.max_gap_for`)."""
        if self._max_gap is not None:
            return self._max_gap
        if not self._shards:
            return self._storage.default_max_gap
        return self._storage.max_gap_for(self._shards[0].path)

    @max_gap.setter
    def max_gap(self, value: int | None) -> None:
        self._max_gap = value

    # -- sequence protocol -------------------------------------------------------------------
    def __len__(self) -> int:
        """Return the number of records in all shards."""
        return self._len

    def __repr__(self) -> str:
        return (f"Dataset({len(self._shards)} shards, {self._len} records, "
                f"{self.format.name.lower()}, verify={self.verify})")

    def __getitem__(self, key: int | np.integer | slice | Sequence[int] | np.ndarray) -> Any:
        """Read one record, or a list of records.

        Args:
            key: A record number (negative counts from the end), a slice, or a 1-d sequence or
                array of record numbers (any order, duplicates allowed).

        Returns:
            The record's payload bytes (or ``decode(payload)``); a list of them for a slice or
            an array.

        Raises:
            RecordIndexError: A record number is out of range (an ``IndexError``).
            TypeError: ``key`` is of another kind (floats, booleans, 2-d arrays).
            CorruptRecordError: A record fails its checks (bad CRC, a header that disagrees
                with the index); names the file, byte offset and record number.
            SidecarError: The sidecar's offsets are corrupt.
            RangeReadError: Remote storage returned other bytes than asked for, or kept failing.
        """
        if type(key) is not int:
            if isinstance(key, np.integer):
                key = int(key)
            elif isinstance(key, slice):
                return self._get_many(np.arange(*key.indices(self._len), dtype=np.int64))
            else:
                return self._get_many(as_indices(key, strict=True))
        # one record: the hot path, kept flat
        n = self._len
        i = key + n if key < 0 else key
        if not 0 <= i < n:
            self._check_index(key)
        s = _bisect_right(self._cum_list, i)
        shard = self._shards[s]
        local = i - self._first_list[s]
        if shard.cache is not None and not shard.loaded:  # remote: pages, as for batches
            return self._get_many(np.array([i], dtype=np.int64))[0]
        sc = shard._sidecar
        if sc is None or shard.cache is not None or shard._pid != _getpid():
            sc = shard.sidecar  # first touch, a new process, or an LRU-managed sidecar
        if sc.compressed:  # gzip/zlib: inflate from the seek point before the record
            got = compressed.read_record(self._storage, shard.path, sc, local, self.format,
                                         self.verify)
            return got if self.decode is None else self.decode(got)
        native = _accel.native
        if native is not None and self._storage.maps_files:
            buf = self._storage.mapped(shard.path, 0)
            if buf is not None:  # span, cut and checks in one compiled call
                got = native.record(buf, sc.offsets, sc.indexed_end, local, self._header,
                                    self._footer, self._tf_verify, _crc32c.crc32c, LENGTH_CRCS)
                if isinstance(got, bytes):
                    if self._of_verify and sc.sums is not None and (
                            _crc32c.crc32c(got) != sc.sums[local]):
                        self._check_sum(got, shard, sc, local)  # raises the precise error
                    return got if self.decode is None else self.decode(got)
                self._raise_problem(got, shard, sc, buf, local)  # or past the map: read below
        start, end = sc.span(local)
        if end - start < self._overhead or end > sc.indexed_end:  # corrupt offsets
            raise sc.bad_span(local, start, end)  # (checked by spans() in batches)
        payload = self._unframe(self._storage.read(shard.path, start, end), self.verify,
                                self._storage.url(shard.path), start, local)
        if self._of_verify and sc.sums is not None and (
                _crc32c.crc32c(payload) != sc.sums[local]):
            self._check_sum(payload, shard, sc, local)
        return payload if self.decode is None else self.decode(payload)

    def _check_sum(self, payload: Any, shard: Shard, sc: Sidecar, local: int) -> None:
        """Check one OFRecord payload against its sidecar checksum."""
        assert sc.checksums is not None
        check_one(payload, int(sc.checksums[local]), path=self._storage.url(shard.path),
                  offset=int(sc.offsets[local]), record=local)

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[Any]:
        """Read a batch of records with coalesced reads (PyTorch's batched-fetch protocol).

        Args:
            indices: Record numbers, in any order, duplicates allowed.

        Returns:
            The records (or ``decode(record)``), in the order of ``indices``.

        Raises:
            RecordIndexError, CorruptRecordError, SidecarError, RangeReadError: As for
                ``ds[i]``.
        """
        return self._get_many(as_indices(indices))

    def __iter__(self) -> Iterator[Any]:
        """Iterate over every record in order (see :meth:`iter_records`)."""
        return self.iter_records()

    def __enter__(self) -> "Dataset":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Release this process's file handles, memory maps and loaded sidecars now.

        The dataset stays usable: a later read reopens what it needs.
        """
        close = getattr(self._storage, "close", None)
        if close is not None:
            close()
        for shard in self._shards:
            shard.unload()

    # -- reading -----------------------------------------------------------------------------
    def _get_many(self, idx: np.ndarray) -> list[Any]:
        if len(idx) == 0:
            return []
        payloads = self._payloads(self._normalize(idx))
        return payloads if self.decode is None else [self.decode(p) for p in payloads]

    def _payload_spans(self, indices: Sequence[int] | np.ndarray
                       ) -> tuple[list[Any], tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
        """Where the payloads of a batch lie in the maps of its shards, checked in place as
        ``__getitems__`` checks them, for readers that copy only parts of them (batched
        decoding): ``(maps, (which map, payload starts, payload ends))``, or ``None`` when the
        batch must be read with ``__getitems__`` (see
        :func:`ofindex.read.bigbatch.checked_spans`).

        Raises:
            RecordIndexError, CorruptRecordError, SidecarError: As for ``__getitems__``.
        """
        if self._compressed or self.decode is not None:
            return None
        return bigbatch.checked_spans(self, self._normalize(as_indices(indices)))

    def iter_records(self, start: int = 0, stop: int | None = None,
                     block_bytes: int = 8 << 20) -> Iterator[Any]:
        """Stream records ``start..stop-1`` in order, with large sequential reads per shard.

        Args:
            start: First record.
            stop: One past the last record (default: the end).
            block_bytes: Size of each read.

        Yields:
            Each record (or ``decode(record)``).

        Raises:
            RecordIndexError: ``[start, stop)`` is not a valid range.
            CorruptRecordError, SidecarError, RangeReadError: As for ``ds[i]``.
        """
        for batch in batches.iter_batches(self, 1024, start, stop, False, block_bytes):
            yield from batch

    def iter_batches(self, batch_size: int = 1024, start: int = 0, stop: int | None = None, *,
                     as_buffer: bool = False, block_bytes: int = 8 << 20) -> Iterator[Any]:
        """Read records ``start..stop-1`` in order, ``batch_size`` at a time.

        The fast way to read a dataset sequentially: each batch of a memory-mapped shard is
        cut and checked by one compiled call. A batch is a list of ``bytes`` (one object per
        record, as ``for r in ds`` gives), or with ``as_buffer=True`` a
        :class:`~ofindex.read.record_batch.RecordBatch`: the payloads back to back in one buffer
        with their offsets (Arrow's binary layout), no Python object per record, several
        times faster when the records are small (e.g. to verify, hash or copy data, or to
        hand it to Arrow or numpy). TFRecord CRCs are checked unless ``verify=False`` (for
        lists, on a second core when there is one, a batch ahead of the one being made).

        Args:
            batch_size: Records per batch (the last batch may be shorter). Batches run across
                shard boundaries.
            start: First record.
            stop: One past the last record (default: the end).
            as_buffer: Yield :class:`~ofindex.read.record_batch.RecordBatch` objects (raw payloads:
                the dataset's ``decode`` is not applied) instead of lists.
            block_bytes: Size of each read where shards are streamed (remote storage,
                ``mmap=False``).

        Yields:
            Lists of records (``decode(record)`` with a ``decode``), or ``RecordBatch``
            objects.

        Raises:
            ValueError: ``batch_size`` is not a whole number >= 1.
            RecordIndexError: ``[start, stop)`` is not a valid range.
            CorruptRecordError, SidecarError, RangeReadError: As for ``ds[i]``, when the batch
                holding the record is read.
        """
        return batches.iter_batches(self, batch_size, start, stop, as_buffer, block_bytes)
