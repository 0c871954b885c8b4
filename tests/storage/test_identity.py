"""A data file's identity travels with its content (docs/format.md, "Identity of a data file").

The matrix of issue #43: a dataset indexed locally, or on S3, then copied with and without
its times, uploaded to S3 and served by nginx, then either left as it is or with one shard
replaced by another file of the same size whose records have the same lengths (so the old
index fits it byte for byte): every copy reads as the original, every replacement is refused
with ``StaleIndexError``, through every read path, compiled and pure Python, mmap on and off.
"""

from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pytest

import ofindex
from ofindex.formats.sidecar_header import decode_header
from ofindex.storage import FileStamp, LocalStorage
from ofindex.storage.identity import read_content_digest
from ofindex.storage.stamp import Verdict, content_digest, content_regions
from tests.kit import servers
from tests.kit.helpers import (
    index_dir_of,
    manifest_of,
    read_bytes,
    ref_tfrecord,
    sidecar_of,
    write_raw,
)

SHARDS = 3
PER_SHARD = 150
LENGTHS = [60 + (7 * i) % 90 for i in range(PER_SHARD)]  # about 16 KiB a shard: > 12 KiB


def shard_records(shard: int, variant: int) -> list[bytes]:
    """The records of one shard; another ``variant`` has records of the same lengths (the
    same file size and offsets) but other bytes."""
    rng = np.random.default_rng(1000 * variant + shard)
    return [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in LENGTHS]


def write_data(directory: str, variant: int = 0) -> list[bytes]:
    os.makedirs(directory, exist_ok=True)
    records: list[bytes] = []
    for k in range(SHARDS):
        chunk = shard_records(k, variant)
        write_raw(os.path.join(directory, f"part-{k}.tfrecord"), ref_tfrecord(chunk))
        records += chunk
    return records


def copy_without_times(source: str, target: str) -> None:
    """``cp -r`` without ``-p``: new modification times (pushed a second later, so that no
    file system's clock granularity can give a copy its original's time)."""
    for src_dir, dst_dir in ((source, target), (index_dir_of(source), index_dir_of(target))):
        shutil.copytree(src_dir, dst_dir, copy_function=shutil.copyfile)
        for name in os.listdir(dst_dir):
            path = os.path.join(dst_dir, name)
            later = os.stat(os.path.join(src_dir, name)).st_mtime_ns + 10**9
            os.utime(path, ns=(later, later))


def copy_with_times(source: str, target: str) -> None:
    """``cp -rp``."""
    shutil.copytree(source, target)
    shutil.copytree(index_dir_of(source), index_dir_of(target))


def replacement() -> bytes:
    """Shard 1's same-size replacement."""
    return ref_tfrecord(shard_records(1, variant=1))


def replace_shard_1(root: str) -> None:
    """Replace shard 1 of the dataset in ``root`` with another file of the same size, as a
    later write would: its modification time 2 s past the original's. (Within one tick of
    the file system's clock, or, served by nginx whose ETag is the modification time in
    seconds and the size, within the same second, a same-size file would keep its
    fingerprint: the fast path's blind spot, docs/format.md.)"""
    path = os.path.join(root, "part-1.tfrecord")
    later = os.stat(path).st_mtime_ns + 2 * 10**9
    write_raw(path, replacement())
    os.utime(path, ns=(later, later))


def read_everything(ds, expected: list[bytes]) -> None:
    """Every read path gives the expected records."""
    n = len(expected)
    assert len(ds) == n
    assert ds[0] == expected[0] and ds[n - 1] == expected[n - 1]
    assert ds[PER_SHARD + 5] == expected[PER_SHARD + 5]
    assert ds[PER_SHARD - 3 : PER_SHARD + 4] == expected[PER_SHARD - 3 : PER_SHARD + 4]
    picks = [n - 2, 3, PER_SHARD + 77, 2 * PER_SHARD + 1, PER_SHARD + 77]
    assert ds.__getitems__(picks) == [expected[i] for i in picks]
    assert list(ds.iter_records()) == expected
    assert [r for batch in ds.iter_batches(64) for r in batch] == expected


