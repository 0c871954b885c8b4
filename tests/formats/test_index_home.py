"""Where a single file's index goes (docs/placement.md, "Files named on their own"): a user's
own files index where the user can write, and nothing ofindex creates outlives what it
indexes in a place the user did not name.

A file named on its own (``Writer("train.tfrecord")``, ``build_index(file)``,
``open(file, build_missing=True)``) indexes into its directory's sibling index directory only
when that exists; otherwise, and wherever the sibling cannot be written, into the per-user
index cache (``~/.cache/ofindex/indexes/<the directory's path, percent-encoded>/``). Checked
as a real non-root user in a home folder whose parent it may not write, and as root; indexes
in their old places still open.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import ofindex
from tests.kit import paths
from tests.kit.helpers import cached_index_dir_of, index_dir_of, manifest_of, sidecar_of

ROOT = paths.ROOT
NOBODY = 65534

_AS_ALICE = """
import json, os
import ofindex

with ofindex.Writer("train.tfrecord") as w:          # a file named on its own
    w.write_many([b"a", b"b"])
with ofindex.Writer("other.tfrecord", index=False) as w:
    w.write(b"c")
ofindex.build_index("other.tfrecord")
with ofindex.Writer("third.tfrecord", index=False) as w:
    w.write(b"d")
third = ofindex.open("third.tfrecord", build_missing=True)[:]
os.mkdir("data")                                     # a directory of alice's
with ofindex.Writer("data/part-0", index=False) as w:
    w.write(b"e")
ofindex.build_index("data")
home = ofindex.build_index(os.getcwd())              # her home folder, as a directory
print(json.dumps({
    "uid": os.getuid(),
    "train": [r.decode() for r in ofindex.open("train.tfrecord")[:]],
    "other": [r.decode() for r in ofindex.open("other.tfrecord")[:]],
    "third": [r.decode() for r in third],
    "data": [r.decode() for r in ofindex.open("data")[:]],
    "home": [r.decode() for r in ofindex.open(os.getcwd())[:]],
}))
"""


def test_a_users_own_files_index_where_the_user_can_write(tmp_path):
    """A real non-root user (uid 65534; the interpreter lives where only root may look, so
    the process keeps CAP_DAC_READ_SEARCH, which reads but never writes) in her home folder,
    whose parent she may not write: Writer, build_index and open(build_missing=True) of her
    files work, their indexes go to her ~/.cache/ofindex/, and nothing lands beside her
    home."""
    homes = tmp_path / "home"
    homes.mkdir(mode=0o755)
    alice = homes / "alice"
    alice.mkdir()
    os.chown(alice, NOBODY, NOBODY)
    env = {"HOME": str(alice), "PATH": os.environ["PATH"], "PYTHONPATH": ROOT}
    command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
               "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search",
               sys.executable, "-c", _AS_ALICE]
    done = subprocess.run(command, cwd=alice, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout)
    assert got == {"uid": NOBODY, "train": ["a", "b"], "other": ["c"], "third": ["d"],
                   "data": ["e"], "home": ["c", "d", "a", "b"]}
    assert os.listdir(homes) == ["alice"], "nothing beside her home"
    cache = alice / ".cache" / "ofindex" / "indexes" / os.path.realpath(alice).replace(
        "/", "%2F")
    assert sorted(os.listdir(cache)) == ["ofindex-manifest.json", "other.tfrecord.ofidx",
                                         "third.tfrecord.ofidx", "train.tfrecord.ofidx"]
    assert sorted(os.listdir(alice / "data.ofindex")) == ["ofindex-manifest.json",
                                                          "part-0.ofidx"]
    assert sorted(os.listdir(alice)) == [".cache", "data", "data.ofindex", "other.tfrecord",
                                         "third.tfrecord", "train.tfrecord"]


def test_a_file_named_on_its_own_creates_nothing_beside_its_directory(tmp_path, monkeypatch):
    """As root, in a fresh directory: ``Writer("part-0")`` in the working directory, then
    build_index and open(build_missing=True) of files there, leave nothing outside that
    directory (their indexes are in the per-user cache), and read back."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with ofindex.Writer("part-0") as w:
        w.write(b"x")
    with ofindex.Writer(str(work / "part-1"), index=False) as w:
        w.write(b"y")
    ofindex.build_index("part-1")
    with ofindex.Writer("part-2", index=False) as w:
        w.write(b"z")
    assert ofindex.open(str(work / "part-2"), build_missing=True)[:] == [b"z"]
    assert os.listdir(tmp_path) == ["work"]
    assert sorted(os.listdir(work)) == ["part-0", "part-1", "part-2"]
    assert sorted(os.listdir(cached_index_dir_of(work))) == [
        "part-0.ofidx", "part-1.ofidx", "part-2.ofidx"]
    assert ofindex.open("part-0")[:] == [b"x"]
    assert ofindex.open(str(work))[:] == [b"x", b"y", b"z"]  # the cache is looked in too


