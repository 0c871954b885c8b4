"""Write the conformance corpus of docs/format.md: tests/conformance/ (see its README.md).

Every case is a small dataset, valid or damaged, with its expected reading in
``expected.json``. The expected values come from what this script put in: the payloads it
framed, the damage it did, the content digests and identities computed here from
docs/format.md's definitions. ofindex writes the index files of most cases (``build_index``,
``Writer``); the files no release writes any more (version 1 sidecars, version 1 and 2 JSON
manifests, a compact manifest with an unknown column, the damage) are written here from the
page alone. Nothing expected is read back through ofindex.

Run from the repository's root (deterministic: the same bytes every run with the same zlib)::

    .venv/bin/python tools/make_conformance.py
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import random
import shutil
import struct
import tempfile
import zlib
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import crc32c
import numpy as np

import ofindex
from ofindex.formats.sidecar import encode_sidecar, open_local_sidecar

#: The modification time (ns) every data file has when it is indexed: the sidecars and
#: manifests store ``mtime_ns:<T_NS>``. A checkout gives the files other times, so readers
#: then take the content digest's path; set the times to this to take the fast path.
T_NS = 1_600_000_000_123_456_789
FINGERPRINT = f"mtime_ns:{T_NS}"
#: The fingerprint of the cases whose sidecars have no content digest (version 1, or a
#: scheme 0 header): a kind local storage never reports, so the data file is judged by its size.
FOREIGN_FINGERPRINT = "etag:conformance"
WORDS = [b"alpha", b"beta", b"gamma", b"delta", b"epsilon", b"zeta", b"eta", b"theta",
         b"iota", b"kappa", b"lambda", b"mu"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- the page's definitions, written out here ------------------------------------------------

def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC32C."""
    c = crc32c.crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(payload: bytes) -> bytes:
    """One TFRecord record."""
    head = struct.pack("<Q", len(payload))
    return (head + struct.pack("<I", masked_crc(head)) + payload
            + struct.pack("<I", masked_crc(payload)))


def ofrecord(payload: bytes) -> bytes:
    """One OFRecord record."""
    return struct.pack("<q", len(payload)) + payload


def content_digest(data: bytes) -> int:
    """Scheme 1 of docs/format.md."""
    size = len(data)
    if size <= 3 * 4096:
        regions = [(0, size)]
    else:
        middle = (size - 4096) // 2
        regions = [(0, 4096), (middle, middle + 4096), (size - 4096, size)]
    crc = crc32c.crc32c(struct.pack("<Q", size))
    for start, end in regions:
        crc = crc32c.crc32c(data[start:end], crc)
    return int(crc)


def dataset_identity(rows: list[tuple[int, int, int, int]]) -> str:
    """The identity of ``(records, size, value, kind)`` rows."""
    digest = hashlib.sha256(b"ofindex dataset identity 1\0")
    for records, size, value, kind in rows:
        digest.update(struct.pack("<QQII", records, size, value, kind))
    return digest.hexdigest()[:16]


def payloads(seed: int, count: int, lo: int = 0, hi: int = 30) -> list[bytes]:
    """``count`` text-like payloads of ``lo``..``hi`` words (compressible, like Examples)."""
    rng = random.Random(seed)
    return [b" ".join(rng.choice(WORDS) for _ in range(rng.randrange(lo, hi + 1)))
            for _ in range(count)]


def expect(records: list[bytes]) -> list[dict[str, Any]]:
    """The expected reading of ``records``: each payload's length and CRC32C."""
    return [{"length": len(p), "crc32c": int(crc32c.crc32c(p))} for p in records]


def refused(*categories: str) -> dict[str, Any]:
    """A record that must be refused, with one of ``categories``."""
    return {"refused": list(categories)}


# -- sidecar bytes, patched by the page's layout ---------------------------------------------

HEADER_FIELDS = {"version": (8, "<H"), "format": (10, "<B"), "flags": (11, "<B"),
                 "count": (16, "<Q"), "size": (24, "<Q"), "end": (32, "<Q"),
                 "body_crc": (40, "<I"), "scheme": (49, "<B"), "digest": (52, "<I"),
                 "seek_points": (56, "<Q"), "windows": (64, "<Q"), "packed": (88, "<Q")}


def field(raw: bytes, name: str) -> int:
    """A field of a version 2 or 3 sidecar header."""
    at, fmt = HEADER_FIELDS[name]
    return int(struct.unpack_from(fmt, raw, at)[0])


def sealed(raw: bytes | bytearray, body: bool = False, **fields: int) -> bytes:
    """``raw`` (a version 2 or 3 sidecar) with ``fields`` set and its CRCs made right again
    (the body's too when ``body``)."""
    out = bytearray(raw)
    for name, value in fields.items():
        at, fmt = HEADER_FIELDS[name]
        struct.pack_into(fmt, out, at, value)
    if body:
        struct.pack_into("<I", out, 40, crc32c.crc32c(bytes(out[512:])))
    struct.pack_into("<I", out, 44, 0)
    struct.pack_into("<I", out, 44, crc32c.crc32c(bytes(out[:512])))
    return bytes(out)


def offsets_of(raw: bytes) -> list[int]:
    """The plain offsets of a version 2 sidecar."""
    return list(struct.unpack_from(f"<{field(raw, 'count')}Q", raw, 512))


def v1_sidecar(fmt: int, offsets: list[int], size: int, fingerprint: str,
               flags: int = 0, end: int | None = None) -> bytes:
    """A version 1 sidecar (ofindex 0.1): the variable header, then the offsets."""
    fp = fingerprint.encode()
    header_size = (50 + len(fp) + 7) // 8 * 8
    body = struct.pack(f"<{len(offsets)}Q", *offsets)
    head = bytearray(header_size)
    struct.pack_into("<8sHBBIQQQIIH", head, 0, b"OFINDEX\0", 1, fmt, flags, header_size,
                     len(offsets), size, size if end is None else end, crc32c.crc32c(body), 0,
                     len(fp))
    head[50 : 50 + len(fp)] = fp
    struct.pack_into("<I", head, 44, crc32c.crc32c(bytes(head)))
    return bytes(head) + body


# -- manifests, written by the page's layout -------------------------------------------------

def json_manifest(version: int, fmt: str, shards: dict[str, list[Any]], *,
                  layout: bool = False, partial: list[str] | None = None,
                  identity: str | None = None, extra: dict[str, Any] | None = None) -> bytes:
    """A JSON manifest of ``version`` (2 and up end with their CRC32C)."""
    doc: dict[str, Any] = {"ofindex_manifest": version, "format": fmt, "data_dir": None,
                           "index_dir": None}
    if layout:
        doc["layout"] = "sibling"
    doc["shards"] = shards
    if partial:
        doc["partial"] = partial
    if identity is not None:
        doc["identity"] = identity
    doc.update(extra or {})
    text = json.dumps(doc, separators=(",", ":")).encode("ascii")
    if version == 1:
        return text
    return text[:-1] + b',"crc32c":%d}' % crc32c.crc32c(text)


def string_block(values: list[str]) -> bytes:
    """A compact manifest's string block."""
    encoded = [v.encode() for v in values]
    ends = [0]
    for e in encoded:
        ends.append(ends[-1] + len(e))
    return struct.pack(f"<{len(ends)}I", *ends) + b"".join(encoded)


