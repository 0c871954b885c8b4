"""``ofindex info`` and ``ofindex schema`` on a TFDS builder directory: splits with their
example and file counts, and the feature tree (types, shapes, dtypes, class names) read from
its metadata, locally and over HTTP; nothing is indexed by them."""

from __future__ import annotations

import json
import os

from ofindex.cli import main
from tests.kit.helpers import need

need("tensorflow_datasets", "tensorflow-datasets")


def test_info_prints_splits_counts_and_features(tfds_dirs, capsys):
    path = tfds_dirs["rlds_family"]
    assert main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "tfds:    rlds_family 1.0.0 (tfrecord)" in out
    assert "split train: 203 examples in 3 files" in out
    assert "split val: 21 examples in 3 files" in out
    assert "  steps: Dataset(length=None, of FeaturesDict)" in out
    assert "      image: Image(shape=(16, 16, 3), dtype=uint8, encoding=jpeg)" in out
    assert "    action: Tensor(shape=(3,), dtype=float64)" in out


def test_info_json_and_schema(tfds_dirs, capsys):
    path = tfds_dirs["tensor_family"]
    assert main(["info", "--json", path]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["splits"] == {"train": {"examples": 40, "files": 3,
                                       "bytes": doc["splits"]["train"]["bytes"]},
                             "test": {"examples": 7, "files": 3,
                                      "bytes": doc["splits"]["test"]["bytes"]}}
    assert doc["features"]["features"]["label"]["names"] == ["cat", "dog", "bird"]
    assert main(["schema", path]) == 0
    out = capsys.readouterr().out
    assert "  label: ClassLabel(shape=(), dtype=int64, num_classes=3) [cat, dog, bird]" in out
    assert "  zlib_u64: Tensor(shape=(None, None, 2), dtype=uint64, encoding=zlib)" in out
    assert "    deeper: FeaturesDict" in out and "      x: Tensor(shape=(), dtype=int16)" in out
    assert main(["schema", "--json", tfds_dirs["sequence_family"]]) == 0
    tree = json.loads(capsys.readouterr().out)
    assert tree["features"]["ragged"]["describe"] == (
        "Sequence(length=None, of Sequence(length=None, of Tensor(shape=(), dtype=int32)))")


def test_info_on_a_served_builder_directory(tfds_dirs, nginx_server, capsys):
    local = tfds_dirs["order_family"]
    target = os.path.join(nginx_server.root, "cli-tfds", "order_family", "1.0.0")
    os.makedirs(target, exist_ok=True)
    for name in os.listdir(local):
        with open(os.path.join(local, name), "rb") as src, \
                open(os.path.join(target, name), "wb") as dst:
            dst.write(src.read())
    assert main(["info", f"{nginx_server.url}/cli-tfds/order_family/1.0.0"]) == 0
    out = capsys.readouterr().out
    assert "split train: 700 examples in 20 files" in out
