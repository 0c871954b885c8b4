#!/usr/bin/env python3
"""The contenders of tools/bench_pipeline.py: one training input pipeline each, run in its own
process (cold start) by ``python tools/pipelines.py CONTENDER CONFIG_JSON``; prints one JSON
line: time to the first batch, batches read and their wall time, the record ids in the order
delivered (to measure the shuffle) and the records/batch.

Each pipeline is configured as its documentation recommends, reads batches of
``batch_size`` and stops at the decoded features (``bytes`` for JPEGs). With ``jpeg`` every
image is decoded to RGB and resized to ``image_size`` (antialiased bilinear): in the pipeline
by the contenders of :data:`DECODES_IMAGES` (ofindex's ``images=`` stage, DALI's
``fn.decoders.image`` + ``fn.resize``, tf.data's ``decode_jpeg`` + ``tf.image.resize`` in its
parallel map), by the consuming process with Pillow for the others.

* ``ofindex-torch``: ``TensorBatches(pack_bytes=True)`` + ``BatchSampler(GlobalShuffleSampler)``
  + torch ``DataLoader(batch_size=None, num_workers=workers)`` in a ``ResumableLoader`` (the
  README's training loop).
* ``ofindex-torch-main``: the same with ``num_workers=0`` (batches made in the loop's process).
* ``ofindex-grain``: ``GrainBatches(...).to_iter_dataset().mp_prefetch(workers)``.
* ``ofindex-block``: ``ofindex-torch-main`` with ``BlockShuffleSampler(block_size,
  window)`` in place of the global shuffle (fewer, larger reads: the remote trade-off).
* ``grain``: Grain's own global shuffle, ``MapDataset.source(ofindex.open(...)).shuffle()
  .batch(batch_fn=BatchDecoder(spec))``, read in the loop's process.
* ``ofindex-tf``: ``TFBatches(...).dataset()`` (a ``tf.data`` pipeline: one
  ``numpy_function`` per batch in a parallel map, ``prefetch(AUTOTUNE)``), read as numpy.
* ``tfdata``: ``list_files(shuffle) -> interleave(TFRecordDataset, AUTOTUNE) ->
  shuffle(buffer) -> batch -> map(parse_example, AUTOTUNE) -> prefetch(AUTOTUNE)`` (the
  tf.data performance guide's order: shuffle before batch, vectorised parsing after it).
* ``vahidk``: ``MultiTFRecordDataset(shuffle_queue_size=buffer, infinite=False)`` with index
  files + torch ``DataLoader(batch_size, num_workers=workers)``.
* ``streaming``: MosaicML ``StreamingDataset(local=mds_dir, shuffle=True, batch_size)`` +
  ``StreamingDataLoader(num_workers=workers)``.
* ``dali``: NVIDIA DALI ``fn.readers.tfrecord(random_shuffle=True, initial_fill=buffer)`` on
  the CPU (``device_id=None``), ``num_threads=workers``.
"""

from __future__ import annotations

import glob
import importlib
import importlib.machinery
import json
import os
import sys
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

Config = dict[str, Any]


def _ids(batch: Any) -> list[int]:
    """The record ids of a batch (an array, a tensor or a list of them)."""
    ids = batch["id"]
    if hasattr(ids, "numpy"):
        ids = ids.numpy()
    return [int(x) - (1 << 35) for x in np.asarray(ids).reshape(-1)]  # bench_pipeline.ID_BASE


def _images(batch: Any, c: Config) -> list[bytes]:
    """The JPEG bytes of a batch, whatever container the pipeline gives them in."""
    col = batch[c["image"]]
    packed = (col.values, col.row_lengths) if hasattr(col, "row_lengths") else col
    if isinstance(packed, (tuple, list)) and len(packed) == 2:  # pack_bytes: buffer + lengths
        values, lengths = (np.asarray(x) for x in packed)
        ends = np.cumsum(lengths).tolist()
        return [values[e - n:e].tobytes() for e, n in zip(ends, lengths.tolist(), strict=True)]
    if hasattr(col, "numpy"):
        col = col.numpy()
    return [bytes(x) if not isinstance(x, bytes) else x for x in np.asarray(col, dtype=object)
            .reshape(-1)]


