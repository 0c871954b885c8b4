"""The compact manifest: ``ofindex-manifest.bin``, a columnar binary file read by pages.

A JSON manifest is read and parsed whole: 7 MB and 0.65 s for 1e5 shards, 12 s and 443 MB for
1e6. The compact manifest holds the same columns in pages, each with its own CRC32C, so that
a reader fetches the fixed header, then the *head* (column and page tables, directories),
then in one range the columns every read needs (record counts, to map global record numbers
with a cumulative sum; data sizes; flags; names), and the pages of the *stamps* (each
shard's sidecar body CRC and data fingerprint, the bulk of a manifest) only for the shards it
touches, in the same round as those shards' sidecar pages. Layout (all little-endian)::

    header, 64 bytes:
      0   8s  magic b"OFMANIF\\0"
      8   H   version (1)
      10  B   record format (1 TFRecord, 2 OFRecord)
      11  B   layout: 0 directories as named below, 1 sibling (see ofindex.formats.manifest)
      12  I   head size H: bytes of header, column table, page table and directories
      16  Q   shard count N
      24  Q   total records (the sum of the records column)
      32  Q   total bytes (the sum of the sizes column)
      40  I   column count C
      44  I   CRC32C of the H head bytes with this field zeroed
      48  8s  the dataset's identity (.dataset_identity: its 16 hex digits as 8 bytes)
      56  B   1 when the identity is given (0: none, as ofindex 0.2 wrote)
      57  7   reserved (0)
    column table at 64: C entries of 16 bytes:
      0 B column id, 1 B codec (0 stored, 1 zlib), 2 H reserved (0),
      4 I rows per page R, 8 I index of its first entry in the page table,
      12 I page count P = ceil(N / R)
    page table: entries of 16 bytes: Q offset in the file, I stored bytes, I CRC32C of them
    directories: I length + UTF-8 of the data directory, then of the index directory
      (length 0xFFFFFFFF: null, as a JSON manifest's null), zero padding to 8 bytes

Page ``p`` of a column holds rows ``[p R, min((p + 1) R, N))``, stored as its codec says;
its raw bytes are, by column: 1 records and 2 sizes: r uint64; 3 flags: r uint8 (bits 0-1
compression 0 none / 1 gzip / 2 zlib, 4 partial, 8 body CRC known); 4 names: a string block;
5 stamps: r uint32 sidecar body CRCs, then a string block of data fingerprints. A string
block is r + 1 uint32 ends (the first 0, never decreasing) followed by the UTF-8 bytes they
cut. The writer puts columns 1-4 first, one after the other (one range request reads them),
then the stamps pages.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from collections.abc import Iterable, Sequence

import crc32c as _crc32c
import numpy as np

from ..errors import ManifestError
from .dataset_identity import IdentityHasher
from .framing import RecordFormat
from .manifest import exact_sum

MAGIC = b"OFMANIF\0"
VERSION = 1
HEADER_SIZE = 64
_HEADER = struct.Struct("<8sHBBIQQQII8sB7x")
_COLUMN = struct.Struct("<BBHIII")
_PAGE = np.dtype([("offset", "<u8"), ("length", "<u4"), ("crc", "<u4")])
_HEAD_CRC_AT = 44
_NULL = 0xFFFFFFFF

RECORDS, SIZES, FLAGS, NAMES, STAMPS = 1, 2, 3, 4, 5
#: Columns every reader reads whole at open, in file order; stamps are read by pages.
EAGER = (RECORDS, SIZES, FLAGS, NAMES)
STORED, ZLIB = 0, 1
#: Flag bits of a row.
COMPRESSION_BITS, PARTIAL, HAS_BODY_CRC = 3, 4, 8
#: Rows per page of the columns read whole (one CRC and one inflate per 64 Ki rows).
EAGER_ROWS = 1 << 16
#: Rows per stamps page: a rank touching one shard fetches 128 shards' stamps (a few kB);
#: the page table costs 16 bytes per page in the head every reader fetches (125 kB at 1e6
#: shards). tools/bench_scale.py measures the bytes per batch this gives.
STAMP_ROWS = 128
#: Longest name or fingerprint accepted (bytes), so that a page's size is bounded before it
#: is inflated.
MAX_STRING = 4096
#: Largest head accepted (the page table of 1e9 shards fits).
MAX_HEAD = 1 << 30
#: Record counts and sizes above this are not from a real dataset.
MAX_COUNT = 1 << 62
#: Most raw bytes a manifest may inflate to per byte it is read from: a 1.9 MB forgery with
#: valid CRCs claiming 2^26 shards inflated 2 GiB at open (zlib alone allows 1032x). What the
#: writer makes expands at most 10-15x (1e6 shards of equal counts and sizes, names of 1-20
#: bytes), 42x with names of 250 bytes sharing a prefix, 73x with 500: 256 leaves room for
#: longer names and other zlib levels, and bounds a forgery by its own size.
MAX_EXPANSION = 256
#: Raw bytes any page of strings may inflate to beyond :data:`MAX_EXPANSION` times its
#: stored bytes (a page of a few rows compresses little, a page of strings no less than this).
PAGE_SLACK = 64 << 10
#: Raw bytes per row every manifest holds in the columns read at open: a record count and a
#: size (8 bytes each), flags (1) and a name's end (4).
_EAGER_ROW_BYTES = 21


@dataclasses.dataclass(frozen=True)
class Column:
    """One column of the head: its codec, rows per page and page table slice."""

    codec: int
    rows: int
    pages: np.ndarray  # of _PAGE

    def span(self) -> tuple[int, int]:
        """Byte range from the column's first page to the end of its last."""
        starts = self.pages["offset"]
        ends = starts + self.pages["length"]
        return (int(starts.min()), int(ends.max())) if len(starts) else (0, 0)


