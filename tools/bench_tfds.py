"""RLDS steps read in place by ofindex against the TFDS + tf.data pipeline users run today,
and against converting the dataset first (issue 47).

A DROID-like RLDS dataset written by tensorflow_datasets itself: ``--episodes`` episodes of
``--min-steps``..``--max-steps`` steps, each step two ``--size`` x ``--size`` JPEG cameras,
a joint state (7 float64), a cartesian state (6 float64), an action (7 float64), reward,
discount, the is_* flags and a language instruction. Written once, under
``$TMPDIR/ofindex-bench/`` (the images are drawn from a pool of 64 encoded JPEGs, so writing
costs no encoding; reading decodes every image).

(a) random steps/s with global shuffling, decoded (both cameras): ofindex's ``ds.steps``
    with :class:`ofindex.shuffle.GlobalShuffleSampler`, one ``steps.batch`` per batch, against
    ``builder.as_dataset(split, shuffle_files=True).flat_map(steps).shuffle(N).batch(B)``;
    the rate over ``--batches`` batches after the first, each contender in a fresh process,
    the two alternated ``--rounds`` times.
(b) time to the first training batch from a fresh process: ofindex with its index (and step
    counts) built, ofindex on a dataset never opened (it indexes the files and counts the
    steps first; its index deleted before each round), the tf.data pipeline (it fills its
    shuffle buffer first), and converting the dataset to Parquet with pyarrow (one row a
    step: what a converted copy needs; LeRobot is not installable here) then reading a
    shuffled first batch from it; with each process's CPU seconds (the machine is shared).
    ofindex's modules are compiled first, as an installed package's are.
(c) ofindex's (a) and (b) over the GCS emulator behind a +``--rtt-ms`` latency proxy, on a
    dataset of ``--remote-episodes`` episodes (the emulator holds its objects in memory).
    tf.data is not measured there: TensorFlow's GCS client has no endpoint setting and
    cannot reach the emulator.

    .venv/bin/python tools/bench_tfds.py --out /tmp/bench_tfds.json
    .venv/bin/python tools/bench_tfds.py --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

from benchlib import machine_load, parse_args, write_json  # noqa: E402

# gcsfs asks a GCS bucket whether it is hierarchical over gRPC first: the emulator has no
# gRPC port, and each ask waits 60 s before falling back (as tests/docs/test_docs.py sets it)
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

# -- the dataset, written by TFDS (in a process of its own) ---------------------------------

_BUILDER = r'''
import io, sys
import numpy as np
import tensorflow_datasets as tfds
from PIL import Image

EPISODES, LOW, HIGH, SIZE, DATA_DIR = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                        int(sys.argv[4]), sys.argv[5])
F = tfds.features
rng = np.random.default_rng(0)


def jpeg(k):
    y, x = np.mgrid[0:SIZE, 0:SIZE]
    base = np.stack([(x * 2 + k * 9) % 256, (y * 2 + k * 5) % 256, (x + y + k) % 256], -1)
    noisy = (base + rng.integers(0, 24, base.shape)) % 256
    out = io.BytesIO()
    Image.fromarray(noisy.astype(np.uint8)).save(out, format="JPEG", quality=90)
    return out.getvalue()


POOL = [jpeg(k) for k in range(64)]


class DroidLike(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        camera = F.Image(shape=(SIZE, SIZE, 3), encoding_format="jpeg")
        return tfds.core.DatasetInfo(builder=self, features=F.FeaturesDict({
            "steps": F.Dataset({
                "observation": F.FeaturesDict({
                    "exterior_image_1_left": camera, "wrist_image_left": camera,
                    "joint_position": F.Tensor(shape=(7,), dtype=np.float64),
                    "cartesian_position": F.Tensor(shape=(6,), dtype=np.float64),
                }),
                "action": F.Tensor(shape=(7,), dtype=np.float64),
                "reward": F.Scalar(dtype=np.float32), "discount": F.Scalar(dtype=np.float32),
                "is_first": np.bool_, "is_last": np.bool_, "is_terminal": np.bool_,
                "language_instruction": F.Text(),
            }),
            "episode_metadata": F.FeaturesDict({"file_path": F.Text()}),
        }))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for e in range(EPISODES):
            t_max = int(rng.integers(LOW, HIGH + 1))
            picks = rng.integers(0, len(POOL), (t_max, 2))
            yield e, {"steps": {
                "observation": {
                    "exterior_image_1_left": [POOL[p] for p in picks[:, 0]],
                    "wrist_image_left": [POOL[p] for p in picks[:, 1]],
                    "joint_position": rng.normal(size=(t_max, 7)),
                    "cartesian_position": rng.normal(size=(t_max, 6)),
                },
                "action": rng.normal(size=(t_max, 7)),
                "reward": (np.arange(t_max) == t_max - 1).astype(np.float32),
                "discount": np.ones(t_max, np.float32),
                "is_first": np.arange(t_max) == 0, "is_last": np.arange(t_max) == t_max - 1,
                "is_terminal": np.arange(t_max) == t_max - 1,
                "language_instruction": [f"put the block {e % 7} in the bowl"] * t_max,
            }, "episode_metadata": {"file_path": f"/droid/{e}.h5"}}


DroidLike(data_dir=DATA_DIR).download_and_prepare()
'''


def prepare(episodes: int, low: int, high: int, size: int) -> str:
    """The builder directory of the dataset, written by TFDS the first time."""
    base = os.path.join(tempfile.gettempdir(), "ofindex-bench",
                        f"tfds-droid-{episodes}-{low}-{high}-{size}")
    builder = os.path.join(base, "droid_like", "1.0.0")
    if not os.path.isfile(os.path.join(builder, "dataset_info.json")):
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(base)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", _BUILDER, str(episodes), str(low), str(high),
                        str(size), base], check=True, capture_output=True)
        print(f"  wrote {builder} with TFDS in {time.perf_counter() - started:.0f} s",
              file=sys.stderr)
    return builder


# -- the contenders, each run in a fresh process --------------------------------------------

_OFINDEX = r'''
import json, sys, time
started = time.perf_counter()
import numpy as np
import ofindex
from ofindex.shuffle import BatchSampler, GlobalShuffleSampler
path, batch, batches, seed, index_dir, options = (sys.argv[1], int(sys.argv[2]),
    int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] or None, json.loads(sys.argv[6]))
ds = ofindex.open_tfds(path, split="train", index_dir=index_dir, storage_options=options)
steps = ds.steps
sampler = BatchSampler(GlobalShuffleSampler(steps, seed=seed), batch, drop_last=True)
it = iter(sampler)
first = steps.batch(next(it))
assert first["observation"]["wrist_image_left"].shape[0] == batch
first_at = time.perf_counter() - started
t0 = time.perf_counter()
for _ in range(batches):
    out = steps.batch(next(it))
took = time.perf_counter() - t0
bad = [m for m in sys.modules if m.split(".")[0] in ("tensorflow", "tensorflow_datasets")]
print(json.dumps({"first_batch_s": first_at, "steps_per_s": batches * batch / took,
                  "tensorflow_imported": bad, "steps": len(steps)}))
ds.close()
'''

_TFDS = r'''
import json, os, sys, time
started = time.perf_counter()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
import tensorflow_datasets as tfds
path, batch, batches, seed, buffer = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                      int(sys.argv[4]), int(sys.argv[5]))
builder = tfds.builder_from_directory(path)
ds = builder.as_dataset(split="train", shuffle_files=True,
                        read_config=tfds.ReadConfig(shuffle_seed=seed))
ds = ds.flat_map(lambda e: e["steps"]).shuffle(buffer, seed=seed).batch(batch, drop_remainder=True)
ds = ds.prefetch(tf.data.AUTOTUNE)
it = iter(tfds.as_numpy(ds))
first = next(it)
assert first["observation"]["wrist_image_left"].shape[0] == batch
first_at = time.perf_counter() - started
t0 = time.perf_counter()
for _ in range(batches):
    out = next(it)
took = time.perf_counter() - t0
print(json.dumps({"first_batch_s": first_at, "steps_per_s": batches * batch / took}))
'''

_PARQUET = r'''
import json, os, sys, time
started = time.perf_counter()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tensorflow_datasets as tfds
import simplejpeg
path, out_dir, batch, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
builder = tfds.builder_from_directory(path)
# the conversion: every episode decoded by TFDS (images re-encoded as the JPEG bytes they
# were: what a converted copy stores), one row a step, row groups of 1024 steps
ds = builder.as_dataset(split="train", shuffle_files=False,
                        decoders={"steps": {"observation": {
                            "exterior_image_1_left": tfds.decode.SkipDecoding(),
                            "wrist_image_left": tfds.decode.SkipDecoding()}}})
writer, rows = None, {}
def flush():
    global writer, rows
    table = pa.table(rows)
    if writer is None:
        writer = pq.ParquetWriter(os.path.join(out_dir, "steps.parquet"), table.schema)
    writer.write_table(table, row_group_size=1024)
    rows = {}
for episode in tfds.as_numpy(ds):
    for step in episode["steps"]:
        obs = step["observation"]
        for name, value in (("exterior", obs["exterior_image_1_left"]),
                            ("wrist", obs["wrist_image_left"]),
                            ("joint", obs["joint_position"].tolist()),
                            ("cartesian", obs["cartesian_position"].tolist()),
                            ("action", step["action"].tolist()),
                            ("is_first", bool(step["is_first"]))):
            rows.setdefault(name, []).append(value)
    if len(rows.get("action", ())) >= 8192:
        flush()
if rows:
    flush()
writer.close()
converted = time.perf_counter() - started
table = pq.ParquetFile(os.path.join(out_dir, "steps.parquet"))
n = table.metadata.num_rows
picks = np.sort(np.random.default_rng(seed).choice(n, batch, replace=False))
whole = table.read()  # a shuffled batch from a Parquet file: rows taken from the table
chosen = whole.take(pa.array(picks))
images = [simplejpeg.decode_jpeg(b, fastdct=True) for b in chosen["wrist"].to_pylist()]
images += [simplejpeg.decode_jpeg(b, fastdct=True) for b in chosen["exterior"].to_pylist()]
print(json.dumps({"first_batch_s": time.perf_counter() - started,
                  "conversion_s": converted, "steps": n}))
'''


def child(script: str, *args: object, env: dict[str, str] | None = None) -> dict:
    """Run a contender in a fresh process: its JSON line, with the CPU seconds it used
    (``cpu_s``: user and system, all its threads; the machine is shared, so CPU time is
    the figure least moved by other sessions' load)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True,
                         text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT,
                                                   **(env or {})})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0:
        raise RuntimeError(f"child failed ({run.returncode}):\n{run.stderr[-3000:]}")
    out: dict = json.loads(run.stdout.strip().splitlines()[-1])
    out["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out


def compile_bytecode() -> None:
    """Compile ofindex's modules once, as installing a package does: a fresh process of a
    tree without ``__pycache__`` (``PYTHONDONTWRITEBYTECODE`` set, as in these sessions'
    shells) compiled its ~460 modules from source at every start: an indexed first batch
    then took 0.96 s of CPU instead of 0.69 (0.67-0.75 s against 0.41-0.44 s of wall time,
    3 interleaved runs each, load 3). (Every other contender's packages, TensorFlow's
    among them, are installed compiled.)"""
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "ofindex")],
                   check=True, capture_output=True)