def compact_manifest(fmt: int, rows: list[dict[str, Any]], identity: str, *,
                     eager_rows: int, stamp_rows: int, stamps_first: bool = False,
                     extra_column: int | None = None, layout: int = 1) -> bytes:
    """A compact manifest: flags pages stored (codec 0), the others zlib (codec 1); with
    ``stamps_first`` the stamps pages lie before the others; ``extra_column`` adds a column
    of that id (one stored byte per row) that readers do not know."""
    n = len(rows)
    columns: list[tuple[int, int, int, list[bytes]]] = []  # id, codec, rows, raw pages

    def pages(per: int, encode: Callable[[list[dict[str, Any]]], bytes]) -> list[bytes]:
        return [encode(rows[a : a + per]) for a in range(0, n, per)]

    columns.append((1, 1, eager_rows, pages(eager_rows, lambda r: struct.pack(
        f"<{len(r)}Q", *[x["records"] for x in r]))))
    columns.append((2, 1, eager_rows, pages(eager_rows, lambda r: struct.pack(
        f"<{len(r)}Q", *[x["size"] for x in r]))))
    columns.append((3, 0, eager_rows, pages(eager_rows, lambda r: bytes(
        x["compression"] | (4 if x.get("partial") else 0)
        | (8 if x["body_crc"] is not None else 0) | x.get("extra_flags", 0) for x in r))))
    columns.append((4, 1, eager_rows, pages(eager_rows, lambda r: string_block(
        [x["name"] for x in r]))))
    stamps = (5, 1, stamp_rows, pages(stamp_rows, lambda r: struct.pack(
        f"<{len(r)}I", *[x["body_crc"] or 0 for x in r])
        + string_block([x["fingerprint"] for x in r])))
    columns.insert(0, stamps) if stamps_first else columns.append(stamps)
    if extra_column is not None:
        columns.append((extra_column, 0, eager_rows, pages(eager_rows, lambda r: bytes(len(r)))))
    stored = [[zlib.compress(p, 6) if codec == 1 else p for p in raw]
              for _, codec, _, raw in columns]
    npages = sum(len(s) for s in stored)
    head_size = 64 + 16 * len(columns) + 16 * npages + 8  # two null directories
    head_size += -head_size % 8
    table, body, at, first = b"", b"", head_size, 0
    column_table = b""
    for (cid, codec, per, _), pieces in zip(columns, stored, strict=True):
        column_table += struct.pack("<BBHIII", cid, codec, 0, per, first, len(pieces))
        first += len(pieces)
        for piece in pieces:
            table += struct.pack("<QII", at, len(piece), crc32c.crc32c(piece))
            body += piece
            at += len(piece)
    head = bytearray(struct.pack("<8sHBBIQQQII8sB7x", b"OFMANIF\0", 1, fmt, layout, head_size,
                                 n, sum(r["records"] for r in rows), sum(r["size"] for r in rows),
                                 len(columns), 0, bytes.fromhex(identity), 1))
    head += column_table + table + struct.pack("<II", 0xFFFFFFFF, 0xFFFFFFFF)
    head += bytes(head_size - len(head))
    struct.pack_into("<I", head, 44, crc32c.crc32c(bytes(head)))
    return bytes(head) + body


# -- compressed streams ----------------------------------------------------------------------

def deflated(raw: bytes, wbits: int, seed: int, cuts: tuple[int, int] = (300, 1500)) -> bytes:
    """``raw`` as one gzip member (``wbits`` 31) or zlib stream (15), its deflate blocks ended
    every few hundred bytes (``Z_BLOCK``: the next block starts inside a byte)."""
    rng = random.Random(seed)
    c = zlib.compressobj(6, zlib.DEFLATED, wbits)
    out, pos = [], 0
    while pos < len(raw):
        n = rng.randrange(*cuts)
        out += [c.compress(raw[pos : pos + n]), c.flush(zlib.Z_BLOCK)]
        pos += n
    out.append(c.flush())
    return b"".join(out)


def inflate_all(data: bytes, wbits: int) -> tuple[bytes, bool]:
    """Inflate every member or stream of ``data`` a byte at a time: the output before the
    first error, and whether all of it inflated."""
    out, pos = bytearray(), 0
    while pos < len(data):
        d = zlib.decompressobj(wbits)
        while pos < len(data) and not d.eof:
            try:
                out += d.decompress(data[pos : pos + 1])
            except zlib.error:
                return bytes(out), False
            pos += 1
        if not d.eof:
            return bytes(out), False
    return bytes(out), True


# -- the corpus ------------------------------------------------------------------------------

class Corpus:
    """Cases written under ``root/cases`` and their expectations."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.cases: list[dict[str, Any]] = []
        #: Each valid case's payloads, per shard in dataset order.
        self.payloads: dict[str, list[list[bytes]]] = {}

    def path(self, case: str, *parts: str) -> str:
        return os.path.join(self.root, "cases", case, *parts)

    def write(self, case: str, rel: str, data: bytes, data_file: bool = True) -> str:
        """Write a file of a case (a data file gets the indexed modification time)."""
        path = self.path(case, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        if data_file:
            os.utime(path, ns=(T_NS, T_NS))
        return path

    def read(self, case: str, rel: str) -> bytes:
        with open(self.path(case, rel), "rb") as f:
            return f.read()

    def copy(self, source: str, case: str) -> None:
        """A new case, a copy of ``source`` (times kept)."""
        shutil.copytree(self.path(source), self.path(case), copy_function=shutil.copy2)

    def damaged(self, source: str, name: str, rel: str, change: Callable[[bytes], bytes],
                data_file: bool = False) -> None:
        """A new case, ``source`` with its file ``rel`` changed."""
        self.copy(source, name)
        self.write(name, rel, change(self.read(name, rel)), data_file=data_file)

    def add(self, name: str, description: str, open_: str, *,
            records: list[Any] | None = None, shards: list[list[bytes]] | None = None,
            manifest: bool = True, refuse: list[str] | None = None,
            identity: str | None = None, listing: bool = False, set_times: bool = True,
            partial: bool = False, identity_listed: str | None = None,
            local_only: bool = False) -> None:
        """Note a case's expected reading (see README.md): ``records`` as expected, or the
        payloads of a valid case's ``shards``."""
        if shards is not None:
            self.payloads[name] = shards
            records = expect([p for shard in shards for p in shard])
        self.cases.append({
            "name": name, "description": description, "open": open_, "manifest": manifest,
            "also_without_manifest": listing, "set_times": set_times, "partial": partial,
            "local_only": local_only,
            "refuse": refuse, "identity": identity,
            "identity_listed": identity_listed or identity if listing else None,
            "records": records})


def build(path: str, **kwargs: Any) -> None:
    """Index ``path`` with ofindex (a file named on its own with ``index_dir``: where the
    placement rule would put it, the per-user index cache, is no part of a case)."""
    ofindex.build_index(path, workers=1, **kwargs)


def identity_of(files: list[tuple[int, bytes]]) -> str:
    """The identity of shards ``(records, data)`` whose sidecars have digests."""
    return dataset_identity([(n, len(d), content_digest(d), 1) for n, d in files])


