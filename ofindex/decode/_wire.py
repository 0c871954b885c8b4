"""Protobuf wire-format primitives: varints, tags, skipping fields, iterating a message's
fields. The walker of Example / SequenceExample / OFRecord (:mod:`._walk`) and the value
decoders (:mod:`._values`) are built on these.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ofindex.errors import DecodeError

# wire types
VARINT, I64, LEN, SGROUP, EGROUP, I32 = 0, 1, 2, 3, 4, 5


class WireError(Exception):
    """Internal: malformed wire data (converted to DecodeError by the callers)."""


def read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Decode the varint at ``pos``; return (value as unsigned 64-bit, next position)."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise WireError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than 10 bytes")


def _skip_group(buf: bytes, pos: int, end: int, field: int, depth: int) -> int:
    if depth > 100:
        raise WireError("groups nested too deeply")
    while True:
        tag, pos = read_varint(buf, pos, end)
        if tag > 0xFFFFFFFF or tag >> 3 == 0:
            raise WireError("bad field tag in a group")
        wt = tag & 7
        if wt == EGROUP:
            if tag >> 3 != field:
                raise WireError("mismatched end-group tag")
            return pos
        pos = skip_field(buf, pos, end, tag, depth + 1)


def skip_field(buf: bytes, pos: int, end: int, tag: int, depth: int = 0) -> int:
    """Skip the value of a field whose tag was just read; return the next position."""
    wt = tag & 7
    if wt == VARINT:
        return read_varint(buf, pos, end)[1]
    if wt == LEN:
        n, pos = read_varint(buf, pos, end)
        pos += n
    elif wt == I32:
        pos += 4
    elif wt == I64:
        pos += 8
    elif wt == SGROUP:
        return _skip_group(buf, pos, end, tag >> 3, depth)
    else:
        raise WireError(f"invalid wire type {wt}")
    if pos > end:
        raise WireError("field runs past the end of its message")
    return pos


def iter_fields(buf: bytes, pos: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """Yield (field number, wire type, start, stop) for each field of a message region.

    For LEN fields start/stop delimit the payload; for others the whole value.
    """
    while pos < end:
        b = buf[pos]
        if b < 0x80:
            tag = b
            pos += 1
        else:
            tag, pos = read_varint(buf, pos, end)
            if tag > 0xFFFFFFFF:
                raise WireError("field tag out of range")
        field = tag >> 3
        if field == 0:
            raise WireError("field number 0")
        wt = tag & 7
        if wt == LEN:
            b = buf[pos] if pos < end else 0x80
            if b < 0x80 and pos < end:
                n = b
                pos += 1
            else:
                n, pos = read_varint(buf, pos, end)
            stop = pos + n
            if stop > end:
                raise WireError("length-delimited field runs past the end of its message")
            yield field, wt, pos, stop
            pos = stop
        else:
            start = pos
            pos = skip_field(buf, pos, end, tag)
            yield field, wt, start, pos
    if pos != end:
        raise WireError("message runs past its end")


def as_bytes(data: Any) -> bytes:
    """Accept bytes, bytearray, memoryview or numpy bytes; return bytes."""
    if type(data) is bytes:
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    try:
        return bytes(data)
    except Exception:
        raise DecodeError(
            f"expected the serialized record as bytes, got {type(data).__name__}"
        ) from None
