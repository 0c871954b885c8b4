"""What a new user ran into when trying ofindex for the first time (issue #31): each one
behaves as the documentation says now."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import ofindex
from ofindex.cli import EXIT_ERROR, EXIT_OK, main
from ofindex.proto import example_pb2
from tests.kit import paths
from tests.kit.helpers import need, ref_ofrecord, ref_tfrecord, write_raw

ROOT = paths.ROOT


def _examples(n: int) -> list[bytes]:
    out = []
    for i in range(n):
        example = example_pb2.Example()
        example.features.feature["label"].int64_list.value.append(i)
        example.features.feature["name"].bytes_list.value.append(b"x" * (i + 1))
        out.append(example.SerializeToString(deterministic=True))
    return out


@pytest.fixture
def data_dir(tmp_path):
    records = _examples(12)
    write_raw(str(tmp_path / "d" / "part-0"), ref_tfrecord(records[:5]))
    write_raw(str(tmp_path / "d" / "part-1"), ref_tfrecord(records[5:]))
    ofindex.build_index(str(tmp_path / "d"))
    return str(tmp_path / "d")


def test_an_empty_list_of_records_is_an_empty_list(data_dir):
    with ofindex.open(data_dir) as ds:
        assert ds[[]] == []
        assert ds.__getitems__([]) == []
        assert ds[[3]] == [ds[3]]


def test_an_empty_file_on_its_own_is_an_empty_dataset(tmp_path, capsys):
    empty = write_raw(str(tmp_path / "empty.rec"), b"")
    with ofindex.open(empty, build_missing=True) as ds:  # no format= needed
        assert len(ds) == 0 and list(ds) == []
    other = write_raw(str(tmp_path / "other.rec"), b"")
    assert main(["build", other, "--no-progress"]) == EXIT_OK
    assert "indexed 1 files, 0 records" in capsys.readouterr().out


def _touch_later(path: str) -> None:
    """Change the file's mtime (what a rewrite in place does to a sidecar's stamp)."""
    later = os.stat(path).st_mtime_ns + 5_000_000_000
    os.utime(path, ns=(later, later))


def test_build_missing_leaves_a_stale_index_to_rebuild_stale(tmp_path):
    records = [b"a", b"bb", b"ccc"]
    path = write_raw(str(tmp_path / "part-0"), ref_tfrecord(records))
    ofindex.build_index(path)
    write_raw(path, ref_tfrecord([*records, b"dddd"]))  # the data changed after indexing
    _touch_later(path)
    with pytest.raises(ofindex.StaleIndexError, match="rebuild_stale=True") as err:
        ofindex.open(path, build_missing=True)
    assert "ofindex build" not in str(err.value)  # Python terms in Python
    assert "`ofindex build " in err.value.cli_message()  # command-line terms on the CLI
    with ofindex.open(path, rebuild_stale=True) as ds:
        assert list(ds) == [*records, b"dddd"]
    with ofindex.open(path) as ds:  # the rebuilt sidecar stays
        assert len(ds) == 4


def test_rebuild_stale_rewrites_a_directory_and_its_manifest(data_dir):
    shard = os.path.join(data_dir, "part-1")
    write_raw(shard, ref_tfrecord(_examples(9)))
    _touch_later(shard)
    with pytest.raises(ofindex.StaleIndexError):
        len(ofindex.open(data_dir))
    with ofindex.open(data_dir, rebuild_stale=True) as ds:
        assert len(ds) == 5 + 9 and ds[-1] == _examples(9)[-1]
    with ofindex.open(data_dir) as ds:  # through the manifest written again
        assert len(ds) == 14


def test_packed_bytes_are_the_same_type_in_the_main_process_and_from_workers(tmp_path):
    torch = need("torch")
    from torch.utils.data import DataLoader

    from ofindex.decode import BatchDecoder, FixedLen
    from ofindex.integrations.torch import (
        BatchSampler,
        RaggedTensors,
        SequentialSampler,
        TensorBatches,
    )

    path = write_raw(str(tmp_path / "part-0"), ref_tfrecord(_examples(16)))
    spec = {"name": FixedLen((), "bytes"), "label": FixedLen((), "int64")}
    data = TensorBatches(ofindex.open(path, build_missing=True), BatchDecoder(spec),
                         pack_bytes=True)
    direct = data[list(range(4))]["name"]
    assert type(direct) is RaggedTensors
    assert direct.row_lengths.tolist() == [1, 2, 3, 4]
    for workers in (0, 1):
        sampler = BatchSampler(SequentialSampler(data), 4, drop_last=True)
        loader = DataLoader(data, sampler=sampler, batch_size=None, num_workers=workers)
        first = next(iter(loader))["name"]
        assert type(first) is RaggedTensors, workers
        assert torch.equal(first.values, direct.values)
        assert first.row_lengths.tolist() == [1, 2, 3, 4]


def test_the_build_summary_counts_what_it_indexed(data_dir, capsys):
    assert main(["build", data_dir, "--no-progress"]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("indexed 0 files; 2 already fresh, skipped (12 records, ")
    write_raw(os.path.join(data_dir, "part-2"), ref_tfrecord([b"new"]))
    assert main(["build", data_dir, "--no-progress"]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("indexed 1 files, 1 records, 19 bytes; 2 already fresh, skipped "
                          "(13 records, ")


def test_get_refuses_to_decode_records_as_another_message_type(data_dir, tmp_path, capsys):
    assert main(["get", data_dir, "0", "--decode", "--as", "ofrecord"]) == EXIT_ERROR
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing printed for the record that failed
    assert "record 0 is not a OneFlow OFRecord" in captured.err
    assert "--as example" in captured.err and "--raw" in captured.err
    assert main(["get", data_dir, "0", "--decode", "--as", "example"]) == EXIT_OK
    assert "label" in capsys.readouterr().out

    from ofindex.proto import ofrecord_pb2

    record = ofrecord_pb2.OFRecord()
    record.feature["label"].int64_list.value.append(7)
    path = write_raw(str(tmp_path / "of" / "part-0"),
                     ref_ofrecord([record.SerializeToString(deterministic=True)]))
    ofindex.build_index(path)
    assert main(["get", path, "0", "--decode", "--as", "example"]) == EXIT_ERROR
    assert "record 0 is not a tf.train.Example" in capsys.readouterr().err
    assert main(["get", path, "0", "--decode"]) == EXIT_OK
    assert "label" in capsys.readouterr().out


def test_verify_checks_each_path_as_a_dataset_of_its_own(data_dir, tmp_path, capsys):
    other = tmp_path / "other"
    write_raw(str(other / "part-0"), ref_ofrecord([b"x", b"y"]))  # another format, too
    ofindex.build_index(str(other))
    assert main(["verify", data_dir, str(other)]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"ok: {data_dir}: 2 files, 12 records verified",
                     f"ok: {other}: 1 files, 2 records verified"]
    assert main(["verify", data_dir]) == EXIT_OK
    assert capsys.readouterr().out == "ok: 2 files, 12 records verified\n"


def test_the_protobuf_classes_import_as_the_docs_say():
    from ofindex.proto import example_pb2, ofrecord_pb2

    assert example_pb2.Example.DESCRIPTOR.full_name == "ofindex.tf.Example"
    assert ofrecord_pb2.OFRecord.DESCRIPTOR.full_name == "ofindex.oneflow.OFRecord"
    docs = []
    for folder in (ROOT, os.path.join(ROOT, "docs")):
        for name in sorted(os.listdir(folder)):
            if name.endswith(".md"):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    docs.append((name, f.read()))
    for name, text in docs:  # a protobuf package name is not an import path
        assert "packages `ofindex.tf`" not in text, name


BLOCKED = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)")
sys.meta_path.insert(0, Block())
"""