#: Reads that touch shard 1 (records PER_SHARD .. 2 PER_SHARD - 1), each in a new dataset.
TOUCHING_SHARD_1 = {
    "single": lambda ds: ds[PER_SHARD + 5],
    "slice": lambda ds: ds[PER_SHARD - 2 : PER_SHARD + 2],
    "getitems": lambda ds: ds.__getitems__([1, PER_SHARD + 9]),
    "iter_records": lambda ds: list(ds.iter_records()),
    "iter_batches": lambda ds: list(ds.iter_batches(32)),
}


def assert_refused(open_it) -> None:
    """Opening the dataset, or else every read path touching shard 1, raises
    ``StaleIndexError`` naming the replaced file; no record of it is ever returned, not even
    by the reads after a refusal (a remote sidecar fetched whole was kept by the round that
    refused its data file, and the next read took it as checked)."""
    stale = r"part-1\.tfrecord"
    for first in TOUCHING_SHARD_1.values():
        try:
            ds = open_it()
        except ofindex.StaleIndexError as exc:
            assert re.search(stale, str(exc))
            continue
        with ds:
            for read in [first, first, *TOUCHING_SHARD_1.values()]:
                with pytest.raises(ofindex.StaleIndexError, match=stale):
                    read(ds)


# -- the digest itself ---------------------------------------------------------------------

def test_the_regions_are_the_head_the_middle_and_the_tail():
    assert content_regions(0) == [(0, 0)]
    assert content_regions(12288) == [(0, 12288)]
    assert content_regions(12289) == [(0, 4096), (4096, 8192), (8193, 12289)]
    assert content_regions(10**6) == [(0, 4096), (497952, 502048), (995904, 10**6)]


def test_the_digest_is_the_crc32c_of_the_size_and_the_regions(tmp_path):
    """Written out by hand from the specification (docs/format.md), not by the code."""
    import crc32c

    data = bytes(range(256)) * 100  # 25,600 bytes
    path = write_raw(str(tmp_path / "f"), data)
    expected = crc32c.crc32c((25600).to_bytes(8, "little") + data[:4096]
                             + data[10752:14848] + data[21504:])
    assert read_content_digest(LocalStorage(), path, len(data)) == expected
    assert content_digest(len(data), [data[:4096], data[10752:14848], data[21504:]]) == expected


def test_what_the_stamps_say():
    indexed = FileStamp(10, "mtime_ns:1", content=7)
    assert indexed.judge(FileStamp(10, "mtime_ns:1"))[0] is Verdict.SAME
    assert indexed.judge(FileStamp(11, "mtime_ns:1"))[0] is Verdict.CHANGED
    assert indexed.judge(FileStamp(10, "mtime_ns:2"))[0] is Verdict.CONTENT
    assert indexed.judge(FileStamp(10, 'etag:"x"'))[0] is Verdict.CONTENT
    old = FileStamp(10, "mtime_ns:1")  # an index of ofindex 0.2: no digest
    assert old.judge(FileStamp(10, "mtime_ns:2"))[0] is Verdict.CHANGED
    assert old.judge(FileStamp(10, "etag:x"))[0] is Verdict.SAME


def test_sidecars_store_the_digest_of_their_data_file(tmp_path):
    d = str(tmp_path / "ds")
    write_data(d)
    ofindex.build_index(d)
    path = os.path.join(d, "part-0.tfrecord")
    header = decode_header(read_bytes(sidecar_of(path))[:512], path="x")
    assert header.stamp.content == read_content_digest(LocalStorage(), path,
                                                       os.path.getsize(path))
    raw = read_bytes(sidecar_of(path))
    assert raw[49] == 1  # the digest scheme byte


# -- the matrix, local ---------------------------------------------------------------------

