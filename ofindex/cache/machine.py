"""One cache of sidecar pages per machine, shared by every process that reads (``cache_dir``).

DataLoader workers and training ranks on one node read the same sidecars: with
``ofindex.open(..., cache_dir=DIR)`` a page (or a sidecar header) fetched by one process is
found by all the others in ``DIR/ofindex-pages.sqlite3``, an SQLite database in WAL mode:
every write is an atomic transaction, any number of processes read and write it at once
(SQLite's file locks serialize writers; a reader never sees a half-written page), and a
process that dies mid-write leaves the database as it was before its transaction.

Entries are keyed by the sidecar's URL *and* the data file's stamp (size and fingerprint from
the manifest), so an entry is found only while the stamps match; entries of older versions
are never read again and age out. Whole sidecars kept as files beside it (version 1 and
compressed-file sidecars, small ones) are registered here too, so one bound
(``cache_dir_bytes``) covers both: past it, the least recently used entries are evicted
(pages deleted, files unlinked; a process that has one mapped keeps its mapping).

The database is data, never trusted for paths: the file an entry stands for is derived from
its key (:mod:`ofindex.cache.dir_files`), rows of the wrong shape (types, sizes, lengths) are
misses and are dropped (:mod:`ofindex.cache.entries_db`), and nothing in the directory is opened
through a symbolic link.

The cache is best effort. When ``cache_dir`` cannot be used (not a directory, not writable, a
database that is a link, foreign, or from a newer ofindex …) the process reads without it and
says why once, with a :class:`CacheDirWarning`; the verdict reached when the dataset is opened
travels with it to workers. When the database is busy for longer than its timeout, or the
disk is full, the page is simply fetched again.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterable, Sequence

from ..errors import CacheDirWarning
from ..formats.sidecar import SUFFIX, Sidecar, decode_header
from ..storage import FileStamp, write_local_atomic
from . import dir_files, entries_db
from .entries_db import DB_NAME, MAX_DATA, MAX_KEY

__all__ = ["DB_NAME", "DEFAULT_NODE_BYTES", "NodeCache"]

#: Default bound on the bytes a node cache holds.
DEFAULT_NODE_BYTES = 16 << 30
#: A hit refreshes an entry's last use only when it is older than this (seconds): most reads
#: then take no write lock.
TOUCH_AFTER = 60.0
#: Bytes an entry costs besides its data (key, row and index overhead).
ENTRY_OVERHEAD = 64


#: Connections a forked child inherited: never used nor closed there (closing one would drop
#: SQLite's locks of the parent's inode state in the child), only kept from the collector.
_INHERITED: list[sqlite3.Connection] = []


class NodeCache:
    """The machine-wide cache in ``directory``, bounded by ``max_bytes``.

    The directory is checked (and created) now: when it cannot be used, one
    :class:`CacheDirWarning` says why and the cache stays empty. Picklable with that verdict:
    each process (and fork) opens its own connection on first use.

    Args:
        directory: Where the database and whole sidecars live.
        max_bytes: Bound on the bytes of all entries.
    """

    def __init__(self, directory: str, max_bytes: int = DEFAULT_NODE_BYTES, *,
                 database: str = DB_NAME, files: str = SUFFIX,
                 problem: str | None = None) -> None:
        self._restore(os.path.abspath(os.path.expanduser(directory)), int(max_bytes),
                      problem, database, files)
        with self._lock:
            self._connect()
            self._close()  # no connection is carried across a fork of the opening process

    def _restore(self, directory: str, max_bytes: int, problem: str | None,
                 database: str = DB_NAME, files: str = SUFFIX) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        #: Why the cache is not used (warned once), or ``None``.
        self.problem = problem
        #: The database's file name, and the suffix of the files its rows stand for.
        self.database_name, self.files = database, files
        self._db: sqlite3.Connection | None = None
        self._pid = -1
        self._lock = threading.Lock()

    def __getstate__(self) -> tuple[str, int, str | None, str, str]:
        return (self.directory, self.max_bytes, self.problem, self.database_name, self.files)

    def __setstate__(self, state: tuple[str, int, str | None, str, str]) -> None:
        self._restore(*state)

    def __repr__(self) -> str:
        return f"NodeCache({self.directory!r}, max_bytes={self.max_bytes})"

    @property
    def path(self) -> str:
        """The database file."""
        return os.path.join(self.directory, self.database_name)

    def _connect(self) -> sqlite3.Connection | None:
        """This process's connection, or ``None`` when the cache is not used."""
        if self.problem is not None:
            return None
        if self._db is not None and self._pid == os.getpid():
            return self._db
        if self._db is not None:
            _INHERITED.append(self._db)
            self._db = None
        try:
            database = entries_db.open_database(self.directory, self.database_name)
        except entries_db.Unusable as e:
            self.problem = str(e)
            warnings.warn(CacheDirWarning(
                f"cache_dir {self.directory!r} cannot be used: {e}; reading without the node "
                "cache (pass another directory as cache_dir=, or fix this one)"), stacklevel=2)
            return None
        self._db, self._pid = database, os.getpid()
        return database

    def _close(self) -> None:
        if self._db is not None and self._pid == os.getpid():
            self._db.close()
        elif self._db is not None:
            _INHERITED.append(self._db)
        self._db = None

    def close(self) -> None:
        """Close this process's connection (reopened on next use)."""
        with self._lock:
            self._close()

    def usable(self) -> bool:
        """Whether this process uses the cache (``False`` once it found it unusable)."""
        with self._lock:
            return self._connect() is not None

    # -- reads ----------------------------------------------------------------------------
    def get(self, keys: list[bytes]) -> dict[bytes, bytes]:
        """The entries found among ``keys`` (missing and malformed ones are left out, and
        malformed ones dropped)."""
        found: dict[bytes, bytes] = {}
        if not keys:
            return found
        stale: list[bytes] = []
        malformed: list[bytes] = []
        now = time.time()
        with self._lock:
            database = self._connect()
            if database is None:
                return found
            try:
                for k in range(0, len(keys), 500):  # SQLite's bound on host parameters
                    for key, data, fresh in entries_db.select(database, keys[k : k + 500],
                                                           now - TOUCH_AFTER):
                        if data is None:  # of no shape we write
                            malformed.append(key)
                            continue
                        found[key] = data
                        if not fresh:
                            stale.append(key)
                if stale or malformed:
                    with entries_db.transaction(database):
                        entries_db.touch(database, stale, now)
                        entries_db.drop(database, malformed)
            except sqlite3.Error:
                return found
        return found

    # -- writes ---------------------------------------------------------------------------
    def put(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Store ``(key, data)`` entries (replacing what is there), then evict if over
        budget. Entries too large for the cache's rows are not stored."""
        rows = [(key, data, len(data) + ENTRY_OVERHEAD, None) for key, data in items
                if len(key) <= MAX_KEY and len(data) <= MAX_DATA]
        if rows:
            self._insert(rows)

    def note_files(self, items: Sequence[tuple[str, int]]) -> set[str]:
        """Register (or mark used now) the files ``(name, bytes)`` kept in the directory, of
        the kind this cache holds (evicted by unlinking them).

        Returns:
            The names evicted to stay within the bound (the caller's own among them when
            the bound cannot hold them: they are not to be written).

        Raises:
            ValueError: A name is not one the cache gives a file of its kind.
        """
        rows: list[tuple[bytes, bytes | None, int, str | None]] = []
        for name, nbytes in items:
            key = dir_files.file_key(name)
            if dir_files.name_of_key(key, self.files) != name:
                raise ValueError(f"{name!r} is not a name the node cache gives a "
                                 f"{self.files} file")
            rows.append((key, None, nbytes + ENTRY_OVERHEAD, os.path.join(self.directory, name)))
        return self._insert(rows) if rows else set()

    def forget(self, names: Sequence[str]) -> None:
        """Drop the files ``names`` (of this cache's kind) and their rows: a damaged copy."""
        with self._lock:
            database = self._connect()
            if database is None:
                return
            try:
                with entries_db.transaction(database):
                    entries_db.drop(database, [dir_files.file_key(name) for name in names])
            except sqlite3.Error:
                pass
        for name in names:
            if dir_files.name_of_key(dir_files.file_key(name), self.files) == name:
                dir_files.remove_entry(self.directory, name)

    def _insert(self, rows: Sequence[tuple[bytes, bytes | None, int, str | None]]) -> set[str]:
        now = time.time()
        victims: list[str] = []
        with self._lock:
            database = self._connect()
            if database is None:
                return set()
            try:
                with entries_db.transaction(database):
                    total = entries_db.replace(database, rows, now)
                    if total > self.max_bytes:
                        victims = entries_db.evict(database, total - self.max_bytes * 9 // 10,
                                                self.files)
            except sqlite3.Error:
                return {name for row in rows
                        if (name := dir_files.name_of_key(row[0], self.files)) is not None}
        for name in victims:
            dir_files.remove_entry(self.directory, name)
        return set(victims)

    def held_bytes(self) -> int:
        """Bytes the cache holds now (all processes)."""
        with self._lock:
            database = self._connect()
            if database is None:
                return 0
            try:
                return entries_db.held(database)
            except sqlite3.Error:
                return 0

    # -- whole sidecars -------------------------------------------------------------------
    def open_sidecar(self, index_url: str, stamp: FileStamp, records: int,
                     body_crc: int | None = None) -> Sidecar | None:
        """The whole sidecar of ``index_url`` kept here, memory-mapped, if it is there and
        has ``records`` records stamped ``stamp`` (and the body CRC ``body_crc`` when given);
        else ``None``."""
        if not self.usable():
            return None
        return dir_files.map_entry(self.directory, dir_files.entry_name(index_url), records,
                                  stamp, body_crc)

    def keep_sidecar(self, index_url: str, raw: bytes) -> Sidecar | None:
        """Keep the fetched sidecar ``raw`` of ``index_url`` (a valid one) as a file here.

        Returns:
            It memory-mapped from there, or ``None`` when it could not be kept.
        """
        if not self.usable():
            return None
        name = dir_files.entry_name(index_url)
        try:
            header = decode_header(raw[:4096], path=index_url)
        except ValueError:
            return None
        try:  # a temporary file renamed into place
            write_local_atomic(os.path.join(self.directory, name), [raw], owned=True)
        except OSError:  # the disk is full, the directory went away …
            return None
        self.note_files([(name, len(raw))])
        return dir_files.map_entry(self.directory, name, header.count, header.stamp)
