"""Small helpers shared by the benchmarks: timing, datasets, result files."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any

from ofindex.cli.synthetic import write_dataset


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None = None,
               **smoke: Any) -> argparse.Namespace:
    """``parser.parse_args`` plus ``--smoke``: the given tiny settings replace the defaults, so
    that a test can check in seconds that the tool runs as documented. Smoke figures mean
    nothing, so they are written nowhere unless ``--out`` is given."""
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes: check that the tool runs (its figures mean nothing)")
    args = parser.parse_args(argv)
    if args.smoke:
        for name, value in {"out": None, **smoke}.items():
            if getattr(args, name, None) == parser.get_default(name):
                setattr(args, name, value)
    return args


def best_of(fn: Callable[[], object], repeat: int = 3) -> float:
    """Best wall time of ``repeat`` runs of ``fn`` (seconds)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def dataset(root: str, name: str, records: int, shards: int, size: int,
            index: bool = True) -> list[str]:
    """Random-bytes TFRecord files under ``root/name``, generated once and reused."""
    d = os.path.join(root, name)
    marker = os.path.join(d, "_COMPLETE")
    if not os.path.exists(marker):
        paths = write_dataset(d, records, shards, kind="random", record_size=size, index=index)
        open(marker, "w").close()
        return paths
    return sorted(os.path.join(d, f) for f in os.listdir(d)
                  if f.startswith("part-") and "." not in f)


def read_all(paths: list[str]) -> None:
    """Pull files into the page cache."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(64 << 20):
                pass


def report(rows: list[dict], out: str | None) -> None:
    for r in rows:
        extras = "  ".join(f"{k}={v}" for k, v in r.items() if k not in ("name",))
        print(f"{r['name']:<48} {extras}")
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(rows, f, indent=2)
        print(f"wrote {out}")


def write_json(obj: object, out: str | None) -> None:
    """Write ``obj`` as JSON to ``out`` (directories made as needed); nothing without ``out``."""
    if not out:
        return
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(obj, f, indent=2)
    print(f"wrote {out}")


def sidecar_path(data_path: str) -> str:
    """Where ofindex keeps the sidecar of an indexed data file (by default in the data
    directory's sibling index directory, ``<dir>.ofindex/``)."""
    import ofindex

    with ofindex.open(data_path, manifest=False) as ds:
        return str(ds.shards[0].index_url)