def test_a_directory_built_as_a_whole_gets_its_sibling(tmp_path):
    # files written one by one first (indexed in the cache), then the directory built: its
    # index goes to its documented place, with a manifest, and later files follow it there
    data = tmp_path / "train"
    data.mkdir()
    with ofindex.Writer(str(data / "part-0")) as w:
        w.write(b"a")
    ofindex.build_index(str(data))
    assert sorted(os.listdir(tmp_path)) == ["train", "train.ofindex"]
    assert os.path.exists(manifest_of(data)) and manifest_of(data).startswith(
        index_dir_of(data))
    with ofindex.Writer(str(data / "part-1")) as w:  # the sibling exists: the index joins it
        w.write(b"b")
    assert sidecar_of(data / "part-1") == os.path.join(index_dir_of(data), "part-1.ofidx")


def test_indexes_in_their_old_places_still_open(tmp_path):
    # ofindex before this rule put a single file's index in ../<dir>.ofindex/
    data = tmp_path / "old"
    data.mkdir()
    path = str(data / "x.tfrecord")
    with ofindex.Writer(path, index_dir=index_dir_of(data)) as w:
        w.write_many([b"1", b"2"])
    assert ofindex.open(path)[:] == [b"1", b"2"]
    with ofindex.Writer(path) as w:  # rewritten: its index stays where it is
        w.write(b"3")
    assert os.listdir(index_dir_of(data)) == ["x.tfrecord.ofidx"]
    assert ofindex.open(path)[:] == [b"3"]
    assert not os.path.exists(cached_index_dir_of(data))


def test_the_demo_leaves_nothing_behind(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    cache = tmp_path / "cache"
    env = {**os.environ, "TMPDIR": str(scratch), "OFINDEX_INDEX_CACHE": str(cache),
           "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-m", "ofindex", "demo", "--records", "300",
                           "--shards", "2"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert os.listdir(scratch) == [] and not os.path.exists(cache)


def test_the_cache_drops_the_indexes_of_directories_that_are_gone(tmp_path):
    from ofindex.formats import index_cache

    gone, kept = tmp_path / "gone", tmp_path / "kept"
    for directory in (gone, kept):
        directory.mkdir()
        with ofindex.Writer(str(directory / "f")) as w:
            w.write(b"x")
    entry = cached_index_dir_of(gone)
    assert os.listdir(entry) == ["f.ofidx"]
    (gone / "f").unlink()
    gone.rmdir()
    root = os.environ["OFINDEX_INDEX_CACHE"]
    later = time.time() + index_cache.PRUNE_SECONDS + 1
    assert str(gone) in index_cache.prune(root, now=later)
    assert not os.path.exists(entry)
    assert os.listdir(cached_index_dir_of(kept)) == ["f.ofidx"]
    assert index_cache.prune(root, now=later + 1) == []  # not again within the hour
