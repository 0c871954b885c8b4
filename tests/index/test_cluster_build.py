"""Index builds on a real Dask cluster (``LocalCluster``: 2 worker processes, one thread
each) on local disk and in the moto S3 server: the sidecars and the manifest equal a local
build's byte for byte. Resumed builds skip fresh sidecars; ``--force`` rebuilds them."""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading

import pytest

import ofindex
from ofindex.cli.main import main
from ofindex.cli.synthetic import write_dataset
from ofindex.formats import compact_manifest
from ofindex.formats.compact_manifest import COMPACT_NAME
from ofindex.formats.manifest import MANIFEST_NAME
from ofindex.index import cluster as cluster_build
from ofindex.index.build_results import BuildResults
from tests.kit import servers
from tests.kit.helpers import index_dir_of, need, read_bytes

FILES = 6


@pytest.fixture(scope="module")
def cluster():
    distributed = need("dask.distributed")
    # the scheduler's HTTP server on a free port: without a dashboard it still tries 8787,
    # and when another cluster holds it, the socket it leaks fails the test
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address="127.0.0.1:0", silence_logs=40) as lc, \
            distributed.Client(lc) as client:
        yield lc, client


@pytest.fixture
def data_dir(tmp_path):
    d = str(tmp_path / "ds")
    write_dataset(d, 600, FILES, kind="random", record_size=300, index=False, seed=4)
    return d


def _index_files(d: str) -> dict[str, bytes]:
    """The index files of data directory ``d`` (in its index directory), by name."""
    where = index_dir_of(d)
    return {n: read_bytes(os.path.join(where, n)) for n in sorted(os.listdir(where))
            if n.endswith(".ofidx") or n == MANIFEST_NAME}


def test_dask_build_on_local_disk_equals_local_build(cluster, data_dir):
    _, client = cluster
    local = ofindex.build_index(data_dir, resume=False)
    expected = _index_files(data_dir)
    assert len(expected) == FILES + 1
    for name in expected:
        os.remove(os.path.join(index_dir_of(data_dir), name))
    results = ofindex.build_index(data_dir, executor=client.get_executor())
    assert _index_files(data_dir) == expected
    assert results == local
    workers = client.run(os.getpid)
    assert os.getpid() not in workers.values()  # the tasks ran in the worker processes


def test_dask_build_in_s3_equals_local_build(cluster, moto_server, data_dir):
    import s3fs

    _, client = cluster
    opts = servers.s3_options(moto_server.url)
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **opts)
    url = f"s3://{servers.BUCKET}/cluster-{os.path.basename(os.path.dirname(data_dir))}"
    for n in os.listdir(data_dir):
        fs.pipe_file(f"{url}/{n}", read_bytes(os.path.join(data_dir, n)))
    local = ofindex.build_index(url, storage_options=opts)
    index = f"{url}.ofindex"  # the default place of its index files
    expected = {n: fs.cat_file(f"{index}/{n}") for n in [f"part-{k:05d}.ofidx"
                                                       for k in range(FILES)] + [MANIFEST_NAME]}
    for n in expected:
        fs.rm_file(f"{index}/{n}")
    results = ofindex.build_index(url, storage_options=opts, executor=client.get_executor())
    assert results == local
    assert {n: fs.cat_file(f"{index}/{n}") for n in expected} == expected
    ds = ofindex.open(url, storage_options=opts)
    assert len(ds) == 600 and ds[599] == ofindex.open(data_dir, build_missing=True)[599]


def test_interrupted_build_resumes(cluster, data_dir):
    _, client = cluster
    ofindex.build_index(data_dir)
    expected = _index_files(data_dir)
    index = index_dir_of(data_dir)
    mtimes = {n: os.stat(os.path.join(index, n)).st_mtime_ns for n in expected}
    # "died at 2/3": two sidecars and the manifest were never written
    for n in ("part-00004.ofidx", "part-00005.ofidx", MANIFEST_NAME):
        os.remove(os.path.join(index, n))
    results = ofindex.build_index(data_dir, executor=client.get_executor())
    assert [r.skipped for r in results] == [True] * 4 + [False] * 2
    assert _index_files(data_dir) == expected
    for k in range(4):  # the fresh ones were not rewritten
        n = f"part-{k:05d}.ofidx"
        assert os.stat(os.path.join(index, n)).st_mtime_ns == mtimes[n]
    # a data file that changed is re-indexed; the rest stays
    with ofindex.Writer(os.path.join(data_dir, "part-00002"), index=False) as w:
        w.write(b"replaced")
    results = ofindex.build_index(data_dir)
    assert [r.skipped for r in results] == [True, True, False, True, True, True]
    assert results[2].records == 1
    # resume=False rebuilds everything
    assert not any(r.skipped for r in ofindex.build_index(data_dir, resume=False))


