"""A dataset's identity: a short digest of its shards' record counts, sizes and content
digests, in order.

Resume and mixture states carry it (:mod:`ofindex.shuffle`), so that a state saved on one
dataset is refused by another that merely has the same length and seed, while a copy of the
dataset (moved, uploaded, copied without its times) keeps it. Manifests store it (the JSON
manifest's ``identity`` member, the compact manifest's header), so that it is known at open
however many shards there are; without a manifest it is computed from the sidecar headers
read at open.

The digest is the first 8 bytes, in hexadecimal, of the SHA-256 of ``b"ofindex dataset
identity 1\\0"`` followed by one 24-byte row per shard, in dataset order: uint64 record
count, uint64 data size, uint32 value, uint32 kind, little-endian; kind 1 when the value is
the data file's content digest (:mod:`ofindex.storage.identity`), 2 when the shard's index
has none (ofindex 0.2) and the value is its sidecar's body CRC, 0 when neither is known
(value 0).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

#: What the rows are hashed after (the definition's version).
PREFIX = b"ofindex dataset identity 1\0"
_ROW = np.dtype([("records", "<u8"), ("size", "<u8"), ("value", "<u4"), ("kind", "<u4")])
#: Row kinds.
UNKNOWN, CONTENT, BODY_CRC = 0, 1, 2


class IdentityHasher:
    """The identity of a dataset whose shards are added in order, a batch at a time."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256(PREFIX)

    def add(self, records: Sequence[int] | np.ndarray, sizes: Sequence[int] | np.ndarray,
            contents: Sequence[int | None] | np.ndarray,
            body_crcs: Sequence[int | None] | np.ndarray | None = None) -> None:
        """Add the next shards.

        Args:
            records: Their record counts.
            sizes: Their data sizes.
            contents: Their content digests; ``None`` or a negative number where unknown.
            body_crcs: Their sidecars' body CRCs (``None`` or negative where unknown), used
                where the content digest is unknown.
        """
        rows = np.zeros(len(records), dtype=_ROW)
        rows["records"] = np.asarray(records, dtype=np.uint64)
        rows["size"] = np.asarray(sizes, dtype=np.uint64)
        content = _known(contents, len(rows))
        crcs = _known(body_crcs, len(rows)) if body_crcs is not None else np.full(len(rows), -1)
        has_content, has_crc = content >= 0, crcs >= 0
        rows["value"] = np.where(has_content, content, np.where(has_crc, crcs, 0))
        rows["kind"] = np.where(has_content, CONTENT, np.where(has_crc, BODY_CRC, UNKNOWN))
        self._hash.update(rows.tobytes())

    def hexdigest(self) -> str:
        """The identity: 16 hexadecimal digits."""
        return self._hash.hexdigest()[:16]


def _known(values: Sequence[int | None] | np.ndarray, count: int) -> np.ndarray:
    """``values`` as int64, -1 where ``None``."""
    if isinstance(values, np.ndarray):
        return values.astype(np.int64)
    return np.fromiter((-1 if v is None else v for v in values), dtype=np.int64, count=count)


def dataset_identity(records: Sequence[int] | np.ndarray, sizes: Sequence[int] | np.ndarray,
                     contents: Sequence[int | None] | np.ndarray,
                     body_crcs: Sequence[int | None] | np.ndarray | None = None) -> str:
    """The identity of a dataset's shards (see the module's notes and
    :meth:`IdentityHasher.add`).

    Returns:
        16 hexadecimal digits.
    """
    hasher = IdentityHasher()
    hasher.add(records, sizes, contents, body_crcs)
    return hasher.hexdigest()


def joined_identity(parts: Sequence[str]) -> str:
    """The identity of datasets read one after the other (a concatenation): 16 hexadecimal
    digits of the SHA-256 of their identities joined by commas."""
    return hashlib.sha256(b"ofindex joined\0" + ",".join(parts).encode()).hexdigest()[:16]


def is_identity(value: object) -> bool:
    """Whether ``value`` is an identity as stored (16 lowercase hexadecimal digits)."""
    return (isinstance(value, str) and len(value) == 16
            and all(c in "0123456789abcdef" for c in value))
