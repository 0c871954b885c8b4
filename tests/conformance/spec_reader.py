"""A reader of ofindex's files written from docs/format.md alone, for local datasets.

It imports nothing of ofindex (tests/formats/test_conformance.py checks it): the Python standard
library, numpy, zlib and crc32c. Where it needed more than the page said, the page was
completed. It reads every structure the page specifies: data files (TFRecord, OFRecord, GZIP
and ZLIB), sidecars of versions 1 to 3 with their seek points (inflated with Python's zlib,
which has no ``inflatePrime``: the page's lead-in of empty deflate blocks), JSON manifests of
versions 1 to 3 and compact manifests, the placement of index files, the order of shards, the
identity of data files and of datasets.

A refusal is a :class:`Refused` of one of the conformance suite's categories: ``sidecar``,
``stale``, ``manifest``, ``record``, ``incomplete`` (a set of shards that lacks some), and
``missing`` for a shard without a sidecar. It also imports text indexes
(:func:`read_text_index`) and names the per-user index cache's entries.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import math
import os
import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_from_bytes

import crc32c
import numpy as np

TFRECORD, OFRECORD = 1, 2
OVERHEAD = {TFRECORD: 16, OFRECORD: 8}
HEADER_BYTES = {TFRECORD: 12, OFRECORD: 8}
SKIPPED_SUFFIXES = (".ofidx", ".ofcol", ".ofkey", ".idx", ".index", ".tmp", ".json", ".crc")
DOCUMENT_PREFIXES = ("readme", "license", "licence", "copying", "citation")
DOCUMENT_SUFFIXES = (".txt", ".md", ".rst", ".csv", ".tsv", ".yaml", ".yml", ".pbtxt", ".html",
                     ".pdf", ".py", ".ipynb")
JSON_NAME, COMPACT_NAME = "ofindex-manifest.json", "ofindex-manifest.bin"
LIMIT = 1 << 62
CLAIM = ".ofindex-publishing"
OF_N = re.compile(r"(.*?)(\d+)-of-(\d+)(.*)", re.DOTALL)


class Refused(Exception):
    """A file refused, in one of the suite's categories."""

    def __init__(self, category: str, why: str) -> None:
        super().__init__(f"{category}: {why}")
        self.category = category


def masked_crc(data: bytes) -> int:
    c = crc32c.crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


# -- identity of a data file -----------------------------------------------------------------

def content_digest(path: str) -> int:
    size = os.path.getsize(path)
    if size <= 3 * 4096:
        regions = [(0, size)]
    else:
        middle = (size - 4096) // 2
        regions = [(0, 4096), (middle, middle + 4096), (size - 4096, size)]
    crc = crc32c.crc32c(struct.pack("<Q", size))
    with open(path, "rb") as f:
        for start, end in regions:
            f.seek(start)
            crc = crc32c.crc32c(f.read(end - start), crc)
    return int(crc)


def check_stamp(path: str, size: int, fingerprint: str, digest: int | None) -> None:
    """The page's four steps, for a local file (fingerprint ``mtime_ns``)."""
    st = os.stat(path)
    now = f"mtime_ns:{st.st_mtime_ns}"
    if st.st_size != size:
        raise Refused("stale", f"{path}: size {st.st_size}, indexed {size}")
    if fingerprint and fingerprint == now:
        return
    if digest is not None:
        if content_digest(path) != digest:
            raise Refused("stale", f"{path}: its content digest differs")
        return
    if fingerprint.partition(":")[0] == "mtime_ns":
        raise Refused("stale", f"{path}: its mtime_ns changed")


# -- sidecars --------------------------------------------------------------------------------

@dataclass
class Sidecar:
    version: int
    fmt: int
    flags: int
    count: int
    size: int
    end: int
    body_crc: int
    compression: int
    digest: int | None
    fingerprint: str
    usize: int
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, "<u8"))
    checksums: np.ndarray | None = None
    points: list[tuple[int, int, int, int, int, int, int]] = field(default_factory=list)
    windows: bytes = b""


def _fixed_header(raw: bytes) -> Sidecar:
    if len(raw) < 512:
        raise Refused("sidecar", "shorter than its header")
    (_, version, fmt, flags, hsize, count, size, end, body_crc, head_crc, comp, scheme, fplen,
     digest, m, wbytes, _, usize, packed) = struct.unpack_from("<8sHBBIQQQIIBBHIQQQQQ", raw)
    if hsize != 512 or crc32c.crc32c(raw[:44] + bytes(4) + raw[48:512]) != head_crc:
        raise Refused("sidecar", "header size or header CRC")
    if flags & 0xF8 or fplen > 416 or comp > 2 or bool(flags & 4) != (comp != 0):
        raise Refused("sidecar", "flags, fingerprint length or compression")
    fp = raw[96 : 96 + fplen].decode("utf-8", "replace")
    sidecar = Sidecar(version, fmt, flags, count, size, end, body_crc, comp,
                      digest if scheme == 1 else None, fp, usize)
    sidecar.points = [(m, wbytes, packed, 0, 0, 0, 0)]  # sizes, until the body is parsed
    return sidecar


