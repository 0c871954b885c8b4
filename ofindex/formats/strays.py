"""Files a directory or glob turns up that are plainly not record files.

Beside its shards a dataset directory often holds a README, a licence or TFDS's
``<feature>.labels.txt``. A file found by a listing is such a *stray* when its name says it is
a document (:func:`~ofindex.storage.paths.is_document_name`) or its first bytes fit no record
file (:func:`~.detect.may_hold_records`: no TFRecord header, no plausible OFRecord length, no
gzip/zlib header; an empty file is an empty record file). A build skips strays with one
:class:`SkippedFilesWarning` (``strict=True`` refuses them), and so does opening a listed
directory for a stray that has no sidecar. A file the user named on its own is never a stray:
a bad one stays an error; nor is a file named like the record files beside it (``part-00003``
among ``part-00000`` …, see :func:`looks_like_shard`) or named ``*tfrecord*``/``*ofrecord*``
whose first bytes fit no record file: that is a damaged shard, which the build reports.
"""

from __future__ import annotations

import collections
import re
import warnings
from collections.abc import Collection, Sequence

from ..errors import DataFileNotFoundError, FormatDetectionError, SkippedFilesWarning, hint
from ..storage import Storage, is_document_name
from .detect import may_hold_records

#: Bytes that tell a stray: a TFRecord header (12), an OFRecord length (8), a gzip header (10).
SNIFF_BYTES = 16

#: File names shown in a message; the rest are counted.
SHOWN = 3


def name_pattern(name: str) -> str:
    """A file name with its digit runs replaced (``part-00003`` gives ``part-#``): the shards
    of one dataset share it."""
    return re.sub(r"[0-9]+", "#", name)


def looks_like_shard(name: str, patterns: Collection[str]) -> bool:
    """Tell whether a file name says it is a record file: it names the format, or it is
    named like the record files beside it.

    Args:
        name: The file's name.
        patterns: :func:`name_pattern` of the names of the record files beside it.

    Returns:
        ``True`` when the file is a shard by its name (damaged if its bytes fit no framing).
    """
    lower = name.lower()
    return "tfrecord" in lower or "ofrecord" in lower or name_pattern(name) in patterns


def is_stray(storage: Storage, path: str, patterns: Collection[str] = ()) -> bool:
    """Tell whether a listed file is plainly not a record file (by name, else by its first
    :data:`SNIFF_BYTES`).

    Args:
        storage: Storage of the file.
        path: The file.
        patterns: :func:`name_pattern` of the names of the record files beside it.

    Returns:
        ``True`` for a document, or for a file whose first bytes fit no record file and whose
        name is not a shard's (:func:`looks_like_shard`).

    Raises:
        DataFileNotFoundError: The file is gone.
        StorageError: Storage cannot be reached, or refuses access.
    """
    name = storage.basename(path)
    if is_document_name(name):
        return True
    if looks_like_shard(name, patterns):
        return False
    size = storage.stamp(path).size
    head = storage.read(path, 0, min(size, SNIFF_BYTES)) if size else b""
    return not may_hold_records(head, size)


class ListedStrays:
    """Which files of a listing are strays, asked file by file (each looked at once, and only
    when asked: a listing of a million files costs nothing until its files are read).

    Names that several listed files share (``part-00000``, ``part-00001`` …) are shards'
    (:func:`looks_like_shard`): such a file whose bytes fit no framing is a damaged shard, not
    a stray. A file the user named on its own is never a stray.

    Args:
        storage: Storage of the files.
        files: The files listed.
        named: Those the user named one by one.

    Attributes:
        skipped: The URLs of the strays found, in the order asked.
    """

    def __init__(self, storage: Storage, files: Sequence[str],
                 named: Collection[str] = ()) -> None:
        self.storage, self.named = storage, named
        names = collections.Counter(name_pattern(storage.basename(f)) for f in files)
        self.patterns = {pattern for pattern, count in names.items() if count > 1}
        self.skipped: list[str] = []
        self._known: dict[str, bool] = {}

    def __call__(self, path: str) -> bool:
        """Tell whether ``path`` is a stray (noted in :attr:`skipped` the first time).

        Args:
            path: One of the files listed.

        Returns:
            ``True`` for a stray, which a build skips too.

        Raises:
            DataFileNotFoundError: The file is gone.
            StorageError: Storage cannot be reached, or refuses access.
        """
        known = self._known.get(path)
        if known is None:
            known = path not in self.named and is_stray(self.storage, path, self.patterns)
            self._known[path] = known
            if known:
                self.skipped.append(self.storage.url(path))
        return known


def shown(urls: list[str]) -> str:
    """The first :data:`SHOWN` of ``urls``, and how many more."""
    more = f" and {len(urls) - SHOWN} more" if len(urls) > SHOWN else ""
    return ", ".join(urls[:SHOWN]) + more


def _files(count: int) -> str:
    return f"{count} file" + ("" if count == 1 else "s")


def warn_skipped(urls: list[str], stacklevel: int = 2) -> None:
    """Warn once that the files ``urls`` were skipped, naming the first few.

    Args:
        urls: The skipped files.
        stacklevel: As for :func:`warnings.warn`, counted from the caller of this function.
    """
    warnings.warn(SkippedFilesWarning(
        f"skipped {_files(len(urls))} that {'is' if len(urls) == 1 else 'are'} not "
        f"TFRecord/OFRecord: {shown(urls)}; name a file on its own (not through a directory "
        "or glob) to use it anyway"), stacklevel=stacklevel + 1)


def strays_refused(urls: list[str]) -> FormatDetectionError:
    """The error of a strict build that found files that are not record files."""
    return FormatDetectionError(
        f"{_files(len(urls))} found {'is' if len(urls) == 1 else 'are'} not TFRecord/OFRecord: "
        f"{shown(urls)}; move {'it' if len(urls) == 1 else 'them'} out of the dataset, or "
        f"build without {hint('strict=True', '--strict')} to skip "
        f"{'it' if len(urls) == 1 else 'them'} with a warning"
    )


def only_strays(urls: list[str]) -> DataFileNotFoundError:
    """The error when every file found is a stray: there is no record file to index."""
    what = ("the file found is not a record file" if len(urls) == 1
            else f"none of the {len(urls)} files found is a record file")
    return DataFileNotFoundError(
        f"no TFRecord/OFRecord files found: {what} ({shown(urls)}); name a file on its own to "
        "index it anyway"
    )
