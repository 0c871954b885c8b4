"""A TFDS ``features.json`` read into a tree of features, each knowing how it is stored.

TFDS writes every example as one ``tf.train.Example`` whose feature names are the paths of
the leaves of the tree (``steps/observation/image``), each holding the values flattened
(``int64_list`` for integers and booleans, ``float_list`` for floats, float64 included,
``bytes_list`` for strings and encoded media). A leaf under ``n`` nested variable-length
``Sequence``s is stored as ``<path>/ragged_flat_values`` and ``<path>/ragged_row_lengths_k``
for ``k < n - 1``. This module reads that tree without TensorFlow; :mod:`.plan` decodes it.
"""

import dataclasses
import math
from collections.abc import Iterator, Mapping
from typing import Any, Optional

import numpy as np

from ..errors import DecodeError

#: The element types a TFDS ``Tensor`` may have, by the name ``features.json`` gives them.
DTYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(name) for name in (
        "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
        "float16", "float32", "float64")
}
#: The dtype of bytes values (TFDS's ``tf.string``).
_OBJECT: np.dtype[Any] = np.dtype(object)
#: TFDS's class names, by the last part of ``pythonClassName``.
_TENSOR_CLASSES = {"Tensor", "Scalar", "Audio", "BBoxFeature", "ClassLabel", "Text"}


@dataclasses.dataclass(frozen=True)
class Feature:
    """One node of a TFDS feature tree.

    Attributes:
        path: The feature's key path from the root, ``"/"``-joined (``""`` for the root).
        kind: TFDS's class name: ``FeaturesDict``, ``Tensor``, ``Scalar``, ``ClassLabel``,
            ``Text``, ``Image``, ``Video``, ``Audio``, ``BBoxFeature``, ``Sequence`` or
            ``Dataset``.
        shape: The decoded shape of one value (``None`` for a dimension that varies);
            ``()`` for a dictionary.
        dtype: The decoded element type: a numpy dtype, or ``object`` for bytes.
        children: A dictionary's features, in ``features.json`` order.
        item: A ``Sequence``'s (or ``Dataset``'s) element feature.
        length: A ``Sequence``'s fixed length, or ``None``.
        encoding: A ``Tensor``'s ``"none"``, ``"bytes"`` or ``"zlib"``; an image's
            ``"png"``/``"jpeg"`` (or ``""``, unset).
        optional: A ``Tensor`` that may be absent (decoded to TFDS's fill value).
        num_classes: A ``ClassLabel``'s number of classes.
        names: A ``ClassLabel``'s class names (from ``<feature>.labels.txt``), else ``None``.
    """

    path: str
    kind: str
    shape: tuple[int | None, ...] = ()
    dtype: np.dtype[Any] = _OBJECT
    children: Mapping[str, "Feature"] = dataclasses.field(default_factory=dict)
    item: Optional["Feature"] = None  # a type, not a string: help() shows it
    length: int | None = None
    encoding: str = "none"
    optional: bool = False
    num_classes: int | None = None
    names: tuple[str, ...] | None = None

    def __getitem__(self, key: str) -> "Feature":
        """A child of a dictionary (or of a sequence's element dictionary).

        Args:
            key: The child's name.

        Returns:
            The child feature.

        Raises:
            KeyError: No such feature (the message lists the ones there are).
        """
        node = self.item if self.item is not None and not self.children else self
        if node is not None and key in node.children:
            return node.children[key]
        known = ", ".join(node.children) if node is not None else ""
        raise KeyError(f"{self.path or 'the features'} has no feature {key!r} (it has: "
                       f"{known or 'none'})")

    @property
    def is_dataset(self) -> bool:
        """Whether this is a ``Dataset`` feature (RLDS ``steps``)."""
        return self.kind == "Dataset"

    def int2str(self, value: int) -> str:
        """A ``ClassLabel``'s name for class ``value``.

        Args:
            value: The class number (the decoded label).

        Returns:
            Its name.

        Raises:
            ValueError: The feature has no names, or ``value`` is not one of its classes.
        """
        if self.names is None:
            raise ValueError(f"feature {self.path!r} has no class names (no "
                             f"{label_file_name(self.path)} beside features.json)")
        if not 0 <= value < len(self.names):
            raise ValueError(f"feature {self.path!r} has {len(self.names)} classes, not "
                             f"class {value}")
        return self.names[value]

    def describe(self) -> str:
        """One line naming the type, shape and dtype (what ``ofindex schema`` prints).

        Returns:
            E.g. ``Image(shape=(None, None, 3), dtype=uint8, encoding=jpeg)``.
        """
        if self.kind == "FeaturesDict":
            return "FeaturesDict"
        if self.kind in ("Sequence", "Dataset"):
            inner = self.item.describe() if self.item is not None else "?"
            length = "None" if self.length is None else str(self.length)
            return f"{self.kind}(length={length}, of {inner})"
        dims = ", ".join("None" if d is None else str(d) for d in self.shape)
        dtype = "bytes" if self.dtype == np.dtype(object) else self.dtype.name
        extra = ""
        if self.kind == "ClassLabel":
            extra = f", num_classes={self.num_classes}"
        elif self.encoding not in ("none", ""):
            extra = f", encoding={self.encoding}"
        return f"{self.kind}(shape=({dims}{',' if len(self.shape) == 1 else ''}), " \
               f"dtype={dtype}{extra})"

    def walk(self, depth: int = 0) -> Iterator[tuple[int, str, "Feature"]]:
        """Every feature under this one, depth first.

        Args:
            depth: The depth given to this feature's children.

        Yields:
            ``(depth, name, feature)`` for each feature under this one.
        """
        node = self.item if self.kind in ("Sequence", "Dataset") else self
        if node is None:
            return
        for name, child in node.children.items():
            yield depth, name, child
            yield from child.walk(depth + 1)


