"""When key indexes are written (issue 48): a build writes them only when asked
(``build_index(keys=...)``, ``ofindex build --keys``); a local dataset's first lookup of a
column without one writes it where the build would have; a directory that cannot be written
leaves lookups to the column sidecars; a remote dataset's lookup without one is refused with
the build that writes it."""

from __future__ import annotations

import glob
import os

import pytest

import ofindex
from ofindex.columns.key_file import key_file_name
from ofindex.errors import ColumnError, StorageError
from tests.kit.columns_data import NAMES, cut, records, write_dataset


def _keys_of(data: str) -> list[str]:
    return sorted(os.path.basename(p) for p in glob.glob(data + ".ofindex/*.ofkey"))


def _truth_lookup(truth: dict, column: str, key: object) -> list[int]:
    return [i for i, v in enumerate(truth[column]) if v == key]


def test_a_build_writes_the_key_indexes_asked_for(tmp_path):
    payloads, _ = records(61, 500)
    data = write_dataset(str(tmp_path / "data"), cut(payloads, [200, 300]))
    ofindex.build_index(data, columns=list(NAMES))
    assert _keys_of(data) == []
    ofindex.build_index(data, columns=list(NAMES), keys=["image/id"])
    assert _keys_of(data) == [key_file_name("image/id")]
    ofindex.build_index(data, columns=list(NAMES), keys=True)
    assert _keys_of(data) == sorted(key_file_name(name) for name in NAMES)
    ds = ofindex.open(data)
    for name in NAMES:
        index = ds._column_queries().key_index(name)
        assert index is not None and index.header.identity == ds.identity


def test_keys_must_be_columns_built(tmp_path):
    payloads, _ = records(62, 100)
    data = write_dataset(str(tmp_path / "data"), cut(payloads, [100]))
    with pytest.raises(ColumnError, match="not among the columns") as caught:
        ofindex.build_index(data, columns=["label"], keys=["image/id"])
    assert "columns=" in str(caught.value) and "--columns" in caught.value.cli_message()
    assert not os.path.exists(data + ".ofindex")  # refused before anything is written


def test_a_local_lookup_writes_the_missing_key_index(tmp_path):
    payloads, truth = records(63, 700)
    data = write_dataset(str(tmp_path / "data"), cut(payloads, [300, 0, 400]))
    ofindex.build_index(data, columns=list(NAMES))
    ds = ofindex.open(data)
    key = truth["image/id"][456]
    assert ds.lookup("image/id", key).tolist() == _truth_lookup(truth, "image/id", key)
    assert _keys_of(data) == [key_file_name("image/id")]
    again = ofindex.open(data)
    index = again._column_queries().key_index("image/id")
    assert index is not None and index.header.identity == again.identity
    keys = [truth["image/id"][i] for i in (0, 299, 300, 699)] + [b"id-none"]
    assert [a.tolist() for a in again.lookup("image/id", keys)] == \
        [_truth_lookup(truth, "image/id", k) for k in keys]
    assert again.lookup("label", [1, 4])[1].tolist() == _truth_lookup(truth, "label", 4)
    assert _keys_of(data) == sorted([key_file_name("image/id"), key_file_name("label")])


def test_a_lookup_after_appends_writes_a_key_index_of_the_new_dataset(tmp_path):
    payloads, truth = records(64, 600)
    data = write_dataset(str(tmp_path / "data"), cut(payloads[:300], [300]))
    ofindex.build_index(data, columns=["image/id"], keys=True)
    old = ofindex.open(data)._column_queries().key_index("image/id")
    assert old is not None
    write_dataset(str(tmp_path / "more"), cut(payloads[300:], [300]))
    os.replace(str(tmp_path / "more" / "part-000"), os.path.join(data, "part-001"))
    ofindex.build_index(data, columns=["image/id"])  # the old key index is left as it was
    ds = ofindex.open(data)
    assert ds._column_queries().key_index("image/id") is None  # another dataset's
    key = truth["image/id"][450]
    assert ds.lookup("image/id", key).tolist() == _truth_lookup(truth, "image/id", key)
    index = ofindex.open(data)._column_queries().key_index("image/id")
    assert index is not None and index.header.identity == ds.identity
    assert index.header.records == 600


def test_a_part_of_a_dataset_leaves_the_whole_ones_key_index_as_it_is(tmp_path):
    payloads, truth = records(67, 500)
    data = write_dataset(str(tmp_path / "data"), cut(payloads, [200, 300]))
    ofindex.build_index(data, columns=list(NAMES), keys=["image/id"])
    path = os.path.join(data + ".ofindex", key_file_name("image/id"))
    with open(path, "rb") as f:
        whole = f.read()
    part = ofindex.open(os.path.join(data, "part-001"))  # one shard: another dataset
    at = next(i for i in range(321, 500) if truth["image/id"][i] is not None)
    key = truth["image/id"][at]
    want = _truth_lookup(truth, "image/id", key)
    assert part.lookup("image/id", key).tolist() == [i - 200 for i in want if i >= 200]
    assert part.lookup("image/id", [key])[0].tolist() == [i - 200 for i in want if i >= 200]
    with open(path, "rb") as f:
        assert f.read() == whole
    ds = ofindex.open(data)
    assert ds._column_queries().key_index("image/id") is not None
    assert ds.lookup("image/id", key).tolist() == want


def test_a_directory_that_cannot_be_written_leaves_lookups_to_the_columns(tmp_path,
                                                                          monkeypatch):
    payloads, truth = records(65, 400)
    data = write_dataset(str(tmp_path / "data"), cut(payloads, [150, 250]))
    ofindex.build_index(data, columns=list(NAMES))
    ds = ofindex.open(data)
    storage = ds._table.shards[0].index_storage
    tries = []

    def refuse(path, parts):
        tries.append(path)
        raise StorageError(f"{path}: cannot write here, the location is read-only")

    monkeypatch.setattr(type(storage), "write_atomic", lambda self, path, parts:
                        refuse(path, parts))
    for key in (truth["image/id"][7], truth["image/id"][300], b"id-none"):
        assert ds.lookup("image/id", key).tolist() == _truth_lookup(truth, "image/id", key)
    assert len(tries) == 1  # tried once, then the column sidecars are read
    assert _keys_of(data) == []


def test_a_remote_lookup_without_a_key_index_names_the_build_that_writes_it(
        tmp_path, remote_backend):
    payloads, truth = records(66, 300)
    data = write_dataset(str(tmp_path / "data"), cut(payloads, [100, 200]))
    ofindex.build_index(data, columns=list(NAMES))
    url = remote_backend.prefix() + "/data"
    remote_backend.upload(data, url)
    ds = ofindex.open(url, storage_options=remote_backend.storage_options)
    for ask in (lambda: ds.lookup("image/id", truth["image/id"][5]),
                lambda: ds.lookup("image/id", [truth["image/id"][5]])):
        with pytest.raises(ColumnError, match="no key index of column 'image/id'") as caught:
            ask()
        assert "keys=['image/id']" in str(caught.value)
        assert "--keys image/id" in caught.value.cli_message()
    # where() still reads the column sidecars, only the pages that may match
    assert ds.positions(label=2).tolist() == _truth_lookup(truth, "label", 2)
