"""Which index-file places do the globs users write for their data see? (issue 30)

For each candidate place of a dataset's sidecars and manifest — beside the data files, a hidden
``DIR/.ofindex/``, hidden files, Hadoop's ``DIR/_ofindex/``, and a sibling ``DIR.ofindex/`` (the
default ofindex chose from this table) — it lays the files out on local disk, S3 (moto) and GCS
(fake-gcs-server), runs the globs ``DIR/*``, ``DIR/part-*``, ``DIR/*.tfrecord*``,
``DIR/*-of-*``, ``DIR/**`` through Python's ``glob``, ``tf.io.gfile.glob`` and fsspec's
``glob``, and prints which index files each returns (besides the data), plus which names
Hadoop/Spark's hidden-file rule (a path part starting with ``_`` or ``.``) skips.

    python tools/glob_placement.py [--json out.json]
"""

from __future__ import annotations

import argparse
import glob as pyglob
import json
import os
import shutil
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

DATA = ["part-00000-of-00002", "part-00001-of-00002.tfrecord"]
#: Index files of each candidate, relative to the data directory's parent (``train`` is DIR).
CANDIDATES = {
    "beside": ["train/part-00000-of-00002.ofidx", "train/ofindex-manifest.json"],
    "hidden directory": ["train/.ofindex/part-00000-of-00002.ofidx",
                         "train/.ofindex/ofindex-manifest.json"],
    "hidden files": ["train/.part-00000-of-00002.ofidx", "train/.ofindex-manifest.json"],
    "_ofindex directory": ["train/_ofindex/part-00000-of-00002.ofidx",
                           "train/_ofindex/ofindex-manifest.json"],
    "sibling directory (default)": ["train.ofindex/part-00000-of-00002.ofidx",
                                    "train.ofindex/ofindex-manifest.json"],
}
PATTERNS = ["*", "part-*", "*.tfrecord*", "*-of-*", "**"]


def hadoop_hidden(name: str) -> bool:
    """Hadoop FileInputFormat's hidden-file filter, applied to the path under DIR."""
    return any(part.startswith(("_", ".")) for part in name.split("/"))


def extra(found: list[str], parent: str) -> list[str]:
    """The names ``found`` holds besides the data files, relative to ``parent``."""
    base = parent.split("://")[-1].rstrip("/") + "/"
    names = sorted(path.split(base, 1)[-1] for path in found)
    data = {"train", "train/", *(f"train/{d}" for d in DATA)}
    return [n for n in names if n not in data]


def measure_local(results: dict) -> None:
    import fsspec
    import tensorflow as tf

    fs = fsspec.filesystem("file")
    for candidate, names in CANDIDATES.items():
        parent = tempfile.mkdtemp(prefix="globs-")
        try:
            for name in [f"train/{d}" for d in DATA] + names:
                os.makedirs(os.path.dirname(os.path.join(parent, name)), exist_ok=True)
                with open(os.path.join(parent, name), "wb") as f:
                    f.write(b"x")
            for pattern in PATTERNS:
                spec = os.path.join(parent, "train", pattern)
                row = results.setdefault(candidate, {}).setdefault(pattern, {})
                row["python glob"] = extra(pyglob.glob(spec, recursive=True), parent)
                row["tf.io.gfile"] = extra(tf.io.gfile.glob(spec), parent)
                row["fsspec local"] = extra(fs.glob(spec), parent)
        finally:
            shutil.rmtree(parent)


def measure_stores(results: dict) -> None:
    import gcsfs
    import s3fs

    from tests.kit import servers  # first: it sets the fake-gcs environment gcsfs reads on import

    moto, gcs = servers.start_moto(), servers.start_fake_gcs()
    try:
        stores = {
            "fsspec s3 (moto)": s3fs.S3FileSystem(skip_instance_cache=True,
                                                 **servers.s3_options(moto.url)),
            "fsspec gcs (fake-gcs)": gcsfs.GCSFileSystem(skip_instance_cache=True,
                                                        **servers.gcs_options(gcs.url)),
        }
        for fs in stores.values():
            fs.mkdir("globs")
        for candidate, names in CANDIDATES.items():
            for store, fs in stores.items():
                parent = f"globs/{uuid.uuid4().hex[:8]}"
                for name in [f"train/{d}" for d in DATA] + names:
                    fs.pipe_file(f"{parent}/{name}", b"x")
                for pattern in PATTERNS:
                    row = results[candidate][pattern]
                    row[store] = extra(fs.glob(f"{parent}/train/{pattern}"), parent)
    finally:
        moto.stop()
        gcs.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the measurements here")
    parser.add_argument("--local-only", action="store_true", help="skip S3 and GCS")
    args = parser.parse_args()
    results: dict = {}
    measure_local(results)
    if not args.local_only:
        measure_stores(results)
    for candidate, names in CANDIDATES.items():
        print(f"== {candidate}")
        for pattern in PATTERNS:
            row = results[candidate][pattern]
            seen = "; ".join(f"{tool}: {', '.join(e) if e else '-'}" for tool, e in row.items())
            print(f"  DIR/{pattern:12s} {seen}")
        under = [n.split("/", 1)[1] for n in names if n.startswith("train/")]
        print(f"  Hadoop/Spark skip: {[n for n in under if hadoop_hidden(n)] or '-'}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
