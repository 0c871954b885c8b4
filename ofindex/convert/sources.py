"""What ``ofindex convert`` reads: each source as batches of columns (or of records), its
record count when known, and its columns checked before anything is written.

Sources: Parquet files (a file, a directory or a glob of ``*.parquet``), a Hugging Face
``datasets`` dataset (the object, or a ``save_to_disk`` directory), an image folder in the
``class/file.jpg`` layout, ``.npy`` / ``.npz`` files, and TFRecord / OFRecord datasets.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import tempfile
import warnings
import zipfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ofindex.convert.imagefolder import (
    image_folder_batches,
    image_items,
    is_image_folder,
    not_regular,
)
from ofindex.encode.arrow import check_arrow_schema
from ofindex.errors import (
    EncodeError,
    FormatDetectionError,
    IndexNotFoundError,
    SkippedFilesWarning,
    SourceError,
)
from ofindex.formats.framing import RecordFormat
from ofindex.formats.location import resolve
from ofindex.formats.strays import ListedStrays, only_strays, shown, warn_skipped
from ofindex.read.sequential.peek import RecordStream
from ofindex.storage import LocalStorage, is_glob
from ofindex.storage.registry import Storages

#: Records a batch holds by default where the source cannot tell its rows' size (and the
#: fewest a batch sized by bytes holds: 1,024 records of ~100 KB images are 100 MB).
BATCH_RECORDS = 1024
#: Bytes of Arrow columns a batch holds by default (Parquet, Hugging Face): a batch costs
#: ~0.4 ms of Python whatever its rows (5 columns), a third of converting 500k rows of short
#: token lists in batches of 1,024; in 4 MiB batches (14k rows) it is lost. Bigger batches
#: cost more than they save: each one's buffers are new memory for the kernel to zero (500k
#: rows, CPU-s: 1,024 rows 1.38, 8,192 0.59, 13,888 0.55, 24,000 0.60, 65,536 0.66).
BATCH_BYTES = 4 << 20
#: The most records a batch sized by bytes holds (tiny rows: the per-batch cost is lost long
#: before, and a batch's arrays stay small).
BATCH_RECORDS_MAX = 65_536
#: Bytes a batch of big records (above ``BATCH_BYTES / BATCH_RECORDS``, 4 KiB) holds at most:
#: 1,024 images of ~100 KB made batches of 100 MB, held two or three at a time, and the
#: reading of one could not overlap the writing of the one before (2,000 such images from
#: Parquet: 0.17 s in batches of 1,024, 0.135 s in batches of 200, 0.168 s in batches of 40,
#: whose per-batch cost shows).
BIG_BATCH_BYTES = 16 << 20
#: The fewest records a batch sized by bytes holds (records of several MB).
BATCH_RECORDS_MIN = 16


def batch_records(batch_size: int | None, bytes_per_record: float) -> int:
    """The records of a batch: ``batch_size`` when given, else as many as hold about
    :data:`BATCH_BYTES` of records of ``bytes_per_record`` (0: unknown, then
    :data:`BATCH_RECORDS`), at least :data:`BATCH_RECORDS` and at most
    :data:`BATCH_RECORDS_MAX`; big records, fewer: about :data:`BIG_BATCH_BYTES`, at least
    :data:`BATCH_RECORDS_MIN`."""
    if batch_size is not None:
        return batch_size
    if bytes_per_record <= 0:
        return BATCH_RECORDS
    records = BATCH_BYTES // bytes_per_record
    if records >= BATCH_RECORDS:
        return int(min(BATCH_RECORDS_MAX, records))
    return int(max(BATCH_RECORDS_MIN, min(BATCH_RECORDS, BIG_BATCH_BYTES // bytes_per_record)))


@dataclasses.dataclass
class Source:
    """A source to convert.

    Attributes:
        description: What it is, for the progress bar and messages.
        records: Its number of records, when known.
        batches: Makes the iterator of batches: ``{name: column}`` / Arrow tables (encoded),
            or lists of payload bytes (``raw`` sources).
        raw: The batches are payloads, written as they are.
        record_format: For ``raw`` sources: the framing they come from.
        images: Gives the first bytes of each encoded image of a batch (``None``: the
            source has no image column), for the formats :func:`~ofindex.convert` reports.
    """

    description: str
    records: int | None
    batches: Callable[[], Iterator[Any]]
    raw: bool = False
    record_format: str = ""
    images: Callable[[Any], list[Any]] | None = None


def _reason(exc: BaseException) -> str:
    """What a library said about a file it could not read, on one line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:199] + "…"


