"""The dataset: a sequence of records over many shards, with O(1) random access.

One class over a :class:`~ofindex.read.table.ShardTable` (the shards and where each global
record number lives), :class:`~ofindex.read.payloads.RecordChecks` (what each read
checks) and :class:`~ofindex.read.access.ShardAccesses` (how each shard is read, chosen once
per shard). A single record is read by its shard's access (the hot path: once a record of a
local shard was read, one call of the compiled reader); a batch by the accesses of the shards
it touches; sequential reads go through :mod:`ofindex.read.iteration`.
"""

import itertools
import threading
from bisect import bisect_right as _bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from os import getpid as _getpid
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cache.data import DataCache
from ..columns.query import DatasetColumns
from ..errors import ManifestError
from ..formats.column_map import COLUMN_MAP_NAME, load_column_map
from ..formats.dataset_identity import dataset_identity, joined_identity
from ..formats.framing import RecordFormat
from ..formats.sidecar import Sidecar
from ..formats.sidecar_header import Compression
from ..storage import Storage
from ..storage.openfiles import OPEN_FILES
from . import iteration, record_reader
from . import refresh as refreshing
from .access import ShardAccess, ShardAccesses
from .batch_source import BatchSource
from .column_places import dataset_columns
from .mapped_gather import MappedSpans
from .payloads import DEFAULT_MAX_BYTES, RecordChecks
from .refresh import DatasetSource
from .shards import Shard, ShardInfo
from .table import ShardTable, as_indices
from .view import DatasetView

if TYPE_CHECKING:
    from .._accel import Reader

#: A callable applied to each record's bytes (``ofindex.open(..., decode=...)``).
Decode = Callable[[Any], Any]


#: Types of a single key (others are checked one by one).
_ONE_KEY = frozenset((str, bytes, int, float))

