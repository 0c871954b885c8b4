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
compressed-file sidecars, :class:`ofindex.read.shards.SidecarCache`) are registered here too,
so one bound (``cache_dir_bytes``) covers both: past it, the least recently used entries are
evicted (pages deleted, files unlinked; a process that has one mapped keeps its mapping).

The cache is best effort: when the database is busy for longer than its timeout, or the disk
is full, the page is simply fetched again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence

from ..storage import FileStamp

#: Default bound on the bytes a node cache holds.
DEFAULT_NODE_BYTES = 16 << 30
DB_NAME = "ofindex-pages.sqlite3"
#: A hit refreshes an entry's last use only when it is older than this (seconds): most reads
#: then take no write lock.
TOUCH_AFTER = 60.0
#: Bytes an entry costs besides its data (key, row and index overhead).
ENTRY_OVERHEAD = 64

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS entries (key BLOB PRIMARY KEY, data BLOB, size INTEGER "
    "NOT NULL, used REAL NOT NULL, file TEXT) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS entries_used ON entries (used)",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO meta VALUES ('bytes', 0)",
)


def sidecar_key(index_url: str, stamp: FileStamp, body_crc: int | None = None) -> bytes:
    """The key of one version of one sidecar: its URL, its data file's stamp and, when the
    manifest names it, its body CRC (a sidecar rebuilt for a file of the same size and mtime
    is another version)."""
    text = f"{index_url}\0{stamp.size}\0{stamp.fingerprint}\0{body_crc}".encode()
    return hashlib.sha256(text).digest()[:16]


class NodeCache:
    """The machine-wide cache in ``directory``, bounded by ``max_bytes``.

    Picklable: each process (and fork) opens its own connection on first use.

    Args:
        directory: Where the database lives (created if needed).
        max_bytes: Bound on the bytes of all entries.
    """

    def __init__(self, directory: str, max_bytes: int = DEFAULT_NODE_BYTES) -> None:
        self.directory = os.path.abspath(os.path.expanduser(directory))
        self.max_bytes = int(max_bytes)
        self._db: sqlite3.Connection | None = None
        self._pid = -1
        self._lock = threading.Lock()

    def __getstate__(self) -> tuple[str, int]:
        return (self.directory, self.max_bytes)

    def __setstate__(self, state: tuple[str, int]) -> None:
        NodeCache.__init__(self, *state)

    def __repr__(self) -> str:
        return f"NodeCache({self.directory!r}, max_bytes={self.max_bytes})"

    @property
    def path(self) -> str:
        """The database file."""
        return os.path.join(self.directory, DB_NAME)

    def _conn(self) -> sqlite3.Connection:
        if self._db is not None and self._pid == os.getpid():
            return self._db
        os.makedirs(self.directory, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None,
                             check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        with _transaction(db):
            for statement in _SCHEMA:
                db.execute(statement)
        self._db, self._pid = db, os.getpid()
        return db

    def close(self) -> None:
        """Close this process's connection (reopened on next use)."""
        with self._lock:
            if self._db is not None and self._pid == os.getpid():
                self._db.close()
            self._db = None

    # -- reads ----------------------------------------------------------------------------
    def get(self, keys: list[bytes]) -> dict[bytes, bytes]:
        """The entries found among ``keys`` (missing ones are left out)."""
        if not keys:
            return {}
        found: dict[bytes, bytes] = {}
        stale: list[bytes] = []
        now = time.time()
        try:
            with self._lock:
                db = self._conn()
                for k in range(0, len(keys), 500):  # SQLite's bound on host parameters
                    chunk = keys[k : k + 500]
                    marks = ",".join("?" * len(chunk))
                    for key, data, used in db.execute(
                        f"SELECT key, data, used FROM entries WHERE key IN ({marks}) "
                        "AND data IS NOT NULL", chunk,
                    ):
                        found[key] = data
                        if used < now - TOUCH_AFTER:
                            stale.append(key)
                if stale:
                    with _transaction(db):
                        db.executemany("UPDATE entries SET used = ? WHERE key = ?",
                                       [(now, k) for k in stale])
        except sqlite3.Error:
            return found
        return found

    # -- writes ---------------------------------------------------------------------------
    def put(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Store ``(key, data)`` entries (kept if already there), then evict if over budget."""
        rows = [(key, data, len(data) + ENTRY_OVERHEAD) for key, data in items]
        if rows:
            self._insert(rows, None)

    def note_file(self, path: str, nbytes: int) -> None:
        """Register a whole-sidecar file kept in the cache directory (evicted by unlinking)."""
        key = b"file:" + os.path.basename(path).encode()
        self._insert([(key, None, nbytes + ENTRY_OVERHEAD)], path)

    def _insert(self, rows: Sequence[tuple[bytes, bytes | None, int]],
                file: str | None) -> None:
        now = time.time()
        victims: list[str] = []
        try:
            with self._lock:
                db = self._conn()
                with _transaction(db):
                    added = 0
                    for key, data, size in rows:
                        cur = db.execute(
                            "INSERT OR IGNORE INTO entries VALUES (?, ?, ?, ?, ?)",
                            (key, data, size, now, file))
                        added += size if cur.rowcount == 1 else 0
                    total = db.execute("UPDATE meta SET value = value + ? WHERE name = 'bytes' "
                                       "RETURNING value", (added,)).fetchone()[0]
                    if total > self.max_bytes:
                        victims = self._evict(db, total - self.max_bytes * 9 // 10)
        except sqlite3.Error:
            return
        for path in victims:
            with contextlib.suppress(OSError):
                os.remove(path)

    @staticmethod
    def _evict(db: sqlite3.Connection, need: int) -> list[str]:
        """Delete the least recently used entries holding at least ``need`` bytes (inside
        the caller's transaction); returns the files to unlink."""
        freed, keys, files = 0, [], []
        for key, size, file in db.execute(
                "SELECT key, size, file FROM entries ORDER BY used"):
            keys.append((key,))
            freed += size
            if file is not None:
                files.append(file)
            if freed >= need:
                break
        db.executemany("DELETE FROM entries WHERE key = ?", keys)
        db.execute("UPDATE meta SET value = value - ? WHERE name = 'bytes'", (freed,))
        return files

    def held_bytes(self) -> int:
        """Bytes the cache holds now (all processes)."""
        try:
            with self._lock:
                row = self._conn().execute("SELECT value FROM meta WHERE name = 'bytes'")
                return int(row.fetchone()[0])
        except sqlite3.Error:
            return 0


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on error): one writer at a time."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