def _v1_header(raw: bytes) -> tuple[Sidecar, int]:
    if len(raw) < 50:
        raise Refused("sidecar", "shorter than a version 1 header")
    (_, _, fmt, flags, hsize, count, size, end, body_crc, head_crc,
     fplen) = struct.unpack_from("<8sHBBIQQQIIH", raw)
    if hsize % 8 or hsize < 50 + fplen or hsize > len(raw):
        raise Refused("sidecar", "version 1 header size")
    if crc32c.crc32c(raw[:44] + bytes(4) + raw[48:hsize]) != head_crc:
        raise Refused("sidecar", "version 1 header CRC")
    fp = raw[50 : 50 + fplen].decode("utf-8", "replace")
    return Sidecar(1, fmt, flags & 1, count, size, end, body_crc, 0, None, fp, size), hsize


def _check_numbers(s: Sidecar) -> None:
    if s.fmt not in OVERHEAD:
        raise Refused("sidecar", f"record format {s.fmt}")
    compressed = s.compression != 0
    stream = s.usize if compressed else s.size
    if max(s.size, s.end, stream) > LIMIT or (compressed and stream > 1032 * s.size):
        raise Refused("sidecar", "impossible sizes")
    if s.end > stream or (not s.flags & 1 and not compressed and s.end != s.size):
        raise Refused("sidecar", "indexed end")
    if s.count * OVERHEAD[s.fmt] > s.end:
        raise Refused("sidecar", "a record count that cannot fit")


def _pad8(n: int) -> int:
    return (n + 7) // 8 * 8


def parse_sidecar(raw: bytes) -> Sidecar:
    if raw[:8] != b"OFINDEX\0" or len(raw) < 10:
        raise Refused("sidecar", "magic")
    version = struct.unpack_from("<H", raw, 8)[0]
    if version == 1:
        s, at = _v1_header(raw)
        _check_numbers(s)
        if len(raw) != at + 8 * s.count or crc32c.crc32c(raw[at:]) != s.body_crc:
            raise Refused("sidecar", "version 1 body")
        s.offsets = np.frombuffer(raw, "<u8", s.count, at)
        return s
    if version not in (2, 3):
        raise Refused("sidecar", f"version {version}")
    s = _fixed_header(raw)
    s.version = version
    m, wbytes, packed = s.points[0][:3]
    s.points = []
    _check_numbers(s)
    if (m or wbytes or version == 3) and not s.compression:
        raise Refused("sidecar", "seek points or packed offsets for an uncompressed file")
    offsets_len = 8 * s.count if version == 2 else _pad8(packed)
    sums_len = _pad8(4 * s.count) if s.flags & 2 else 0
    if len(raw) != 512 + offsets_len + sums_len + 32 * m + wbytes:
        raise Refused("sidecar", "its size is not its sections'")
    if crc32c.crc32c(raw[512:]) != s.body_crc:
        raise Refused("sidecar", "body CRC")
    if version == 2:
        s.offsets = np.frombuffer(raw, "<u8", s.count, 512)
    else:
        s.offsets = unpack_offsets(raw[512 : 512 + packed], raw[512 + packed : 512 + offsets_len],
                                   s.count, s.end)
    at = 512 + offsets_len
    if s.flags & 2:
        s.checksums = np.frombuffer(raw, "<u4", s.count, at)
    at += sums_len
    s.points = [struct.unpack_from("<QQBBHIQ", raw, at + 32 * k) for k in range(m)]
    s.windows = raw[at + 32 * m :]
    if s.compression:
        check_points(s)
    return s


def unpack_offsets(blob: bytes, padding: bytes, count: int, end: int) -> np.ndarray:
    if any(padding):
        raise Refused("sidecar", "padding after the packed offsets")
    d = zlib.decompressobj()
    try:
        raw = d.decompress(blob, 8 * count + 1)
    except zlib.error:
        raise Refused("sidecar", "packed offsets are not a zlib stream") from None
    if len(raw) != 8 * count or not d.eof or d.unused_data or d.unconsumed_tail:
        raise Refused("sidecar", "packed offsets of another length")
    deltas = np.frombuffer(raw, np.uint8).reshape(8, count).T.copy().view("<u8").ravel()
    offsets = np.cumsum(deltas, dtype=np.uint64)
    if count and (np.any(offsets[1:] < offsets[:-1]) or int(offsets[-1]) > end):
        raise Refused("sidecar", "packed offsets wrap or pass the indexed end")
    return offsets


def check_points(s: Sidecar) -> None:
    pts = s.points
    if not pts:
        raise Refused("sidecar", "a compressed file without seek points")
    if pts[0][0] or pts[0][1] or pts[0][3] not in (1, 2):
        raise Refused("sidecar", "the first seek point is not the file's start")
    for k, (out, in_, bits, kind, _, wlen, wat) in enumerate(pts):
        if k and (out < pts[k - 1][0] or in_ < pts[k - 1][1]):
            raise Refused("sidecar", "seek points out of order")
        if in_ > s.size or out > s.usize or kind > 3 or bits > 7:
            raise Refused("sidecar", "a seek point past the data, or of a bad kind")
        if (kind and (bits or wlen)) or (kind == 0 and bits and in_ == 0):
            raise Refused("sidecar", "a seek point's bits or window")
        if wat + wlen > len(s.windows):
            raise Refused("sidecar", "a window outside the blob")


