"""A TFDS builder directory: ``dataset_info.json``, ``features.json``, the label files and
the names of each split's files, read without TensorFlow.

A builder directory (``<data_dir>/<name>/<version>/``) holds::

    dataset_info.json      name, version, splits with their files' record counts
    features.json          the feature tree (:mod:`.features`)
    <feature>.labels.txt   a ClassLabel's names, one a line
    <name>-<split>.tfrecord-00000-of-00004 ...

The small files are read through fsspec (local paths and ``gs://``, ``s3://``,
``http(s)://`` URLs alike).
"""

import dataclasses
import json
import os
import posixpath
from collections.abc import Mapping
from typing import Any

from ..errors import DataFileNotFoundError, DecodeError, SourceError, hint
from .features import Feature, label_file_name, parse_features

#: TFDS's file name template when ``dataset_info.json`` names none.
DEFAULT_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
#: The most bytes a metadata file may have: a features.json of thousands of features is
#: ~1 MB; a file far bigger is not TFDS's.
MAX_METADATA_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    """One split of a builder.

    Attributes:
        name: The split's name.
        shard_lengths: Records of each of its files.
        num_bytes: Its size as TFDS recorded it.
        template: Its file name template.
    """

    name: str
    shard_lengths: tuple[int, ...]
    num_bytes: int
    template: str

    @property
    def num_examples(self) -> int:
        """Its number of examples."""
        return sum(self.shard_lengths)


@dataclasses.dataclass(frozen=True)
class BuilderInfo:
    """What a TFDS builder directory says about its dataset.

    Attributes:
        path: The builder directory (as given, without a trailing ``/``).
        name: The dataset's name.
        version: Its version.
        file_format: ``"tfrecord"`` (the only one ofindex reads in place).
        splits: Its splits, in ``dataset_info.json`` order.
        features: The feature tree.
        disable_shuffling: Written in order: read file after file (no interleave).
        description: TFDS's description of the dataset.
    """

    path: str
    name: str
    version: str
    file_format: str
    splits: Mapping[str, SplitInfo]
    features: Feature
    disable_shuffling: bool = False
    description: str = ""

    def shard_path(self, split: str, shard: int) -> str:
        """The path of one file of a split.

        Args:
            split: The split's name.
            shard: The file's number in the split.

        Returns:
            Its path or URL, from the split's file name template.
        """
        info = self.splits[split]
        count = len(info.shard_lengths)
        name = (info.template.replace("{DATASET}", self.name).replace("{SPLIT}", split)
                .replace("{FILEFORMAT}", self.file_format)
                .replace("{SHARD_X_OF_Y}", f"{shard:05d}-of-{count:05d}")
                .replace("{SHARD_INDEX}", f"{shard:05d}").replace("{NUM_SHARDS}", f"{count:05d}"))
        return join(self.path, name)


def join(directory: str, name: str) -> str:
    """``name`` inside ``directory`` (a local path or a URL)."""
    if "://" in directory:
        return posixpath.join(directory, name)
    return os.path.join(directory, name)


def _filesystem(path: str, storage_options: Mapping[str, Any] | None) -> Any:
    from ..transport.clients import filesystem_for

    return filesystem_for(path, storage_options)


