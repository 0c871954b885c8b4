"""The text 'offset length' index shared with vahidk's tfrecord2idx and NVIDIA DALI."""

import pytest
from helpers import ref_tfrecord, write_raw

import ofindex
from ofindex import SidecarError
from ofindex.cli import main

RECORDS = [b"x" * n for n in (0, 1, 10, 300, 7)]


def _load_tfrecord2idx():
    """vahidk's tfrecord2idx module alone: importing the `tfrecord` package registers
    'tensorflow.BytesList', which clashes with TensorFlow loaded by other tests."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("tfrecord")
    assert spec is not None, "the test extra installs vahidk's tfrecord"
    path = os.path.join(os.path.dirname(spec.origin), "tools", "tfrecord2idx.py")
    mod_spec = importlib.util.spec_from_file_location("_vahidk_tfrecord2idx", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


def test_export_matches_tfrecord2idx_and_imports_back(tmp_path, capsys):
    tfrecord2idx = _load_tfrecord2idx()
    data = write_raw(str(tmp_path / "a.tfrecord"), ref_tfrecord(RECORDS))
    theirs = str(tmp_path / "theirs.idx")
    tfrecord2idx.create_index(data, theirs)
    assert main(["build", data, "--no-progress"]) == 0
    assert main(["export-index", data, "--output", str(tmp_path / "ours.idx")]) == 0
    assert (tmp_path / "ours.idx").read_text() == (tmp_path / "theirs.idx").read_text()

    (tmp_path / "a.tfrecord.ofidx").unlink()
    assert main(["import-index", data, theirs]) == 0
    assert ofindex.open(data)[:] == RECORDS


def test_import_refuses_a_text_index_of_another_file(tmp_path, capsys):
    data = write_raw(str(tmp_path / "a.tfrecord"), ref_tfrecord(RECORDS))
    bad = write_raw(str(tmp_path / "bad.idx"), b"0 16\n16 17\n")
    assert main(["import-index", data, bad]) == 1
    assert "stale or for another file" in capsys.readouterr().err
    gap = write_raw(str(tmp_path / "gap.idx"), b"0 16\n20 17\n")
    assert main(["import-index", data, gap]) == 1
    assert "not where the previous record ends" in capsys.readouterr().err
    junk = write_raw(str(tmp_path / "junk.idx"), b"0 16\nhello\n")
    assert main(["import-index", data, junk]) == 1
    assert "line 2" in capsys.readouterr().err


def test_parse_text_rejects_negative_and_garbage():
    from ofindex.formats.textindex import parse_text

    with pytest.raises(SidecarError):
        parse_text(b"-1 16\n", path="t")
    assert parse_text(b"", path="t")[0].tolist() == []
