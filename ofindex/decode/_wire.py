"""Protobuf wire-format primitives: varints, tags, lengths, skipping fields, iterating a
message's fields. The walker of Example / SequenceExample / OFRecord (:mod:`._walk`) and the
value decoders (:mod:`._values`) are built on these.

They refuse exactly what protobuf's own parser (upb, the default backend of the ``protobuf``
package) refuses:

- a varint longer than 10 bytes (bits past the 64th are dropped, as protobuf drops them);
- a tag longer than 5 bytes or above ``2**32 - 1``, a wire type 6 or 7, field number 0 in a
  message (inside an unknown group protobuf takes field number 0 as any other);
- a length longer than 5 bytes, not below ``2**31 - 1``, or running past its message;
- an end-group tag outside a group or of another field number, a group left open;
- groups nested deeper than :data:`MAX_DEPTH` levels, counting the messages around them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ofindex.errors import DecodeError

# wire types
VARINT, I64, LEN, SGROUP, EGROUP, I32 = 0, 1, 2, 3, 4, 5

#: How deep messages and groups may nest (protobuf's default recursion limit): the top
#: message is level 0, a field's sub-message or group one level below its message.
MAX_DEPTH = 100
#: Longest encoding of a tag and of a length that protobuf reads.
MAX_TAG_BYTES = 5
MAX_LENGTH_BYTES = 5
#: Lengths from this value up are refused (protobuf's ``INT32_MAX`` bound).
LENGTH_LIMIT = 0x7FFFFFFF


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


def read_tag(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Decode the field tag at ``pos``; return (tag, next position)."""
    tag, stop = read_varint(buf, pos, end)
    if stop - pos > MAX_TAG_BYTES or tag > 0xFFFFFFFF:
        raise WireError("field tag out of range")
    return tag, stop


def read_length(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Decode the length of a length-delimited field at ``pos``; return (length, next
    position). The caller checks that the field fits in its message."""
    n = 0
    shift = 0
    while True:  # read_varint's loop, stopping at MAX_LENGTH_BYTES (a hot path: no call)
        if pos >= end:
            raise WireError("truncated length")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= 7 * MAX_LENGTH_BYTES:
            raise WireError(f"length longer than {MAX_LENGTH_BYTES} bytes")
    if n >= LENGTH_LIMIT:
        raise WireError(f"length {n} of a length-delimited field is 2**31 - 1 or more")
    return n, pos


def _skip_group(buf: bytes, pos: int, end: int, field: int, level: int) -> int:
    """Skip the fields of a group (at nesting ``level``) up to its end-group tag."""
    if level > MAX_DEPTH:
        raise WireError("groups nested too deeply")
    while True:
        b = buf[pos] if pos < end else 0x80
        if b < 0x80:
            tag = b
            pos += 1
        else:
            tag, pos = read_tag(buf, pos, end)
        if tag & 7 == EGROUP:
            if tag >> 3 != field:
                raise WireError("mismatched end-group tag")
            return pos
        pos = skip_field(buf, pos, end, tag, level)


def skip_field(buf: bytes, pos: int, end: int, tag: int, level: int = 0) -> int:
    """Skip the value of a field whose tag was just read; return the next position.

    ``level`` is the nesting level of the message (or group) holding the field.
    """
    wt = tag & 7
    if wt == VARINT:
        return read_varint(buf, pos, end)[1]
    if wt == LEN:
        n, pos = read_length(buf, pos, end)
        pos += n
    elif wt == I32:
        pos += 4
    elif wt == I64:
        pos += 8
    elif wt == SGROUP:
        return _skip_group(buf, pos, end, tag >> 3, level + 1)
    else:
        raise WireError(f"invalid wire type {wt}")
    if pos > end:
        raise WireError("field runs past the end of its message")
    return pos


def iter_fields(buf: bytes, pos: int, end: int,
                level: int = 0) -> Iterator[tuple[int, int, int, int]]:
    """Yield (field number, wire type, start, stop) for each field of a message region.

    For LEN fields start/stop delimit the payload; for others the whole value. ``level`` is
    the message's nesting level (0: the record itself), which bounds the groups inside it.
    """
    while pos < end:
        b = buf[pos]
        if b < 0x80:
            tag = b
            pos += 1
        else:
            tag, pos = read_tag(buf, pos, end)
        field = tag >> 3
        if field == 0:
            raise WireError("field number 0")
        wt = tag & 7
        if wt == LEN:
            b = buf[pos] if pos < end else 0x80
            if b < 0x80:
                n = b
                pos += 1
            else:
                n, pos = read_length(buf, pos, end)
            stop = pos + n
            if stop > end:
                raise WireError("length-delimited field runs past the end of its message")
            yield field, wt, pos, stop
            pos = stop
        else:
            start = pos
            pos = skip_field(buf, pos, end, tag, level)
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
