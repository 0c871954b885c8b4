"""A dataset writer: records (bytes, messages, feature mappings or whole columns) into shards of
a target size, named ``part-00000-of-00012``, with sidecars and a manifest.

Each shard is written by :class:`ofindex.Writer` under a hidden name in the destination
(``.<token>-<stream>-<n>.writing``), its sidecar made from the offsets as it writes; the
``-of-N`` count is known only at the end, so :meth:`ShardedWriter.close` checks every final
name, claims the directory, renames the shards (see :mod:`ofindex.write.publish`), writes the
manifest and then drops the claim. Until the renames, nothing a reader lists is there (hidden
names are skipped); from the claim until the manifest, ``ofindex.open`` and ``ofindex build``
refuse the directory as a publication that did not finish
(:class:`~ofindex.errors.IncompleteDatasetError`), with or without ``build_missing``. A
writer that fails or is interrupted (an exception, Ctrl-C) before the manifest is written
removes what it wrote, renamed shards and its claim included. A process killed outright
leaves hidden files, which nothing opens, and, if it was publishing, its claim, which keeps
the directory refused. The destination must hold no data files and no other writer's claim:
a dataset is never written over another, nor mixed with one.

With ``append=True`` the destination is a published dataset and the new shards follow its
own: they are numbered after them (the pattern must not count the shards, ``-of-N`` names of
a set that grows would say it lacks some), must sort after them, and :meth:`ShardedWriter.close`
renames them into place and writes the manifest again, atomically, listing the old shards
first. Nothing of the old shards is written, so a reader that opened the dataset before reads
on as before; :meth:`ofindex.Dataset.refresh` takes up the new shards.
"""

import contextlib
import dataclasses
import os
import secrets
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

import numpy as np

from ofindex.decode.image_kinds import formats_text
from ofindex.decode.spec import Spec
from ofindex.encode.arrow import arrow_schema
from ofindex.encode.arrow_map import EXACT, describe_schema, same_columns, schema_text
from ofindex.encode.columns import plan_columns
from ofindex.encode.encoder import Encoder
from ofindex.encode.framed import OFRECORD_FRAMING, TFRECORD_FRAMING, BatchPlan, encode_block
from ofindex.encode.nulls import REFUSE, Nulls
from ofindex.errors import DatasetExistsError, OfindexError
from ofindex.formats.column_map import COLUMN_MAP_NAME, dump_column_map
from ofindex.formats.framing import RecordFormat
from ofindex.formats.location import resolve, sidecar_place
from ofindex.formats.placement import new_index_dir
from ofindex.formats.shard_set import PUBLISHING
from ofindex.index.builder import build_index
from ofindex.storage import Storage, Storages
from ofindex.storage.paths import is_data_file_name, natural_key
from ofindex.write.leftovers import hidden_name
from ofindex.write.publish import claim, claimed_error, move_sidecar, release, rename_data
from ofindex.write.writer import Writer

#: The default name of shard ``shard`` of ``count`` (``str.format`` fields).
PATTERN = "part-{shard:05d}-of-{count:05d}"
#: The default name of the shards added to a dataset (``append=True``): they cannot say how
#: many there are, as the set grows.
APPEND_PATTERN = "part-{shard:05d}"
#: The default target shard size when neither ``shard_bytes`` nor ``shard_records`` is given.
SHARD_BYTES = 256 << 20
_FRAMING = {RecordFormat.TFRECORD: 16, RecordFormat.OFRECORD: 8}
_BLOCKS = {RecordFormat.TFRECORD: TFRECORD_FRAMING, RecordFormat.OFRECORD: OFRECORD_FRAMING}
#: Bytes of records encoded and written at once by ``write_columns`` (one buffer per stream,
#: reused: a few MiB make each write call large while the buffer stays in cache).
BLOCK_BYTES = 4 << 20


