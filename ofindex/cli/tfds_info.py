"""``ofindex info`` and ``ofindex schema`` on a TFDS builder directory: its splits, their
example and file counts, and the feature tree of ``features.json`` (read without opening
the records: nothing is indexed)."""

import argparse
import json
import os
import sys
from typing import Any

from ..errors import DataFileNotFoundError, OfindexError
from ..tfds import BuilderInfo, Feature, read_builder

Options = dict[str, Any]


def builder_of(args: argparse.Namespace, options: Options) -> BuilderInfo | None:
    """The TFDS builder directory the command names, if it names one (one path holding
    ``dataset_info.json``), else ``None`` (the command reads record files)."""
    if len(args.paths) != 1:
        return None
    path = str(args.paths[0])
    if "://" not in path:
        if not os.path.isfile(os.path.join(os.path.expanduser(path), "dataset_info.json")):
            return None
        return read_builder(os.path.expanduser(path))
    if path.rstrip("/").rsplit("/", 1)[-1].count(".") > 2:  # a file name, not a version dir
        return None
    try:
        return read_builder(path, options)
    except DataFileNotFoundError:  # no dataset_info.json there: record files
        return None
    except OfindexError:  # a builder directory whose metadata is wrong: say so
        raise
    except (ImportError, OSError, ValueError):  # a store the normal path reports in its own
        return None  # words: a missing extra, an unknown protocol, no access


def _tree(feature: Feature) -> dict[str, Any]:
    out: dict[str, Any] = {"type": feature.kind, "describe": feature.describe()}
    if feature.names is not None:
        out["names"] = list(feature.names)
    node = feature.item if feature.kind in ("Sequence", "Dataset") else feature
    if node is not None and node.children:
        out["features"] = {name: _tree(child) for name, child in node.children.items()}
    return out


def _as_dict(info: BuilderInfo) -> dict[str, Any]:
    return {
        "tfds": info.name, "version": info.version, "path": info.path,
        "file_format": info.file_format,
        "splits": {name: {"examples": s.num_examples, "files": len(s.shard_lengths),
                          "bytes": s.num_bytes} for name, s in info.splits.items()},
        "features": _tree(info.features),
    }


def print_features(info: BuilderInfo) -> None:
    """The feature tree, one feature a line, indented by depth."""
    print("features:")
    for depth, name, feature in info.features.walk():
        names = ""
        if feature.names is not None:
            shown = ", ".join(feature.names[:8])
            names = f" [{shown}{', …' if len(feature.names) > 8 else ''}]"
        print(f"{'  ' * (depth + 1)}{name}: {feature.describe()}{names}")


def cmd_info(args: argparse.Namespace, info: BuilderInfo) -> int:
    """``ofindex info`` on a TFDS builder directory."""
    if args.json:
        print(json.dumps(_as_dict(info), indent=2))
        return 0
    print(f"tfds:    {info.name} {info.version} ({info.file_format})")
    for name, split in info.splits.items():
        print(f"split {name}: {split.num_examples} examples in {len(split.shard_lengths)} "
              f"files, {split.num_bytes} bytes")
    print_features(info)
    print(f"open with: ofindex.open_tfds({info.path!r}, split={next(iter(info.splits))!r})",
          file=sys.stderr)
    return 0


def cmd_schema(args: argparse.Namespace, info: BuilderInfo) -> int:
    """``ofindex schema`` on a TFDS builder directory: the feature tree (exact, from
    ``features.json``: nothing is sampled)."""
    if args.json:
        print(json.dumps(_tree(info.features), indent=2))
        return 0
    print_features(info)
    return 0