def _unreadable(path: str, what: str, exc: BaseException, step: str) -> SourceError:
    return SourceError(f"{path}: {what} ({_reason(exc)}); {step}")


#: What pyarrow raises for a file it cannot read (ArrowInvalid is a ValueError, ArrowIOError
#: an OSError).
_PARQUET_FAILURES = (ValueError, OSError, EOFError)
_PARQUET_STEP = ("check that the file is whole (a copy or download may have been cut short), "
                 "or move it out of the source")


def _check_schema(schema: Any) -> None:
    check_arrow_schema(schema)


def _same_columns(paths: list[str], schemas: list[Any]) -> None:
    """Every Parquet file has the first one's columns, of the same types (the dataset's
    column map describes one schema).

    Raises:
        SourceError: Naming the file and the column that differs.
    """
    first = schemas[0]
    for path, schema in zip(paths[1:], schemas[1:], strict=True):
        if schema.names != first.names:
            raise SourceError(f"{path}: its columns {schema.names} are not those of "
                              f"{paths[0]} ({first.names}); convert the files separately, or "
                              "write them with one schema")
        for field, other in zip(schema, first, strict=True):
            if field.type != other.type:
                raise SourceError(f"{path}: column {field.name!r} is {field.type}, in "
                                  f"{paths[0]} {other.type}; convert the files separately, or "
                                  "cast the column to one type")


def parquet_source(paths: list[str], batch_size: int | None) -> Source:
    """Parquet files, read batch by batch with pyarrow (columns checked first); ``None``:
    batches of about :data:`BATCH_BYTES` of the files' uncompressed columns."""
    import pyarrow.parquet as pq

    files = []
    for path in paths:
        try:
            files.append(pq.ParquetFile(path))
        except _PARQUET_FAILURES as exc:
            raise _unreadable(path, "not a readable Parquet file", exc, _PARQUET_STEP) from exc
    for f in files:
        _check_schema(f.schema_arrow)
    if files:
        _same_columns(paths, [f.schema_arrow for f in files])
    rows = sum(f.metadata.num_rows for f in files)
    stored = sum(f.metadata.row_group(k).total_byte_size for f in files
                 for k in range(f.metadata.num_row_groups))
    batch_size = batch_records(batch_size, stored / rows if rows else 0)

    def batches() -> Iterator[Any]:
        for path, f in zip(paths, files, strict=True):
            rows = 0
            try:
                for batch in f.iter_batches(batch_size=batch_size):
                    rows += batch.num_rows
                    yield batch
            except _PARQUET_FAILURES as exc:
                raise _unreadable(path, f"damaged: reading failed after {rows:,} of its "
                                  f"{f.metadata.num_rows:,} rows", exc, _PARQUET_STEP) from exc

    return Source(f"{len(paths)} Parquet file(s)", rows, batches)


def _cache_files(hf_data: Any) -> str:
    files = [entry.get("filename", "?") for entry in getattr(hf_data, "cache_files", [])]
    return ", ".join(files[:2]) + (" …" if len(files) > 2 else "") if files else "in memory"


def _image_heads(columns: list[str]) -> Callable[[Any], list[Any]]:
    """The first 16 bytes of each image of a batch's ``Image()`` columns (structs of bytes
    and path), cut by Arrow (the images are not copied)."""
    import pyarrow.compute as pc

    def heads(batch: Any) -> list[Any]:
        out: list[Any] = []
        for name in columns:
            files = batch.column(name).combine_chunks()
            images = files.flatten()[files.type.get_field_index("bytes")]  # null rows: null
            out.extend(pc.binary_slice(images, 0, 16).to_pylist())
        return out

    return heads


def _hf_image_columns(features: Any, kinds: tuple[str, ...] = ("Image",)) -> list[str]:
    return [name for name, feature in features.items() if type(feature).__name__ in kinds]


def _by_path_only(batch: Any, columns: list[str]) -> bool:
    """Whether an image or audio of the batch is named by its path alone (bytes null)."""
    import pyarrow.compute as pc

    for name in columns:
        files = batch.column(name).combine_chunks()
        if files.null_count == len(files):
            continue
        lone = pc.and_(files.field("bytes").is_null(), files.field("path").is_valid())
        if pc.any(lone).as_py():
            return True
    return False


