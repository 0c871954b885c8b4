"""Compressed TFRecords benchmark: ofindex on GZIP files written by TensorFlow, against the
only alternative a user has (tf.data reading from the start), in one run.

For each data set (``small``: ~200 B records, ``large``: ~100 KB records; both GZIP-compressed
by ``tf.io.TFRecordWriter``) it measures, interleaving the peers round by round:

* index build throughput (uncompressed MB/s) against ``tf.data.TFRecordDataset(...,
  compression_type="GZIP")`` reading the whole file (batched, so Python adds little);
* random ``ds[i]`` and ``ds.__getitems__(256)`` records/s at the default seek spacing, against
  tf.data reading sequentially up to the record (``skip(i).take(1)``; for a batch, up to its
  last record);
* records/s against index size over several seek spacings (a table, and a PNG when matplotlib
  is installed);
* the size cost of the Writer's full-flush seek points (file size against TensorFlow's);
* 256 random records from a compressed file served by nginx behind ``latency_proxy.py``
  (+RTT), counted in round trips (goal: at most 5): the first batch after opening, and
  batches once 8 have filled the window cache, in multi-range requests (nginx answers them)
  and one range per request (as from S3), at each spacing.

Results go to ``--out`` (JSON, default ``bench-results/compressed.json``). Run small sizes on a
shared machine, e.g.::

    python tools/bench_compressed.py --small-records 100000 --large-records 500 --budget 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]

import numpy as np  # noqa: E402
from benchlib import parse_args, sidecar_path  # noqa: E402

import ofindex  # noqa: E402
from ofindex.deflate import fast_inflate  # noqa: E402
from ofindex.formats.seekpoints import DEFAULT_SPACING, WRITER_SPACING  # noqa: E402
from ofindex.formats.sidecar import open_local_sidecar  # noqa: E402
from ofindex.formats.sidecar_header import layout_of  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
KIB = 1 << 10


def payloads(n: int, size: int, kind: str, seed: int):
    """``n`` payloads of about ``size`` bytes. ``example``: ``tf.train.Example`` protos, small
    ones with ids, labels, scores and a few words of text (compress about 2-3x, like typical
    tabular/text Examples), large ones mostly an incompressible ``image`` bytes feature (like
    JPEG); ``random``: random bytes."""
    from ofindex.proto import example_pb2

    rng = np.random.default_rng(seed)
    words = [bytes(rng.integers(97, 123, size=int(k), dtype=np.uint8))
             for k in rng.integers(3, 11, size=3000)]
    for s in rng.integers(size // 2, size * 3 // 2 + 1, size=n).tolist():
        if kind == "random":
            yield rng.bytes(s)
            continue
        ex = example_pb2.Example()
        f = ex.features.feature
        f["id"].int64_list.value.append(int(rng.integers(1 << 40)))
        f["label"].int64_list.value.append(int(rng.integers(10)))
        f["score"].float_list.value.extend(rng.random(4).tolist())
        if s > 4096:
            f["image"].bytes_list.value.append(rng.bytes(s - 100))
        else:
            text = b" ".join(words[j] for j in rng.integers(0, len(words), size=max(1, s // 9)))
            f["text"].bytes_list.value.append(text[: max(1, s - 90)])
        yield ex.SerializeToString()


def tf_dataset(root: str, name: str, n: int, size: int, kind: str) -> tuple[str, int]:
    """A GZIP TFRecord file written by TensorFlow (cached); returns it and its uncompressed
    size."""
    import tensorflow as tf

    path = os.path.join(root, f"{name}-{n}x{size}-{kind}.tfrecord.gz")
    meta = path + ".bytes"
    if not os.path.exists(meta):
        total = 0
        opts = tf.io.TFRecordOptions(compression_type="GZIP")
        with tf.io.TFRecordWriter(path, opts) as w:
            for p in payloads(n, size, kind, seed=1):
                w.write(p)
                total += len(p) + 16
        with open(meta, "w") as f:
            f.write(str(total))
    with open(meta) as f:
        return path, int(f.read())


def rate(fn, budget: float, unit: int = 1) -> float:
    """Calls of ``fn`` per second (times ``unit``) within about ``budget`` seconds."""
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        spent = time.perf_counter() - t0
        if spent >= budget:
            return n * unit / spent


def tf_read_all(path: str) -> None:
    import tensorflow as tf

    for _ in tf.data.TFRecordDataset(path, compression_type="GZIP").batch(4096):
        pass


def tf_read_up_to(path: str, i: int) -> bytes:
    import tensorflow as tf

    ds = tf.data.TFRecordDataset(path, compression_type="GZIP").skip(i).take(1)
    return next(iter(ds)).numpy()


def build_case(path: str, usize: int, rounds: int) -> dict:
    """Index build vs tf.data reading the whole file, interleaved."""
    ours, theirs = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        ofindex.build_index(path, manifest=False, resume=False)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        tf_read_all(path)
        theirs.append(time.perf_counter() - t)
    a, b = min(ours), min(theirs)
    return {"ofindex_build_MBps": usize / a / 1e6, "tf_read_all_MBps": usize / b / 1e6,
            "ratio": b / a}


def random_case(path: str, budget: float, tf_samples: int, seed: int) -> dict:
    """Random ds[i] and __getitems__(256) at the current index vs tf.data from the start."""
    ds = ofindex.open(path)
    n = len(ds)
    rng = np.random.default_rng(seed)
    for _ in range(min(n, 2000)):  # warm the window cache, as a training job's first steps do
        ds[int(rng.integers(n))]
    single = rate(lambda: ds[int(rng.integers(n))], budget)
    batch = rate(lambda: ds.__getitems__(rng.integers(0, n, 256)), budget, 256)
    saved, fast_inflate.ISAL = fast_inflate.ISAL, None  # the same with zlib alone
    try:
        single_zlib = rate(lambda: ds[int(rng.integers(n))], budget)
    finally:
        fast_inflate.ISAL = saved
    walls = []
    for i in rng.integers(0, n, tf_samples).tolist():
        t = time.perf_counter()
        assert tf_read_up_to(path, i) == ds[i]
        walls.append(time.perf_counter() - t)
    tf_single = 1 / statistics.mean(walls)
    last = int(np.sort(rng.integers(0, n, 256))[-1])  # a batch costs a pass to its last record
    t = time.perf_counter()
    tf_read_up_to(path, last)
    tf_batch = 256 / (time.perf_counter() - t)
    return {"ds_i_per_s": single, "ds_i_per_s_zlib": single_zlib,
            "getitems256_per_s": batch, "tf_single_per_s": tf_single,
            "tf_batch256_per_s": tf_batch, "single_ratio": single / tf_single,
            "batch_ratio": batch / tf_batch}


def index_size(path: str) -> dict:
    """The sidecar's size and its sections', as fractions of the (compressed) data file: the
    offsets section as stored (packed in a version 3 sidecar, padding included), the seek
    points and their windows, and the payload checksums if any."""
    sc = open_local_sidecar(sidecar_path(path))
    size = os.path.getsize(path)
    total = os.path.getsize(sidecar_path(path))
    lay = layout_of(sc.header)
    assert lay.end == total, (lay.end, total)
    offsets = lay.offsets[1] - lay.offsets[0]
    seeks = lay.windows[1] - lay.seek_points[0]
    return {"index_bytes": total, "index_fraction": total / size,
            "sidecar_version": sc.header.version, "offsets_bytes": offsets,
            "offsets_bytes_per_record": offsets / max(1, len(sc)),
            "offsets_fraction": offsets / size, "seek_bytes": seeks, "seek_fraction": seeks / size,
            "checksums_fraction": (lay.checksums[1] - lay.checksums[0]) / size,
            "header_fraction": sc.header.header_size / size,
            "seek_points": int(sc.header.seek_points)}


def spacing_case(path: str, spacings: list[int], budget: float, seed: int) -> list[dict]:
    rows = []
    for sp in spacings:
        ofindex.build_index(path, seek_spacing=sp, manifest=False)
        ds = ofindex.open(path)
        rng = np.random.default_rng(seed)
        n = len(ds)
        for _ in range(min(n, 2000)):  # warm the window cache, as in random_case
            ds[int(rng.integers(n))]
        row = {"spacing": sp, **index_size(path),
               "ds_i_per_s": rate(lambda ds=ds, rng=rng, n=n: ds[int(rng.integers(n))], budget),
               "getitems256_per_s": rate(
                   lambda ds=ds, rng=rng, n=n: ds.__getitems__(rng.integers(0, n, 256)),
                   budget, 256)}
        rows.append(row)
    ofindex.build_index(path, manifest=False, resume=False)  # back to the default
    return rows


def writer_case(path: str, work: str, budget: float) -> dict:
    """File size of ofindex's Writer (full-flush points) against TensorFlow's, and random
    reads from what it wrote."""
    ds = ofindex.open(path)
    rng = np.random.default_rng(5)
    out = {"tf_bytes": os.path.getsize(path)}
    for name, spacing in (("64K", 64 * KIB), ("256K", 256 * KIB), ("1M", 1 << 20),
                          ("no_points", 1 << 62)):
        target = os.path.join(work, f"w-{name}.gz")
        with ofindex.Writer(target, compression="gzip", seek_spacing=spacing) as w:
            w.write_many(ds.iter_records())
        out[f"writer_{name}_bytes"] = os.path.getsize(target)
        out[f"writer_{name}_over_tf"] = os.path.getsize(target) / out["tf_bytes"]
        out[f"writer_{name}_index_fraction"] = (os.path.getsize(sidecar_path(target))
                                                / os.path.getsize(target))
        if name != "no_points":
            w = ofindex.open(target)
            out[f"writer_{name}_ds_i_per_s"] = rate(lambda w=w: w[int(rng.integers(len(w)))],
                                                    budget)
    return out


def remote_case(path: str, rtt_ms: float, seed: int, repeats: int = 5,
                spacing: int | None = None, multi_range: bool = True) -> dict:
    """256 random records over nginx + latency proxy, in RTTs, at the default seek spacing or
    at ``spacing``: the first batch after opening (cold: the sidecar and a stat, then the
    data), and batches of fresh random records once a training job's first 8 batches have
    filled the window cache (warm: the data only). nginx answers
    multi-range requests; ``multi_range=False`` reads one range per request, as from an
    object store (S3 and GCS answer one range per request)."""
    import shutil

    from bench_remote import AccessLog, _proxy_process

    from ofindex.transport import store
    from tests.kit import servers

    work = tempfile.mkdtemp(prefix="bench-compressed-remote-")
    data = os.path.join(work, "data")
    os.makedirs(data)
    copy = os.path.join(data, os.path.basename(path))
    shutil.copy(path, copy)
    ofindex.build_index(data, seek_spacing=spacing)  # its sidecar and the directory's manifest
    local = ofindex.open(path)
    rng = np.random.default_rng(seed)
    out: dict = {"rtt_ms": rtt_ms, "spacing": spacing or DEFAULT_SPACING,
                 "multi_range": multi_range, "index_fraction": index_size(copy)["index_fraction"]}
    try:
        with servers.start_nginx(work) as nginx:
            port = int(nginx.url.rsplit(":", 1)[1])
            with _proxy_process(port, rtt_ms) as proxy_port:
                url = f"http://127.0.0.1:{proxy_port}/data/"
                if not multi_range:
                    store.SUPPORT[store.host_of(url)] = False
                log = AccessLog(nginx.log)
                ofindex.open(url)[0]  # warm the imports (aiohttp, fsspec)
                opens, colds, warms, reqs, warm_reqs = [], [], [], [], []

                def batch() -> list[int]:
                    return rng.choice(len(local), min(256, len(local)), replace=False).tolist()

                for _ in range(repeats):  # cold: open, then the first batch
                    idx = batch()
                    log.take()
                    t0 = time.perf_counter()
                    ds = ofindex.open(url)  # the manifest
                    t1 = time.perf_counter()
                    got = ds.__getitems__(idx)  # the sidecar and a stat, then the data
                    t2 = time.perf_counter()
                    reqs.append(log.take()[0])
                    assert got == [local[i] for i in idx]
                    opens.append(t1 - t0)
                    colds.append(t2 - t1)
                for _ in range(8):  # a training job's first steps: the window cache fills
                    ds.__getitems__(batch())
                for _ in range(repeats):  # warm: the data only, fresh random records each time
                    idx = batch()
                    log.take()
                    t2 = time.perf_counter()
                    got = ds.__getitems__(idx)
                    t3 = time.perf_counter()
                    warm_reqs.append(log.take()[0])
                    assert got == [local[i] for i in idx]
                    warms.append(t3 - t2)
        rtt = rtt_ms / 1000
        out.update({"open_rtts": statistics.median(opens) / rtt,
                    "batch_cold_rtts": statistics.median(colds) / rtt,
                    "batch_warm_rtts": statistics.median(warms) / rtt,
                    "batch_warm_rtts_range": [min(warms) / rtt, max(warms) / rtt],
                    "requests_open_cold": statistics.median(reqs),
                    "requests_warm": statistics.median(warm_reqs), "goal_rtts": 5})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def plot(result: dict, target: str) -> str | None:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, case in result["datasets"].items():
        rows = case["spacings"]
        ax.plot([100 * r["index_fraction"] for r in rows], [r["ds_i_per_s"] for r in rows],
                "o-", label=f"{name}: ds[i]")
        ax.plot([100 * r["index_fraction"] for r in rows],
                [r["getitems256_per_s"] for r in rows], "s--", label=f"{name}: batches of 256")
        for r in rows:
            ax.annotate(f"{r['spacing'] // KIB}K", (100 * r["index_fraction"], r["ds_i_per_s"]),
                        fontsize=7)
    ax.set_xlabel("index size, % of the compressed file (log scale)")
    ax.set_xscale("log")
    ax.set_ylabel("random records/s")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title("GZIP TFRecords: random reads vs index size over seek spacings")
    fig.tight_layout()
    fig.savefig(target, dpi=100)
    return target


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small-records", type=int, default=1_000_000)
    p.add_argument("--large-records", type=int, default=10_000)
    p.add_argument("--payload", choices=["example", "random"], default="example")
    p.add_argument("--spacings", default="64,256,1024,4096", help="KiB, comma-separated")
    p.add_argument("--budget", type=float, default=3.0, help="seconds per rate measurement")
    p.add_argument("--rounds", type=int, default=3, help="interleaved build/tf.data rounds")
    p.add_argument("--tf-samples", type=int, default=5, help="random records read by tf.data")
    p.add_argument("--rtt-ms", type=float, default=20.0)
    p.add_argument("--no-remote", action="store_true")
    p.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "ofindex-bench"))
    p.add_argument("--out", default="bench-results/compressed.json")
    a = parse_args(p, argv, small_records=5_000, large_records=200, spacings="256", budget=0.1,
                   rounds=1, tf_samples=2, rtt_ms=5.0)
    os.makedirs(a.root, exist_ok=True)
    spacings = [int(s) * KIB for s in a.spacings.split(",")]
    result: dict = {"config": {**vars(a), "default_spacing": DEFAULT_SPACING,
                               "writer_spacing": WRITER_SPACING,
                               "implementation": ofindex._accel.implementation(),
                               "inflater": "isal" if fast_inflate.ISAL is not None else "zlib"},
                    "datasets": {}}
    for name, n, size in (("small", a.small_records, 200), ("large", a.large_records, 100_000)):
        if n <= 0:
            continue
        path, usize = tf_dataset(a.root, name, n, size, a.payload)
        case: dict = {"records": n, "uncompressed_bytes": usize,
                      "compressed_bytes": os.path.getsize(path)}
        case["build"] = build_case(path, usize, a.rounds)
        case["index"] = index_size(path)
        case["random"] = random_case(path, a.budget, a.tf_samples, seed=2)
        case["spacings"] = spacing_case(path, spacings, a.budget, seed=3)
        with tempfile.TemporaryDirectory() as work:
            case["writer"] = writer_case(path, work, a.budget)
        if not a.no_remote:
            case["remote"] = remote_case(path, a.rtt_ms, seed=4)
            case["remote_by_spacing"] = [remote_case(path, a.rtt_ms, seed=4, spacing=sp)
                                         for sp in spacings if sp != DEFAULT_SPACING]
            case["remote_single_range"] = [remote_case(path, a.rtt_ms, seed=4, spacing=sp,
                                                       multi_range=False)
                                           for sp in sorted({DEFAULT_SPACING, min(spacings)})]
        result["datasets"][name] = case
        print(json.dumps({name: case}, indent=1))
    if a.out is None:
        return  # a smoke run
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)
    png = plot(result, os.path.splitext(a.out)[0] + ".png")
    print(f"wrote {a.out}" + (f" and {png}" if png else " (no plot: matplotlib not installed)"))


if __name__ == "__main__":
    main()
