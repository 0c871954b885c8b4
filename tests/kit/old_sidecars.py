"""Sidecars as ofindex 0.1 wrote them (version 1), built from their documented layout, for the
tests that check they still open and fall back to whole fetches."""

from __future__ import annotations

import os
import struct

import crc32c

from ofindex.formats.sidecar import open_local_sidecar
from tests.kit.helpers import sidecar_of


def version_1_sidecar(fmt_code: int, offsets: list[int], size: int, end: int, fp: str) -> bytes:
    """A version-1 sidecar (what ofindex 0.1 wrote), built from its documented layout."""
    body = struct.pack(f"<{len(offsets)}Q", *offsets)
    raw = 50 + len(fp)
    hsize = (raw + 7) // 8 * 8
    head = bytearray(struct.pack("<8sHBBIQQQIIH", b"OFINDEX\0", 1, fmt_code, 0, hsize,
                                 len(offsets), size, end, crc32c.crc32c(body), 0, len(fp)))
    head += fp.encode() + bytes(hsize - raw)
    struct.pack_into("<I", head, 44, crc32c.crc32c(bytes(head)))
    return bytes(head) + body


def rewrite_as_version_1(root: str, shards: int) -> None:
    """Replace the sidecars of ``part-00000`` … under ``root`` by version 1 ones."""
    for k in range(shards):
        rewrite_one_as_version_1(os.path.join(root, f"part-{k:05d}"))


def rewrite_one_as_version_1(data_path: str) -> None:
    """Replace the sidecar of the data file ``data_path`` by a version 1 one."""
    sc = open_local_sidecar(sidecar_of(data_path))
    h = sc.header
    raw = version_1_sidecar(1, sc.offsets.tolist(), h.stamp.size, h.indexed_end,
                            h.stamp.fingerprint)
    del sc
    with open(sidecar_of(data_path), "wb") as f:
        f.write(raw)