def hf_source(hf_data: Any, batch_size: int | None) -> Source:
    """A Hugging Face ``datasets.Dataset``: the rows it yields, batch by batch, as Arrow
    tables. A dataset made by ``.filter``, ``.select``, ``.shuffle`` or ``train_test_split``
    keeps its parent's whole table and maps its rows through indices: the dataset's own
    iterator applies them (its table's batches would be every row of the parent). An image
    or audio file that the dataset names by its path only is read into the record, as
    ``save_to_disk`` embeds it (the batch's paths then become base names, as there); images
    that hold their bytes are written as they are. ``batch_size`` ``None``: batches of about
    :data:`BATCH_BYTES` of its table."""
    from datasets.table import embed_table_storage

    table = hf_data.data.table if hasattr(hf_data.data, "table") else hf_data.data
    _check_schema(table.schema)
    batch_size = batch_records(batch_size, table.nbytes / table.num_rows if table.num_rows
                               else 0)
    files = _hf_image_columns(hf_data.features, ("Image", "Audio"))
    images = _hf_image_columns(hf_data.features)

    def batches() -> Iterator[Any]:
        rows = 0
        try:
            for batch in hf_data.with_format("arrow").iter(batch_size=batch_size):
                rows += batch.num_rows
                # HF's own embedding (save_to_disk's), only where a file is named by its path
                # alone: it also cuts every path of the batch to its base name
                yield embed_table_storage(batch) if _by_path_only(batch, files) else batch
        except _PARQUET_FAILURES as exc:  # its Arrow cache files are read as it goes
            raise _unreadable("the Hugging Face dataset", f"reading failed after {rows:,} of "
                              f"its {len(hf_data):,} rows", exc, "check its cache files "
                              f"({_cache_files(hf_data)}), or load it again") from exc

    return Source("a Hugging Face dataset", len(hf_data), batches,
                  images=_image_heads(images) if images else None)


def numpy_source(path: str, batch_size: int) -> Source:
    """A ``.npz`` (one column per array) or ``.npy`` file (one column named after the file);
    every array holds one entry per record along its first axis."""
    try:
        if path.endswith(".npz"):
            with np.load(path, allow_pickle=False) as archive:
                columns = {name: archive[name] for name in archive.files}
        else:
            columns = {os.path.splitext(os.path.basename(path))[0]: np.load(
                path, allow_pickle=False)}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        if "allow_pickle" in str(exc):
            raise SourceError(f"{path}: holds arrays of Python objects, which convert does not "
                              "load (unpickling runs code from the file); save numeric or "
                              "string arrays") from exc
        raise _unreadable(path, "not a readable .npy / .npz file", exc,
                          "check that the file is whole, or save the arrays again with "
                          "numpy.save / numpy.savez") from exc
    lengths = {name: (len(a) if a.ndim else -1) for name, a in columns.items()}
    if len(set(lengths.values())) != 1 or -1 in lengths.values():
        raise EncodeError(f"{path}: arrays of different lengths or scalars ({lengths}); each "
                          "array holds one entry per record along its first axis")
    total = next(iter(lengths.values()), 0)

    def batches() -> Iterator[Any]:
        for start in range(0, total, batch_size):
            yield {name: a[start:start + batch_size] for name, a in columns.items()}

    return Source(path, total, batches)


def image_folder_source(root: str, batch_size: int) -> Source:
    """An image folder ``root/<class>/<file>``: features ``image`` (the file's bytes),
    ``label`` (the class's index in sorted order), ``class`` and ``filename``; only regular
    files are read (see :mod:`ofindex.convert.imagefolder`)."""
    classes, items = image_items(root)
    return Source(f"image folder {root} ({len(classes)} classes)", len(items),
                  lambda: image_folder_batches(root, items, batch_size),
                  images=lambda batch: batch["image"])


def records_source(src: str, batch_size: int, storage_options: dict[str, Any] | None) -> Source:
    """A TFRecord or OFRecord dataset (any path ``ofindex.open`` takes), record payloads,
    through its index. Files without one are not indexed where they are (the source is not
    ours to write to): local files are indexed into a temporary directory, removed after the
    conversion (one fast scan); remote ones are read front to back once
    (:func:`unindexed_records_source`)."""
    from ofindex.opening import open as open_dataset

    scratch = None
    try:
        ds = open_dataset(src, storage_options=storage_options)
    except IndexNotFoundError:
        location = resolve(src, storages=Storages(storage_options or {}))
        if not location.storage.is_local:
            return unindexed_records_source(src, batch_size, storage_options)
        scratch = tempfile.mkdtemp(prefix="ofindex-convert-")
        try:
            ds = open_dataset(src, storage_options=storage_options, index_dir=scratch,
                              build_missing=True)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise

    def batches() -> Iterator[Any]:
        try:
            with ds:
                yield from ds.iter_batches(batch_size)
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)

    return Source(f"{ds.format.name.lower()} dataset {src}", len(ds), batches, raw=True,
                  record_format=ds.format.name.lower())