def test_cli_builds_on_a_dask_scheduler(cluster, data_dir, capsys):
    lc, _ = cluster
    assert main(["build", data_dir, "--dask-scheduler", lc.scheduler_address]) == 0
    assert "indexed 6 files, 600 records" in capsys.readouterr().out
    assert main(["build", data_dir, "--dask-scheduler", lc.scheduler_address]) == 0
    assert "6 already fresh, skipped" in capsys.readouterr().out
    assert main(["build", data_dir, "--force", "--no-progress"]) == 0
    assert "skipped" not in capsys.readouterr().out


def test_failed_task_names_the_file_and_cancels(cluster, data_dir):
    _, client = cluster
    with open(os.path.join(data_dir, "part-00003"), "r+b") as f:
        f.write(b"\xff" * 8)  # the first record's length header: its CRC fails
    with pytest.raises(ofindex.CorruptRecordError, match="part-00003"):
        ofindex.build_index(data_dir, format="tfrecord", executor=client.get_executor())


RAY_BUILD = """
import json, sys, ray
import ofindex
from ofindex.index.cluster import RayExecutor
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
executor = RayExecutor()
try:
    results = ofindex.build_index(sys.argv[1], executor=executor)
finally:
    executor.shutdown()
    ray.shutdown()
print(json.dumps([r.records for r in results]))
"""


@pytest.mark.slow
def test_ray_local_mode_build_equals_local_build(data_dir):
    """Ray's local mode (its own process tree, so it runs in a child interpreter)."""
    import json
    import subprocess
    import sys

    need("ray")
    local = ofindex.build_index(data_dir, resume=False)
    expected = _index_files(data_dir)
    for name in expected:
        os.remove(os.path.join(index_dir_of(data_dir), name))
    run = subprocess.run([sys.executable, "-c", RAY_BUILD, data_dir], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == [r.records for r in local]
    assert _index_files(data_dir) == expected


class _CountingExecutor(cf.Executor):
    """An executor that counts the tasks submitted and not finished yet."""

    def __init__(self, inner: cf.Executor) -> None:
        self.inner, self.pending, self.most, self.lock = inner, 0, 0, threading.Lock()

    def submit(self, fn, /, *args, **kwargs):
        with self.lock:
            self.pending += 1
            self.most = max(self.most, self.pending)
        future = self.inner.submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _future) -> None:
        with self.lock:
            self.pending -= 1


def test_dask_build_streams_its_results_into_a_compact_manifest(cluster, data_dir,
                                                                 monkeypatch):
    """Issue 32: a cluster build submits at most IN_FLIGHT tasks ahead and hands each result
    on in order as it arrives (the driver never holds every future, nor a list of every
    result); the compact manifest it streams equals a local build's byte for byte."""
    _, client = cluster
    monkeypatch.setattr(compact_manifest, "COMPACT_FROM_SHARDS", FILES)
    local = ofindex.build_index(data_dir, resume=False)
    manifest = os.path.join(index_dir_of(data_dir), COMPACT_NAME)
    expected = read_bytes(manifest)
    os.remove(manifest)
    monkeypatch.setattr(cluster_build, "IN_FLIGHT", 2)
    executor = _CountingExecutor(client.get_executor())
    results = ofindex.build_index(data_dir, executor=executor, resume=False)
    assert executor.most <= 2
    assert isinstance(results, BuildResults) and results == local and len(results) == FILES
    assert read_bytes(manifest) == expected
    assert ofindex.open(data_dir)[:] == ofindex.open(data_dir, manifest=False)[:]
