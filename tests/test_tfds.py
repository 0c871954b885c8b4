"""ofindex.open_tfds against tensorflow_datasets itself: datasets written by TFDS (one builder
per feature family, tests/tfds_builders.py), every example of every split compared value by
value with ``tfds.as_numpy(builder.as_dataset(split, shuffle_files=False))``, in order."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import need

import ofindex
from ofindex.errors import DecodeError, RecordIndexError
from ofindex.tfds.splits import file_ranges, interleave_order

tfds = need("tensorflow_datasets", "tensorflow-datasets")
import tensorflow as tf  # noqa: E402
import tfds_builders  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def tfds_dirs(tmp_path_factory):
    """Every family written once by TFDS: ``{name: builder directory}``."""
    data_dir = str(tmp_path_factory.mktemp("tfds"))
    return {name: tfds_builders.prepare(name, data_dir) for name in tfds_builders.BUILDERS}


def read_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def tfds_examples(builder_dir: str, split: str) -> list:
    builder = tfds.builder_from_directory(builder_dir)
    return list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)))


def assert_same(ours, theirs, where: str = "") -> None:
    """``ours`` equals TFDS's value: same structure, dtypes, shapes and values."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), where
        assert list(ours) == list(theirs) or set(ours) == set(theirs), where
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{where}/{key}")
        return
    if isinstance(theirs, (tf.RaggedTensor, tf.compat.v1.ragged.RaggedTensorValue)):
        theirs = theirs.to_list()
    if isinstance(theirs, list):
        assert isinstance(ours, list), (where, type(ours))
        assert len(ours) == len(theirs), where
        for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert _plain(a) == _plain(b), f"{where}[{k}]"
        return
    if isinstance(theirs, bytes):
        assert isinstance(ours, bytes) and ours == theirs, where
        return
    if not isinstance(theirs, (np.ndarray, np.generic)):  # a nested dataset: its steps
        steps = list(theirs)
        assert isinstance(ours, dict), where
        for key in ours:
            column = [s[key] for s in steps]
            if isinstance(ours[key], dict):
                assert_same(ours[key], {k: _stack([c[k] for c in column], ours[key][k])
                                        for k in ours[key]}, f"{where}/{key}")
            else:
                assert_same(ours[key], _stack(column, ours[key]), f"{where}/{key}")
        return
    ours_array, theirs_array = np.asarray(ours), np.asarray(theirs)
    assert type(ours) is type(theirs) or isinstance(ours, np.ndarray), (where, type(ours))
    assert ours_array.dtype == theirs_array.dtype, (where, ours_array.dtype, theirs_array.dtype)
    assert ours_array.shape == theirs_array.shape, (where, ours_array.shape, theirs_array.shape)
    if theirs_array.dtype == object:
        assert ours_array.tolist() == theirs_array.tolist(), where
    else:
        np.testing.assert_array_equal(ours_array, theirs_array, err_msg=where)


