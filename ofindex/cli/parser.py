"""The ``ofindex`` command line: arguments, help texts and examples."""

from __future__ import annotations

import argparse
import json

from .. import __version__

EPILOG = """\
exit codes: 0 success; 1 a data or index error (corrupt record, stale or missing index, file
not found); 2 bad command line; 3 `build --allow-partial` indexed only a valid prefix.

examples:
  ofindex build data/                        # index every shard in a directory
  ofindex build 'data/train-*.tfrecord' --workers 8 --verify
  ofindex build data/ofrecord/ --checksums    # OFRecord: a CRC32C per payload in the sidecar
  ofindex build s3://bucket/train --index-dir ./idx -o anon=true
  ofindex info data/
  ofindex get data/ 0 -1 12345 --decode      # print records by global number
  ofindex verify data/                       # re-check every record's CRC
  ofindex export-index data/part-0 -o part-0.idx       # DALI / tfrecord2idx text index
  ofindex import-index data/part-0 part-0.idx          # and back
  ofindex demo                               # generate, index and read a small dataset
"""


def storage_options(pairs: list[str] | None) -> dict:
    out: dict = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"ofindex: --storage-option takes KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _add_common(p: argparse.ArgumentParser, paths: str = "+") -> None:
    p.add_argument("paths", nargs=paths, help="data files, directories, globs or URLs")
    p.add_argument("--format", default="auto", choices=["auto", "tfrecord", "ofrecord"])
    p.add_argument("--index-dir", help="where sidecars live (default: beside the data)")
    p.add_argument("-o", "--storage-option", action="append", metavar="KEY=VALUE",
                   help="fsspec storage option (repeatable; VALUE parsed as JSON when it can be)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ofindex", description="Index and randomly access TFRecord / OFRecord datasets.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ofindex {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("build", help="scan data files once and write their sidecar indexes",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_common(p)
    p.add_argument("--verify", action="store_true", help="also check every record's data CRC")
    p.add_argument("--checksums", action="store_true",
                   help="store every payload's CRC32C in the sidecar, checked on read (OFRecord "
                        "has no CRC of its own; reads the whole file)")
    p.add_argument("--allow-partial", action="store_true",
                   help="index the valid prefix of a damaged file instead of failing (loudly)")
    p.add_argument("--workers", type=int, default=None, help="files scanned in parallel")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = sub.add_parser("info", help="shards, record counts, sizes and index state")
    _add_common(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("get", help="print records by global record number")
    p.add_argument("paths", help="data file, directory, glob or URL")
    p.add_argument("indices", nargs="+", type=int, help="record numbers (negative from the end)")
    p.add_argument("--format", default="auto", choices=["auto", "tfrecord", "ofrecord"])
    p.add_argument("--index-dir")
    p.add_argument("-o", "--storage-option", action="append", metavar="KEY=VALUE")
    p.add_argument("--decode", nargs="?", const="auto",
                   choices=["auto", "example", "sequence", "ofrecord"],
                   help="decode the payload (Example / SequenceExample / OFRecord)")
    p.add_argument("--raw", action="store_true", help="write raw payload bytes to stdout")
    p.add_argument("--no-verify", action="store_true", help="skip CRC checks")

    p = sub.add_parser("verify", help="check indexes and every record's CRC")
    _add_common(p)

    p = sub.add_parser("export-index",
                       help="write the text 'offset length' index (DALI, tfrecord2idx)")
    _add_common(p)
    p.add_argument("--output", help="output file (one data file) or directory (default: "
                   "<data file>.idx beside the data)")

    p = sub.add_parser("import-index", help="turn a text 'offset length' index into a sidecar")
    p.add_argument("data", help="the data file")
    p.add_argument("text_index", help="the text index file")
    p.add_argument("--format", default="auto", choices=["auto", "tfrecord", "ofrecord"])
    p.add_argument("--index-dir")
    p.add_argument("-o", "--storage-option", action="append", metavar="KEY=VALUE")

    p = sub.add_parser("demo", help="generate a small dataset, index it and read random records")
    p.add_argument("--dir", help="where to write the dataset (default: a temporary directory)")
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--shards", type=int, default=8)
    return parser