def _clear_index(index_dir: str) -> None:
    shutil.rmtree(index_dir, ignore_errors=True)
    os.makedirs(index_dir)


def local(args: argparse.Namespace, builder: str) -> dict:
    index_dir = os.path.join(os.path.dirname(os.path.dirname(builder)), "ofindex-index")
    compile_bytecode()
    colds, ours, theirs = [], [], []
    for round_ in range(args.rounds):  # alternated: a busy machine slows all alike
        _clear_index(index_dir)  # a first open indexes the files and lays the steps out
        colds.append(child(_OFINDEX, builder, args.batch, 1, round_, index_dir, "{}"))
        ours.append(child(_OFINDEX, builder, args.batch, args.batches, round_, index_dir, "{}"))
        theirs.append(child(_TFDS, builder, args.batch, args.batches, round_,
                            args.shuffle_buffer))
    with tempfile.TemporaryDirectory(prefix="ofx-parquet-") as out_dir:
        parquet = child(_PARQUET, builder, out_dir, args.batch, 0)
    ours_rate = statistics.median(r["steps_per_s"] for r in ours)
    theirs_rate = statistics.median(r["steps_per_s"] for r in theirs)

    def median(runs: list[dict], key: str = "first_batch_s") -> float:
        return statistics.median(r[key] for r in runs)

    return {
        "steps": ours[0]["steps"],
        "tensorflow_imported_by_ofindex": ours[0]["tensorflow_imported"],
        "a_random_steps_per_s": {"ofindex": [r["steps_per_s"] for r in ours],
                                 "tfds_tf_data": [r["steps_per_s"] for r in theirs],
                                 "ratio_median": ours_rate / theirs_rate},
        "b_first_batch_s": {
            "ofindex_indexed": [r["first_batch_s"] for r in ours],
            "ofindex_first_open_indexing": [r["first_batch_s"] for r in colds],
            "tfds_tf_data": [r["first_batch_s"] for r in theirs],
            "convert_to_parquet_then_read": parquet["first_batch_s"],
            "parquet_conversion_alone": parquet["conversion_s"],
            "ratio_convert_over_ofindex_indexed": parquet["first_batch_s"] / median(ours),
            "ratio_convert_over_ofindex_first_open": parquet["first_batch_s"] / median(colds),
            "ratio_tfds_over_ofindex_indexed": median(theirs) / median(ours),
        },
        "b_cpu_s": {  # each whole process, all its threads (the first batch's runs: (b))
            "ofindex_first_open_indexing": [r["cpu_s"] for r in colds],
            "convert_to_parquet_then_read": parquet["cpu_s"],
            "ratio_convert_over_ofindex_first_open": parquet["cpu_s"] / median(colds,
                                                                             "cpu_s"),
        },
    }


