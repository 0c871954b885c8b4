"""The keys of the cache chain: every entry is keyed by the identity of what it is a copy of.

A key is a digest of the URL of the file an entry comes from and of that file's stamp (its size
and fingerprint: ETag, generation or mtime, :class:`~ofindex.storage.FileStamp`), so an entry of
another version of the file has another key and is never found: a replaced file costs misses,
never a wrong answer. Keys are 16 bytes of SHA-256 (a collision would take 2**64 entries).
"""

from __future__ import annotations

import hashlib

from ..storage import FileStamp


def _digest(*parts: object) -> bytes:
    return hashlib.sha256("\0".join(map(str, parts)).encode("utf-8")).digest()[:16]


def sidecar_key(index_url: str, stamp: FileStamp, body_crc: int | None = None) -> bytes:
    """The key of one version of one sidecar (its pages and header are keyed below it).

    Args:
        index_url: The sidecar.
        stamp: Its data file's stamp, as the manifest (or the pinned header) gives it.
        body_crc: The body CRC the manifest names, or ``None`` (a sidecar rebuilt for a file
            of the same size and mtime is another version).

    Returns:
        16 bytes.
    """
    return _digest(index_url, stamp.size, stamp.fingerprint, body_crc)


def identity_key(url: str, stamp: FileStamp, digest: int) -> bytes:
    """The key of a remembered identity check: the data file at ``url``, as ``stamp``
    describes it, was found to have the content digest ``digest``.

    Returns:
        24 bytes (16 of digest, then ``b"identity"``).
    """
    return _digest("identity", url, stamp.size, stamp.fingerprint, digest) + b"identity"


def identity_entry(key: bytes) -> bytes:
    """What a remembered identity check holds: a digest of its key (a row holding anything
    else is damaged or tampered with, and is not taken).

    Returns:
        16 bytes.
    """
    return hashlib.sha256(b"identity checked\0" + key).digest()[:16]


def block_key(url: str, stamp: FileStamp, block_bytes: int, number: int) -> bytes:
    """The key of block ``number`` (blocks of ``block_bytes``) of the version ``stamp`` of the
    remote file ``url``: another version of the file has other keys.

    Returns:
        16 bytes.
    """
    return _digest(url, stamp.size, stamp.fingerprint, block_bytes, number)