@dataclasses.dataclass(frozen=True)
class WriteSummary:
    """What a :class:`ShardedWriter` wrote.

    Attributes:
        directory: The dataset's directory (URL or path).
        files: The shards' URLs, in order.
        records: Records written.
        bytes: Bytes of the data files (compressed size for compressed shards).
        seconds: Time from the writer's creation to the end of :meth:`ShardedWriter.close`.
        image_formats: ``{format: count}`` of the encoded images written, where the writer
            was told (``ofindex.convert`` of an image folder or of a Hugging Face dataset
            with ``Image()`` columns: ``{"JPEG": 95, "PNG": 5}``); empty otherwise.
    """

    directory: str
    files: list[str]
    records: int
    bytes: int
    seconds: float
    image_formats: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def shards(self) -> int:
        """The number of shards."""
        return len(self.files)

    def __str__(self) -> str:
        rate = self.records / self.seconds if self.seconds > 0 else 0.0
        images = (f"; images: {formats_text(self.image_formats)}" if self.image_formats
                  else "")
        return (f"{self.records:,} records in {self.shards} shards, {self.bytes / 1e6:,.1f} MB, "
                f"{self.seconds:.2f} s ({rate:,.0f} records/s) -> {self.directory}{images}")


@dataclasses.dataclass
class _Staged:
    """A finished shard under its hidden name (``path``), and its final name once renamed."""

    path: str
    records: int
    bytes: int
    final: str = ""


