"""One build task: index a data file unless its sidecar is already fresh (resumable builds).

:func:`index_file` is what a build runs for each file, on a local thread or on a cluster
worker (``build_index(..., executor=...)``): a plain top-level function whose arguments
(storages, paths, flags) pickle, and whose result (:class:`BuildResult`) is small. With
``resume`` (the default) a file whose sidecar exists and describes exactly the file as it is
now (same size and fingerprint, complete, of the format asked for) is skipped: a build that
was interrupted at 90 % redoes the remaining 10 %.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import SidecarError
from ..formats.framing import RecordFormat
from ..formats.sidecar_header import HEADER_SIZE, SidecarHeader, decode_header
from ..storage import Storage
from .build_file import BuildResult, build_file


def read_header(index_storage: Storage, index_path: str) -> SidecarHeader | None:
    """The header of the sidecar at ``index_path``, or ``None`` when there is no readable one.

    Args:
        index_storage: Storage of the sidecar.
        index_path: Its path.

    Returns:
        The decoded header; ``None`` for a missing, torn, truncated or foreign file.
    """
    try:
        # one range request; a version 1 sidecar shorter than this is simply rebuilt
        head = index_storage.read(index_path, 0, HEADER_SIZE)
        return decode_header(head, path=index_storage.url(index_path))
    except (FileNotFoundError, SidecarError, OSError, ValueError):
        return None


def fresh_result(
    storage: Storage, path: str, fmt: RecordFormat | None, index_storage: Storage,
    index_path: str,
) -> BuildResult | None:
    """What a fresh existing sidecar says of ``path``, or ``None`` when it must be (re)built.

    A sidecar is fresh when its stamp equals the data file's current stamp exactly, it
    indexes the whole file (not partial), and its format is ``fmt`` (any, for ``None``).

    Args:
        storage: Storage of the data file.
        path: The data file.
        fmt: The format asked for, or ``None`` (auto).
        index_storage: Storage of the sidecar.
        index_path: Where the sidecar is.

    Returns:
        The :class:`BuildResult` of the existing sidecar (``skipped=True``), or ``None``.
    """
    header = read_header(index_storage, index_path)
    if header is None or header.partial or (fmt is not None and header.format is not fmt):
        return None
    stamp = storage.stamp(path)
    if header.stamp != stamp:
        return None
    return BuildResult(storage.url(path), index_storage.url(index_path), header.format,
                       header.count, stamp.size, fingerprint=stamp.fingerprint, skipped=True)


def index_file(
    storage: Storage, path: str, fmt: RecordFormat | None, index_storage: Storage,
    index_path: str, verify: bool, allow_partial: bool, resume: bool = True,
    progress: Callable[[int], None] | None = None,
) -> BuildResult:
    """Index one data file where this runs (a thread or a cluster worker).

    Args:
        storage: Storage of the data file.
        path: The data file.
        fmt: Its framing, or ``None`` to detect it.
        index_storage: Storage of the sidecar.
        index_path: Where the sidecar goes.
        verify: Also check every payload CRC (a verifying build re-reads every file: it does
            not resume).
        allow_partial: Index the valid prefix of a damaged file instead of failing.
        resume: Skip the file when its sidecar is fresh (see :func:`fresh_result`).
        progress: Called with the number of bytes scanned (or skipped), now and then.

    Returns:
        What was indexed, or what the fresh sidecar holds (``skipped=True``).

    Raises:
        CorruptRecordError, StaleIndexError, FormatDetectionError: As
            :func:`~ofindex.index.build_file.build_file`.
    """
    if resume and not verify:
        done = fresh_result(storage, path, fmt, index_storage, index_path)
        if done is not None:
            if progress is not None:
                progress(done.size)
            return done
    return build_file(storage, path, fmt, index_storage, index_path, verify, allow_partial,
                      progress=progress)
