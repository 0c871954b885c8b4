"""Shards written with ``ofindex.Writer`` and damaged one way at a time (a data byte, a shifted
offset, a checksum, a truncation), for the tests that hold two read paths to the same answers,
errors included, on the same bad files."""

from __future__ import annotations

import os
import struct

import ofindex
from ofindex.formats.sidecar_header import HEADER_SIZE
from tests.kit.helpers import (
    cached_index_dir_of,
    read_bytes,
    reseal_sidecar,
    sidecar_of,
    write_raw,
)


def spelled_anywhere(text: str, here: str) -> str:
    """``text`` with the directory ``here`` and its index directory in the per-user index
    cache (where a file written on its own is indexed) spelled ``D`` and ``I``: each way reads
    its own copy."""
    return text.replace(cached_index_dir_of(here), "I").replace(here, "D")


def write_parts(directory, shards: list[list[bytes]], fmt: str, checksums: bool) -> list[str]:
    """Write each list of records as ``<directory>/part-<k>`` in ``fmt``; return the paths."""
    paths = []
    for k, records in enumerate(shards):
        p = os.path.join(directory, f"part-{k}")
        with ofindex.Writer(p, fmt, checksums=checksums) as w:
            w.write_many(records)
        paths.append(p)
    return paths


def rewrite_in_place(path: str, data: bytes) -> None:
    """Change a file's bytes in place, keeping its size, inode and mtime (only the records'
    own checks can tell)."""
    st_ = os.stat(path)
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns))


def corrupt(paths: list[str], shards: list[list[bytes]], how: str, where: int) -> None:
    """Corrupt one shard the way ``how`` says (in place, same sizes where it matters)."""
    k = where % len(paths)
    p, n = paths[k], len(shards[k])
    if how == "data byte" and os.path.getsize(p):
        raw = bytearray(read_bytes(p))
        raw[where % len(raw)] ^= 1 << (where % 8)
        rewrite_in_place(p, bytes(raw))
    elif how in ("shifted offset", "checksum") and n:
        raw = bytearray(read_bytes(sidecar_of(p)))
        if how == "shifted offset":  # a forged sidecar: its CRCs rewritten over it
            at = HEADER_SIZE + 8 * (where % n)
            old = struct.unpack_from("<Q", raw, at)[0]
            struct.pack_into("<Q", raw, at, max(0, old + (where % 7) - 3))
        elif raw[11] & 2:  # per-record checksums present
            raw[HEADER_SIZE + 8 * n + 4 * (where % n)] ^= 1
        write_raw(sidecar_of(p), reseal_sidecar(bytes(raw)))
    elif how == "truncated" and os.path.getsize(p) > 1:
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) - 1 - where % 4)
