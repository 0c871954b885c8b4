"""Remote datasets in worker processes: a dataset used in the parent keeps working in forked
and spawned children (each creates its own fsspec filesystem: async instances are not
fork-safe), including as a PyTorch DataLoader source."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle

import numpy as np
import pytest

import ofindex
from tests.kit.datasets import random_dataset
from tests.kit.helpers import need

RECORDS = 120


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return random_dataset(tmp_path_factory, "workers-ds", RECORDS, 3, record_size=200, seed=11)


def _child_reads(ds, indices, queue) -> None:
    try:
        fs_before = ds._table.storage.client._fs
        out = ds.__getitems__(indices)
        single = ds[indices[0]]
        streamed = list(ds.iter_records(0, 10))
        client = ds._table.storage.client
        fresh = client._fs is not fs_before and client._pid == os.getpid()
        queue.put(("ok", out, single, streamed, fresh))
    except BaseException as exc:
        queue.put(("error", repr(exc), None, None, None))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_dataset_in_child_after_parent_used_it(bucket_backend, dataset, method):
    d, expected = dataset
    url = bucket_backend.prefix()
    bucket_backend.upload(d, url)
    ds = ofindex.open(url, storage_options=bucket_backend.storage_options)
    assert ds[5] == expected[5]  # the parent's filesystem and event loop now exist
    assert ds.__getitems__([100, 1]) == [expected[100], expected[1]]
    ctx = mp.get_context(method)
    queue = ctx.Queue()
    indices = np.random.default_rng(2).permutation(RECORDS)[:50].tolist()
    proc = ctx.Process(target=_child_reads, args=(ds, indices, queue))
    proc.start()
    status, out, single, streamed, fresh = queue.get(timeout=120)
    proc.join(60)
    assert status == "ok", out
    assert out == [expected[i] for i in indices]
    assert single == expected[indices[0]] and streamed == expected[:10]
    if method == "fork":
        assert fresh  # the child made its own filesystem, it did not reuse the parent's
    assert ds[7] == expected[7]  # and the parent still works


def test_pickle_carries_no_client(bucket_backend, dataset):
    d, expected = dataset
    url = bucket_backend.prefix()
    bucket_backend.upload(d, url)
    ds = ofindex.open(url, storage_options=bucket_backend.storage_options, cache_bytes=1 << 20)
    assert ds[0] == expected[0]
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._table.storage.client._fs is None
    assert not any(s.loaded for s in clone._table.shards)
    assert clone._table.shards[0].cache.max_bytes == 1 << 20
    assert clone[RECORDS - 1] == expected[-1]


def test_torch_dataloader_workers(dataset, bucket_backend):
    torch = need("torch")
    from torch.utils.data import DataLoader

    d, expected = dataset
    url = bucket_backend.prefix()
    bucket_backend.upload(d, url)
    ds = ofindex.open(url, storage_options=bucket_backend.storage_options)
    assert ds[0] == expected[0]
    loader = DataLoader(ds, batch_size=16, num_workers=2, collate_fn=lambda b: b,
                        multiprocessing_context="fork")
    got = [r for batch in loader for r in batch]
    assert got == expected
    del torch
