"""Columns over a dataset that changes (issue 48): a shard added after the build is found by
its name in the error until its columns are built, the key index of the older dataset is not
used for the newer one (its identity differs) and is rewritten by the next build, splits by
key keep every older record in its part, and a compact manifest's dataset uses its key index."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ofindex
from ofindex.errors import ColumnNotFoundError
from tests.kit.columns_data import cut, records, write_dataset


def _append(data: str, payloads: list[bytes], name: str) -> None:
    with ofindex.Writer(os.path.join(data, name), index=False) as writer:
        for payload in payloads:
            writer.write(payload)


def test_a_shard_added_later_needs_its_columns_and_a_new_key_index(tmp_path):
    payloads, truth = records(41, 900)
    data = write_dataset(str(tmp_path / "data"), cut(payloads, [300, 300]))
    ofindex.build_index(data, columns=["label", "image/id"], keys=True)
    before = ofindex.open(data)
    splits = before.split_by("image/id", {"a": 0.5, "b": 0.3, "c": 0.2})
    _append(data, payloads[600:], "part-002")
    ofindex.build_index(data)  # the new shard indexed without columns
    after = ofindex.open(data)
    assert after.identity != before.identity
    with pytest.raises(ColumnNotFoundError, match="part-002"):
        after.positions(label=1)
    ofindex.build_index(data, columns=["label", "image/id"], keys=True)
    after = ofindex.open(data)
    index = after._column_queries().key_index("label")
    assert index is not None and index.header.identity == after.identity
    assert after.positions(label=1).tolist() == [i for i, v in enumerate(truth["label"])
                                                 if v == 1]
    again = after.split_by("image/id", {"a": 0.5, "b": 0.3, "c": 0.2})
    for name, part in splits.items():  # the older records keep their parts
        kept = again[name].global_positions()
        assert np.isin(part.global_positions(), kept).all()
        assert set(kept[kept >= 600].tolist()) | set(part.global_positions().tolist()) == \
            set(kept.tolist())


def test_an_older_key_index_is_not_used_for_another_dataset(tmp_path):
    payloads, truth = records(42, 400)
    data = write_dataset(str(tmp_path / "data"), cut(payloads, [200, 200]))
    ofindex.build_index(data, columns=["label"])
    part = ofindex.open(os.path.join(data, "part-001"))  # one shard: another dataset
    assert part._column_queries().key_index("label") is None
    assert part.positions(label=2).tolist() == [i - 200 for i, v in enumerate(truth["label"])
                                                if v == 2 and i >= 200]


def test_a_compact_manifest_finds_its_key_index(tmp_path):
    payloads, truth = records(43, 500)
    data = write_dataset(str(tmp_path / "data"), cut(payloads, [100, 150, 250]))
    ofindex.build_index(data, columns=["image/id"], keys=True,
                        manifest=data + ".ofindex/ofindex-manifest.bin")
    assert os.path.exists(data + ".ofindex/ofindex-manifest.bin")
    ds = ofindex.open(data)
    index = ds._column_queries().key_index("image/id")
    assert index is not None and index.header.identity == ds.identity
    key = truth["image/id"][321]
    assert ds.lookup("image/id", key).tolist() == [321]


def test_a_file_grown_by_appending_gets_the_columns_of_its_new_records(tmp_path):
    """A build that indexes only what a file gained (issue 49) writes its columns again too:
    the grown sidecar's columns name every record, old and new."""
    payloads, truth = records(43, 500)
    data = write_dataset(str(tmp_path / "data"), cut(payloads[:300], [300]))
    ofindex.build_index(data, columns=["label", "image/id"])
    _append(str(tmp_path), payloads[300:], "more")  # framed records, appended as bytes
    with open(tmp_path / "more", "rb") as more, open(os.path.join(data, "part-000"), "ab") as f:
        f.write(more.read())
    results = ofindex.build_index(data, columns=["label", "image/id"])
    assert [r.records for r in results] == [500]
    grown = ofindex.open(data)
    assert len(grown) == 500
    assert grown.positions(label=1).tolist() == [i for i, v in enumerate(truth["label"])
                                                 if v == 1]
    key = truth["image/id"][450]
    assert grown.lookup("image/id", key).tolist() == [i for i, v in enumerate(truth["image/id"])
                                                       if v == key]
