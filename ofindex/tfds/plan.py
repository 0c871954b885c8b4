"""How an example's stored features become what ``tfds.as_numpy`` yields.

:class:`DecodePlan` names the ``tf.train.Example`` features a TFDS feature tree is stored
as (the spec given to :func:`ofindex.decode.decode_batch`: one decode of every record of a
batch at once) and rebuilds each example from them: shapes restored, integers and booleans
cast back from ``int64``, floats from ``float32``, ``bytes``/``zlib`` tensors inflated and
read, images decoded (:mod:`.media`), sequences stacked, nested variable-length sequences
given as lists of arrays (TFDS gives ``tf.RaggedTensor``).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..decode import Ragged, VarLen, decode_batch
from ..errors import DecodeError
from .features import Feature, fixed_size
from .media import decode_frames

#: Raw feature values of one example: ``{example feature name: 1-D array}``.
Raw = Mapping[str, np.ndarray]
#: The ``tf.train.Example`` list a value type is stored in.
_FLOATS = ("float16", "float32", "float64")
_BYTES = np.dtype(object)


def stored_type(feature: Feature) -> str:
    """The ``tf.train.Example`` list type TFDS stores ``feature``'s values in."""
    if feature.kind in ("Image", "Text") or feature.encoding in ("bytes", "zlib") \
            or feature.dtype == _BYTES:
        return "bytes"
    return "float32" if feature.dtype.name in _FLOATS else "int64"


def _leaves(feature: Feature, rank: int) -> list[tuple[Feature, int]]:
    """The stored leaves under ``feature`` with the number of sequences above each."""
    if feature.kind == "FeaturesDict":
        return [leaf for child in feature.children.values() for leaf in _leaves(child, rank)]
    if feature.kind in ("Sequence", "Dataset", "Video"):
        assert feature.item is not None
        return _leaves(feature.item, rank + 1)
    return [(feature, rank)]


def _dynamic(feature: Feature) -> bool:
    """A bytes-encoded tensor stored with its shape (more than one unknown dimension)."""
    return feature.encoding in ("bytes", "zlib") and feature.shape.count(None) > 1


def example_spec(root: Feature) -> dict[str, VarLen]:
    """The features every example of ``root`` is stored as, for ``ofindex.decode``.

    Raises:
        DecodeError: A layout ofindex does not decode yet (the message names the feature).
    """
    spec: dict[str, VarLen] = {}
    for leaf, rank in _leaves(root, 0):
        kind = stored_type(leaf)
        if rank >= 2:
            if leaf.kind not in ("Tensor", "Scalar", "ClassLabel", "Text", "BBoxFeature") \
                    or leaf.encoding != "none":
                raise DecodeError(f"feature {leaf.path!r}: a {leaf.kind} under {rank} nested "
                                  "sequences is not decoded by ofindex yet")
            spec[f"{leaf.path}/ragged_flat_values"] = VarLen(kind)
            for level in range(rank - 1):
                spec[f"{leaf.path}/ragged_row_lengths_{level}"] = VarLen("int64")
        elif _dynamic(leaf):
            spec[f"{leaf.path}/value"] = VarLen("bytes")
            spec[f"{leaf.path}/shape"] = VarLen("int64")
        else:
            spec[leaf.path] = VarLen(kind)
    return spec