def remote(args: argparse.Namespace, builder: str) -> dict:
    import gcsfs
    from latency_proxy import LatencyProxy

    from tests.kit import servers

    with servers.start_fake_gcs() as gcs:
        fs = gcsfs.GCSFileSystem(skip_instance_cache=True, **servers.gcs_options(gcs.url))
        fs.mkdir("bench")
        for name in sorted(os.listdir(builder)):
            fs.put_file(os.path.join(builder, name), f"bench/droid_like/1.0.0/{name}")
        port = int(gcs.url.rsplit(":", 1)[1])
        with LatencyProxy("127.0.0.1", port, rtt=args.rtt_ms / 1000) as proxy:
            endpoint = f"http://127.0.0.1:{proxy.port}"
            url = "gs://bench/droid_like/1.0.0"
            options = json.dumps({"token": "anon", "endpoint_url": endpoint})
            index_dir = tempfile.mkdtemp(prefix="ofx-tfds-index-")
            try:
                cold = child(_OFINDEX, url, args.batch, 1, 0, index_dir, options)
                ours = [child(_OFINDEX, url, args.batch, args.batches, r, index_dir, options)
                        for r in range(args.rounds)]
            finally:
                shutil.rmtree(index_dir, ignore_errors=True)
    # TensorFlow's GCS client has no endpoint setting (STORAGE_EMULATOR_HOST is not read: it
    # asks www.googleapis.com), so tf.data cannot read the emulator
    tfds_result = "not measured: TensorFlow's GCS client cannot be pointed at the emulator"
    return {"rtt_ms": args.rtt_ms, "episodes": args.remote_episodes,
            "ofindex": {"steps_per_s": [r["steps_per_s"] for r in ours],
                        "first_batch_s": [r["first_batch_s"] for r in ours],
                        "first_open_indexing_first_batch_s": cold["first_batch_s"]},
            "tfds_tf_data": tfds_result}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--min-steps", type=int, default=100)
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument("--size", type=int, default=128, help="camera height and width")
    parser.add_argument("--batch", type=int, default=256, help="steps per batch")
    parser.add_argument("--batches", type=int, default=20, help="batches timed per run")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each contender")
    parser.add_argument("--shuffle-buffer", type=int, default=10_000,
                        help="tf.data's shuffle buffer, in steps")
    parser.add_argument("--remote-episodes", type=int, default=100)
    parser.add_argument("--rtt-ms", type=float, default=20.0)
    parser.add_argument("--no-remote", action="store_true", help="skip (c)")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parse_args(parser, argv, episodes=6, min_steps=5, max_steps=12, size=32, batch=8,
                      batches=2, rounds=1, shuffle_buffer=64, remote_episodes=4)
    builder = prepare(args.episodes, args.min_steps, args.max_steps, args.size)
    results: dict = {"settings": {k: v for k, v in vars(args).items() if k != "out"},
                     "machine": machine_load(), "local": local(args, builder)}
    print(json.dumps(results["local"], indent=2))
    if not args.no_remote:
        small = prepare(args.remote_episodes, args.min_steps, args.max_steps, args.size)
        results["remote"] = remote(args, small)
        print(json.dumps(results["remote"], indent=2))
    results["machine_after"] = machine_load()
    write_json(results, args.out)


if __name__ == "__main__":
    main()
