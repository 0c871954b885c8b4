"""The files of the node cache's directory (``cache_dir``), named and touched by the cache alone.

Every file the cache opens, maps, writes or deletes in its directory has a name it derives
itself: the database's fixed names, and for a whole sidecar a hex digest of its URL
(:func:`entry_name`). No name or path is ever read from the database. Nothing is opened
through a symbolic link or as anything but a regular file (``O_NOFOLLOW``, ``lstat``), writes
go to a fresh temporary file renamed into place (a rename replaces a link, never its target),
and an unlink removes a name of the directory, never what it may point to. A shared or
tampered directory can therefore cost cache misses, but never make a reader open, write or
delete a file elsewhere.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import re
import stat
from collections.abc import Iterable

from ..errors import SidecarError
from ..formats.sidecar import SUFFIX, Sidecar, decode_header
from ..storage import FileStamp

#: The key prefix of a file's entry in the database (a whole sidecar, a block of data).
FILE_KEY_PREFIX = b"file:"
#: The suffix of a block of data kept by the data cache (:mod:`ofindex.cache.data`).
BLOCK_SUFFIX = ".ofblock"
_FILE_KEYS = {suffix: re.compile(rb"file:([0-9a-f]{32}" + re.escape(suffix.encode()) + rb")")
              for suffix in (SUFFIX, BLOCK_SUFFIX)}
#: Bytes of a sidecar read to decode its header (as :func:`open_local_sidecar` does).
_HEAD_BYTES = 4096
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0))


def entry_name(index_url: str) -> str:
    """The file name of the whole sidecar at ``index_url`` in the cache directory."""
    return hashlib.sha256(index_url.encode("utf-8")).hexdigest()[:32] + SUFFIX


def file_key(name: str) -> bytes:
    """The database key of the whole-sidecar file ``name`` (an :func:`entry_name`)."""
    return FILE_KEY_PREFIX + name.encode("ascii")


def block_name(digest: bytes) -> str:
    """The file name of the block of data whose key digest is ``digest`` (16 bytes)."""
    return digest.hex() + BLOCK_SUFFIX


def name_of_key(key: bytes, suffix: str = SUFFIX) -> str | None:
    """The file a database key stands for, or ``None`` when it names none (a page, a
    header, or a key that is not of the cache's own making).

    Args:
        key: A key of the database.
        suffix: The kind of file the database holds: whole sidecars (``.ofidx``) or blocks
            of data (:data:`BLOCK_SUFFIX`); a key naming another kind names none.
    """
    match = _FILE_KEYS[suffix].fullmatch(key)
    return None if match is None else match.group(1).decode("ascii")


def directory_problem(directory: str) -> str | None:
    """Why ``directory`` cannot hold the cache, or ``None`` when it can (created if missing).

    A symbolic link to a directory is used as that directory; a link to anything else, a
    file, or a directory this process cannot write is refused.
    """
    try:
        os.makedirs(directory, exist_ok=True)
    except FileExistsError:
        return "it exists and is not a directory"
    except OSError as e:
        return f"it cannot be created ({e.strerror or e})"
    if not os.path.isdir(directory):
        return "it is not a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return "this process cannot write in it"
    return None


def file_problem(directory: str, names: Iterable[str]) -> str | None:
    """Why one of ``names`` in ``directory`` must not be opened (a symbolic link, a
    directory, a FIFO …), or ``None`` when each is a regular file or absent."""
    for name in names:
        path = os.path.join(directory, name)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError as e:
            return f"{path} cannot be inspected ({e.strerror or e})"
        if stat.S_ISLNK(mode):
            return f"{path} is a symbolic link"
        if not stat.S_ISREG(mode):
            return f"{path} is not a regular file"
    return None


def map_entry(directory: str, name: str, records: int, stamp: FileStamp,
              body_crc: int | None = None) -> Sidecar | None:
    """Memory-map the whole sidecar ``name`` kept in ``directory``.

    Returns:
        The sidecar, or ``None`` when there is none, it is not a regular file (a link is not
        followed), or it is not a valid sidecar of ``records`` records stamped ``stamp`` (and
        of body CRC ``body_crc`` when given), its body checked against its CRC once its
        header checks out: a damaged or tampered copy is a miss, fetched again.
    """
    path = os.path.join(directory, name)
    mapped = map_regular(path)
    if mapped is None:
        return None
    size = len(mapped)
    try:
        header = decode_header(mapped[: min(size, _HEAD_BYTES)], path=path)
        if header.count != records or header.stamp != stamp or (
                body_crc is not None and header.body_crc != body_crc):
            return None  # an older version (or not ours): fetched again
        sidecar = Sidecar(path, header, mapped)
        sidecar.check_offsets()
        return sidecar
    except (SidecarError, ValueError, OverflowError):
        return None


def map_regular(path: str, size: int = 0) -> mmap.mmap | None:
    """Memory-map ``path`` read-only, if it is a regular file (a link is not followed, a FIFO
    not waited on) of ``size`` bytes (any size but 0 when ``size`` is 0), else ``None``."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:  # missing, a symbolic link (ELOOP), unreadable
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size == 0 or size not in (0, info.st_size):
            return None
        return mmap.mmap(fd, info.st_size, access=mmap.ACCESS_READ)
    except (OSError, ValueError, OverflowError):
        return None
    finally:
        os.close(fd)


def remove_entry(directory: str, name: str) -> None:
    """Unlink the whole sidecar ``name`` (a link there is removed, not its target)."""
    with contextlib.suppress(OSError):  # gone already, or a directory: nothing of ours
        os.unlink(os.path.join(directory, name))
