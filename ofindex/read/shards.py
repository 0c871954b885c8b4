"""One data file of a dataset together with its lazily opened sidecar.

Local sidecars are memory-mapped (opening one reads its header; its offsets are checked
against their CRC when the shard is first read). Remote sidecars are read by pages
(:mod:`ofindex.read.remote.pages`), or fetched whole when their shard is first touched (iteration,
version 1, compressed or small ones) and held in the dataset's cache chain
(:class:`~ofindex.cache.chain.Chain`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Hashable
from typing import Any, Protocol

from ..cache.chain import Chain
from ..errors import IndexNotFoundError, SidecarError, StaleIndexError, hint
from ..formats.framing import RecordFormat
from ..formats.sidecar import Sidecar, load_sidecar, parse_sidecar
from ..formats.sidecar_growth import Growth
from ..formats.sidecar_header import SidecarHeader
from ..storage import FileStamp, Storage
from ..storage.identity import check_identity
from ..storage.openfiles import OPEN_FILES


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """Public description of one shard.

    Attributes:
        url: The data file.
        records: Records indexed.
        bytes: Size of the data file.
        index_url: Its sidecar.
        partial: Only a valid prefix of the file is indexed (``build --allow-partial``).
    """

    url: str
    records: int
    bytes: int
    index_url: str
    partial: bool = False


class StampSource(Protocol):
    """Where a shard's stamp is read on first use (a compact manifest)."""

    def stamp(self, row: int) -> tuple[str, int | None]: ...


