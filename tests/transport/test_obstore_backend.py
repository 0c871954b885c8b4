"""The obstore backend (``storage_options={"backend": "obstore", ...}``): chosen by the option
alone (S3 and GCS; web servers stay with our HTTP client), its failures decided by our policy
(obstore's own retries off), its writes exclusive where asked, and a forked child that would
hang on it told so instead. Reads equal to the local records on S3 and GCS:
tests/storage/test_storage_conformance.py."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import time
import uuid

import pytest

import ofindex
from ofindex.errors import DatasetExistsError, InvalidURLError, StorageError
from ofindex.storage import Storages
from ofindex.transport.policy import RequestPolicy
from tests.kit import paths, servers
from tests.kit.helpers import need

need("obstore")



def test_the_backend_option_chooses_the_library():
    from ofindex.transport.obstore_fs import ObstoreFileSystem

    via = Storages(servers.obstore_options("s3", "http://127.0.0.1:1"))
    storage, path = via.for_url("s3://bucket/a/b")
    assert path == "bucket/a/b" and isinstance(storage.client.fs, ObstoreFileSystem)
    gcs, path = via.for_url("gs://bucket/a/b")
    assert path == "bucket/a/b" and isinstance(gcs.client.fs, ObstoreFileSystem)
    assert not isinstance(Storages(servers.s3_options("http://127.0.0.1:1")).for_url(
        "s3://bucket/a")[0].client.fs, ObstoreFileSystem)
    with pytest.raises(InvalidURLError, match="backend='nope': use one of fsspec, obstore"):
        Storages({"backend": "nope"}).for_url("s3://bucket/a")
    with pytest.raises(InvalidURLError, match="abfs:// URLs cannot be read through obstore"):
        Storages({"backend": "obstore"}).for_url("abfs://container/a")
    with pytest.raises(InvalidURLError, match="ofindex's own HTTP client"):
        Storages({"backend": "obstore"}).for_url("https://host/a")


def test_a_missing_obstore_names_the_extra():
    code = ("import sys; sys.modules['obstore'] = None\n"
            "import ofindex\n"
            "try:\n"
            "    ofindex.open('s3://bucket/data/', storage_options={'backend': 'obstore'})\n"
            "except ofindex.MissingDependencyError as exc:\n"
            "    print(exc)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": paths.ROOT})
    assert "pip install 'ofindex[obstore]'" in run.stdout, run.stdout + run.stderr


def test_nothing_listening_is_said_at_once():
    port = servers.free_port()
    options = servers.obstore_options("s3", f"http://127.0.0.1:{port}")
    t = time.monotonic()
    with pytest.raises(StorageError, match=f"nothing listens at 127.0.0.1:{port}"):
        ofindex.open("s3://bucket/data/part-0", storage_options=options)
    assert time.monotonic() - t < 5


class _Busy(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with self.server.lock:
            self.server.gets += 1
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, *args):
        pass


def test_answers_worth_retrying_are_retried_by_the_policy_alone():
    """An S3 endpoint answering 503: the requests sent are the policy's attempts
    (``retries=2``: 3), none added by obstore's own loop (10 retries by default)."""
    with servers.serve_http(_Busy, gets=0) as (base, srv):
        storage, path = Storages(servers.obstore_options("s3", base)).for_url(
            "s3://bucket/data/part-0")
        storage.client.policy = RequestPolicy(retries=2, base_delay=0.001,
                                              throttle_delay=0.001, timeout=10)
        with pytest.raises(ofindex.RangeReadError, match="failed after 3 attempts"):
            storage.read(path, 0, 10)
        assert srv.gets == 3


