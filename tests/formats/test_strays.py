"""Files beside the shards that are not record files, and directories mixing the two framings.

A directory or glob that also holds a README, TFDS's ``label.labels.txt`` or another file that
is plainly not a record file is built and opened without it (one ``SkippedFilesWarning``
naming it; ``strict=True`` refuses); a file named on its own is never skipped. A build over
TFRecord and OFRecord files together is refused before anything is written, naming both kinds.
"""

from __future__ import annotations

import gzip
import os
import warnings

import pytest

import ofindex
from ofindex.index.job import FileJob
from ofindex.storage import LocalStorage
from tests.kit.helpers import index_dir_of, ref_ofrecord, ref_tfrecord, sidecar_of, write_raw

TF = [f"tf-{i}".encode() * (i + 1) for i in range(12)]
OF = [f"of-{i}".encode() * (i + 1) for i in range(9)]
README = b"Dataset card\n============\nTrain split, 12 records.\n"
LABELS = b"cat\ndog\nbird\n"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(200))  # no name hint: found by its first bytes
NOTES = b'{"source": "crawl", "split": "train"}\n'  # a text file without an extension


def _tf_dir(directory, strays=True):
    """Two TFRecord shards (7 and 5 records) and, with ``strays``, four files that are not
    record files; returns the directory."""
    write_raw(os.path.join(directory, "part-0.tfrecord"), ref_tfrecord(TF[:7]))
    write_raw(os.path.join(directory, "part-1.tfrecord"), ref_tfrecord(TF[7:]))
    if strays:
        write_raw(os.path.join(directory, "README.txt"), README)
        write_raw(os.path.join(directory, "label.labels.txt"), LABELS)
        write_raw(os.path.join(directory, "sample"), PNG)
        write_raw(os.path.join(directory, "NOTES"), NOTES)
    return str(directory)


def _skipped(record) -> list[str]:
    """The messages of the ``SkippedFilesWarning``s recorded."""
    return [str(w.message) for w in record if issubclass(w.category, ofindex.SkippedFilesWarning)]


def _index_files(directory) -> list[str]:
    """The index files of a data directory, in its index directory (the default place)."""
    where = index_dir_of(directory)
    return sorted(n for n in (os.listdir(where) if os.path.isdir(where) else [])
                  if n.endswith(".ofidx") or n == "ofindex-manifest.json")


