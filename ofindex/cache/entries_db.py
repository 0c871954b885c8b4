"""The node cache's SQLite databases (``cache_dir/ofindex-pages.sqlite3``, and
``ofindex-data.sqlite3`` for the data cache), trusted for nothing.

Its layout: ``entries(key, data, size, used, file)`` (one row per page, header or whole
sidecar file, ``used`` its last use) and ``meta('bytes', value)``, the bytes held. Opening it
refuses a database that is a symbolic link, holds anything else than this layout or comes from
a newer ofindex, and lets nothing stored in it run (``trusted_schema``). Rows are read only
through SQL that checks their shape, so a row of another shape (types, a huge blob, a key too
long) is never loaded whole: it is a miss, and it is dropped. The ``file`` column is written
for ofindex versions that unlink the path it names on eviction; it is never read (the file of
an entry is derived from its key, :mod:`ofindex.cache.dir_files`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator, Sequence

from ..formats.sidecar import SUFFIX
from . import dir_files

DB_NAME = "ofindex-pages.sqlite3"
#: The data cache's database (:mod:`ofindex.cache.data`): the same layout, its own bound.
DATA_DB_NAME = "ofindex-data.sqlite3"


def database_files(name: str) -> tuple[str, ...]:
    """The database ``name`` and the files SQLite keeps beside it."""
    return (name, name + "-wal", name + "-shm", name + "-journal")

#: ``PRAGMA user_version`` of this layout (0: written before the version was set, the same).
SCHEMA_VERSION = 1
#: Bounds of a well-formed row: longer keys or data, or other sizes, are not of our making.
MAX_KEY = 64
MAX_DATA = 1 << 20
MAX_SIZE = 1 << 48
_MAX_TOTAL = 1 << 62

# Columns are read only through these.
_KEY = f"CASE WHEN typeof(key) = 'blob' AND length(key) <= {MAX_KEY} THEN key END"
_SIZE_OK = f"typeof(size) = 'integer' AND size BETWEEN 0 AND {MAX_SIZE}"
_SIZE = f"CASE WHEN {_SIZE_OK} THEN size ELSE 0 END"
_DATA = (f"CASE WHEN typeof(data) = 'blob' AND length(data) <= {MAX_DATA} AND {_SIZE_OK} "
         "THEN data END")
_FRESH = "CASE WHEN typeof(used) IN ('integer', 'real') AND used >= ? THEN 1 ELSE 0 END"

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS entries (key BLOB PRIMARY KEY, data BLOB, size INTEGER "
    "NOT NULL, used REAL NOT NULL, file TEXT) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS entries_used ON entries (used)",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    # the bytes held: counted from the entries when the count is missing (0 when new)
    f"INSERT INTO meta SELECT 'bytes', (SELECT CAST(total({_SIZE}) AS INTEGER) FROM entries) "
    "WHERE NOT EXISTS (SELECT 1 FROM meta WHERE name = 'bytes')",
)
_OBJECTS = {("table", "entries"), ("index", "entries_used"), ("table", "meta"),
            ("index", "sqlite_autoindex_meta_1")}
_COLUMNS = {"entries": ["key", "data", "size", "used", "file"], "meta": ["name", "value"]}


class Unusable(Exception):
    """Why the cache directory or its database cannot be used."""


def open_database(directory: str, name: str = DB_NAME) -> sqlite3.Connection:
    """Connect to the cache database ``name`` of ``directory``, creating or checking its
    layout.

    Raises:
        Unusable: The directory, the database or a file beside it cannot be used.
    """
    files = database_files(name)
    problem = dir_files.directory_problem(directory) or dir_files.file_problem(directory, files)
    if problem is not None:
        raise Unusable(problem)
    path = os.path.join(directory, name)
    try:
        database = sqlite3.connect(path, timeout=30.0, isolation_level=None,
                                   check_same_thread=False)
    except sqlite3.Error as e:
        raise Unusable(f"{path} cannot be opened ({e})") from None
    try:
        # again now that it is open, before anything is written: SQLite follows a link to the
        # database (it opens the log and the shared memory without following links itself)
        problem = dir_files.file_problem(directory, files)
        if problem is not None:
            raise Unusable(problem)
        database.execute("PRAGMA trusted_schema = OFF")  # nothing in the file runs as our code
        _check_layout(database, path)  # before anything is written to it
        database.execute("PRAGMA journal_mode=WAL")
        database.execute("PRAGMA synchronous=NORMAL")
        with transaction(database):
            version = database.execute("PRAGMA user_version").fetchone()[0]
            for statement in _SCHEMA:
                database.execute(statement)
            if version == 0:
                database.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            _check_layout(database, path)  # as another process may have made it meanwhile
    except sqlite3.OperationalError as e:  # read-only, locked for longer than the timeout …
        database.close()
        raise Unusable(f"{path} cannot be used ({e})") from None
    except sqlite3.Error as e:
        database.close()
        raise Unusable(f"{path} is not an SQLite database or is damaged ({e}); remove it "
                       "or use another directory") from None
    except Unusable:
        database.close()
        raise
    return database


def _check_layout(database: sqlite3.Connection, path: str) -> None:
    """Check that the database holds no more than the cache's tables, in its layout.

    Raises:
        Unusable: It holds something else, or a newer ofindex's layout.
    """
    version = database.execute("PRAGMA user_version").fetchone()[0]
    if version not in (0, SCHEMA_VERSION):
        raise Unusable(f"{path} was written by a newer ofindex (schema {version}); upgrade "
                       "ofindex or use another directory")
    objects = set(database.execute("SELECT type, name FROM sqlite_master"))
    columns = {table: [row[1] for row in database.execute(f"PRAGMA table_info({table})")]
               for table in _COLUMNS if ("table", table) in objects}
    if not objects <= _OBJECTS or any(columns[t] != _COLUMNS[t] for t in columns):
        raise Unusable(f"{path} is not an ofindex cache database; remove it or use another "
                       "directory")


@contextlib.contextmanager
def transaction(database: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on error): one writer at a time."""
    database.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        database.execute("ROLLBACK")
        raise
    database.execute("COMMIT")