@dataclasses.dataclass(frozen=True)
class Head:
    """A checked head: what a reader knows before reading any page."""

    format: RecordFormat
    sibling: bool
    size: int
    shards: int
    total_records: int
    total_bytes: int
    columns: dict[int, Column]
    data_dir: str | None
    index_dir: str | None
    crc: int = 0
    identity: str | None = None


def _bad(url: str, why: str) -> ManifestError:
    return ManifestError(f"{url}: the compact manifest is {why}; rebuild it with `ofindex build "
                         "<dataset directory>`")


def is_compact(start: bytes | memoryview) -> bool:
    """Whether bytes start like a compact manifest (its magic)."""
    return bytes(start[: len(MAGIC)]) == MAGIC


def head_size(header: bytes | memoryview, url: str) -> int:
    """The head size a 64-byte header gives (its CRC is checked with the whole head).

    Raises:
        ManifestError: Not a compact manifest, another version, or an impossible size.
    """
    if len(header) < HEADER_SIZE or not is_compact(header):
        raise _bad(url, "truncated or not a compact manifest (bad magic)")
    version = struct.unpack_from("<H", header, 8)[0]
    if version != VERSION:
        raise ManifestError(f"{url}: compact manifest version {version} is not supported (this "
                            f"ofindex reads version {VERSION}); rebuild with `ofindex build` or "
                            "upgrade ofindex")
    size: int = struct.unpack_from("<I", header, 12)[0]
    if not HEADER_SIZE <= size <= MAX_HEAD:
        raise _bad(url, f"corrupt (head size {size})")
    return size


def _directory(raw: bytes, at: int, url: str) -> tuple[str | None, int]:
    if at + 4 > len(raw):
        raise _bad(url, "corrupt (directories cut short)")
    (length,) = struct.unpack_from("<I", raw, at)
    if length == _NULL:
        return None, at + 4
    if at + 4 + length > len(raw):
        raise _bad(url, "corrupt (directories cut short)")
    try:
        return raw[at + 4 : at + 4 + length].decode("utf-8"), at + 4 + length
    except UnicodeDecodeError:
        raise _bad(url, "corrupt (a directory is not UTF-8)") from None