def _jpeg_decode(images: list[bytes], size: list[int]) -> None:
    """Decode every JPEG with Pillow and resize it to ``size`` (antialiased bilinear), in the
    consuming process: for the contenders without an image stage of their own."""
    import io

    from PIL import Image

    for b in images:
        with Image.open(io.BytesIO(b)) as im:
            np.asarray(im.convert("RGB").resize((size[1], size[0]), Image.BILINEAR))


#: The contenders that decode and resize the JPEGs in their own pipeline (the others get
#: the bytes and the consuming process decodes them with Pillow).
DECODES_IMAGES = {"ofindex-torch", "ofindex-torch-main", "ofindex-grain", "dali", "tfdata"}


def _image_stage(c: Config) -> dict[str, Any] | None:
    """ofindex's image stage for the JPEG case: decode and resize to ``image_size``."""
    return {c["image"]: tuple(c["image_size"])} if c["jpeg"] else None


def _check_images(batch: Any, c: Config) -> None:
    """A pipeline that decodes gives ``(batch, height, width, 3)`` uint8 images."""
    images = np.asarray(batch[c["image"]])
    want = (c["batch_size"], *c["image_size"], 3)
    if images.shape != want or images.dtype != np.uint8:
        raise SystemExit(f"images of {images.dtype} {images.shape}, not uint8 {want}")


# -- the pipelines: each returns an iterator of batches with "id" (and the image) ----------
def ofindex_torch(c: Config) -> Iterator[Any]:
    import torch.utils.data as tud

    import ofindex
    from ofindex.decode import BatchDecoder
    from ofindex.integrations.torch import (
        BatchSampler,
        GlobalShuffleSampler,
        ResumableLoader,
        TensorBatches,
    )

    data = TensorBatches(ofindex.open(c["files"]), BatchDecoder(_spec(c)), pack_bytes=True,
                         images=_image_stage(c))
    sampler = BatchSampler(GlobalShuffleSampler(data, seed=0), c["batch_size"], drop_last=True)
    workers = c.get("ofindex_workers", c["workers"])
    # the README's loop: exact resume through ResumableLoader
    return iter(ResumableLoader(tud.DataLoader(data, sampler=sampler, batch_size=None,
                                               num_workers=workers)))


def ofindex_torch_main(c: Config) -> Iterator[Any]:
    """ofindex + torch DataLoader without worker processes (batches made in the loop's
    process: reading and decoding a batch is compiled, so workers mostly add IPC)."""
    return ofindex_torch(dict(c, ofindex_workers=0))


def ofindex_block(c: Config) -> Iterator[Any]:
    """ofindex + torch DataLoader (no workers) with the block shuffle."""
    import torch.utils.data as tud

    import ofindex
    from ofindex.decode import BatchDecoder
    from ofindex.integrations.torch import BatchSampler, BlockShuffleSampler, TensorBatches

    data = TensorBatches(ofindex.open(c["files"]), BatchDecoder(_spec(c)), pack_bytes=True)
    order = BlockShuffleSampler(data, block_size=c.get("block_size", 64),
                                window=c.get("window", 16), seed=0)
    sampler = BatchSampler(order, c["batch_size"], drop_last=True)
    return iter(tud.DataLoader(data, sampler=sampler, batch_size=None, num_workers=0))


def grain_own(c: Config) -> Iterator[Any]:
    """Grain's own global shuffle over the random-access dataset, batches decoded at once."""
    import grain

    import ofindex
    from ofindex.decode import BatchDecoder

    decoder = BatchDecoder(_spec(c))
    data = (grain.MapDataset.source(ofindex.open(c["files"])).shuffle(seed=0)
            .batch(c["batch_size"], drop_remainder=True, batch_fn=decoder))
    return iter(data)


def ofindex_grain(c: Config) -> Iterator[Any]:
    import grain

    import ofindex
    from ofindex.decode import BatchDecoder
    from ofindex.integrations.grain import GrainBatches

    batches = GrainBatches(ofindex.open(c["files"]), c["batch_size"], BatchDecoder(_spec(c)),
                           seed=0, drop_remainder=True, pack_bytes=True,
                           images=_image_stage(c))
    return iter(batches.to_iter_dataset().mp_prefetch(
        grain.MultiprocessingOptions(num_workers=c["workers"])))


