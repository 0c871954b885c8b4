"""A path that exists is that path, whatever its characters; only a path that does not exist
may be a glob (issue #43: a file named ``a[1]`` could not be opened or built, and ``b*``
named on its own also opened ``bb``). For ``open``, ``build_index``, ``ofindex info`` and
``ofindex convert``, on every storage; a directory named with glob characters is a directory
(its manifest written and used, a glob inside it matching its files only)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import ofindex
from ofindex.cli.synthetic import write_dataset
from ofindex.formats.location import resolve
from tests.kit.helpers import cached_index_dir_of

#: Names with glob characters, and one that ``b*`` matches as a glob.
NAMES = ["a[1]", "b*", "bb"]
PER_FILE = 4


def _records_file(tmp, name: str, seed: int, into: str) -> list[bytes]:
    """A one-shard TFRecord file of ``PER_FILE`` distinct records at ``into/name``; its
    records, read before it gets its odd name."""
    src = os.path.join(tmp, f"src-{seed}")
    write_dataset(src, PER_FILE, 1, kind="random", record_size=64, index=False, seed=seed)
    with ofindex.open(src, build_missing=True) as ds:
        records = list(ds)
    os.makedirs(into, exist_ok=True)
    shutil.move(os.path.join(src, "part-00000"), os.path.join(into, name))
    return records


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    """A directory holding files named ``a[1]``, ``b*`` and ``bb``: ``(dir, {name: records})``."""
    tmp = str(tmp_path_factory.mktemp("names"))
    d = os.path.join(tmp, "data")
    return d, {name: _records_file(tmp, name, k + 1, d) for k, name in enumerate(NAMES)}


def test_a_local_file_named_with_glob_characters_is_that_file(named, tmp_path):
    d, records = named
    local = str(tmp_path / "data")
    shutil.copytree(d, local)
    for name in NAMES:  # build and open each file by its name: that file alone
        path = os.path.join(local, name)
        results = ofindex.build_index(path)
        assert [r.data_url for r in results] == [path]
        with ofindex.open(path) as ds:
            assert list(ds) == records[name]
            assert ds[:] == records[name]
            assert ds.__getitems__([3, 0]) == [records[name][3], records[name][0]]
    # a pattern that names no file is a glob: b? matches b* and bb
    with ofindex.open(os.path.join(local, "b?")) as ds:
        assert list(ds) == records["b*"] + records["bb"]
    with ofindex.open(local) as ds:  # the directory: all three
        assert len(ds) == 3 * PER_FILE


def test_the_command_line_takes_such_names_as_paths(named, tmp_path):
    d, records = named
    local = str(tmp_path / "data")
    shutil.copytree(d, local)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ofindex", *args], capture_output=True,
                              text=True, timeout=120, env=env)

    star = os.path.join(local, "b*")
    r = run("build", star)
    assert r.returncode == 0, r.stderr
    # a file named on its own: its index goes to the per-user index cache (docs/placement.md)
    assert sorted(os.listdir(cached_index_dir_of(local))) == ["b*.ofidx"]  # not bb's
    r = run("info", star)
    assert r.returncode == 0, r.stderr
    assert "shards:  1" in r.stdout and f"records: {PER_FILE}\n" in r.stdout, r.stdout
    out = str(tmp_path / "converted")
    r = run("convert", os.path.join(local, "a[1]"), out, "--no-progress")
    assert r.returncode == 0, r.stderr
    with ofindex.open(out) as ds:
        assert list(ds) == records["a[1]"]


def test_a_directory_named_with_glob_characters_is_a_directory(tmp_path):
    """``run[3]`` beside ``run3``: building ``run[3]`` writes its manifest, opening it uses
    it, and ``run[3]/part-*`` globs inside ``run[3]`` (not ``run3``)."""
    mine = str(tmp_path / "run[3]")
    other = str(tmp_path / "run3")
    write_dataset(mine, 30, 2, kind="random", index=False, seed=1)
    write_dataset(other, 50, 3, kind="random", index=False, seed=2)
    ofindex.build_index(mine)
    assert os.path.exists(os.path.join(mine + ".ofindex", "ofindex-manifest.json"))
    assert resolve(mine).manifest is not None  # opened through its manifest
    with ofindex.open(mine) as ds:
        assert len(ds) == 30
        expected = list(ds)
    with ofindex.open(os.path.join(mine, "part-*")) as ds:
        assert list(ds) == expected


def test_on_every_storage_a_named_object_is_that_object(backend, named, tmp_path):
    """The same on memory://, nginx, S3, GCS and Azure: an object whose name holds glob characters
    is that object (built, or indexed elsewhere for read-only HTTP, and opened), and only a
    name that matches no object is a glob."""
    d, records = named
    url = backend.prefix()
    backend.upload(d, url, sidecars=False)
    opts = backend.storage_options
    index_dir = None if backend.writable else str(tmp_path / "idx")
    for name in ("a[1]", "b*"):
        ofindex.build_index(f"{url}/{name}", storage_options=opts, index_dir=index_dir)
        with ofindex.open(f"{url}/{name}", storage_options=opts, index_dir=index_dir) as ds:
            assert list(ds) == records[name]
            assert ds.__getitems__([2, 1]) == [records[name][2], records[name][1]]
    if backend.name != "http":  # a web server lists no directory: a glob needs a listing
        ofindex.build_index(f"{url}/bb", storage_options=opts, index_dir=index_dir)
        # adlfs reads '?' as a query: b? would name the directory b, so it is refused
        glob = "b[*b]" if backend.name == "azure" else "b?"
        with ofindex.open(f"{url}/{glob}", storage_options=opts, index_dir=index_dir) as ds:
            assert list(ds) == records["b*"] + records["bb"]
    if backend.name == "azure":
        with pytest.raises(ofindex.InvalidURLError, match=r"'\?' cannot be part of an Azure"):
            ofindex.open(f"{url}/b?", storage_options=opts)


def test_convert_takes_parquet_files_and_directories_named_with_glob_characters(tmp_path):
    """``convert x[1].parquet`` converts that file (not ``x1.parquet``), and a directory
    ``p[1]`` its own Parquet files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ofindex.decode import Decoder

    folder = tmp_path / "p[1]"
    folder.mkdir()
    pq.write_table(pa.table({"x": [1, 2, 3]}), str(folder / "x[1].parquet"))
    pq.write_table(pa.table({"x": [7, 8]}), str(folder / "x1.parquet"))
    (tmp_path / "p1").mkdir()
    pq.write_table(pa.table({"x": [9]}), str(tmp_path / "p1" / "y.parquet"))
    for src, values in ((folder / "x[1].parquet", [1, 2, 3]), (folder, [1, 2, 3, 7, 8]),
                        (folder / "x?.parquet", [7, 8])):
        out = tmp_path / f"out-{len(values)}"
        ofindex.convert(str(src), str(out))
        with ofindex.open(str(out), decode=Decoder()) as ds:
            assert sorted(int(r["x"][0]) for r in ds) == values, src
