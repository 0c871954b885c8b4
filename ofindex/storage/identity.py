"""A data file's identity: its size and a digest of its content, which every copy shares.

A stamp's fingerprint (``mtime_ns`` locally, an ETag or generation in a bucket) is cheap to
read but belongs to one copy of a file: ``cp`` without ``-p`` gives a new modification time,
an upload a new ETag, and a file replaced by another of the same size may keep neither apart
from the original. So a sidecar also stores the file's *content digest*: the CRC32C of the
file's size followed by three small regions of its bytes (:func:`.stamp.content_regions`:
the first and last 4 KiB and the 4 KiB in the middle; the whole file up to 12 KiB). The
fingerprint stays the fast path: where it agrees with the index, nothing is read; where it does
not (a
copy, an upload, a ``touch``, a replacement), the regions are read and the digest decides
(:func:`check_identity`). A copy stays valid wherever it is; a replacement is refused
wherever the index was built.

What it costs, per data file, on first contact with a copy whose fingerprint differs from the
index's: three ranged reads of 4 KiB (12 KiB at most); over HTTP they ride in the round that
fetches the index (:mod:`ofindex.read.remote.index_round`), so no round trip is added. Nothing is
read when the fingerprint agrees, nor again in the same dataset (any process: the check is
remembered with the storage's :class:`~.stamp.ExpectedFiles`).
"""

from __future__ import annotations

import warnings

from ..errors import NotAppendedError, UnverifiedIndexWarning, hint
from .base import Storage
from .stamp import FileStamp, Verdict, read_digest, stale_index


def read_content_digest(storage: Storage, path: str, size: int) -> int:
    """Read the regions of ``path`` (``size`` bytes) and return its content digest.

    Args:
        storage: Where the file is.
        path: The file.
        size: Its size now (from its stamp).

    Returns:
        The digest.

    Raises:
        RangeReadError: The file is shorter than ``size`` (it changed while read).
        DataFileNotFoundError: It is gone.
    """
    return read_digest(storage.read_ranges, path, size)


def with_content(storage: Storage, path: str, stamp: FileStamp | None = None,
                 digest: int | None = None) -> FileStamp:
    """The stamp of ``path`` with its content digest: what a sidecar stores of its data file.

    Args:
        storage: Where the file is.
        path: The file.
        stamp: Its stamp as already read (``None``: read it now).
        digest: Its content digest when already known (a scan that streamed it), else read.

    Returns:
        The stamp, its :attr:`~.stamp.FileStamp.content` filled in.
    """
    stamp = storage.stamp(path) if stamp is None else stamp
    if digest is None:
        digest = read_content_digest(storage, path, stamp.size)
    return FileStamp(stamp.size, stamp.fingerprint, stamp.file_id, digest)


def warn_unverified(url: str, index_url: str) -> None:
    """Warn (once per place in the code, as Python does) that ``url`` was checked by size
    only against ``index_url``."""
    warnings.warn(UnverifiedIndexWarning(
        f"{url}: checked against {index_url} by its size only: that index was written by "
        "ofindex 0.2 and has no content digest, so a file replaced by another of the same "
        "size would not be noticed; run `ofindex build` on the dataset where it was indexed "
        "(it adds the digest without reading the records again) and copy the index again"),
        stacklevel=3)


def check_identity(storage: Storage, path: str, indexed: FileStamp, current: FileStamp,
                   index_url: str, digest: int | None = None) -> None:
    """Refuse a data file that is not the one its index describes; the one decision every
    read path makes (the stamps first: :meth:`FileStamp.judge`, then the content when they
    cannot tell), then remember the file as checked (:meth:`Storage.expect`).

    Args:
        storage: Where the file is.
        path: The file.
        indexed: The stamp its index gives (with the content digest when it stores one).
        current: The stamp the file has now.
        index_url: The index, as messages name it.
        digest: The file's content digest when it was read already (fetched in the same round
            as its stamp), else ``None``: read now if needed.

    Raises:
        StaleIndexError: Another size, another content, or (an index without a digest) another
            fingerprint of the same kind; naming the file, the index and the command that
            rebuilds it. A storage whose files may grow (:attr:`ExpectedFiles.growing`)
            takes a longer file whose first bytes are the ones indexed as the file indexed
            (:class:`NotAppendedError` otherwise).
    """
    verdict, why = indexed.judge(current)
    if storage.expected.growing and current.size != indexed.size:
        grown_or_refused(storage, path, indexed, current, index_url)
        storage.expect(path, current)
        return
    if verdict is Verdict.SAME and indexed.content is None and indexed.kind != current.kind:
        warn_unverified(storage.url(path), index_url)
    if verdict is Verdict.CONTENT and not storage.expected.verified(path, current):
        if digest is None:
            digest = read_content_digest(storage, path, current.size)
        changed = indexed.content_differs(digest)
        if changed:
            verdict, why = Verdict.CHANGED, changed
    if verdict is Verdict.CHANGED:
        raise stale_index(index_url, storage.url(path), why)
    storage.expect(path, current)


def not_appended(storage: Storage, path: str, indexed: FileStamp,
                 current: FileStamp) -> str | None:
    """Say why ``path`` (now ``current``) is not the file ``indexed`` describes with bytes
    appended, or ``None`` when it is: longer, and its first ``indexed.size`` bytes have the
    content digest the index stores (read now: three regions of 4 KiB at most).

    Args:
        storage: Where the file is.
        path: The file.
        indexed: The stamp its index gives (with its content digest).
        current: The stamp it has now.

    Returns:
        ``None`` for a file that grew by appending; else a phrase (it shrank, is as long, or
        its first bytes changed: another file; or the index has no digest to tell).
    """
    if current.size < indexed.size:
        return f"it shrank from {indexed.size} to {current.size} bytes (truncated or replaced)"
    if current.size == indexed.size:
        return f"it did not grow ({current.size} bytes)"
    if indexed.content is None:
        return ("its index has no content digest to tell whether its first "
                f"{indexed.size} bytes are the ones indexed")
    digest = read_digest(storage.read_ranges, path, indexed.size)
    if digest != indexed.content:
        return (f"its first {indexed.size} bytes are not the ones indexed (content digest "
                f"0x{digest:08x}, indexed 0x{indexed.content:08x}): it was replaced, not "
                "appended to")
    return None


def grown_or_refused(storage: Storage, path: str, indexed: FileStamp, current: FileStamp,
                     index_url: str) -> None:
    """Refuse a file read as growing that is not ``indexed`` with bytes appended (see
    :func:`not_appended`).

    Args:
        storage: Where the file is.
        path: The file.
        indexed: The stamp its index (or the last refresh) gives.
        current: The stamp it has now.
        index_url: The index, as messages name it.

    Raises:
        NotAppendedError: It shrank, or its first bytes changed (naming what to do).
    """
    why = not_appended(storage, path, indexed, current)
    if why is not None:
        raise not_appended_error(storage.url(path), index_url, why)


def not_appended_error(url: str, index_url: str, why: str) -> NotAppendedError:
    """The error for a file read as growing that changed otherwise.

    Args:
        url: The data file.
        index_url: Its index.
        why: What happened to it (:func:`not_appended`).
    """
    return NotAppendedError(
        f"{url}: read as a growing file, but {why}; the records read so far may not be in it "
        f"any more: reopen the dataset (its index {index_url} is rebuilt by "
        + hint(f"ofindex.build_index({url!r}))", f"`ofindex build {url}`)"))