def plain_cases(c: Corpus) -> None:
    """Uncompressed files: TFRecord with a manifest, OFRecord with checksums, a single file,
    a partial index."""
    shards = [[*payloads(1, 6, 0, 40), b""], payloads(2, 3), []]
    datas = [b"".join(tfrecord(p) for p in s) for s in shards]
    for k, data in enumerate(datas):
        c.write("tfrecord", f"data/part-{k:05d}.tfrecord", data)
    c.write("tfrecord", "data/_SUCCESS", b"", data_file=False)
    build(c.path("tfrecord", "data"))
    c.add("tfrecord", "three TFRecord shards (one empty, one record of no payload), version 2 "
          "sidecars in data.ofindex/ with a version 3 JSON manifest; a _SUCCESS marker",
          "data", shards=shards, listing=True,
          identity=identity_of([(len(s), d) for s, d in zip(shards, datas, strict=True)]))

    of_shards = [payloads(3, 4), payloads(4, 5, 1)]
    of_datas = [b"".join(ofrecord(p) for p in s) for s in of_shards]
    for k, data in enumerate(of_datas):
        c.write("ofrecord", f"data/part-{k}.ofrecord", data)
    build(c.path("ofrecord", "data"))
    c.add("ofrecord", "two OFRecord shards, version 2 sidecars with per-record checksums, a "
          "version 3 JSON manifest", "data", shards=of_shards,
          listing=True, identity=identity_of([(len(s), d) for s, d in
                                              zip(of_shards, of_datas, strict=True)]))

    single = payloads(5, 5, 1)
    data = b"".join(tfrecord(p) for p in single)
    c.write("single", "data/records.tfrecord", data)
    build(c.path("single", "data", "records.tfrecord"), checksums=True,
          index_dir=c.path("single", "data.ofindex"))
    c.add("single", "one TFRecord file named on its own (no manifest), a version 2 sidecar "
          "with checksums", "data/records.tfrecord", manifest=False, shards=[single],
          identity=identity_of([(5, data)]))

    many = payloads(7, 150, 0, 4)
    data = b"".join(tfrecord(p) for p in many)
    c.write("paged", "data/part-0.tfrecord", data)
    build(c.path("paged", "data"))
    c.add("paged", "one TFRecord shard of 150 records: a remote reader reads its version 2 "
          "sidecar by pages (of 16 records)", "data", shards=[many],
          identity=identity_of([(150, data)]))

    whole = payloads(6, 5, 1)
    cut = tfrecord(b"the record cut short by a copy")[:20]
    data = b"".join(tfrecord(p) for p in whole) + cut
    c.write("partial", "data/part-0.tfrecord", data)
    build(c.path("partial", "data"), allow_partial=True)
    c.add("partial", "a TFRecord file whose last record is cut short, indexed partially (flag "
          "1): the 5 records before the damage", "data", shards=[whole], partial=True,
          identity=identity_of([(5, data)]))


