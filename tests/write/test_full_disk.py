"""Writing on a full disk (a real tmpfs of a few hundred KiB, mounted for the test): every
writer raises an OfindexError that is an OSError with errno ENOSPC, naming the file and the
next step, and leaves nothing behind: no temporary file, and a previous file of that name and
its index as they were."""

from __future__ import annotations

import errno
import os
import subprocess

import numpy as np
import pytest

import ofindex
from ofindex.errors import StorageError
from ofindex.write import ShardedWriter

RECORD = bytes(range(256)) * 16  # 4 KiB


@pytest.fixture
def small_disk(tmp_path):
    """A file system of 256 KiB (the tests run as root, as CI does: they may mount one)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", str(mount)],
                   check=True)
    try:
        yield mount
    finally:
        # lazily: a file a failed test left open must not keep the mount behind
        subprocess.run(["umount", "--lazy", str(mount)], check=True)


def _full_disk_error(raised, path):
    error = raised.value
    assert isinstance(error, StorageError) and isinstance(error, OSError)
    assert error.errno == errno.ENOSPC
    message = str(error)
    assert str(path) in message and "no space left" in message and "free some space" in message
    return message


def test_a_writer_on_a_full_disk_keeps_nothing_and_the_old_file(small_disk, tmp_path):
    path = small_disk / "train.tfrecord"
    with ofindex.Writer(str(path), index_dir=str(tmp_path / "idx")) as writer:
        writer.write_many([b"old 0", b"old 1"])
    with pytest.raises(StorageError) as raised, ofindex.Writer(
            str(path), index_dir=str(tmp_path / "idx")) as writer:
        for _ in range(200):  # 800 KiB for a 256 KiB disk
            writer.write(RECORD)
    assert "write it again" in _full_disk_error(raised, path)
    assert sorted(os.listdir(small_disk)) == ["train.tfrecord"]
    assert ofindex.open(str(path), index_dir=str(tmp_path / "idx"))[:] == [b"old 0", b"old 1"]


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_columns_on_a_full_disk(small_disk, compression):
    path = small_disk / "x.tfrecord"
    writer = ofindex.Writer(str(path), compression=compression, index_dir=str(small_disk))
    rng = np.random.default_rng(0)
    block = rng.integers(0, 256, 400_000, dtype=np.uint8).tobytes()  # incompressible
    sizes = np.full(100, 4_000, np.int64)
    framed = bytearray()
    for k in range(100):  # TFRecord framing by hand: the CRCs are not checked here
        payload = block[k * 3_984:(k + 1) * 3_984]
        framed += len(payload).to_bytes(8, "little") + b"\0" * 4 + payload + b"\0" * 4
    with pytest.raises(StorageError) as raised:
        for _ in range(3):
            writer.write_framed(bytes(framed), sizes, np.zeros(100, np.uint32))
        writer.close()
    _full_disk_error(raised, path)
    assert os.listdir(small_disk) == []


def test_a_sidecar_that_does_not_fit_keeps_the_old_file_and_its_index(small_disk, tmp_path):
    # the data fits, its sidecar does not: nothing is renamed into place
    data = tmp_path / "data"
    data.mkdir()
    path = data / "train.tfrecord"
    with ofindex.Writer(str(path), index_dir=str(small_disk)) as writer:
        writer.write(b"old")
    with open(small_disk / "filler", "wb") as filler:  # fill the index's disk
        with pytest.raises(OSError) as full:
            filler.write(b"\0" * (1 << 20))
            filler.flush()
        assert full.value.errno == errno.ENOSPC
    with pytest.raises(StorageError) as raised, ofindex.Writer(
            str(path), index_dir=str(small_disk)) as writer:
        writer.write_many([b"new"] * 5_000)
    error = raised.value
    assert error.errno == errno.ENOSPC and "write it again" in str(error)
    assert os.listdir(data) == ["train.tfrecord"]
    assert sorted(os.listdir(small_disk)) == ["filler", "train.tfrecord.ofidx"]
    assert ofindex.open(str(path), index_dir=str(small_disk))[:] == [b"old"]


def test_a_sharded_writer_on_a_full_disk_leaves_nothing(small_disk):
    out = small_disk / "out"
    with pytest.raises(StorageError) as raised, ShardedWriter(out, shard_records=20) as writer:
        writer.write_many([RECORD] * 200)
    assert raised.value.errno == errno.ENOSPC and "no space left" in str(raised.value)
    assert os.listdir(out) == [] and sorted(os.listdir(small_disk)) in (["out"],
                                                                 ["out", "out.ofindex"])
    if os.path.isdir(small_disk / "out.ofindex"):
        assert os.listdir(small_disk / "out.ofindex") == []


def test_a_build_whose_index_does_not_fit_says_so(small_disk, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with ofindex.Writer(str(data / "a.tfrecord"), index=False) as writer:
        writer.write_many([b"r"] * 100_000)  # an 800 KiB sidecar
    with pytest.raises(StorageError) as raised:
        ofindex.build_index(str(data), index_dir=str(small_disk))
    error = raised.value
    assert error.errno == errno.ENOSPC and "index_dir=" in str(error)
    assert os.listdir(small_disk) == []
