"""Local destinations that are not files of ours to replace: a character device (``/dev/full``,
a terminal), a FIFO, an open descriptor of this process (``/dev/stdout``, ``/dev/fd/N``,
``/proc/self/fd/N``) and symbolic links to them are written in place, never replaced by a
temporary file and a rename (which put a regular file where the device node or the link was:
``export-index -o /dev/full`` as root replaced the device). A descriptor of this process is
written through that descriptor, at its position (``>> log`` appends). A block device is
refused: nothing we write belongs on a disk's raw blocks.
"""

from __future__ import annotations

import errno
import os
import re
import stat

from ..errors import StorageError

#: Symbolic links followed at most (the kernel's own limit is 40).
_MAX_LINKS = 40
#: The directories of a process's open descriptors (Linux ``/proc``, BSD and macOS ``/dev/fd``).
_DESCRIPTORS = re.compile(r"/proc/(\d+)(?:/task/\d+)?/fd|/dev/fd")


def descriptor_of(path: str) -> int | None:
    """The descriptor of this process that ``path`` names, through its symbolic links
    (``/dev/stdout`` → ``/proc/self/fd/1``: 1), or ``None``.

    Args:
        path: A local path.

    Returns:
        The descriptor number, or ``None``.
    """
    current = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        found = _DESCRIPTORS.fullmatch(os.path.realpath(os.path.dirname(current)))
        name = os.path.basename(current)
        if found is not None and name.isdigit() \
                and found.group(1) in (None, str(os.getpid())):
            return int(name)
        if not os.path.islink(current):
            return None
        current = os.path.join(os.path.dirname(current), os.readlink(current))
    return None


def is_special(path: str) -> bool:
    """Whether ``path`` is written in place (see the module): a descriptor of this process,
    or an existing file that is not a regular file or a directory (followed through links).

    Args:
        path: A local path.

    Returns:
        True to write it in place with :func:`write_in_place`.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:  # missing (or a dangling link): a new file, written atomically
        return False
    if stat.S_ISDIR(mode):
        return False
    return not stat.S_ISREG(mode) or (os.path.islink(path) and descriptor_of(path) is not None)


def write_in_place(path: str, parts: list[bytes | memoryview]) -> None:
    """Write ``parts`` to the special file ``path`` (see :func:`is_special`) in place.

    Args:
        path: The destination.
        parts: Byte strings written one after another.

    Raises:
        StorageError: The destination is a block device, or refused the bytes (``/dev/full``:
            no space left), naming it.
        BrokenPipeError: Its reader went away (a pipe closed early: nothing to report).
    """
    descriptor = descriptor_of(path)
    if descriptor is not None:
        _write_all(descriptor, parts, path)
        return
    if stat.S_ISBLK(os.stat(path).st_mode):
        raise StorageError(f"{path}: is a block device; refusing to write over its blocks: "
                           "name a file")
    try:
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:  # a socket (ENXIO), no permission …
        raise _failed(path, exc) from exc
    try:
        _write_all(fd, parts, path)
    finally:
        os.close(fd)


def _write_all(fd: int, parts: list[bytes | memoryview], path: str) -> None:
    """Every byte of ``parts`` to ``fd`` (a write may take fewer bytes than given)."""
    try:
        for part in parts:
            view = memoryview(part).cast("B")
            while len(view):
                view = view[os.write(fd, view):]
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise _failed(path, exc) from exc


def _failed(path: str, exc: OSError) -> StorageError:
    """The error for a special file that refused to be written."""
    name = errno.errorcode.get(exc.errno or 0, "")
    why = f"{exc.strerror or exc}" + (f" ({name})" if name else "")
    return StorageError(f"{path}: cannot write there: {why}; what it took may be "
                        "incomplete: write to another file")
