"""Small Example datasets for the framework integration tests (TensorFlow, Keras, HF): record
``r`` (numbered across shards) has ``id = r``, ``x = [r, r + 0.5]``, ``m`` = 2x3 values
``r*10 + 0..5``, ``tags = [0 .. r % 4)`` (ragged, often empty), ``name = b"r<r>"`` and, on
every third record only, ``y``; the spec decodes ``y`` with a default of -1."""

from __future__ import annotations

import os

from ofindex.decode import FixedLen, VarLen
from ofindex.proto import example_pb2
from tests.kit.helpers import write_shards

SPEC = {"id": FixedLen((), "int64"), "x": FixedLen((2,), "float32"),
        "m": FixedLen((2, 3), "float32"), "tags": VarLen("int64"),
        "name": FixedLen((), "bytes"), "y": FixedLen((), "float32", default=-1.0)}


def example(rid: int) -> bytes:
    ex = example_pb2.Example()
    f = ex.features.feature
    f["id"].int64_list.value.append(rid)
    f["x"].float_list.value.extend([rid, rid + 0.5])
    f["m"].float_list.value.extend([rid * 10 + k for k in range(6)])
    f["tags"].int64_list.value.extend(range(rid % 4))
    f["name"].bytes_list.value.append(b"r%d" % rid)
    if rid % 3 == 0:
        f["y"].float_list.value.append(rid / 100)
    return ex.SerializeToString()


def write_examples(directory, sizes: list[int]) -> str:
    """Shards of ``sizes`` records, indexed; returns a glob of them."""
    import ofindex

    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    write_shards(directory, sizes, lambda s, i: example(starts[s] + i))
    pattern = os.path.join(str(directory), "part-*.tfrecord")
    ofindex.build_index(pattern)
    return pattern
