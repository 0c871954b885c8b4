"""TFDS datasets written by tensorflow_datasets itself, one builder per feature family and
an RLDS-style builder with ``steps``, for the tests of :mod:`ofindex.tfds`.

Imported only by tests (tensorflow_datasets is a test dependency). Every value comes from a
seeded generator, so each build writes the same examples.
"""

from __future__ import annotations

import os
import tempfile
from typing import ClassVar

import numpy as np
import tensorflow_datasets as tfds

F = tfds.features
#: The number of files each builder's splits are written as (order_family: 20 files of 35
#: examples, more than the 16 files of 16 examples TFDS's interleave reads at once).
SHARDS = {"tensor_family": 3, "sequence_family": 2, "media_family": 2, "rlds_family": 3,
          "order_family": 20, "rlds_plain": 2}


def _rng(split: str, family: str) -> np.random.Generator:
    return np.random.default_rng(sum(map(ord, split + family)))


class _Base(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")
    # TFDS looks for a builder's checksums file beside its code, which it finds through the
    # package (tests.kit) with importlib_resources, a module tensorflow-datasets uses and does
    # not install: these builders download nothing, so there is no code path to find
    code_path = None
    SIZES: ClassVar[dict[str, int]] = {"train": 40, "test": 7}

    def _split_generators(self, dl_manager):
        return {split: self._generate_examples(split, n) for split, n in self.SIZES.items()}


class TensorFamily(_Base):
    """Tensor of every dtype, fixed and unknown dimensions, bytes/zlib encodings, Scalar,
    ClassLabel (top level and nested: label files), Text, BBoxFeature, optional values."""

    def _info(self):
        dtypes = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                  "uint64", "float16", "float32", "float64")
        tensors = {f"fixed_{d}": F.Tensor(shape=(2, 3), dtype=np.dtype(d)) for d in dtypes}
        tensors.update({f"var_{d}": F.Tensor(shape=(None, 2), dtype=np.dtype(d))
                        for d in dtypes})
        tensors.update({
            "scalar_f32": F.Scalar(dtype=np.float32),
            "scalar_i32": F.Scalar(dtype=np.int32),
            "scalar_bool": F.Scalar(dtype=np.bool_),
            "bytes_enc": F.Tensor(shape=(3, None), dtype=np.int16, encoding="bytes"),
            "zlib_enc": F.Tensor(shape=(None, None), dtype=np.float32, encoding="zlib"),
            "zlib_u64": F.Tensor(shape=(None, None, 2), dtype=np.uint64, encoding="zlib"),
            "strings": F.Tensor(shape=(2,), dtype=np.object_),
            "label": F.ClassLabel(names=["cat", "dog", "bird"]),
            "text": F.Text(),
            "bbox": F.BBoxFeature(),
            "optional_i": F.Scalar(dtype=np.int64, optional=True),
            "optional_f": F.Tensor(shape=(2,), dtype=np.float32, optional=True),
            "nested": F.FeaturesDict({"label": F.ClassLabel(names=["no", "yes"]),
                                      "deeper": {"x": F.Tensor(shape=(), dtype=np.int16)}}),
        })
        return tfds.core.DatasetInfo(builder=self, features=F.FeaturesDict(tensors))

    def _generate_examples(self, split, n):
        rng = _rng(split, "tensor")
        for i in range(n):
            example = {}
            for name, feature in self.info.features.items():
                if name.startswith(("fixed_", "var_")):
                    rows = 2 if name.startswith("fixed_") else int(rng.integers(0, 5))
                    example[name] = _values(rng, feature.np_dtype, (rows, *feature.shape[1:]))
            example.update({
                "scalar_f32": np.float32(rng.normal()),
                "scalar_i32": int(rng.integers(-2**31, 2**31 - 1)),
                "scalar_bool": bool(i % 2),
                "bytes_enc": rng.integers(-3000, 3000, (3, int(rng.integers(0, 4))),
                                          dtype=np.int16),
                "zlib_enc": rng.normal(size=(int(rng.integers(0, 3)), int(rng.integers(1, 4))))
                .astype(np.float32),
                "zlib_u64": rng.integers(0, 2**63, (2, int(rng.integers(0, 3)), 2),
                                         dtype=np.uint64) * 2,
                "strings": [f"s{i}".encode(), "é ü".encode()],
                "label": int(rng.integers(0, 3)),
                "text": f"example {i} of {split} — ünïcode",
                "bbox": _box(rng),
                "optional_i": None if i % 3 == 0 else i,
                "optional_f": None if i % 4 == 1 else rng.normal(size=2).astype(np.float32),
                "nested": {"label": i % 2, "deeper": {"x": -i}},
            })
            yield f"{split}-{i}", example