@pytest.fixture
def built(tmp_path):
    d = str(tmp_path / "src" / "ds")
    expected = write_data(d)
    ofindex.build_index(d)
    return d, expected


@pytest.mark.parametrize("copy", [copy_with_times, copy_without_times])
@pytest.mark.parametrize("mmap", [True, False])
def test_a_local_copy_reads_as_the_original(built, tmp_path, copy, mmap, impl):
    d, expected = built
    target = str(tmp_path / "copy" / "ds")
    os.makedirs(os.path.dirname(target))
    copy(d, target)
    with ofindex.open(target, mmap=mmap) as ds:
        read_everything(ds, expected)
    with ofindex.open(os.path.join(target, "part-*.tfrecord"), mmap=mmap) as ds:  # no manifest
        read_everything(ds, expected)


@pytest.mark.parametrize("copy", [None, copy_with_times, copy_without_times])
@pytest.mark.parametrize("mmap", [True, False])
def test_a_same_size_replacement_is_refused_locally(built, tmp_path, copy, mmap, impl):
    d, _ = built
    target = d
    if copy is not None:
        target = str(tmp_path / "copy" / "ds")
        os.makedirs(os.path.dirname(target))
        copy(d, target)
    path = os.path.join(target, "part-1.tfrecord")
    assert len(replacement()) == os.path.getsize(path)
    replace_shard_1(target)
    assert_refused(lambda: ofindex.open(target, mmap=mmap))
    assert_refused(lambda: ofindex.open(os.path.join(target, "part-*.tfrecord"), mmap=mmap))


def test_a_copy_without_times_is_restamped_by_a_build_not_rescanned(built, tmp_path):
    d, expected = built
    target = str(tmp_path / "copy" / "ds")
    os.makedirs(os.path.dirname(target))
    copy_without_times(d, target)
    results = ofindex.build_index(target)
    assert all(r.skipped for r in results)  # the content decided: nothing indexed again
    for k in range(SHARDS):
        path = os.path.join(target, f"part-{k}.tfrecord")
        header = decode_header(read_bytes(sidecar_of(path))[:512], path="x")
        assert header.stamp.fingerprint == f"mtime_ns:{os.stat(path).st_mtime_ns}"
    with open(manifest_of(target)) as f:
        fingerprints = json.load(f)["shards"]["fingerprint"]
    assert fingerprints == [f"mtime_ns:{os.stat(os.path.join(target, n)).st_mtime_ns}"
                            for n in sorted(os.listdir(target))]
    with ofindex.open(target) as ds:
        read_everything(ds, expected)


def test_a_build_refuses_to_skip_a_same_size_replacement(built):
    d, _ = built
    replace_shard_1(d)
    results = ofindex.build_index(d)
    assert [r.skipped for r in results] == [True, False, True]
    with ofindex.open(d) as ds:
        assert ds[PER_SHARD] == shard_records(1, variant=1)[0]


def test_an_index_of_ofindex_0_2_gets_its_digest_from_a_build(built):
    """Old sidecars (scheme 0) with the same fingerprint: the build adds the digest to their
    headers (no rescan); with another fingerprint they are indexed again (nothing tells what
    their content was)."""
    d, _ = built
    _strip_digests(d)
    for k in range(SHARDS):
        raw = read_bytes(sidecar_of(os.path.join(d, f"part-{k}.tfrecord")))
        assert decode_header(raw[:512], path="x").stamp.content is None
    later = os.stat(os.path.join(d, "part-2.tfrecord")).st_mtime_ns + 10**9
    os.utime(os.path.join(d, "part-2.tfrecord"), ns=(later, later))
    results = ofindex.build_index(d)
    assert [r.skipped for r in results] == [True, True, False]
    for k in range(SHARDS):
        path = os.path.join(d, f"part-{k}.tfrecord")
        header = decode_header(read_bytes(sidecar_of(path))[:512], path="x")
        assert header.stamp.content == read_content_digest(LocalStorage(), path,
                                                           os.path.getsize(path))