def gzip_cases(c: Corpus) -> None:
    """Compressed files: primed points (kind 0), gzip members (kind 1), zlib streams (kind 2),
    a writer's full flushes (kind 3), and a version 2 sidecar of a compressed file."""
    recs = payloads(11, 120, 5, 40)
    data = deflated(b"".join(tfrecord(p) for p in recs), 31, 11)
    c.write("gzip-blocks", "data/part-0.tfrecord.gz", data)
    build(c.path("gzip-blocks", "data"), seek_spacing=2048)
    c.add("gzip-blocks", "a GZIP TFRecord file of one member whose deflate blocks end inside "
          "bytes: version 3 sidecar, seek points of kind 0 with windows and bits 1-7",
          "data", shards=[recs], identity=identity_of([(len(recs), data)]))

    recs = payloads(12, 60, 5, 30)
    raw = b"".join(tfrecord(p) for p in recs)
    thirds = [0, len(raw) // 3 + 5, 2 * len(raw) // 3 + 11, len(raw)]  # cut inside records
    data = b"".join(deflated(raw[a:b], 31, 12 + k)
                    for k, (a, b) in enumerate(itertools.pairwise(thirds)))
    c.write("gzip-members", "data/part-0.tfrecord.gz", data)
    build(c.path("gzip-members", "data"), seek_spacing=1024)
    c.add("gzip-members", "a GZIP TFRecord file of three members cut inside records: seek "
          "points of kinds 0 and 1", "data", shards=[recs],
          identity=identity_of([(len(recs), data)]))

    recs = payloads(13, 60, 5, 30)
    raw = b"".join(ofrecord(p) for p in recs)
    half = len(raw) // 2 + 3
    data = deflated(raw[:half], 15, 13) + deflated(raw[half:], 15, 14)
    c.write("zlib-streams", "data/part-0.ofrecord.zz", data)
    build(c.path("zlib-streams", "data"), seek_spacing=1024)
    c.add("zlib-streams", "a ZLIB OFRecord file of two streams, checksums: seek points of "
          "kinds 0 and 2", "data", shards=[recs],
          identity=identity_of([(len(recs), data)]))

    recs = payloads(15, 40, 5, 30)
    path = c.path("gzip-writer", "data", "part-0.tfrecord.gz")
    os.makedirs(os.path.dirname(path))
    with ofindex.Writer(path, compression="gzip", seek_spacing=512,
                        index_dir=c.path("gzip-writer", "data.ofindex")) as w:
        for p in recs:
            w.write(p)
    os.utime(path, ns=(T_NS, T_NS))
    data = c.read("gzip-writer", "data/part-0.tfrecord.gz")
    side = c.path("gzip-writer", "data.ofindex", "part-0.tfrecord.gz.ofidx")
    with open(side, "rb") as f:
        raw = f.read()
    with open(side, "wb") as f:  # stamped with the time set above
        f.write(restamped(raw, data))
    c.add("gzip-writer", "a GZIP TFRecord file written by ofindex.Writer: seek points of kind "
          "3 (full flushes), no windows, no manifest", "data/part-0.tfrecord.gz",
          manifest=False, shards=[recs], identity=identity_of([(len(recs), data)]))

    recs = payloads(16, 30, 5, 30)
    data = deflated(b"".join(tfrecord(p) for p in recs), 31, 16)
    c.write("gzip-v2", "data/part-0.tfrecord.gz", data)
    build(c.path("gzip-v2", "data", "part-0.tfrecord.gz"), seek_spacing=1024,
          index_dir=c.path("gzip-v2", "data.ofindex"))
    side = c.path("gzip-v2", "data.ofindex", "part-0.tfrecord.gz.ofidx")
    old = open_local_sidecar(side)  # rewritten with its offsets plain, as ofindex 0.2 did
    h = old.header
    head, body = encode_sidecar(h.format, np.array(old.offsets), h.stamp, h.indexed_end,
                                compression=h.compression, seek_points=np.array(old.seek_points),
                                windows=bytes(old.windows), spacing=h.spacing,
                                uncompressed_size=h.uncompressed_size, packed=False)
    del old
    with open(side, "wb") as f:
        f.write(head + body)
    c.add("gzip-v2", "a GZIP TFRecord file with a version 2 sidecar (offsets plain, seek "
          "points): what ofindex 0.2 wrote for compressed files", "data/part-0.tfrecord.gz",
          manifest=False, shards=[recs], identity=identity_of([(len(recs), data)]))


def restamped(raw: bytes, data: bytes, fingerprint: str = FINGERPRINT) -> bytes:
    """A version 2 or 3 sidecar stamped for ``data`` (size, digest, fingerprint)."""
    out = bytearray(raw)
    fp = fingerprint.encode()
    struct.pack_into("<H", out, 50, len(fp))
    out[96:512] = fp + bytes(416 - len(fp))
    return sealed(out, size=len(data), scheme=1, digest=content_digest(data))


def old_cases(c: Corpus) -> None:
    """Version 1 sidecars; version 1 and 2 JSON manifests in the data directory, sidecars
    beside the data (ofindex 0.1 and 0.2)."""
    recs = payloads(21, 4, 1)
    data = b"".join(tfrecord(p) for p in recs)
    offsets, at = [], 0
    for p in recs:
        offsets.append(at)
        at += 16 + len(p)
    c.write("v1", "data/part-0.tfrecord", data)
    side = v1_sidecar(1, offsets, len(data), FOREIGN_FINGERPRINT)
    c.write("v1", "data/part-0.tfrecord.ofidx", side, data_file=False)
    body_crc = crc32c.crc32c(struct.pack(f"<{len(offsets)}Q", *offsets))
    c.add("v1", "a version 1 sidecar (ofindex 0.1) beside its TFRecord file; its fingerprint "
          "is of a kind local files never have, so the file is taken by its size",
          "data/part-0.tfrecord", manifest=False, shards=[recs],
          identity=dataset_identity([(4, len(data), body_crc, 2)]))

    for version in (1, 2):
        case = f"manifest-v{version}"
        shards = [payloads(22 + version, 3, 1), payloads(24 + version, 2, 1)]
        datas = [b"".join(tfrecord(p) for p in s) for s in shards]
        names = [f"part-{k}.tfrecord" for k in range(2)]
        for name, data in zip(names, datas, strict=True):
            c.write(case, f"data/{name}", data)
        build(c.path(case, "data"))
        crcs = []
        for name in names:  # moved beside the data, as 0.2 kept them
            shutil.move(c.path(case, "data.ofindex", f"{name}.ofidx"),
                        c.path(case, "data", f"{name}.ofidx"))
            crcs.append(field(c.read(case, f"data/{name}.ofidx"), "body_crc"))
        shutil.rmtree(c.path(case, "data.ofindex"))
        columns: dict[str, list[Any]] = {"name": names, "records": [len(s) for s in shards],
                                         "size": [len(d) for d in datas],
                                         "fingerprint": [FINGERPRINT] * 2}
        if version == 2:
            columns["body_crc"] = crcs
        c.write(case, "data/ofindex-manifest.json", json_manifest(version, "tfrecord", columns),
                data_file=False)
        rows = [(len(s), len(d), crc if version == 2 else 0, 2 if version == 2 else 0)
                for s, d, crc in zip(shards, datas, crcs, strict=True)]
        c.add(case, f"a version {version} JSON manifest in the data directory (no layout, no "
              "identity: the identity of its rows, with the body CRCs it lists), version 2 "
              "sidecars beside the data (listed: the identity of their digests)", "data",
              shards=shards, listing=True, identity=dataset_identity(rows),
              identity_listed=identity_of([(len(s), d) for s, d in
                                           zip(shards, datas, strict=True)]))


def manifest_cases(c: Corpus) -> None:
    """A compact manifest as ofindex writes it; one with several pages per column, stamps
    before the other pages, a stored column, an unknown column and an unknown flag bit; a JSON
    manifest with unknown members and a name that is not ASCII; a shard in a subdirectory."""
    shards = [payloads(31 + k, k + 1, 1) for k in range(5)]
    datas = [b"".join(tfrecord(p) for p in s) for s in shards]
    names = [f"part-{k:05d}.tfrecord" for k in range(5)]
    for case in ("compact", "compact-pages"):
        for name, data in zip(names, datas, strict=True):
            c.write(case, f"data/{name}", data)
    build(c.path("compact", "data"),
          manifest=c.path("compact", "data.ofindex", "ofindex-manifest.bin"))
    ident = identity_of([(len(s), d) for s, d in zip(shards, datas, strict=True)])
    c.add("compact", "five TFRecord shards with a compact manifest as ofindex writes it",
          "data", shards=shards, listing=True, identity=ident)

    build(c.path("compact-pages", "data"), manifest=False)
    c.write("compact-pages", "data.ofindex/ofindex-manifest.bin",
            compact_rows_manifest(c, "compact-pages", names, shards, datas, ident),
            data_file=False)
    c.add("compact-pages", "a compact manifest of 2 rows per page, its stamps pages first, "
          "its flags stored (codec 0), an unknown column (id 9) and an unknown flag bit (0x40)",
          "data", shards=shards, listing=True, identity=ident)

    recs = [payloads(41, 3, 1), payloads(42, 2, 1)]
    datas = [b"".join(tfrecord(p) for p in s) for s in recs]
    names = ["données-0.tfrecord", "données-1.tfrecord"]
    for name, data in zip(names, datas, strict=True):
        c.write("json-extra", f"data/{name}", data)
    build(c.path("json-extra", "data"), manifest=False)
    crcs = [field(c.read("json-extra", f"data.ofindex/{n}.ofidx"), "body_crc") for n in names]
    ident = identity_of([(len(s), d) for s, d in zip(recs, datas, strict=True)])
    columns = {"name": names, "records": [3, 2], "size": [len(d) for d in datas],
               "fingerprint": [FINGERPRINT] * 2, "body_crc": crcs, "note": ["a", "b"]}
    c.write("json-extra", "data.ofindex/ofindex-manifest.json",
            json_manifest(3, "tfrecord", columns, layout=True, identity=ident,
                          extra={"written_by": "a future writer"}), data_file=False)
    c.add("json-extra", "a version 3 JSON manifest with members and a shards column no reader "
          "knows (ignored) and names that are not ASCII (escaped as \\u00e9 in the text its "
          "CRC covers)", "data", shards=recs, listing=True,
          identity=ident)
    for name in names:  # stored percent-encoded (tests/conformance/README.md)
        for rel in (f"data/{name}", f"data.ofindex/{name}.ofidx"):
            stored = c.path("json-extra", rel)
            folder, base = os.path.split(stored)
            os.replace(stored, os.path.join(folder, quote(base)))

    recs = [payloads(43, 2, 1), payloads(44, 3, 1)]
    datas = [b"".join(tfrecord(p) for p in s) for s in recs]
    c.write("subdir", "data/top.tfrecord", datas[0])
    c.write("subdir", "data/sub/deep.tfrecord", datas[1])
    build(c.path("subdir", "data", "top.tfrecord"), index_dir=c.path("subdir", "data.ofindex"))
    build(c.path("subdir", "data", "sub", "deep.tfrecord"), index_dir=c.path("subdir",
                                                                               "data.ofindex"))
    names = ["top.tfrecord", "sub/deep.tfrecord"]
    crcs = [field(c.read("subdir", f"data.ofindex/{n.rsplit('/')[-1]}.ofidx"), "body_crc")
            for n in names]
    ident = identity_of([(len(s), d) for s, d in zip(recs, datas, strict=True)])
    columns = {"name": names, "records": [2, 3], "size": [len(d) for d in datas],
               "fingerprint": [FINGERPRINT] * 2, "body_crc": crcs}
    c.write("subdir", "data.ofindex/ofindex-manifest.json",
            json_manifest(3, "tfrecord", columns, layout=True, identity=ident), data_file=False)
    c.add("subdir", "a JSON manifest naming a shard in a subdirectory (sub/deep.tfrecord): its "
          "sidecar is data.ofindex/deep.tfrecord.ofidx", "data",
          shards=recs, identity=ident)


def set_cases(c: Corpus) -> None:
    """Sets of shards whose names count them, whole and not, and a writer's claim."""
    recs = [payloads(61 + k, 2, 1) for k in range(2)]
    datas = [b"".join(tfrecord(p) for p in s) for s in recs]
    names = ["part-1-of-2.tfrecord", "part-2-of-2.tfrecord"]
    for name, data in zip(names, datas, strict=True):
        c.write("of-n-from-one", f"data/{name}", data)
    build(c.path("of-n-from-one", "data"))
    c.add("of-n-from-one", "two shards named -1-of-2 and -2-of-2 (a family numbered from 1): "
          "whole", "data", shards=recs, listing=True,
          identity=identity_of([(len(s), d) for s, d in zip(recs, datas, strict=True)]))

    names = ["part-00000-of-00003.tfrecord", "part-00002-of-00003.tfrecord"]
    for name, data in zip(names, datas, strict=True):
        c.write("of-n-missing", f"data/{name}", data)
    build(c.path("of-n-missing", "data"), allow_missing_shards=True)  # sidecars, no manifest
    c.add("of-n-missing", "shards named -00000-of-00003 and -00002-of-00003, sidecars and no "
          "manifest: the set lacks part-00001-of-00003 and is refused", "data", records=None,
          manifest=False, refuse=["incomplete"])

    names = ["part-00000-of-00003.tfrecord", "part-00001-of-00003.tfrecord"]
    for name, data in zip(names, datas, strict=True):
        c.write("json-of-n-missing", f"data/{name}", data)
    build(c.path("json-of-n-missing", "data"), allow_missing_shards=True)
    crcs = [field(c.read("json-of-n-missing", f"data.ofindex/{n}.ofidx"), "body_crc")
            for n in names]
    columns = {"name": names, "records": [2, 2], "size": [len(d) for d in datas],
               "fingerprint": [FINGERPRINT] * 2, "body_crc": crcs}
    c.write("json-of-n-missing", "data.ofindex/ofindex-manifest.json",
            json_manifest(3, "tfrecord", columns, layout=True,
                          identity=identity_of([(2, d) for d in datas])), data_file=False)
    c.add("json-of-n-missing", "a JSON manifest (CRC right) listing the only two shards of its "
          "directory, named -00000-of-00003 and -00001-of-00003: refused", "data",
          records=None, listing=True, refuse=["incomplete"])

    c.copy("tfrecord", "publishing")
    os.unlink(c.path("publishing", "data.ofindex", "ofindex-manifest.json"))
    c.write("publishing", "data/.ofindex-publishing",
            b'{"token": "conformance", "pid": 1, "host": "writer", '
            b'"time": "2020-09-13T12:26:40"}\n', data_file=False)
    c.add("publishing", "`tfrecord` without its manifest, its data directory holding a "
          "writer's claim (.ofindex-publishing): refused", "data", records=None,
          manifest=False, refuse=["incomplete"])


def compact_rows_manifest(c: Corpus, case: str, names: list[str], shards: list[list[bytes]],
                          datas: list[bytes], ident: str, **changes: Any) -> bytes:
    """The compact manifest of ``compact-pages`` (``changes``: ``{row: {column: value}}``)."""
    rows = []
    for k, (name, s, d) in enumerate(zip(names, shards, datas, strict=True)):
        crc = field(c.read(case, f"data.ofindex/{name}.ofidx"), "body_crc")
        row = {"name": name, "records": len(s), "size": len(d), "fingerprint": FINGERPRINT,
               "body_crc": crc, "compression": 0, "extra_flags": 0x40 if k == 2 else 0}
        row.update(changes.get(str(k), {}))
        rows.append(row)
    return compact_manifest(1, rows, ident, eager_rows=2, stamp_rows=2, stamps_first=True,
                            extra_column=9)


# -- damaged cases ----------------------------------------------------------------------------

def flip(at: int, mask: int = 0x01) -> Callable[[bytes], bytes]:
    """A change: byte ``at`` (negative: from the end) with the bits of ``mask`` flipped."""
    def change(raw: bytes) -> bytes:
        out = bytearray(raw)
        out[at] ^= mask
        return bytes(out)
    return change


def spans(shard: list[bytes], overhead: int) -> list[tuple[int, int]]:
    """Where each record of a file of ``shard`` lies (framing included)."""
    out, at = [], 0
    for p in shard:
        out.append((at, at + overhead + len(p)))
        at += overhead + len(p)
    return out


def sidecar_damage(c: Corpus) -> None:
    """The sidecar of ``single`` (5 TFRecord records, version 2, checksums) damaged."""
    side = "data.ofindex/records.tfrecord.ofidx"
    raw = c.read("single", side)
    end = field(raw, "end")
    offsets = offsets_of(raw)
    c.damaged("v1", "v1-header-crc", "data/part-0.tfrecord.ofidx", flip(16))
    c.add("v1-header-crc", "the version 1 sidecar of `v1` with its record count changed, its "
          "header CRC not: refused", "data/part-0.tfrecord", manifest=False, records=None,
          refuse=["sidecar"])
    whole: list[tuple[str, str, Callable[[bytes], bytes]]] = [
        ("sidecar-magic", "the magic's first byte flipped", flip(0)),
        ("sidecar-header-crc", "the record count changed, the header CRC not", flip(16)),
        ("sidecar-body-crc", "a byte of record 1's offset flipped, the body CRC not",
         flip(512 + 8 + 1)),
        ("sidecar-truncated", "its last 4 bytes cut", lambda b: b[:-4]),
        ("sidecar-trailing", "8 bytes after its last section", lambda b: b + bytes(8)),
        ("sidecar-version", "version 9 (header CRC right)", lambda b: sealed(b, version=9)),
        ("sidecar-flags", "an unknown flag (bit 3, 0x08; header CRC right)",
         lambda b: sealed(b, flags=field(b, "flags") | 0x08)),
        ("sidecar-count", "a record count that cannot fit the indexed end (header CRC right)",
         lambda b: sealed(b, count=end // 16 + 1)),
        ("sidecar-end", "an indexed end past the data's end, not partial (header CRC right)",
         lambda b: sealed(b, end=end + 16)),
    ]
    for name, what, change in whole:
        c.damaged("single", name, side, change)
        c.add(name, f"the sidecar of `single` with {what}: refused",
              "data/records.tfrecord", manifest=False, records=None, refuse=["sidecar"])

    def short_span(b: bytes) -> bytes:
        out = bytearray(b)
        struct.pack_into("<Q", out, 512 + 16, offsets[1] + 4)  # record 2 starts 4 bytes in
        return sealed(out, body=True)

    many = c.payloads["paged"][0]
    r = records_per_page(len(many), len(c.read("paged", "data/part-0.tfrecord")))
    assert r == 16 and len(many) > 4 * r  # read by pages remotely

    def swapped(b: bytes) -> bytes:
        out = bytearray(b)
        a = 512 + 8 * (2 * r + 3)
        out[a : a + 16] = b[a + 8 : a + 16] + b[a : a + 8]  # two offsets of page 2 swapped
        return bytes(out)

    c.damaged("paged", "page-swapped", "data.ofindex/part-0.tfrecord.ofidx", swapped)
    c.add("page-swapped", f"`paged` with two offsets of its page 2 (records {2 * r} to "
          f"{3 * r - 1}) swapped, the body CRC not made right: a reader of the whole sidecar "
          "refuses it (body CRC), one reading pages refuses that page", "data",
          records=[refused("sidecar") if 2 * r <= i < 3 * r else {**e, "or_refused": ["sidecar"]}
                   for i, e in enumerate(expect(many))])

    c.damaged("single", "sidecar-short-span", side, short_span)
    records = expect(c.payloads["single"][0])
    records[1], records[2] = refused("sidecar"), refused("sidecar", "record")
    c.add("sidecar-short-span", "the sidecar of `single` with record 2's offset 4 bytes after "
          "record 1's (CRCs right): record 1's span is shorter than a record's framing, record "
          "2 starts inside record 1", "data/records.tfrecord", manifest=False, records=records)


def seek_table(raw: bytes) -> list[tuple[int, int, int, int, int, int]]:
    """``(out, in, bits, kind, window_len, window_at)`` of a sidecar's seek points."""
    count, checksums = field(raw, "count"), bool(field(raw, "flags") & 2)
    at = 512 + (8 * count if field(raw, "version") == 2 else (field(raw, "packed") + 7) // 8 * 8)
    at += (4 * count + 7) // 8 * 8 if checksums else 0
    return [struct.unpack_from("<QQBBHIQ", raw, at + 32 * k)[:4]
            + struct.unpack_from("<IQ", raw, at + 32 * k + 20)
            for k in range(field(raw, "seek_points"))]


def windows_at(raw: bytes) -> int:
    """Where a sidecar's windows blob starts."""
    return len(raw) - field(raw, "windows")


def compressed_damage(c: Corpus) -> None:
    """Damaged sidecars of compressed files, and damaged compressed data."""
    side = "data.ofindex/part-0.tfrecord.gz.ofidx"
    raw = c.read("gzip-writer", side)
    packed = field(raw, "packed")
    assert packed % 8, "the packed offsets of gzip-writer need padding for this case"
    first = 512 + (packed + 7) // 8 * 8

    def patched(at: int, value: bytes) -> Callable[[bytes], bytes]:
        def change(b: bytes) -> bytes:
            out = bytearray(b)
            out[at : at + len(value)] = value
            return sealed(out, body=True)
        return change

    for name, what, change in [
            ("packed-corrupt", "a byte of its packed offsets flipped (CRCs right)",
             patched(512 + packed // 2, bytes([raw[512 + packed // 2] ^ 0x10]))),
            ("packed-padding", "a padding byte after its packed offsets not zero (CRCs right)",
             patched(512 + packed, b"\x01")),
            ("seek-first-point", "its first seek point at uncompressed byte 1 (CRCs right)",
             patched(first, struct.pack("<Q", 1)))]:
        c.damaged("gzip-writer", name, side, change)
        c.add(name, f"the sidecar of `gzip-writer` with {what}: refused",
              "data/part-0.tfrecord.gz", manifest=False, records=None, refuse=["sidecar"])

    recs = c.payloads["gzip-v2"][0]
    data = c.read("gzip-v2", "data/part-0.tfrecord.gz")
    raw = c.read("gzip-v2", side)
    points = seek_table(raw)
    k = next(i for i, p in enumerate(points) if p[3] == 0 and p[2] and p[4])
    at = windows_at(raw) + points[k][5] + points[k][4] // 2
    c.damaged("gzip-v2", "seek-window", side, patched(at, bytes([raw[at] ^ 0x04])))
    hi = points[k + 1][0] if k + 1 < len(points) else 1 << 62
    c.add("seek-window", f"the sidecar of `gzip-v2` with a byte of seek point {k}'s window "
          "flipped (CRCs right): the records that start from that point are refused",
          "data/part-0.tfrecord.gz", manifest=False,
          records=[refused("sidecar") if points[k][0] <= a < hi else e
                   for (a, _), e in zip(spans(recs, 16), expect(recs), strict=True)])

    raw_stream = b"".join(tfrecord(p) for p in recs)
    last_in = points[-1][1]
    for name, what, change in [
            ("gzip-flipped", "a byte of its deflate data flipped after the last seek point",
             flip((last_in + len(data) - 8) // 2, 0x20)),
            ("gzip-truncated", "its last 40 bytes cut", lambda b: b[:-40])]:
        damaged = change(data)
        assert len(damaged) > last_in
        out, _ = inflate_all(damaged, 31)
        c.damaged("gzip-v2", name, "data/part-0.tfrecord.gz", change, data_file=True)
        c.write(name, side, restamped(raw, damaged), data_file=False)
        c.add(name, f"`gzip-v2` with {what}, its sidecar stamped for the damaged file: the "
              "records whose bytes inflate otherwise, or not at all, are refused",
              "data/part-0.tfrecord.gz", manifest=False,
              records=[e if out[a:b] == raw_stream[a:b] else refused("record")
                       for (a, b), e in zip(spans(recs, 16), expect(recs), strict=True)])


def data_damage(c: Corpus) -> None:
    """Damaged data files: records refused by their CRCs, or shards by their stamps."""
    shards = c.payloads["tfrecord"]
    place = spans(shards[0], 16)
    k = next(i for i, p in enumerate(shards[0]) if len(p) >= 2 and i >= 2)

    def with_change(case: str, source: str, rel: str, change: Callable[[bytes], bytes]) -> None:
        c.copy(source, case)
        data = change(c.read(case, rel))
        c.write(case, rel, data)
        side = f"data.ofindex/{rel.rsplit('/', 1)[-1]}.ofidx"
        c.write(case, side, restamped(c.read(case, side), data), data_file=False)

    every = expect([p for s in shards for p in s])
    with_change("record-payload", "tfrecord", "data/part-00000.tfrecord",
                flip(place[k][0] + 12 + 1))
    c.add("record-payload", f"`tfrecord` with a byte of record {k}'s payload flipped (its "
          "sidecar stamped for the damaged file): that record is refused", "data",
          records=[refused("record") if i == k else e for i, e in enumerate(every)])
    with_change("record-length", "tfrecord", "data/part-00000.tfrecord",
                flip(place[1][0], 0x02))
    c.add("record-length", "`tfrecord` with a bit of record 1's length flipped (sidecar "
          "stamped for the damaged file): that record is refused", "data",
          records=[refused("record", "sidecar") if i == 1 else e for i, e in enumerate(every)])

    of_shards = c.payloads["ofrecord"]
    of_place = spans(of_shards[0], 8)
    of_every = expect([p for s in of_shards for p in s])
    with_change("ofrecord-payload", "ofrecord", "data/part-0.ofrecord",
                flip(of_place[1][0] + 8 + 1))
    c.add("ofrecord-payload", "`ofrecord` with a byte of record 1's payload flipped (sidecar "
          "stamped for the damaged file): refused by the sidecar's checksum", "data",
          records=[refused("record") if i == 1 else e for i, e in enumerate(of_every)])
    with_change("ofrecord-length", "ofrecord", "data/part-0.ofrecord", flip(of_place[2][0]))
    c.add("ofrecord-length", "`ofrecord` with record 2's length field changed (sidecar "
          "stamped for the damaged file): its span and its length disagree", "data",
          records=[refused("sidecar", "record") if i == 2 else e
                   for i, e in enumerate(of_every)])

    first = len(shards[0])
    stale_second = [refused("stale") if first <= i < first + len(shards[1]) else e
                    for i, e in enumerate(every)]
    c.damaged("tfrecord", "data-truncated", "data/part-00001.tfrecord", lambda b: b[:-5],
              data_file=True)
    c.add("data-truncated", "`tfrecord` with its second shard 5 bytes shorter: its index is "
          "stale", "data", records=stale_second, refuse=["stale"])
    other = b"".join(tfrecord(p.upper()) for p in shards[1])
    c.copy("tfrecord", "data-replaced")
    c.write("data-replaced", "data/part-00001.tfrecord", other, data_file=False)
    c.add("data-replaced", "`tfrecord` with its second shard replaced by another file of the "
          "same size (other payloads): its content digest differs; a reader that trusts an "
          "unchanged fingerprint would not see it, so its times are never set to the indexed "
          "ones", "data", records=stale_second, refuse=["stale"], set_times=False)
    c.damaged("tfrecord", "data-appended", "data/part-00000.tfrecord",
              lambda b: b + tfrecord(b"appended"), data_file=True)
    c.add("data-appended", "`tfrecord` with a record appended to its first shard: its index "
          "is stale", "data", records=[refused("stale") if i < first else e
                                       for i, e in enumerate(every)], refuse=["stale"])


def rewritten(change: Callable[[dict[str, Any]], None]) -> Callable[[bytes], bytes]:
    """A change of a JSON manifest: its document changed, its CRC made right again."""
    def apply(raw: bytes) -> bytes:
        doc = json.loads(raw)
        del doc["crc32c"]
        change(doc)
        text = json.dumps(doc, separators=(",", ":")).encode("ascii")
        return text[:-1] + b',"crc32c":%d}' % crc32c.crc32c(text)
    return apply


def manifest_damage(c: Corpus) -> None:
    """The JSON manifest of ``tfrecord`` damaged, or its directory changed."""
    man = "data.ofindex/ofindex-manifest.json"
    shards = c.payloads["tfrecord"]
    every = expect([p for s in shards for p in s])
    first = len(shards[0])
    bad_records = (b'"records":[%d,%d,0]' % (first, len(shards[1])),
                   b'"records":[%d,%d,0]' % (first, len(shards[1]) - 1))
    assert bad_records[0] in c.read("tfrecord", man)

    def shards_set(key: str, k: int, value: Any) -> Callable[[dict[str, Any]], None]:
        return lambda doc: doc["shards"][key].__setitem__(k, value)

    for name, what, change in [
            ("json-crc", "a record count changed, its CRC not",
             lambda b: b.replace(*bad_records)),
            ("json-version", "version 4 (CRC right)",
             rewritten(lambda doc: doc.__setitem__("ofindex_manifest", 4))),
            ("json-name", "a shard named ../part-00000.tfrecord (CRC right)",
             rewritten(shards_set("name", 0, "../part-00000.tfrecord"))),
            ("json-twice", "a shard named twice (CRC right)",
             rewritten(shards_set("name", 1, "part-00000.tfrecord"))),
            ("json-identity", "an identity that is not 16 hexadecimal digits (CRC right)",
             rewritten(lambda doc: doc.__setitem__("identity", "0123")))]:
        c.damaged("tfrecord", name, man, change)
        c.add(name, f"the manifest of `tfrecord` with {what}: refused", "data", records=None,
              refuse=["manifest"])

    c.damaged("tfrecord", "json-count", man,
              rewritten(shards_set("records", 1, len(shards[1]) - 1)))
    c.add("json-count", "the manifest of `tfrecord` giving its second shard one record less "
          "than its sidecar (CRC right): the shard is refused",
          "data", records=every[:first] + [refused("stale")] * (len(shards[1]) - 1),
          refuse=["stale"])
    crc = field(c.read("tfrecord", "data.ofindex/part-00000.tfrecord.ofidx"), "body_crc")
    c.damaged("tfrecord", "json-body-crc", man,
              rewritten(shards_set("body_crc", 0, (crc + 1) % 2**32)))
    c.add("json-body-crc", "the manifest of `tfrecord` naming another body CRC for its first "
          "shard (CRC right): the shard is refused", "data",
          records=[refused("stale") if i < first else e for i, e in enumerate(every)],
          refuse=["stale"])
    c.copy("tfrecord", "json-unlisted")
    c.write("json-unlisted", "data/part-00003.tfrecord", tfrecord(b"new"))
    c.add("json-unlisted", "`tfrecord` with a record file the manifest does not list: refused "
          "when the local directory is listed", "data", records=None, refuse=["stale"],
          local_only=True)
    c.copy("tfrecord", "json-missing")
    os.unlink(c.path("json-missing", "data", "part-00001.tfrecord"))
    c.add("json-missing", "`tfrecord` without a record file its manifest lists: refused when "
          "the local directory is listed", "data", records=None, refuse=["stale"],
          local_only=True)


def compact_damage(c: Corpus) -> None:
    """Compact manifests damaged."""
    man = "data.ofindex/ofindex-manifest.bin"
    raw = c.read("compact", man)
    head_size = struct.unpack_from("<I", raw, 12)[0]
    ncols = struct.unpack_from("<I", raw, 40)[0]
    page0 = struct.unpack_from("<Q", raw, 64 + 16 * ncols)[0]

    def head_set(at: int, fmt: str, value: int) -> Callable[[bytes], bytes]:
        def change(b: bytes) -> bytes:
            out = bytearray(b)
            struct.pack_into(fmt, out, at, value)
            struct.pack_into("<I", out, 44, 0)
            struct.pack_into("<I", out, 44, crc32c.crc32c(bytes(out[:head_size])))
            return bytes(out)
        return change

    total = struct.unpack_from("<Q", raw, 24)[0]
    for name, what, change in [
            ("compact-head-crc", "its shard count changed, its head CRC not", flip(16)),
            ("compact-page-crc", "a byte of its first page flipped", flip(page0 + 3)),
            ("compact-totals", "a total record count its columns do not add up to (head "
             "CRC right)", head_set(24, "<Q", total + 1)),
            ("compact-version", "version 2 (head CRC right)", head_set(8, "<H", 2)),
            ("compact-truncated", "its last 10 bytes (in its stamps page) cut",
             lambda b: b[:-10])]:
        c.damaged("compact", name, man, change)
        c.add(name, f"the compact manifest of `compact` with {what}: refused", "data",
              records=None, refuse=["manifest"])

    shards = c.payloads["compact-pages"]
    datas = [b"".join(tfrecord(p) for p in s) for s in shards]
    names = [f"part-{k:05d}.tfrecord" for k in range(5)]
    ident = identity_of([(len(s), d) for s, d in zip(shards, datas, strict=True)])
    every = expect([p for s in shards for p in s])
    for name, what, changes, refusal in [
            ("compact-stamp", "shard 1's fingerprint another than its sidecar's",
             {"1": {"fingerprint": "mtime_ns:1"}}, "stale"),
            ("compact-compression", "compression code 3 in shard 0's flags",
             {"0": {"compression": 3}}, "manifest"),
            ("compact-name", "shard 0 named ../part-00000.tfrecord",
             {"0": {"name": "../part-00000.tfrecord"}}, "manifest")]:
        c.copy("compact-pages", name)
        c.write(name, man, compact_rows_manifest(c, name, names, shards, datas, ident,
                                                 **changes), data_file=False)
        if refusal == "stale":
            records: list[Any] | None = [refused("stale") if 1 <= i < 3 else e
                                         for i, e in enumerate(every)]
        else:
            records = None
        c.add(name, f"the compact manifest of `compact-pages` with {what} (CRCs right)",
              "data", records=records, refuse=[refusal])


# -- cache keys and block files ---------------------------------------------------------------

def key16(text: str) -> bytes:
    """The page's ``sha256(text)[:16]``."""
    return hashlib.sha256(text.encode("utf-8")).digest()[:16]


def records_per_page(records: int, size: int) -> int:
    """The node cache's records per page of a shard (the page's formula)."""
    mean = size / max(records, 1)
    return min(max(2 ** round(math.log2(max(mean / 8, 1))), 16), 8192)


def cache_keys() -> list[dict[str, Any]]:
    """Key vectors of the node and data caches, computed from the page's formulas."""
    out: list[dict[str, Any]] = []
    for url, size, fp, crc in [
            ("s3://bucket/train.ofindex/part-00000.ofidx", 1 << 30, "etag:0f1e2d3c4b5a6978",
             0x1234ABCD),
            ("https://data.example.com/train.ofindex/part-1.ofidx", 77, "mtime:Tue, 01 Oct 2024 "
             "10:00:00 GMT", None),
            ("memory:///données/part-2.ofidx", 12, "created:1700000000.25", 0)]:
        version = key16(f"{url}\0{size}\0{fp}\0{crc}")
        base = {"index_url": url, "size": size, "fingerprint": fp, "body_crc": crc}
        out.append({"entry": "header", **base, "key": (version + b"header").hex()})
        out.append({"entry": "page", **base, "records_per_page": 64, "page": 3,
                    "key": (version + struct.pack("<iq", 64, 3)).hex()})
        name = hashlib.sha256(url.encode()).hexdigest()[:32] + ".ofidx"
        out.append({"entry": "whole sidecar", "index_url": url, "file": name,
                    "key": (b"file:" + name.encode()).hex()})
    for url, size, fp, digest in [("gs://bucket/train/part-0", 4096, "generation:17", 0xDEADBEEF),
                                  ("/data/part-1", 0, "", 0)]:
        key = key16(f"identity\0{url}\0{size}\0{fp}\0{digest}") + b"identity"
        out.append({"entry": "identity", "url": url, "size": size, "fingerprint": fp,
                    "digest": digest, "key": key.hex(),
                    "data": hashlib.sha256(b"identity checked\0" + key).digest()[:16].hex()})
    out.append({"entry": "compact stamps", "manifest_url":
                "gs://bucket/train.ofindex/ofindex-manifest.bin", "head_crc": 3735928559,
                "page": 2, "key": (key16("gs://bucket/train.ofindex/ofindex-manifest.bin"
                                         + "\0compact manifest\0" + str(3735928559))
                                   + struct.pack("<iq", -1, 2)).hex()})
    for url, size, fp, k in [("memory:///data/part-0.tfrecord", 3_000_000,
                              "created:1700000000.5", 2),
                             ("s3://bucket/a b/part-1", 5, "etag:x", 0)]:
        key = key16(f"{url}\0{size}\0{fp}\0{1 << 20}\0{k}")
        out.append({"entry": "block", "url": url, "size": size, "fingerprint": fp,
                    "block_bytes": 1 << 20, "block": k, "key": key.hex(),
                    "file": key.hex() + ".ofblock"})
    for directory in ("/ofx-conformance/data/train", "/ofx-conformance/données d'été",
                      "/ofx-conformance/a~b_c.d-e/%41", "/ofx-conformance/" + "x" * 200):
        raw = directory.encode("utf-8")
        name = "".join(chr(b) if chr(b).isascii() and (chr(b).isalnum() or chr(b) in "_.-~")
                       else f"%{b:02X}" for b in raw)
        if len(name) > 200:
            name = "long-" + hashlib.sha256(raw).hexdigest()
        out.append({"entry": "index cache", "directory": directory, "name": name})
    for records, size in [(2000, 56000), (10, 10**9), (1, 16), (1000, 1_000_000), (0, 0)]:
        out.append({"entry": "records per page", "records": records, "size": size,
                    "records_per_page": records_per_page(records, size)})
    return out


def block_file(key: bytes, payload: bytes) -> bytes:
    """A data cache block file."""
    head = struct.pack("<8s16sQI", b"OFIXBLK1", key, len(payload), crc32c.crc32c(payload))
    return head + struct.pack("<I", crc32c.crc32c(head)) + payload


def block_cases(c: Corpus) -> list[dict[str, Any]]:
    """Data cache block files, valid and damaged, and what a reader asking for them gets."""
    key = key16(f"memory:///data/part-0.tfrecord\0{3_000_000}\0created:1700000000.5\0"
                f"{1 << 20}\0{2}")
    payload = bytes(random.Random(51).randrange(256) for _ in range(300))
    good = block_file(key, payload)
    other = key16("another block")
    cases = [("valid", good, key, True, True), ("valid-unchecked", good, key, False, True),
             ("payload-flipped", flip(100)(good), key, True, False),
             ("payload-flipped-unchecked", flip(100)(good), key, False, True),
             ("head-crc", flip(30)(good), key, False, False),
             ("magic", flip(0)(good), key, False, False),
             ("another-key", good, other, False, False),
             ("short", good[:-1], key, False, False),
             ("long", good + b"\0", key, False, False)]
    out = []
    for name, raw, asked, check, hit in cases:
        rel = f"blocks/{name}/{asked.hex()}.ofblock"
        c.write("", rel, raw, data_file=False)
        out.append({"name": name, "file": rel, "key": asked.hex(), "length": len(payload),
                    "check_data": check,
                    "payload_crc32c": int(crc32c.crc32c(raw[40:])) if hit else None})
    return out


def text_cases(c: Corpus) -> list[dict[str, Any]]:
    """Text indexes (``offset length`` lines) of two data files, and what a reader importing
    them gets: the spans, or the category of the refusal."""
    tf = [b"a", b"bcd", b""]
    tf_data = b"".join(tfrecord(p) for p in tf)  # spans of 17, 19 and 16 bytes
    of = [b"xy", b"", b"z"]
    of_data = b"".join(ofrecord(p) for p in of)  # spans of 10, 8 and 9 bytes
    bad = bytearray(tf_data)
    bad[17 + 8] ^= 1  # record 1's length CRC
    c.write("", "text/records.tfrecord", tf_data, data_file=False)
    c.write("", "text/records.ofrecord", of_data, data_file=False)
    c.write("", "text/damaged.tfrecord", bytes(bad), data_file=False)
    spans = [[0, 17], [17, 19], [36, 16]]
    vectors: list[tuple[str, str, bytes, list[list[int]] | str]] = [
        ("valid", "records.tfrecord", b"0 17\n17 19\n36 16\n", spans),
        ("valid-no-last-newline", "records.tfrecord", b"0 17\n17 19\n36 16", spans),
        ("valid-whitespace", "records.tfrecord",
         b"  0\t17\r\n017  19\r\n36 0016 \r\n\n\n", spans),
        ("valid-ofrecord", "records.ofrecord", b"0 10\n10 8\n18 9\n",
         [[0, 10], [10, 8], [18, 9]]),
        ("empty-data", "empty.tfrecord", b"", []),
        ("gap", "records.tfrecord", b"0 17\n18 18\n36 16\n", "stale"),
        ("overlap", "records.tfrecord", b"0 17\n16 20\n36 16\n", "stale"),
        ("not-at-zero", "records.tfrecord", b"1 16\n17 19\n36 16\n", "stale"),
        ("past-the-end", "records.tfrecord", b"0 17\n17 19\n36 17\n", "stale"),
        ("a-line-missing", "records.tfrecord", b"0 17\n17 19\n", "stale"),
        ("other-framing", "records.tfrecord", b"0 19\n19 17\n36 16\n", "stale"),
        ("shorter-than-framing", "records.ofrecord", b"0 7\n7 11\n18 9\n", "sidecar"),
        ("not-a-number", "records.tfrecord", b"0 17\n17 x9\n36 16\n", "sidecar"),
        ("negative", "records.tfrecord", b"0 17\n17 19\n36 -16\n", "sidecar"),
        ("too-large", "records.tfrecord", b"0 17\n17 19\n36 %d\n" % 2**63, "sidecar"),
        ("three-fields", "records.tfrecord", b"0 17\n17 19 1\n36 16\n", "sidecar"),
        ("blank-line", "records.tfrecord", b"0 17\n\n17 19\n36 16\n", "sidecar"),
        ("oversized", "records.tfrecord", b"0 17\n17 19\n36 16\n" + b"\n" * 4500, "sidecar"),
        ("damaged-record", "damaged.tfrecord", b"0 17\n17 19\n36 16\n", "record"),
    ]
    c.write("", "text/empty.tfrecord", b"", data_file=False)
    out = []
    for name, data, text, want in vectors:
        c.write("", f"text/{name}.idx", text, data_file=False)
        out.append({"name": name, "data": f"text/{data}", "text": f"text/{name}.idx",
                    **({"spans": want} if isinstance(want, list) else {"refused": want})})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "conformance"),
                        help="the corpus directory (its cases/ and expected.json are replaced)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="ofx-conformance-")
    try:
        corpus = Corpus(work)
        for make in (plain_cases, gzip_cases, old_cases, manifest_cases, set_cases):
            make(corpus)
        for make in (sidecar_damage, compressed_damage, data_damage, manifest_damage,
                     compact_damage):
            make(corpus)
        blocks = block_cases(corpus)
        texts = text_cases(corpus)
        for name in ("cases", "expected.json"):
            target = os.path.join(args.out, name)
            if os.path.isdir(target):
                shutil.rmtree(target)
            elif os.path.exists(target):
                os.unlink(target)
        shutil.copytree(os.path.join(work, "cases"), os.path.join(args.out, "cases"),
                        copy_function=shutil.copy2)
        with open(os.path.join(args.out, "expected.json"), "w", encoding="utf-8") as f:
            json.dump({"data_mtime_ns": T_NS, "zlib": zlib.ZLIB_RUNTIME_VERSION,
                       "cases": corpus.cases, "cache_keys": cache_keys(), "blocks": blocks,
                       "text_indexes": texts},
                      f, indent=1, ensure_ascii=False)
            f.write("\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