class ShardStream:
    """One sequence of shards of a :class:`ShardedWriter` (made by
    :meth:`ShardedWriter.stream`): write to several streams from several threads to write a
    dataset in parallel. Its methods are those of the writer.

    Args:
        owner: The writer whose dataset the shards belong to.
        number: The stream's place: its shards follow those of the streams before it.
    """

    def __init__(self, owner: "ShardedWriter", number: int) -> None:  # (see the module's end)
        self._owner = owner
        self._number = number
        self._writer: Writer | None = None
        self._writer_path = ""
        self._bytes = 0
        self.staged: list[_Staged] = []
        self.records = 0
        self.closed = False
        #: What interrupted a write of this stream after it began writing (its shards are
        #: incomplete then, and the writer publishes nothing).
        self.failure: BaseException | None = None
        self._block = bytearray(BLOCK_BYTES)
        #: The shard being finished on a helper thread (see :meth:`_finish_shard`), and what
        #: stopped it (its writer then aborted by :meth:`abort`).
        self._closing: threading.Thread | None = None
        self._close_failed: tuple[Writer, BaseException] | None = None

    def _next_shard(self) -> Writer:
        owner = self._owner
        name = hidden_name(owner.token, self._number, len(self.staged))
        path = self._writer_path = owner.storage.join(owner.path, name)
        self._bytes = 0
        return Writer(owner.storage.url(path), owner.format, index_dir=owner.index_url,
                      storage_options=owner.storage_options, compression=owner.compression,
                      checksums=owner.checksums, compression_level=owner.compression_level)

    def _finish_shard(self, behind: bool = False) -> None:
        """Close the current shard: its sidecar written and flushed to the disk, its file
        renamed. ``behind``: on a helper thread while the next shard is written (local files
        only: the fsync and renames took 14 ms a shard of the main thread, a tenth of
        converting 500k rows into 8 shards); the previous one is waited for first, and its
        failure raised here."""
        writer = self._writer
        if writer is None:
            return
        self._settle()
        staged = _Staged(self._writer_path, 0, 0)
        self.staged.append(staged)  # tracked before close publishes it: abort removes it
        if not (behind and self._owner.storage.is_local):
            self._close_shard(writer, staged)
            self._writer = None
            return
        self._writer = None
        self._closing = threading.Thread(target=self._close_behind, args=(writer, staged),
                                         name="ofindex-shard-close", daemon=True)
        self._closing.start()

    def _close_shard(self, writer: Writer, staged: _Staged) -> None:
        writer.close()
        staged.records = len(writer)
        staged.bytes = self._owner.storage.stamp(staged.path).size

    def _close_behind(self, writer: Writer, staged: _Staged) -> None:
        try:
            self._close_shard(writer, staged)
        except BaseException as exc:  # raised by the next _settle, on the writing thread
            self._close_failed = (writer, exc)

    def _settle(self) -> None:
        """Wait for the shard being finished behind; raise what stopped it.

        Raises:
            BaseException: What its close raised (the stream is then marked failed).
        """
        if self._closing is not None:
            self._closing.join()  # (interrupted here, abort() waits for it again)
            self._closing = None
        if self._close_failed is not None:
            self.failure = self._close_failed[1]
            raise self._close_failed[1]

    def write(self, record: bytes | bytearray | memoryview | Mapping[str, Any] | Any) -> None:
        """Write one record.

        Args:
            record: Payload bytes, a protobuf message, or ``{name: value}`` features
                (encoded with the writer's ``spec`` as an Example, or an OFRecord for
                ``format="ofrecord"``; see :mod:`ofindex.encode`).

        Raises:
            EncodeError: Features that cannot be encoded (naming the feature and record).
            OfindexError: The writer is closed.
        """
        owner = self._owner
        if self.closed:
            raise OfindexError(f"{owner.url}: write() on a closed writer")
        if isinstance(record, Mapping):
            record = owner.encoder(record, record=self.records)
        size = len(record) if isinstance(record, (bytes, bytearray, memoryview)) else 0
        framed = size + _FRAMING[owner.format]
        with self._failure_noted():
            writer = self._writer
            if writer is not None and len(writer) and (
                    (owner.shard_records is not None and len(writer) >= owner.shard_records)
                    or (owner.shard_bytes is not None
                        and self._bytes + framed > owner.shard_bytes)):
                self._finish_shard()
                writer = None
            if writer is None:
                writer = self._writer = self._next_shard()
            writer.write(record)
            self._bytes += framed
            self.records += 1

    @contextlib.contextmanager
    def _failure_noted(self) -> Iterator[None]:
        """Note what interrupts writing (records of this stream may then be missing)."""
        try:
            yield
        except BaseException as exc:
            self.failure = exc
            raise

    def write_many(self, records: Iterable[Any]) -> int:
        """Write many records (as :meth:`write`).

        Args:
            records: Payloads, messages or feature mappings.

        Returns:
            How many records were written.

        Raises:
            EncodeError: Features that cannot be encoded.
        """
        n = 0
        for record in records:
            self.write(record)
            n += 1
        return n

    def write_columns(self, columns: Mapping[str, Any] | Any) -> int:
        """Encode a batch of columns at once (see :func:`ofindex.encode.encode_columns`) and
        write its records.

        The records are encoded straight into their framing, a block at a time
        (:func:`ofindex.encode.framed.encode_block`), and each block is written in one call:
        no object per record.

        Args:
            columns: ``{name: column}`` (one entry per record) or an Arrow table.

        Returns:
            How many records were written.

        Raises:
            EncodeError: A column or value that cannot be encoded.
        """
        owner = self._owner
        if not isinstance(columns, Mapping):
            owner.note_schema(columns)
        plan = plan_columns(columns, owner.spec, owner.kind, first_record=self.records,
                            nulls=owner.encoder.nulls, float64=owner.float64)
        with self._failure_noted():
            self._write_plan(plan)
        return plan.rows

    def _write_plan(self, plan: BatchPlan) -> None:
        owner = self._owner
        block = self._block
        sizes = np.empty(plan.rows, np.int64)
        crcs = np.empty(plan.rows, np.uint32)
        start = 0
        while start < plan.rows:
            writer = self._writer
            if writer is not None and len(writer) and self._shard_full():
                self._finish_shard(behind=True)
                writer = None
            if writer is None:
                writer = self._writer = self._next_shard()
            stop, room = self._room(plan.rows, start)
            rows, used = encode_block(plan, start, stop, _BLOCKS[owner.format],
                                      min(room, len(block)), block, sizes[start:], crcs[start:])
            if rows == 0 and used > room and len(writer):
                self._finish_shard(behind=True)  # the next record starts a shard of its own
                continue
            if rows == 0:  # one record bigger than the block: a block of its own
                block = bytearray(used)
                rows, used = encode_block(plan, start, start + 1, _BLOCKS[owner.format], used,
                                          block, sizes[start:], crcs[start:])
            writer.write_framed(memoryview(block)[:used], sizes[start:start + rows],
                                crcs[start:start + rows])
            self._bytes += used
            self.records += rows
            start += rows

    def _shard_full(self) -> bool:
        writer = self._writer
        owner = self._owner
        return writer is not None and (
            (owner.shard_records is not None and len(writer) >= owner.shard_records)
            or (owner.shard_bytes is not None and self._bytes >= owner.shard_bytes))

    def _room(self, rows: int, start: int) -> tuple[int, int]:
        """The rows from ``start`` the current shard may still take, and its bytes left."""
        owner = self._owner
        written = len(self._writer) if self._writer is not None else 0
        stop = rows if owner.shard_records is None else min(
            rows, start + owner.shard_records - written)
        room = (1 << 62) if owner.shard_bytes is None else owner.shard_bytes - self._bytes
        return stop, room

    def close(self) -> None:
        """Finish this stream's last shard (the dataset is published by the writer's
        :meth:`ShardedWriter.close`)."""
        if not self.closed:
            self.closed = True
            self._finish_shard()
            self._settle()

    def abort(self) -> None:
        """Drop what this stream wrote (once a shard being finished behind is done)."""
        self.closed = True
        if self._closing is not None:
            self._closing.join()
            self._closing = None
        failed, self._close_failed = self._close_failed, None
        writer, self._writer = self._writer, None
        for unfinished in (failed[0] if failed else None, writer):
            if unfinished is not None:
                unfinished.abort()
        owner = self._owner
        for staged in self.staged:  # renamed ones too: the dataset was not published whole
            for path in (staged.path, staged.final) if staged.final else (staged.path,):
                owner.storage.remove(path)
                owner._remove_sidecar(path)
        self.staged = []