def ofindex_tf(c: Config) -> Iterator[Any]:
    import ofindex
    from ofindex.decode import BatchDecoder
    from ofindex.integrations.tf import TFBatches

    batches = TFBatches(ofindex.open(c["files"]), c["batch_size"], BatchDecoder(_spec(c)),
                        seed=0, drop_remainder=True)
    return iter(batches.dataset().as_numpy_iterator())


def _spec(c: Config) -> dict[str, Any]:
    from ofindex.decode import FixedLen

    if c["kind"] == "mnist":
        return {"image": FixedLen((784,), "float32"), "label": FixedLen((), "int64"),
                "id": FixedLen((), "int64")}
    return {c["image"]: FixedLen((), "bytes"), "label": FixedLen((), "int64"),
            "id": FixedLen((), "int64"), "height": FixedLen((), "int64"),
            "width": FixedLen((), "int64")}


def tfdata(c: Config) -> Iterator[Any]:
    import tensorflow as tf

    auto = tf.data.AUTOTUNE
    if c["kind"] == "mnist":
        feats = {"image": tf.io.FixedLenFeature([784], tf.float32),
                 "label": tf.io.FixedLenFeature([], tf.int64),
                 "id": tf.io.FixedLenFeature([], tf.int64)}
    else:
        feats = {c["image"]: tf.io.FixedLenFeature([], tf.string),
                 **{k: tf.io.FixedLenFeature([], tf.int64)
                    for k in ("label", "id", "height", "width")}}
    files = tf.data.Dataset.list_files(c["files"], shuffle=True, seed=0)
    ds = (files.interleave(tf.data.TFRecordDataset, num_parallel_calls=auto,
                           deterministic=False)
          .shuffle(c["buffer"], seed=0)
          .batch(c["batch_size"], drop_remainder=True)
          .map(lambda x: tf.io.parse_example(x, feats), num_parallel_calls=auto))
    if c["jpeg"]:  # decode and resize (antialiased bilinear) in the pipeline
        def decode(jpeg: Any) -> Any:
            image = tf.io.decode_jpeg(jpeg, channels=3)
            return tf.cast(tf.round(tf.image.resize(image, c["image_size"], antialias=True)),
                           tf.uint8)

        ds = ds.map(lambda b: {**b, c["image"]: tf.map_fn(
            decode, b[c["image"]], fn_output_signature=tf.uint8)}, num_parallel_calls=auto)
    return iter(ds.prefetch(auto).as_numpy_iterator())


def vahidk(c: Config) -> Iterator[Any]:
    import torch.utils.data as tud
    from tfrecord.torch.dataset import MultiTFRecordDataset

    paths = sorted(glob.glob(c["files"]))
    splits = {os.path.basename(p): 1.0 / len(paths) for p in paths}
    base = os.path.dirname(paths[0])
    desc = ({"image": "float", "label": "int", "id": "int"} if c["kind"] == "mnist" else
            {c["image"]: "byte", "label": "int", "id": "int", "height": "int", "width": "int"})
    data = MultiTFRecordDataset(os.path.join(base, "{}"), os.path.join(base, "{}.idx"), splits,
                                desc, shuffle_queue_size=c["buffer"], infinite=False)
    return iter(tud.DataLoader(data, batch_size=c["batch_size"], num_workers=c["workers"],
                               drop_last=True))


def _torchvision_standin() -> None:
    """MosaicML Streaming imports torchvision for its vision datasets (unused here); where no
    torchvision matching this torch is installed, give it empty stand-ins."""
    try:
        import torchvision  # noqa: F401
    except Exception:
        tv = types.ModuleType("torchvision")
        dsets = types.ModuleType("torchvision.datasets")
        dsets.VisionDataset = type("VisionDataset", (), {})  # type: ignore[attr-defined]
        trans = types.ModuleType("torchvision.transforms")
        func = types.ModuleType("torchvision.transforms.functional")
        func.to_tensor = lambda x: x  # type: ignore[attr-defined]
        for name, mod in (("torchvision", tv), ("torchvision.datasets", dsets),
                          ("torchvision.transforms", trans),
                          ("torchvision.transforms.functional", func)):
            mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
            sys.modules[name] = mod


