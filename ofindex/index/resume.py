"""Resumable builds: is a data file's existing sidecar still fresh?

With ``resume`` (the default) a build skips a file whose sidecar exists and describes exactly
the file as it is now (same size and fingerprint, or same content; complete, of the format
asked for): a build that was interrupted at 90 % redoes the remaining 10 % (see
:class:`.job.FileJob`), and a dataset copied without its times is re-stamped, not rescanned.
"""

from __future__ import annotations

from ..errors import SidecarError
from ..formats.framing import RecordFormat
from ..formats.sidecar import read_current_header, restamped
from ..formats.sidecar_header import Compression, SidecarHeader
from ..storage import FileStamp, Storage
from ..storage.identity import with_content
from ..storage.stamp import Verdict
from .build_file import BuildResult


def read_header(index_storage: Storage,
                index_path: str) -> tuple[SidecarHeader, int] | None:
    """The header of the sidecar at ``index_path`` (as of its last growth segment), or ``None``
    when there is no readable one.

    Args:
        index_storage: Storage of the sidecar.
        index_path: Its path.

    Returns:
        The decoded header and the sidecar's size; ``None`` for a missing, torn, truncated or
        foreign file.
    """
    try:
        # a range request, and a stat; a version 1 sidecar shorter than this is simply rebuilt
        return read_current_header(index_storage, index_path)
    except (FileNotFoundError, SidecarError, OSError, ValueError):
        return None


def as_asked(header: SidecarHeader, fmt: RecordFormat | None, compression: Compression | None,
             checksums: bool | None, spacing: int | None) -> bool:
    """Whether an existing sidecar is what a build asks for, so that it may be kept (fresh) or
    grown with its file (:mod:`.growth`) rather than built again: complete (not partial), of
    the framing and compression asked for (any, for ``None``), with checksums when they are
    asked for, and, compressed, of the seek point spacing asked for (any, for ``None``).

    Args:
        header: The sidecar's header (as of its last growth).
        fmt: The framing asked for, or ``None``.
        compression: The compression asked for, or ``None``.
        checksums: ``True`` when payload checksums are asked for.
        spacing: The seek point spacing asked for, or ``None``.
    """
    if header.partial or (fmt is not None and header.format is not fmt):
        return False
    if compression is not None and header.compression is not compression:
        return False  # indexed as another compression than asked for: rebuild (and refuse)
    if checksums and not header.checksums:
        return False  # checksums asked for and missing
    return (spacing is None or header.compression is Compression.NONE
            or header.spacing == spacing)  # else another seek point spacing asked for


def fresh_result(
    storage: Storage, path: str, fmt: RecordFormat | None, index_storage: Storage,
    index_path: str, compression: Compression | None = None, checksums: bool | None = None,
    spacing: int | None = None,
) -> BuildResult | None:
    """What a fresh existing sidecar says of ``path``, or ``None`` when it must be (re)built.

    A sidecar is fresh when it describes the data file as it is now (the same stamp, or the
    same content: :func:`current_identity`), it indexes the whole file (not partial), and its
    format is ``fmt`` (any, for ``None``).

    Args:
        storage: Storage of the data file.
        path: The data file.
        fmt: The format asked for, or ``None`` (auto).
        index_storage: Storage of the sidecar.
        index_path: Where the sidecar is.
        compression: The compression asked for, or ``None`` (auto).
        checksums: ``True``: payload checksums are asked for (a sidecar without them is
            rebuilt); ``None`` (the default) keeps a fresh sidecar with or without them.
        spacing: The seek point spacing asked for (a compressed file indexed with another
            is rebuilt), or ``None`` (any).

    Returns:
        The :class:`BuildResult` of the existing sidecar (``skipped=True``), or ``None``.
    """
    found = read_header(index_storage, index_path)
    if found is None or not as_asked(found[0], fmt, compression, checksums, spacing):
        return None
    header, size = found
    stamp = current_identity(storage, path, header.stamp, index_storage, index_path)
    if stamp is None:
        return None
    return BuildResult(storage.url(path), index_storage.url(index_path), header.format,
                       header.count, stamp.size, fingerprint=stamp.fingerprint, skipped=True,
                       compression=header.compression,
                       uncompressed_size=header.uncompressed_size,
                       index_bytes=size, seek_points=header.seek_points,
                       body_crc=header.body_crc, content=stamp.content)


def current_identity(storage: Storage, path: str, indexed: FileStamp, index_storage: Storage,
                     index_path: str) -> FileStamp | None:
    """The data file's identity when its sidecar (stamped ``indexed``) still describes it, the
    sidecar re-stamped first where the stamp it stores is not the file's own any more; else
    ``None`` (the file must be indexed again).

    * The same fingerprint with a content digest: fresh as it is.
    * Another fingerprint (a copy without its times, an upload) but the same content: fresh,
      and the sidecar re-stamped with the file's fingerprint, so that later opens take the
      fast path (only its header changes).
    * The same fingerprint, no digest (ofindex 0.2's sidecars): the digest is added.
    * Anything else (another size or content; an old sidecar of another fingerprint, whose
      content cannot be told): ``None``.

    Args:
        storage: Storage of the data file.
        path: The data file.
        indexed: The stamp its sidecar stores.
        index_storage: Storage of the sidecar.
        index_path: Where the sidecar is.

    Returns:
        The stamp (with its content digest) the sidecar now stores, or ``None``.
    """
    current = storage.stamp(path)
    verdict, _ = indexed.judge(current)
    if verdict is Verdict.CHANGED:
        return None
    if verdict is Verdict.SAME and indexed.content is not None:
        return indexed
    if verdict is Verdict.SAME and indexed.fingerprint != current.fingerprint:
        return None  # an old sidecar of another fingerprint: no content to compare with
    stamp = with_content(storage, path, current)
    if indexed.content is not None and indexed.content_differs(stamp.content or 0):
        return None
    index_url = index_storage.url(index_path)
    try:
        raw = restamped(index_storage.read_all(index_path), stamp, path=index_url)
    except (OSError, SidecarError):
        return None  # unreadable after all: indexed again
    index_storage.write_atomic(index_path, [raw])
    return stamp
