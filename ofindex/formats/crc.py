"""TFRecord's masked CRC32C, and the masked CRCs of many length fields at once.

Every CRC32C comes from the ``crc32c`` package; this module adds TFRecord's mask and lookup
tables that check thousands of 8-byte length fields with a few numpy operations.
"""

from __future__ import annotations

import struct

import crc32c as _crc32c
import numpy as np

MASK_DELTA = 0xA282EAD8
U32 = 0xFFFFFFFF
_LEN = struct.Struct("<Q")


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """Return the plain CRC32C (Castagnoli) of ``data``."""
    return _crc32c.crc32c(data)


def mask_crc(crc: int) -> int:
    """Apply TFRecord's CRC mask: rotate right by 15 bits and add a constant, mod 2**32."""
    return ((((crc >> 15) | (crc << 17)) & U32) + MASK_DELTA) & U32


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """Return the masked CRC32C TFRecord stores for ``data``."""
    return mask_crc(_crc32c.crc32c(data))


def _length_crc_tables() -> tuple[np.ndarray, int]:
    """Tables that give the masked CRC32C of any 8-byte length field with numpy lookups.

    CRC32C of a fixed-size input is affine over GF(2): crc(x) = crc(0) ^ sum_k T_k[x_k], where
    T_k[v] = crc(v placed at byte k) ^ crc(0). Built from the crc32c library, checked in tests.
    """
    zero = _crc32c.crc32c(bytes(8))
    tables = np.empty((8, 256), dtype=np.uint32)
    for k in range(8):
        buf = bytearray(8)
        for v in range(256):
            buf[k] = v
            tables[k, v] = _crc32c.crc32c(buf) ^ zero
        buf[k] = 0
    return tables, zero


_TABLES, _ZERO_CRC = _length_crc_tables()


def masked_length_crcs(header_bytes: np.ndarray, nbytes: int = 8) -> np.ndarray:
    """Masked CRC32C of many 8-byte length fields at once (``uint8[n, 8]`` -> ``uint32[n]``).

    Args:
        header_bytes: One little-endian length field per row.
        nbytes: How many low bytes can be non-zero (the others contribute nothing, as
            ``T_k[0] == 0``), e.g. 3 when every length is below 2**24.

    Returns:
        The masked CRCs, ``uint32``.
    """
    crc = np.full(header_bytes.shape[0], _ZERO_CRC, dtype=np.uint32)
    for k in range(nbytes):
        crc ^= _TABLES[k][header_bytes[:, k]]
    rot = (crc >> np.uint32(15)) | (crc << np.uint32(17))
    masked: np.ndarray = rot + np.uint32(MASK_DELTA)
    return masked


def unmask_crcs(masked: np.ndarray) -> np.ndarray:
    """Invert :func:`mask_crc` for a ``uint32`` array: the plain CRC32C values."""
    rot = masked - np.uint32(MASK_DELTA)
    plain: np.ndarray = (rot << np.uint32(15)) | (rot >> np.uint32(17))
    return plain


#: Masked CRCs of length fields already computed (datasets repeat lengths a lot); the compiled
#: loops read it too.
LENGTH_CRCS: dict[int, int] = {}


def length_crc(length: int) -> int:
    """Return the masked CRC32C of a TFRecord length field (memoised in :data:`LENGTH_CRCS`)."""
    value = LENGTH_CRCS.get(length)
    if value is not None:
        return value
    value = masked_crc32c(_LEN.pack(length))
    if len(LENGTH_CRCS) < 65536:
        LENGTH_CRCS[length] = value
    return value
