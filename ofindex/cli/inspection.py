"""``ofindex schema``, ``head``, ``stats`` and ``convert``: what a dataset holds, and getting
data in."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..convert import convert
from ..convert.run import refuse_nested
from ..decode import decode_example, decode_ofrecord, decode_sequence_example, format_decoded
from ..errors import NestedPathsError
from ..read.dataset import Dataset
from ..schema import Schema, infer_spec, to_python, to_tf
from .exitcodes import EXIT_OK, EXIT_USAGE

Options = dict[str, Any]


def cmd_schema(args: argparse.Namespace, options: Options, ds: Dataset) -> int:
    """``ofindex schema``: the inferred spec as Python, as TensorFlow code, or as JSON."""
    print_schema(args, infer_spec(ds, sample=args.sample, seed=args.seed))
    return EXIT_OK


def print_schema(args: argparse.Namespace, schema: Schema) -> None:
    """Print a schema as ``ofindex schema`` does: JSON (``--json``), or Python and/or
    TensorFlow code (``--style``).

    Args:
        args: The parsed command line (``json``, ``style``).
        schema: The inferred schema.
    """
    if args.json:
        print(json.dumps(schema.to_dict(), indent=2))
        return
    if args.style in ("python", "both"):
        print(to_python(schema))
    if args.style == "both":
        print()
    if args.style in ("tf", "both"):
        print(to_tf(schema, as_code=True))


def _decoded(payload: bytes, kind: str) -> str:
    try:
        if kind == "ofrecord":
            return format_decoded(decode_ofrecord(payload))
        if kind == "sequence_example":
            return format_decoded(decode_sequence_example(payload))
        return format_decoded(decode_example(payload))
    except ValueError:
        return f"{len(payload)} bytes, not a record of the dataset's kind: {payload[:40]!r}"


def cmd_head(args: argparse.Namespace, options: Options, ds: Dataset) -> int:
    """``ofindex head``: the first records, decoded and cut to a readable size."""
    n = min(args.n, len(ds))
    print_records(ds[:n], infer_spec(ds, sample=16).kind)
    return EXIT_OK


def print_records(records: Sequence[bytes], kind: str) -> None:
    """Print records numbered from 0, decoded as ``kind`` and cut to a readable size.

    Args:
        records: The payloads.
        kind: ``"example"``, ``"sequence_example"``, ``"ofrecord"`` or ``"raw"`` (shown as
            the bytes' start).
    """
    for index, payload in enumerate(records):
        print(f"--- record {index} ({len(payload)} bytes)")
        print(_decoded(payload, kind) if kind != "raw" else repr(payload[:80]))


def cmd_stats(args: argparse.Namespace, options: Options, ds: Dataset) -> int:
    """``ofindex stats``: records, shards, bytes, record size percentiles (from the index:
    no data read) and feature presence (from a sample)."""
    from ..schema.infer import sample_indices

    shards = ds.shards
    sizes = ds.record_lengths(sample_indices(len(ds), args.sample * 16, 0)) if len(ds) else \
        np.zeros(0, np.int64)
    schema = infer_spec(ds, sample=args.sample)
    quantiles = {f"p{q}": int(np.percentile(sizes, q)) for q in (0, 50, 90, 99, 100)} \
        if sizes.size else {}
    out = {"records": len(ds), "shards": len(shards), "bytes": sum(s.bytes for s in shards),
           "record_bytes": quantiles, "kind": schema.kind,
           "features": {name: {"dtype": st.dtype, "present": st.present / schema.sampled,
                               "values": [st.min_count, st.max_count]}
                        for name, st in sorted(schema.features.items())} if schema.sampled
           else {}}
    if args.json:
        print(json.dumps(out, indent=2))
        return EXIT_OK
    print(f"records: {out['records']:,}   shards: {out['shards']:,}   bytes: {out['bytes']:,}")
    if quantiles:
        print("record bytes: " + "  ".join(f"{k} {v:,}" for k, v in quantiles.items())
              + f"  ({sizes.size:,} records, from the index)")
    print(f"kind: {schema.kind} ({schema.sampled:,} records sampled)")
    for name, st in sorted(schema.features.items()):
        print(f"  {name}: {st.dtype}, {st.note(schema.sampled)}")
    return EXIT_OK


def cmd_convert(args: argparse.Namespace, options: Options) -> int:
    """``ofindex convert``: a source into a sharded dataset, with a progress bar and a summary
    (exit 2 for an output inside the source, or the other way: a bad command line)."""
    try:
        refuse_nested(args.src, args.dst)
    except NestedPathsError as exc:
        print(f"ofindex: error: {exc.cli_message()}", file=sys.stderr)
        return EXIT_USAGE
    summary = convert(args.src, args.dst, format=args.to, shard_bytes=args.shard_bytes,
                      shard_records=args.shard_records,
                      compression=None if args.to_compression == "none" else args.to_compression,
                      batch_size=args.batch_size, storage_options=options, nulls=args.nulls,
                      float64=args.float64,
                      progress=not args.no_progress and sys.stderr.isatty())
    print(summary)
    return EXIT_OK
