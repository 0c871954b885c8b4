"""What a new user meets first: building from a plain script, the REPL or `python -c` (no
`__main__` guard), files that teammates can read, deterministic closing, and the generator's
OFRecord data."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import ofindex
from tests.kit import paths
from tests.kit.helpers import manifest_of, ref_ofrecord, ref_tfrecord, sidecar_of, write_raw

ROOT = paths.ROOT


@pytest.fixture
def shards(tmp_path):
    d = tmp_path / "data"
    for k in range(4):
        write_raw(str(d / f"part-{k}"), ref_tfrecord([f"{k}-{i}".encode() for i in range(50)]))
    return str(d)


BUILD = "import ofindex; r = ofindex.build_index({d!r}); print(sum(x.records for x in r))"


@pytest.mark.parametrize("how", ["script", "-c", "stdin"])
def test_build_needs_no_main_guard(shards, tmp_path, how):
    code = BUILD.format(d=shards)
    if how == "script":
        script = tmp_path / "first.py"
        script.write_text(code + "\n")
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=120)
    elif how == "-c":
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120)
    else:  # what a REPL or a notebook cell runs: code without a file
        r = subprocess.run([sys.executable, "-"], input=code + "\n", capture_output=True,
                           text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "200" and r.stderr == ""


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_files_we_create_honour_the_umask(shards, tmp_path, umask):
    old = os.umask(umask)
    try:
        ofindex.build_index(shards)
        from ofindex.cli import main

        assert main(["export-index", os.path.join(shards, "part-0"), "-o",
                     str(tmp_path / "p0.idx")]) == 0
        with ofindex.Writer(str(tmp_path / "w.tfrecord")) as w:
            w.write(b"x")
    finally:
        os.umask(old)
    want = 0o666 & ~umask
    made = [sidecar_of(os.path.join(shards, "part-0")), manifest_of(shards),
            str(tmp_path / "p0.idx"), str(tmp_path / "w.tfrecord"),
            sidecar_of(str(tmp_path / "w.tfrecord"))]
    for path in made:
        assert os.stat(path).st_mode & 0o777 == want, (path, oct(os.stat(path).st_mode))


def test_close_and_context_manager_release_handles(shards):
    ofindex.build_index(shards)
    fd_dir = f"/proc/{os.getpid()}/fd"
    before = len(os.listdir(fd_dir))
    with ofindex.open(shards, mmap=False) as ds:
        assert ds[0] == b"0-0" and ds[199] == b"3-49"
        assert len(os.listdir(fd_dir)) > before  # data files held open while in use
    assert len(os.listdir(fd_dir)) == before
    assert ds[150] == b"3-0"  # still usable: a later read reopens what it needs
    ds.close()
    assert len(os.listdir(fd_dir)) == before


def test_generated_ofrecord_data_holds_ofrecord_messages(tmp_path):
    out = str(tmp_path / "of")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "generate.py"), out,
                        "--records", "20", "--shards", "2", "--format", "ofrecord"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    from ofindex.decode import decode_ofrecord
    from ofindex.proto import ofrecord_pb2

    ds = ofindex.open(out)
    assert ds.format is ofindex.RecordFormat.OFRECORD and len(ds) == 20
    msg = ofrecord_pb2.OFRecord.FromString(ds[3])  # protobuf itself parses it as OFRecord
    assert len(msg.feature["images"].float_list.value) == 784
    assert len(msg.feature["labels"].int64_list.value) == 1
    got = decode_ofrecord(ds[3])
    assert got["images"].shape == (784,) and got["labels"].dtype.name == "int64"
    r = subprocess.run([sys.executable, "-m", "ofindex", "get", out, "3", "--decode"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "images" in r.stdout and "labels" in r.stdout


def test_ofrecord_reference_framing_still_reads(tmp_path):
    p = write_raw(str(tmp_path / "part-00000"), ref_ofrecord([b"a", b"", b"ccc"]))
    ofindex.build_index(p)
    with ofindex.open(p) as ds:
        assert list(ds) == [b"a", b"", b"ccc"]