def _integration_modules() -> list[str]:
    folder = os.path.join(ROOT, "ofindex", "integrations")
    return sorted(f"ofindex.integrations.{name[:-3]}" for name in os.listdir(folder)
                  if name.endswith(".py") and not name.startswith("_"))


@pytest.mark.parametrize("module", _integration_modules())
def test_every_integration_without_its_extra_names_the_extra(module):
    frameworks = ["torch", "torchdata", "grain", "tensorflow", "keras", "ray", "datasets",
                  "dask", "distributed", "jax", "apache_beam", "pyspark"]
    code = BLOCKED.format(blocked=frameworks) + f"""
import ofindex
try:
    import {module}
except ofindex.MissingDependencyError as exc:
    assert isinstance(exc, ImportError)
    print(exc)
else:
    raise SystemExit("imported without its framework")
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"{module} needs an optional dependency" in run.stdout
    assert "pip install 'ofindex[" in run.stdout


def test_tests_of_a_missing_extra_skip_with_a_reason(tmp_path):
    """Run by hand without s3fs, gcsfs, adlfs and moto, the storage tests skip and say what
    to install (the test command installs every extra, and in CI a skip fails the run)."""
    code = BLOCKED.format(blocked=["s3fs", "gcsfs", "adlfs", "moto", "aiohttp"]) + """
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-rs", "-k", "s3 or gcs or http or azure",
                      "tests/storage/test_storage_conformance.py"]))
"""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " skipped" in run.stdout and " error" not in run.stdout
    assert "pip install 'ofindex[s3]'" in run.stdout
    assert "pip install 'ofindex[gcs]'" in run.stdout
    assert "pip install 'ofindex[azure]'" in run.stdout
    assert time.monotonic() - start < 120


def test_the_version_is_written_in_one_place(capsys):
    """``ofindex.__version__`` is the only place: the package metadata reads it
    (pyproject.toml's dynamic version), and so does ``ofindex --version``."""
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "ofindex.__version__"}
    written = []
    for folder, _, files in os.walk(os.path.join(ROOT, "ofindex")):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    if ofindex.__version__ in f.read():
                        written.append(name)
    assert written == ["__init__.py"]
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"ofindex {ofindex.__version__}"
    with open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8") as f:
        assert f"## {ofindex.__version__} - " in f.read()
