"""Random records with known features for the column tests, written with protobuf's own
messages (not ofindex.encode), and the column values the documented rule gives them: one
value per record, ``None`` where the record lacks the feature or holds an empty list."""

from __future__ import annotations

import gzip
import os

import numpy as np

import ofindex
from ofindex.columns.key_build import _bytes_order
from ofindex.columns.key_file import KeyIndex, encode_key_index
from ofindex.columns.packed import PackedBytes
from ofindex.columns.value_types import ValueType
from ofindex.proto import example_pb2, ofrecord_pb2

#: The features every generated record may hold: a label (int), an id (unique bytes), a score.
NAMES = ("label", "image/id", "score")


def _example(label, ident, score, sequence: bool, padding: bytes) -> bytes:
    msg = example_pb2.SequenceExample() if sequence else example_pb2.Example()
    features = msg.context if sequence else msg.features
    if label is not None:
        features.feature["label"].int64_list.value.append(label)
    elif padding[:1] == b"e":  # an empty list: no value, as a missing feature
        features.feature["label"].int64_list.SetInParent()
    if ident is not None:
        features.feature["image/id"].bytes_list.value.append(ident)
    if score is not None:
        features.feature["score"].float_list.value.append(score)
    features.feature["pad"].bytes_list.value.append(padding)
    if sequence:
        step = msg.feature_lists.feature_list["frames"].feature.add()
        step.int64_list.value.append(7)
    return msg.SerializeToString()


def _ofrecord(label, ident, score, padding: bytes) -> bytes:
    msg = ofrecord_pb2.OFRecord()
    if label is not None:
        msg.feature["label"].int32_list.value.append(label)
    if ident is not None:
        msg.feature["image/id"].bytes_list.value.append(ident)
    if score is not None:
        msg.feature["score"].double_list.value.append(score)
    msg.feature["pad"].bytes_list.value.append(padding)
    return msg.SerializeToString()


def records(seed: int, n: int, kind: str = "example", *, classes: int = 5,
            missing: float = 0.1) -> tuple[list[bytes], dict[str, list[object]]]:
    """``n`` records of ``kind`` (``example``, ``sequence`` or ``ofrecord``) and the column
    values of each feature of :data:`NAMES` (``None``: no value).

    Labels are in ``[0, classes)`` (``-classes`` for some OFRecord ones: int32 negatives),
    ids ``b"id-<seed>-<i>"`` (unique), scores float32 (float64 for OFRecord)."""
    rng = np.random.default_rng(seed)
    out, truth = [], {name: [] for name in NAMES}
    for i in range(n):
        label = int(rng.integers(0, classes)) if rng.random() >= missing else None
        if kind == "ofrecord" and label is not None and rng.random() < 0.1:
            label = -label - 1
        ident = b"id-%d-%d" % (seed, i) if rng.random() >= missing / 2 else None
        score = float(rng.random()) if rng.random() >= missing else None
        if kind != "ofrecord" and score is not None:
            score = float(np.float32(score))
        padding = bytes(rng.integers(97, 123, int(rng.integers(0, 40)), dtype=np.uint8))
        if kind == "ofrecord":
            out.append(_ofrecord(label, ident, score, padding))
        else:
            out.append(_example(label, ident, score, kind == "sequence" and i % 3 == 0,
                                padding))
        truth["label"].append(label)
        truth["image/id"].append(ident)
        truth["score"].append(score)
    return out, truth


def write_dataset(directory: str, shards: list[list[bytes]], *, kind: str = "example",
                  compressed: bool = False) -> str:
    """Write the shards as ``part-<k>`` TFRecord (or OFRecord) files, gzip-compressed when
    asked, without indexing them. Returns the directory."""
    os.makedirs(directory, exist_ok=True)
    fmt = "ofrecord" if kind == "ofrecord" else "tfrecord"
    for k, shard in enumerate(shards):
        path = os.path.join(directory, f"part-{k:03d}")
        with ofindex.Writer(path, format=fmt, index=False) as writer:
            for payload in shard:
                writer.write(payload)
        if compressed:
            with open(path, "rb") as f:
                data = f.read()
            os.remove(path)
            with gzip.open(path + ".gz", "wb") as f:
                f.write(data)
    return directory


def cut(items: list, sizes: list[int]) -> list[list]:
    """``items`` cut into consecutive runs of ``sizes`` (the rest dropped)."""
    out, at = [], 0
    for size in sizes:
        out.append(items[at:at + size])
        at += size
    return out


def opened_key_index(vtype, values, leaf_entries, fanout):
    """A key index of ``values`` (record ``i`` holds ``values[i]``), opened from memory."""
    n = len(values)
    if vtype is ValueType.BYTES:
        packed = PackedBytes.from_list(values)
        order = _bytes_order(packed) if n else np.zeros(0, dtype=np.int64)
        keys = packed.take(order)
    else:
        numbers = np.array(values, dtype=vtype.dtype)
        order = np.argsort(numbers, kind="stable")
        keys = numbers[order]
    raw = b"".join(encode_key_index("k", vtype, keys, order.astype(np.int64), n, "00ff" * 4,
                                    leaf_entries=leaf_entries, fanout=fanout))
    return KeyIndex.open(lambda ranges: [raw[a:b] for a, b in ranges], "x.ofkey", len(raw))
