"""Synthetic datasets for the demo, benchmarks and tests: MNIST-like Examples and raw records."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from ..index.writer import Writer


def mnist_like_example(rng: np.random.Generator, pixels: int = 784):
    """A ``tf.train.Example`` with ``image`` (``pixels`` floats in [0, 1)) and ``label`` (int64)."""
    from ..proto import example_pb2 as ex

    msg = ex.Example()
    feat = msg.features.feature
    feat["image"].float_list.value.extend(rng.random(pixels, dtype=np.float32).tolist())
    feat["label"].int64_list.value.append(int(rng.integers(0, 10)))
    return msg


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

    ``kind`` is ``"mnist"`` (MNIST-like Examples) or ``"random"`` (random bytes of about
    ``record_size``). With ``index=False`` no sidecar is written (for the builder to make).
    """
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    per = [records // shards + (1 if k < records % shards else 0) for k in range(shards)]
    paths = []
    for k, n in enumerate(per):
        path = os.path.join(directory, f"part-{k:05d}")
        with Writer(path, format=format, index=index) as w:
            if kind == "mnist":
                template = mnist_like_example(rng)
                image = template.features.feature["image"].float_list.value
                label = template.features.feature["label"].int64_list.value
                for _ in range(n):
                    image[:] = rng.random(len(image), dtype=np.float32).tolist()
                    label[0] = int(rng.integers(0, 10))
                    w.write(template.SerializeToString())
            elif kind == "random":
                w.write_many(random_payloads(rng, n, record_size))
            else:
                raise ValueError(f"unknown kind {kind!r}: use 'mnist' or 'random'")
        paths.append(path)
    return paths