def _plain(value):
    """Nested lists of arrays (ours) or lists (TFDS's ragged ``to_list``) as plain lists."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return np.asarray(value).tolist()


def _stack(column: list, like):
    if isinstance(like, list):
        return [c.to_list() if hasattr(c, "to_list") else c for c in column]
    if not column:
        return np.empty(np.shape(like), dtype=np.asarray(like).dtype)
    if isinstance(column[0], bytes):  # TF strings are object arrays of bytes
        out = np.empty(len(column), dtype=object)
        out[:] = column
        return out
    return np.stack(column)


@pytest.mark.parametrize("family", ["tensor_family", "sequence_family", "media_family",
                                    "rlds_family", "order_family"])
def test_every_example_of_every_split_as_tfds(tfds_dirs, family):
    path = tfds_dirs[family]
    info = read_json(os.path.join(path, "dataset_info.json"))
    for split in [s["name"] for s in info["splits"]]:
        expected = tfds_examples(path, split)
        with ofindex.open_tfds(path, split=split) as ds:
            assert len(ds) == len(expected)
            for k, (ours, theirs) in enumerate(zip(ds, expected, strict=True)):
                assert_same(ours, theirs, f"{family} {split}[{k}]")
            # random access and batches give the same examples as iteration
            picks = [len(ds) - 1, 0, len(ds) // 2]
            for position, example in zip(picks, ds.__getitems__(picks), strict=True):
                assert_same(example, expected[position], f"{family} {split} item {position}")
            assert_same(ds[-1], expected[-1], f"{family} {split}[-1]")


@pytest.mark.parametrize("split", [
    "train[:10%]", "train[7:150]", "train[-20:]", "train+val", "val+train[5%:7%]",
    "train[:3shard]", "train[2shard:-1shard]", "all", "train[33%:66%]+val[:1]"])
def test_split_strings_select_and_order_as_tfds(tfds_dirs, split):
    """20 files of 35 examples: TFDS reads 16 files at once, 16 examples from each in turn
    (read file after file, the order differs); slices start and end inside files (uneven
    ranges refill the interleave's slots at different times)."""
    path = tfds_dirs["order_family"]
    expected = [int(e["id"]) for e in tfds_examples(path, split)]
    with ofindex.open_tfds(path, split=split) as ds:
        ours = [int(e["id"]) for e in ds]
        assert [int(ds[k]["id"]) for k in range(0, len(ds), 7)] == expected[::7]
    assert ours == expected


def test_interleave_order_by_hand():
    # 3 files of 3, 1 and 4 records, 2 open at once, 2 records per turn
    order = interleave_order([3, 1, 4], cycle_length=2, block_length=2)
    # slot0: f0[0,1]; slot1: f1[3]; slot0: f0[2]; slot1: f2[4,5]; slot0: f2?no: empty->none
    assert order.tolist() == [0, 1, 3, 2, 4, 5, 6, 7]
    assert interleave_order([2, 2], cycle_length=1).tolist() == [0, 1, 2, 3]


def test_split_string_errors_name_the_problem():
    lengths = {"train": [5, 5], "test": [3]}
    with pytest.raises(ValueError, match="no split 'valid'"):
        file_ranges("valid", lengths)
    with pytest.raises(ValueError, match="outside its 10 examples"):
        file_ranges("train[:11]", lengths)
    with pytest.raises(ValueError, match="not a split name"):
        file_ranges("train[", lengths)
    assert [(r.shard, r.skip, r.take) for r in file_ranges("train[3:7]", lengths)] == [
        (0, 3, 2), (1, 0, 2)]


def test_class_names_and_feature_tree(tfds_dirs):
    with ofindex.open_tfds(tfds_dirs["tensor_family"], split="test") as ds:
        assert ds.features["label"].names == ("cat", "dog", "bird")
        assert ds.features["nested"]["label"].names == ("no", "yes")
        assert ds.features["label"].int2str(int(ds[0]["label"])) in ("cat", "dog", "bird")
        assert ds.features["fixed_uint16"].shape == (2, 3)
        assert ds.features["zlib_enc"].encoding == "zlib"
    with ofindex.open_tfds(tfds_dirs["sequence_family"], split="test") as ds:
        assert ds.features["objects"]["label"].names == ("a", "b")


def test_no_tensorflow_imported(tfds_dirs):
    """Opening, reading every family and the steps imports neither TensorFlow nor TFDS."""
    script = (
        "import sys, ofindex\n"
        f"dirs = {tfds_dirs!r}\n"
        "for path in dirs.values():\n"
        "    with ofindex.open_tfds(path, split='train') as ds:\n"
        "        list(ds)\n"
        "        if ds.features['steps'] if 'steps' in ds.features.children else None:\n"
        "            ds.steps.batch(list(range(len(ds.steps))))\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('tensorflow', 'tensorflow_datasets', 'tf_keras', 'keras'))\n"
        "print('IMPORTED', bad)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, timeout=240)
    assert done.returncode == 0, done.stderr
    assert "IMPORTED []" in done.stdout


def test_errors_name_the_path_and_feature(tmp_path, tfds_dirs):
    with pytest.raises(ofindex.DataFileNotFoundError, match=r"dataset_info\.json"):
        ofindex.open_tfds(str(tmp_path))
    with pytest.raises(ValueError, match="no split 'nope'"):
        ofindex.open_tfds(tfds_dirs["tensor_family"], split="nope")
    broken = tmp_path / "b" / "1.0.0"
    broken.mkdir(parents=True)
    src = tfds_dirs["tensor_family"]
    (broken / "dataset_info.json").write_text(
        json.dumps(read_json(os.path.join(src, "dataset_info.json"))))
    features = read_json(os.path.join(src, "features.json"))
    features["featuresDict"]["features"]["text"]["pythonClassName"] = \
        "tensorflow_datasets.core.features.translation_feature.Translation"
    (broken / "features.json").write_text(json.dumps(features))
    with pytest.raises(DecodeError, match="'text' is a TFDS Translation feature"):
        ofindex.open_tfds(str(broken))
    with ofindex.open_tfds(src, split="test") as ds, pytest.raises(RecordIndexError):
        ds[len(ds)]
