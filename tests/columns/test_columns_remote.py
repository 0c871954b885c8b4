"""Column queries on remote datasets (issue 48, step 2): a dataset built locally and served
over HTTP (nginx), from S3 (moto) and GCS (fake-gcs-server) answers ``positions``, ``where``
and ``lookup`` as it does locally, reading the key index's pages through the storage's
range reads (a batch of keys: one round for the leaves) and only the column pages a
condition may match."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import ofindex
from tests.kit.columns_data import NAMES, cut, records, write_dataset

SIZES = [300, 0, 500, 200]


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """The dataset, its key indexes cut into leaves of 64 entries (a lookup batch then
    touches several leaves)."""
    from ofindex.columns import key_build

    payloads, truth = records(21, sum(SIZES))
    data = write_dataset(str(tmp_path_factory.mktemp("remote-columns") / "data"),
                         cut(payloads, SIZES))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(key_build, "encode_key_index", functools.partial(
            key_build.encode_key_index, leaf_entries=64))
        ofindex.build_index(data, columns=list(NAMES), keys=True)
    return data, truth


def _rounds(storage, calls):
    original = storage.fetch_round

    def counted(*args, **kwargs):
        calls.append(len(args[0]) if args else len(kwargs.get("ranges", ())))
        return original(*args, **kwargs)

    storage.fetch_round = counted


def test_remote_queries_match_local_ones(local, remote_backend):
    data, _ = local
    url = remote_backend.prefix() + "/data"
    remote_backend.upload(data, url)
    here = ofindex.open(data)
    there = ofindex.open(url, storage_options=remote_backend.storage_options)
    for conditions in ({"label": 3}, {"label": [0, None]}, {"score": (0.25, 0.5)},
                       {"image/id": (b"id-21-1", b"id-21-2")}, {"label": 1, "score": (0.5, None)}):
        assert there.positions(**conditions).tolist() == here.positions(**conditions).tolist()
    view = there.where(label=2)
    assert list(view) == list(here.where(label=2))
    keys = [b"id-21-%d" % i for i in (5, 999, 123, 4000)]
    assert [a.tolist() for a in there.lookup("image/id", keys)] == \
        [a.tolist() for a in here.lookup("image/id", keys)]
    one_keys = [("image/id", key) for key in keys + [k.decode() for k in keys]] + \
        [("label", 3), ("label", -1)]
    for _ in range(2):  # one key a call: its leaf read, then held
        for column, key in one_keys:
            assert there.lookup(column, key).tolist() == here.lookup(column, key).tolist()


def test_a_remote_lookup_batch_reads_one_round_of_leaves(local, remote_backend):
    data, truth = local
    url = remote_backend.prefix() + "/data"
    remote_backend.upload(data, url)
    ds = ofindex.open(url, storage_options=remote_backend.storage_options)
    ds.lookup("image/id", b"id-21-0")  # the key index's header and root, read once
    index = ds._column_queries().key_index("image/id")
    assert index.header.levels == 1 and index.header.root_children == -(-index.header.entries // 64)
    index.leaves.clear()
    storage = ds._table.shards[0].index_storage
    calls: list[int] = []
    _rounds(storage, calls)
    keys = [b"id-21-%d" % i for i in range(200, 1000, 37)]
    found = ds.lookup("image/id", keys)
    want = [[j for j, v in enumerate(truth["image/id"]) if v == key] for key in keys]
    assert [f.tolist() for f in found] == want
    # one round: the leaves the keys fall in, each once (several keys share a leaf)
    assert len(calls) == 1 and 2 <= calls[0] < len(keys) and calls[0] == len(index.leaves)
    records = ds[np.concatenate(found)]
    assert len(records) == sum(len(w) for w in want)


def test_a_remote_scan_reads_only_the_pages_that_may_match(local, remote_backend):
    data, _ = local
    url = remote_backend.prefix() + "/data"
    remote_backend.upload(data, url)
    ds = ofindex.open(url, storage_options=remote_backend.storage_options)
    columns = ds._column_queries()
    columns._keys["score"] = None  # as a dataset without its key index: the pages are read
    columns.reader.metas("score")
    storage = ds._table.shards[0].index_storage
    calls: list[int] = []
    _rounds(storage, calls)
    assert len(ds.positions(score=(2.0, None))) == 0  # above every page's greatest value
    assert calls == []
    ds.positions(score=(0.1, 0.2))
    assert calls == [sum(m.header.pages for m in columns.reader.metas("score"))]
