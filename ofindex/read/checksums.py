"""The sidecar's per-record checksums, checked on read: OFRecord's only integrity check.

OFRecord frames a payload with its length and nothing else, so a payload changed in place
(same size) reads back as data. A sidecar built with ``checksums=True`` (the default of
:class:`ofindex.Writer` for OFRecord, ``ofindex build --checksums``) holds the CRC32C of every
payload; reads with ``verify=True`` compare them as TFRecord's own CRCs are compared.
TFRecord payloads are not checked against the sidecar too: their framing CRC covers them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import crc32c as _crc32c
import numpy as np

from ..errors import CorruptRecordError
from ..formats.framing import RecordFormat
from ..formats.sidecar import Sidecar


def sidecar_sums(sidecar: Sidecar, verify: bool) -> np.ndarray | None:
    """The checksums to check reads of ``sidecar``'s records against, or ``None``."""
    if not verify or sidecar.format is not RecordFormat.OFRECORD:
        return None
    return sidecar.checksums


def checksum_error(stored: int, computed: int, *, path: str, offset: int,
                   record: int) -> CorruptRecordError:
    """The error for a payload whose CRC32C is not the one its sidecar holds."""
    return CorruptRecordError(
        f"{path}: record {record} at byte offset {offset}: payload CRC32C mismatch (the "
        f"sidecar stores 0x{stored:08x}, the data gives 0x{computed:08x}); the data file is "
        "corrupt or changed after indexing — re-copy it (or rebuild the index with `ofindex "
        "build --checksums` if the data is right), or read with verify=False to skip the check",
        path=path, offset=offset, record=record, stored_crc=stored, computed_crc=computed,
    )


def check_one(payload: bytes, stored: int, *, path: str, offset: int, record: int) -> None:
    """Raise :func:`checksum_error` unless ``payload``'s CRC32C is ``stored``."""
    computed = _crc32c.crc32c(payload)
    if computed != stored:
        raise checksum_error(stored, computed, path=path, offset=offset, record=record)


def record_namer(url: str, starts: np.ndarray,
                 first: int) -> Callable[[int], tuple[str, int, int]]:
    """Name payload ``k`` of a run (for errors): its file, byte offset and record number."""
    return lambda k: (url, int(starts[k]), first + k)


def record_naming(url: str, offsets: np.ndarray,
                  records: np.ndarray) -> Callable[[int], tuple[str, int, int]]:
    """Name payload ``k`` of records ``records`` (numbers inside one shard whose sidecar
    offsets are ``offsets``), for errors: its file, byte offset and record number."""
    return lambda k: (url, int(offsets[records[k]]), int(records[k]))


def check_many(payloads: Sequence[bytes], stored: np.ndarray,
               where: Callable[[int], tuple[str, int, int]]) -> None:
    """Check payloads against their stored CRC32C (``uint32``, one each).

    Args:
        payloads: The payloads read.
        stored: Their checksums from the sidecar.
        where: ``where(k)`` gives ``(path, byte offset, record number)`` of payload ``k``, for
            the error.

    Raises:
        CorruptRecordError: The first payload whose CRC32C differs.
    """
    computed = np.fromiter(map(_crc32c.crc32c, payloads), dtype=np.uint32, count=len(payloads))
    if not np.array_equal(computed, stored):
        k = int(np.argmax(computed != stored))
        path, offset, record = where(k)
        raise checksum_error(int(stored[k]), int(computed[k]), path=path, offset=offset,
                             record=record)