def _box(rng: np.random.Generator) -> tfds.features.BBox:
    (ymin, ymax), (xmin, xmax) = np.sort(rng.random(2)), np.sort(rng.random(2))
    return tfds.features.BBox(float(ymin), float(xmin), float(ymax), float(xmax))


def _values(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    # float64 values with more precision than float32 (TFDS stores them as float32)
    return (rng.normal(size=shape) * 1e3).astype(dtype)


class SequenceFamily(_Base):
    """Sequence of fixed and variable length, of dictionaries, of ClassLabels, nested
    variable-length sequences (ragged), empty sequences."""

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=F.FeaturesDict({
            "fixed": F.Sequence(F.Tensor(shape=(2,), dtype=np.float32), length=3),
            "var": F.Sequence(np.int64),
            "objects": F.Sequence({"label": F.ClassLabel(names=["a", "b"]), "area": np.float32,
                                   "box": F.BBoxFeature(), "name": F.Text()}),
            "ragged": F.Sequence(F.Sequence(np.int32)),
            "ragged3": F.Sequence(F.Sequence(F.Sequence(np.float32))),
            "words": F.Sequence(F.Text()),
        }))

    def _generate_examples(self, split, n):
        rng = _rng(split, "sequence")
        for i in range(n):
            count = int(rng.integers(0, 4))
            yield f"{split}-{i}", {
                "fixed": rng.normal(size=(3, 2)).astype(np.float32),
                "var": rng.integers(-100, 100, int(rng.integers(0, 6))),
                "objects": [{"label": int(rng.integers(0, 2)), "area": float(rng.random()),
                             "box": tfds.features.BBox(0.1, 0.2, 0.3 + j / 10, 0.4),
                             "name": f"o{j}"} for j in range(count)],
                "ragged": [rng.integers(-9, 9, int(rng.integers(0, 4))).astype(np.int32)
                           for _ in range(int(rng.integers(0, 4)))],
                "ragged3": [[rng.random(int(rng.integers(0, 3))).astype(np.float32)
                             for _ in range(int(rng.integers(0, 3)))]
                            for _ in range(int(rng.integers(1, 3)))],
                "words": [f"w{j}" for j in range(i % 3)],
            }


class MediaFamily(_Base):
    """Image (JPEG and PNG; 1, 3 and 4 channels; uint8 and uint16; fixed and varying
    sizes), Video, Sequence of images, Audio."""

    SIZES: ClassVar[dict[str, int]] = {"train": 12, "test": 3}

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=F.FeaturesDict({
            "jpeg": F.Image(encoding_format="jpeg"),
            "jpeg_gray": F.Image(shape=(None, None, 1), encoding_format="jpeg"),
            "png": F.Image(encoding_format="png"),
            "png_gray": F.Image(shape=(None, None, 1)),
            "png_rgba": F.Image(shape=(None, None, 4)),
            "png_u16": F.Image(shape=(None, None, 1), dtype=np.uint16),
            "fixed": F.Image(shape=(16, 12, 3), encoding_format="jpeg"),
            "video": F.Video(shape=(None, 8, 10, 3)),
            "video_jpeg": F.Video(shape=(None, 8, 8, 3), encoding_format="jpeg"),
            "frames": F.Sequence(F.Image(shape=(6, 6, 1))),
            "audio": F.Audio(sample_rate=16000),
            "audio_f": F.Audio(shape=(None, 2), dtype=np.float32, sample_rate=8000),
        }))

    def _generate_examples(self, split, n):
        rng = _rng(split, "media")

        def image(h, w, c, dtype=np.uint8):
            high = 256 if dtype == np.uint8 else 65536
            smooth = np.linspace(0, high - 1, h * w * c).reshape(h, w, c)
            noise = rng.integers(0, high // 8, (h, w, c))
            return ((smooth + noise) % high).astype(dtype)

        for i in range(n):
            h, w = int(rng.integers(8, 40)), int(rng.integers(8, 40))
            t = int(rng.integers(0, 4))
            yield f"{split}-{i}", {
                "jpeg": image(h, w, 3), "jpeg_gray": image(w, h, 1), "png": image(h, w, 3),
                "png_gray": image(h, h, 1), "png_rgba": image(w, w, 4),
                "png_u16": image(h, w, 1, np.uint16), "fixed": image(16, 12, 3),
                "video": np.stack([image(8, 10, 3) for _ in range(t)]) if t else
                np.zeros((0, 8, 10, 3), np.uint8),
                "video_jpeg": np.stack([image(8, 8, 3) for _ in range(t + 1)]),
                "frames": [image(6, 6, 1) for _ in range(i % 3)],
                "audio": rng.integers(-2**15, 2**15, int(rng.integers(0, 50))),
                "audio_f": rng.normal(size=(int(rng.integers(0, 20)), 2)).astype(np.float32),
            }


class RldsFamily(_Base):
    """An RLDS dataset (the layout of Open X-Embodiment's): ``steps`` with a JPEG camera,
    state and action vectors, reward, discount, the is_* flags and a language instruction;
    ``episode_metadata``."""

    SIZES: ClassVar[dict[str, int]] = {"train": 203, "val": 21}

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=F.FeaturesDict({
            "steps": F.Dataset({
                "observation": F.FeaturesDict({
                    "image": F.Image(shape=(16, 16, 3), encoding_format="jpeg"),
                    "state": F.Tensor(shape=(5,), dtype=np.float32),
                }),
                "action": F.Tensor(shape=(3,), dtype=np.float64),
                "reward": F.Scalar(dtype=np.float32),
                "discount": F.Scalar(dtype=np.float32),
                "is_first": np.bool_, "is_last": np.bool_, "is_terminal": np.bool_,
                "language_instruction": F.Text(),
                "contacts": F.Sequence(np.int32),
            }),
            "episode_metadata": F.FeaturesDict({"file_path": F.Text(), "episode_id": np.int64}),
        }))

    def _generate_examples(self, split, n):
        rng = _rng(split, "rlds")
        for i in range(n):
            length = int(rng.integers(1, 12))
            yield f"{split}-{i}", {
                "steps": [{
                    "observation": {
                        "image": rng.integers(0, 256, (16, 16, 3), dtype=np.uint8),
                        "state": rng.normal(size=5).astype(np.float32),
                    },
                    "action": rng.normal(size=3),
                    "reward": float(t == length - 1), "discount": 1.0,
                    "is_first": t == 0, "is_last": t == length - 1,
                    "is_terminal": t == length - 1 and i % 2 == 0,
                    "language_instruction": f"pick up block {i}",
                    "contacts": rng.integers(0, 9, int(rng.integers(0, 3))).astype(np.int32),
                } for t in range(length)],
                "episode_metadata": {"file_path": f"/data/{split}/{i}.h5", "episode_id": i},
            }