def unindexed_records_source(src: str, batch_size: int,
                             storage_options: dict[str, Any] | None) -> Source:
    """Record files without an index, read front to back (their framing and CRCs checked);
    listed files that are plainly not record files are skipped with one warning, as a build
    skips them.

    Raises:
        FormatDetectionError: A file fits no framing, or files of both framings are listed.
    """
    location = resolve(src, storages=Storages(storage_options or {}))
    storage, files = location.storage, list(location.files)
    stray = ListedStrays(storage, files, location.named)
    opened: list[RecordStream] = []  # up to the first file that holds a record (its framing)
    for path in files:
        if not stray(path):
            opened.append(RecordStream(storage, path))
            if opened[-1].format is not None:
                break
    if not opened:
        raise only_strays(stray.skipped)
    first = opened[-1]
    fmt = first.format or RecordFormat.TFRECORD  # (every file empty: either framing)

    def streams() -> Iterator[RecordStream]:
        yield from opened
        for path in files[files.index(first.path) + 1:]:
            if stray(path):
                continue
            stream = RecordStream(storage, path)
            if stream.format not in (None, fmt):
                raise FormatDetectionError(
                    f"{stream.url} holds {stream.format.name} records but {first.url} holds "
                    f"{fmt.name}: convert each kind of file on its own")
            yield stream

    def batches() -> Iterator[Any]:
        batch: list[bytes] = []
        for stream in streams():
            for payload in stream.records():
                batch.append(payload)
                if len(batch) >= batch_size:
                    yield batch
                    batch = []
        if batch:
            yield batch
        if stray.skipped:
            warn_skipped(stray.skipped)

    return Source(f"{fmt.name.lower()} files {src} (no index: read front to back)", None,
                  batches, raw=True, record_format=fmt.name.lower())


def _parquet_files(src: str) -> list[str]:
    """The Parquet files a path names; of a directory or glob, the regular files only (a
    FIFO named ``x.parquet`` would be waited on), the others skipped with one warning. A
    path that exists is taken as written, whatever its characters; only one that does not
    may be a glob."""
    if os.path.isdir(src):
        found = sorted(glob.glob(os.path.join(glob.escape(src), "**", "*.parquet"),
                                 recursive=True))
    else:
        local = LocalStorage()
        if not is_glob(local, src):
            return [src] if src.endswith(".parquet") else []
        found = sorted(local.expand(src))
    regular = [path for path in found if os.path.isfile(path)]
    if len(regular) < len(found):
        others = [path for path in found if path not in set(regular)]
        warnings.warn(SkippedFilesWarning(
            f"skipped {not_regular(len(others), 'Parquet-named')}: {shown(others)}; only "
            "regular files are read"), stacklevel=3)
    return regular


def open_source(src: object, batch_size: int | None,
                storage_options: dict[str, Any] | None = None) -> Source:
    """Find what ``src`` is and open it as a :class:`Source` (``batch_size`` ``None``: Parquet
    and Hugging Face batches sized by bytes, :func:`batch_records`; others of
    :data:`BATCH_RECORDS`).

    Raises:
        EncodeError: A column that cannot be represented (named), before anything is read.
        OfindexError: ``src`` is none of the sources, and not a record dataset either.
    """
    if not isinstance(src, (str, os.PathLike)):
        if hasattr(src, "data") and hasattr(src, "features"):
            return hf_source(src, batch_size)
        raise TypeError(f"convert takes a path or a Hugging Face dataset, not "
                        f"{type(src).__name__}")
    src = os.fspath(src)
    records = batch_records(batch_size, 0)
    if src.endswith((".npz", ".npy")):
        return numpy_source(src, records)
    if os.path.isdir(src) and os.path.exists(os.path.join(src, "dataset_info.json")) and \
            os.path.exists(os.path.join(src, "state.json")):
        import datasets

        try:
            saved = datasets.load_from_disk(src)
        except Exception as exc:  # whatever datasets raises for a broken save
            raise _unreadable(src, "not a readable Hugging Face save_to_disk directory", exc,
                              "save the dataset again with dataset.save_to_disk, or pass the "
                              "dataset object to ofindex.convert") from exc
        return hf_source(saved, batch_size)
    parquet = _parquet_files(src) if "://" not in src else []
    if parquet:
        return parquet_source(parquet, batch_size)
    if is_image_folder(src):
        return image_folder_source(src, records)
    return records_source(src, records, storage_options)
