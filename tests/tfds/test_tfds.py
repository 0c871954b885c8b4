"""ofindex.open_tfds against tensorflow_datasets itself: datasets written by TFDS (one builder
per feature family, tests/kit/tfds_builders.py), every example of every split compared value by
value with ``tfds.as_numpy(builder.as_dataset(split, shuffle_files=False))``, in order."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import ofindex
from ofindex.errors import DecodeError, RecordIndexError
from ofindex.tfds.split_strings import file_ranges, interleave_order
from tests.kit import paths
from tests.kit.helpers import need

tfds = need("tensorflow_datasets", "tensorflow-datasets")
from tests.kit.tfds_compare import assert_same, read_json, tfds_examples  # noqa: E402

ROOT = paths.ROOT


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


def test_rgb_jpegs_go_through_the_image_stage(tfds_dirs, monkeypatch):
    """Camera frames (RGB JPEGs into uint8) are decoded by the image stage with TensorFlow's
    fast DCT, still exactly as TFDS gives them; the other images by the TFDS decoder."""
    import ofindex.decode.images as stage

    through = []
    decode = stage.decode_images

    def counted(images, *args, **kwargs):
        through.append((len(images), kwargs.get("fast_dct")))
        return decode(images, *args, **kwargs)

    monkeypatch.setattr(stage, "decode_images", counted)
    for family in ("media_family", "rlds_family"):
        path = tfds_dirs[family]
        expected = tfds_examples(path, "train")
        with ofindex.open_tfds(path, split="train") as ds:
            for k, (ours, theirs) in enumerate(zip(ds, expected, strict=True)):
                assert_same(ours, theirs, f"{family} train[{k}]")
    assert through and all(fast for _, fast in through)
    assert any(count > 1 for count, _ in through)  # an episode's frames at once


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
        "import sys, ofindex, ofindex.integrations.tfds_torch\n"
        f"dirs = {tfds_dirs!r}\n"
        "for path in dirs.values():\n"
        "    with ofindex.open_tfds(path, split='train') as ds:\n"
        "        list(ds)\n"
        "        if 'steps' in ds.features.children:\n"
        "            ds.steps.batch(list(range(len(ds.steps))))\n"
        "            ofindex.integrations.tfds_torch.TfdsBatches(ds.steps)[[0, 1]]\n"
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


def test_a_path_under_home_and_with_a_trailing_slash(tfds_dirs, monkeypatch):
    path = tfds_dirs["order_family"]
    home, rest = os.path.split(os.path.dirname(os.path.dirname(path)))
    monkeypatch.setenv("HOME", home)
    with ofindex.open_tfds(os.path.join("~", rest, "order_family", "1.0.0") + "/",
                           split="val[:3]") as ds:
        assert len(ds) == 3


def test_writing_the_test_builders_leaves_nothing_in_the_machine_s_temporary_directory(
        tmp_path, monkeypatch):
    # TFDS makes an empty mkdtemp("tfds") directory for a builder whose data does not exist
    # yet; 606 of them had piled up in /tmp in a day of test runs
    import tempfile

    from tests.kit import tfds_builders

    machine_tmp = tmp_path / "machine-tmp"
    machine_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(machine_tmp))
    built = tfds_builders.prepare("rlds_plain", str(tmp_path / "data"))
    assert os.path.isfile(os.path.join(built, "dataset_info.json"))
    assert os.listdir(machine_tmp) == []
