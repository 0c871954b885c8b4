"""The ofindex error hierarchy.

Every error derives from :class:`OfindexError`; the specific ones also derive from the
matching built-in, so ``except IndexError`` / ``except FileNotFoundError`` /
``except ValueError`` keep working for callers that do not know ofindex.
Messages name the file, the byte offset or record number, and what to do next — in the
caller's own terms: ``str(error)`` gives keyword arguments (``format='tfrecord'``), the
command line prints :meth:`OfindexError.cli_message` (``--format tfrecord``).
"""

import re

_HINT = re.compile("\x1e([^\x1e\x1f]*)\x1f([^\x1e\x1f]*)\x1e")


def hint(python: str, cli: str) -> str:
    """Write a next step both ways, for an error message.

    Args:
        python: The step in Python terms, e.g. ``"format='tfrecord'"``.
        cli: The same step in command-line terms, e.g. ``"--format tfrecord"``.

    Returns:
        A marker that :class:`OfindexError` renders as ``python`` in ``str(error)`` and as
        ``cli`` in :meth:`OfindexError.cli_message`.
    """
    return f"\x1e{python}\x1f{cli}\x1e"


def render(message: str, *, cli: bool) -> str:
    """Resolve the :func:`hint` markers of ``message`` for one audience."""
    return _HINT.sub(lambda m: m.group(2 if cli else 1), message)


class OfindexError(Exception):
    """Base class of every error raised by ofindex."""

    def __str__(self) -> str:
        return render(super().__str__(), cli=False)

    def cli_message(self) -> str:
        """Return the message with next steps written as ``ofindex`` command-line flags."""
        return render(super().__str__(), cli=True)


