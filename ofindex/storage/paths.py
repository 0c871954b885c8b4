"""From what a user names (a file, a directory, a glob, a list) to the data files, in order."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..errors import DataFileNotFoundError
from .base import Storage
from .patterns import has_magic
from .registry import Storages

#: A file, directory, glob or URL, or a list of them.
PathSpec = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]

#: Names in a listing that are never data files.
_SKIP_SUFFIXES = (".ofidx", ".ofcol", ".ofkey", ".idx", ".index", ".tmp", ".json", ".crc")

#: Documents that datasets ship beside their record files (READMEs and licences, TFDS's
#: ``<feature>.labels.txt``, TF-slim's ``labels.txt``, notes and tables): found by a listing,
#: they are skipped with a warning, unlike the silent :data:`_SKIP_SUFFIXES`.
_DOCUMENT_PREFIXES = ("readme", "license", "licence", "copying", "citation")
_DOCUMENT_SUFFIXES = (".txt", ".md", ".rst", ".csv", ".tsv", ".yaml", ".yml", ".pbtxt",
                      ".html", ".pdf", ".py", ".ipynb")


def natural_key(name: str) -> tuple[int | str, ...]:
    """Sort key putting ``part-2`` before ``part-10`` (digit runs compare as numbers)."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def is_data_file_name(name: str) -> bool:
    """Tell whether a name found in a directory listing is a data file.

    Hidden files, ``_SUCCESS``-style markers, sidecars, text indexes, manifests and temporary
    files are not.
    """
    return not (name.startswith((".", "_")) or name.endswith(_SKIP_SUFFIXES))


def is_document_name(name: str) -> bool:
    """Tell whether a name found in a listing is a document, not a record file, by its name
    alone (``README``, ``LICENSE``, ``*.txt``, ``*.md`` …: see :data:`_DOCUMENT_SUFFIXES`)."""
    lower = name.lower()
    return lower.startswith(_DOCUMENT_PREFIXES) or lower.endswith(_DOCUMENT_SUFFIXES)


class DataFiles(NamedTuple):
    """The data files a path spec names.

    Attributes:
        storage: One storage for all of them.
        files: Their paths on ``storage``, in dataset order.
        named: The paths the user named one by one, not found by expanding a directory or a
            glob (such a file is never skipped as a stray).
    """

    storage: Storage
    files: list[str]
    named: frozenset[str]


def is_glob(storage: Storage, path: str) -> bool:
    """Whether ``path`` is a glob: it holds glob characters and names no file or directory
    (a path that exists is that path: :mod:`.patterns`).

    Args:
        storage: Its storage.
        path: The path there.

    Returns:
        True for a pattern to match.
    """
    return has_magic(path) and not storage.exists(path)


def as_list(spec: PathSpec) -> list[str]:
    """The entries of a path spec as strings (one entry for a single path)."""
    if isinstance(spec, (str, os.PathLike)):
        return [os.fspath(spec)]
    return [os.fspath(s) for s in spec]


def resolve_data_files(
    spec: PathSpec,
    storage_options: dict[str, Any] | None = None,
) -> tuple[Storage, list[str]]:
    """List the data files named by a path, a directory, a glob, or a list of those (see
    :func:`list_data_files`).

    Returns:
        ``(storage, paths)``: one storage for all entries and the data paths on it.
    """
    found = list_data_files(spec, Storages(storage_options))
    return found.storage, found.files


def list_data_files(spec: PathSpec, storages: Storages) -> DataFiles:
    """List the data files named by a path, a directory, a glob, or a list of those.

    Each directory or glob expands to its files in natural order (``part-2`` before
    ``part-10``), skipping hidden files, markers and index files; explicit lists keep their
    order, and an explicit file is taken whatever its name.

    Args:
        spec: What the user named.
        storages: The call's storages.

    Returns:
        One storage for all entries, the data paths on it, and which of them were named one
        by one.

    Raises:
        DataFileNotFoundError: An entry matches no data file, or ``spec`` is empty.
        ValueError: The entries are on different storages.
    """
    items = as_list(spec)
    if not items:
        raise DataFileNotFoundError("no data files given")
    storage: Storage | None = None
    files: list[str] = []
    named: set[str] = set()
    for item in items:
        st, path = storages.for_url(item)
        if storage is None:
            storage = st
        elif st is not storage:
            raise ValueError(
                f"{item}: all data files must be on one storage (got {st!r} and {storage!r})"
            )
        found = storage.expand(path)
        if len(found) == 1 and found[0].rstrip("/") == path.rstrip("/"):
            files.extend(found)
            named.update(found)
            continue
        found = [p for p in found if is_data_file_name(storage.basename(p))]
        if not found:
            raise DataFileNotFoundError(
                f"{item}: no data files found (it is not a file, a directory with files, or a "
                "glob that matches files)"
            )
        base = storage
        files.extend(sorted(found, key=lambda p: natural_key(base.basename(p))))
    assert storage is not None  # items is not empty
    return DataFiles(storage, files, frozenset(named))
