"""The node cache (``cache_dir``) trusts nothing it finds on disk: the files it deletes, opens or
maps are named by its own keys inside the directory (never by the database), links there are
never followed, malformed rows are misses that get dropped, and a directory it cannot use
costs one warning and reads without the cache."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pickle
import shutil
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import warnings

import pytest

import ofindex
from ofindex.cache.dir_files import entry_name, file_key
from ofindex.cache.entries_db import DB_NAME, MAX_DATA
from ofindex.cache.machine import NodeCache
from ofindex.cli.synthetic import write_dataset
from ofindex.errors import CacheDirWarning
from tests.kit.backends import make_backend
from tests.kit.helpers import sidecar_of, without_root_privilege


@dataclasses.dataclass
class Remote:
    url: str
    options: dict
    expected: list[bytes]
    local: str


def _remote(request, tmp_path_factory, records: int, shards: int) -> Remote:
    local = str(tmp_path_factory.mktemp("trust-ds"))
    write_dataset(local, records, shards, kind="random", record_size=40, index=False, seed=3)
    ofindex.build_index(local)
    with ofindex.open(local) as ds:
        expected = [ds[i] for i in range(len(ds))]
    backend = make_backend("s3", request, tmp_path_factory)
    url = backend.prefix()
    backend.upload(local, url)
    return Remote(url, backend.storage_options, expected, local)


@pytest.fixture(scope="module")
def paged(request, tmp_path_factory) -> Remote:
    """Sidecars read by pages (cached as database rows)."""
    return _remote(request, tmp_path_factory, 2000, 2)


@pytest.fixture(scope="module")
def whole(request, tmp_path_factory) -> Remote:
    """Sidecars small enough to be fetched whole (cached as files beside the database)."""
    return _remote(request, tmp_path_factory, 120, 3)


def _tamper(path: str, *statements: str, params: tuple = ()) -> None:
    db = sqlite3.connect(path)
    try:
        for statement in statements:
            db.execute(statement, params if "?" in statement else ())
        db.commit()
    finally:
        db.close()


def _rows(path: str, query: str) -> list[tuple]:
    db = sqlite3.connect(path)
    try:
        return list(db.execute(query))
    finally:
        db.close()


def _cache_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, CacheDirWarning)]


def _batches(n: int) -> list[list[int]]:
    return [list(range(start, n, 7)) for start in range(3)]


# -- rows naming files ------------------------------------------------------------------------
def test_eviction_never_deletes_a_path_a_row_names(tmp_path):
    directory = tmp_path / "node"
    outside = tmp_path / "outside"
    outside.mkdir()
    victims = [outside / "victim-1", outside / "victim-2"]
    for victim in victims:
        victim.write_bytes(b"precious")
    cache = NodeCache(str(directory), max_bytes=20_000)
    ours = entry_name("s3://bucket/shard.tfrecord.ofidx")
    (directory / ours).write_bytes(b"x" * 100)
    _tamper(cache.path,
            "INSERT INTO entries VALUES (x'66696c653a2e2e2f6f757473696465', NULL, 3000, 0, ?)",
            params=(str(victims[0]),))  # key b"file:../outside": a path, not a name of ours
    _tamper(cache.path, "INSERT INTO entries VALUES (?, NULL, 3000, 1, ?)",
            params=(file_key(ours), str(victims[1])))  # our key, another file in the row
    _tamper(cache.path, "UPDATE meta SET value = value + 6000")
    for k in range(100):
        cache.put([(b"page-%03d" % k, bytes(500))])
    assert [v.read_bytes() for v in victims] == [b"precious", b"precious"]
    assert not (directory / ours).exists()  # the file its key names was evicted
    assert cache.held_bytes() <= 20_000


def test_a_link_at_an_entry_name_is_unlinked_not_its_target(tmp_path):
    directory = tmp_path / "node"
    target = tmp_path / "precious"
    target.write_bytes(b"precious")
    cache = NodeCache(str(directory), max_bytes=20_000)
    name = entry_name("s3://bucket/shard.tfrecord.ofidx")
    os.symlink(target, directory / name)
    cache.note_files([(name, 3000)])
    for k in range(100):
        cache.put([(b"page-%03d" % k, bytes(500))])
    assert not os.path.lexists(directory / name)
    assert target.read_bytes() == b"precious"


def test_only_names_of_the_cache_s_making_are_registered(tmp_path):
    cache = NodeCache(str(tmp_path / "node"))
    for name in ("../x.ofidx", "whole.ofidx", entry_name("u") + "/", "/etc/passwd"):
        with pytest.raises(ValueError, match="not a name the node cache gives"):
            cache.note_files([(name, 10)])


# -- malformed rows ---------------------------------------------------------------------------
def test_malformed_rows_are_misses_and_are_dropped(tmp_path):
    cache = NodeCache(str(tmp_path / "node"))
    rows = [
        (b"text-data", "text", 100, 0.0),
        (b"int-data", 12345, 100, 0.0),
        (b"null-data", None, 100, 0.0),
        (b"text-size", b"data", "lots", 0.0),
        (b"negative-size", b"data", -5, 0.0),
        (b"huge-size", b"data", 1 << 60, 0.0),
        (b"good-text-used", b"good-1", 100, "yesterday"),
        (b"good", b"good-2", 100, 0.0),
    ]
    _tamper(cache.path, "INSERT INTO entries VALUES (?, zeroblob(?), 100, 0, NULL)",
            params=(b"huge-data", MAX_DATA + 1))
    for row in rows:
        _tamper(cache.path, "INSERT INTO entries VALUES (?, ?, ?, ?, NULL)", params=row)
    keys = [b"huge-data"] + [row[0] for row in rows]
    assert cache.get(keys) == {b"good-text-used": b"good-1", b"good": b"good-2"}
    left = _rows(cache.path, "SELECT key, typeof(used) FROM entries ORDER BY key")
    assert left == [(b"good", "real"), (b"good-text-used", "real")]  # dropped, and touched
    cache.put([(b"text-data", b"fresh")])  # a dropped key is stored again
    assert cache.get([b"text-data"]) == {b"text-data": b"fresh"}


@pytest.mark.parametrize("meta", [
    "DELETE FROM meta",
    "UPDATE meta SET value = 'many'",
    "UPDATE meta SET value = 1e300",
    f"UPDATE meta SET value = {1 << 62}",
])
def test_eviction_survives_malformed_rows_and_counts(tmp_path, meta):
    cache = NodeCache(str(tmp_path / "node"), max_bytes=20_000)
    _tamper(cache.path,
            "INSERT INTO entries VALUES (zeroblob(100), x'00', 10, 0, NULL)",  # long key
            "INSERT INTO entries VALUES ('text key', x'00', 10, 0, NULL)",
            "INSERT INTO entries VALUES (x'01', x'00', 'lots', x'00', NULL)",
            f"INSERT INTO entries VALUES (x'02', x'00', {1 << 60}, 'soon', NULL)",
            meta)
    pages = {b"page-%03d" % k: bytes(500) for k in range(100)}
    for key, data in pages.items():
        cache.put([(key, data)])
        assert 0 < cache.held_bytes() <= 20_000
    found = cache.get(list(pages))
    assert b"page-099" in found and 20 < len(found) < 40
    assert cache.held_bytes() == len(found) * (500 + 64)  # counted again from the entries
    keys = _rows(cache.path, "SELECT key FROM entries")
    assert sorted(k for (k,) in keys) == sorted(found)  # the malformed rows were evicted


def test_a_database_of_the_earlier_layout_is_read(tmp_path):
    directory = tmp_path / "node"
    directory.mkdir()
    path = str(directory / DB_NAME)
    _tamper(path,  # what ofindex wrote before the layout had a version
            "CREATE TABLE entries (key BLOB PRIMARY KEY, data BLOB, size INTEGER NOT NULL, "
            "used REAL NOT NULL, file TEXT) WITHOUT ROWID",
            "CREATE INDEX entries_used ON entries (used)",
            "CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
            "INSERT INTO meta VALUES ('bytes', 70)",
            "INSERT INTO entries VALUES (x'0102', x'03', 70, 1e10, NULL)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache = NodeCache(str(directory))
    assert cache.get([b"\x01\x02"]) == {b"\x01\x02": b"\x03"}
    assert cache.held_bytes() == 70
    assert _rows(path, "PRAGMA user_version") == [(1,)]


@pytest.mark.parametrize(("statements", "why"), [
    (["PRAGMA user_version = 7"], "written by a newer ofindex"),
    (["CREATE TABLE other (x)"], "not an ofindex cache database"),
    (["CREATE TABLE entries (key, data)"], "not an ofindex cache database"),
])
def test_a_foreign_database_is_not_used(tmp_path, statements, why):
    directory = tmp_path / "node"
    directory.mkdir()
    path = str(directory / DB_NAME)
    _tamper(path, *statements)
    before = (directory / DB_NAME).read_bytes()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = NodeCache(str(directory))
        cache.put([(b"k", b"v")])
        assert cache.get([b"k"]) == {}
    assert len(_cache_warnings(caught)) == 1 and why in _cache_warnings(caught)[0]
    assert (directory / DB_NAME).read_bytes() == before


def test_a_file_that_is_not_a_database_is_left_alone(tmp_path):
    directory = tmp_path / "node"
    directory.mkdir()
    (directory / DB_NAME).write_bytes(b"not a database " * 300)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = NodeCache(str(directory))
        cache.put([(b"k", b"v")])
        assert cache.get([b"k"]) == {} and cache.held_bytes() == 0
    (message,) = _cache_warnings(caught)
    assert "is not an SQLite database or is damaged" in message and "remove it" in message
    assert (directory / DB_NAME).read_bytes() == b"not a database " * 300
    assert os.listdir(directory) == [DB_NAME]


# -- the directory and the database -----------------------------------------------------------
@pytest.mark.parametrize("kind", ["file", "link to a file", "dangling link"])
def test_a_cache_dir_that_is_not_a_directory_reads_without_cache(paged, tmp_path, kind):
    other = tmp_path / "a file"
    other.write_bytes(b"not a directory")
    cache_dir = tmp_path / "cache"
    if kind == "file":
        cache_dir.write_bytes(b"not a directory")
    else:
        os.symlink(other if kind == "link to a file" else tmp_path / "nowhere", cache_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = ofindex.open(paged.url, storage_options=paged.options, cache_dir=str(cache_dir))
        for batch in _batches(len(ds)):
            assert ds[batch] == [paged.expected[i] for i in batch]
        copy = pickle.loads(pickle.dumps(ds))  # as a DataLoader worker gets it
        batch = _batches(len(ds))[0]
        assert copy[batch] == [paged.expected[i] for i in batch]
    (message,) = _cache_warnings(caught)  # exactly one, at open
    assert str(cache_dir) in message and "not a directory" in message
    assert "reading without the node cache" in message
    assert other.read_bytes() == b"not a directory"
    assert os.path.lexists(cache_dir) and not os.path.isdir(cache_dir)


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_database_files_are_never_opened_through_a_link(paged, tmp_path, suffix):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "precious"
    content = b"" if suffix == "" else b"precious bytes " * 1000  # empty: SQLite's to fill
    target.write_bytes(content)
    cache_dir = tmp_path / "cache"
    batches = _batches(len(paged.expected))
    if suffix:  # a cache in use: SQLite would write the log and the shared memory it opens
        ds = ofindex.open(paged.url, storage_options=paged.options, cache_dir=str(cache_dir))
        assert ds[batches[0]] == [paged.expected[i] for i in batches[0]]
        ds._table.shards[0].cache.machine.close()  # the last connection: SQLite removes both files
        assert not os.path.lexists(cache_dir / (DB_NAME + suffix))
    else:
        cache_dir.mkdir()
    os.symlink(target, cache_dir / (DB_NAME + suffix))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = ofindex.open(paged.url, storage_options=paged.options, cache_dir=str(cache_dir))
        for batch in batches[1:]:
            assert ds[batch] == [paged.expected[i] for i in batch]
    assert target.read_bytes() == content
    assert os.listdir(outside) == ["precious"]
    (message,) = _cache_warnings(caught)
    assert f"{cache_dir / (DB_NAME + suffix)} is a symbolic link" in message


def test_an_entry_file_is_never_read_or_written_through_a_link(whole, tmp_path):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    ds = ofindex.open(whole.url, storage_options=whole.options, cache_dir=str(cache_dir))
    shard = ds._table.shards[0]
    sidecar = sidecar_of(os.path.join(whole.local, os.path.basename(shard.path)))
    outside = tmp_path / "outside.ofidx"  # a valid copy, which a reader following the link
    shutil.copyfile(sidecar, outside)  # would use as its own
    link = cache_dir / entry_name(shard.index_url)
    os.symlink(outside, link)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheDirWarning)
        assert ds[list(range(len(ds)))] == whole.expected
    assert not os.path.islink(link)  # replaced by the cache's own copy, fetched
    with open(sidecar, "rb") as f:
        assert link.read_bytes() == outside.read_bytes() == f.read()
    names = {entry_name(s.index_url) for s in ds._table.shards}
    assert names <= set(os.listdir(cache_dir))


def _open_for_writing(fifo) -> None:
    with contextlib.suppress(OSError):  # lets a reader blocked opening the FIFO go on
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_an_entry_that_is_not_a_regular_file_is_not_opened(whole, tmp_path):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    ds = ofindex.open(whole.url, storage_options=whole.options, cache_dir=str(cache_dir))
    fifo = cache_dir / entry_name(ds._table.shards[0].index_url)
    os.mkfifo(fifo)
    unblock = threading.Timer(10.0, _open_for_writing, (fifo,))
    unblock.start()
    start = time.monotonic()
    try:
        assert ds[list(range(len(ds)))] == whole.expected
    finally:
        unblock.cancel()
        _open_for_writing(fifo)
    assert time.monotonic() - start < 10.0  # not blocked opening the FIFO
    assert stat.S_ISREG(os.lstat(fifo).st_mode)  # replaced by the cache's own copy


@pytest.mark.parametrize("tamper", [
    "UPDATE entries SET used = 'never', size = 'big'",
    "UPDATE entries SET data = 'garbage'",
    "UPDATE entries SET data = x'00'",
    f"UPDATE entries SET data = zeroblob({MAX_DATA + 8})",
])
def test_tampered_rows_cost_a_fetch_and_are_replaced(paged, tmp_path, tamper):
    cache_dir = str(tmp_path / "cache")
    batch = _batches(len(paged.expected))[1]
    ds = ofindex.open(paged.url, storage_options=paged.options, cache_dir=cache_dir)
    assert ds[batch] == [paged.expected[i] for i in batch]
    path = os.path.join(cache_dir, DB_NAME)
    keys = _rows(path, "SELECT key FROM entries ORDER BY key")
    assert len(keys) > 2
    _tamper(path, tamper)
    ds = ofindex.open(paged.url, storage_options=paged.options, cache_dir=cache_dir)
    assert ds[batch] == [paged.expected[i] for i in batch]
    healed = _rows(path, "SELECT key FROM entries WHERE typeof(data) = 'blob' AND length(data) "
                         "> 8 AND typeof(size) = 'integer' AND typeof(used) = 'real' ORDER BY key")
    assert healed == keys


_READ_ONLY_CHILD = """
import hashlib, json, sys, warnings
import ofindex
url, options, cache_dir = json.loads(sys.argv[1])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ds = ofindex.open(url, storage_options=options, cache_dir=cache_dir)
    records = [ds[list(range(start, len(ds), 7))] for start in range(3)]
digest = hashlib.sha256(b"".join(r for batch in records for r in batch)).hexdigest()
print(json.dumps({"digest": digest, "warnings": [
    str(w.message) for w in caught if w.category.__name__ == "CacheDirWarning"]}))
"""


def test_a_read_only_cache_dir_reads_without_cache(paged, tmp_path):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    os.chmod(cache_dir, 0o555)
    command = [sys.executable, "-c", _READ_ONLY_CHILD,
               json.dumps([paged.url, paged.options, str(cache_dir)])]
    command = without_root_privilege(command)  # root writes anywhere
    root = os.path.dirname(os.path.dirname(os.path.abspath(ofindex.__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    finally:
        os.chmod(cache_dir, 0o755)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    expected = [paged.expected[i] for b in _batches(len(paged.expected)) for i in b]
    assert result["digest"] == hashlib.sha256(b"".join(expected)).hexdigest()
    (message,) = result["warnings"]
    assert str(cache_dir) in message and "cannot write" in message
    assert os.listdir(cache_dir) == []
