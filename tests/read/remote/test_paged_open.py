"""Remote files opened without a manifest read their sidecars by pages (issue 30, item 5).

``ofindex.open`` of a remote file, a list or a glob fetches each sidecar's fixed 512-byte
header (with the data file's stat) instead of the whole sidecar, and the shards then read
pages of offsets as a manifest's do. On real servers (nginx, moto S3, fake GCS): no whole
sidecar crosses the network, 16 random records of a 1 M-record file move a few KiB (nginx's
own access log counts them), and a corrupt header, corrupt pages, a stale data file or a
sidecar replaced after the open are all refused.
"""

from __future__ import annotations

import os
import pickle
import re
import struct

import numpy as np
import pytest

import ofindex
from ofindex.cli.synthetic import write_dataset
from ofindex.formats.sidecar_header import HEADER_SIZE
from ofindex.read.remote.pages import page_records_for
from tests.kit.backends import make_backend
from tests.kit.datasets import random_dataset
from tests.kit.helpers import copy_dataset, read_bytes, sidecar_of
from tests.kit.old_sidecars import rewrite_one_as_version_1
from tests.kit.rounds import Rounds

SHARDS = 4
RECORDS = 8000  # 2000 per shard of ~40-byte records: pages of 16 records, 125 pages a shard
PER = RECORDS // SHARDS


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Four shards and their sidecars, no manifest."""
    return random_dataset(tmp_path_factory, "paged-open", RECORDS, SHARDS, record_size=40, seed=11,
                          manifest=False)


def page_bytes(ds) -> int:
    return 8 * page_records_for(PER, ds.shards[0].bytes)


def _paths(url: str, how: str) -> str | list[str]:
    if how == "file":
        return f"{url}/part-00001"
    if how == "list":
        return [f"{url}/part-{k:05d}" for k in range(SHARDS)]
    return f"{url}/part-*"


@pytest.mark.parametrize("how", ["file", "list", "glob"])
def test_open_without_manifest_reads_pages(remote_backend, dataset, how):
    d, expected = dataset
    url = remote_backend.prefix()
    remote_backend.upload(d, url)
    ds = ofindex.open(_paths(url, how), storage_options=remote_backend.storage_options)
    if how == "file":
        expected = expected[PER : 2 * PER]
    storage = ds._table.storage
    shards = len(ds.shards)
    assert len(ds) == len(expected) and shards == (1 if how == "file" else SHARDS)
    # the open moved the headers, 512 bytes a shard, and no offsets; the index built on local
    # disk and uploaded, each data file's content regions too (12 KiB: format.md, "Identity")
    regions = storage.bytes_read - shards * HEADER_SIZE
    assert shards * 3 * 4096 <= regions <= shards * (3 * 4096 + 1024)
    assert not any(s.loaded for s in ds._table.shards)
    rounds = Rounds(storage)
    idx = np.random.default_rng(1).integers(0, len(ds), 64 * shards)  # ~40% of the pages
    assert ds[idx] == [expected[i] for i in idx]
    # one round of pages (no header, no stat: both came with the open), one of data
    assert rounds.calls == ["fetch_round", "read_ranges_concat"]
    assert not rounds.wholes
    pages = {(p, (s - HEADER_SIZE) // page_bytes(ds))
             for p, s, e in rounds.ranges for s in range(s, e - 8, 8)}
    assert all(s >= HEADER_SIZE for _, s, _ in rounds.ranges)  # no header fetched again
    assert sum(e - s for _, s, e in rounds.ranges) <= len(pages) * page_bytes(ds) + 8 * len(
        rounds.ranges)  # only the pages holding the batch's records (and each run's next)
    assert len(pages) < 0.75 * shards * PER * 8 // page_bytes(ds)  # not whole sidecars
    assert not any(s.loaded for s in ds._table.shards)
    # single records, slices and iteration (whole sidecars, checked against the pins)
    assert ds[len(ds) - 1] == expected[-1] and ds[5:25] == expected[5:25]
    assert list(ds.iter_records(len(ds) - 30)) == expected[-30:]


def test_pickled_dataset_reads_pages_in_a_new_process(bucket_backend, dataset):
    d, expected = dataset
    url = bucket_backend.prefix()
    bucket_backend.upload(d, url)
    ds = pickle.loads(pickle.dumps(ofindex.open(f"{url}/part-*",
                                                storage_options=bucket_backend.storage_options)))
    rounds = Rounds(ds._table.storage)
    idx = np.random.default_rng(2).integers(0, RECORDS, 64)
    assert ds[idx] == [expected[i] for i in idx]
    assert not rounds.wholes and not any(s.loaded for s in ds._table.shards)


@pytest.fixture(scope="module")
def million(tmp_path_factory):
    """One file of 1,000,000 records (~8-byte payloads): an 8 MB sidecar."""
    d = str(tmp_path_factory.mktemp("million"))
    write_dataset(d, 1_000_000, 1, kind="random", record_size=8, index=True, seed=3)
    return d


@pytest.mark.parametrize("name", ["http", "s3"])
def test_sixteen_random_records_of_a_million_move_kilobytes(name, million, request,
                                                             tmp_path_factory):
    """The issue's goal: under 1 MB moved (it was the 8 MB sidecar, then the records)."""
    backend = make_backend(name, request, tmp_path_factory)
    url = backend.prefix()
    backend.upload(million, url)
    log = backend.server.log if name == "http" else None
    before = os.path.getsize(log) if log else 0
    ds = ofindex.open(f"{url}/part-00000", storage_options=backend.storage_options)
    storage = ds._table.storage
    # the open: the header, a stat and (a local index uploaded) the file's content regions
    assert HEADER_SIZE + 3 * 4096 <= storage.bytes_read <= HEADER_SIZE + 3 * 4096 + 1024
    rounds = Rounds(storage)
    idx = np.random.default_rng(4).choice(1_000_000, 16, replace=False)
    got = ds[idx]
    assert os.path.getsize(sidecar_of(os.path.join(million, "part-00000"))) > 8_000_000
    index_bytes = HEADER_SIZE + sum(e - s for _, s, e in rounds.ranges)
    assert index_bytes < 16 * 8 * 17 + HEADER_SIZE + 1  # 16 pages of 16 offsets (+ the next)
    assert storage.bytes_read < 1 << 20  # records read through small gaps included
    if log:  # what nginx itself says it sent, by file (body bytes of every request)
        with open(log, "rb") as f:
            f.seek(before)
            sent = re.findall(rb'"GET (\S+) [^"]*" \d{3} (\d+)', f.read())
        sidecar = [int(n) for path, n in sent if path.endswith(b".ofidx")]
        # the header at open, then the 16 pages in one multi-range answer: 16 x 136 bytes,
        # each part's ~110 bytes of headers instead of 15 more requests' (whose own request
        # and response headers nginx does not count here)
        assert len(sidecar) == 2 and 0 < sum(sidecar) < 6 << 10
        assert sum(int(n) for _, n in sent) < 1 << 20
    with ofindex.open(million) as local:
        assert got == local[idx]