def _strip_digests(d: str) -> None:
    """Make the sidecars of ``d`` as ofindex 0.2 wrote them: no content digest."""
    import struct

    import crc32c

    for k in range(SHARDS):
        path = sidecar_of(os.path.join(d, f"part-{k}.tfrecord"))
        raw = bytearray(read_bytes(path))
        raw[49], raw[52:56], raw[44:48] = 0, bytes(4), bytes(4)
        struct.pack_into("<I", raw, 44, crc32c.crc32c(bytes(raw[:512])))
        write_raw(path, bytes(raw))


def test_an_old_index_read_from_another_storage_warns_that_it_checks_sizes_only(
        built, nginx_server):
    import uuid

    from ofindex.errors import UnverifiedIndexWarning

    d, expected = built
    _strip_digests(d)
    url = _serve(nginx_server, d, uuid.uuid4().hex[:8])
    with pytest.warns(UnverifiedIndexWarning, match="by its size only.*ofindex build"), \
            ofindex.open(url) as ds:
        assert ds[PER_SHARD + 1] == expected[PER_SHARD + 1]


# -- the matrix, remote --------------------------------------------------------------------

def _s3(moto_server):
    import s3fs

    opts = servers.s3_options(moto_server.url)
    return s3fs.S3FileSystem(skip_instance_cache=True, **opts), opts


def _upload(fs, local: str, url: str, *, index: bool = True) -> None:
    for source, target in ((local, url), (index_dir_of(local), url + ".ofindex")):
        if source != local and not index:
            continue
        for name in sorted(os.listdir(source)):
            fs.pipe_file(target.split("://", 1)[1] + "/" + name,
                         read_bytes(os.path.join(source, name)))


def _serve(nginx_server, local: str, name: str) -> str:
    root = os.path.join(nginx_server.root, name)
    shutil.copytree(local, root)
    shutil.copytree(index_dir_of(local), index_dir_of(root))
    return f"{nginx_server.url}/{name}"


@pytest.mark.parametrize("replaced", [False, True])
def test_a_local_index_uploaded_to_s3(built, moto_server, replaced, impl):
    import uuid

    d, expected = built
    fs, opts = _s3(moto_server)
    url = f"s3://{servers.BUCKET}/{uuid.uuid4().hex[:8]}"
    _upload(fs, d, url)
    if replaced:
        fs.pipe_file(url.split("://", 1)[1] + "/part-1.tfrecord", replacement())
        assert_refused(lambda: ofindex.open(url, storage_options=opts))
        return
    with ofindex.open(url, storage_options=opts) as ds:
        read_everything(ds, expected)


@pytest.mark.parametrize("replaced", [False, True])
@pytest.mark.parametrize("cached", [False, True])
def test_a_local_index_served_by_nginx(built, nginx_server, tmp_path, replaced, cached, impl):
    import uuid

    d, expected = built
    name = uuid.uuid4().hex[:8]
    url = _serve(nginx_server, d, name)
    extra = ({"cache_dir": str(tmp_path / "cache"), "data_cache_bytes": 1 << 26} if cached
             else {})
    if replaced:
        replace_shard_1(os.path.join(nginx_server.root, name))
        assert_refused(lambda: ofindex.open(url, **extra))
        return
    with ofindex.open(url, **extra) as ds:
        read_everything(ds, expected)


