"""Synthetic datasets for the demo, benchmarks and tests: MNIST-like records and raw bytes.

MNIST-like records are ``tf.train.Example`` messages (``image``: 784 floats, ``label``: int64)
in TFRecord files, and OneFlow ``OFRecord`` messages (``images``: 784 floats, ``labels``:
int64, as in OneFlow's examples) in OFRecord files.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import numpy as np

from ..formats.framing import RecordFormat
from ..formats.placement import new_index_dir
from ..proto import example_pb2, ofrecord_pb2
from ..storage import LocalStorage
from ..write.writer import Writer


def mnist_like_example(rng: np.random.Generator, pixels: int = 784) -> example_pb2.Example:
    """A ``tf.train.Example`` with ``image`` (``pixels`` floats in [0, 1)) and ``label`` (int64)."""
    msg = example_pb2.Example()
    feat = msg.features.feature
    feat["image"].float_list.value.extend(rng.random(pixels, dtype=np.float32).tolist())
    feat["label"].int64_list.value.append(int(rng.integers(0, 10)))
    return msg


def mnist_like_ofrecord(rng: np.random.Generator, pixels: int = 784) -> ofrecord_pb2.OFRecord:
    """A OneFlow ``OFRecord`` with ``images`` (``pixels`` floats) and ``labels`` (int64)."""
    msg = ofrecord_pb2.OFRecord()
    msg.feature["images"].float_list.value.extend(rng.random(pixels, dtype=np.float32).tolist())
    msg.feature["labels"].int64_list.value.append(int(rng.integers(0, 10)))
    return msg


def _mnist_records(rng: np.random.Generator, n: int, fmt: RecordFormat) -> Iterator[bytes]:
    """``n`` serialized MNIST-like records of the message type that goes with ``fmt``."""
    if fmt is RecordFormat.OFRECORD:
        msg = mnist_like_ofrecord(rng)
        image = msg.feature["images"].float_list.value
        label = msg.feature["labels"].int64_list.value
    else:
        ex = mnist_like_example(rng)
        image = ex.features.feature["image"].float_list.value
        label = ex.features.feature["label"].int64_list.value
    serialize: Callable[[], bytes] = (msg.SerializeToString if fmt is RecordFormat.OFRECORD
                                      else ex.SerializeToString)
    for _ in range(n):
        image[:] = rng.random(len(image), dtype=np.float32).tolist()
        label[0] = int(rng.integers(0, 10))
        yield serialize()


def random_payloads(rng: np.random.Generator, n: int, mean_size: int) -> Iterator[bytes]:
    """``n`` random byte strings of sizes uniform in [mean_size/2, 3*mean_size/2]."""
    lo, hi = max(mean_size // 2, 0), mean_size + mean_size // 2 + 1
    sizes = rng.integers(lo, hi, size=n)
    blob = rng.bytes(int(sizes.max(initial=0)) + 1)
    for k, s in enumerate(sizes.tolist()):
        start = k % 64
        yield blob[start : start + s] if start + s <= len(blob) else blob[:s]


def write_dataset(
    directory: str,
    records: int,
    shards: int,
    *,
    kind: str = "mnist",
    record_size: int = 200,
    format: str = "tfrecord",
    index: bool = True,
    seed: int = 0,
) -> list[str]:
    """Write ``records`` records over ``shards`` files ``part-00000``… in ``directory``.

    ``kind`` is ``"mnist"`` (MNIST-like Examples, or OFRecords for ``format="ofrecord"``) or
    ``"random"`` (random bytes of about ``record_size``). With ``index=False`` no sidecar is
    written (for the builder to make).
    """
    os.makedirs(directory, exist_ok=True)
    # a dataset directory: its index where one built as a whole goes, not each file's own
    index_dir = new_index_dir(LocalStorage(), directory) if index else None
    rng = np.random.default_rng(seed)
    per = [records // shards + (1 if k < records % shards else 0) for k in range(shards)]
    paths = []
    for k, n in enumerate(per):
        path = os.path.join(directory, f"part-{k:05d}")
        with Writer(path, format=format, index=index, index_dir=index_dir) as w:
            if kind == "mnist":
                w.write_many(_mnist_records(rng, n, w.format))
            elif kind == "random":
                w.write_many(random_payloads(rng, n, record_size))
            else:
                raise ValueError(f"unknown kind {kind!r}: use 'mnist' or 'random'")
        paths.append(path)
    return paths
