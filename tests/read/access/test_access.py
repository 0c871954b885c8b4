"""How each shard is read (ofindex.read.access): one access per kind, chosen once per shard by
one function, and asked by every read path (``ds[i]``, ``__getitems__``, slices,
``iter_records``, ``iter_batches``) instead of each path deciding again.

Expected records are the bytes written (never another ofindex read).
"""

from __future__ import annotations

import dataclasses
import gzip
import pickle
from collections import Counter

import numpy as np
import pytest

import ofindex
from ofindex import _accel
from ofindex.read import access as access_module
from ofindex.read.access import (
    CachedAccess,
    DescriptorAccess,
    InflatingAccess,
    MappedAccess,
    RangedAccess,
    ShardAccess,
    choose_access,
)
from tests.kit.helpers import ref_tfrecord, write_raw

RECORDS = [f"record {i} ".encode() * (1 + i % 7) for i in range(600)]


class _Storage:
    """What the decision looks at of a storage."""

    def __init__(self, is_local: bool, can_mmap: bool) -> None:
        self.is_local, self.can_mmap = is_local, can_mmap


def test_the_decision_follows_its_table():
    native, cache = object(), object()
    local, unmapped, remote = _Storage(True, True), _Storage(True, False), _Storage(False, False)

    def chosen(storage, compressed=False, data_cache=None, compiled=native):
        return choose_access(storage, compressed=compressed, data_cache=data_cache,
                             native=compiled)

    assert chosen(local) == MappedAccess(native, DescriptorAccess(native))
    assert chosen(unmapped) == DescriptorAccess(native)
    assert chosen(local, compiled=None) == DescriptorAccess(None)  # Python cannot guard maps
    assert chosen(remote) == RangedAccess(native)
    assert chosen(remote, data_cache=cache) == CachedAccess(native, cache)
    assert chosen(local, data_cache=cache) == MappedAccess(native, DescriptorAccess(native))
    for storage in (local, unmapped, remote):
        assert chosen(storage, compressed=True, data_cache=cache) == InflatingAccess(native)


@pytest.fixture
def mixed(tmp_path):
    """Three shards: gzip, plain, gzip (one framing), indexed."""
    parts = [RECORDS[:250], RECORDS[250:400], RECORDS[400:]]
    write_raw(str(tmp_path / "part-0"), gzip.compress(ref_tfrecord(parts[0])))
    write_raw(str(tmp_path / "part-1"), ref_tfrecord(parts[1]))
    write_raw(str(tmp_path / "part-2"), gzip.compress(ref_tfrecord(parts[2])))
    ofindex.build_index(str(tmp_path), seek_spacing=4096)
    return str(tmp_path)


def _read_every_way(ds) -> list[list[bytes]]:
    idx = np.random.default_rng(1).permutation(len(ds))[:300]
    return [[ds[int(i)] for i in idx], ds[idx], ds.__getitems__(idx.tolist()), ds[100:520],
            list(ds.iter_records(5)), [r for b in ds.iter_batches(64) for r in b],
            [bytes(r) for b in ds.iter_batches(70, as_buffer=True) for r in b]]


def _expected_every_way(n: int) -> list[list[bytes]]:
    idx = np.random.default_rng(1).permutation(n)[:300]
    picked = [RECORDS[i] for i in idx]
    return [picked, picked, picked, RECORDS[100:520], RECORDS[5:], RECORDS, RECORDS]


@pytest.mark.parametrize("mmap", [True, False])
def test_each_shard_is_bound_once_and_every_read_path_asks_its_access(mixed, impl, mmap,
                                                                      monkeypatch):
    calls: Counter[str] = Counter()
    chosen = choose_access

    def counted(storage, **kwargs):
        calls["chosen"] += 1
        access = chosen(storage, **kwargs)
        return _recording(access, calls)

    monkeypatch.setattr(access_module, "choose_access", counted)
    ds = ofindex.open(mixed, mmap=mmap)
    assert _read_every_way(ds) == _expected_every_way(len(RECORDS))
    assert _read_every_way(ds) == _expected_every_way(len(RECORDS))  # bound: not chosen again
    assert calls["chosen"] == 3  # once per shard (their headers say which are compressed)
    plain = "MappedAccess" if (mmap and impl == "compiled") else "DescriptorAccess"
    for kind in ("InflatingAccess", plain):
        for way in ("read_record", "read_batch", "blocks"):
            assert calls[f"{kind}.{way}"] > 0, (kind, way)
    kinds = [type(ds._accesses.of(k)).__name__ for k in range(3)]
    assert kinds == [f"Recording{k}" for k in ("InflatingAccess", plain, "InflatingAccess")]


def _recording(access: ShardAccess, calls: Counter[str]) -> ShardAccess:
    """``access`` as an instance of a subclass that counts the calls of each read method."""
    kind = type(access)
    name = kind.__name__

    def wrap(method):
        def counted(self, *args, **kwargs):
            calls[f"{name}.{method.__name__}"] += 1
            return method(self, *args, **kwargs)
        counted.__name__ = method.__name__
        return counted

    recording = type(f"Recording{name}", (kind,), {
        way: wrap(getattr(kind, way)) for way in ("read_record", "read_batch", "blocks")})
    recording = dataclasses.dataclass(frozen=True)(recording)
    return recording(**{f.name: getattr(access, f.name) for f in dataclasses.fields(access)})


def test_a_dataset_of_one_kind_of_shard_chooses_once_when_it_is_made(tmp_path, monkeypatch):
    for k in range(4):
        write_raw(str(tmp_path / f"part-{k}"), ref_tfrecord(RECORDS[k * 150:(k + 1) * 150]))
    ofindex.build_index(str(tmp_path))
    calls = []
    chosen = choose_access
    monkeypatch.setattr(access_module, "choose_access",
                        lambda storage, **kwargs: calls.append(1) or chosen(storage, **kwargs))
    ds = ofindex.open(str(tmp_path))
    assert calls == [1]  # one storage, no shard compressed: one access for every shard
    assert _read_every_way(ds) == _expected_every_way(len(RECORDS))
    assert calls == [1]
    assert isinstance(ds._accesses.uniform, MappedAccess if _accel.native else DescriptorAccess)
    copy = pickle.loads(pickle.dumps(ds))  # a new process binds its shards afresh
    assert calls == [1, 1] and copy[7] == RECORDS[7]


def test_a_remote_shard_s_access_reads_it_every_way(mixed, remote_backend, tmp_path):
    url = remote_backend.prefix()
    remote_backend.upload(mixed, url)
    ds = ofindex.open(url, storage_options=remote_backend.storage_options)
    kinds = [type(ds._accesses.of(k)) for k in range(3)]
    assert kinds == [InflatingAccess, RangedAccess, InflatingAccess]
    assert _read_every_way(ds) == _expected_every_way(len(RECORDS))
