"""Protocol-buffer wire pieces for encoding: tags, varints (one or many at once) and
length-delimited fields.

Only what ``tf.train.Example``, ``SequenceExample`` and OneFlow's ``OFRecord`` need: every
field they hold is either length-delimited (wire type 2: messages, bytes, packed lists) or a
varint or fixed-width value inside a packed list.
"""

from __future__ import annotations

import numpy as np

#: Wire type of length-delimited fields (messages, bytes, packed repeated scalars).
LEN = 2
_U64 = np.uint64
#: ``1 << 7k`` for k = 1..9: a value at or above the k-th needs more than k bytes.
_BOUNDS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=_U64)


def tag(field: int) -> bytes:
    """The key of a length-delimited field (``field`` below 16: one byte)."""
    return bytes([(field << 3) | LEN])


def varint(value: int) -> bytes:
    """One unsigned varint (``value`` >= 0, below 2**64)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def delimited(field: int, payload: bytes) -> bytes:
    """A length-delimited field: key, length, payload."""
    return tag(field) + varint(len(payload)) + payload


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes each unsigned varint of ``values`` (uint64) takes: an int64 array."""
    sizes = np.ones(values.shape, dtype=np.int64)
    if values.size and int(values.max()) >= 0x80:
        for bound in _BOUNDS:
            sizes += values >= bound
    return sizes


def varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Encode many unsigned varints at once, back to back.

    Args:
        values: A 1-D uint64 array (a signed int64 viewed as uint64 gives protobuf's
            10-byte form of negative numbers).

    Returns:
        ``(encoded, sizes)``: the varints back to back as a uint8 array, and the bytes each
        took (int64).
    """
    flat = np.ascontiguousarray(values, dtype=_U64).reshape(-1)
    sizes = varint_sizes(flat)
    if flat.size == 0 or int(sizes.max()) == 1:
        return flat.astype(np.uint8), sizes
    ends = np.cumsum(sizes)
    starts = ends - sizes
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    rest = flat
    for j in range(int(sizes.max())):
        longer = sizes > j
        more = (sizes > j + 1).astype(np.uint8) << np.uint8(7)
        low = (rest & _U64(0x7F)).astype(np.uint8)
        out[(starts + j)[longer]] = (low | more)[longer]
        rest = rest >> _U64(7)
    return out, sizes
