"""Paged remote sidecars on real bucket servers (moto S3, fake GCS): a cold batch is two
request rounds (index pages, then data) and reads no whole sidecar, a warm one is one round,
memory stays within the page-cache bound, headers are checked against the manifest, and
version 1 sidecars fall back to whole fetches."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ofindex
from ofindex.formats.framing import RecordFormat
from ofindex.formats.sidecar_header import (
    HEADER_SIZE,
    VERSION_PACKED,
    Compression,
    SidecarHeader,
    decode_header,
    encode_header,
)
from ofindex.read.remote.pages import page_records_for, pageable
from ofindex.storage import FileStamp
from tests.kit.datasets import random_dataset
from tests.kit.helpers import copy_dataset, manifest_of, read_bytes
from tests.kit.old_sidecars import rewrite_as_version_1, version_1_sidecar
from tests.kit.rounds import Rounds

SHARDS = 4
RECORDS = 8000  # 2000 per shard of ~40-byte records: pages of 16 records, 125 pages a shard


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return random_dataset(tmp_path_factory, "paged-ds", RECORDS, SHARDS, record_size=40, seed=7)


def _open(bucket_backend, dataset, **kw):
    d, expected = dataset
    url = bucket_backend.prefix()
    bucket_backend.upload(d, url)
    ds = ofindex.open(url, storage_options=bucket_backend.storage_options, **kw)
    return url, ds, expected


def test_cold_batch_is_two_rounds_warm_is_one(bucket_backend, dataset):
    _, ds, expected = _open(bucket_backend, dataset)
    storage = ds._table.storage
    rounds = Rounds(storage)
    idx = np.random.default_rng(1).integers(0, RECORDS, 256)
    requests = storage.requests
    assert ds[idx] == [expected[i] for i in idx]
    assert rounds.calls == ["fetch_round", "read_ranges_concat"]
    assert not rounds.wholes  # no sidecar fetched whole
    assert all(p.endswith(".ofidx") for p, _, _ in rounds.ranges)
    page = 8 * page_records_for(RECORDS // SHARDS, ds.shards[0].bytes)
    sidecar = HEADER_SIZE + 8 * (RECORDS // SHARDS)
    index_bytes = sum(e - s for _, s, e in rounds.ranges)
    assert index_bytes < SHARDS * sidecar * 0.9  # only pages, not whole sidecars
    assert all(e - s <= HEADER_SIZE + 8 + page * 4 or s == 0 for _, s, e in rounds.ranges)
    cold = storage.requests - requests
    # warm: every page is cached, one round of data reads
    rounds.clear()
    requests = storage.requests
    assert ds[idx] == [expected[i] for i in idx]
    assert rounds.calls == ["read_ranges_concat"]
    assert storage.requests - requests == SHARDS and cold > SHARDS
    # single records go through pages too, and slices and iteration still work
    rounds.clear()
    assert ds[RECORDS - 1] == expected[-1] and ds[2500] == expected[2500]
    assert not rounds.wholes
    assert ds[10:30] == expected[10:30]
    assert list(ds.iter_records(1990, 2010)) == expected[1990:2010]


def test_page_cache_stays_within_its_bound(bucket_backend, dataset):
    bound = 24_000
    _, ds, expected = _open(bucket_backend, dataset, cache_bytes=bound)
    rng = np.random.default_rng(2)
    cache = ds._table.shards[0].cache
    page_cost = 8 * 17 + 160
    for _ in range(6):
        idx = rng.integers(0, RECORDS, 256)
        assert ds[idx] == [expected[i] for i in idx]
        assert cache.memory.held_bytes <= bound + page_cost
    assert 0 < len(cache.memory) < RECORDS // 16  # pages were dropped
    assert not any(s.loaded for s in ds._table.shards)


def test_headers_are_checked_against_the_manifest(bucket_backend, dataset, tmp_path):
    d, _ = dataset
    changed = str(tmp_path / "changed")
    copy_dataset(d, changed)
    manifest = manifest_of(changed)
    old_manifest = read_bytes(manifest)
    with open(os.path.join(changed, "part-00001"), "ab") as f:  # data grows, sidecar rebuilt
        f.write(read_bytes(os.path.join(d, "part-00001"))[:10_000])
    with pytest.warns(UserWarning, match="PARTIAL"):
        ofindex.build_index(os.path.join(changed, "part-00001"), allow_partial=True,
                            manifest=False)
    with open(manifest, "wb") as f:
        f.write(old_manifest)  # the manifest still describes the old data
    url = bucket_backend.prefix()
    bucket_backend.upload(changed, url)
    ds = ofindex.open(url, storage_options=bucket_backend.storage_options)
    first = RECORDS // SHARDS
    assert ds[5] == dataset[1][5]
    with pytest.raises(ofindex.StaleIndexError, match=r"manifest is out of date.*ofindex build"):
        ds[[first + 3, first + 1500]]


def test_data_changed_under_manifest_and_sidecar_is_stale(bucket_backend, dataset):
    d, _ = dataset
    url = bucket_backend.prefix()
    bucket_backend.upload(d, url)
    ds = ofindex.open(url, storage_options=bucket_backend.storage_options)
    bucket_backend.put_bytes(f"{url}/part-00002", read_bytes(os.path.join(d, "part-00002"))[:-1])
    with pytest.raises(ofindex.StaleIndexError, match=r"stale.*(ofindex build|build_index)"):
        ds[[2 * RECORDS // SHARDS + 7]]
    assert ds[3] == dataset[1][3]  # other shards still read


def test_version_1_sidecars_fall_back_to_whole_fetches(bucket_backend, dataset, tmp_path):
    d, expected = dataset
    old = str(tmp_path / "v1")
    copy_dataset(d, old)
    rewrite_as_version_1(old, SHARDS)
    url = bucket_backend.prefix()
    bucket_backend.upload(old, url)
    ds = ofindex.open(url, storage_options=bucket_backend.storage_options)
    rounds = Rounds(ds._table.storage)
    idx = np.random.default_rng(3).integers(0, RECORDS, 100)
    assert ds[idx] == [expected[i] for i in idx]
    assert all(s.loaded for s in ds._table.shards)  # read whole after the header said version 1
    rounds.clear()
    assert ds[idx] == [expected[i] for i in idx]
    assert rounds.calls == ["read_ranges_concat"]


def test_compressed_and_version_1_headers_are_not_pageable():
    stamp = FileStamp(100, "etag:x")
    plain = decode_header(encode_header(SidecarHeader(RecordFormat.TFRECORD, 3, stamp, 100)),
                          path="p")
    gz = decode_header(encode_header(SidecarHeader(RecordFormat.TFRECORD, 3, stamp, 100,
                                                   compression=Compression.GZIP)), path="p")
    gz3 = decode_header(encode_header(SidecarHeader(
        RecordFormat.TFRECORD, 3, stamp, 100, compression=Compression.GZIP,
        version=VERSION_PACKED, packed_bytes=8)), path="p")
    v1 = decode_header(version_1_sidecar(1, [0, 10, 20], 100, 100, "etag:x"), path="p")
    assert (plain.version, gz.version, gz3.version) == (2, 2, 3)
    assert pageable(plain) and not pageable(gz) and not pageable(gz3) and not pageable(v1)


def test_page_size_follows_record_size():
    assert page_records_for(1000, 1000 * 216) == 32  # ~200-byte records: 256-byte pages
    assert page_records_for(1000, 1000 * 30) == 16  # small records: the floor
    assert page_records_for(10, 10 * (1 << 20)) == 8192  # big records: the ceiling
