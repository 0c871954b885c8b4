"""An image folder (``root/<class>/<file>.jpg``) as a source of ``ofindex convert``.

Only regular files are read: an entry named like an image that is a FIFO, a socket, a device,
a directory or a dangling link is skipped with one :class:`SkippedFilesWarning` naming it
(opening a FIFO for reading waits for a writer: the conversion hung), and each file is opened
without blocking and checked to be a regular file before a byte is read (an entry replaced by
a FIFO after the listing cannot hang it either). An entry that cannot be read (removed since
the listing, no permission, an I/O error) is an error naming it.
"""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from ofindex.errors import DataFileNotFoundError, SkippedFilesWarning, StorageError
from ofindex.formats.strays import shown

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff")


def not_regular(count: int, named: str) -> str:
    """``1 image-named entry that is not a regular file`` / ``3 … entries that are not …``."""
    if count == 1:
        return f"1 {named} entry that is not a regular file"
    return f"{count} {named} entries that are not regular files"


def _unreadable(root: str, entry: str, exc: OSError) -> Exception:
    """The error for an entry of the folder that could not be listed or read."""
    path = os.path.join(root, entry)
    if isinstance(exc, FileNotFoundError):
        return DataFileNotFoundError(f"image folder {root}: {entry} is gone (removed while "
                                     "converting?); convert the folder again once nothing "
                                     "changes it")
    reason = exc.strerror or type(exc).__name__
    return StorageError(f"image folder {root}: {entry} cannot be read ({reason}): make "
                        f"{path} readable, or move it out of the folder")


def _entries(root: str, relative: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(os.path.join(root, relative)) as listing:
            return sorted(listing, key=lambda e: e.name)
    except OSError as exc:
        raise _unreadable(root, relative or ".", exc) from None


def _is_regular(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file()  # follows links: a link to a regular file is one
    except OSError:
        return False


def _classes(root: str) -> list[str]:
    out = []
    for entry in _entries(root, ""):
        try:
            if not entry.name.startswith(".") and entry.is_dir():
                out.append(entry.name)
        except OSError:
            continue
    return out


def is_image_folder(src: str) -> bool:
    """Tell whether ``src`` is a directory whose subdirectories hold image-named files
    (subdirectories that cannot be listed are not looked into)."""
    if not os.path.isdir(src):
        return False
    try:
        subdirs = [e.path for e in os.scandir(src) if e.is_dir()]
    except OSError:
        return False
    for subdir in subdirs:
        try:
            with os.scandir(subdir) as listing:
                if any(e.name.lower().endswith(IMAGE_SUFFIXES) for e in listing):
                    return True
        except OSError:
            continue
    return False


def read_regular_file(root: str, entry: str) -> bytes:
    """The bytes of a regular file, opened without blocking (a FIFO put in its place is
    never waited on).

    Raises:
        DataFileNotFoundError: It is gone.
        StorageError: It is no regular file any more, or cannot be read.
    """
    path = os.path.join(root, entry)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _unreadable(root, entry, exc) from None
    try:
        data = None
        if stat.S_ISREG(os.fstat(fd).st_mode):
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read()
    except OSError as exc:
        raise _unreadable(root, entry, exc) from None
    finally:
        os.close(fd)
    if data is None:
        raise StorageError(f"image folder {root}: {entry} is no regular file any more "
                           "(replaced since it was listed); convert the folder again once "
                           "nothing changes it")
    return data


def image_items(root: str) -> tuple[list[str], list[tuple[int, str, str]]]:
    """The classes (sorted) and the ``(label, class, file)`` of every regular image file;
    entries named like images that are not regular files are skipped with one warning.

    Raises:
        OfindexError: A class directory cannot be listed.
    """
    classes = _classes(root)
    items: list[tuple[int, str, str]] = []
    skipped: list[str] = []
    for label, name in enumerate(classes):
        for entry in _entries(root, name):
            if not entry.name.lower().endswith(IMAGE_SUFFIXES):
                continue
            if _is_regular(entry):
                items.append((label, name, entry.name))
            else:
                skipped.append(os.path.join(name, entry.name))
    if skipped:
        warnings.warn(SkippedFilesWarning(
            f"image folder {root}: skipped {not_regular(len(skipped), 'image-named')} (a "
            f"FIFO, socket, device, directory or dangling link): {shown(skipped)}; only "
            "regular files are read"), stacklevel=3)
    return classes, items


def image_folder_batches(root: str, items: list[tuple[int, str, str]],
                         batch_size: int) -> Iterator[dict[str, Any]]:
    """Batches of the folder's records: ``image`` (the file's bytes), ``label``, ``class``
    and ``filename``."""
    for start in range(0, len(items), batch_size):
        chunk = items[start:start + batch_size]
        images = [read_regular_file(root, os.path.join(name, file)) for _, name, file in chunk]
        yield {"image": images, "label": np.array([c[0] for c in chunk], np.int64),
               "class": [c[1] for c in chunk], "filename": [c[2] for c in chunk]}
