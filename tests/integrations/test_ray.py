"""Ray Data reads ofindex datasets (issue 30, item 3) on a real local Ray cluster: a head and
two worker nodes (their own raylets and worker processes, on 127.0.0.1) started by the test.

Each read runs in a driver process of its own that connects to the cluster and writes what it
read to a file; the test compares it with the dataset read directly: every record exactly
once and equal to ``ds[i]``, local files and moto S3; a shuffled read is a permutation; decoded
columns equal the decoder's; ``limit`` reads only what it needs; read tasks are balanced by
records and bytes. The docs page's example runs too.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import signal
import subprocess
import sys

import numpy as np
import pytest

import ofindex
from ofindex.cli.synthetic import write_dataset
from ofindex.decode import FixedLen, decode_batch
from tests.kit import paths, servers
from tests.kit.helpers import index_dir_of, need

need("ray")
from ofindex.integrations.ray import OfindexDatasource  # noqa: E402

ROOT = paths.ROOT
#: Ray's processes on the loopback interface only (Ray otherwise picks the host's address).
RAY_ENV = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
           "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}

CLUSTER = """
import sys
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True, head_node_args={
    "num_cpus": 0, "object_store_memory": 100 << 20, "include_dashboard": False})
for _ in range(2):
    cluster.add_node(num_cpus=1, object_store_memory=100 << 20)
cluster.wait_for_nodes()
print(cluster.address, flush=True)
sys.stdin.read()  # until the test closes it
cluster.shutdown()
"""

DRIVER = """
import json, pickle, sys
import ray
import ofindex
from ofindex.integrations.ray import read_ofindex

address, out, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ray.init(address=address, log_to_driver=False)
ray.data.DataContext.get_current().execution_options.preserve_order = True
spec = args.pop("spec", None)
if spec is not None:
    from ofindex.decode import FixedLen, VarLen
    spec = {k: eval(v) for k, v in spec.items()}
take = args.pop("take", None)
ds = read_ofindex(args.pop("paths"), spec, with_index=True, override_num_blocks=6, **args)
rows = ds.take(take) if take else ds.take_all()
nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
with open(out, "wb") as f:
    pickle.dump({"rows": rows, "nodes": len(nodes)}, f)
ray.shutdown()
"""


BLOCKS = """
import json, sys
import ray
from ofindex.integrations.ray import read_ofindex

address, out, path = sys.argv[1], sys.argv[2], sys.argv[3]
ray.init(address=address, log_to_driver=False)
context = ray.data.DataContext.get_current()
context.target_max_block_size = 1 << 20
context.execution_options.preserve_order = True
shapes = {}
for name, rows_per_block in (("default", None), ("small pieces", 100)):
    ds = read_ofindex(path, override_num_blocks=1, rows_per_block=rows_per_block)
    tables = ray.get(ds.to_arrow_refs())
    shapes[name] = [[t.num_rows, t.column("bytes").num_chunks] for t in tables]
with open(out, "w") as f:
    json.dump(shapes, f)