def _read_text(fs: Any, path: str) -> str | None:
    """A small file's text, or ``None`` when it does not exist."""
    try:
        with fs.open(path, "rb") as f:
            data: bytes = f.read(MAX_METADATA_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_METADATA_BYTES:
        raise SourceError(f"{path}: more than {MAX_METADATA_BYTES} bytes, not a TFDS "
                          "metadata file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path} is not UTF-8 text ({exc}); is this a TFDS builder "
                          "directory?") from None


def _json(fs: Any, path: str, text: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError(f"{path} is not JSON ({exc}); the TFDS build may be incomplete: "
                          "prepare it again with tensorflow_datasets") from None
    if not isinstance(doc, dict):
        raise SourceError(f"{path} holds a JSON {type(doc).__name__}, not an object")
    return doc


def _splits(doc: Mapping[str, Any], path: str) -> dict[str, SplitInfo]:
    splits = {}
    for entry in doc.get("splits", []):
        try:
            name = str(entry["name"])
            lengths = tuple(int(n) for n in entry.get("shardLengths", []))
            num_bytes = int(entry.get("numBytes", 0))
        except (KeyError, TypeError, ValueError) as exc:
            raise SourceError(f"{path}: a split entry is malformed ({exc!r})") from None
        if any(n < 0 for n in lengths):
            raise SourceError(f"{path}: split {name!r} has a negative shard length")
        splits[name] = SplitInfo(name, lengths, num_bytes,
                                 str(entry.get("filepathTemplate") or DEFAULT_TEMPLATE))
    if not splits:
        raise SourceError(f"{path} lists no splits: the dataset was not prepared (run "
                          "download_and_prepare with tensorflow_datasets)")
    return splits


def _labels(fs: Any, path: str, features: Mapping[str, Any]) -> dict[str, list[str]]:
    """Every ClassLabel's names, by label file name."""
    names: dict[str, list[str]] = {}
    for label_path in _class_labels(features, ""):
        file_name = label_file_name(label_path)
        text = _read_text(fs, join(path, file_name))
        if text is not None:
            names[file_name] = [line.strip() for line in text.splitlines() if line.strip()]
    return names


def _class_labels(node: Any, path: str) -> list[str]:
    """The paths of the ClassLabel features under a features.json node."""
    if not isinstance(node, Mapping):
        return []
    if str(node.get("pythonClassName", "")).endswith(".ClassLabel"):
        return [path]
    found = []
    for name, child in node.get("featuresDict", {}).get("features", {}).items():
        found += _class_labels(child, f"{path}/{name}" if path else name)
    inner = node.get("sequence", {}).get("feature")
    if inner is not None:
        found += _class_labels(inner, path)
    return found


def read_builder(path: str, storage_options: Mapping[str, Any] | None = None) -> BuilderInfo:
    """Read a TFDS builder directory's metadata.

    Args:
        path: The builder directory (``<data_dir>/<name>/<version>``), local or a URL.
        storage_options: Options for the fsspec filesystem (credentials, endpoint ...).

    Returns:
        Its :class:`BuilderInfo`.

    Raises:
        DataFileNotFoundError: ``path`` holds no ``dataset_info.json`` (a
            ``FileNotFoundError``).
        SourceError: A metadata file is malformed, or the files are not TFRecord files.
        DecodeError: ``features.json`` holds a feature ofindex does not decode yet.
    """
    path = path.rstrip("/") or "/"
    fs = _filesystem(path, storage_options)
    info_path = join(path, "dataset_info.json")
    text = _read_text(fs, info_path)
    if text is None:
        raise DataFileNotFoundError(
            f"{info_path} not found: {path} is not a TFDS builder directory; name the "
            "directory holding dataset_info.json (<data_dir>/<name>/<version>), or open "
            f"plain record files with {hint('ofindex.open(path)', 'ofindex info PATH')}")
    info = _json(fs, info_path, text)
    file_format = str(info.get("fileFormat") or "tfrecord").lower()
    if file_format != "tfrecord":
        raise SourceError(f"{info_path}: the dataset is stored as {file_format}; ofindex "
                          "reads TFDS datasets stored as tfrecord (prepare it with "
                          "file_format='tfrecord')")
    features_path = join(path, "features.json")
    features_text = _read_text(fs, features_path)
    if features_text is None:
        raise DataFileNotFoundError(f"{features_path} not found: the build is incomplete, "
                                    "or was written by a TFDS older than 4.0")
    features_doc = _json(fs, features_path, features_text)
    try:
        features = parse_features(features_doc, _labels(fs, path, features_doc))
    except DecodeError as exc:
        raise DecodeError(f"{features_path}: {exc}") from None
    return BuilderInfo(
        path=path, name=str(info.get("name", "")), version=str(info.get("version", "")),
        file_format=file_format, splits=_splits(info, info_path), features=features,
        disable_shuffling=bool(info.get("disableShuffling", False)),
        description=str(info.get("description", "")))