class ShardedWriter:
    """Write a dataset: records into shards of a target size, with sidecars and a manifest.

    >>> with ShardedWriter("out/", shard_records=1000) as w:   # doctest: +SKIP
    ...     w.write_columns({"image": images, "label": labels})
    >>> w.summary.shards                                        # doctest: +SKIP

    Args:
        directory: The dataset's directory, local or a bucket URL; it must hold no data files.
        format: ``"tfrecord"`` or ``"ofrecord"``.
        shard_bytes: Start a new shard before one would pass this many bytes (records and
            their framing, before compression). Default 256 MiB when ``shard_records`` is not
            given either.
        shard_records: Start a new shard after this many records.
        pattern: The shards' names, a ``str.format`` string with the fields ``shard`` and
            ``count`` (known at :meth:`close`); default ``part-{shard:05d}-of-{count:05d}``,
            and with ``append`` ``part-{shard:05d}``.
        compression: ``"gzip"``, ``"zlib"`` or ``None`` (see :class:`ofindex.Writer`).
        spec: The decoding spec feature mappings and columns must fit (see
            :mod:`ofindex.encode`), or ``None``.
        index_dir: Where sidecars go, as for :class:`ofindex.Writer`.
        storage_options: Options for the fsspec filesystem.
        checksums: Per-payload CRC32Cs in the sidecars (default: for OFRecord).
        compression_level: zlib's level for compressed shards.
        nulls: What a null element inside a list of a feature mapping or a column becomes:
            ``"refuse"``, ``"drop"`` or ``("fill", value)`` (see
            :mod:`ofindex.encode.nulls`).
        float64: How an Example holds the float64 values of Arrow columns: ``"exact"`` (the
            raw doubles in a bytes value) or ``"float32"`` (TensorFlow's float_list,
            rounded); see :mod:`ofindex.encode.arrow_map`.
        append: Add shards to the dataset ``directory`` holds (see the module): numbered
            after its shards, named by ``pattern`` (default ``part-{shard:05d}``, which must
            not use ``{count}``), published with a new manifest listing its shards first.
            Readers that opened it before keep reading it as it was.

    Written from Arrow data (tables, record batches, Hugging Face datasets), the dataset gets
    a column map beside its manifest (``ofindex-columns.json``: the columns' features and
    their Arrow schema), with which ``ofindex.integrations.hf.to_hf_dataset`` gives the
    columns back as they were, when every Arrow batch has the first one's columns.

    Raises:
        DatasetExistsError: ``directory`` already holds data files (without ``append``).
        ValueError: A bad ``format``, ``compression``, size, ``pattern`` or ``nulls``; with
            ``append``, a pattern that counts the shards, or a dataset of another format.

    Use it as a context manager, or call :meth:`close` (publish) or :meth:`abort` (drop).
    :meth:`stream` gives more shard sequences of the same dataset, one per thread.
    """

    def __init__(self, directory: str | os.PathLike[str], format: str | RecordFormat = "tfrecord",
                 *, shard_bytes: int | None = None, shard_records: int | None = None,
                 pattern: str | None = None, compression: str | None = None,
                 spec: Spec = None, index_dir: str | None = None,
                 storage_options: dict[str, Any] | None = None,
                 checksums: bool | None = None, compression_level: int = -1,
                 nulls: Nulls = REFUSE, float64: str = EXACT, append: bool = False) -> None:
        self._started = time.perf_counter()
        if float64 not in (EXACT, "float32"):
            raise ValueError(f"float64={float64!r}: use 'exact' or 'float32'")
        self.float64 = float64
        #: The Arrow schema of the batches written (``None``: no Arrow batch yet).
        self.schema: Any = None
        self._mixed = False  # Arrow batches of different columns were written
        #: The column map this writer wrote (removed by :meth:`abort`).
        self._column_map: tuple[Storage, str] | None = None
        self.format = RecordFormat.parse(format)
        if shard_bytes is None and shard_records is None:
            shard_bytes = SHARD_BYTES
        for label, value in (("shard_bytes", shard_bytes), ("shard_records", shard_records)):
            if value is not None and value < 1:
                raise ValueError(f"{label} must be at least 1, not {value}")
        self.shard_bytes, self.shard_records = shard_bytes, shard_records
        pattern = pattern if pattern is not None else APPEND_PATTERN if append else PATTERN
        _check_pattern(pattern)
        if append and "{count" in pattern:
            raise ValueError(f"pattern {pattern!r}: shards added to a dataset cannot count "
                             "the shards (a set named -of-N that grows says it lacks some); "
                             f"use a pattern without {{count}}, e.g. {APPEND_PATTERN!r}")
        self.pattern = pattern
        self.compression, self.compression_level = compression, compression_level
        self.spec = spec
        self.kind = "ofrecord" if self.format is RecordFormat.OFRECORD else "example"
        self.encoder = Encoder(spec, self.kind, nulls=nulls)
        self.index_dir, self.storage_options, self.checksums = (index_dir, storage_options,
                                                                checksums)
        self._storages = Storages(storage_options)
        self.storage: Storage
        self.storage, self.path = self._storages.for_url(os.fspath(directory))
        self.url = self.storage.url(self.path)
        #: Where the sidecars go: ``index_dir``, else the placement rule's index directory
        #: of a directory named as a whole (see :mod:`ofindex.formats.placement`).
        self.index_url = (os.fspath(index_dir) if index_dir is not None
                          else self.storage.url(new_index_dir(self.storage, self.path)))
        self._sidecars = sidecar_place(self.storage, self.index_url, self._storages)
        #: The directory's claim while this writer publishes (see :meth:`close`).
        self._claim: str | None = None
        self.append = append
        #: The shards of the dataset appended to, in its order (``append``), else none.
        self._existing: list[str] = self._existing_shards() if append else []
        self._refuse_existing()
        self.token = secrets.token_hex(4)
        self._lock = threading.Lock()
        self._streams: list[ShardStream] = [ShardStream(self, 0)]
        self.summary: WriteSummary | None = None
        #: The dataset is whole in place (every shard renamed, sidecars, manifest).
        self.published = False

    def _existing_shards(self) -> list[str]:
        """The shards of the dataset this writer appends to, in its order (none when the
        directory does not exist or holds no data file).

        Raises:
            ValueError: The dataset is of another format.
        """
        if not self.storage.is_dir(self.path) or not any(
                is_data_file_name(self.storage.basename(f))
                for f in self.storage.expand(self.path)):
            return []
        location = resolve(self.url, index_dir=self.index_dir, storages=self._storages)
        manifest = location.manifest
        if manifest is not None and manifest.format is not self.format:
            raise ValueError(f"{self.url} is a {manifest.format.name.lower()} dataset: append "
                             f"to it with format={manifest.format.name.lower()!r}")
        # as this writer names its own shards (the location may spell the directory
        # otherwise: absolute, or with the manifest's data directory)
        directory = location.directory if location.directory is not None else self.path
        return [self.storage.join(self.path, _name_in(self.storage, directory, f))
                for f in location.files]

    def _refuse_existing(self) -> None:
        if not self.storage.is_dir(self.path):
            return
        listed = self.storage.expand(self.path)
        names = {self.storage.basename(f) for f in listed}
        if PUBLISHING in names and self._claim is None:  # another writer's (checked early)
            raise claimed_error(self.storage, self.storage.join(self.path, PUBLISHING))
        found = sorted(n for n in names if is_data_file_name(n))
        if self.append:  # its shards, and no other (another writer's added meanwhile)
            found = sorted(set(found) - {self.storage.basename(f) for f in self._existing})
        if found:
            raise DatasetExistsError(
                f"{self.url} already holds data files ({found[0]} …): "
                "write the dataset to a new directory, or remove the old one first")

    def note_schema(self, arrow_data: Any) -> None:
        """Keep the Arrow schema of a batch written (the column map describes it); batches
        of different columns get no column map (no one schema reads them back).

        Args:
            arrow_data: An Arrow table or record batch, or a Hugging Face dataset.
        """
        schema = arrow_schema(arrow_data)
        with self._lock:
            if self.schema is None and not self._mixed:
                self.schema = schema
            elif self.schema is not None and same_columns(self.schema, schema) is not None:
                self.schema, self._mixed = None, True

    def _write_column_map(self) -> None:
        """The column map beside the manifest, or no file there (one left by a dataset
        written earlier in this directory would describe another's columns)."""
        probe = self.storage.join(self.path, COLUMN_MAP_NAME)
        storage, sidecar = self._sidecars.of(self.storage, probe)
        path = storage.join(storage.dirname(sidecar), COLUMN_MAP_NAME)
        if self.schema is None:
            if storage.exists(path):
                storage.remove(path)
            return
        data = dump_column_map(self.format.name.lower(), self.float64,
                               describe_schema(self.schema, self.kind, self.float64),
                               schema_text(self.schema))
        self._column_map = (storage, path)
        storage.write_atomic(path, [data])

    def _remove_sidecar(self, data_path: str) -> None:
        """Remove the sidecar of one of this writer's data files (if there is one)."""
        storage, path = self._sidecars.of(self.storage, data_path)
        storage.remove(path)

    def stream(self) -> ShardStream:
        """Another sequence of shards of this dataset, e.g. one per thread; its shards follow
        those of the streams made before it. Close it (or let :meth:`close` do it).

        Returns:
            A :class:`ShardStream`.
        """
        with self._lock:
            stream = ShardStream(self, len(self._streams))
            self._streams.append(stream)
            return stream

    def __len__(self) -> int:
        """Records written so far (all streams)."""
        return sum(s.records for s in self._streams)

    def write(self, record: Any) -> None:
        """Write one record (see :meth:`ShardStream.write`).

        Args:
            record: Payload bytes, a protobuf message, or ``{name: value}`` features.

        Raises:
            EncodeError: Features that cannot be encoded.
        """
        self._streams[0].write(record)

    def write_many(self, records: Iterable[Any]) -> int:
        """Write many records (see :meth:`ShardStream.write_many`).

        Args:
            records: Payloads, messages or feature mappings.

        Returns:
            How many records were written.

        Raises:
            EncodeError: Features that cannot be encoded.
        """
        return self._streams[0].write_many(records)

    def write_columns(self, columns: Mapping[str, Any] | Any) -> int:
        """Encode and write a batch of columns (see :func:`ofindex.encode.encode_columns`).

        Args:
            columns: ``{name: column}`` (one entry per record) or an Arrow table.

        Returns:
            How many records were written.

        Raises:
            EncodeError: A column or value that cannot be encoded.
        """
        return self._streams[0].write_columns(columns)

    def close(self) -> WriteSummary:
        """Finish every stream, check every final name, claim the directory, rename the shards
        to their final names, move their sidecars, drop the claim and write the manifest.

        Returns:
            A :class:`WriteSummary` (also kept as :attr:`summary`).

        Raises:
            DatasetExistsError: Data files appeared in the directory meanwhile, or another
                writer claimed it to publish (nothing of this writer's is published then; its
                files are removed).
            ValueError: ``pattern`` names two of the shards alike (nothing is published).
            OfindexError: A stream failed while writing (an error of the storage, an
                interrupt): its records are incomplete, and its files are removed.
        """
        if self.summary is not None:
            return self.summary
        try:
            for stream in self._streams:
                stream.close()
            failed = [(k, s.failure) for k, s in enumerate(self._streams) if s.failure]
            if failed:
                k, failure = failed[0]
                raise OfindexError(f"{self.url}: stream {k} failed while writing ({failure!r}): "
                                   "some of its records are missing, so nothing is published; "
                                   "write the dataset again")
            staged = [s for stream in self._streams for s in stream.staged]
            if not staged:  # an empty dataset is one empty shard
                stream = self._streams[0]
                stream.closed = False
                stream._writer = stream._next_shard()
                stream.close()
                staged = stream.staged
            finals = self._final_names(len(staged))
            self._claim = claim(self.storage, self.path, self.token)
            self._refuse_existing()  # under the claim: no other writer renames meanwhile
            files = self._publish(staged, finals)
        except BaseException:
            self.abort()
            raise
        self.summary = WriteSummary(self.url, [self.storage.url(f) for f in files],
                                    sum(s.records for s in staged),
                                    sum(s.bytes for s in staged),
                                    time.perf_counter() - self._started)
        return self.summary

    def _final_names(self, count: int) -> list[str]:
        """The final paths of ``count`` shards, every name checked before any is used.

        Raises:
            ValueError: The pattern gives two shards one name (a later shard would replace
                an earlier one), or a name that is no data file name of the directory.
        """
        seen: dict[str, int] = {}
        first = len(self._existing)
        for k in range(first, first + count):
            name = self.pattern.format(shard=k, count=first + count)
            if name in seen:
                raise ValueError(
                    f"{self.url}: pattern {self.pattern!r} names shards {seen[name]} and {k} "
                    f"of {count} alike ({name!r}); nothing is published: use a pattern whose "
                    "{shard} field gives each shard its own name, e.g. "
                    f"{PATTERN!r}")
            seen[name] = k
            _check_name(self.pattern, name)
        if self._existing:
            _check_after(self.pattern, [self.storage.basename(f) for f in self._existing],
                         list(seen))
        return [self.storage.join(self.path, name) for name in seen]

    def _publish(self, staged: list[_Staged], finals: list[str]) -> list[str]:
        for item, final in zip(staged, finals, strict=True):
            rename_data(self.storage, item.path, final)
            item.final = final
        for item in staged:
            old = self._sidecars.of(self.storage, item.path)
            new = self._sidecars.of(self.storage, item.final)
            move_sidecar(self.storage, item.final, old, new)
        if not self.append:  # shards added keep the dataset's column map as it is
            self._write_column_map()
        # every shard and sidecar is in place: the directory holds the whole dataset from
        # here, so a writer killed before the manifest leaves one that opens whole
        self._release_claim()
        build_index([self.storage.url(f) for f in [*self._existing, *finals]],
                    index_dir=self.index_dir, storage_options=self.storage_options,
                    manifest=True, progress=False, format=self.format.name.lower())
        self.published = True  # whole, with its manifest: abort() leaves it alone from now
        return finals

    def abort(self) -> None:
        """Drop everything this writer wrote, unless the dataset is published whole.

        Each stream removes the files it knows (also those already renamed by an interrupted
        :meth:`close`: a dataset is published whole or not at all); then every file of the
        directory and of its index directory whose name carries this writer's token
        (``.<token>-…``, made by no one else) goes too: what an interrupt (Ctrl-C) left
        between a file's creation and its stream knowing it, such as a shard's temporary
        file.
        """
        if self.published:
            return
        if self._claim is None and any(s.final for t in self._streams for s in t.staged):
            # shards have their final names: hold the claim while they go, so that a process
            # killed midway leaves a directory that is refused, not a smaller dataset
            with contextlib.suppress(OSError):  # another writer's claim, or a storage error
                self._claim = claim(self.storage, self.path, self.token)
        for stream in self._streams:
            stream.abort()
        if self._column_map is not None:
            storage, path = self._column_map
            storage.remove(path)
        self._release_claim()
        self.remove_hidden()

    def remove_hidden(self) -> None:
        """Remove every file of the directory and of its index directory whose name carries
        this writer's token (``.<token>-…``, made by no one else): hidden shards and sidecars
        nothing publishes (an interrupted write's, or a failed task's of a
        :class:`~ofindex.write.jobs.WriteJob`)."""
        prefix = f".{self.token}-"
        probe = self.storage.join(self.path, prefix)
        index_storage, index_probe = self._sidecars.of(self.storage, probe)
        for storage, directory in ((self.storage, self.path),
                                   (index_storage, index_storage.dirname(index_probe))):
            for path in storage.expand(storage.join(directory, prefix + "*")):
                if storage.basename(path).startswith(prefix):  # ours: named with our token
                    storage.remove(path)

    def _release_claim(self) -> None:
        if self._claim is not None:
            release(self.storage, self._claim)
            self._claim = None

    def __enter__(self) -> "ShardedWriter":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _check_pattern(pattern: str) -> None:
    """Refuse a pattern that cannot work, before anything is written (every name is checked
    again at :meth:`ShardedWriter.close`, when the count is known)."""
    try:
        first = pattern.format(shard=0, count=2)
        second = pattern.format(shard=1, count=2)
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"pattern {pattern!r}: a str.format string with the fields "
                         f"{{shard}} and {{count}} ({exc})") from None
    if first == second:
        raise ValueError(f"pattern {pattern!r} must name each shard differently (use "
                         "{shard}), inside the directory, as a data file name")
    _check_name(pattern, first)