def streaming(c: Config) -> Iterator[Any]:
    _torchvision_standin()
    from streaming import StreamingDataLoader, StreamingDataset

    data = StreamingDataset(local=c["mds"], shuffle=True, shuffle_seed=0,
                            batch_size=c["batch_size"])
    return iter(StreamingDataLoader(data, batch_size=c["batch_size"],
                                    num_workers=c["workers"], drop_last=True))


def dali(c: Config) -> Iterator[Any]:
    import nvidia.dali.fn as fn
    import nvidia.dali.tfrecord as tfrec
    import nvidia.dali.types as types
    from nvidia.dali import pipeline_def

    paths = sorted(glob.glob(c["files"]))
    if c["kind"] == "mnist":
        feats = {"image": tfrec.FixedLenFeature([784], tfrec.float32, 0.0),
                 "label": tfrec.FixedLenFeature([], tfrec.int64, -1),
                 "id": tfrec.FixedLenFeature([], tfrec.int64, -1)}
    else:
        feats = {c["image"]: tfrec.FixedLenFeature((), tfrec.string, ""),
                 **{k: tfrec.FixedLenFeature([], tfrec.int64, -1)
                    for k in ("label", "id", "height", "width")}}
    names = list(feats)

    @pipeline_def(batch_size=c["batch_size"], num_threads=c["workers"], device_id=None,
                  prefetch_queue_depth=2)
    def pipe() -> Any:
        out = fn.readers.tfrecord(path=paths, index_path=[p + ".idx" for p in paths],
                                  features=feats, random_shuffle=True,
                                  initial_fill=c["buffer"], seed=0, name="reader")
        if c["jpeg"]:  # DALI's CPU decoder, then its resize (antialiased linear)
            image = fn.decoders.image(out[c["image"]], device="cpu", output_type=types.RGB)
            out[c["image"]] = fn.resize(image, resize_y=c["image_size"][0],
                                        resize_x=c["image_size"][1], antialias=True,
                                        interp_type=types.INTERP_LINEAR)
        return tuple(out[k] for k in names)

    p = pipe()
    p.build()

    def batches() -> Iterator[Any]:
        while True:
            outs = p.run()
            batch = {}
            for k, t in zip(names, outs, strict=True):
                decoded = c["jpeg"] and k == c["image"]
                batch[k] = (t.as_array() if t.is_dense_tensor() and (decoded or
                                                                     k != c["image"])
                            else [np.array(t[i]).tobytes() for i in range(len(t))])
            yield batch

    return batches()


CONTENDERS: dict[str, Callable[[Config], Iterator[Any]]] = {
    "ofindex-torch": ofindex_torch, "ofindex-torch-main": ofindex_torch_main,
    "ofindex-grain": ofindex_grain, "ofindex-tf": ofindex_tf, "tfdata": tfdata,
    "vahidk": vahidk, "streaming": streaming, "dali": dali, "ofindex-block": ofindex_block,
    "grain": grain_own,
}


#: What each pipeline imports: imported before the clock starts (a training job has its
#: framework imported anyway; the first-batch latency is the pipeline's own start).
IMPORTS = {
    "ofindex-torch": ["torch.utils.data", "ofindex.integrations.torch"],
    "ofindex-torch-main": ["torch.utils.data", "ofindex.integrations.torch"],
    "ofindex-grain": ["grain", "ofindex.integrations.grain"],
    "ofindex-block": ["torch.utils.data", "ofindex.integrations.torch"],
    "grain": ["grain", "ofindex.decode"],
    "ofindex-tf": ["tensorflow", "ofindex.integrations.tf"],
    "tfdata": ["tensorflow"],
    "vahidk": ["torch.utils.data", "tfrecord.torch.dataset"],
    "streaming": ["torch.utils.data", "streaming"],
    "dali": ["nvidia.dali.fn", "nvidia.dali.tfrecord"],
}


def _tree_cpu() -> float | None:
    """CPU seconds used so far by this process and its living descendants (worker
    processes), from /proc (``None`` elsewhere): on a shared machine, CPU time per batch
    shows a pipeline's cost better than its rate does."""
    if not os.path.exists("/proc/self/stat"):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo += [int(x) for x in f.read().split()]
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue  # a process that just ended
    return total


