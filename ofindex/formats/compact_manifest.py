"""Reading a compact manifest (:mod:`.manifest_binary`) from storage, a page at a time.

Opening one costs three requests whatever its size: the 64-byte header, the head (column and
page tables, directories), and one range holding the columns every read needs (record
counts, data sizes, flags, names), all checked against their CRCs. The stamps (each shard's
sidecar body CRC and data fingerprint) are read by pages when a shard is first touched: the
dataset's index round fetches them together with the shard's sidecar pages
(:mod:`ofindex.read.remote.index_round`), and :meth:`CompactManifest.stamp` fetches a missing page
on its own otherwise.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ManifestError, RangeReadError
from ..storage import Storage, Storages
from . import manifest_binary as binary
from .framing import RecordFormat
from .manifest import (
    absolute_directories,
    exact_sum,
    good_name,
    relative_names,
    resolved_directories,
    stored_directories,
)
from .sidecar_header import Compression

#: The compact manifest's file name, beside (and instead of) ``ofindex-manifest.json``.
COMPACT_NAME = "ofindex-manifest.bin"


class CompactManifest:
    """A compact manifest opened from storage: the columns every read needs in memory, the
    stamps by pages.

    Attributes:
        url: The manifest.
        format: The record framing of every shard.
        data_dir: The data directory (an absolute URL or path).
        index_dir: The index directory, or ``None`` (sidecars beside the data).
        records: Each shard's record count (uint64).
        sizes: Each shard's data size (uint64).
        flags: Each shard's flags (see :mod:`.manifest_binary`).
        identity: The dataset's identity (:mod:`.dataset_identity`), or ``None`` (written
            by ofindex 0.2).
    """

    def __init__(self, storage: Storage, path: str, head: binary.Head, eager: bytes,
                 eager_at: int) -> None:
        self.storage, self.path, self.head = storage, path, head
        self.url = storage.url(path)
        self.format = head.format
        self.identity = head.identity
        self.data_dir, self.index_dir = resolved_directories(head.data_dir, head.index_dir,
                                                             head.sibling, self.url)
        self.records = self._numbers(binary.RECORDS, eager, eager_at)
        self.sizes = self._numbers(binary.SIZES, eager, eager_at)
        self.flags = self._numbers(binary.FLAGS, eager, eager_at)
        self._names = [binary.strings(raw, 0, binary.page_rows(head, binary.NAMES, p),
                                      f"{self.url}: names page {p}")
                       for p, raw in enumerate(self._pages(binary.NAMES, eager, eager_at))]
        self._stamps: dict[int, tuple[np.ndarray, binary.Strings]] = {}
        self._lock = threading.Lock()
        self._check_totals()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.head.shards

    def __repr__(self) -> str:
        return f"CompactManifest({self.url!r}, {len(self)} shards)"

    def _pages(self, column_id: int, eager: bytes, eager_at: int) -> list[bytes]:
        column = self.head.columns[column_id]
        view = memoryview(eager)
        return [binary.check_page(self.head, column_id, p,
                                  view[int(e["offset"]) - eager_at :
                                       int(e["offset"]) - eager_at + int(e["length"])], self.url)
                for p, e in enumerate(column.pages)]

    def _numbers(self, column_id: int, eager: bytes, eager_at: int) -> np.ndarray:
        pages = [binary.numbers(self.head, column_id, p, raw, self.url)
                 for p, raw in enumerate(self._pages(column_id, eager, eager_at))]
        dtype = np.uint8 if column_id == binary.FLAGS else np.uint64
        return np.concatenate(pages) if pages else np.zeros(0, dtype=dtype)

    def _check_totals(self) -> None:
        """Refuse columns that disagree with the header's totals, or impossible values."""
        n = len(self)
        records = self.records
        if n and (int(records.max()) > binary.MAX_COUNT or int(self.sizes.max()) > binary.MAX_COUNT
                  or int((self.flags & binary.COMPRESSION_BITS).max()) == binary.COMPRESSION_BITS):
            raise ManifestError(f"{self.url}: impossible record count, size or compression; "
                                "rebuild it with `ofindex build <dataset directory>`")
        total, size = exact_sum(records), exact_sum(self.sizes)  # (numpy's sums wrap)
        if total != self.head.total_records or size != self.head.total_bytes:
            raise ManifestError(f"{self.url}: its columns do not add up to its header's totals; "
                                "rebuild it with `ofindex build <dataset directory>`")

    # -- rows ----------------------------------------------------------------------------
    def name(self, row: int) -> str:
        """Shard ``row``'s data file, relative to the data directory.

        Raises:
            ManifestError: A name that would lead outside the data directory.
        """
        rows = self.head.columns[binary.NAMES].rows
        name = self._names[row // rows][row % rows]
        if not good_name(name):
            raise ManifestError(f"{self.url}: shard name {name[:80]!r} is not a file of the data "
                                "directory (absolute, '..', a URL or empty); rebuild the manifest")
        return name

    @property
    def compressions(self) -> list[Compression]:
        """Each shard's compression (one list of ``len(self)`` items)."""
        return [Compression(c) for c in (self.flags & binary.COMPRESSION_BITS).tolist()]

    @property
    def compressed(self) -> bool:
        """Whether any shard is compressed."""
        return bool(len(self) and (self.flags & binary.COMPRESSION_BITS).any())

    def partial_rows(self) -> np.ndarray:
        """The shards indexed only up to damaged data."""
        found: np.ndarray = np.flatnonzero(self.flags & binary.PARTIAL)
        return found

    # -- stamps, by pages ------------------------------------------------------------------
    def stamp_page_of(self, row: int) -> int:
        """The stamps page holding ``row``."""
        return row // self.head.columns[binary.STAMPS].rows

    def has_stamp(self, row: int) -> bool:
        """Whether the stamps page of ``row`` is in memory."""
        return self.stamp_page_of(row) in self._stamps

    def stamp_range(self, page: int) -> tuple[int, int]:
        """Byte range of a stamps page in the file."""
        entry = self.head.columns[binary.STAMPS].pages[page]
        return int(entry["offset"]), int(entry["offset"]) + int(entry["length"])

    def node_key(self, page: int) -> bytes:
        """The key of a stamps page in the node cache: this manifest's URL and head CRC (its
        version), and the page number."""
        text = f"{self.url}\0compact manifest\0{self.head.crc}".encode()
        return hashlib.sha256(text).digest()[:16] + struct.pack("<iq", -1, page)

    def cut_short(self, exc: RangeReadError) -> ManifestError:
        """The error for a page past the end of the file."""
        return ManifestError(f"{self.url}: the compact manifest is truncated (a page lies past "
                             f"its end: {str(exc)[:160]}); rebuild it with `ofindex build "
                             "<dataset directory>`")

    def take_stamp_page(self, page: int, stored: bytes | memoryview) -> None:
        """Check and keep a fetched stamps page.

        Raises:
            ManifestError: It fails its CRC or does not hold its rows.
        """
        raw = binary.check_page(self.head, binary.STAMPS, page, stored, self.url)
        crcs, prints = binary.stamps(self.head, page, raw, self.url)
        with self._lock:
            self._stamps[page] = (crcs, prints)

    def fetch_stamps(self, rows: Sequence[int]) -> None:
        """Fetch, in one round, the stamps pages of ``rows`` not in memory yet.

        Raises:
            ManifestError: A page fails its checks.
        """
        pages = sorted({self.stamp_page_of(r) for r in rows} - self._stamps.keys())
        if not pages:
            return
        spans = [self.stamp_range(p) for p in pages]
        try:
            got = self.storage.read_ranges([self.path] * len(pages), [s for s, _ in spans],
                                           [e for _, e in spans])
        except RangeReadError as exc:
            raise self.cut_short(exc) from None
        for page, stored in zip(pages, got, strict=True):
            self.take_stamp_page(page, stored)

    def stamp(self, row: int) -> tuple[str, int | None]:
        """``(data fingerprint, sidecar body CRC or None)`` of shard ``row`` (its page fetched
        when it is not in memory).

        Raises:
            ManifestError: The page fails its checks.
        """
        page = self.stamp_page_of(row)
        if page not in self._stamps:
            self.fetch_stamps([row])
        crcs, prints = self._stamps[page]
        k = row - page * self.head.columns[binary.STAMPS].rows
        known = bool(int(self.flags[row]) & binary.HAS_BODY_CRC)
        return prints[k], int(crcs[k]) if known else None


def open_compact(storage: Storage, path: str, header: bytes | None = None) -> CompactManifest:
    """Open the compact manifest at ``path``: its head, then the columns read whole.

    Args:
        storage: Its storage.
        path: Its path there.
        header: Its first 64 bytes when already read.

    Raises:
        FileNotFoundError: There is none.
        ManifestError: It is truncated, corrupt or of another version.
    """
    url = storage.url(path)
    try:
        if header is None:
            header = storage.read(path, 0, binary.HEADER_SIZE)
        size = binary.head_size(header, url)
        raw = header + storage.read(path, binary.HEADER_SIZE, size) if size > len(header) \
            else bytes(header[:size])
        head = binary.decode_head(raw, url)
        binary.check_expansion(head, url)  # before the columns are read and inflated
        spans = [head.columns[c].span() for c in binary.EAGER]
        start = min(s for s, e in spans if e > s) if any(e > s for s, e in spans) else size
        end = max((e for _, e in spans), default=size)
        eager = storage.read(path, start, end) if end > start else b""
    except RangeReadError as exc:  # shorter than its header or head says
        raise ManifestError(f"{url}: the compact manifest is truncated or unreadable "
                            f"({type(exc).__name__}: {str(exc)[:200]}); rebuild it with "
                            "`ofindex build <dataset directory>`") from None
    return CompactManifest(storage, path, head, eager, start)


#: Shards from which the builder writes a compact manifest (``ofindex-manifest.bin``) in the
#: default place instead of JSON. Below it the JSON manifest opens in under 0.1 s, is read by
#: every earlier ofindex release and by ``jq``; at 1e5 shards it takes 0.65 s and grows
#: linearly (12 s at 1e6), the compact one stays within 0.1 s at 1e5 and 1 s at 1e6
#: (tools/bench_scale.py).
COMPACT_FROM_SHARDS = 10_000


def writes_compact(url: str, shards: int, named: bool) -> bool:
    """Whether the builder writes a compact manifest: a named one when its name is
    ``ofindex-manifest.bin``, the default one from :data:`COMPACT_FROM_SHARDS` shards."""
    if named:
        return url.rstrip("/").rsplit("/", 1)[-1] == COMPACT_NAME
    return shards >= COMPACT_FROM_SHARDS


class CompactManifestFile:
    """A compact manifest being written: rows are added in dataset order, a page at a time
    encoded (the writer never holds every row), and :meth:`close` writes the file atomically.

    Args:
        url: Where it goes.
        fmt: The record framing.
        data_storage: Storage of the data files.
        data_dir: Their directory.
        index_dir: The index directory (``None``: sidecars beside the data).
        storages: The call's storages.
        shards: How many rows will be added.
    """

    def __init__(self, url: str, fmt: RecordFormat, data_storage: Storage, data_dir: str,
                 index_dir: str | None, storages: Storages, shards: int) -> None:
        self.storage, self.path = storages.for_url(url)
        if self.storage.is_local:  # local paths are stored absolute
            self.path = os.path.abspath(self.path)
        self.url = self.storage.url(self.path)
        self.data_storage, self.data_dir = data_storage, data_dir
        data_url, index_url = absolute_directories(data_storage, data_dir, index_dir, storages)
        stored_data, stored_index, sibling = stored_directories(self.url, data_url, index_url)
        self.writer = binary.CompactWriter(fmt, shards, stored_data, stored_index, sibling)

    def add(self, data_file: str, records: int, size: int, fingerprint: str,
            body_crc: int | None, compression: Compression = Compression.NONE,
            partial: bool = False, content: int | None = None) -> None:
        """Add the next shard.

        Raises:
            ValueError: The file is not inside the data directory, or more shards than
                announced.
        """
        (name,) = relative_names(self.data_storage, [data_file], self.data_dir)
        self.writer.add([binary.Row(name, records, size, fingerprint, body_crc,
                                    int(compression), partial, content)])

    def close(self) -> str:
        """Write the file (temporary name, then rename); returns its URL.

        Raises:
            ValueError: Fewer shards were added than announced.
        """
        self.storage.write_atomic(self.path, list(self.writer.finish()))
        return self.url