class Shard:
    """A data file and its sidecar; the sidecar is (re)opened lazily in each process.

    ``records``/``size`` (and ``fingerprint``, from a manifest) are what the dataset expects;
    the sidecar must agree when it is loaded. The shard carries the storage of its data file
    (``storage``; default: the sidecar's), which every read of its records goes through.
    With ``data_storage`` (the same storage) the data file is also stat-ed once at load and
    compared with the sidecar's stamp (lazy staleness check).
    """

    __slots__ = (
        "__weakref__",
        "_body_crc",
        "_content",
        "_fingerprint",
        "_grown",
        "_kept_header",
        "_pid",
        "_pinned",
        "_row",
        "_rows",
        "_sidecar",
        "_unchecked",
        "cache",
        "data_storage",
        "data_url",
        "index_path",
        "index_storage",
        "pager",
        "partial",
        "path",
        "ready",
        "records",
        "size",
        "storage",
        "used",
    )

    def __init__(self, path: str, index_storage: Storage, index_path: str,
                 records: int = -1, size: int = -1, *, fingerprint: str | None = None,
                 data_storage: Storage | None = None, cache: Chain | None = None,
                 url: str | None = None, partial: bool = False,
                 body_crc: int | None = None, stamps: StampSource | None = None,
                 row: int = -1, storage: Storage | None = None) -> None:
        self.path = path
        #: The storage of the data file: what every read of this shard's records goes through.
        self.storage = (storage if storage is not None else data_storage
                        if data_storage is not None else index_storage)
        self._body_crc = body_crc  # the sidecar version the manifest names (None: any)
        self._fingerprint = fingerprint
        #: The data file's content digest its checked sidecar header gives (None: not known
        #: yet in this process, or the index has none)
        self._content: int | None = None
        #: A compact manifest whose stamps page gives this shard's fingerprint and body CRC
        #: when first asked (row ``_row``), or ``None`` once known.
        self._rows, self._row = stamps, row
        self.partial = partial
        self.data_url = path if url is None else url
        self.index_storage = index_storage
        self.index_path = index_path
        self.records = records
        self.size = size
        self.data_storage = data_storage
        # local sidecars are memory-mapped (page cache, not heap): only remote ones are counted
        self.cache = None if index_storage.is_local else cache
        self._sidecar: Sidecar | None = None
        # opened for its header in this process (by open), its offsets not checked yet
        self._unchecked: Sidecar | None = None
        #: ``(pid, sidecar)``: the sidecar reads use in process ``pid``, loaded and checked:
        #: what a read of a loaded shard takes without a call (a batch's spans, the dataset's
        #: single-record fast path); ``None`` until it is loaded (and once let go of)
        self.ready: tuple[int, Sidecar] | None = None
        #: Set by every read of a sidecar the cache's memory tier holds (a plain store, once
        #: per shard of every batch): the tier spares a used sidecar once when it comes up for
        #: eviction (:meth:`ofindex.cache.chain.MemoryTier.put`)
        self.used = False
        self._pid = -1
        self.pager: Any = None  # paged reads' state in this process (ofindex.read.remote.pages)
        #: The header this shard's count, stamp and body CRC were pinned from when the dataset
        #: was opened without a manifest (:meth:`pin`), or ``None``.
        self._pinned: SidecarHeader | None = None
        #: The checked header of the sidecar this process let go of to stay within its open
        #: files (:meth:`release_held`): what :attr:`header` answers without reopening it.
        self._kept_header: SidecarHeader | None = None
        #: The sidecar as this shard's data file grew since its index was written
        #: (:meth:`grow`): held in memory, in every process (it is pickled with the shard);
        #: ``None`` until the file grows.
        self._grown: Sidecar | None = None

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.path, self.index_storage, self.index_path, self.records, self.size,
                self._fingerprint, self.data_storage, self.cache, self.data_url, self.partial,
                self._body_crc, self._pinned, self._rows, self._row, self._content, self._grown,
                self.storage)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        (path, index_storage, ipath, records, size, fingerprint, data_storage, cache, url, partial,
         body_crc, pinned, rows, row, content, grown, storage) = state
        Shard.__init__(self, path, index_storage, ipath, records, size, fingerprint=fingerprint,
                       data_storage=data_storage, cache=cache, url=url, partial=partial,
                       body_crc=body_crc, stamps=rows, row=row, storage=storage)
        self._pinned, self._content, self._grown = pinned, content, grown

    def grow(self, growth: Growth) -> None:
        """Take what this shard's data file gained since its index was written (or last
        grown), read from the file (:meth:`ofindex.Dataset.refresh`): its sidecar extended in
        memory, in time proportional to the growth (its records copied once, at the first).

        Args:
            growth: The records added and the file's stamp now.

        Raises:
            SidecarError: The sidecar's body fails its CRC (checked before it is copied).
        """
        current = self._grown if self._grown is not None else self.sidecar
        grown = self._grown = current.extended(growth)
        self._sidecar, self._unchecked, self._pid = grown, None, os.getpid()
        self.ready = (self._pid, grown)
        self.pager = None  # read from the sidecar in memory now, not by pages
        h = grown.header
        self.records, self.size, self.partial = h.count, h.stamp.size, h.partial

    @property
    def grown(self) -> bool:
        """Whether this shard's data file grew since its index was written (:meth:`grow`)."""
        return self._grown is not None

    # -- the stamp a manifest gives: known, or read from a compact manifest on first use -----
    @property
    def stamp_pending(self) -> bool:
        """Whether this shard's fingerprint and body CRC are still in a compact manifest's
        stamps page not read yet (:meth:`take_stamp` or first use reads them)."""
        return self._rows is not None

    def take_stamp(self) -> None:
        """Take the fingerprint and body CRC from the compact manifest (its page fetched now
        when it was not read in a round).

        Raises:
            ManifestError: The page fails its checks.
        """
        rows = self._rows
        if rows is not None:
            self._fingerprint, self._body_crc = rows.stamp(self._row)
            self._rows = None

    def stamp_source(self) -> tuple[StampSource, int] | None:
        """``(compact manifest, row)`` this shard's stamp is still to be read from, or
        ``None``."""
        return None if self._rows is None else (self._rows, self._row)

    @property
    def fingerprint(self) -> str | None:
        """The data file's fingerprint the manifest (or the pinned header) gives, or
        ``None``."""
        if self._rows is not None:
            self.take_stamp()
        return self._fingerprint

    @property
    def body_crc(self) -> int | None:
        """The sidecar body CRC the manifest (or the pinned header) names, or ``None``."""
        if self._rows is not None:
            self.take_stamp()
        return self._body_crc

    def pin(self, header: SidecarHeader) -> None:
        """Take the count, stamp and body CRC a checked header gives as what this shard is
        (a remote sidecar opened by its header, without a manifest): every later fetch of its
        header, pages or whole sidecar, in any process, is checked against them as against a
        manifest's.

        Args:
            header: The sidecar's header, its CRC checked.
        """
        self.records = header.count
        self.size = header.stamp.size
        self._fingerprint = header.stamp.fingerprint
        self._body_crc = header.body_crc
        self._content = header.stamp.content
        self._rows = None
        self.partial = header.partial
        self._pinned = header

    @property
    def found(self) -> bool:
        """Whether this shard's sidecar was found: opened in this process, or its header
        pinned when the dataset was opened (or kept when its map was let go of)."""
        return self.opened or self._pinned is not None or self._kept_header is not None

    def __repr__(self) -> str:
        return f"Shard({self.path!r}, {self.records} records)"

    def unload(self) -> None:
        """Drop this process's copy of the sidecar (it is reopened on the next read; one
        grown in memory is kept: it holds no file)."""
        self._sidecar = self._unchecked = self.ready = None
        OPEN_FILES.drop(self, "sidecar")

    def release_held(self, key: Hashable) -> None:
        """Let go of the memory-mapped sidecar (its map closes once no read uses it), as the
        process's count of open files asks (:mod:`ofindex.storage.openfiles`); its header is
        kept for :attr:`header`."""
        held = self._sidecar if self._sidecar is not None else self._unchecked
        if held is not None and self._pid == os.getpid():
            self._kept_header = held.header
        self.unload()

    def was_used(self) -> bool:
        """Whether a read used the sidecar since this was last asked (and forget it): the
        memory tier's question before it lets go of the sidecar."""
        used, self.used = self.used, False
        return used

    @property
    def loaded(self) -> bool:
        """Whether this process holds the sidecar, its offsets checked, ready for reads."""
        return self._grown is not None or (self._sidecar is not None
                                           and self._pid == os.getpid())

    @property
    def opened(self) -> bool:
        """Whether this process holds the sidecar, checked or only its header."""
        # (not ``self._sidecar or …``: a sidecar of no records is falsy, as its len() is 0)
        return self._grown is not None or (
            (self._sidecar is not None or self._unchecked is not None)
            and self._pid == os.getpid())

    @property
    def sidecar(self) -> Sidecar:
        grown = self._grown
        if grown is not None:  # held in memory whatever the process
            held = self.ready
            if held is None or held[0] != os.getpid():
                self.ready = (os.getpid(), grown)
            return grown
        sidecar = self._sidecar
        if sidecar is None or self._pid != os.getpid():
            return self.load()
        self.used = True
        return sidecar

    @property
    def header(self) -> SidecarHeader:
        """The sidecar's header, checked against what the dataset expects; opening it does not
        check the offsets yet (the first read does)."""
        if self._grown is not None:
            return self._grown.header
        if self._pid == os.getpid():
            sidecar = self._sidecar if self._sidecar is not None else self._unchecked
            if sidecar is not None:
                return sidecar.header
        if self._pinned is not None:
            return self._pinned
        if self._kept_header is not None:
            return self._kept_header
        return self.load(check_body=False).header

    @property
    def index_url(self) -> str:
        return self.index_storage.url(self.index_path)

    def expected_stamp(self) -> FileStamp | None:
        """The data file's stamp the manifest (or the header pinned at open) gives, with the
        content digest of the sidecar header once one was checked in this process; else
        ``None``."""
        fingerprint = self.fingerprint
        if fingerprint is None:
            return None
        return FileStamp(self.size, fingerprint, content=self._content)

    def disk_copy(self) -> Sidecar | None:
        """A valid copy of this remote sidecar in the node cache (only with a manifest's
        stamps), or ``None``."""
        machine = None if self.cache is None else self.cache.machine
        if machine is None or self.index_storage.is_local:
            return None  # (a compact manifest's stamp is not read for nothing)
        expect = self.expected_stamp()
        if expect is None:
            return None
        return machine.open_sidecar(self.index_url, expect, self.records, self.body_crc)

    def not_found(self) -> IndexNotFoundError:
        """The error for this shard's missing sidecar, with the command that builds it."""
        return missing_indexes([self], 1)

    def from_fetched(self, raw: bytes) -> tuple[Sidecar, int]:
        """Parse a fetched remote sidecar (its body checked against its CRC); keep a disk copy
        when there is a cache_dir.

        Returns:
            The sidecar, and the bytes it holds in memory (0 when it is kept on disk).

        Raises:
            SidecarError: It is not a valid sidecar.
        """
        sidecar = parse_sidecar(raw, path=self.index_url, data_url=self.data_url)
        machine, expect = None if self.cache is None else self.cache.machine, self.expected_stamp()
        if (machine is not None and expect is not None
                and sidecar.header.count == self.records and sidecar.header.stamp == expect):
            disk = machine.keep_sidecar(self.index_url, raw)
            if disk is not None:
                return disk, 0
        return sidecar, len(raw)

    def _fetch(self) -> tuple[Sidecar, int]:
        """The sidecar and the bytes it holds in memory (0 when memory-mapped)."""
        index_storage = self.index_storage
        sidecar = self.disk_copy()
        if sidecar is not None:
            return sidecar, 0
        try:
            if index_storage.is_local:
                return load_sidecar(index_storage, self.index_path), 0
            raw = index_storage.read_all(self.index_path)
        except FileNotFoundError:
            raise self.not_found() from None
        return self.from_fetched(raw)

    def load(self, *, check_body: bool = True) -> Sidecar:
        """Open (or fetch) the sidecar and check it against what the dataset expects (and,
        with ``data_storage``, the data file against it); with ``check_body`` also its offsets
        against their CRC, before any record is read through them.

        Raises:
            IndexNotFoundError: There is no sidecar.
            StaleIndexError: It disagrees with the data file or the manifest.
            SidecarError: It is corrupt.
        """
        pending = self._unchecked if self._pid == os.getpid() else None
        if pending is not None:  # opened for its header in this process: only its offsets
            return pending if not check_body else self._publish(pending, 0)  # are left
        if self.data_storage is self.index_storage and not self.index_storage.is_local:
            return self._fetch_with_stamp(check_body)  # sidecar and stat: one round
        sidecar, nbytes = self._fetch()
        current = None
        if self.data_storage is not None:
            current = self.data_storage.stamp(self.path)
        return self.accept(sidecar, nbytes, current, check_body=check_body)

    def _fetch_with_stamp(self, check_body: bool) -> Sidecar:
        """Fetch the remote sidecar and stat the data file in one round of requests."""
        storage = self.index_storage
        sidecar = self.disk_copy()
        raws, stamps = storage.fetch_many([] if sidecar is not None else [self.index_path],
                                          [self.path])
        nbytes = 0
        if sidecar is None:
            raw = raws[0]
            if isinstance(raw, FileNotFoundError):
                raise self.not_found() from None
            if isinstance(raw, BaseException):
                raise raw
            sidecar, nbytes = self.from_fetched(raw)
        current = stamps[0]
        if isinstance(current, BaseException):
            raise current
        return self.accept(sidecar, nbytes, current, check_body=check_body)

    def accept(self, sidecar: Sidecar, nbytes: int, current: FileStamp | None, *,
               check_body: bool = True) -> Sidecar:
        """Take a sidecar fetched or opened for this shard in this process, after checking it
        against what the dataset expects and the data file's stamp ``current`` against it.

        Args:
            sidecar: The sidecar.
            nbytes: The bytes it holds in memory (for the cache's bound).
            current: The data file's stamp now, or ``None`` (not checked).
            check_body: Check its body against its CRC now (else on first read).

        Returns:
            The sidecar.

        Raises:
            StaleIndexError, SidecarError: It does not describe the file, or is corrupt.
        """
        if sidecar.segments and 0 <= self.records != sidecar.header.count:
            # grown since the manifest (or the header pinned at open) was read: as it was then
            sidecar = sidecar.state_at(self.records, self.body_crc) or sidecar
        h = sidecar.header
        self.check_header(h)
        if current is not None and self.data_storage is not None:
            check_identity(self.data_storage, self.path, h.stamp, current, self.index_url)
        self.records = h.count
        self.size = h.stamp.size
        self.partial = h.partial
        self._pid = os.getpid()
        if not nbytes:  # memory-mapped (a local sidecar, or a copy in cache_dir): a descriptor
            OPEN_FILES.hold(self, "sidecar")  # (may let go of the oldest files)
        if not check_body and not sidecar.body_checked:
            self._unchecked = sidecar
            return sidecar
        return self._publish(sidecar, nbytes)

    def _publish(self, sidecar: Sidecar, nbytes: int) -> Sidecar:
        """Check the offsets (once) and make the sidecar the one reads use in this process."""
        sidecar.check_offsets(self.data_url)
        self._sidecar, self._unchecked = sidecar, None
        self.ready = (self._pid, sidecar)
        nbytes += sidecar.decoded_bytes  # packed offsets, decoded in memory even when mapped
        if self.cache is not None and nbytes:
            self.cache.hold_sidecar(id(self), nbytes, self.unload, self.was_used)
        return sidecar

    def check_header(self, h: SidecarHeader) -> None:
        """Check a sidecar header against what the dataset expects of this shard (the
        manifest's, or the header pinned when it was opened).

        Raises:
            StaleIndexError: It disagrees with the manifest, or with the pinned header.
            SidecarError: It changed since the dataset was opened.
        """
        expect = self.expected_stamp()
        if self._pinned is not None:
            if (h.count != self.records or h.stamp != expect or h.body_crc != self.body_crc
                    or h.stamp.content != self._content):
                raise StaleIndexError(
                    f"{self.index_url}: the index changed since the dataset was opened "
                    f"({self.records} records, {expect}, body CRC 0x{self.body_crc or 0:08x}; "
                    f"now {h.count} records, {h.stamp}, body CRC 0x{h.body_crc:08x}); reopen "
                    "the dataset"
                )
            return
        if self.body_crc is not None and h.body_crc != self.body_crc:
            raise StaleIndexError(
                f"{self.index_url}: this sidecar was rebuilt after the dataset manifest was "
                f"written (its body CRC is 0x{h.body_crc:08x}, the manifest names "
                f"0x{self.body_crc:08x}); the manifest is out of date — run `ofindex build "
                "<dataset directory>` again"
            )
        if expect is not None:
            if h.count != self.records or h.stamp != expect:
                raise StaleIndexError(
                    f"{self.index_url}: the sidecar does not match the dataset manifest "
                    f"({self.records} records, {expect}) but has {h.count} records, {h.stamp}; "
                    "the manifest is out of date — run `ofindex build <dataset directory>` again"
                )
        elif self.records >= 0 and (h.count != self.records or h.stamp.size != self.size):
            raise SidecarError(
                f"{self.index_url}: the index changed since the dataset was opened "
                f"({self.records} -> {h.count} records); reopen the dataset"
            )
        self._content = h.stamp.content

    @property
    def format(self) -> RecordFormat:
        return self.header.format


def missing_indexes(missing: list[Shard], total: int) -> IndexNotFoundError:
    """One error for every shard of a dataset that has no sidecar, with the command that
    builds them all."""
    urls = [s.data_url for s in missing]
    dirs = {u.rstrip("/").rsplit("/", 1)[0] for u in urls}
    target = dirs.pop() if len(dirs) == 1 and len(missing) > 1 else " ".join(urls[:3])
    if len(missing) == 1:
        what = f"{missing[0].index_url}: no index for {urls[0]}"
    else:
        shown = ", ".join(urls[:5]) + (f" and {len(urls) - 5} more" if len(urls) > 5 else "")
        what = f"{len(missing)} of {total} shards have no index ({shown})"
    web = all(u.startswith(("http://", "https://")) for u in urls)
    elsewhere = hint(" and open with index_dir='DIR'", " and pass --index-dir DIR here too")
    also = (f" (a web server usually takes no uploads: then `ofindex build {target} "
            f"--index-dir DIR`{elsewhere})" if web
            else hint(" (or open with build_missing=True)", ""))
    return IndexNotFoundError(
        f"{what}; build {'it' if len(missing) == 1 else 'them'} with `ofindex build {target}`"
        f"{also}"
    )
