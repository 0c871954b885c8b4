"""The column sidecar: one column of one shard, ``<data file name>.<column>.ofcol`` beside
the shard's sidecar (the format is specified in docs/format.md, "Column sidecar").

A header names the column, its value type and its record count, and the sidecar (by its
body CRC) whose records it describes; a dictionary of the column's distinct values follows
when one pays, then a directory of pages and the pages. Each page holds up to
``records per page`` consecutive records: their validity bitmap (when some lack the
feature) and their values, as byte planes (plain numbers, dictionary codes or int64
deltas) or lengths and data (bytes), deflated where that pays, and checked by its own
CRC32C. The directory gives each page's place, CRC, null count and the least and greatest
of its values, so that a query reads only the pages that may hold what it looks for: a
remote reader fetches the header, dictionary and directory with one request and then the
pages it needs.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import crc32c as _crc32c
import numpy as np

from ..errors import SidecarError
from . import page_codec
from .packed import PackedBytes
from .value_types import ValueType

MAGIC = b"OFCOLMN\0"
VERSION = 1
SUFFIX = ".ofcol"
#: Fixed part of the header; the column's name follows, padded to a multiple of 8 bytes.
FIXED_HEADER = 64
#: Longest column name, in UTF-8 bytes.
MAX_NAME = 1024
#: Records per page by default: 16,384 records are 16 KiB of one-byte dictionary codes or
#: 128 KiB of int64 values before deflating; a remote query fetches pages of that order.
RECORDS_PER_PAGE = 16384
#: A dictionary holds at most this many values (codes of at most two bytes).
MAX_DICTIONARY = 65536
#: The header's flags.
FLAG_DICTIONARY = 0x01
#: Page encodings.
PLAIN, CODES, DELTAS = 0, 1, 2

_HEAD = struct.Struct("<8sHBBHHQQIIQIIII")
DIRECTORY = np.dtype([("offset", "<u8"), ("stored", "<u4"), ("crc", "<u4"), ("raw", "<u4"),
                      ("nulls", "<u4"), ("encoding", "u1"), ("compression", "u1"),
                      ("reserved", "<u2"), ("reserved2", "<u4"), ("min", "V8"),
                      ("max", "V8")])
assert DIRECTORY.itemsize == 48 and _HEAD.size == FIXED_HEADER


@dataclasses.dataclass(frozen=True)
class ColumnHeader:
    """A column sidecar's header.

    Attributes:
        name: The column (the feature's name).
        vtype: Its value type.
        dictionary: Whether its pages hold dictionary codes.
        count: Records (the shard's).
        nulls: Records without a value.
        per_page: Records per page (the last page may hold fewer).
        pages: Number of pages.
        dictionary_bytes: Bytes of the dictionary section.
        dictionary_entries: Values in the dictionary.
        body_crc: The body CRC of the sidecar whose records these are.
        meta_crc: CRC32C of the dictionary and the directory.
        size: Bytes of the header.
    """

    name: str
    vtype: ValueType
    dictionary: bool
    count: int
    nulls: int
    per_page: int
    pages: int
    dictionary_bytes: int
    dictionary_entries: int
    body_crc: int
    meta_crc: int
    size: int

    @property
    def meta_end(self) -> int:
        """Where the directory ends (the first page starts)."""
        return self.size + self.dictionary_bytes + DIRECTORY.itemsize * self.pages

    @property
    def code_dtype(self) -> np.dtype[Any]:
        """The dtype of the pages' dictionary codes."""
        return np.dtype("u1") if self.dictionary_entries <= 256 else np.dtype("<u2")

    def records_in(self, page: int) -> int:
        """Records of page ``page``."""
        return min(self.per_page, self.count - page * self.per_page)


@dataclasses.dataclass(frozen=True)
class ColumnMeta:
    """What a reader holds of a column sidecar before reading pages: the header, the
    dictionary (or ``None``) and the directory."""

    header: ColumnHeader
    dictionary: np.ndarray | PackedBytes | None
    directory: np.ndarray
    url: str

    def page_range(self, page: int) -> tuple[int, int]:
        """Byte range ``[start, end)`` of page ``page`` in the file."""
        entry = self.directory[page]
        start = int(entry["offset"])
        return start, start + int(entry["stored"])


def name_part(column: str) -> str:
    """A column's name as it is written in file names: its UTF-8 bytes, every byte but ASCII
    letters, digits and ``_.-`` written ``~XX`` (two upper-case hexadecimal digits):
    ``image/id`` is ``image~2Fid``. (Not ``%XX``: a web server decodes ``%2F`` in a URL to
    the ``/`` of a directory, and ``~`` needs no escaping in a URL, a bucket's key or a file
    name.)"""
    return "".join(chr(b) if chr(b).isascii() and (chr(b).isalnum() or chr(b) in "_.-")
                   else f"~{b:02X}" for b in column.encode("utf-8"))


def column_file_name(data_name: str, column: str) -> str:
    """The column sidecar's name: ``<data file name>.<column>.ofcol``, the column's name
    written as :func:`name_part` says."""
    return f"{data_name}.{name_part(column)}{SUFFIX}"


def column_path(index_path: str, column: str) -> str:
    """The column sidecar beside the sidecar at ``index_path`` (``<...>.ofidx``)."""
    base = index_path[: -len(".ofidx")] if index_path.endswith(".ofidx") else index_path
    slash = base.rfind("/") + 1
    return base[:slash] + column_file_name(base[slash:], column)


# -- writing ------------------------------------------------------------------------------------
def pad8(data: bytes) -> bytes:
    """``data`` followed by zero bytes up to a multiple of 8: how a column sidecar and a key
    index align the parts after their fixed header (the column's name first)."""
    return data + bytes(-len(data) % 8)


#: A column's values: numbers, or packed bytes.
Values = np.ndarray | PackedBytes


def _stats(vtype: ValueType, values: Values) -> tuple[bytes, bytes]:
    """The least and greatest of the non-null ``values`` (NaN left out), as stored."""
    if isinstance(values, PackedBytes):
        if not len(values):
            return b"\xff" * 8, bytes(8)
        prefixes = values.prefixes()
        return (struct.pack(">Q", int(prefixes.min())), struct.pack(">Q", int(prefixes.max())))
    if vtype is ValueType.INT64:
        if not len(values):
            return struct.pack("<q", (1 << 63) - 1), struct.pack("<q", -(1 << 63))
        return struct.pack("<q", int(values.min())), struct.pack("<q", int(values.max()))
    finite = values[~np.isnan(values)]
    if not len(finite):
        return struct.pack("<d", np.inf), struct.pack("<d", -np.inf)
    return struct.pack("<d", float(finite.min())), struct.pack("<d", float(finite.max()))


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct ``values``, sorted (by sorting: numpy 2's hashing ``unique`` took 3.6 s
    for a million uint32 CRCs that a sort handles in 0.05 s)."""
    ordered = np.sort(values)
    if not len(ordered):
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    distinct: np.ndarray = ordered[keep]
    return distinct


def _small_range_codes(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(distinct values, code of each)`` of unsigned 64-bit ``bits`` (int64 values) that
    span at most :data:`MAX_DICTIONARY` numbers, found by marking them in a table of their
    span (a shard's 125,000 labels: 1 ms of CPU, where the sort and search take 8 ms); the
    same as sorting and searching them. ``None`` when they span more (or none are given)."""
    if not len(bits):
        return None
    low, high = int(bits.min()), int(bits.max())
    if high - low >= MAX_DICTIONARY:
        return None
    offsets = (bits - np.uint64(low)).astype(np.intp)
    seen = np.zeros(high - low + 1, dtype=bool)
    seen[offsets] = True
    distinct = (np.flatnonzero(seen).astype(np.uint64) + np.uint64(low))
    code_of = np.cumsum(seen, dtype=np.int64) - 1
    return distinct, code_of[offsets]


#: Low bits of the CRCs marked by :func:`_surely_too_many`: a table of 1 MiB.
_MARKED_BITS = 20


def _surely_too_many(crcs: np.ndarray) -> bool:
    """Whether ``crcs`` take more than :data:`MAX_DICTIONARY` distinct values, told without
    sorting them when their low :data:`_MARKED_BITS` bits alone do (as many distinct low bits
    as values at most): a shard's 125,000 distinct ids in 0.5 ms, where the sort of their
    CRCs took 12 ms; ``False`` leaves the count to the sort."""
    if len(crcs) <= MAX_DICTIONARY:
        return False
    seen = np.zeros(1 << _MARKED_BITS, dtype=bool)
    seen[crcs & np.uint32((1 << _MARKED_BITS) - 1)] = True
    return int(np.count_nonzero(seen)) > MAX_DICTIONARY


def _bytes_dictionary(values: PackedBytes, valid: np.ndarray
                      ) -> tuple[PackedBytes, np.ndarray, int] | None:
    """A dictionary of bytes values (see :func:`_dictionary`), or ``None`` when there are
    too many distinct ones (told from their CRC32Cs first: at least as many values as CRCs)."""
    present = values if valid.all() else values.take(np.flatnonzero(valid))
    crcs = present.crcs()
    if _surely_too_many(crcs) or len(_distinct(crcs)) > MAX_DICTIONARY:  # values >= CRCs
        return None
    items = present.tolist()
    distinct_list = sorted(set(items))
    if len(distinct_list) > MAX_DICTIONARY:
        return None
    code_of = {value: k for k, value in enumerate(distinct_list)}
    codes = np.zeros(len(valid), dtype=np.int64)
    codes[valid] = [code_of[value] for value in items]
    distinct = PackedBytes.from_list(distinct_list)
    size = 4 * len(distinct_list) + int(distinct.offsets[-1])
    return distinct, codes, size


def _dictionary(vtype: ValueType, values: Values, valid: np.ndarray
                ) -> tuple[Values, np.ndarray] | None:
    """``(distinct values, code of every record)`` when a dictionary pays: at most
    :data:`MAX_DICTIONARY` distinct values, and codes and dictionary at most half the size
    of the values."""
    if not valid.any():
        return None  # no value: nothing to look up
    distinct: Values
    if isinstance(values, PackedBytes):
        found = _bytes_dictionary(values, valid)
        if found is None:
            return None
        distinct, codes, size = found
        plain = 4 * len(values) + int(values.offsets[-1] - values.offsets[0])
    else:
        present = values[valid]
        bits = present.view(np.dtype(f"<u{vtype.width}"))
        coded = _small_range_codes(bits) if vtype is ValueType.INT64 else None
        if coded is None:
            unique_bits = _distinct(bits)  # exact: -0.0 and 0.0, NaNs of two patterns, differ
            if len(unique_bits) > MAX_DICTIONARY:
                return None
            # in the order of their bits, never through a float operation (a sort of floats
            # may quiet a signalling NaN: another value)
            present_codes = np.searchsorted(unique_bits, bits)
        else:
            unique_bits, present_codes = coded
        codes = np.zeros(len(values), dtype=np.int64)
        codes[valid] = present_codes
        plain = vtype.width * len(values)
        size = vtype.width * len(unique_bits)
        distinct = unique_bits.view(vtype.dtype)
    width = 1 if len(distinct) <= 256 else 2
    if size + width * len(valid) > plain // 2:
        return None
    return distinct, codes


def _dictionary_section(distinct: Values) -> bytes:
    if isinstance(distinct, PackedBytes):
        return pad8(page_codec.pack_bytes_values(distinct))
    return pad8(distinct.tobytes())


def _page(vtype: ValueType, values: Values, valid: np.ndarray,
          codes: np.ndarray | None, code_dtype: np.dtype[Any]) -> tuple[bytes, int, int, int]:
    """A page as stored: ``(bytes, raw size, encoding, compression)``."""
    head = page_codec.pack_bitmap(valid) if not valid.all() else b""
    if codes is not None:
        choices = [(CODES, page_codec.to_planes(codes.astype(code_dtype)))]
    elif isinstance(values, PackedBytes):
        choices = [(PLAIN, page_codec.pack_bytes_values(values))]
    else:
        choices = [(PLAIN, page_codec.to_planes(values.astype(vtype.dtype)))]
        if vtype is ValueType.INT64 and len(values) > 1:
            deltas = np.diff(values.astype(np.int64), prepend=np.int64(0))  # wraps: int64
            choices.append((DELTAS, page_codec.to_planes(deltas)))
    best: tuple[bytes, int, int, int] | None = None
    for encoding, body in choices:
        raw = head + body
        stored, compression = page_codec.deflate(raw)
        if best is None or len(stored) < len(best[0]):
            best = (stored, len(raw), encoding, compression)
    assert best is not None
    return best


def encode_column(name: str, vtype: ValueType, values: Values, valid: np.ndarray,
                  body_crc: int, *, per_page: int = RECORDS_PER_PAGE) -> list[bytes]:
    """A column sidecar's bytes.

    Args:
        name: The column.
        vtype: Its value type (``NONE`` when no record holds the feature).
        values: One value per record (any value where ``valid`` is false): numbers of the
            type's dtype, or :class:`~ofindex.columns.packed.PackedBytes`.
        valid: Which records hold a value.
        body_crc: The body CRC of the sidecar of the shard.
        per_page: Records per page.

    Returns:
        The file's parts, in order.

    Raises:
        ValueError: ``name`` is empty or too long, or a bytes value is 4 GiB or more.
    """
    encoded_name = name.encode("utf-8")
    if not 0 < len(encoded_name) <= MAX_NAME:
        raise ValueError(f"a column name has 1 to {MAX_NAME} UTF-8 bytes, not "
                         f"{len(encoded_name)}: {name!r}")
    count = len(valid)
    nulls = int(count - np.count_nonzero(valid))
    if vtype is ValueType.NONE:
        nulls = count
    pages = 0 if vtype is ValueType.NONE else -(-count // per_page)
    found = None if vtype is ValueType.NONE else _dictionary(vtype, values, valid)
    dictionary = b"" if found is None else _dictionary_section(found[0])
    code_dtype = np.dtype("u1") if found is None or len(found[0]) <= 256 else np.dtype("<u2")
    header_size = FIXED_HEADER + len(pad8(encoded_name))
    directory = np.zeros(pages, dtype=DIRECTORY)
    stored_pages = []
    at = header_size + len(dictionary) + DIRECTORY.itemsize * pages
    for k in range(pages):
        lo, hi = k * per_page, min(count, (k + 1) * per_page)
        page_valid = valid[lo:hi]
        codes = None if found is None else found[1][lo:hi]
        page_values = values[lo:hi]
        stored, raw_size, encoding, compression = _page(
            vtype, page_values, page_valid, codes, code_dtype)
        present = page_values if page_valid.all() else (
            page_values.take(np.flatnonzero(page_valid))
            if isinstance(page_values, PackedBytes) else page_values[page_valid])
        low, high = _stats(vtype, present)
        directory[k] = (at, len(stored), _crc32c.crc32c(stored), raw_size,
                        int((hi - lo) - np.count_nonzero(page_valid)), encoding, compression,
                        0, 0, low, high)
        stored_pages.append(stored)
        at += len(stored)
    meta = dictionary + directory.tobytes()
    flags = FLAG_DICTIONARY if found is not None else 0
    fields = [MAGIC, VERSION, int(vtype), flags, len(encoded_name), 0, count, nulls, per_page,
              pages, len(dictionary), 0 if found is None else len(found[0]), body_crc,
              _crc32c.crc32c(meta)]
    head = _HEAD.pack(*fields, 0) + pad8(encoded_name)
    head = _HEAD.pack(*fields, _crc32c.crc32c(head)) + head[FIXED_HEADER:]
    return [head, meta, *stored_pages]


# -- reading ------------------------------------------------------------------------------------
def corrupt(url: str, what: str, why: str) -> SidecarError:
    """The error for a damaged column file.

    Args:
        url: The file.
        what: What it is: ``"column sidecar"`` or ``"key index"``.
        why: What is wrong with it.

    Returns:
        The error (to raise), naming the command that builds it again.
    """
    return SidecarError(f"{url}: the {what} is corrupt ({why}); rebuild it with "
                        "`ofindex build --columns ...`")


def _corrupt(url: str, why: str) -> SidecarError:
    return corrupt(url, "column sidecar", why)


def named_header_size(prefix: bytes | memoryview, url: str, *, magic: bytes, fixed: int,
                      what: str) -> int:
    """The size of a column file's header, from its first ``fixed`` bytes: ``fixed`` bytes
    (the magic first, the column name's length at byte 12), then the name padded to 8.

    Args:
        prefix: The file's first bytes.
        url: The file, for errors.
        magic: Its 8-byte magic.
        fixed: The size of its fixed header.
        what: What it is, for errors (``"column sidecar"``, ``"key index"``).

    Returns:
        The header's size in bytes.

    Raises:
        SidecarError: Not such a file (too short, another magic).
    """
    if len(prefix) < fixed or bytes(prefix[:8]) != magic:
        raise corrupt(url, what, f"not a {what}: it does not start with "
                                 f"{magic.rstrip(bytes(1)).decode('ascii')}")
    name_length = int(struct.unpack_from("<H", prefix, 12)[0])
    return fixed + -(-name_length // 8) * 8


def header_size_of(prefix: bytes | memoryview, url: str) -> int:
    """The header's size, from its first :data:`FIXED_HEADER` bytes.

    Raises:
        SidecarError: Not a column sidecar (too short, another magic).
    """
    return named_header_size(prefix, url, magic=MAGIC, fixed=FIXED_HEADER,
                             what="column sidecar")


def decode_column_header(raw: bytes | memoryview, url: str, file_size: int) -> ColumnHeader:
    """Decode and check a column sidecar's header.

    Args:
        raw: At least the header's bytes (see :func:`header_size_of`).
        url: The file, for messages.
        file_size: The file's size.

    Returns:
        The header.

    Raises:
        SidecarError: Another magic, version or flags, a header CRC that fails, a name that
            is not UTF-8 or too long, or numbers that cannot describe the file.
    """
    size = header_size_of(raw, url)
    if len(raw) < size:
        raise _corrupt(url, f"the header needs {size} bytes, the file has {len(raw)}")
    (_magic, version, type_code, flags, name_length, reserved, count, nulls, per_page, pages,
     dictionary_bytes, entries, body_crc, meta_crc, header_crc) = _HEAD.unpack_from(raw, 0)
    if version != VERSION:
        raise SidecarError(f"{url}: column sidecar version {version}, this ofindex reads "
                           f"version {VERSION}; upgrade ofindex, or rebuild the columns")
    zeroed = bytes(raw[:60]) + bytes(4) + bytes(raw[FIXED_HEADER:size])
    if _crc32c.crc32c(zeroed) != header_crc:
        raise _corrupt(url, "its header CRC does not match")
    if flags & ~FLAG_DICTIONARY or reserved or not 0 < name_length <= MAX_NAME:
        raise _corrupt(url, "unknown flags, reserved bytes set, or a bad name length")
    try:
        vtype = ValueType(type_code)
        name = bytes(raw[FIXED_HEADER:FIXED_HEADER + name_length]).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise _corrupt(url, "an unknown value type or a name that is not UTF-8") from None
    if any(raw[FIXED_HEADER + name_length:size]):
        raise _corrupt(url, "bytes after the name are not zero")
    header = ColumnHeader(name, vtype, bool(flags & FLAG_DICTIONARY), count, nulls, per_page,
                          pages, dictionary_bytes, entries, body_crc, meta_crc, size)
    _check_numbers(header, url, file_size)
    return header


def _check_numbers(h: ColumnHeader, url: str, file_size: int) -> None:
    if h.per_page < 1 or h.nulls > h.count or h.dictionary_bytes % 8:
        raise _corrupt(url, "impossible record, null or page counts")
    if h.vtype is ValueType.NONE:
        if h.pages or h.dictionary or h.nulls != h.count or h.dictionary_bytes:
            raise _corrupt(url, "a column without values holds pages or a dictionary")
    elif h.pages != -(-h.count // h.per_page):
        raise _corrupt(url, f"{h.pages} pages cannot hold {h.count} records of "
                            f"{h.per_page} a page")
    if h.dictionary != (h.dictionary_entries > 0) or h.dictionary_entries > MAX_DICTIONARY \
            or h.dictionary != (h.dictionary_bytes > 0):
        raise _corrupt(url, "the dictionary's flag, entries and size disagree")
    if h.meta_end > file_size:
        raise _corrupt(url, f"its directory ends at byte {h.meta_end}, past its "
                            f"{file_size} bytes")


def decode_meta(raw: bytes | memoryview, url: str, file_size: int) -> ColumnMeta:
    """Decode and check a column sidecar's header, dictionary and directory.

    Args:
        raw: At least the file's first ``header.meta_end`` bytes.
        url: The file, for messages.
        file_size: The file's size.

    Returns:
        The header, dictionary and directory.

    Raises:
        SidecarError: The header is bad (:func:`decode_column_header`), the meta CRC fails,
            or the directory's pages are not laid out one after the other up to the end of
            the file, or have impossible sizes or codes.
    """
    header = decode_column_header(raw, url, file_size)
    end = header.meta_end
    if len(raw) < end:
        raise _corrupt(url, f"it ends at byte {len(raw)}, inside its directory")
    meta = bytes(raw[header.size:end])
    if _crc32c.crc32c(meta) != header.meta_crc:
        raise _corrupt(url, "the CRC of its dictionary and directory does not match")
    dictionary = None
    if header.dictionary:
        dictionary = _decode_dictionary(header, meta[:header.dictionary_bytes], url)
    directory = np.frombuffer(meta, dtype=DIRECTORY, offset=header.dictionary_bytes,
                              count=header.pages)
    _check_directory(header, directory, url, file_size)
    return ColumnMeta(header, dictionary, directory, url)


def _decode_dictionary(header: ColumnHeader, raw: bytes, url: str) -> Values:
    entries, vtype = header.dictionary_entries, header.vtype
    if vtype is ValueType.BYTES:
        head = 4 * entries
        if len(raw) < head:
            raise _corrupt(url, "its dictionary is too short for its value lengths")
        total = head + int(np.frombuffer(raw, "<u4", count=entries).astype(np.int64).sum())
        if not total <= len(raw) < total + 8 or any(raw[total:]):
            raise _corrupt(url, "its dictionary's size disagrees with its values")
        return page_codec.unpack_bytes_values(raw[:total], entries, url)
    size = vtype.width * entries
    if not size <= len(raw) < size + 8 or any(raw[size:]):
        raise _corrupt(url, "its dictionary's size disagrees with its entries")
    return np.frombuffer(raw, dtype=vtype.dtype, count=entries)


def _check_directory(header: ColumnHeader, directory: np.ndarray, url: str,
                     file_size: int) -> None:
    if not header.pages:
        if file_size != header.meta_end:
            raise _corrupt(url, "bytes after its directory")
        return
    offsets = directory["offset"].astype(np.int64)
    ends = offsets + directory["stored"].astype(np.int64)
    if int(offsets[0]) != header.meta_end or bool((offsets[1:] != ends[:-1]).any()) or \
            int(ends[-1]) != file_size:
        raise _corrupt(url, "its pages are not laid out one after the other to its end")
    counts = np.full(header.pages, header.per_page, dtype=np.int64)
    counts[-1] = header.count - header.per_page * (header.pages - 1)
    if bool((directory["nulls"].astype(np.int64) > counts).any()) or \
            int(directory["nulls"].astype(np.int64).sum()) != header.nulls:
        raise _corrupt(url, "its pages' null counts disagree with its header")
    encodings = directory["encoding"]
    allowed = [CODES] if header.dictionary else [PLAIN] + (
        [DELTAS] if header.vtype is ValueType.INT64 else [])
    if not np.isin(encodings, allowed).all() or bool(directory["compression"].max() > 1) or \
            bool(directory["reserved"].any()) or bool(directory["reserved2"].any()):
        raise _corrupt(url, "a page of an encoding or compression it cannot have")


def decode_page(meta: ColumnMeta, page: int, stored: bytes | memoryview, *,
                codes: bool = False) -> tuple[Values, np.ndarray]:
    """The values and validity of one page.

    Args:
        meta: The file's header, dictionary and directory.
        page: The page number.
        stored: The page's bytes as stored (its range in the file).
        codes: Give a dictionary column's codes (unsigned integers indexing
            ``meta.dictionary``, checked to lie inside it) instead of the values they stand
            for.

    Returns:
        ``(values, valid)``: one value per record (numbers, or
        :class:`~ofindex.columns.packed.PackedBytes`; dictionary pages decoded through the
        dictionary unless ``codes``; 0 or ``b""`` where not valid) and a boolean array.

    Raises:
        SidecarError: The page's CRC fails, or it does not decode to its records.
    """
    header, entry = meta.header, meta.directory[page]
    where = f"{meta.url}: page {page}"
    if _crc32c.crc32c(stored) != int(entry["crc"]):
        raise _corrupt(meta.url, f"the CRC of page {page} does not match")
    raw = page_codec.inflate_exact(stored, int(entry["compression"]), int(entry["raw"]), where)
    count = header.records_in(page)
    nulls = int(entry["nulls"])
    at = page_codec.bitmap_bytes(count) if nulls else 0
    if len(raw) < at:
        raise _corrupt(meta.url, f"page {page} is too short for its validity bitmap")
    valid = page_codec.unpack_bitmap(raw[:at], count) if nulls else np.ones(count, bool)
    if nulls and int(count - np.count_nonzero(valid)) != nulls:
        raise _corrupt(meta.url, f"page {page}'s bitmap disagrees with its null count")
    body = raw[at:]
    if int(entry["encoding"]) == CODES:
        found = _page_codes(meta, body, count, where)
        if codes:
            return found, valid
        if isinstance(meta.dictionary, PackedBytes):
            return meta.dictionary.take(found.astype(np.int64)), valid
        assert meta.dictionary is not None
        decoded: np.ndarray = meta.dictionary[found]
        return decoded, valid
    return _page_values(meta, int(entry["encoding"]), body, count, where), valid


def _page_codes(meta: ColumnMeta, body: bytes, count: int, where: str) -> np.ndarray:
    """A dictionary page's codes (uint8 or uint16), checked to lie inside the dictionary."""
    assert meta.dictionary is not None
    dtype = meta.header.code_dtype
    if len(body) != dtype.itemsize * count:
        raise _corrupt(meta.url, f"{where} holds {len(body)} bytes of codes for "
                                 f"{count} records")
    found = page_codec.from_planes(body, count, dtype)
    if count and int(found.max()) >= len(meta.dictionary):
        raise _corrupt(meta.url, f"{where} holds a code past its dictionary")
    return found


def _page_values(meta: ColumnMeta, encoding: int, body: bytes, count: int,
                 where: str) -> Values:
    header = meta.header
    if header.vtype is ValueType.BYTES:
        return page_codec.unpack_bytes_values(body, count, where)
    dtype = header.vtype.dtype
    if len(body) != dtype.itemsize * count:
        raise _corrupt(meta.url, f"{where} holds {len(body)} bytes for {count} values")
    values = page_codec.from_planes(body, count, dtype)
    if encoding == DELTAS:
        values = np.cumsum(values, dtype=np.int64)  # wraps as the writer's differences did
    return values


def stat_bounds(meta: ColumnMeta) -> tuple[np.ndarray, np.ndarray]:
    """The pages' least and greatest values as arrays: int64 for int64 columns, float64 for
    float columns, big-endian uint64 prefixes for bytes columns."""
    directory = meta.directory
    vtype = meta.header.vtype
    if vtype is ValueType.BYTES:
        low = np.frombuffer(directory["min"].tobytes(), dtype=">u8")
        high = np.frombuffer(directory["max"].tobytes(), dtype=">u8")
    else:
        dtype = "<i8" if vtype is ValueType.INT64 else "<f8"
        low = np.frombuffer(directory["min"].tobytes(), dtype=dtype)
        high = np.frombuffer(directory["max"].tobytes(), dtype=dtype)
    return low, high


def decode_column(raw: bytes | memoryview, url: str) -> tuple[ColumnMeta, Values,
                                                              np.ndarray]:
    """A whole column sidecar: its meta, and the values and validity of every record.

    Args:
        raw: The file's bytes.
        url: The file, for messages.

    Returns:
        ``(meta, values, valid)`` (values of a ``NONE`` column are int64 zeros).

    Raises:
        SidecarError: The file is not a valid column sidecar.
    """
    meta = decode_meta(raw, url, len(raw))
    header = meta.header
    if header.vtype is ValueType.NONE:
        return meta, np.zeros(header.count, dtype=np.int64), np.zeros(header.count, bool)
    parts = [decode_page(meta, k, raw[slice(*meta.page_range(k))])
             for k in range(header.pages)]
    valid = (np.concatenate([ok for _, ok in parts]) if parts else np.zeros(0, dtype=bool))
    if header.vtype is ValueType.BYTES:
        return meta, PackedBytes.concat(v for v, _ in parts if isinstance(v, PackedBytes)), valid
    numbers = [v for v, _ in parts if isinstance(v, np.ndarray)]
    return (meta, np.concatenate(numbers) if numbers else np.zeros(0, header.vtype.dtype),
            valid)