def label_file_name(path: str) -> str:
    """The file TFDS writes a ``ClassLabel``'s names to: dictionary keys joined by ``-``,
    a ``/`` inside one key written ``.`` (``objects/label`` -> ``objects-label.labels.txt``)."""
    return "-".join(path.split("/")) + ".labels.txt"


def _shape(node: Mapping[str, Any], path: str) -> tuple[int | None, ...]:
    dims = node.get("shape", {}).get("dimensions", [])
    try:
        values = [int(d) for d in dims]
    except (TypeError, ValueError):
        raise DecodeError(f"features.json: feature {path!r} has shape {dims!r}, not a list "
                          "of integers") from None
    if any(d < -1 for d in values):
        raise DecodeError(f"features.json: feature {path!r} has a negative dimension {dims}")
    return tuple(None if d == -1 else d for d in values)


def _dtype(node: Mapping[str, Any], path: str, default: str = "") -> np.dtype[Any]:
    name = str(node.get("dtype", default)).lower()
    if name in ("string", "object", "str"):
        return np.dtype(object)
    if name not in DTYPES:
        raise DecodeError(f"features.json: feature {path!r} has dtype {name!r}, which TFDS "
                          "examples in TFRecord files cannot hold (or ofindex does not "
                          f"decode yet); known: string, {', '.join(DTYPES)}")
    return DTYPES[name]


def parse_features(doc: Mapping[str, Any], labels: Mapping[str, list[str]] | None = None,
                   path: str = "") -> Feature:
    """Read one node of ``features.json`` (and, recursively, its children).

    Args:
        doc: The node as ``json.load`` gives it.
        labels: Class names by label file name (``lab.labels.txt``: ``[...]``).
        path: The node's key path.

    Returns:
        The feature tree.

    Raises:
        DecodeError: A feature type or setting ofindex does not decode yet, or a malformed
            node; the message names the feature.
    """
    if not isinstance(doc, Mapping):
        raise DecodeError(f"features.json: feature {path or 'root'!r} is not an object")
    kind = str(doc.get("pythonClassName", "")).rpartition(".")[2]
    labels = labels or {}
    if kind == "FeaturesDict" or (not kind and "featuresDict" in doc):
        entries = doc.get("featuresDict", {}).get("features", {})
        if not isinstance(entries, Mapping):
            raise DecodeError(f"features.json: dictionary {path or 'root'!r} has no features")
        children = {name: parse_features(child, labels, f"{path}/{name}" if path else name)
                    for name, child in entries.items()}
        return Feature(path, "FeaturesDict", children=children)
    if kind in ("Sequence", "Dataset"):
        return _sequence(doc, kind, labels, path)
    if kind in ("Image", "Video"):
        return _image(doc, kind, path)
    if kind in _TENSOR_CLASSES:
        return _tensor(doc, kind, labels, path)
    raise DecodeError(f"feature {path!r} is a TFDS {kind or 'unnamed'} feature, which "
                      "ofindex does not decode yet; open the dataset with "
                      "tensorflow_datasets, or ask for it in an issue")