def _name_in(storage: Storage, directory: str, path: str) -> str:
    """The name of ``path`` inside ``directory`` (``sub/part-0`` for a subdirectory's)."""
    if storage.is_local:
        return os.path.relpath(path, directory)
    return path[len(directory.rstrip("/")):].lstrip("/")


def _check_after(pattern: str, existing: list[str], names: list[str]) -> None:
    """Refuse names of added shards that do not sort after the dataset's own (a listing of
    the directory would then put them among them, in another order than the manifest's).

    Raises:
        ValueError: One sorts before or among them, or repeats one.
    """
    last = max(existing, key=natural_key)
    early = [n for n in names if natural_key(n) <= natural_key(last) or n in existing]
    if early:
        raise ValueError(f"pattern {pattern!r} names an added shard {early[0]!r}, which does "
                         f"not sort after the dataset's last shard {last!r}: use a pattern "
                         f"whose names follow the dataset's (the default, {APPEND_PATTERN!r}, "
                         "numbers them after its shards)")


def _check_name(pattern: str, name: str) -> None:
    """Refuse a shard name outside the directory, or one a listing would skip."""
    if "/" in name or not is_data_file_name(name):
        raise ValueError(f"pattern {pattern!r} gives the shard name {name!r}: each shard must "
                         "be named differently (use {shard}), inside the directory, as a data "
                         "file name")


# the two classes name each other: the stream's annotation is resolved once both exist (so
# help() and the API reference show the class, not a string)
ShardStream.__init__.__annotations__["owner"] = ShardedWriter