def decode_head(raw: bytes, url: str, file_size: int | None = None) -> Head:
    """Parse and check a head (the first ``head_size`` bytes of the file).

    Args:
        raw: The head.
        url: The manifest, for messages.
        file_size: The file's size when known: every page must lie inside it.

    Raises:
        ManifestError: A head CRC that does not match, columns missing or repeated, page
            tables that cannot describe the file.
    """
    size = head_size(raw, url)
    if len(raw) != size:
        raise _bad(url, f"truncated (head of {len(raw)} bytes, {size} expected)")
    (_, _, fmt, layout, _, shards, total_records, total_bytes, ncols,
     crc, identity, has_identity) = _HEADER.unpack_from(raw, 0)
    zeroed = raw[:_HEAD_CRC_AT] + b"\0\0\0\0" + raw[_HEAD_CRC_AT + 4 :]
    if _crc32c.crc32c(zeroed) != crc:
        raise _bad(url, "corrupt (head CRC mismatch: edited, or damaged by a bad copy)")
    try:
        record_format = RecordFormat(fmt)
    except ValueError:
        raise _bad(url, f"corrupt (record format {fmt})") from None
    if layout not in (0, 1) or shards > MAX_COUNT or total_records > MAX_COUNT:
        raise _bad(url, "corrupt (layout or counts out of range)")
    columns, at = _columns(raw, url, ncols, shards)
    for column in columns.values():
        ends = column.pages["offset"] + column.pages["length"]
        if len(ends) and (int(column.pages["offset"].min()) < size
                          or (file_size is not None and int(ends.max()) > file_size)):
            raise _bad(url, "corrupt (a page lies outside the file)")
    data_dir, at = _directory(raw, at, url)
    index_dir, at = _directory(raw, at, url)
    return Head(record_format, layout == 1, size, shards, total_records, total_bytes, columns,
                data_dir, index_dir, crc, identity.hex() if has_identity == 1 else None)