def select(database: sqlite3.Connection, keys: Sequence[bytes],
           fresh_after: float) -> Iterator[tuple[bytes, bytes | None, bool]]:
    """``(key, data, fresh)`` of the entries among ``keys`` (at most 500): ``data`` is
    ``None`` for a row of another shape than the cache writes, ``fresh`` tells a last use
    after ``fresh_after``."""
    marks = ",".join("?" * len(keys))
    for key, data, fresh in database.execute(
            f"SELECT key, {_DATA}, {_FRESH} FROM entries WHERE key IN ({marks})",
            [fresh_after, *keys]):
        yield key, data, bool(fresh)


def touch(database: sqlite3.Connection, keys: Sequence[bytes], now: float) -> None:
    """Mark ``keys`` used ``now`` (inside the caller's transaction)."""
    database.executemany("UPDATE entries SET used = ? WHERE key = ?", [(now, key) for key in keys])


def drop(database: sqlite3.Connection, keys: Sequence[bytes]) -> None:
    """Delete the entries ``keys`` and their bytes from the count (in the caller's
    transaction)."""
    if keys:
        _count(database, -sum(_delete(database, key) for key in keys))


def replace(database: sqlite3.Connection,
            rows: Sequence[tuple[bytes, bytes | None, int, str | None]],
            now: float) -> int:
    """Store ``(key, data, size, file)`` rows in place of any there (in the caller's
    transaction); returns the bytes held then."""
    change = 0
    for key, data, size, file in rows:
        change += size - _delete(database, key)
        database.execute("INSERT INTO entries (key, data, size, used, file) VALUES (?, ?, ?, ?, ?)",
                   (key, data, size, now, file))
    return _count(database, change)


def held(database: sqlite3.Connection) -> int:
    """The bytes the database counts as held (0 when the count is not a plausible one)."""
    row = database.execute("SELECT value FROM meta WHERE name = 'bytes'").fetchone()
    value = None if row is None else row[0]
    return value if isinstance(value, int) and 0 <= value <= _MAX_TOTAL else 0


def _delete(database: sqlite3.Connection, key: bytes) -> int:
    """Delete the entry ``key`` (in the caller's transaction); the bytes it was counted for."""
    row = database.execute(f"DELETE FROM entries WHERE key = ? RETURNING {_SIZE}",
                           (key,)).fetchone()
    return 0 if row is None else int(row[0])


def _count(database: sqlite3.Connection, change: int) -> int:
    """Add ``change`` to the bytes held and return them; a count that is not a plausible
    number of bytes is counted again from the entries."""
    row = database.execute("UPDATE meta SET value = value + ? WHERE name = 'bytes' "
                     "AND typeof(value) = 'integer' RETURNING value", (change,)).fetchone()
    total = None if row is None else row[0]
    if isinstance(total, int) and 0 <= total <= _MAX_TOTAL:
        return total
    total = int(database.execute(f"SELECT total({_SIZE}) FROM entries").fetchone()[0])
    database.execute("INSERT OR REPLACE INTO meta VALUES ('bytes', ?)", (total,))
    return total


def evict(database: sqlite3.Connection, need: int, suffix: str = SUFFIX) -> list[str]:
    """Delete the least recently used entries holding at least ``need`` bytes (inside the
    caller's transaction); returns the files of kind ``suffix`` to unlink (whole sidecars,
    or blocks of data), named by their keys."""
    # a last use that is no time sorts after every real one: such rows go first (by the index)
    dropped = [row for test in ("IS NULL", ">= ''") for row in database.execute(
        f"DELETE FROM entries WHERE used {test} RETURNING {_KEY}, {_SIZE}").fetchall()]
    freed, doomed, odd, exhausted = 0, [], False, False
    rows = database.execute(f"SELECT {_KEY}, {_SIZE} FROM entries ORDER BY used")
    for key, size in rows:
        if key is None:  # a key of no shape of ours: dropped below, without reading it
            odd = True
            continue
        doomed.append((key, size))
        freed += size
        if freed >= need:
            break
    else:
        exhausted = True
    rows.close()
    database.executemany("DELETE FROM entries WHERE key = ?", [(key,) for key, _ in doomed])
    if odd:
        dropped += database.execute(f"DELETE FROM entries WHERE ({_KEY}) IS NULL "
                              f"RETURNING NULL, {_SIZE}").fetchall()
    if exhausted:  # every entry is gone: the count starts again from zero
        database.execute("UPDATE meta SET value = 0 WHERE name = 'bytes'")
    else:
        _count(database, -freed - sum(size for _, size in dropped))
    victims = [key for key, _ in doomed + dropped if key is not None]
    names = (dir_files.name_of_key(key, suffix) for key in victims)
    return [name for name in names if name is not None]