def _opened(backend, dataset, **kw):
    """The dataset on ``backend`` (one shard), and the remote URL of its sidecar."""
    d, _ = dataset
    url = backend.prefix()
    backend.upload(d, url)
    ds = ofindex.open(f"{url}/part-00000", storage_options=backend.storage_options, **kw)
    return url, ds, ds.shards[0].index_url


@pytest.mark.parametrize("name", ["http", "s3"])
def test_corrupt_header_is_refused_at_open(name, dataset, request, tmp_path_factory):
    backend = make_backend(name, request, tmp_path_factory)
    url, _, index_url = _opened(backend, dataset)
    raw = bytearray(read_bytes(sidecar_of(os.path.join(dataset[0], "part-00000"))))
    struct.pack_into("<Q", raw, 16, PER + 1)  # the count, without resealing the header CRC
    backend.put_bytes(index_url, bytes(raw))
    with pytest.raises(ofindex.SidecarError, match=r"part-00000.ofidx: sidecar header CRC"):
        ofindex.open(f"{url}/part-00000", storage_options=backend.storage_options)


@pytest.mark.parametrize("name", ["http", "s3"])
def test_corrupt_pages_are_refused(name, dataset, request, tmp_path_factory):
    backend = make_backend(name, request, tmp_path_factory)
    url, _, index_url = _opened(backend, dataset)
    raw = bytearray(read_bytes(sidecar_of(os.path.join(dataset[0], "part-00000"))))
    at = HEADER_SIZE + 8 * 1000  # record 1000 starts where record 999 does
    raw[at : at + 8] = raw[at - 8 : at]
    backend.put_bytes(index_url, bytes(raw))  # the body CRC, which pages do not see, is stale
    ds = ofindex.open(f"{url}/part-00000", storage_options=backend.storage_options)
    assert ds[5] == dataset[1][5]  # other pages read
    with pytest.raises(ofindex.SidecarError, match=r"part-00000.ofidx: record 999: .*corrupt"
                                                   r".*ofindex build"):
        ds[[999, 3]]
    with pytest.raises(ofindex.SidecarError, match=r"part-00000.ofidx: .*fails its CRC"):
        list(ds.iter_records(990))  # whole: its body checked