def _sequence(doc: Mapping[str, Any], kind: str, labels: Mapping[str, list[str]],
              path: str) -> Feature:
    body = doc.get("sequence", {})
    item = parse_features(body.get("feature", {}), labels, path)
    length = int(body.get("length", -1))
    return Feature(path, kind, item=item, length=None if length < 0 else length)


def _image(doc: Mapping[str, Any], kind: str, path: str) -> Feature:
    body = doc.get("image" if kind == "Image" else "video", {})
    shape = _shape(body, path)
    dtype = _dtype(body, path, "uint8")
    if dtype not in (np.dtype(np.uint8), np.dtype(np.uint16)) or body.get("useColormap"):
        raise DecodeError(f"feature {path!r}: TFDS images of dtype {dtype.name}"
                          f"{' with a colormap' if body.get('useColormap') else ''} are not "
                          "decoded by ofindex yet (uint8 and uint16 images are)")
    encoding = str(body.get("encodingFormat", "")).lower()
    if kind == "Video":
        if len(shape) != 4:
            raise DecodeError(f"features.json: video {path!r} has shape {shape}, not "
                              "(frames, height, width, channels)")
        frame = Feature(path, "Image", shape[1:], dtype, encoding=encoding)
        return Feature(path, "Video", shape, dtype, item=frame, length=shape[0],
                       encoding=encoding)
    if len(shape) != 3 or shape[2] not in (1, 2, 3, 4):
        raise DecodeError(f"features.json: image {path!r} has shape {shape}, not "
                          "(height, width, channels) with 1 to 4 channels")
    return Feature(path, "Image", shape, dtype, encoding=encoding)


def _tensor(doc: Mapping[str, Any], kind: str, labels: Mapping[str, list[str]],
            path: str) -> Feature:
    if kind == "ClassLabel":
        count = doc.get("classLabel", {}).get("numClasses")
        names = labels.get(label_file_name(path))
        return Feature(path, kind, (), np.dtype(np.int64), num_classes=None if count is None
                       else int(count), names=None if names is None else tuple(names))
    if kind == "Text":
        return Feature(path, kind, (), np.dtype(object))
    body = doc.get({"Audio": "audio", "BBoxFeature": "boundingBox"}.get(kind, "tensor"), {})
    if kind == "Audio" and body.get("fileFormat"):
        raise DecodeError(f"feature {path!r}: TFDS audio stored as {body['fileFormat']} "
                          "files is not decoded by ofindex yet (audio stored as samples is)")
    shape = _shape(body, path)
    encoding = str(body.get("encoding", "none")).lower()
    if encoding not in ("none", "bytes", "zlib"):
        raise DecodeError(f"feature {path!r} has encoding {encoding!r}; ofindex decodes "
                          "none, bytes and zlib")
    if encoding == "none" and shape.count(None) > 1:
        raise DecodeError(f"features.json: feature {path!r} has shape {shape} with more "
                          "than one unknown dimension but no encoding")
    dtype = _dtype(body, path, "float32" if kind == "BBoxFeature" else "")
    return Feature(path, kind, shape, dtype, encoding=encoding,
                   optional=bool(body.get("optional", False)))


def fixed_size(shape: tuple[int | None, ...]) -> int | None:
    """The number of values of a shape, or ``None`` when a dimension varies."""
    if any(d is None for d in shape):
        return None
    return math.prod(d for d in shape if d is not None)
