"""Resumable builds: is a data file's existing sidecar still fresh?

With ``resume`` (the default) a build skips a file whose sidecar exists and describes exactly
the file as it is now (same size and fingerprint, complete, of the format asked for): a build
that was interrupted at 90 % redoes the remaining 10 % (see :class:`.job.FileJob`).
"""

from __future__ import annotations

from ..errors import SidecarError
from ..formats.framing import RecordFormat
from ..formats.sidecar_header import (
    HEADER_SIZE,
    Compression,
    SidecarHeader,
    decode_header,
    layout_of,
)
from ..storage import Storage
from .build_file import BuildResult


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
    index_path: str, compression: Compression | None = None, checksums: bool | None = None,
    spacing: int | None = None,
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
        compression: The compression asked for, or ``None`` (auto).
        checksums: ``True``: payload checksums are asked for (a sidecar without them is
            rebuilt); ``None`` (the default) keeps a fresh sidecar with or without them.
        spacing: The seek point spacing asked for (a compressed file indexed with another
            is rebuilt), or ``None`` (any).

    Returns:
        The :class:`BuildResult` of the existing sidecar (``skipped=True``), or ``None``.
    """
    header = read_header(index_storage, index_path)
    if header is None or header.partial or (fmt is not None and header.format is not fmt):
        return None
    if compression is not None and header.compression is not compression:
        return None  # indexed as another compression than asked for: rebuild (and refuse)
    if checksums and not header.checksums:
        return None  # checksums asked for and missing
    if (spacing is not None and header.compression is not Compression.NONE
            and header.spacing != spacing):
        return None  # another seek point spacing asked for
    stamp = storage.stamp(path)
    if header.stamp != stamp:
        return None
    return BuildResult(storage.url(path), index_storage.url(index_path), header.format,
                       header.count, stamp.size, fingerprint=stamp.fingerprint, skipped=True,
                       compression=header.compression,
                       uncompressed_size=header.uncompressed_size,
                       index_bytes=layout_of(header).end, seek_points=header.seek_points,
                       body_crc=header.body_crc)