def test_a_copy_checked_by_content_is_remembered_on_the_machine(built, nginx_server, tmp_path):
    """With ``cache_dir``, the first open of a copy reads each data file's regions once; a
    later open (another process or run) finds the check in the node cache: a stat each, no
    data read before its records are; a replaced file is still refused."""
    import time
    import uuid

    d, expected = built
    name = uuid.uuid4().hex[:8]
    url = _serve(nginx_server, d, name)
    cache = {"cache_dir": str(tmp_path / "cache"), "data_cache_bytes": 1 << 26}

    def data_gets(since: int) -> list[tuple[str, int]]:
        time.sleep(0.2)  # nginx writes its log line after the response
        with open(nginx_server.log, "rb") as f:
            f.seek(since)
            text = f.read().decode()
        return [(m[1], int(m[2])) for m in re.finditer(r'"GET (\S+) [^"]*" \d{3} (\d+)', text)
                if f"/{name}/part-" in m[1]]

    mark = os.path.getsize(nginx_server.log)
    with ofindex.open(url, **cache) as ds:
        assert ds[PER_SHARD + 1] == expected[PER_SHARD + 1]
        read_everything(ds, expected)
    first = data_gets(mark)
    mark = os.path.getsize(nginx_server.log)
    with ofindex.open(url, **cache) as ds:
        read_everything(ds, expected)  # every block cached: no data request at all
    assert data_gets(mark) == [] and len(first) >= SHARDS
    replace_shard_1(os.path.join(nginx_server.root, name))
    assert_refused(lambda: ofindex.open(url, **cache))


@pytest.fixture
def built_on_s3(built, moto_server):
    """The data uploaded without its index, then indexed on S3 (ETag stamps)."""
    import uuid

    d, expected = built
    fs, opts = _s3(moto_server)
    url = f"s3://{servers.BUCKET}/{uuid.uuid4().hex[:8]}"
    _upload(fs, d, url, index=False)
    ofindex.build_index(url, storage_options=opts)
    return url, fs, opts, expected


def _download(fs, url: str, local: str) -> None:
    """What ``aws s3 cp -r`` does: new files, new times."""
    for source, target in ((url, local), (url + ".ofindex", index_dir_of(local))):
        os.makedirs(target, exist_ok=True)
        for path in fs.ls(source.split("://", 1)[1]):
            write_raw(os.path.join(target, path.rsplit("/", 1)[-1]), fs.cat_file(path))


@pytest.mark.parametrize("replaced", [False, True])
def test_an_s3_index_read_in_place(built_on_s3, replaced):
    url, fs, opts, expected = built_on_s3
    header = decode_header(fs.cat_file(url.split("://", 1)[1] + ".ofindex/part-0.tfrecord.ofidx",
                                       start=0, end=512), path="x")
    assert header.stamp.kind == "etag" and header.stamp.content is not None
    if replaced:
        fs.pipe_file(url.split("://", 1)[1] + "/part-1.tfrecord", replacement())
        assert_refused(lambda: ofindex.open(url, storage_options=opts))
        return
    with ofindex.open(url, storage_options=opts) as ds:
        read_everything(ds, expected)


@pytest.mark.parametrize("replaced", [False, True])
@pytest.mark.parametrize("mmap", [True, False])
def test_an_s3_index_downloaded(built_on_s3, tmp_path, replaced, mmap, impl):
    url, fs, _, expected = built_on_s3
    local = str(tmp_path / "down" / "ds")
    _download(fs, url, local)
    if replaced:
        replace_shard_1(local)
        assert_refused(lambda: ofindex.open(local, mmap=mmap))
        return
    with ofindex.open(local, mmap=mmap) as ds:
        read_everything(ds, expected)


@pytest.mark.parametrize("replaced", [False, True])
def test_an_s3_index_served_by_nginx(built_on_s3, nginx_server, tmp_path, replaced):
    import uuid

    url, fs, _, expected = built_on_s3
    local = str(tmp_path / "down" / "ds")
    _download(fs, url, local)
    name = uuid.uuid4().hex[:8]
    served = _serve(nginx_server, local, name)
    if replaced:
        replace_shard_1(os.path.join(nginx_server.root, name))
        assert_refused(lambda: ofindex.open(served))
        return
    with ofindex.open(served) as ds:
        read_everything(ds, expected)


# -- the dataset's identity ------------------------------------------------------------------

