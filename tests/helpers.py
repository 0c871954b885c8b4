"""Helpers shared by the core tests (framing written independently of ofindex.formats.framing)."""

from __future__ import annotations

import contextlib
import os
import struct

import crc32c


def ref_masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC32C, written from the format description, not from ofindex."""
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def ref_tfrecord(records: list[bytes]) -> bytes:
    out = bytearray()
    for r in records:
        n = struct.pack("<Q", len(r))
        out += n + struct.pack("<I", ref_masked_crc(n)) + r + struct.pack("<I", ref_masked_crc(r))
    return bytes(out)


def ref_ofrecord(records: list[bytes]) -> bytes:
    return b"".join(struct.pack("<q", len(r)) + r for r in records)


def ref_offsets(records: list[bytes], overhead: int) -> list[int]:
    out, pos = [], 0
    for r in records:
        out.append(pos)
        pos += len(r) + overhead
    return out


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write_raw(path: str, data: bytes) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return path


def split(records: list[bytes], sizes: list[int]) -> list[list[bytes]]:
    """Cut ``records`` into consecutive shards of the given sizes (the rest goes last)."""
    out, pos = [], 0
    for s in sizes:
        out.append(records[pos : pos + s])
        pos += s
    out.append(records[pos:])
    return out


IMPLEMENTATIONS = ("compiled", "pure-python")


@contextlib.contextmanager
def implementation(name: str):
    """Run the block on the compiled loops (which must have been built) or the pure-Python
    ones, then restore whatever ran before."""
    from ofindex import _accel

    saved = _accel.native
    if name == "compiled":
        assert saved is not None, (
            "ofindex._native was not built: install a C compiler and the Python headers, then "
            "reinstall (pip install -e .)")
    else:
        _accel.native = None
    try:
        yield
    finally:
        _accel.native = saved