def test_strays_are_skipped_with_one_warning_and_the_directory_opens(tmp_path):
    d = _tf_dir(tmp_path / "d")
    with pytest.warns(ofindex.SkippedFilesWarning) as record:
        results = ofindex.build_index(d)
    (message,) = _skipped(record)
    names = ("NOTES", "README.txt", "label.labels.txt", "sample")  # in natural order
    assert [os.path.join(d, n) in message for n in names] == [True, True, True, False]
    assert "4 files" in message and "and 1 more" in message  # three shown, the rest counted
    assert [os.path.basename(r.data_url) for r in results] == ["part-0.tfrecord",
                                                               "part-1.tfrecord"]
    assert _index_files(d) == ["ofindex-manifest.json", "part-0.tfrecord.ofidx",
                               "part-1.tfrecord.ofidx"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # through the manifest: no warning, not stale
        assert list(ofindex.open(d)) == TF
    with pytest.warns(ofindex.SkippedFilesWarning) as record:  # listed, without the manifest
        assert list(ofindex.open(d, manifest=False)) == TF
    assert len(_skipped(record)) == 1
    with pytest.warns(ofindex.SkippedFilesWarning):  # a glob expands the same way
        assert [r.records for r in ofindex.build_index(os.path.join(d, "*"))] == [7, 5]


def test_a_file_named_on_its_own_is_never_skipped(tmp_path):
    d = _tf_dir(tmp_path / "d")
    with pytest.raises(ofindex.FormatDetectionError, match=r"README\.txt"):
        ofindex.build_index([os.path.join(d, "part-0.tfrecord"), os.path.join(d, "README.txt")])
    with pytest.raises(ofindex.FormatDetectionError, match="sample"):
        ofindex.build_index(os.path.join(d, "sample"))
    assert _index_files(d) == []
    with pytest.warns(ofindex.SkippedFilesWarning):
        ofindex.build_index(d)
    with pytest.raises(ofindex.IndexNotFoundError, match=r"label\.labels\.txt"):
        ofindex.open([os.path.join(d, "part-1.tfrecord"), os.path.join(d, "label.labels.txt")])


def test_strict_refuses_strays_and_writes_nothing(tmp_path):
    d = _tf_dir(tmp_path / "d")
    with pytest.raises(ofindex.FormatDetectionError) as err:
        ofindex.build_index(d, strict=True)
    text = str(err.value)
    assert "4 files" in text and "README.txt" in text and "strict=True" in text
    assert _index_files(d) == []
    assert [r.records for r in ofindex.build_index(_tf_dir(tmp_path / "clean", strays=False),
                                                   strict=True)] == [7, 5]


def test_only_strays_is_no_dataset(tmp_path):
    write_raw(str(tmp_path / "d" / "README.md"), README)
    write_raw(str(tmp_path / "d" / "NOTES"), NOTES)
    with pytest.raises(ofindex.DataFileNotFoundError, match="no TFRecord/OFRecord files") as err:
        ofindex.build_index(str(tmp_path / "d"))
    assert "README.md" in str(err.value) and "NOTES" in str(err.value)
    assert _index_files(str(tmp_path / "d")) == []


def test_empty_files_are_record_files_of_either_format(tmp_path):
    only = write_raw(str(tmp_path / "e" / "part-0"), b"")
    (r,) = ofindex.build_index(str(tmp_path / "e"))  # no format= needed
    assert r.records == 0 and len(ofindex.open(str(tmp_path / "e"))) == 0
    (r,) = ofindex.build_index(only, resume=False)
    assert r.records == 0 and r.format is ofindex.RecordFormat.TFRECORD
    d = tmp_path / "of"
    write_raw(str(d / "part-0"), ref_ofrecord(OF))
    write_raw(str(d / "part-1"), b"")
    write_raw(str(d / "part-2"), gzip.compress(b""))  # an empty compressed stream too
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing skipped
        results = ofindex.build_index(str(d))
    assert [r.format for r in results] == [ofindex.RecordFormat.OFRECORD] * 3
    assert list(ofindex.open(str(d))) == OF


def test_mixed_framings_are_refused_before_anything_is_written(tmp_path):
    d = tmp_path / "mixed"
    for k in range(4):
        write_raw(str(d / f"tf-{k}"), ref_tfrecord(TF[:3]))
    write_raw(str(d / "of-0"), ref_ofrecord(OF))
    write_raw(str(d / "of-1"), gzip.compress(ref_ofrecord(OF)))
    write_raw(str(d / "README.txt"), README)
    with pytest.raises(ofindex.FormatDetectionError) as err:
        ofindex.build_index(str(d))
    text = str(err.value)
    assert "4 TFRecord" in text and "2 OFRecord" in text and "and 1 more" in text
    assert os.path.join(str(d), "tf-0") in text and os.path.join(str(d), "of-1") in text
    assert "format=" in text and "own dataset" in text
    assert "--format" in err.value.cli_message()
    assert _index_files(str(d)) == []
    # each kind builds as its own dataset
    assert [r.records for r in ofindex.build_index(str(d / "tf-*"))] == [3] * 4
    assert [r.records for r in ofindex.build_index(str(d / "of-*"))] == [9, 9]


@pytest.mark.parametrize("given,other", [("tfrecord", "of-0"), ("ofrecord", "tf-0")])
def test_a_given_format_refuses_files_of_the_other(tmp_path, given, other):
    d = tmp_path / "mixed"
    write_raw(str(d / "tf-0"), ref_tfrecord(TF))
    write_raw(str(d / "of-0"), ref_ofrecord(OF))
    with pytest.raises(ofindex.FormatDetectionError) as err:
        ofindex.build_index(str(d), format=given)
    text = str(err.value)
    assert f"format='{given}' was given but 1 file" in text
    assert os.path.join(str(d), other) in text and "own dataset" in text
    assert _index_files(str(d)) == []
    with pytest.raises(ofindex.FormatDetectionError):  # named on their own, too
        ofindex.build_index([str(d / "tf-0"), str(d / "of-0")], format=given, allow_partial=True)
    assert _index_files(str(d)) == []


def test_compressed_and_plain_files_of_one_framing_build_together(tmp_path):
    d = tmp_path / "d"
    write_raw(str(d / "part-0"), ref_tfrecord(TF[:5]))
    write_raw(str(d / "part-1.gz"), gzip.compress(ref_tfrecord(TF[5:])))
    write_raw(str(d / "label.labels.txt"), LABELS)
    with pytest.warns(ofindex.SkippedFilesWarning, match=r"label\.labels\.txt"):
        results = ofindex.build_index(str(d))
    assert [r.compression for r in results] == [ofindex.Compression.NONE,
                                                ofindex.Compression.GZIP]
    assert list(ofindex.open(str(d))) == TF


def test_a_stray_added_after_the_build_is_not_a_stale_manifest(tmp_path):
    d = _tf_dir(tmp_path / "d", strays=False)
    ofindex.build_index(d)
    write_raw(os.path.join(d, "README.md"), README)
    write_raw(os.path.join(d, "sample"), PNG)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(ofindex.open(d)) == TF
    write_raw(os.path.join(d, "part-2.tfrecord"), ref_tfrecord(TF[:1]))  # a new shard is
    with pytest.raises(ofindex.StaleIndexError, match=r"part-2\.tfrecord"):  # still caught
        ofindex.open(d)
    write_raw(os.path.join(d, "part-2.tfrecord"), b"")  # so is a new empty one
    with pytest.raises(ofindex.StaleIndexError, match=r"part-2\.tfrecord"):
        ofindex.open(d)


def test_open_without_manifest_names_only_real_shards_missing_an_index(tmp_path):
    d = _tf_dir(tmp_path / "d")
    ofindex.build_index(os.path.join(d, "part-0.tfrecord"))
    with pytest.raises(ofindex.IndexNotFoundError) as err:
        ofindex.open(d)
    assert "part-1.tfrecord" in str(err.value) and "README" not in str(err.value)
    with pytest.warns(ofindex.SkippedFilesWarning) as record:  # builds the shard, skips the rest
        ds = ofindex.open(d, build_missing=True)
    assert len(_skipped(record)) == 1 and list(ds) == TF
    assert not os.path.exists(os.path.join(d, "README.txt.ofidx"))


def test_an_empty_shard_beside_a_stray_opens_through_an_index_dir(tmp_path):
    """An empty shard's sidecar (no records: ``len()`` 0, so falsy) counted as not found when
    a stray made the opening look again at which shards had a sidecar: the dataset failed to
    open, naming the empty shard as missing its index (found converting such files)."""
    d = _tf_dir(tmp_path / "d")
    write_raw(os.path.join(d, "part-2.tfrecord"), gzip.compress(b""))
    with pytest.warns(ofindex.SkippedFilesWarning):
        ds = ofindex.open(d, index_dir=str(tmp_path / "idx"), build_missing=True)
    assert list(ds) == TF and [s.records for s in ds.shards] == [7, 5, 0]
    with pytest.warns(ofindex.SkippedFilesWarning):
        assert list(ofindex.open(d, index_dir=str(tmp_path / "idx"))) == TF


def test_a_damaged_shard_is_reported_not_skipped(tmp_path):
    """A file whose first bytes fit no record file is a damaged shard, not a stray, when it is
    named like the record files beside it or names the format."""
    d = tmp_path / "d"
    for k in range(3):
        write_raw(str(d / f"part-0000{k}"), ref_tfrecord(TF))
    bad = bytearray(ref_tfrecord(TF))
    bad[:8] = b"\xff" * 8  # the first length: its CRC fails, and no OFRecord length either
    write_raw(str(d / "part-00003"), bytes(bad))
    with pytest.raises(ofindex.FormatDetectionError, match="part-00003"):
        ofindex.build_index(str(d))
    with pytest.raises(ofindex.CorruptRecordError, match="part-00003"):
        ofindex.build_index(str(d), format="tfrecord")
    ofindex.build_index([str(d / f"part-0000{k}") for k in range(3)])
    with pytest.raises(ofindex.IndexNotFoundError, match="part-00003"):  # not left out either
        ofindex.open(str(d))
    e = tmp_path / "e"
    write_raw(str(e / "train.tfrecord"), ref_tfrecord(TF))
    write_raw(str(e / "valid.tfrecord"), bytes(bad))
    with pytest.raises(ofindex.FormatDetectionError, match=r"valid\.tfrecord"):
        ofindex.build_index(str(e))


def test_a_tfrecord_cut_inside_its_first_record_is_named_as_truncated(tmp_path):
    data = ref_tfrecord([b"x" * 5000])
    d = tmp_path / "d"
    write_raw(str(d / "part-0"), ref_tfrecord(TF))
    p = write_raw(str(d / "part-1"), data[:3000])  # not skipped: its length CRC says TFRecord
    with pytest.raises(ofindex.TruncatedRecordError, match="part-1"):
        ofindex.build_index(str(d))
    with pytest.raises(ofindex.TruncatedRecordError):
        ofindex.build_index(p)


def test_a_file_changed_after_the_survey_is_refused(tmp_path):
    p = write_raw(str(tmp_path / "part-0"), ref_tfrecord(TF))
    storage = LocalStorage()
    looked_at = storage.stamp(p)
    write_raw(p, ref_tfrecord(TF[:3]))  # rewritten between the first look and the scan
    job = FileJob(storage, p, ofindex.RecordFormat.TFRECORD, storage, sidecar_of(p),
                  stamp=looked_at)
    with pytest.raises(ofindex.StaleIndexError, match="changed"):
        job.run(resume=False)
    assert not os.path.exists(sidecar_of(p))


def _listing(backend, url, index_dir):
    """Names of the files under ``url`` (or in ``index_dir`` for read-only HTTP)."""
    if not backend.writable:
        return sorted(os.listdir(index_dir)) if os.path.isdir(index_dir) else []
    if backend.root is not None:
        return sorted(os.listdir(backend._local(url)))
    paths = backend.fs.ls(backend.path(url), detail=False, refresh=True)
    return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in paths)