def _columns(raw: bytes, url: str, ncols: int, shards: int) -> tuple[dict[int, Column], int]:
    """The column table and page table of a head; returns them and where the directories
    start."""
    table_end = HEADER_SIZE + _COLUMN.size * ncols
    if ncols > 64 or table_end > len(raw):
        raise _bad(url, "corrupt (column table)")
    entries = [_COLUMN.unpack_from(raw, HEADER_SIZE + _COLUMN.size * k) for k in range(ncols)]
    total_pages = sum(e[5] for e in entries)
    pages_end = table_end + _PAGE.itemsize * total_pages
    if pages_end > len(raw):
        raise _bad(url, "corrupt (page table cut short)")
    table = np.frombuffer(raw, dtype=_PAGE, count=total_pages, offset=table_end)
    columns: dict[int, Column] = {}
    for column_id, codec, _, rows, first, count in entries:
        if (column_id in columns or codec not in (STORED, ZLIB) or rows < 1
                or count != -(-shards // rows) or first + count > total_pages):
            raise _bad(url, f"corrupt (column {column_id}'s table)")
        columns[column_id] = Column(codec, rows, table[first : first + count])
    missing = [c for c in (*EAGER, STAMPS) if c not in columns]
    if missing:
        raise _bad(url, f"corrupt (no column {missing[0]})")
    return columns, pages_end


# -- pages -----------------------------------------------------------------------------------

def _raw_bound(column_id: int, rows: int) -> int:
    """Most raw bytes a page of ``rows`` rows can hold."""
    if column_id in (RECORDS, SIZES):
        return 8 * rows
    if column_id == FLAGS:
        return rows
    return 4 * rows * (column_id == STAMPS) + 4 * (rows + 1) + MAX_STRING * rows


def page_rows(head: Head, column_id: int, page: int) -> int:
    """Rows page ``page`` of a column holds."""
    rows = head.columns[column_id].rows
    return min(rows, head.shards - page * rows)


def check_page(head: Head, column_id: int, page: int, stored: bytes | memoryview,
               url: str) -> bytes:
    """The raw bytes of one page, its CRC checked and its codec undone.

    Raises:
        ManifestError: A CRC that does not match, a length other than the page table's, or
            a page that does not inflate to what its rows can hold.
    """
    column = head.columns[column_id]
    entry = column.pages[page]
    where = f"{url}: column {column_id} page {page}"
    if len(stored) != int(entry["length"]):
        raise ManifestError(f"{where}: {len(stored)} bytes, the page table says "
                            f"{int(entry['length'])}; the manifest is truncated — rebuild it "
                            "with `ofindex build <dataset directory>`")
    if _crc32c.crc32c(stored) != int(entry["crc"]):
        raise ManifestError(f"{where}: CRC mismatch (edited, or damaged by a bad copy); "
                            "rebuild it with `ofindex build <dataset directory>`")
    if column.codec == STORED:
        return bytes(stored)
    bound = _raw_bound(column_id, page_rows(head, column_id, page))
    if column_id in (NAMES, STAMPS):  # fixed-width pages inflate to exactly their rows
        bound = min(bound, MAX_EXPANSION * len(stored) + PAGE_SLACK)
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(stored, bound + 1)
    except zlib.error:
        raw = b""
    if len(raw) > bound or not inflater.eof:
        raise ManifestError(f"{where}: does not inflate to its rows; rebuild the manifest with "
                            "`ofindex build <dataset directory>`")
    return raw


def check_expansion(head: Head, url: str) -> None:
    """Refuse, before anything is inflated, a head whose shard count the columns read at open
    cannot hold: what they must inflate to at least (:data:`_EAGER_ROW_BYTES` per row) is
    more than :data:`MAX_EXPANSION` times their stored bytes and the head's.

    Raises:
        ManifestError: The shard count is out of proportion with the file.
    """
    stored = head.size + sum(int(head.columns[c].pages["length"].sum()) for c in EAGER)
    least = _EAGER_ROW_BYTES * head.shards
    if least > MAX_EXPANSION * stored + PAGE_SLACK:
        raise _bad(url, f"corrupt (it claims {head.shards} shards, which take at least "
                        f"{least} bytes in memory, from {stored} bytes of columns: more than "
                        f"{MAX_EXPANSION} bytes per stored byte)")


def numbers(head: Head, column_id: int, page: int, raw: bytes, url: str) -> np.ndarray:
    """A fixed-width page's values (uint64 records or sizes, uint8 flags)."""
    rows = page_rows(head, column_id, page)
    dtype = np.dtype("<u1" if column_id == FLAGS else "<u8")
    if len(raw) != rows * dtype.itemsize:
        raise ManifestError(f"{url}: column {column_id} page {page} holds {len(raw)} bytes, "
                            f"not {rows * dtype.itemsize}; rebuild the manifest")
    return np.frombuffer(raw, dtype=dtype)


@dataclasses.dataclass(frozen=True)
class Strings:
    """One page's strings: ``blob[ends[k]:ends[k + 1]]`` is row ``k``'s UTF-8."""

    ends: np.ndarray
    blob: bytes

    def __len__(self) -> int:
        return len(self.ends) - 1

    def __getitem__(self, k: int) -> str:
        return self.blob[int(self.ends[k]) : int(self.ends[k + 1])].decode("utf-8", "replace")


def strings(raw: bytes, at: int, rows: int, where: str) -> Strings:
    """The string block of ``rows`` rows starting at byte ``at`` of a raw page.

    Raises:
        ManifestError: Ends that do not cut the block's bytes.
    """
    blob_at = at + 4 * (rows + 1)
    if blob_at > len(raw):
        raise ManifestError(f"{where}: string block cut short; rebuild the manifest")
    ends = np.frombuffer(raw, dtype="<u4", count=rows + 1, offset=at)
    blob = raw[blob_at:]
    lengths = np.diff(ends.astype(np.int64))
    if int(ends[0]) != 0 or int(ends[-1]) != len(blob) or (
            len(lengths) and (int(lengths.min()) < 0 or int(lengths.max()) > MAX_STRING)):
        raise ManifestError(f"{where}: corrupt string block; rebuild the manifest")
    return Strings(ends, blob)


def stamps(head: Head, page: int, raw: bytes, url: str) -> tuple[np.ndarray, Strings]:
    """A stamps page: each row's sidecar body CRC and data fingerprint."""
    rows = page_rows(head, STAMPS, page)
    where = f"{url}: column {STAMPS} page {page}"
    if len(raw) < 4 * rows:
        raise ManifestError(f"{where}: cut short; rebuild the manifest")
    crcs = np.frombuffer(raw, dtype="<u4", count=rows)
    return crcs, strings(raw, 4 * rows, rows, where)


# -- writing ---------------------------------------------------------------------------------

def _string_block(values: Sequence[str]) -> bytes:
    encoded = [v.encode("utf-8") for v in values]
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    if len(lengths) and int(lengths.max()) > MAX_STRING:
        raise ValueError(f"a name or fingerprint longer than {MAX_STRING} bytes")
    ends = np.zeros(len(encoded) + 1, dtype="<u4")
    np.cumsum(lengths, out=ends[1:])
    return ends.tobytes() + b"".join(encoded)


@dataclasses.dataclass(frozen=True)
class Row:
    """One shard as the manifest lists it.

    Attributes:
        name: Its data file, relative to the data directory.
        records: Records indexed.
        size: The data file's size.
        fingerprint: The data file's fingerprint when indexed.
        body_crc: Its sidecar's body CRC (``None``: unknown).
        compression: 0 none, 1 gzip, 2 zlib.
        partial: Only a valid prefix is indexed.
        content: The data file's content digest (``None``: unknown); not stored in a column,
            it makes the dataset's identity.
    """

    name: str
    records: int
    size: int
    fingerprint: str
    body_crc: int | None
    compression: int = 0
    partial: bool = False
    content: int | None = None


@dataclasses.dataclass
class Rows:
    """Consecutive rows as columns (what :meth:`CompactWriter.add_rows` takes).

    Attributes:
        names: Data file names, relative to the data directory.
        records: Record counts.
        sizes: Data sizes.
        fingerprints: Data fingerprints.
        body_crcs: Sidecar body CRCs, -1 where unknown.
        flags: Compression (0-2) plus :data:`PARTIAL` and :data:`HAS_BODY_CRC` bits.
        contents: Content digests of the data files, -1 where unknown (``None``: all).
    """

    names: list[str]
    records: np.ndarray
    sizes: np.ndarray
    fingerprints: list[str]
    body_crcs: np.ndarray
    flags: np.ndarray
    contents: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.names)

    def cut(self, lo: int, hi: int) -> Rows:
        """Rows ``lo..hi-1`` of these."""
        return Rows(self.names[lo:hi], self.records[lo:hi], self.sizes[lo:hi],
                    self.fingerprints[lo:hi], self.body_crcs[lo:hi], self.flags[lo:hi],
                    None if self.contents is None else self.contents[lo:hi])

    @staticmethod
    def join(parts: list[Rows]) -> Rows:
        """These rows one after another."""
        if len(parts) == 1:
            return parts[0]
        return Rows([n for p in parts for n in p.names],
                    np.concatenate([p.records for p in parts]),
                    np.concatenate([p.sizes for p in parts]),
                    [f for p in parts for f in p.fingerprints],
                    np.concatenate([p.body_crcs for p in parts]),
                    np.concatenate([p.flags for p in parts]),
                    np.concatenate([p.content_column() for p in parts]))

    def content_column(self) -> np.ndarray:
        """The content digests, -1 where unknown."""
        return (np.full(len(self), -1, dtype=np.int64) if self.contents is None
                else self.contents)

    @staticmethod
    def of(rows: Iterable[Row]) -> Rows:
        """Rows given one by one, as columns."""
        listed = list(rows)
        crcs = [-1 if r.body_crc is None else r.body_crc for r in listed]
        return Rows([r.name for r in listed],
                    np.array([r.records for r in listed], dtype=np.int64),
                    np.array([r.size for r in listed], dtype=np.int64),
                    [r.fingerprint for r in listed], np.array(crcs, dtype=np.int64),
                    np.array([r.compression | (PARTIAL if r.partial else 0)
                              | (0 if r.body_crc is None else HAS_BODY_CRC) for r in listed],
                             dtype=np.uint8),
                    np.array([-1 if r.content is None else r.content for r in listed],
                             dtype=np.int64))


class CompactWriter:
    """Encodes a compact manifest from rows given in order, a page at a time: it holds the
    encoded (deflated) pages and at most one page of rows per column, never every row.

    Args:
        fmt: The record framing.
        shards: How many rows will be added.
        data_dir: The data directory as stored (``None``: the manifest's own).
        index_dir: The index directory as stored (``None``: beside the data, or sibling).
        sibling: The manifest is in the default place (see :mod:`ofindex.formats.manifest`).
        eager_rows: Rows per page of the columns read whole.
        stamp_rows: Rows per stamps page.
    """

    def __init__(self, fmt: RecordFormat, shards: int, data_dir: str | None,
                 index_dir: str | None, sibling: bool, *, eager_rows: int = EAGER_ROWS,
                 stamp_rows: int = STAMP_ROWS) -> None:
        self.format, self.shards = fmt, shards
        self.dirs, self.sibling = (data_dir, index_dir), sibling
        self.rows = {RECORDS: eager_rows, SIZES: eager_rows, FLAGS: eager_rows,
                     NAMES: eager_rows, STAMPS: stamp_rows}
        self.pages: dict[int, list[tuple[bytes, int]]] = {c: [] for c in self.rows}
        #: Per page size, the rows not in a page yet (a page of eager rows at most).
        self.pending: dict[int, list[Rows]] = {eager_rows: [], stamp_rows: []}
        #: Rows in each list of pending rows (not summed again at each add: a build of 20,000
        #: shards adds them one by one, and summing took 150 s of its 170).
        self._pending_rows = dict.fromkeys(self.pending, 0)
        self.added = 0
        self.total_records = 0
        self.total_bytes = 0
        self.identity = IdentityHasher()

    def add(self, rows: Iterable[Row]) -> None:
        """Add the next rows (in dataset order); see :meth:`add_rows`."""
        self.add_rows(Rows.of(rows))

    def add_rows(self, rows: Rows) -> None:
        """Add the next rows (in dataset order).

        Raises:
            ValueError: More rows than announced, or a row that cannot be stored.
        """
        n = len(rows)
        if not n:
            return
        if (int(rows.records.min()) < 0 or int(rows.records.max()) > MAX_COUNT
                or int(rows.sizes.min()) < 0 or int(rows.sizes.max()) > MAX_COUNT
                or int((rows.flags & COMPRESSION_BITS).max()) == COMPRESSION_BITS):
            raise ValueError("impossible record count, size or compression in a manifest row")
        if self.added + n > self.shards:
            raise ValueError(f"{self.added + n} rows added to a manifest of {self.shards}")
        self.added += n
        self.total_records += exact_sum(rows.records)
        self.total_bytes += exact_sum(rows.sizes)
        self.identity.add(rows.records, rows.sizes, rows.content_column(),
                          np.where(rows.flags & HAS_BODY_CRC, rows.body_crcs, -1))
        for page_rows_, pending in self.pending.items():
            pending.append(rows)
            held = self._pending_rows[page_rows_] = self._pending_rows[page_rows_] + n
            if held >= page_rows_:
                joined = Rows.join(pending)
                full = held - held % page_rows_
                for lo in range(0, full, page_rows_):
                    self._encode(page_rows_, joined.cut(lo, lo + page_rows_))
                pending[:] = [joined.cut(full, held)] if full < held else []
                self._pending_rows[page_rows_] = held - full

    def _encode(self, page_rows_: int, rows: Rows) -> None:
        """Encode one page of every column whose pages hold ``page_rows_`` rows."""
        for column, size in self.rows.items():
            if size != page_rows_:
                continue
            if column == RECORDS:
                raw = rows.records.astype("<u8").tobytes()
            elif column == SIZES:
                raw = rows.sizes.astype("<u8").tobytes()
            elif column == FLAGS:
                raw = rows.flags.astype("<u1").tobytes()
            elif column == NAMES:
                raw = _string_block(rows.names)
            else:
                raw = (np.where(rows.body_crcs < 0, 0, rows.body_crcs).astype("<u4").tobytes()
                       + _string_block(rows.fingerprints))
            stored = zlib.compress(raw, 1)  # level 6: 5x slower, 2% smaller, inflates slower
            self.pages[column].append((stored, _crc32c.crc32c(stored)))

    def finish(self) -> list[bytes]:
        """The file's bytes, in parts (head first).

        Raises:
            ValueError: Fewer rows were added than announced.
        """
        if self.added != self.shards:
            raise ValueError(f"{self.added} rows added to a manifest of {self.shards}")
        for page_rows_, pending in self.pending.items():
            if pending:
                self._encode(page_rows_, Rows.join(pending))
                pending.clear()
        order = [*EAGER, STAMPS]
        dirs = b"".join(struct.pack("<I", _NULL) if d is None
                        else struct.pack("<I", len(d.encode())) + d.encode() for d in self.dirs)
        npages = sum(len(self.pages[c]) for c in order)
        size = HEADER_SIZE + _COLUMN.size * len(order) + _PAGE.itemsize * npages + len(dirs)
        size += -size % 8
        table = np.zeros(npages, dtype=_PAGE)
        columns, body, at, k = [], [], size, 0
        for column in order:
            columns.append(_COLUMN.pack(column, ZLIB, 0, self.rows[column], k,
                                        len(self.pages[column])))
            for stored, crc in self.pages[column]:
                table[k] = (at, len(stored), crc)
                body.append(stored)
                at += len(stored)
                k += 1
        head = bytearray(_HEADER.pack(MAGIC, VERSION, int(self.format), int(self.sibling), size,
                                      self.shards, self.total_records, self.total_bytes,
                                      len(order), 0, bytes.fromhex(self.identity.hexdigest()),
                                      1))
        head += b"".join(columns) + table.tobytes() + dirs
        head += bytes(size - len(head))
        struct.pack_into("<I", head, _HEAD_CRC_AT, _crc32c.crc32c(head))
        return [bytes(head), *body]