class CorruptRecordError(OfindexError, ValueError):
    """A record's framing is broken: bad CRC, impossible length, or a truncated record.

    Args:
        message: What is wrong and what to do.
        path: The data file.
        offset: Byte offset of the record's framing.
        record: Record number inside the file.
        stored_crc: The CRC stored in the file, for a CRC mismatch.
        computed_crc: The CRC of the bytes read, for a CRC mismatch.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        offset: int | None = None,
        record: int | None = None,
        stored_crc: int | None = None,
        computed_crc: int | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset
        self.record = record
        self.stored_crc = stored_crc
        self.computed_crc = computed_crc


class TruncatedRecordError(CorruptRecordError):
    """The data file ends inside a record (an interrupted write or a partial copy)."""


class FormatDetectionError(OfindexError, ValueError):
    """The record format of a file could not be detected, or is ambiguous."""


class IndexNotFoundError(OfindexError, FileNotFoundError):
    """A data file has no sidecar index."""


class DataFileNotFoundError(OfindexError, FileNotFoundError):
    """A data file, directory or glob matched nothing."""


class SidecarError(OfindexError, ValueError):
    """A sidecar file is corrupt, truncated, foreign, or of an unsupported version."""


class ManifestError(SidecarError):
    """A dataset manifest is corrupt, truncated, foreign, or of an unsupported version (a
    :class:`SidecarError`, as the index files it lists)."""


class StaleIndexError(SidecarError):
    """A sidecar no longer matches its data file (size or fingerprint changed, or the file was
    replaced since the dataset was opened)."""


class NotAppendedError(StaleIndexError):
    """A data file read as growing (``ofindex.open(..., growing=True)``,
    :meth:`~ofindex.Dataset.refresh`, :meth:`~ofindex.Dataset.follow`) changed other than by
    records appended: it was truncated, or replaced by another file. The records read so far
    may not be in it any more; reopen the dataset (and index the file again)."""


class IndexMismatchError(SidecarError, CorruptRecordError):
    """A record's own framing disagrees with the byte range its index gives it.

    Both a :class:`SidecarError` (the index may be wrong) and a :class:`CorruptRecordError`
    (the data may have changed): the record is never returned. Carries ``path``, ``offset``
    and ``record`` like :class:`CorruptRecordError`.
    """


class RecordIndexError(OfindexError, IndexError):
    """A record number is out of range."""


class RangeReadError(OfindexError, OSError):
    """A storage backend returned other bytes than the ones asked for, or kept failing."""


class StorageError(OfindexError, OSError):
    """Storage could not be reached or refused access (endpoint, credentials, bucket)."""


class ClusterError(OfindexError, ConnectionError):
    """A compute cluster to build on (a Dask scheduler, a Ray cluster) cannot be reached."""


class InvalidURLError(OfindexError, ValueError):
    """A path or URL that no storage understands (an unknown protocol)."""


class MissingDependencyError(OfindexError, ImportError):
    """An optional dependency (an extra such as ``ofindex[s3]``) is not installed."""


class DecodeError(OfindexError, ValueError):
    """A record could not be decoded as asked (missing feature, wrong kind, bad bytes)."""


class EncodeError(OfindexError, ValueError):
    """Values could not be encoded as asked (a type a record cannot hold, a value out of
    range, a column of the wrong length); the message names the feature and the record."""


class DatasetExistsError(OfindexError, FileExistsError):
    """A writer's destination already holds data files, or another writer claimed it (a
    dataset is never written over another one)."""


class IncompleteDatasetError(OfindexError, FileNotFoundError):
    """Shards of a dataset are missing: names that say ``-of-N`` with fewer than ``N`` of
    them, or a writer's publication that did not finish. Such a set never opens or builds as
    a dataset unless ``allow_missing_shards=True`` (``--allow-missing-shards``) accepts it."""


class SourceError(OfindexError, ValueError):
    """A conversion's source cannot be read as what it was taken for (a damaged or truncated
    Parquet or numpy file, a broken Hugging Face ``save_to_disk`` directory); the message
    names the file and what to do."""


class NestedPathsError(OfindexError, ValueError):
    """A conversion's output lies inside its source, or its source inside its output (the
    output would be read as source data, now or by a rerun); both are named. The command
    line exits 2, as for any bad argument."""


class StateError(OfindexError, ValueError):
    """A saved sampler or loader state cannot be loaded: a field is missing, unknown, of
    the wrong type or out of range, or the state was saved for another sampler (dataset
    size, seed, order parameters; for a mixture the sources, batch size or mode). The
    message names the field, the value and what to do."""


class ColumnError(OfindexError, ValueError):
    """A feature cannot be stored as a column, or a column cannot answer a query as asked: a
    record holds several values of it, records store it as different value types, a
    condition's value is of another type than the column's, or a column is not one the
    dataset has. The message names the column, and the file and record (or the shard)."""


class ColumnNotFoundError(IndexNotFoundError):
    """A shard has no column sidecar for a column a query needs (its index was built without
    ``columns=``): the message names the shard and the build that adds it."""


def missing_extra(what: str, extra: str, cause: BaseException) -> MissingDependencyError:
    """The error for a feature whose optional dependency cannot be imported.

    Args:
        what: What needs it, e.g. ``"ofindex.integrations.torch"``.
        extra: The extra that installs it, e.g. ``"torch"``.
        cause: The ``ImportError`` raised by the import.

    Returns:
        A :class:`MissingDependencyError` naming ``pip install 'ofindex[<extra>]'`` (raise it
        ``from cause``).
    """
    return MissingDependencyError(
        f"{what} needs an optional dependency that is not installed ({cause}); "
        f"run: pip install 'ofindex[{extra}]'")


class OfindexWarning(UserWarning):
    """Base class of every warning ofindex gives (``warnings.simplefilter("error",
    OfindexWarning)`` makes them all errors)."""


class LeftoverFilesWarning(OfindexWarning):
    """A directory holds the hidden files of a writer that did not finish (see
    :mod:`ofindex.write.leftovers`)."""


class SkippedFilesWarning(OfindexWarning):
    """Files found by a directory or glob were skipped: they are not TFRecord/OFRecord files
    (see :mod:`ofindex.formats.strays`)."""


class MissingShardsWarning(OfindexWarning):
    """A dataset opened or built with ``allow_missing_shards=True`` lacks shards (the message
    says which)."""


class UnverifiedIndexWarning(OfindexWarning):
    """A data file was taken as the one its index describes by its size alone: the index
    (ofindex 0.2's) has no content digest, and its fingerprint is of another kind than the
    storage's (indexed on local disk and uploaded, or the other way round), so a replacement
    of the same size could not be told."""


class DataCacheWarning(OfindexWarning):
    """A dataset is read without the data cache: its data files do not fit its bound."""


class PartialIndexWarning(OfindexWarning):
    """A dataset has shards whose index covers only a valid prefix (``allow_partial``)."""


class CacheDirWarning(OfindexWarning):
    """``cache_dir`` cannot be used: this process reads without the node cache."""


class LegacyLayoutWarning(OfindexWarning):
    """A dataset's sidecars sit beside its data files (ofindex 0.2's layout), where globs over
    the data directory (``part-*``, ``*``) return them too; ``migrate=True`` moves them."""