def run(name: str, c: Config) -> dict[str, Any]:
    """Time one pipeline from construction to its first batch, then ``c["batches"]`` more."""
    if name == "streaming":
        _torchvision_standin()
    for module in IMPORTS[name]:
        importlib.import_module(module)
    if c["jpeg"]:
        importlib.import_module("PIL.Image")
    t0 = time.perf_counter()
    it = CONTENDERS[name](c)
    first = next(it)
    t1 = time.perf_counter()
    ids = _ids(first)
    consumer_decodes = c["jpeg"] and name not in DECODES_IMAGES
    if consumer_decodes:
        _jpeg_decode(_images(first, c), c["image_size"])
    elif c["jpeg"]:
        _check_images(first, c)
    t_start, cpu_start = time.perf_counter(), _tree_cpu()
    count = 0
    for batch in it:
        ids += _ids(batch)
        if consumer_decodes:
            _jpeg_decode(_images(batch, c), c["image_size"])
        count += 1
        if count >= c["batches"]:
            break
    seconds, cpu_end = time.perf_counter() - t_start, _tree_cpu()
    cpu = cpu_end - cpu_start if cpu_end is not None and cpu_start is not None else None
    return {"contender": name, "first_batch_s": t1 - t0, "batches": count, "seconds": seconds,
            "cpu_ms_per_batch": 1e3 * cpu / count if cpu is not None and count else None,
            "load": os.getloadavg()[0],
            "batches_per_s": count / seconds if seconds > 0 else None,
            "records_per_batch": len(ids) // (count + 1), "ids": ids if c["ids"] else None}


# -- Keras model.fit of a small model (MNIST-like data): steps/s per input -----------------
def _fit_input(name: str, c: Config) -> Any:
    """What ``model.fit`` reads: ``(image, label)`` batches from each input."""
    import ofindex
    from ofindex.decode import BatchDecoder

    if name == "ofindex-keras":
        from ofindex.integrations.keras import KerasBatches

        return KerasBatches(ofindex.open(c["files"]), c["batch_size"], BatchDecoder(_spec(c)),
                            inputs="image", targets="label", drop_remainder=True,
                            workers=c["workers"])
    if name == "ofindex-tf":
        from ofindex.integrations.tf import TFBatches

        return TFBatches(ofindex.open(c["files"]), c["batch_size"], BatchDecoder(_spec(c)),
                         drop_remainder=True).dataset(inputs="image", targets="label")
    import tensorflow as tf

    auto = tf.data.AUTOTUNE
    feats = {"image": tf.io.FixedLenFeature([784], tf.float32),
             "label": tf.io.FixedLenFeature([], tf.int64)}
    files = tf.data.Dataset.list_files(c["files"], shuffle=True, seed=0)
    return (files.interleave(tf.data.TFRecordDataset, num_parallel_calls=auto,
                             deterministic=False)
            .shuffle(c["buffer"], seed=0).batch(c["batch_size"], drop_remainder=True)
            .map(lambda x: tf.io.parse_example(x, feats), num_parallel_calls=auto)
            .map(lambda b: (b["image"], b["label"])).prefetch(auto))


def fit(name: str, c: Config) -> dict[str, Any]:
    """``model.fit`` of a small MLP for two epochs: the first (cold: tracing, workers
    starting) and the second epoch's steps/s."""
    import keras

    data = _fit_input(name, c)
    model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    marks: list[float] = []

    class Clock(keras.callbacks.Callback):  # type: ignore[misc]
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            marks.append(time.perf_counter())

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            marks.append(time.perf_counter())

    history = model.fit(data, epochs=2, verbose=0, callbacks=[Clock()])
    steps = c["batches"]
    return {"contender": name, "steps": steps, "first_epoch_s": marks[1] - marks[0],
            "steps_per_s": steps / (marks[3] - marks[2]),
            "loss": [float(v) for v in history.history["loss"]]}


if __name__ == "__main__":
    if sys.argv[1].startswith("fit:"):
        result = fit(sys.argv[1][4:], json.loads(sys.argv[2]))
    else:
        result = run(sys.argv[1], json.loads(sys.argv[2]))
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)  # skip slow interpreter teardown (worker pools, TensorFlow)
