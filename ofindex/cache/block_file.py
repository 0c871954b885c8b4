"""One block of a remote data file kept by the data cache: ``cache_dir/<32 hex>.ofblock``.

The layout (little-endian), specified in ``docs/format.md``::

    magic      8 bytes   b"OFIXBLK1"
    key       16 bytes   the block's key: what it is a copy of (see block_key)
    length     8 bytes   payload bytes
    data_crc   4 bytes   CRC32C of the payload
    head_crc   4 bytes   CRC32C of the 36 bytes above
    payload    length bytes

A file is written under a temporary name and renamed into place, so a name holds a whole
block or nothing, whatever process is killed when. A file is used only if it is a regular file
(never through a symbolic link) of exactly ``40 + length`` bytes whose header checks out and
names the key asked for; the payload's CRC is checked too when the caller asks (reads whose
records carry no CRC of their own). Anything else is a miss, fetched again.
"""

from __future__ import annotations

import os
import re
import stat
import struct

import crc32c

from .dir_files import map_regular

MAGIC = b"OFIXBLK1"
_HEAD = struct.Struct("<8s16sQI")
#: Bytes before the payload.
HEADER_SIZE = _HEAD.size + 4


def header(key: bytes, data: bytes | memoryview) -> bytes:
    """The 40-byte header of the block ``key`` holding ``data``."""
    head = _HEAD.pack(MAGIC, key, len(data), crc32c.crc32c(data))
    return head + struct.pack("<I", crc32c.crc32c(head))


def map_block(directory: str, name: str, key: bytes, length: int,
              check_data: bool) -> memoryview | None:
    """The payload of the block file ``name`` in ``directory``, memory-mapped.

    Args:
        directory: The cache directory.
        name: The file's name (derived from ``key``).
        key: The key it must hold.
        length: The payload bytes it must hold.
        check_data: Check the payload against its CRC32C too.

    Returns:
        A read-only view of the payload, or ``None`` when there is no such valid block (a
        missing file, a link, another kind of file, a short or long one, a damaged header or
        payload, another key).
    """
    mapped = None if length == 0 else map_regular(os.path.join(directory, name),
                                                  HEADER_SIZE + length)
    if mapped is None:
        return None
    head = mapped[:HEADER_SIZE]
    magic, stored_key, stored_length, data_crc = _HEAD.unpack_from(head)
    (head_crc,) = struct.unpack_from("<I", head, _HEAD.size)
    if (magic != MAGIC or stored_key != key or stored_length != length
            or head_crc != crc32c.crc32c(head[: _HEAD.size])):
        return None
    view = memoryview(mapped)[HEADER_SIZE:]
    if check_data and crc32c.crc32c(view) != data_crc:
        return None
    return view


_TEMPORARY = re.compile(r"[0-9a-f]{32}\.ofblock\.[A-Za-z0-9_]+\.tmp")
#: A temporary block file older than this (seconds) was left by a writer that was killed.
STALE_TEMPORARY = 3600.0


#: The file whose modification time says when the directory was last swept.
SWEPT_MARKER = "ofindex-data.swept"


def sweep_temporaries(directory: str, now: float) -> int:
    """Remove the temporary block files writers killed mid-write left in ``directory`` (names
    of the cache's own pattern, regular files, older than :data:`STALE_TEMPORARY`), at most
    once per :data:`STALE_TEMPORARY` (a directory of a million blocks takes a second to
    list): :data:`SWEPT_MARKER`'s time says when it was last done.

    Returns:
        How many were removed.
    """
    marker = os.path.join(directory, SWEPT_MARKER)
    try:
        info = os.lstat(marker)
        if stat.S_ISREG(info.st_mode) and now - info.st_mtime < STALE_TEMPORARY:
            return 0
    except FileNotFoundError:
        pass
    except OSError:
        return 0
    removed = 0
    try:
        entries = os.scandir(directory)
    except OSError:
        return 0
    with entries:
        for entry in entries:
            if not _TEMPORARY.fullmatch(entry.name):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and now - info.st_mtime > STALE_TEMPORARY:
                    os.unlink(entry.path)
                    removed += 1
            except OSError:
                continue
    try:  # a link there is not followed (ELOOP): the directory is swept again next time
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError:
        return removed
    try:
        os.utime(fd, (now, now))
    except OSError:
        pass
    finally:
        os.close(fd)
    return removed