def window(s: Sidecar, k: int) -> bytes:
    out, _, _, _, _, wlen, wat = s.points[k]
    if not wlen:
        return b""
    d = zlib.decompressobj()
    try:
        got = d.decompress(s.windows[wat : wat + wlen], 32769)
    except zlib.error:
        got = b""
    if not d.eof or not got or len(got) > min(32768, out):
        raise Refused("sidecar", f"the window of seek point {k}")
    return got


# -- inflating from a seek point -------------------------------------------------------------

def _bits(value: int, n: int) -> list[int]:
    return [(value >> i) & 1 for i in range(n)]


EMPTY_FIXED = [0, 1, 0] + [0] * 7
EMPTY_DYNAMIC = (
    [0, 0, 1] + _bits(0, 5) + _bits(0, 5) + _bits(15, 4)
    + [b for sym in (16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15)
       for b in _bits(1 if sym in (1, 18) else 0, 3)]
    + [1, *_bits(127, 7), 1, *_bits(107, 7)] + [0, 0, 0])


def lead_in(bits: int, byte: int) -> bytes:
    t = 8 - bits
    blocks = (EMPTY_FIXED * (t // 2) if t % 2 == 0
              else EMPTY_DYNAMIC + EMPTY_FIXED * (((t - 5) % 8) // 2))
    whole = bytes(sum(blocks[8 * i + j] << j for j in range(8)) for i in range(len(blocks) // 8))
    last = sum(blocks[len(blocks) - t + j] << j for j in range(t))
    return whole + bytes([(byte & ~((1 << t) - 1) & 0xFF) | last])


def starts_stream(head: bytes, compression: int) -> bool:
    if compression == 1:
        return len(head) >= 10 and head[:3] == b"\x1f\x8b\x08" and not head[3] & 0xE0
    if len(head) < 2:
        return False
    cmf, flg = head[0], head[1]
    return cmf & 15 == 8 and cmf >> 4 <= 7 and (cmf * 256 + flg) % 31 == 0 and not flg & 0x20


def inflate(data: bytes, s: Sidecar, k: int, want: int) -> bytes:
    """``want`` uncompressed bytes from seek point ``k`` (fewer where the data fails)."""
    _, in_, bits, kind, _, _, _ = s.points[k]
    wbits = 31 if s.compression == 1 else 15
    raw = kind in (0, 3)
    if raw:
        hist = window(s, k) if kind == 0 else b""
        d = zlib.decompressobj(-15, zdict=hist) if hist else zlib.decompressobj(-15)
        src = (lead_in(bits, data[in_ - 1]) if bits else b"") + data[in_:]
    else:
        d, src = zlib.decompressobj(wbits), data[in_:]
    got = bytearray()
    while len(got) < want:
        try:
            got += d.decompress(src, want - len(got))
        except zlib.error:
            break
        if not d.eof:
            src = d.unconsumed_tail
            if not src:
                break
            continue
        rest = d.unused_data
        if raw:  # entered raw: the trailer is skipped, unchecked
            rest = rest[8 if s.compression == 1 else 4 :]
            raw = False
        if not starts_stream(rest[:10], s.compression):
            break
        d, src = zlib.decompressobj(wbits), rest
    return bytes(got)


# -- data files ------------------------------------------------------------------------------

def unframe(span: bytes, fmt: int, stored_sum: int | None) -> bytes:
    if fmt == TFRECORD:
        length, len_crc = struct.unpack_from("<QI", span)
        if len_crc != masked_crc(span[:8]):
            raise Refused("record", "length CRC")
        if length != len(span) - 16:
            raise Refused("sidecar", "a length that is not the span's")
        payload = span[12:-4]
        if struct.unpack_from("<I", span, len(span) - 4)[0] != masked_crc(payload):
            raise Refused("record", "data CRC")
        return payload
    (length,) = struct.unpack_from("<q", span)
    if length != len(span) - 8:
        raise Refused("sidecar", "a length that is not the span's")
    payload = span[8:]
    if stored_sum is not None and crc32c.crc32c(payload) != stored_sum:
        raise Refused("record", "checksum")
    return payload


# -- manifests -------------------------------------------------------------------------------

GOOD_PART = re.compile(r"[^/\\\x00]+")


def good_name(name: str) -> bool:
    return bool(name) and all(GOOD_PART.fullmatch(p) and p not in (".", "..")
                              for p in name.split("/"))


@dataclass
class Row:
    name: str
    records: int
    size: int
    fingerprint: str
    body_crc: int | None


@dataclass
class Manifest:
    fmt: int
    data_dir: str
    index_dir: str | None
    rows: list[Row]
    identity: str | None
    kind: str


def _int_list(values: Any) -> bool:
    return type(values) is list and all(type(v) is int for v in values)


def _str_list(values: Any) -> bool:
    return type(values) is list and all(type(v) is str for v in values)


def _json_doc(raw: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError:
        raise Refused("manifest", "not JSON") from None
    if type(doc) is not dict or type(doc.get("shards")) is not dict:
        raise Refused("manifest", "not a manifest")
    version = doc.get("ofindex_manifest")
    if type(version) is not int:
        raise Refused("manifest", "no version")
    if version >= 2:
        stored = doc.pop("crc32c", None)
        text = json.dumps(doc, separators=(",", ":")).encode()
        if type(stored) is not int or stored != crc32c.crc32c(text):
            raise Refused("manifest", "checksum")
    if version not in (1, 2, 3):
        raise Refused("manifest", f"version {version}")
    return doc


def _json_columns(doc: dict[str, Any]) -> list[Row]:
    shards = doc["shards"]
    names, records, sizes, fps = (shards.get(k) for k in ("name", "records", "size",
                                                         "fingerprint"))
    crcs = shards.get("body_crc")
    comps = shards.get("compression", [""] * len(names or []))
    if not (_str_list(names) and _int_list(records) and _int_list(sizes) and _str_list(fps)
            and _str_list(comps) and (crcs is None or _int_list(crcs))):
        raise Refused("manifest", "columns of other types")
    n = len(names)
    if {len(records), len(sizes), len(fps), len(comps), len(crcs or names)} != {n}:
        raise Refused("manifest", "columns of other lengths")
    if any(c.lower() not in ("", "none", "gzip", "gz", "zlib") for c in comps):
        raise Refused("manifest", "compression")
    if len(set(names)) != n or not all(map(good_name, names)):
        raise Refused("manifest", "a name twice, or outside the data directory")
    if n and (min(records) < 0 or min(sizes) < 0 or max(sizes) > LIMIT or sum(records) > LIMIT):
        raise Refused("manifest", "counts or sizes")
    if crcs is not None and n and not 0 <= min(crcs) <= max(crcs) < 2**32:
        raise Refused("manifest", "body CRCs")
    return [Row(names[k], records[k], sizes[k], fps[k], None if crcs is None else crcs[k])
            for k in range(n)]


def _format(name: Any) -> int:
    if type(name) is not str:
        raise Refused("manifest", "format")
    plain = name.lower().replace("-", "").replace("_", "")
    if plain not in ("tfrecord", "ofrecord"):
        raise Refused("manifest", "format")
    return TFRECORD if plain == "tfrecord" else OFRECORD


def sibling_data_dir(index_dir: str) -> str | None:
    parent, name = os.path.split(index_dir.rstrip("/"))
    if name == ".ofindex":
        return parent
    if name.endswith(".ofindex") and len(name) > len(".ofindex"):
        return index_dir.rstrip("/")[: -len(".ofindex")]
    return None


def directories(here: str, data_dir: Any, index_dir: Any, layout: Any) -> tuple[str, str | None]:
    if any(v is not None and type(v) is not str for v in (data_dir, index_dir)):
        raise Refused("manifest", "directories")
    if layout is not None:
        if layout != "sibling":
            raise Refused("manifest", "layout")
        return sibling_data_dir(here) or here, here
    return data_dir or here, index_dir


def read_json_manifest(path: str) -> Manifest:
    with open(path, "rb") as f:
        doc = _json_doc(f.read())
    rows = _json_columns(doc)
    fmt = _format(doc.get("format"))
    data_dir, index_dir = directories(os.path.dirname(path), doc.get("data_dir"),
                                      doc.get("index_dir"), doc.get("layout"))
    partial = doc.get("partial", [])
    identity = doc.get("identity")
    if not _str_list(partial) or not set(partial) <= {r.name for r in rows}:
        raise Refused("manifest", "partial")
    if identity is not None and not (type(identity) is str
                                     and re.fullmatch("[0-9a-f]{16}", identity)):
        raise Refused("manifest", "identity")
    if identity is None:
        known = all(r.body_crc is not None for r in rows)
        identity = dataset_identity([(r.records, r.size, r.body_crc or 0, 2 if known else 0)
                                     for r in rows])
    return Manifest(fmt, data_dir, index_dir, rows, identity, "json")


def _strings(block: bytes, r: int) -> list[str]:
    if len(block) < 4 * (r + 1):
        raise Refused("manifest", "string block cut short")
    ends = struct.unpack_from(f"<{r + 1}I", block)
    text = block[4 * (r + 1) :]
    if ends[0] or ends[-1] != len(text) or any(
            b < a or b - a > 4096 for a, b in itertools.pairwise(ends)):
        raise Refused("manifest", "string block")
    return [text[a:b].decode("utf-8", "replace") for a, b in itertools.pairwise(ends)]


def _directory(raw: bytes, at: int, end: int) -> tuple[str | None, int]:
    if at + 4 > end:
        raise Refused("manifest", "directories cut short")
    (n,) = struct.unpack_from("<I", raw, at)
    if n == 0xFFFFFFFF:
        return None, at + 4
    if at + 4 + n > end:
        raise Refused("manifest", "directories cut short")
    try:
        return raw[at + 4 : at + 4 + n].decode("utf-8"), at + 4 + n
    except UnicodeDecodeError:
        raise Refused("manifest", "a directory that is not UTF-8") from None


def _compact_head(raw: bytes) -> tuple[Any, ...]:
    if len(raw) < 64 or raw[:8] != b"OFMANIF\0":
        raise Refused("manifest", "magic")
    (_, version, fmt, layout, hsize, n, total, total_bytes, ncols,
     head_crc) = struct.unpack_from("<8sHBBIQQQII", raw)
    if version != 1 or hsize < 64 or hsize > len(raw):
        raise Refused("manifest", "version or head size")
    if crc32c.crc32c(raw[:44] + bytes(4) + raw[48:hsize]) != head_crc:
        raise Refused("manifest", "head CRC")
    if fmt not in OVERHEAD or layout > 1 or n > LIMIT or total > LIMIT or ncols > 64:
        raise Refused("manifest", "header fields")
    identity = raw[48:56].hex() if raw[56] == 1 else None
    return fmt, layout, hsize, n, total, total_bytes, ncols, identity


def _compact_pages(raw: bytes, hsize: int, n: int, ncols: int) -> tuple[dict[int, Any], int]:
    table_at = 64 + 16 * ncols
    if table_at > hsize:
        raise Refused("manifest", "column table")
    entries = [struct.unpack_from("<BBHIII", raw, 64 + 16 * c) for c in range(ncols)]
    npages = sum(e[5] for e in entries)
    if table_at + 16 * npages > hsize:
        raise Refused("manifest", "page table cut short")
    columns: dict[int, Any] = {}
    for cid, codec, _, rows, first, count in entries:
        if cid in columns or codec > 1 or rows < 1 or count != -(-n // rows) or \
                first + count > npages:
            raise Refused("manifest", f"column {cid}")
        pages = [struct.unpack_from("<QII", raw, table_at + 16 * p)
                 for p in range(first, first + count)]
        if any(off < hsize or off + length > len(raw) for off, length, _ in pages):
            raise Refused("manifest", "a page outside the file")
        columns[cid] = (codec, rows, pages)
    if any(c not in columns for c in (1, 2, 3, 4, 5)):
        raise Refused("manifest", "a column missing")
    return columns, table_at + 16 * npages


EXPANSION, SLACK = 256, 65536  # the page's bounds on what a compact manifest inflates to


def _page(raw: bytes, column: Any, p: int, bound: int, strings: bool = False) -> bytes:
    codec, _, pages = column
    off, length, crc = pages[p]
    stored = raw[off : off + length]
    if len(stored) != length or crc32c.crc32c(stored) != crc:
        raise Refused("manifest", "a page's CRC")
    if codec == 0:
        return stored
    if strings:
        bound = min(bound, EXPANSION * length + SLACK)
    d = zlib.decompressobj()
    try:
        got = d.decompress(stored, bound + 1)
    except zlib.error:
        got = b"x" * (bound + 1)
    if len(got) > bound or not d.eof:
        raise Refused("manifest", "a page that does not inflate to its rows")
    return got


def _column_values(raw: bytes, columns: dict[int, Any], cid: int, n: int) -> list[Any]:
    _, rows, pages = columns[cid]
    values: list[Any] = []
    for p in range(len(pages)):
        r = min(rows, n - p * rows)
        if cid in (1, 2, 3):
            width = 1 if cid == 3 else 8
            got = _page(raw, columns[cid], p, width * r)
            if len(got) != width * r:
                raise Refused("manifest", "a page of other length")
            values += list(got) if cid == 3 else list(struct.unpack(f"<{r}Q", got))
        elif cid == 4:
            values += _strings(_page(raw, columns[cid], p, 4 * (r + 1) + 4096 * r, True), r)
        else:
            got = _page(raw, columns[cid], p, 4 * r + 4 * (r + 1) + 4096 * r, True)
            if len(got) < 4 * r:
                raise Refused("manifest", "stamps page cut short")
            values += list(zip(struct.unpack_from(f"<{r}I", got), _strings(got[4 * r :], r),
                               strict=True))
    return values


def read_compact_manifest(path: str) -> Manifest:
    with open(path, "rb") as f:
        raw = f.read()
    fmt, layout, hsize, n, total, total_bytes, ncols, identity = _compact_head(raw)
    columns, at = _compact_pages(raw, hsize, n, ncols)
    eager = hsize + sum(length for c in (1, 2, 3, 4) for _, length, _ in columns[c][2])
    if 21 * n > EXPANSION * eager + SLACK:
        raise Refused("manifest", "more shards than its bytes can hold")
    data_dir, at = _directory(raw, at, hsize)
    index_dir, at = _directory(raw, at, hsize)
    records, sizes, flags, names, stamps = (_column_values(raw, columns, c, n)
                                            for c in (1, 2, 3, 4, 5))
    if any(v > LIMIT for v in records + sizes) or any(f & 3 == 3 for f in flags):
        raise Refused("manifest", "counts, sizes or compression")
    if sum(records) != total or sum(sizes) != total_bytes:
        raise Refused("manifest", "columns that do not add up to the totals")
    if not all(map(good_name, names)):
        raise Refused("manifest", "a name outside the data directory")
    data_dir, index_dir = directories(os.path.dirname(path), data_dir, index_dir,
                                      "sibling" if layout else None)
    rows = [Row(names[k], records[k], sizes[k], stamps[k][1],
                stamps[k][0] if flags[k] & 8 else None) for k in range(n)]
    if identity is None:
        identity = dataset_identity([(r.records, r.size, 0, 0) for r in rows])
    return Manifest(fmt, data_dir, index_dir, rows, identity, "compact")


def dataset_identity(rows: list[tuple[int, int, int, int]]) -> str:
    h = hashlib.sha256(b"ofindex dataset identity 1\0")
    for row in rows:
        h.update(struct.pack("<QQII", *row))
    return h.hexdigest()[:16]


# -- a dataset -------------------------------------------------------------------------------

def index_dir_of(directory: str) -> str:
    directory = os.path.abspath(directory)
    if os.path.dirname(directory) == directory:
        return os.path.join(directory, ".ofindex")
    return directory.rstrip("/") + ".ofindex"


def user_cache_entry(directory: str) -> str:
    """The per-user index cache's entry of a local directory."""
    root = os.environ.get("OFINDEX_INDEX_CACHE", "")
    if not os.path.isabs(root):
        base = os.environ.get("XDG_CACHE_HOME", "")
        if not os.path.isabs(base):
            base = os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "ofindex", "indexes")
    path = os.fsencode(os.path.realpath(directory))
    name = quote_from_bytes(path, safe="")
    if len(name) > 200:
        name = "long-" + hashlib.sha256(path).hexdigest()
    return os.path.join(root, name)


def check_whole(names: list[str], directories: list[str]) -> None:
    """Refuse a set of shards whose names count them and lack some, or whose directories hold
    a writer's claim."""
    for directory in directories:
        if os.path.lexists(os.path.join(directory, CLAIM)):
            raise Refused("incomplete", f"{directory} holds a writer's claim")
    families: dict[tuple[str, str], set[int]] = {}
    for name in names:
        match = OF_N.fullmatch(name)
        if match is not None:
            families.setdefault((match[1], match[3]), set()).add(int(match[2]))
    for (head, count), numbers in families.items():
        n = int(count)
        first = 1 if 0 not in numbers and n in numbers else 0
        if sum(1 for k in numbers if first <= k < first + n) != n:
            raise Refused("incomplete", f"the {head}…-of-{count} family lacks shards")


def natural_key(name: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def may_hold_records(head: bytes, size: int) -> bool:
    if size == 0:
        return True
    if len(head) >= 12 and struct.unpack_from("<I", head, 8)[0] == masked_crc(head[:8]):
        return True
    if len(head) >= 8 and 0 <= struct.unpack_from("<q", head)[0] <= size - 8:
        return True
    return starts_stream(head, 1) or starts_stream(head, 2)


def plainly_not_records(path: str, patterns: set[str]) -> bool:
    name = os.path.basename(path)
    lower = name.lower()
    if lower.startswith(DOCUMENT_PREFIXES) or lower.endswith(DOCUMENT_SUFFIXES):
        return True
    if "tfrecord" in lower or "ofrecord" in lower or re.sub("[0-9]+", "#", name) in patterns:
        return False
    with open(path, "rb") as f:
        head = f.read(16)
    return not may_hold_records(head, os.path.getsize(path))


def listed(directory: str) -> list[str]:
    names = [n for n in os.listdir(directory) if os.path.isfile(os.path.join(directory, n))
             and not n.startswith((".", "_")) and not n.endswith(SKIPPED_SUFFIXES)]
    return [os.path.join(directory, n) for n in sorted(names, key=natural_key)]


def shared_patterns(paths: list[str]) -> set[str]:
    patterns = [re.sub("[0-9]+", "#", os.path.basename(p)) for p in paths]
    return {p for p in patterns if patterns.count(p) > 1}


@dataclass
class Shard:
    data: str
    sidecar: str
    row: Row | None = None
    loaded: Sidecar | None = None


class Dataset:
    """An opened dataset: its shards and their record counts."""

    def __init__(self, shards: list[Shard], manifest: Manifest | None) -> None:
        self.shards, self.manifest = shards, manifest
        if manifest is not None:
            counts = [r.records for r in manifest.rows]
        else:
            counts = [self.load(s).count for s in shards]
        self.starts = list(np.cumsum([0, *counts]))

    def __len__(self) -> int:
        return int(self.starts[-1])

    def load(self, shard: Shard) -> Sidecar:
        if shard.loaded is None:
            if not os.path.isfile(shard.sidecar):
                raise Refused("missing", f"no sidecar for {shard.data}")
            with open(shard.sidecar, "rb") as f:
                sidecar = parse_sidecar(f.read())
            row = shard.row
            if row is not None and (
                    (sidecar.count, sidecar.size, sidecar.fingerprint)
                    != (row.records, row.size, row.fingerprint)
                    or (row.body_crc is not None and row.body_crc != sidecar.body_crc)):
                raise Refused("stale", f"{shard.sidecar} disagrees with the manifest")
            check_stamp(shard.data, sidecar.size, sidecar.fingerprint, sidecar.digest)
            shard.loaded = sidecar
        return shard.loaded

    def identity(self) -> str:
        if self.manifest is not None and self.manifest.identity is not None:
            return self.manifest.identity
        rows = []
        for shard in self.shards:
            s = self.load(shard)
            known = s.digest is not None
            rows.append((s.count, s.size, s.digest if known else s.body_crc, 1 if known else 2))
        return dataset_identity(rows)

    def __getitem__(self, i: int) -> bytes:
        k = bisect.bisect_right(self.starts, i) - 1
        shard = self.shards[k]
        s = self.load(shard)
        j = i - int(self.starts[k])
        start = int(s.offsets[j])
        end = int(s.offsets[j + 1]) if j + 1 < s.count else s.end
        if end > s.end or end < start or end - start < OVERHEAD[s.fmt]:
            raise Refused("sidecar", f"record {i}: an impossible span")
        with open(shard.data, "rb") as f:
            data = f.read()
        if s.compression:
            p = bisect.bisect_right([pt[0] for pt in s.points], start) - 1
            stream = inflate(data, s, p, end - s.points[p][0])
            span = stream[start - s.points[p][0] :]
            if len(span) != end - start:
                raise Refused("record", f"record {i}: the compressed data ends or fails")
        else:
            span = data[start:end]
        stored = None
        if s.checksums is not None and s.fmt == OFRECORD:
            stored = int(s.checksums[j])
        return unframe(span, s.fmt, stored)


def _found_manifest(directory: str) -> tuple[str, Manifest] | None:
    for place in (index_dir_of(directory), user_cache_entry(directory),
                  os.path.abspath(directory)):
        for name, read in ((COMPACT_NAME, read_compact_manifest),
                           (JSON_NAME, read_json_manifest)):
            path = os.path.join(place, name)
            if os.path.isfile(path):
                return place, read(path)
    return None


def _check_listing(directory: str, rows: list[Row]) -> None:
    top = {r.name for r in rows if "/" not in r.name}
    files = {os.path.basename(p): p for p in listed(directory)}
    patterns = {re.sub("[0-9]+", "#", r.name.rsplit("/")[-1]) for r in rows}
    new = [n for n in files.keys() - top if not plainly_not_records(files[n], patterns)]
    gone = (top - files.keys()) | {r.name for r in rows if "/" in r.name
                                   and not os.path.isfile(os.path.join(directory, r.name))}
    if new or gone:
        raise Refused("stale", f"the manifest does not list the files: {new} {gone}")


def open_dataset(path: str, use_manifest: bool = True) -> Dataset:
    """Open a local file or directory as the page says."""
    if os.path.isdir(path) and use_manifest:
        found = _found_manifest(path)
        if found is not None:
            place, m = found
            here = os.path.abspath(path)
            expected_index = None if place == here else place
            if os.path.abspath(m.data_dir) != here or m.index_dir != expected_index:
                raise Refused("sidecar", "a manifest of other directories")
            if m.kind == "json":
                check_whole([r.name for r in m.rows], [])
                _check_listing(here, m.rows)
            shards = [Shard(os.path.join(here, r.name),
                            os.path.join(m.index_dir, r.name.rsplit("/")[-1] + ".ofidx")
                            if m.index_dir else os.path.join(here, r.name + ".ofidx"), r)
                      for r in m.rows]
            return Dataset(shards, m)
    if os.path.isdir(path):
        files = listed(path)
        check_whole([os.path.basename(f) for f in files], [path])
    else:
        files = [path]
    first = files[0]
    places = [lambda f: os.path.join(index_dir_of(os.path.dirname(f)), os.path.basename(f)),
              lambda f: os.path.join(user_cache_entry(os.path.dirname(f)), os.path.basename(f)),
              lambda f: f]
    place = next((p for p in places if os.path.isfile(p(first) + ".ofidx")), places[0])

    def sidecar_of(f: str) -> str:
        return place(f) + ".ofidx"

    patterns = shared_patterns(files)
    shards = [Shard(f, sidecar_of(f)) for f in files
              if os.path.isfile(sidecar_of(f)) or f == path
              or not plainly_not_records(f, patterns)]
    return Dataset(shards, None)


# -- the node and data caches ----------------------------------------------------------------

def _key16(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()[:16]


def records_per_page(records: int, size: int) -> int:
    mean = size / max(records, 1)
    return min(max(2 ** round(math.log2(max(mean / 8, 1))), 16), 8192)


def cache_entry(v: dict[str, Any]) -> dict[str, Any]:
    """The key (and data, file or records per page) of a cache entry the vector ``v``
    describes, from the page's table."""
    kind = v["entry"]
    if kind in ("header", "page"):
        version = _key16(f"{v['index_url']}\0{v['size']}\0{v['fingerprint']}\0{v['body_crc']}")
        tail = b"header" if kind == "header" else struct.pack("<iq", v["records_per_page"],
                                                              v["page"])
        return {"key": (version + tail).hex()}
    if kind == "whole sidecar":
        name = hashlib.sha256(v["index_url"].encode()).hexdigest()[:32] + ".ofidx"
        return {"file": name, "key": (b"file:" + name.encode()).hex()}
    if kind == "identity":
        key = _key16(f"identity\0{v['url']}\0{v['size']}\0{v['fingerprint']}\0"
                     f"{v['digest']}") + b"identity"
        return {"key": key.hex(),
                "data": hashlib.sha256(b"identity checked\0" + key).digest()[:16].hex()}
    if kind == "compact stamps":
        key = _key16(f"{v['manifest_url']}\0compact manifest\0{v['head_crc']}")
        return {"key": (key + struct.pack("<iq", -1, v["page"])).hex()}
    if kind == "index cache":
        return {"name": os.path.basename(user_cache_entry(v["directory"]))}
    if kind == "block":
        key = _key16(f"{v['url']}\0{v['size']}\0{v['fingerprint']}\0{v['block_bytes']}\0"
                     f"{v['block']}")
        return {"key": key.hex(), "file": key.hex() + ".ofblock"}
    return {"records_per_page": records_per_page(v["records"], v["size"])}


def read_block(path: str, key: bytes, length: int, check_data: bool) -> bytes | None:
    """A data cache block's payload, or ``None`` for a miss."""
    if os.path.islink(path) or not os.path.isfile(path) or length == 0:
        return None
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) != 40 + length:
        return None
    magic, stored_key, stored_length, data_crc, head_crc = struct.unpack_from("<8s16sQII", raw)
    if (magic != b"OFIXBLK1" or stored_key != key or stored_length != length
            or head_crc != crc32c.crc32c(raw[:36])):
        return None
    payload = raw[40:]
    if check_data and crc32c.crc32c(payload) != data_crc:
        return None
    return payload


# -- text indexes ----------------------------------------------------------------------------

def detect_framing(data: bytes) -> int:
    """The framing of an uncompressed file, from its first bytes (the page's detection)."""
    if len(data) >= 12 and struct.unpack_from("<I", data, 8)[0] == masked_crc(data[:8]):
        return TFRECORD
    if starts_stream(data, 1) or starts_stream(data, 2):
        raise Refused("other", "a compressed file")
    if len(data) >= 8 and 0 <= struct.unpack_from("<q", data)[0] <= len(data) - 8:
        return OFRECORD
    if not data:
        return TFRECORD
    raise Refused("other", "neither framing")


def _text_lines(text: bytes, size: int) -> list[tuple[int, int]]:
    if len(text) > 64 * (size // 8) + 4096:
        raise Refused("sidecar", "larger than a text index of the data file")
    lines = text.split(b"\n")
    if any(len(line) > 65536 for line in lines):
        raise Refused("sidecar", "a line longer than 64 KiB")
    while lines and not lines[-1].strip():
        lines.pop()
    spans = []
    for line in lines:
        fields = line.split()  # ASCII whitespace
        if len(fields) != 2 or not all(f and all(48 <= c <= 57 for c in f) for f in fields):
            raise Refused("sidecar", f"not two whole numbers: {line!r}")
        offset, length = int(fields[0]), int(fields[1])
        if max(offset, length) > 2**63 - 1:
            raise Refused("sidecar", "a number above 2**63 - 1")
        spans.append((offset, length))
    return spans


def read_text_index(data_path: str, text_path: str) -> list[tuple[int, int]]:
    """The spans a text index gives for a data file, checked as the page says."""
    with open(data_path, "rb") as f:
        data = f.read()
    with open(text_path, "rb") as f:
        text = f.read()
    spans = _text_lines(text, len(data))
    fmt = detect_framing(data)
    at = 0
    for offset, length in spans:
        if offset == at and offset + length <= len(data) and length < OVERHEAD[fmt]:
            raise Refused("sidecar", "a span shorter than the framing")
        if offset != at or offset + length > len(data):
            raise Refused("stale", "spans that do not tile the data file")
        at = offset + length
    if at != len(data):
        raise Refused("stale", "the spans end before the data file")
    for offset, length in spans:  # the framing, record by record
        head = data[offset : offset + 12]
        if fmt == TFRECORD:
            if len(head) < 12 or struct.unpack_from("<I", head, 8)[0] != masked_crc(head[:8]):
                raise Refused("record", f"a damaged record at byte {offset}")
            framed = struct.unpack_from("<Q", head)[0] + 16
        else:
            framed = struct.unpack_from("<q", head)[0] + 8
        if framed < OVERHEAD[fmt] or offset + framed > len(data):
            raise Refused("record", f"a damaged record at byte {offset}")
        if framed != length:
            raise Refused("stale", f"the record at byte {offset} frames {framed} bytes")
    return spans