def test_a_dataset_s_identity_is_its_content_wherever_and_however_it_is_opened(
        built, tmp_path, nginx_server):
    import uuid

    d, _ = built
    with ofindex.open(d) as ds:
        identity = ds.identity
    assert len(identity) == 16 and int(identity, 16) >= 0
    with ofindex.open(os.path.join(d, "part-*.tfrecord")) as ds:  # headers, no manifest
        assert ds.identity == identity
    copy = str(tmp_path / "copy" / "ds")
    os.makedirs(os.path.dirname(copy))
    copy_without_times(d, copy)
    with ofindex.open(copy) as ds:
        assert ds.identity == identity
    url = _serve(nginx_server, d, uuid.uuid4().hex[:8])
    with ofindex.open(url) as ds:
        assert ds.identity == identity
    compact = str(tmp_path / "compact" / "ds")
    write_data(compact)
    ofindex.build_index(compact, manifest=os.path.join(index_dir_of(compact),
                                                       "ofindex-manifest.bin"))
    with ofindex.open(compact) as ds:
        assert ds.identity == identity
    other = str(tmp_path / "other" / "ds")
    write_data(other, variant=1)  # the same lengths, sizes and offsets: other bytes
    ofindex.build_index(other)
    with ofindex.open(other) as ds:
        assert len(ds) == SHARDS * PER_SHARD and ds.identity != identity


def test_info_prints_the_identity(built):
    import subprocess
    import sys

    d, _ = built
    with ofindex.open(d) as ds:
        identity = ds.identity
    run = subprocess.run([sys.executable, "-m", "ofindex", "info", d], capture_output=True,
                         text=True, check=True)
    assert f"identity: {identity}" in run.stdout
    run = subprocess.run([sys.executable, "-m", "ofindex", "info", d, "--json"],
                         capture_output=True, text=True, check=True)
    assert json.loads(run.stdout)["identity"] == identity


# -- states carry the dataset's identity ----------------------------------------------------

def test_a_state_saved_on_another_dataset_of_the_same_length_is_refused(built, tmp_path):
    from ofindex.errors import StateError
    from ofindex.shuffle import BatchSampler, GlobalShuffleSampler, MixtureSampler

    d, _ = built
    other = str(tmp_path / "other" / "ds")
    write_data(other, variant=1)  # the same length, sizes and offsets: other records
    ofindex.build_index(other)
    copy = str(tmp_path / "copy" / "ds")
    os.makedirs(os.path.dirname(copy))
    copy_without_times(d, copy)
    with ofindex.open(d) as ds, ofindex.open(other) as ds2, ofindex.open(copy) as ds3:
        sampler = GlobalShuffleSampler(ds, seed=3)
        state = json.loads(json.dumps(BatchSampler(sampler, 8).state_after(
            BatchSampler(sampler, 8).pass_mark(), 5, False)))
        assert state["dataset"] == ds.identity
        with pytest.raises(StateError, match="another dataset"):
            BatchSampler(GlobalShuffleSampler(ds2, seed=3), 8).load_state_dict(state)
        BatchSampler(GlobalShuffleSampler(ds3, seed=3), 8).load_state_dict(state)  # a copy
        # a bare record count names no dataset: nothing to compare
        BatchSampler(GlobalShuffleSampler(len(ds), seed=3), 8).load_state_dict(state)
        old = {k: v for k, v in state.items() if k != "dataset"}  # saved by ofindex 0.2
        BatchSampler(GlobalShuffleSampler(ds2, seed=3), 8).load_state_dict(old)
        bad = {**state, "dataset": 12}
        with pytest.raises(StateError, match="'dataset' is 12"):
            BatchSampler(GlobalShuffleSampler(ds, seed=3), 8).load_state_dict(bad)

        mix = MixtureSampler([ds, ds2], [1, 1], 8, seed=1)
        saved = json.loads(json.dumps(mix.state_dict()))
        assert saved["datasets"] == [ds.identity, ds2.identity]
        with pytest.raises(StateError, match="another dataset"):
            MixtureSampler([ds2, ds], [1, 1], 8, seed=1).load_state_dict(saved)
        MixtureSampler([ds3, ds2], [2, 1], 8, seed=1).load_state_dict(saved)
