"""The backend-neutral kit: one multi-shard dataset read from every storage must equal the local
copy record for record — by index, slice, batch and iteration — through a glob, a directory
(manifest) and an explicit list; and the index builder must work on each storage.

Backends: local disk, ``memory://``, HTTP (nginx), S3 (moto server), GCS (fake-gcs-server),
Azure Blob (Azurite), and S3 and GCS again through obstore.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import ofindex
from ofindex.cli.synthetic import write_dataset
from tests.kit.backends import OBSTORE_BACKENDS, make_backend
from tests.kit.helpers import manifest_of

SHARDS = 4
RECORDS = 203  # uneven over the shards


@pytest.fixture(params=["local", "memory", "http", "s3", "gcs", "azure", *OBSTORE_BACKENDS])
def backend(request, tmp_path_factory):
    """Every storage, and the stores obstore serves read through it too."""
    return make_backend(request.param, request, tmp_path_factory)


@pytest.fixture(params=["s3", "gcs", "azure", "s3+obstore"])  # (no writes to fake-gcs)
def bucket_backend(request, tmp_path_factory):
    return make_backend(request.param, request, tmp_path_factory)


@pytest.fixture(scope="module")
def local_dataset(tmp_path_factory):
    """A 4-shard dataset with sidecars and a manifest, plus its records read locally."""
    d = str(tmp_path_factory.mktemp("dataset"))
    write_dataset(d, RECORDS, SHARDS, kind="random", record_size=300, index=False, seed=7)
    ofindex.build_index(d)
    assert os.path.exists(manifest_of(d))
    ds = ofindex.open(d)
    return d, [ds[i] for i in range(len(ds))]


def _open(backend, url, how, **kw):
    opts = backend.storage_options
    if how == "glob":
        return ofindex.open(url + "/part-*", storage_options=opts, **kw)
    if how == "dir":
        return ofindex.open(url, storage_options=opts, **kw)
    if how == "list":
        return ofindex.open([f"{url}/part-{k:05d}" for k in range(SHARDS)],
                            storage_options=opts, **kw)
    raise ValueError(how)


def _check_all_ways(ds, expected, every_index=False):
    """Every record by batch and by iteration; by single index all of them (``every_index``)
    or a sample (moto answers one request at a time, ~25 ms each)."""
    n = len(expected)
    assert len(ds) == n
    singles = range(n) if every_index else range(0, n, 17)
    assert [ds[i] for i in singles] == [expected[i] for i in singles]    # by index
    assert ds[-1] == expected[-1] and ds[-n] == expected[0]
    assert ds[10:150:3] == expected[10:150:3]                            # slice
    assert ds[::-7] == expected[::-7]
    rng = np.random.default_rng(1)
    perm = rng.permutation(n)
    assert ds.__getitems__(perm.tolist()) == [expected[i] for i in perm]  # random batch
    dup = [5, 5, 199, 0, 5, 120]
    assert ds[np.array(dup)] == [expected[i] for i in dup]
    assert list(ds) == expected                                           # iteration
    assert list(ds.iter_records(50, 160)) == expected[50:160]
    with pytest.raises(IndexError):
        ds[n]


@pytest.mark.parametrize("how", ["glob", "dir", "list"])
def test_reads_equal_local_copy(backend, local_dataset, how):
    d, expected = local_dataset
    url = backend.prefix()
    backend.upload(d, url)
    ds = _open(backend, url, how)
    _check_all_ways(ds, expected, every_index=how == "glob")
    if how == "dir":
        assert all(s.records > 0 for s in ds.shards)


def test_build_on_the_storage(backend, local_dataset, tmp_path):
    """``build_index`` on the storage itself (sidecars beside the data, manifest included), or
    into a separate ``index_dir`` for read-only data (HTTP is read-only)."""
    d, expected = local_dataset
    url = backend.prefix()
    backend.upload(d, url, sidecars=False)
    opts = backend.storage_options
    if backend.writable:
        results = ofindex.build_index(url, storage_options=opts)
        assert [r.records for r in results] == [51, 51, 51, 50]
        assert all(r.fingerprint for r in results)
        _check_all_ways(ofindex.open(url, storage_options=opts), expected)
        _check_all_ways(ofindex.open(url, storage_options=opts, manifest=False), expected)
    index_dir = str(tmp_path / "idx")
    src = url + "/" if backend.name == "http" else url
    ofindex.build_index(src, index_dir=index_dir, storage_options=opts, workers=3)
    assert os.path.exists(os.path.join(index_dir, "ofindex-manifest.json"))
    ds = ofindex.open(src, index_dir=index_dir, storage_options=opts)
    assert ds.shards[0].index_url.startswith(index_dir)
    _check_all_ways(ds, expected)
    ds = ofindex.open(os.path.join(index_dir, "ofindex-manifest.json"), storage_options=opts)
    _check_all_ways(ds, expected)


def test_stale_shard_is_caught(backend, local_dataset):
    d, _ = local_dataset
    url = backend.prefix()
    backend.upload(d, url)
    first = f"{url}/part-00000"
    with open(os.path.join(d, "part-00000"), "rb") as f:
        data = f.read()
    backend.put_bytes(first, data + b"\0" * 16)  # appended bytes: the size changed
    with pytest.raises(ofindex.StaleIndexError, match=r"ofindex build|build_index"):
        _open(backend, url, "glob")
    # through the manifest: caught at open (local) or when the shard is first touched (remote)
    with pytest.raises(ofindex.StaleIndexError, match=r"ofindex build|build_index"):
        ds = _open(backend, url, "dir")
        ds.__getitems__([100, 0, 200])


def test_same_size_rewrite_is_stale_on_object_stores(bucket_backend, local_dataset, tmp_path):
    """A rewrite of the same size on an object store: its ETag / generation is not the one
    recorded in the sidecar, and its content is not the one indexed."""
    d, expected = local_dataset
    url = bucket_backend.prefix()
    bucket_backend.upload(d, url, sidecars=False)
    opts = bucket_backend.storage_options
    ofindex.build_index(url, storage_options=opts)
    with open(os.path.join(d, "part-00001"), "rb") as f:
        data = bytearray(f.read())
    data[100] ^= 0xFF
    bucket_backend.put_bytes(f"{url}/part-00001", bytes(data))
    with pytest.raises(ofindex.StaleIndexError, match=r"content differs"):
        ofindex.open(url, storage_options=opts, manifest=False)
    ds = ofindex.open(url, storage_options=opts)
    assert ds[0] == expected[0]  # shard 0 is untouched
    with pytest.raises(ofindex.StaleIndexError, match=r"content differs"):
        ds[60]