def test_strays_and_mixed_framings_on_every_storage(backend, tmp_path):
    """HTTP is read-only (sidecars and manifest go to a local ``index_dir``) and lists a
    directory only with a trailing slash (nginx autoindex)."""
    local = _tf_dir(tmp_path / "d")
    url = backend.prefix()
    backend.upload(local, url)
    opts = backend.storage_options
    index_dir = None if backend.writable else str(tmp_path / "idx")
    src = url if backend.writable else url + "/"
    with pytest.warns(ofindex.SkippedFilesWarning) as record:
        results = ofindex.build_index(src, index_dir=index_dir, storage_options=opts)
    (message,) = _skipped(record)
    assert "README.txt" in message and "label.labels.txt" in message
    assert [r.records for r in results] == [7, 5]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(ofindex.open(src, index_dir=index_dir, storage_options=opts)) == TF
    with pytest.warns(ofindex.SkippedFilesWarning):
        assert list(ofindex.open(src, index_dir=index_dir, storage_options=opts,
                                 manifest=False)) == TF
    with pytest.raises(ofindex.FormatDetectionError, match=r"README\.txt"):
        ofindex.build_index(src, index_dir=index_dir, storage_options=opts, strict=True)

    mixed = backend.prefix()
    write_raw(str(tmp_path / "m" / "a-tf"), ref_tfrecord(TF))
    write_raw(str(tmp_path / "m" / "b-of"), ref_ofrecord(OF))
    backend.upload(str(tmp_path / "m"), mixed)
    mixed_index = None if backend.writable else str(tmp_path / "idx-mixed")
    with pytest.raises(ofindex.FormatDetectionError) as err:
        ofindex.build_index(mixed if backend.writable else mixed + "/", index_dir=mixed_index,
                            storage_options=opts)
    assert "1 TFRecord" in str(err.value) and "a-tf" in str(err.value)
    assert "1 OFRecord" in str(err.value) and "b-of" in str(err.value)
    assert _listing(backend, mixed, mixed_index or "") == (
        ["a-tf", "b-of"] if backend.writable else [])  # no sidecar, no manifest