class Dataset:
    """Records of one or more TFRecord/OFRecord shards, addressable by a global record number.

    Made by :func:`ofindex.open`. Records are numbered shard by shard, in the order the shards
    were given (a directory or glob expands in natural name order). ``ds[i]`` reads one record
    in O(1); slices, integer arrays and ``__getitems__`` fetch many at once with coalesced
    reads; iteration streams each shard with large sequential reads. TFRecord CRCs (and the
    sidecar checksums of OFRecord payloads, see :mod:`ofindex.read.sum_checks`) are checked on
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
            has answered a multi-range request, see :mod:`ofindex.transport.store`).
        max_read_bytes: Largest merged read.
        compressed: Whether any shard may be gzip/zlib compressed (default: whether a loaded
            sidecar says so).
        data_cache: The machine's cache of remote data blocks to read through
            (``ofindex.open(..., data_cache_bytes=)``, :mod:`ofindex.cache.data`), or
            ``None``.
        identity: The dataset's identity (see :attr:`identity`), when its manifest gives
            it; ``None``: computed from the shards' headers when first asked for.

    Raises:
        SidecarError: The shards claim more records than any dataset can hold.
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
        data_cache: DataCache | None = None,
        identity: str | None = None,
    ) -> None:
        self._table = table = ShardTable(storage, shards)
        self._identity = identity
        # the single-record hot path reads these without a call
        self._size, self._shards = table.size, table.shards
        self._cumulative, self._first = table.cumulative_list, table.first_list
        if compressed is None:
            compressed = any(s.opened and s.header.compression is not Compression.NONE
                             for s in self._table.held())
        self._accesses = ShardAccesses(table.shards, compressed=compressed,
                                       data_cache=None if storage.is_local else data_cache)
        self.format = fmt
        self.decode = decode
        self._reader: Reader | None = None  # the compiled ds[i] (record_reader), made lazily
        self._columns: DatasetColumns | None = None  # the column queries, made lazily
        #: per column, what ``lookup`` of one key calls (see _one_key_finder)
        self._finders: dict[str, Callable[[Any], Any]] = {}
        self.verify = verify  # sets the checks
        self._max_gap = max_gap
        self.max_read_bytes = max_read_bytes
        #: Where the dataset's files are and how to index what they gain, for
        #: :meth:`refresh` (set by :func:`ofindex.open`), or ``None``.
        self._refresh_source: DatasetSource | None = None

    @property
    def data_cache(self) -> DataCache | None:
        """The machine's cache of remote data blocks reads go through, or ``None`` (settable:
        the shards are then bound again; a joined dataset's, when its sources share one)."""
        return self._accesses.data_cache

    @data_cache.setter
    def data_cache(self, value: DataCache | None) -> None:
        local = self._table.storage.is_local
        self._accesses = ShardAccesses(self._table.shards, compressed=self.compressed,
                                       data_cache=None if local else value)

    @property
    def compressed(self) -> bool:
        """Whether a shard of the dataset may be gzip/zlib compressed (what its manifest or
        its shards' headers said when it was opened; :attr:`compressions` reads each
        shard's)."""
        return self._accesses.compressed

    def shard_range(self, start: int, stop: int) -> "Dataset":
        """The dataset of shards ``start..stop-1`` (the same shard objects, their sidecars
        shared), read as this one reads; its record 0 is this one's first record of shard
        ``start``.

        Args:
            start: The first shard.
            stop: One past the last.

        Returns:
            The dataset (no ``decode``: what a split planner's task reads).
        """
        table = self._table
        shards = table.shards[start:stop]
        # compressed as this one unless every shard is known plain (its header held, or read
        # from a local disk): a mixed dataset's plain shards are then read as plain files
        # (mapped and cut in place); a remote header is not fetched here, one at a time
        compressed = self.compressed and not all(
            (s.opened or s.storage.is_local) and s.header.compression is Compression.NONE
            for s in shards)
        return Dataset(table.storage, shards, self.format, verify=self.verify,
                       max_gap=self._max_gap, max_read_bytes=self.max_read_bytes,
                       compressed=compressed, data_cache=self.data_cache)

    def sidecar(self, shard: int) -> Sidecar:
        """The sidecar of shard ``shard``, loaded in this process (its offsets checked).

        Args:
            shard: The shard's number.

        Returns:
            The sidecar (its offsets, seek points and checksums).

        Raises:
            IndexNotFoundError, StaleIndexError, SidecarError: It cannot be loaded.
        """
        return self._table.shards[shard].sidecar

    @property
    def identity(self) -> str:
        """What this dataset is: 16 hexadecimal digits, a digest of its shards' record counts,
        sizes and content digests in order (:mod:`ofindex.formats.dataset_identity`). A copy
        of the dataset (moved, uploaded, copied without its times) has the same identity;
        another dataset of the same length has another one. Resume and mixture states carry
        it, and refuse to load on another dataset.

        Raises:
            SidecarError: A shard's header cannot be read (a dataset opened without a
                manifest has read them all at open already).
        """
        if self._identity is None:
            headers = [shard.header for shard in self._table.shards]
            self._identity = dataset_identity(
                [h.count for h in headers], [h.stamp.size for h in headers],
                [h.stamp.content for h in headers], [h.body_crc for h in headers])
        return self._identity

    def column_map(self) -> dict[str, Any] | None:
        """The column map written beside the manifest (``ofindex-columns.json``: how the
        columns of the Arrow data the dataset was written from map to features, and their
        Arrow schema; see :mod:`ofindex.formats.column_map`), or ``None`` when the dataset
        has none (it was not written from Arrow data, or by an older release).

        Returns:
            The document, checked.

        Raises:
            ManifestError: The file is there but damaged, or describes another record format.
        """
        shard = self._table.shards[0]
        storage = shard.index_storage
        path = storage.join(storage.dirname(shard.index_path), COLUMN_MAP_NAME)
        if not storage.exists(path):
            return None
        url = storage.url(path)
        doc = load_column_map(storage.read_all(path), url)
        if doc["format"] != self.format.name.lower():
            raise ManifestError(f"{url}: describes {doc['format']} records, the dataset holds "
                                f"{self.format.name.lower()}: it is another dataset's; "
                                "remove it")
        return doc

    @property
    def verify(self) -> bool:
        """Whether records are checked on read (settable): TFRecord CRCs, and OFRecord payloads
        against the checksums of sidecars that have them."""
        return self._checks.verify

    @verify.setter
    def verify(self, value: bool) -> None:
        self._checks = RecordChecks.of(self.format, bool(value))
        self._drop_reader()  # it checks what the old checks said

    def _drop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()
            OPEN_FILES.drop_all(reader)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_reader"] = None  # holds this process's maps and descriptors
        state["_columns"] = None  # this process's column pages and key index readers
        state["_finders"] = {}  # (they call them)
        return state

    @property
    def max_gap(self) -> int:
        """Largest gap between two wanted byte ranges read through rather than split
        (settable; ``None`` goes back to the storage's, asked for each batch after its index
        round: a web server's depends on whether it answers multi-range requests, see
        :meth:`ofindex.storage.Storage.preferred_gap`)."""
        if self._max_gap is not None:
            return self._max_gap
        table = self._table
        if not table.shards:
            return table.storage.default_max_gap
        shard = table.shards[0]
        return shard.storage.preferred_gap(shard.path)

    @max_gap.setter
    def max_gap(self, value: int | None) -> None:
        self._max_gap = value

    # -- sequence protocol -------------------------------------------------------------------
    def __len__(self) -> int:
        """Return the number of records in all shards."""
        return self._table.size

    def __repr__(self) -> str:
        return (f"Dataset({len(self._table.shards)} shards, {self._table.size} records, "
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
        reader = self._reader
        if reader is not None:  # one compiled call, or None (see record_reader): then read
            payload = reader.get(key)  # the ordinary way
            if payload is not None:
                return payload if self.decode is None else self.decode(payload)
        return self._get(key)

    def _get(self, key: int | np.integer | slice | Sequence[int] | np.ndarray) -> Any:
        """``self[key]`` read the ordinary way (the compiled reader could not serve it)."""
        if type(key) is not int:
            if isinstance(key, np.integer):
                key = int(key)
            elif isinstance(key, slice):
                return self._read_many(np.arange(*key.indices(len(self)), dtype=np.int64))
            else:
                return self._read_many(as_indices(key, strict=True))
        # the hot path, kept flat: a shard whose sidecar this process holds
        n = self._size
        i = key + n if key < 0 else key
        if not 0 <= i < n:
            self._table.check_index(key)  # raises the precise RecordIndexError
        shard_no = _bisect_right(self._cumulative, i)
        shard = self._shards[shard_no]
        held = shard.ready
        if held is not None and held[0] == _getpid():
            shard.used = True
            payload = self._read_from(shard_no, shard, held[1], i - self._first[shard_no])
        else:
            payload = self._read_one(i)
        return payload if self.decode is None else self.decode(payload)

    def _read_one(self, index: int) -> Any:
        """The payload of record ``index`` (valid, non-negative) when its shard's sidecar may
        have to be loaded: a remote shard whose sidecar is not loaded in this process goes
        through the batch path (its pages and data stamp come in one round)."""
        table = self._table
        shard_no, local = table.locate(index)
        shard = table.shards[shard_no]
        if shard.cache is not None and not shard.loaded:
            return self._read_many(np.array([index], dtype=np.int64), decode=False)[0]
        return self._read_from(shard_no, shard, shard.sidecar, local)

    def _read_from(self, shard_no: int, shard: Shard, sidecar: Sidecar, local: int) -> Any:
        """The payload of record ``local`` of a shard whose sidecar is loaded, read by the
        shard's access; a local shard is then bound to the compiled reader."""
        access = self._accesses.of(shard_no)
        reader = self._reader
        payload = access.read_record(self._table, self._checks, shard_no, shard, sidecar, local,
                                     fresh=reader is None or not reader.bound)
        if access.binds_reader:
            self._bind(access, shard_no, sidecar)
        return payload

    def _bind(self, access: ShardAccess, shard_no: int, sidecar: Sidecar) -> None:
        """Let the compiled reader serve the shard a record was just read from (made on
        first use; see :mod:`ofindex.read.record_reader`)."""
        native = access.native
        assert native is not None  # (only compiled accesses bind)
        if self._reader is None:
            self._reader = record_reader.new_reader(self._table, self._checks, native)
        if self._reader is not None:
            record_reader.bind(self._reader, self._table, self._checks, shard_no, sidecar,
                               native)

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
        return self._read_many(as_indices(indices))

    def payloads(self, indices: Sequence[int] | np.ndarray) -> list[bytes]:
        """Read a batch of records' payloads, as ``__getitems__`` but without ``decode``.

        Args:
            indices: Record numbers, in any order, duplicates allowed.

        Returns:
            The payloads, in the order of ``indices``.

        Raises:
            RecordIndexError, CorruptRecordError, SidecarError, RangeReadError: As for
                ``ds[i]``.
        """
        payloads: list[bytes] = self._read_many(as_indices(indices), decode=False)
        return payloads

    def _read_many(self, indices: np.ndarray, *, decode: bool = True) -> list[Any]:
        """Records ``indices`` (any sign), read by their shards' accesses; decoded unless
        not."""
        if len(indices) == 0:
            return []
        payloads = self._accesses.read_batch(
            self._table, self._checks, self._table.normalize(indices), max_gap=self._max_gap,
            max_read_bytes=self.max_read_bytes)
        if not decode or self.decode is None:
            return payloads
        return [self.decode(p) for p in payloads]

    def mapped_spans(self, indices: Sequence[int] | np.ndarray,
                     defer_crcs: bool = False) -> MappedSpans | None:
        """Where the payloads of a batch lie in the memory maps of their shards, checked in
        place as ``__getitems__`` checks them, for readers that copy only parts of them
        (batched decoding straight out of the maps).

        Args:
            indices: Record numbers, in any order, duplicates allowed.
            defer_crcs: Leave the TFRecord data CRCs (when checked) to the caller, which
                reads every payload in a pass of its own: it must then pass the payloads'
                CRC-32Cs to :meth:`check_deferred` before trusting them (``spans.deferred``
                says whether any were left).

        Returns:
            The spans, or ``None`` when the batch must be read with ``__getitems__`` (a
            ``decode``, compressed shards, shards not memory-mapped, no compiled module,
            OFRecord checksums to check, CRCs to check without the CPU's CRC instruction).

        Raises:
            RecordIndexError, CorruptRecordError, SidecarError: As for ``__getitems__``.
        """
        uniform = self._accesses.uniform
        if self.decode is not None or uniform is None:
            return None
        normalized = self._table.normalize(as_indices(indices))
        return uniform.mapped_spans(self._table, self._checks, normalized, defer_crcs)

    def check_deferred(self, spans: MappedSpans, crcs: np.ndarray) -> None:
        """Check the CRC-32Cs a caller of ``mapped_spans(..., defer_crcs=True)`` computed of
        the payloads against the CRCs stored with them.

        Args:
            spans: What ``mapped_spans`` gave.
            crcs: The CRC-32C of each payload of ``spans`` (uint32, in its order).

        Raises:
            CorruptRecordError, SidecarError: The first record whose CRC differs, as
                ``__getitems__`` reports it.
        """
        uniform = self._accesses.uniform
        if uniform is not None and spans.deferred is not None:
            uniform.check_deferred(self._table, self._checks, spans, crcs)

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
        for storage in self._table.storages():
            storage.close()  # and the reader (closed with them)
        if self._reader is not None:
            OPEN_FILES.drop_all(self._reader)
        for shard in self._table.held():
            shard.unload()
        for cache in self._accesses.data_caches():
            cache.close()

    # -- sequential reading ------------------------------------------------------------------
    def _source(self) -> BatchSource:
        return BatchSource(self._table, self._checks, self.decode)

    def iter_records(self, start: int = 0, stop: int | None = None,
                     block_bytes: int = 8 << 20) -> Iterator[Any]:
        """Stream records ``start..stop-1`` in order, with large sequential reads per shard.

        The records come from the lists :meth:`iter_batches` makes (a few MB at a time), one
        by one without a Python frame per record.

        Args:
            start: First record.
            stop: One past the last record (default: the end).
            block_bytes: Size of each read.

        Returns:
            An iterator over the records (or ``decode(record)``), which reads as it goes.

        Raises:
            RecordIndexError: ``[start, stop)`` is not a valid range (on the first ``next``).
            CorruptRecordError, SidecarError, RangeReadError: As for ``ds[i]``, when the list
                holding the record is read.
        """
        batch_size = iteration.records_per_list(self._table.mean_record_bytes)
        return itertools.chain.from_iterable(iteration.iter_batches(  # no Python frame
            self._source(), self._accesses, batch_size, start, stop, False,  # per record
            block_bytes))

    def iter_batches(self, batch_size: int = 1024, start: int = 0, stop: int | None = None, *,
                     as_buffer: bool = False, block_bytes: int = 8 << 20) -> Iterator[Any]:
        """Read records ``start..stop-1`` in order, ``batch_size`` at a time.

        The fast way to read a dataset sequentially: each batch of a memory-mapped shard is
        cut and checked by one compiled call. A batch is a list of ``bytes`` (one object per
        record, as ``for r in ds`` gives), or with ``as_buffer=True`` a
        :class:`~ofindex.read.sequential.record_batch.RecordBatch`: the payloads back to back in
        one buffer with their offsets (Arrow's binary layout), no Python object per record, several
        times faster when the records are small (e.g. to verify, hash or copy data, or to
        hand it to Arrow or numpy). TFRecord CRCs are checked unless ``verify=False`` (for
        lists with a core to spare, ahead of the list handed out: on a compiled thread for
        small records, on the pool's threads as they are copied for lists of a MB or more).

        Args:
            batch_size: Records per batch (the last batch may be shorter). Batches run across
                shard boundaries.
            start: First record.
            stop: One past the last record (default: the end).
            as_buffer: Yield :class:`~ofindex.read.sequential.record_batch.RecordBatch` objects
                (raw payloads: the dataset's ``decode`` is not applied) instead of lists.
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
        return iteration.iter_batches(self._source(), self._accesses, batch_size, start, stop,
                                      as_buffer, block_bytes)

    # -- columns: records by what they hold (see docs/columns.md) -----------------------------
    def _column_queries(self) -> DatasetColumns:
        if self._columns is None:
            self._columns = dataset_columns(self._table, self.identity)
        return self._columns

    def positions(self, **conditions: object) -> np.ndarray:
        """The global numbers of the records meeting every condition, from the columns built
        with ``build_index(columns=...)``, without reading the records.

        A condition is ``column=value``, ``column=[values...]`` (any of them), ``column=(low,
        high)`` (``low <= value < high``, either end ``None``) or ``column=None`` (records
        without a value); see :mod:`ofindex.columns.conditions`. A column with a key index
        is answered from it in a few page reads; otherwise the shards' column sidecars are
        read, only the pages that may match.

        Args:
            conditions: One condition per column (none: every record).

        Returns:
            The record numbers, ascending (int64).

        Raises:
            ColumnError: A condition of no known form, or a value of another type than the
                column's.
            ColumnNotFoundError: A shard was indexed without a column named.
            StaleIndexError: A column sidecar was built for another version of its index.
            SidecarError: A column sidecar or key index is damaged.
        """
        if not conditions:
            return np.arange(len(self), dtype=np.int64)
        return self._column_queries().positions(conditions)

    def where(self, **conditions: object) -> DatasetView:
        """The records meeting every condition (see :meth:`positions`), as a view: a dataset
        of those records (``len``, ``view[i]``, batches, iteration, samplers, resumable
        loaders and mixtures), read through this dataset.

        Args:
            conditions: One condition per column, e.g. ``label=3``, ``label=[1, 2]``,
                ``score=(0.5, None)``.

        Returns:
            The view.

        Raises:
            ColumnError, ColumnNotFoundError, StaleIndexError, SidecarError: As
                :meth:`positions`.
        """
        text = ", ".join(f"{k}={v!r}" for k, v in conditions.items())
        return DatasetView(self, self.positions(**conditions), text)

    def lookup(self, column: str, value: object) -> Any:
        """The records whose ``column`` holds ``value``: through the column's key index, a
        few page reads whatever the dataset's size (a batch of values reads each level's
        pages in one round).

        Args:
            column: The column (usually a key: an id).
            value: A value, or a list (or 1-d array) of values.

        Returns:
            The global record numbers holding ``value``, ascending (int64; empty when none
            does); for a list of values, one such array per value.

        Raises:
            ColumnError, ColumnNotFoundError, StaleIndexError, SidecarError: As
                :meth:`positions`.
        """
        if type(value) in _ONE_KEY:  # the common single key first: one compiled call
            finder = self._finders.get(column)
            if finder is not None:
                return finder(value)
        queries = self._columns if self._columns is not None else self._column_queries()
        if isinstance(value, np.ndarray):
            return queries.lookup(column, list(value.tolist()))
        if isinstance(value, (list, tuple)):
            return queries.lookup(column, list(value))
        found = queries.lookup_one(column, value)
        if type(value) in _ONE_KEY:  # (after the first lookup: its key index is open now)
            self._finders[column] = self._one_key_finder(queries, column)
        return found

    @staticmethod
    def _one_key_finder(queries: DatasetColumns, column: str) -> Callable[[Any], Any]:
        """What :meth:`lookup` of one key in ``column`` calls once a lookup of the column went
        through ``queries`` (with the loops in use then, as the dataset's reads are): the key
        index's compiled finder (its one-key lookup without a Python step: 0.5 us of a random
        key's ~1.5 us were the three Python calls above the compiled search), falling back to
        the column queries' ``lookup_one``, which checks and converts any key and reads the
        leaves; that alone with the pure-Python loops or without a key index."""

        def fallback(value: object) -> Any:
            return queries.lookup_one(column, value)

        index = queries.key_index(column)
        finder = index.finder(fallback) if index is not None else None
        return fallback if finder is None else finder

    def split_by(self, column: str, fractions: Mapping[str, float]
                 ) -> dict[str, DatasetView]:
        """Deterministic splits by a stable hash of ``column`` (e.g. an id): each record goes
        to a part by its value alone, so the split is the same on any machine, in any order
        of the shards, and stays the same when records are added.

        Args:
            column: The column hashed.
            fractions: Each part's share, e.g. ``{"train": 0.9, "val": 0.1}`` (positive,
                adding up to 1).

        Returns:
            A view per part, in the order given (records without a value are in none).

        Raises:
            ColumnError: Bad fractions; or as :meth:`positions`.
        """
        parts = self._column_queries().split(column, fractions)
        return {name: DatasetView(self, chosen, f"{column} in split {name!r}")
                for name, chosen in parts.items()}

    def column_type(self, column: str) -> str:
        """The type of a column's values: ``"int64"``, ``"float32"``, ``"float64"``,
        ``"bytes"``, or ``"none"`` when no record has a value.

        Args:
            column: The column.

        Returns:
            The type's name.

        Raises:
            ColumnError, ColumnNotFoundError, StaleIndexError, SidecarError: As
                :meth:`positions`.
        """
        return self._column_queries().vtype(column).label

    def groups(self, column: str) -> tuple[list[Any], list[np.ndarray]]:
        """The records of each distinct value of ``column`` (what
        :class:`ofindex.shuffle.BalancedSampler` draws from).

        Args:
            column: The column (e.g. a label).

        Returns:
            ``(values, positions)``: the distinct values, ascending, and each one's record
            numbers, ascending (records without a value, and NaN, are in none).

        Raises:
            ColumnError, ColumnNotFoundError, StaleIndexError, SidecarError: As
                :meth:`positions`.
        """
        return self._column_queries().groups(column)

    # -- files that grow ----------------------------------------------------------------------
    def refresh(self) -> int:
        """Take up the records appended to the dataset's files, and the shards added to its
        location, since it was opened (or last refreshed), in time proportional to what is
        new: a grown file's new bytes alone are scanned (see :mod:`ofindex.read.refresh`).

        A record still being written at the end of a file is left for a later refresh. The
        new records come after the old ones of their shard (a dataset of one file, or whose
        last shard grows, gains records at its end). The dataset's files are read as growing
        from then on (``ofindex.open(..., growing=True)``). Other processes' copies of the
        dataset (DataLoader workers) are refreshed by themselves. Nothing is written: run
        ``ofindex build`` to grow the indexes on disk.

        Returns:
            The number of records added.

        Raises:
            NotAppendedError: A data file was truncated, or replaced by another (not appended
                to): the records read from it may not be there any more.
            StaleIndexError: A shard is gone, or the location lists the shards in another
                order.
            CorruptRecordError: A file's new bytes are damaged.
            OfindexError: The dataset was not made by ``ofindex.open``.
        """
        return refreshing.refresh(self, self._refresh_source)

    def follow(self, poll_interval: float = 1.0,
               stop: Callable[[], bool] | threading.Event | None = None, *, start: int = 0,
               idle_timeout: float | None = None) -> Iterator[Any]:
        """Yield the records from ``start`` on, then every record written to the dataset's
        files as it is written, like ``tail -f``: :meth:`refresh` every ``poll_interval``
        seconds (local files and remote ones alike: a refresh looks at their sizes).

        Every record is yielded once, whatever shard it is in (a shard's new records follow
        its old ones); a record still being written at the end of a file is not yielded
        until it is whole, never taken as damage.

        Args:
            poll_interval: Seconds between two looks at the files once all records were
                yielded.
            stop: When to end: a callable (``True``: stop) or a ``threading.Event``, looked at
                before each look at the files; the records written before it said stop are
                yielded first. ``None``: follow until ``idle_timeout``, or for ever.
            start: The first record (negative counts from the end: ``start=-10`` yields the
                last ten, then the new ones; ``start=len(ds)`` only new ones).
            idle_timeout: End once no record came for this many seconds (``None``: never).

        Yields:
            The records (``decode(record)`` with a ``decode``), in order of arrival.

        Raises:
            NotAppendedError: A file was truncated or replaced while it was followed.
            ValueError: ``poll_interval`` is not positive.
        """
        return refreshing.follow(self, poll_interval, stop, start, idle_timeout)

    def _take_shards(self, shards: list[Shard]) -> None:
        """Read these shards from now on (a refresh: grown shards, new ones at the end)."""
        table = ShardTable(self._table.storage, shards)
        self._table = table
        self._size, self._shards = table.size, table.shards
        self._cumulative, self._first = table.cumulative_list, table.first_list
        self._identity = None  # another content: another identity
        self._columns = None  # the columns of the old content
        self._finders = {}
        compressed = self.compressed or any(
            s.opened and s.header.compression is not Compression.NONE for s in shards)
        self._accesses = ShardAccesses(shards, compressed=compressed,
                                       data_cache=self.data_cache)
        self._drop_reader()  # it holds the old sections

    # -- what the dataset knows without reading data -----------------------------------------
    @property
    def shards(self) -> list[ShardInfo]:
        """Path, record count, size and sidecar of every shard."""
        return self._table.infos()

    @property
    def compressions(self) -> list[Compression]:
        """How each shard's data file is compressed (reads every sidecar's header)."""
        return [s.header.compression for s in self._table.shards]

    @property
    def cumulative_counts(self) -> np.ndarray:
        """``cumulative_counts[k]`` = records in shards ``0..k`` (for samplers)."""
        counts: np.ndarray = self._table.cumulative.copy()
        return counts

    def shards_without_checksums(self) -> list[str]:
        """List the shards whose sidecars hold no payload checksums (loads every sidecar).

        OFRecord payloads are checked on read only against such checksums.

        Returns:
            The shards' URLs.
        """
        return [s.storage.url(s.path) for s in self._table.shards if not s.header.checksums]

    def check_indexes(self) -> None:
        """Check every sidecar's body against its CRC (reads all sidecars).

        Raises:
            SidecarError: A sidecar's offsets are corrupt.
        """
        for shard in self._table.shards:
            shard.sidecar.check_offsets(shard.data_url)

    def locate(self, index: int) -> tuple[int, int]:
        """Find where a record lives, without reading data.

        Args:
            index: A global record number (negative counts from the end).

        Returns:
            ``(shard number, record number inside the shard)``.

        Raises:
            RecordIndexError: ``index`` is out of range.
        """
        return self._table.locate(self._table.check_index(index))

    def record_lengths(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Payload lengths of records, from the index alone (no data read).

        Args:
            indices: Record numbers.

        Returns:
            An int64 array of payload lengths in bytes.

        Raises:
            RecordIndexError: A record number is out of range.
            SidecarError: The sidecar's offsets are corrupt.
        """
        table = self._table
        normalized = table.normalize(as_indices(indices))
        shard_of = table.shard_numbers(normalized)
        out = np.empty(len(normalized), dtype=np.int64)
        for shard_no in np.unique(shard_of).tolist():
            chosen = np.flatnonzero(shard_of == shard_no)
            sidecar = table.shards[shard_no].sidecar
            starts, ends = sidecar.spans(normalized[chosen] - table.first[shard_no])
            out[chosen] = ends - starts - sidecar.format.overhead
        return out


def join_datasets(datasets: Sequence[Dataset]) -> Dataset | None:
    """One dataset whose records are those of ``datasets``, one after the other: their shard
    lists joined, each shard read through its own storage by the access its own dataset
    binds it to (:meth:`ofindex.read.access.ShardAccesses.joined`), its sidecar shared.

    Args:
        datasets: Opened datasets, at least one.

    Returns:
        The joined dataset; ``None`` when they do not read alike (another record format,
        ``verify``, ``decode``, ``max_gap`` or ``max_read_bytes``).
    """
    first = datasets[0]
    for other in datasets[1:]:
        if (other.format is not first.format or other.verify != first.verify
                or other.decode is not first.decode
                or other.max_read_bytes != first.max_read_bytes
                or other._max_gap != first._max_gap):
            return None
    joined = Dataset(first._table.storage,
                     [shard for ds in datasets for shard in ds._table.shards], first.format,
                     verify=first.verify, decode=first.decode, max_gap=first._max_gap,
                     max_read_bytes=first.max_read_bytes, compressed=False,
                     identity=joined_identity([ds.identity for ds in datasets]))
    joined._accesses = ShardAccesses.joined([ds._accesses for ds in datasets])
    return joined
