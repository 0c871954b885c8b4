"""Special files on the command line (issue #43): ``export-index -o /dev/full`` (as root)
replaced the device node with a regular file and ``-o /dev/stdout`` replaced the link; now a
device, a FIFO, ``/dev/stdout`` and links to them are written in place (``-`` is stdout), and
a write error there is one line and exit 1. ``import-index`` from ``/dev/zero`` or an endless
FIFO exhausted memory: a text index is read up to a bound set by its data file. ``build
--ray`` / ``--dask-scheduler`` to an address where nothing listens hung or took 30 s: refused
at once, naming the address.

The devices are reached through links made in a temporary directory, so that the code before
the fix (which renamed over the destination) replaces only those links, never ``/dev``.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time

import pytest

import ofindex
from ofindex.cli.synthetic import write_dataset
from ofindex.formats.textindex import export_text
from tests.kit import servers

#: Address space a command may use (about 165 MB is its peak): reading /dev/zero or an
#: endless FIFO whole fails fast instead of filling the machine's memory.
MEMORY_LIMIT = 1 << 30
#: The command line, run with that limit (set in the child: no preexec_fn beside threads).
LIMITED = (f"import resource, sys; limit = {MEMORY_LIMIT}; "
           "resource.setrlimit(resource.RLIMIT_AS, (limit, limit)); "
           "from ofindex.cli import main; sys.exit(main(sys.argv[1:]))")


def run(*args: str, timeout: float = 120, limited: bool = False,
        **kw) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    command = ["-c", LIMITED] if limited else ["-m", "ofindex"]
    kw.setdefault("capture_output", "stdout" not in kw)
    return subprocess.run([sys.executable, *command, *args], timeout=timeout, env=env, **kw)


def one_line_error(r: subprocess.CompletedProcess[bytes], code: int = 1) -> str:
    err = r.stderr.decode()
    assert r.returncode == code, (r.returncode, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A two-shard indexed dataset and the text index of its first shard."""
    d = str(tmp_path_factory.mktemp("special") / "data")
    write_dataset(d, 40, 2, kind="random", record_size=100, seed=3)
    ofindex.build_index(d)
    first = os.path.join(d, "part-00000")
    from ofindex.formats.location import resolve
    from ofindex.formats.sidecar import load_sidecar

    storage, index_path = resolve(first).sidecar_of(first)
    return d, first, export_text(load_sidecar(storage, index_path))


def test_export_index_to_a_full_device_is_a_one_line_error_and_keeps_the_device(data,
                                                                                   tmp_path):
    _, first, _ = data
    full = tmp_path / "full"
    full.symlink_to("/dev/full")
    err = one_line_error(run("export-index", first, "-o", str(full)))
    assert str(full) in err and "No space left on device" in err
    assert full.is_symlink() and os.readlink(full) == "/dev/full"
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_export_index_to_stdout_and_links_to_it_writes_the_stream(data, tmp_path):
    d, first, text = data
    r = run("export-index", first, "-o", "-")
    assert r.returncode == 0 and r.stdout == text, r.stderr
    assert r.stderr.decode() == "-: 20 records\n"  # the summary beside, not in, the index
    out = tmp_path / "out"
    out.symlink_to("/dev/stdout")
    r = run("export-index", first, "-o", str(out))
    assert r.returncode == 0 and r.stdout == text, r.stderr
    assert out.is_symlink() and os.readlink(out) == "/dev/stdout"
    log = tmp_path / "log"
    log.write_bytes(b"before\n")
    with open(log, "ab") as appended:  # `>> log`: written at the stream's position
        r = run("export-index", first, "-o", str(out), stdout=appended, stderr=subprocess.PIPE)
    assert r.returncode == 0 and log.read_bytes() == b"before\n" + text
    r = run("export-index", d, "-o", "-")  # two data files cannot share one stream
    err = one_line_error(r, code=2)
    assert "-o - takes the text index of one data file, but 2 are named" in err


def test_export_index_to_a_fifo_writes_into_it(data, tmp_path):
    _, first, text = data
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader: the writer's open won't wait
    try:
        r = run("export-index", first, "-o", str(fifo))
        assert r.returncode == 0, r.stderr
        assert os.read(reader, 1 << 20) == text  # (the pipe's buffer holds it all)
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_import_index_from_dev_zero_is_refused_within_its_bounds(data, tmp_path):
    """/dev/zero never ends and has no line end: refused at the bound the data file sets
    (small files), or after one line longer than any text index's (any file)."""
    _, first, _ = data
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    t = time.monotonic()
    err = one_line_error(run("import-index", first, str(zero), timeout=60, limited=True))
    assert f"{zero}: longer than the text index of {first} can be" in err
    large = str(tmp_path / "large")
    write_dataset(large, 2000, 1, kind="random", record_size=100, seed=4)  # 230 KB
    err = one_line_error(run("import-index", os.path.join(large, "part-00000"), str(zero),
                             timeout=60, limited=True))
    assert f"{zero}, line 1: longer than 65536 bytes, which no line of a text index is" in err
    assert time.monotonic() - t < 30
    err = one_line_error(run("import-index", "/dev/zero", str(zero)))
    assert "/dev/zero: not a data file" in err


def _feed(fifo: str, chunk: bytes, most: int, sent: list[int]) -> None:
    """Write ``chunk`` into ``fifo`` until ``most`` bytes or its reader goes away."""
    with open(fifo, "wb", buffering=0) as f:
        try:
            while sent[0] < most:
                sent[0] += f.write(chunk)
        except BrokenPipeError:
            pass


def test_import_index_reads_a_fifo_as_a_stream_up_to_a_bound(data, tmp_path):
    from ofindex.index.textimport import LINE_BYTES, text_index_limit

    _, first, text = data
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    # the real text index through a FIFO (as `<(tfrecord2idx …)` gives it): imported
    sent = [0]
    feeder = threading.Thread(target=_feed, args=(fifo, text, len(text), sent), daemon=True)
    feeder.start()
    r = run("import-index", first, fifo, limited=True)
    feeder.join(10)
    assert r.returncode == 0 and b": 20 records" in r.stdout, r.stderr
    # lines that look right, endlessly: refused past the bound, the writer cut off there
    sent = [0]
    feeder = threading.Thread(target=_feed, args=(fifo, b"0 16\n" * 4096, 64 << 20, sent),
                              daemon=True)
    feeder.start()
    size = os.path.getsize(first)
    err = one_line_error(run("import-index", first, fifo, limited=True))
    feeder.join(10)
    limit = text_index_limit(size)
    assert f"{fifo}: longer than the text index of {first} can be ({limit} bytes for a data " \
           f"file of {size} bytes: {LINE_BYTES} per record at most)" in err
    assert sent[0] < limit + (8 << 20), sent  # read up to the bound, not to the end


@pytest.mark.parametrize("option", ["--ray", "--dask-scheduler"])
def test_build_on_a_cluster_where_nothing_listens_fails_at_once(data, option):
    d, _, _ = data
    port = servers.free_port()  # nothing listens there
    address = f"127.0.0.1:{port}" if option == "--ray" else f"tcp://127.0.0.1:{port}"
    t = time.monotonic()
    err = one_line_error(run("build", d, "--force", option, address, timeout=120))
    assert f"{address}: nothing listens at 127.0.0.1:{port} (connection refused)" in err
    assert "check the address" in err
    assert time.monotonic() - t < 60  # Ray waited for minutes, Dask 30 s