class RldsPlain(_Base):
    """An RLDS dataset whose steps hold only flat lists (no sequence, nothing optional): the
    steps are read through the step layout, out of the mapped records. ``counter`` takes
    int64 values of every varint length (negative ones take 10 bytes)."""

    SIZES: ClassVar[dict[str, int]] = {"train": 30}

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=F.FeaturesDict({
            "steps": F.Dataset({
                "observation": {"image": F.Image(shape=(8, 8, 3), encoding_format="jpeg"),
                                "state": F.Tensor(shape=(3,), dtype=np.float32)},
                "action": F.Tensor(shape=(2,), dtype=np.float64),
                "counter": F.Tensor(shape=(2,), dtype=np.int64),
                "flags": F.Tensor(shape=(2,), dtype=np.uint8),
                "is_first": np.bool_, "reward": F.Scalar(dtype=np.float32),
                "instruction": F.Text(),
            }),
        }))

    def _generate_examples(self, split, n):
        rng = _rng(split, "plain")
        for i in range(n):
            length = int(rng.integers(1, 9))
            yield f"{split}-{i}", {"steps": [{
                "observation": {"image": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8),
                                "state": rng.normal(size=3).astype(np.float32)},
                "action": rng.normal(size=2),
                "counter": np.array([int(rng.integers(-2**62, 2**62)),
                                     int(rng.integers(0, 2**(7 * (t % 9) + 1)))], np.int64),
                "flags": rng.integers(0, 256, 2, dtype=np.uint8),
                "is_first": t == 0, "reward": float(t), "instruction": f"step {t} of {i}",
            } for t in range(length)]}


class OrderFamily(_Base):
    """Many small files: the order TFDS reads them in."""

    SIZES: ClassVar[dict[str, int]] = {"train": 700, "val": 40}

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=F.FeaturesDict({"id": np.int64}))

    def _generate_examples(self, split, n):
        for i in range(n):
            yield f"{split}-{i}", {"id": i}


BUILDERS = {"tensor_family": TensorFamily, "sequence_family": SequenceFamily,
            "media_family": MediaFamily, "rlds_family": RldsFamily, "order_family": OrderFamily,
            "rlds_plain": RldsPlain}


def prepare(name: str, data_dir: str) -> str:
    """Write builder ``name`` under ``data_dir`` with TFDS; its builder directory.

    A builder made before its data exists leaves an empty ``mkdtemp("tfds")`` directory
    behind (TFDS's ``DatasetInfo.initialize_from_bucket``): it is made under ``data_dir``,
    which the caller owns, rather than in the machine's temporary directory."""
    scratch = os.path.join(data_dir, ".tfds-scratch")
    os.makedirs(scratch, exist_ok=True)
    saved, tempfile.tempdir = tempfile.tempdir, scratch
    try:
        builder = BUILDERS[name](data_dir=data_dir)
    finally:
        tempfile.tempdir = saved
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(num_shards=SHARDS[name]))
    return os.path.join(data_dir, name, "1.0.0")