ray.shutdown()
"""


@pytest.fixture(scope="module")
def cluster():
    proc = subprocess.Popen([sys.executable, "-c", CLUSTER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=RAY_ENV, text=True,
                            start_new_session=True)
    try:
        address = proc.stdout.readline().strip()
        assert address.startswith("127.0.0.1:"), address
        yield address
    finally:
        proc.stdin.close()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the session this test started
            proc.wait(10)
        proc.stdout.close()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("ray-ds"))
    write_dataset(d, 2400, 4, kind="mnist", seed=5)
    return d


def _read(cluster, tmp_path, **args):
    out = str(tmp_path / "rows.pkl")
    run = subprocess.run([sys.executable, "-c", DRIVER, cluster, out, json.dumps(args)],
                         capture_output=True, text=True, timeout=600, env=RAY_ENV)
    assert run.returncode == 0, run.stderr[-4000:]
    with open(out, "rb") as f:
        got = pickle.load(f)
    assert got["nodes"] == 3
    return got["rows"]


@pytest.mark.slow
def test_every_record_exactly_once(cluster, data, tmp_path):
    rows = _read(cluster, tmp_path, paths=data)
    with ofindex.open(data) as ds:
        assert [r["index"] for r in rows] == list(range(len(ds)))  # in order, each once
        assert all(r["bytes"] == ds[r["index"]] for r in rows)


@pytest.mark.slow
def test_shuffled_read_is_a_permutation(cluster, data, tmp_path):
    from ofindex.shuffle.orders import GlobalShuffleOrder

    rows = _read(cluster, tmp_path, paths=data, shuffle=True, seed=7, epoch=2)
    with ofindex.open(data) as ds:
        order = [r["index"] for r in rows]
        assert sorted(order) == list(range(len(ds))) and order != sorted(order)
        # the permutation of the samplers, for (seed, epoch), read in slices
        assert order == GlobalShuffleOrder(len(ds), 7, 2)(np.arange(len(ds))).tolist()
        assert all(r["bytes"] == ds[r["index"]] for r in rows)


@pytest.mark.slow
def test_decoded_columns(cluster, data, tmp_path):
    from ofindex.decode import decode_example

    rows = _read(cluster, tmp_path, paths=data + "/part-0000[13]",
                 spec={"label": "FixedLen((), 'int64')", "image": "VarLen('float32')"})
    with ofindex.open(data + "/part-0000[13]") as ds:
        assert [r["index"] for r in rows] == list(range(len(ds)))
        for r in rows[::97]:
            want = decode_example(ds[r["index"]])
            assert r["label"] == want["label"][0]
            np.testing.assert_array_equal(r["image"], want["image"])


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """Examples with a ``bytes`` feature of varying sizes, a label and a VarLen of bytes."""
    from ofindex.proto import example_pb2

    d = str(tmp_path_factory.mktemp("ray-examples"))
    rng = np.random.default_rng(3)
    for k in range(3):
        with ofindex.Writer(os.path.join(d, f"part-{k}")) as w:
            for i in range(150):
                ex = example_pb2.Example()
                ex.features.feature["label"].int64_list.value.append(int(rng.integers(10)))
                ex.features.feature["data"].bytes_list.value.append(
                    rng.bytes(int(rng.integers(0, 3000))))
                ex.features.feature["tags"].bytes_list.value.extend([b"t%d" % i] * (i % 3))
                w.write(ex.SerializeToString())
    return d


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.slow
def test_decoded_bytes_features(cluster, examples, tmp_path, shuffle):
    # a bytes feature of one value per record is decoded into one buffer per block, which
    # becomes the binary column as it is; with a VarLen of bytes the blocks are lists
    from ofindex.decode import decode_example

    fixed = {"label": "FixedLen((), 'int64')", "data": "FixedLen((), 'bytes')"}
    for spec in (fixed, {**fixed, "tags": "VarLen('bytes')"}):
        rows = _read(cluster, tmp_path, paths=examples, spec=spec, shuffle=shuffle)
        with ofindex.open(examples) as ds:
            assert sorted(r["index"] for r in rows) == list(range(len(ds)))
            for r in rows:
                want = decode_example(ds[r["index"]])
                assert r["label"] == want["label"][0]
                assert isinstance(r["data"], bytes) and r["data"] == want["data"][0]
                if "tags" in spec:
                    assert list(r["tags"]) == list(want.get("tags", []))


@pytest.mark.slow
def test_blocks_pass_through_ray_as_one_chunk(cluster, data, tmp_path):
    # a block a little over Ray's target_max_block_size passes through Ray alone, one chunk
    # per column (iter_batches slices it without a copy); smaller pieces are joined by Ray
    # as several chunks, which iter_batches copies into one
    out = str(tmp_path / "blocks.json")
    run = subprocess.run([sys.executable, "-c", BLOCKS, cluster, out, data],
                         capture_output=True, text=True, timeout=600, env=RAY_ENV)
    assert run.returncode == 0, run.stderr[-4000:]
    with open(out) as f:
        shapes = json.load(f)
    with ofindex.open(data) as ds:
        n = len(ds)
        want_rows = OfindexDatasource(ds).rows_per_block(1 << 20)
    assert sum(rows for rows, _ in shapes["default"]) == n
    assert len(shapes["default"]) == -(-n // want_rows) > 1
    assert all(chunks == 1 for _, chunks in shapes["default"])
    assert max(rows for rows, _ in shapes["default"]) == want_rows
    assert sum(rows for rows, _ in shapes["small pieces"]) == n
    assert max(chunks for _, chunks in shapes["small pieces"]) > 1


def test_block_rows_and_task_counts(data):
    from ofindex.integrations.ray import BLOCK_MARGIN, read_task_count

    with ofindex.open(data) as ds:
        source = OfindexDatasource(ds)
        payload = sum(s.bytes for s in ds.shards) / len(ds) - 16  # TFRecord framing
        assert source.rows_per_block(1 << 20) == int(BLOCK_MARGIN * (1 << 20) / payload)
        assert source.rows_per_block(None) == int(BLOCK_MARGIN * (128 << 20) / payload)
        assert OfindexDatasource(ds, rows_per_block=7).rows_per_block(1 << 20) == 7
        assert source.task_count() == 1  # 2,400 records of 3 KB: one block; no cluster
        tasks = OfindexDatasource(ds, rows_per_block=100).get_read_tasks(200)
        assert len(tasks) == 24 and sum(t.metadata.num_rows for t in tasks) == len(ds)
    assert read_task_count(10_000, 1_667, 200, 2) == 6  # a task per block's worth
    assert read_task_count(10_000, 1_667, 4, 2) == 4  # at most what Ray asks for
    assert read_task_count(1_000, 5_000, 200, 16) == 16  # at least one per CPU
    assert read_task_count(3, 5_000, 200, 16) == 3  # at most one per record
    assert read_task_count(1, 1, 1, 1) == 1


@pytest.mark.slow
def test_bucket_paths(cluster, data, tmp_path, moto_server):
    import s3fs

    opts = servers.s3_options(moto_server.url)
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **opts)
    url = f"s3://{servers.BUCKET}/ray-{os.path.basename(str(tmp_path))}"
    for source, target in ((data, url), (index_dir_of(data), url + ".ofindex")):
        for name in sorted(os.listdir(source)):  # the data and its index directory
            with open(os.path.join(source, name), "rb") as f:
                fs.pipe_file(f"{target}/{name}", f.read())
    rows = _read(cluster, tmp_path, paths=f"{url}/part-*", storage_options=opts)
    with ofindex.open(data) as ds:
        assert [r["index"] for r in rows] == list(range(len(ds)))
        assert all(r["bytes"] == ds[r["index"]] for r in rows)
    # decoded: the records of each block read with one batched read (no memory maps here)
    rows = _read(cluster, tmp_path, paths=f"{url}/part-*", storage_options=opts,
                 spec={"label": "FixedLen((), 'int64')"})
    with ofindex.open(data) as ds:
        assert [r["index"] for r in rows] == list(range(len(ds)))
        labels = decode_batch(ds[0:len(ds)], {"label": FixedLen((), "int64")})
        assert [r["label"] for r in rows] == labels["label"].tolist()


@pytest.mark.slow
def test_take_reads_the_first_records(cluster, data, tmp_path):
    rows = _read(cluster, tmp_path, paths=data, take=5)
    with ofindex.open(data) as ds:
        assert [r["bytes"] for r in rows] == ds[0:5]


def test_a_limited_task_reads_only_its_rows(nginx_server):
    """Ray pushes ``limit(n)`` into the read tasks: each reads n rows, not its range."""
    from ofindex.integrations.ray import OfindexDatasource

    root = os.path.join(nginx_server.root, "ray-limit")
    write_dataset(root, 4000, 2, kind="random", record_size=1000, seed=2)
    ds = ofindex.open(f"{nginx_server.url}/ray-limit/part-*")
    storage = ds._table.storage
    source = OfindexDatasource(ds, rows_per_block=8)
    full = source.get_read_tasks(2)
    limited = source.get_read_tasks(2, per_task_row_limit=10)
    assert sum(t.metadata.num_rows for t in full) == 4000 and len(full) == 2
    assert [t.metadata.num_rows for t in limited] == [10, 10]
    before = storage.bytes_read
    rows = sum(len(block) for block in limited[1].read_fn())  # Ray slices the blocks too
    moved = storage.bytes_read - before
    assert rows == 10 and moved < 64 << 10  # not the task's 2 MB


def test_tasks_balance_records_and_bytes(tmp_path):
    from ofindex.integrations.ray import balanced_cuts

    d = str(tmp_path / "mixed")
    os.makedirs(d)
    with ofindex.Writer(os.path.join(d, "part-0")) as w:  # 200 big records
        w.write_many([bytes(20_000)] * 200)
    with ofindex.Writer(os.path.join(d, "part-1")) as w:  # 20,000 small ones
        w.write_many([bytes(10)] * 20_000)
    ds = ofindex.open(d)
    cuts = balanced_cuts(ds, 4).tolist()
    assert cuts[0] == 0 and cuts[-1] == len(ds) and cuts == sorted(cuts)
    sizes = np.array([20_000] * 200 + [10] * 20_000) + 16 + 64  # framing, per-record cost
    costs = [sizes[a:b].sum() for a, b in itertools.pairwise(cuts)]
    assert max(costs) < 1.1 * min(costs)  # equal work; equal counts would be 50x apart
    assert cuts[1] < 200 and cuts[2] < 200  # the big shard is split across tasks


def test_tasks_cut_compressed_files_at_seek_points(tmp_path):
    """Read tasks come from the split planner: a GZIP file is cut only where inflating can
    start (the first record at or after a seek point), so no task inflates data it drops."""
    path = str(tmp_path / "one.gz.tfrecord")
    rng = np.random.default_rng(3)
    records = [rng.bytes(300) for _ in range(600)]
    with ofindex.Writer(path, compression="gzip", seek_spacing=4096) as w:
        w.write_many(records)
    ds = ofindex.open(path)
    tasks = OfindexDatasource(ds, rows_per_block=50).get_read_tasks(6)
    rows = [t.metadata.num_rows for t in tasks]
    assert sum(rows) == 600 and len(rows) == 6
    sidecar = ds._table.shards[0].sidecar
    starts, points = sidecar.offsets.astype(np.int64), sidecar.seeks.out
    for cut in np.cumsum(rows)[:-1].tolist():
        # a seek point lies after record cut-1's start, at or before record cut's
        assert ((points > starts[cut - 1]) & (points <= starts[cut])).any(), cut
    got = [bytes(r) for t in tasks for block in t() for r in block.column("bytes").to_pylist()]
    assert got == records


def test_where_reads_only_the_matching_records(tmp_path):
    """``where=``: the read tasks are the planner's partitions of the matching records alone
    (raw and decoded, limited), against the labels decoded from every record."""
    from ray.data.block import BlockAccessor

    d = str(tmp_path / "labelled")
    write_dataset(d, 1200, 3, kind="mnist", seed=5)
    ofindex.build_index(d, columns=["label"], progress=False)
    ds = ofindex.open(d)
    labels = decode_batch(ds[0:len(ds)], {"label": FixedLen((), "int64")})["label"]
    expected = [i for i, label in enumerate(labels.tolist()) if label in (1, 2)]
    spec = {"label": FixedLen((), "int64")}
    for decoded in (None, spec):
        source = OfindexDatasource(ds, decoded, with_index=True, rows_per_block=50,
                                   where={"label": [1, 2]})
        tasks = source.get_read_tasks(4)
        assert len(tasks) == 4 and sum(t.metadata.num_rows for t in tasks) == len(expected)
        tables = [BlockAccessor.for_block(b).to_arrow() for t in tasks for b in t()]
        assert [i for t in tables for i in t.column("index").to_pylist()] == expected
        if decoded is None:
            assert [bytes(r) for t in tables for r in t.column("bytes").to_pylist()] == [
                bytes(ds[i]) for i in expected]
        else:
            assert {v for t in tables for v in t.column("label").to_pylist()} == {1, 2}
        limited = source.get_read_tasks(2, per_task_row_limit=5)
        assert [sum(len(b) for b in t()) for t in limited] == [5, 5]
    with pytest.raises(ValueError, match="not with shuffle"):
        OfindexDatasource(ds, shuffle=True, where={"label": 1})
    with pytest.raises(ofindex.ColumnNotFoundError, match=r"columns=\['image'"):
        OfindexDatasource(ds, where={"image": 1.0})
