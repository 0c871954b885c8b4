"""Comparisons with tensorflow_datasets for the tests of ofindex.tfds: what tfds.as_numpy
yields for a split (examples, or the steps of an RLDS split), and ``assert_same``, which
holds when ofindex's value equals TFDS's in structure, dtype, shape and every value."""

from __future__ import annotations

import json

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds


def read_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def tfds_examples(builder_dir: str, split: str) -> list:
    builder = tfds.builder_from_directory(builder_dir)
    return list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)))


def assert_same(ours, theirs, where: str = "") -> None:
    """``ours`` equals TFDS's value: same structure, dtypes, shapes and values."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), where
        assert list(ours) == list(theirs) or set(ours) == set(theirs), where
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{where}/{key}")
        return
    if isinstance(theirs, (tf.RaggedTensor, tf.compat.v1.ragged.RaggedTensorValue)):
        theirs = theirs.to_list()
    if isinstance(theirs, list):
        assert isinstance(ours, list), (where, type(ours))
        assert len(ours) == len(theirs), where
        for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert _plain(a) == _plain(b), f"{where}[{k}]"
        return
    if isinstance(theirs, bytes):
        assert isinstance(ours, bytes) and ours == theirs, where
        return
    if not isinstance(theirs, (np.ndarray, np.generic)):  # a nested dataset: its steps
        steps = list(theirs)
        assert isinstance(ours, dict), where
        for key in ours:
            column = [s[key] for s in steps]
            if isinstance(ours[key], dict):
                assert_same(ours[key], {k: _stack([c[k] for c in column], ours[key][k])
                                        for k in ours[key]}, f"{where}/{key}")
            else:
                assert_same(ours[key], _stack(column, ours[key]), f"{where}/{key}")
        return
    ours_array, theirs_array = np.asarray(ours), np.asarray(theirs)
    assert type(ours) is type(theirs) or isinstance(ours, np.ndarray), (where, type(ours))
    assert ours_array.dtype == theirs_array.dtype, (where, ours_array.dtype, theirs_array.dtype)
    assert ours_array.shape == theirs_array.shape, (where, ours_array.shape, theirs_array.shape)
    if theirs_array.dtype == object:
        assert ours_array.tolist() == theirs_array.tolist(), where
    else:
        np.testing.assert_array_equal(ours_array, theirs_array, err_msg=where)


def _plain(value):
    """Nested lists of arrays (ours) or lists (TFDS's ragged ``to_list``) as plain lists."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return np.asarray(value).tolist()


def _stack(column: list, like):
    if isinstance(like, list):
        return [c.to_list() if hasattr(c, "to_list") else c for c in column]
    if not column:
        return np.empty(np.shape(like), dtype=np.asarray(like).dtype)
    if isinstance(column[0], bytes):  # TF strings are object arrays of bytes
        out = np.empty(len(column), dtype=object)
        out[:] = column
        return out
    return np.stack(column)


def tfds_steps(builder_dir: str, split: str) -> list:
    """The steps of an RLDS split as users read them today: ``flat_map`` over the episodes."""
    builder = tfds.builder_from_directory(builder_dir)
    episodes = builder.as_dataset(split=split, shuffle_files=False)
    return list(tfds.as_numpy(episodes.flat_map(lambda e: e["steps"])))