def test_writes_to_a_bucket_and_its_claim(moto_server):
    """ShardedWriter through obstore (sidecars, renames, the claim's conditional PUT), and a
    directory another writer has claimed is refused."""
    from ofindex.write import ShardedWriter
    from ofindex.write.publish import claim, release

    options = servers.obstore_options("s3", moto_server.url)
    url = f"s3://ofindex-test/obstore-{uuid.uuid4().hex[:8]}"
    with ShardedWriter(url, shard_records=5, storage_options=options) as w:
        w.write_many(b"rec %d" % i for i in range(12))
    assert ofindex.open(url, storage_options=options)[:] == [b"rec %d" % i for i in range(12)]
    storage, path = Storages(options).for_url(url + "-claimed")
    second = ShardedWriter(url + "-claimed", shard_records=5, storage_options=options)
    second.write_many(b"x" for _ in range(3))
    held = claim(storage, path, "feedbeef")  # another writer is publishing meanwhile
    with pytest.raises(DatasetExistsError, match="another writer"):
        second.close()
    with pytest.raises(DatasetExistsError):
        claim(storage, path, "0badcafe")
    release(storage, held)


_FORKED = """
import os, signal, sys
sys.path.insert(0, {root!r})
import ofindex
from ofindex.errors import StorageError
url, options = {url!r}, {options!r}
ds = ofindex.open(url, storage_options=options)
first = ds[0]
pid = os.fork()
if pid == 0:
    signal.alarm(20)  # a hang ends the child: the test sees its status
    try:
        ofindex.open(url, storage_options=options)[1]
    except StorageError as exc:
        print("refused:", exc, flush=True)
        os._exit(0)
    os._exit(3)
_, status = os.waitpid(pid, 0)
print("child", status, flush=True)
"""


def test_a_child_forked_after_obstore_was_used_refuses_instead_of_hanging(moto_server,
                                                                          tmp_path):
    """obstore's runtime does not survive a fork (a child's first request hung): the child
    says so, naming the start methods that work."""
    from ofindex.write import ShardedWriter

    options = servers.obstore_options("s3", moto_server.url)
    url = f"s3://ofindex-test/forked-{uuid.uuid4().hex[:8]}"
    with ShardedWriter(url, shard_records=10, storage_options=options) as w:
        w.write_many(b"rec %d" % i for i in range(20))
    run = subprocess.run([sys.executable, "-c", _FORKED.format(root=paths.ROOT, url=url,
                                                               options=options)],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": paths.ROOT})
    assert "child 0" in run.stdout, run.stdout + run.stderr
    assert "refused:" in run.stdout and "'spawn' or 'forkserver'" in run.stdout


def test_a_faulty_network_is_retried_to_the_right_bytes(moto_server, tmp_path):
    """Through a proxy that drops connections, cuts answers short and answers SlowDown, every
    record comes back right: each of obstore's failures is one the policy retries."""
    import s3fs

    from ofindex.cli.synthetic import write_dataset
    from ofindex.transport.policy import forget_pacers, retry_settings
    from tests.kit.faultproxy import FaultProxy
    from tests.kit.helpers import index_dir_of

    d = str(tmp_path / "data")
    write_dataset(d, 400, 2, kind="random", record_size=3000, index=False, seed=4)
    ofindex.build_index(d)
    expected = ofindex.open(d)[:]
    prefix = f"ofindex-test/faults-{uuid.uuid4().hex[:8]}"
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **servers.s3_options(moto_server.url))
    for source, target in ((d, prefix), (index_dir_of(d), prefix + ".ofindex")):
        for name in os.listdir(source):
            fs.put_file(os.path.join(source, name), f"{target}/{name}")
    quick = RequestPolicy(base_delay=0.001, throttle_delay=0.001, max_delay=0.01)
    forget_pacers()
    with FaultProxy(moto_server.url, drop=0.1, truncate=0.1, slowdown=0.05, seed=3) as proxy, \
            retry_settings(policy=quick):
        ds = ofindex.open(f"s3://{prefix}",
                          storage_options=servers.obstore_options("s3", proxy.url))
        idx = list(range(0, 400, 7))
        assert ds.__getitems__(idx) == [expected[i] for i in idx]
        assert list(ds) == expected
        assert [ds[i] for i in range(0, 400, 3)] == expected[::3]  # a request each
    assert min(proxy.counts[k] for k in ("drop", "truncate", "slowdown")) > 0, proxy.counts
    forget_pacers()