@pytest.mark.parametrize("name", ["http", "s3"])
def test_stale_data_file_is_refused(name, dataset, request, tmp_path_factory):
    backend = make_backend(name, request, tmp_path_factory)
    url, _, _ = _opened(backend, dataset)
    data = read_bytes(os.path.join(dataset[0], "part-00000"))
    backend.put_bytes(f"{url}/part-00000", data[:-1])
    with pytest.raises(ofindex.StaleIndexError, match=r"part-00000.ofidx: index is stale for "
                                                      r".*part-00000.*ofindex.build_index"):
        ofindex.open(f"{url}/part-00000", storage_options=backend.storage_options)
    ds = ofindex.open(f"{url}/part-00000", storage_options=backend.storage_options,
                      check_stale=False)  # asked not to check: the header alone opens it
    assert len(ds) == PER


def test_sidecar_replaced_after_open_is_refused(bucket_backend, dataset, tmp_path):
    """A new process (a pickled dataset) checks the header it fetches against the pinned one."""
    _, ds, index_url = _opened(bucket_backend, dataset)
    other = str(tmp_path / "other")
    write_dataset(other, PER + 5, 1, kind="random", record_size=40, index=True, seed=12)
    bucket_backend.put_bytes(index_url, read_bytes(sidecar_of(os.path.join(other,
                                                                           "part-00000"))))
    clone = pickle.loads(pickle.dumps(ds))
    with pytest.raises(ofindex.StaleIndexError, match=r"part-00000.ofidx: the index changed "
                                                      r"since the dataset was opened.*reopen"):
        clone[[3, 1500]]
    # this process took the header at open: the new pages are only checked against its
    # indexed end, and the records against their CRCs — refused, never returned wrong
    with pytest.raises((ofindex.CorruptRecordError, ofindex.IndexMismatchError,
                        ofindex.SidecarError)):
        ds[[3, 1500]]


def test_version_1_sidecar_without_manifest_is_read_whole(remote_backend, dataset, tmp_path):
    d, expected = dataset
    old = str(tmp_path / "v1")
    copy_dataset(d, old)  # the data and its index directory
    rewrite_one_as_version_1(os.path.join(old, "part-00002"))
    url = remote_backend.prefix()
    remote_backend.upload(old, url)
    ds = ofindex.open(f"{url}/part-*", storage_options=remote_backend.storage_options)
    assert ds._table.shards[2].opened and not ds._table.shards[1].opened
    idx = np.random.default_rng(5).integers(0, RECORDS, 100)
    assert ds[idx] == [expected[i] for i in idx]