def _cast(values: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """Stored values back to the feature's dtype, as TFDS's parser casts them."""
    if dtype == _BYTES or values.dtype == dtype:
        return values
    if dtype == np.dtype(np.uint64):
        return values.view(np.uint64)
    if dtype == np.dtype(np.bool_):
        flags: np.ndarray = values != 0
        return flags
    return values.astype(dtype)


def _fill(feature: Feature) -> np.ndarray:
    """TFDS's value for an optional tensor left out: the dtype's minimum (``b''``, False)."""
    dtype = feature.dtype
    if dtype == _BYTES:
        value: Any = b""
    elif dtype == np.dtype(np.bool_):
        value = False
    elif dtype.kind in "iu":
        value = np.iinfo(dtype).min
    else:
        value = np.finfo(dtype).min
    shape = tuple(d or 0 for d in feature.shape)
    filled: np.ndarray = np.full(shape, value, dtype=dtype)
    return filled


def _scalar(array: np.ndarray, lead: tuple[int, ...], shape: tuple[int | None, ...]) -> Any:
    """A 0-d result as numpy gives one element (``np.int64``, ``bytes``)."""
    if not lead and not shape:
        return array.reshape(())[()]
    return array


class DecodePlan:
    """Decodes the examples of one TFDS feature tree.

    Args:
        features: The root of the tree (a ``FeaturesDict``).

    Raises:
        DecodeError: The tree holds a layout ofindex does not decode yet.
    """

    def __init__(self, features: Feature) -> None:
        self.features = features
        self.spec = example_spec(features)

    def raw_batch(self, records: Sequence[Any]) -> list[dict[str, np.ndarray]]:
        """Every stored feature of each record: one decode of the whole batch.

        Raises:
            DecodeError: A record is not a ``tf.train.Example`` of this tree.
        """
        decoded = decode_batch(records, self.spec)
        assert isinstance(decoded, dict)
        splits = {key: (value.values, value.row_splits) for key, value in decoded.items()
                  if isinstance(value, Ragged)}
        return [{key: values[bounds[k]:bounds[k + 1]] for key, (values, bounds)
                 in splits.items()} for k in range(len(records))]

    def decode_batch(self, records: Sequence[Any], *,
                     select: Callable[[Raw], Raw] | None = None) -> list[dict[str, Any]]:
        """Decode records to examples as ``tfds.as_numpy`` yields them.

        Args:
            records: Serialized ``tf.train.Example`` records of this tree.
            select: Applied to each record's raw features before decoding (the steps view
                keeps one step).

        Raises:
            DecodeError: A record does not match the tree (the message names the feature).
        """
        return [self.decode(select(raw) if select is not None else raw)
                for raw in self.raw_batch(records)]

    def decode(self, raw: Raw, feature: Feature | None = None,
               lead: tuple[int, ...] = ()) -> Any:
        """One example (or the part of it under ``feature``) from its raw features.

        Args:
            raw: ``{stored feature name: 1-D array}``.
            feature: The subtree to decode (the root by default).
            lead: The lengths of the sequences above ``feature`` in this example.

        Raises:
            DecodeError: The stored values do not fit the feature (the message names it).
        """
        node = self.features if feature is None else feature
        if node.kind == "FeaturesDict":
            return {name: self.decode(raw, child, lead) for name, child in node.children.items()}
        if node.kind in ("Sequence", "Dataset", "Video"):
            return self._sequence(raw, node, lead)
        if node.kind == "Image":
            return self._images(raw, node, lead)
        if node.encoding in ("bytes", "zlib"):
            return self._encoded(raw, node, lead)
        return self._tensor(raw, node, lead)

    def _values(self, raw: Raw, key: str) -> np.ndarray:
        try:
            return raw[key]
        except KeyError:
            raise DecodeError(f"stored feature {key!r} was not decoded") from None

    def _tensor(self, raw: Raw, node: Feature, lead: tuple[int, ...]) -> Any:
        values = self._values(raw, node.path)
        size = fixed_size(node.shape)
        if node.optional and values.size == 0 and size != 0:
            fill = _fill(node)
            values = np.broadcast_to(fill, (*lead, *fill.shape)).reshape(-1)
        shape = (*lead, *(-1 if d is None else d for d in node.shape))
        try:
            array = values.reshape(shape)
        except ValueError:
            raise DecodeError(f"feature {node.path!r} holds {values.size} values, which do "
                              f"not fit its shape {node.shape} (sequence lengths "
                              f"{list(lead)})") from None
        return _scalar(_cast(array, node.dtype), lead, node.shape)

    def _encoded(self, raw: Raw, node: Feature, lead: tuple[int, ...]) -> Any:
        dynamic = _dynamic(node)
        blobs = self._values(raw, f"{node.path}/value" if dynamic else node.path)
        shapes = (self._values(raw, f"{node.path}/shape").reshape(len(blobs), -1)
                  if dynamic else None)
        items = []
        for k, blob in enumerate(blobs):
            data = zlib.decompress(blob) if node.encoding == "zlib" else blob
            flat = np.frombuffer(data, dtype=node.dtype)
            shape = tuple(int(d) for d in shapes[k]) if shapes is not None else tuple(
                -1 if d is None else d for d in node.shape)
            try:
                items.append(flat.reshape(shape))
            except ValueError:
                raise DecodeError(f"feature {node.path!r}: {flat.size} values do not fit "
                                  f"shape {shape}") from None
        if not lead:
            if len(items) != 1:
                raise DecodeError(f"feature {node.path!r} holds {len(items)} values, not 1")
            return items[0]
        return np.stack(items).reshape(*lead, *items[0].shape) if items else np.empty(
            (*lead, *(d or 0 for d in node.shape)), node.dtype)

    def _images(self, raw: Raw, node: Feature, lead: tuple[int, ...]) -> np.ndarray:
        blobs = self._values(raw, node.path)
        if len(blobs) != math.prod(lead):
            raise DecodeError(f"image {node.path!r}: {len(blobs)} images stored, "
                              f"{math.prod(lead)} expected")
        frames = decode_frames(list(blobs), node)
        shaped: np.ndarray = frames[0] if not lead else frames.reshape(*lead, *frames.shape[1:])
        return shaped

    def _sequence(self, raw: Raw, node: Feature, lead: tuple[int, ...]) -> Any:
        assert node.item is not None
        ragged, depth = _ragged_leaf(node)
        if lead and node.length is None:
            if ragged is None:
                raise DecodeError(f"feature {node.path!r}: a variable-length sequence inside "
                                  "another sequence holds something ofindex does not "
                                  "decode yet")
            return self._ragged(raw, ragged, depth)
        count = node.length if node.length is not None else self.count(raw, node)
        return self.decode(raw, node.item, (*lead, count))

    def _ragged(self, raw: Raw, leaf: Feature, depth: int) -> list[Any]:
        """A leaf under ``depth`` nested variable-length sequences inside a sequence: nested
        lists of arrays (TFDS gives a ``tf.RaggedTensor``)."""
        flat = _cast(self._values(raw, f"{leaf.path}/ragged_flat_values"), leaf.dtype)
        inner = tuple(-1 if d is None else d for d in leaf.shape)
        rows: Any = flat.reshape(-1, *inner) if inner else flat
        for level in reversed(range(depth)):  # innermost rows first
            rows = _split(rows, self._values(raw, f"{leaf.path}/ragged_row_lengths_{level}"))
        return list(rows)

    def count(self, raw: Raw, node: Feature) -> int:
        """The number of elements of the (outermost) variable-length sequence ``node`` in
        this example.

        Raises:
            DecodeError: No stored feature of the sequence tells its length.
        """
        assert node.item is not None
        for leaf, rank in _leaves(node.item, 1):
            if leaf.optional:
                continue
            if rank >= 2:
                return len(self._values(raw, f"{leaf.path}/ragged_row_lengths_0"))
            if _dynamic(leaf):
                return len(self._values(raw, f"{leaf.path}/value"))
            size = 1 if stored_type(leaf) == "bytes" else fixed_size(leaf.shape)
            if size:
                return len(self._values(raw, leaf.path)) // size
        raise DecodeError(f"sequence {node.path!r}: none of its features tells its length "
                          "(each is optional, empty or of variable size)")


def _ragged_leaf(sequence: Feature) -> tuple[Feature | None, int]:
    """The tensor under a chain of variable-length sequences starting at ``sequence``, if
    that is all there is, and the length of the chain."""
    node, depth = sequence, 0
    while node.kind == "Sequence" and node.length is None and node.item is not None:
        node, depth = node.item, depth + 1
    if node.kind in ("Tensor", "Scalar", "ClassLabel", "Text", "BBoxFeature"):
        return node, depth
    return None, depth


def _split(values: Any, lengths: np.ndarray) -> list[Any]:
    """``values`` cut into consecutive rows of ``lengths``."""
    bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    if bounds[-1] != len(values):
        raise DecodeError(f"ragged rows of {int(bounds[-1])} values over {len(values)} values")
    return [values[bounds[k]:bounds[k + 1]] for k in range(len(lengths))]
