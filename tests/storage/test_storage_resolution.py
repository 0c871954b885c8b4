"""Storage is resolved once: one ``ofindex.open`` of a bucket makes one storage object per
protocol and one fsspec client, configured when made and handed to the manifest reader, the
sidecars and the dataset; every later open in the process reuses the client."""

from __future__ import annotations

import uuid

import pytest

import ofindex
from ofindex.storage import FsspecStorage, Storages
from ofindex.transport import clients
from tests.kit import servers


@pytest.fixture
def counted(monkeypatch):
    made = {"storages": 0, "clients": 0}
    real_init, real_make = FsspecStorage.__init__, clients.make_filesystem

    def init(self, *args, **kwargs):
        made["storages"] += 1
        real_init(self, *args, **kwargs)

    def make(*args, **kwargs):
        made["clients"] += 1
        return real_make(*args, **kwargs)

    monkeypatch.setattr(FsspecStorage, "__init__", init)
    monkeypatch.setattr(clients, "make_filesystem", make)
    monkeypatch.setattr(clients, "_CLIENTS", {})
    return made


def test_one_storage_and_one_client_per_open(moto_server, counted, tmp_path):
    opts = servers.s3_options(moto_server.url)
    root = f"s3://{servers.BUCKET}/resolve-{uuid.uuid4().hex[:8]}"
    for k in range(3):
        with ofindex.Writer(f"{root}/part-{k}", storage_options=opts) as w:
            w.write_many([b"%d-%d" % (k, i) for i in range(5)])
    ofindex.build_index(root, storage_options=opts)  # writes the manifest
    counted["storages"] = counted["clients"] = 0
    ds = ofindex.open(root + "/", storage_options=opts, max_concurrency=7)
    assert ds[7] == b"1-2" and ds.__getitems__([0, 14]) == [b"0-0", b"2-4"]
    assert counted == {"storages": 1, "clients": 1}
    storage = ds._table.storage
    assert isinstance(storage, FsspecStorage) and storage.max_concurrency == 7  # set when made
    assert all(s.index_storage is storage and s.data_storage is storage
               for s in ds._table.shards)
    again = ofindex.open(root + "/", storage_options=opts, max_concurrency=7)
    assert again[3] == b"0-3"
    assert counted == {"storages": 2, "clients": 1}  # a new open: the process's one client


def test_index_dir_on_the_same_protocol_shares_the_storage(tmp_path):
    storages = Storages(mmap=True)
    data, _ = storages.for_url(str(tmp_path / "a"))
    index, _ = storages.for_url("file://" + str(tmp_path / "idx"))
    assert data is index and data.can_mmap and data.is_local