def test_document_names_and_first_bytes(tmp_path):
    """What counts as plainly not a record file in a listing (the README documents it)."""
    d = tmp_path / "d"
    write_raw(str(d / "part-0"), ref_tfrecord(TF))
    for name in ("dataset_info.json", "features.json"):  # TFDS metadata: silently left out
        write_raw(str(d / name), b"{}")
    strays = {"LICENSE": b"Apache 2.0\n", "readme": README, "image.image.txt": LABELS,
              "summary.md": README, "stats.csv": b"a,b\n1,2\n", "tiny": b"\x01\x02",
              "blob.bin": b"\xff" * 64}
    for name, data in strays.items():
        write_raw(str(d / name), data)
    with pytest.warns(ofindex.SkippedFilesWarning) as record:
        (result,) = ofindex.build_index(str(d), manifest=False)
    (message,) = _skipped(record)
    assert f"{len(strays)} files" in message and "json" not in message
    assert result.records == len(TF)


def test_a_threaded_remote_build_leaves_the_warning_filters_alone(tmp_path):
    """The build's threads must not leave a warning filter behind (``catch_warnings`` is not
    thread-safe): the ``SkippedFilesWarning`` of the build itself, and warnings after it, are
    still shown."""
    import fsspec

    fs = fsspec.filesystem("memory")
    for k in range(8):
        fs.pipe_file(f"/filters-{tmp_path.name}/part-{k}", ref_tfrecord(TF))
    fs.pipe_file(f"/filters-{tmp_path.name}/README.md", README)
    before = list(warnings.filters)
    for _ in range(3):
        with pytest.warns(ofindex.SkippedFilesWarning):
            ofindex.build_index(f"memory://filters-{tmp_path.name}", workers=8, resume=False)
        assert warnings.filters == before
