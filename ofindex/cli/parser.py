"""The ``ofindex`` command line: arguments, help texts and their examples.

Every example line in these help texts is run by the test suite (tests/docs/test_docs.py) against
a generated dataset in ``data/``: keep them runnable as written.
"""

import argparse
import decimal
import json
import math
from collections.abc import Callable
from typing import Any

from .. import __version__

EXIT_CODES = """\
exit codes: 0 success; 1 a data, index or storage error (corrupt record, stale or missing
index, file not found, unreachable or refused storage); 2 bad command line; 3 a partial
index (`build --allow-partial` indexed only a valid prefix, or `verify` found one);
130 interrupted. Add --debug (or set OFINDEX_DEBUG=1) for a traceback."""

EXAMPLES = {
    "build": """\
  ofindex build data/                        # index every shard in a directory
  ofindex build 'data/part-*' --workers 8 --verify
  ofindex build data-of/ --no-checksums       # OFRecord without per-payload CRC32Cs (faster)
  ofindex build s3://bucket/train --index-dir ./idx -s anon=false
  ofindex build s3://bucket/train --dask-scheduler tcp://scheduler:8786   # on a Dask cluster
  ofindex build data-gz/ --seek-spacing 256K  # GZIP/ZLIB files are detected
  ofindex build data/ --migrate              # sidecars from beside the data to data.ofindex/
  ofindex build data/ --columns label         # also store each record's label, for queries""",
    "info": """\
  ofindex info data/
  ofindex info data/ --json
  ofindex info data/ --json --schema""",
    "get": """\
  ofindex get data/ 0 -1 123 --decode        # print records by global number
  ofindex get data/ 5 --raw > record-5.bin   # the payload bytes
  ofindex get data/ --key label=7 --decode | head -n 3   # records by key (a --columns column)""",
    "find": """\
  ofindex find data/ --where label=3 --count  # records whose label is 3 (--columns label)
  ofindex find data/ --where label=1,2 --head 5   # their numbers: label 1 or 2
  ofindex find data/ --where label=7:            # label 7 and above""",
    "schema": """\
  ofindex schema data/                       # the features, as ofindex.decode and TF code
  ofindex schema data/ --sample 1000 --json""",
    "head": """\
  ofindex head data/ -n 2                    # the first records, decoded""",
    "stats": """\
  ofindex stats data/                        # sizes from the index, feature presence""",
    "convert": """\
  ofindex convert data/ converted-of --to ofrecord --shard-records 1000
  ofindex convert data/ data-small --shard-bytes 1M --to-compression gzip""",
    "verify": """\
  ofindex verify data/                       # re-check every record's CRC""",
    "export-index": """\
  ofindex export-index data/part-00000 -o part-0.idx   # DALI / tfrecord2idx text index""",
    "import-index": """\
  ofindex import-index data/part-00000 part-0.idx      # and back""",
    "demo": """\
  ofindex demo --records 20000               # generate, index and read a small dataset""",
    "events": """\
  ofindex events logs/                       # runs and tags of a TensorBoard log directory
  ofindex events logs/ --plot loss -o loss.png""",
    "plan": """\
  ofindex plan data/ --store s3 --readers 64 --target 5000   # block size for 64 readers on S3
  ofindex plan data/ --store gcs --readers 1024 --target 2000 --json
  ofindex plan data/ --store s3 --readers 8 --target 1e4 --reads-per-second 11000 --rtt 0.03""",
}


def _epilog(*commands: str) -> str:
    lines = "\n".join(EXAMPLES[c] for c in commands)
    return f"{EXIT_CODES}\n\nexamples:\n{lines}\n"


class _Parser(argparse.ArgumentParser):
    """Exits with 2 and one line for every command-line error, naming the command's help."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse option combinations argparse cannot express (exit 2, one line)."""
    if getattr(args, "kind", None) and not getattr(args, "decode", False):
        parser.error("get: --as needs --decode")


def storage_options(pairs: list[str] | None, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Turn ``-s KEY=VALUE`` pairs into fsspec storage options (VALUE parsed as JSON when it
    can be, e.g. ``anon=true``, ``client_kwargs={"endpoint_url": "http://…"}``)."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            parser.error(f"--storage-option takes KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


#: Index files scanned at once: threads, each holding a file's buffers; past a thousand they
#: only contend for the same disks and cores.
MAX_WORKERS = 1024
#: ``demo`` writes about 3.2 KB a record: a million is 3.2 GB, past "a small dataset".
MAX_DEMO_RECORDS = 1_000_000
MAX_DEMO_SHARDS = 1000
#: ``plan``'s counts (readers, batch size, requests in flight, blocks, block sizes): a
#: billion is past any cluster, and keeps the planner's products inside int64 and float
#: precision.
MAX_PLAN_COUNT = 10**9
#: Records encoded at once by ``convert``: 16 M records of even a few bytes are gigabytes.
MAX_BATCH = 1 << 24


def _whole_number(text: str) -> int:
    """``text`` as a whole number (``1e6`` notation too, when it is one exactly)."""
    try:
        if any(c in text.lower() for c in "e."):
            exact = decimal.Decimal(text)
            if exact != exact.to_integral_value():
                raise ValueError(text)
            return int(exact)
        return int(text)
    except (ValueError, ArithmeticError):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def whole(low: int, high: int | None = None) -> Callable[[str], int]:
    """A ``type=`` for a whole number from ``low`` to ``high``: anything else makes argparse
    print the usage and exit 2, naming the option and the bounds.

    Args:
        low: The smallest value accepted (``1``: a count; ``0``: a count that may be none).
        high: The largest, or ``None``.

    Returns:
        The parsing function.
    """
    def parse(text: str) -> int:
        value = _whole_number(text)
        if value < low:
            raise argparse.ArgumentTypeError(
                f"must be {'positive' if low == 1 else f'{low} or more'}, not {text}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high:,}, not {text}")
        return value

    return parse


def number(low: float, *, above: bool, finite: bool = True) -> Callable[[str], float]:
    """A ``type=`` for a number above ``low`` (``above``) or at least ``low``; ``nan`` and,
    with ``finite``, ``inf`` are refused (argparse prints the usage and exits 2).

    Args:
        low: The bound.
        above: ``low`` itself is refused.
        finite: ``inf`` is refused.

    Returns:
        The parsing function.
    """
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if math.isnan(value) or (finite and math.isinf(value)):
            raise argparse.ArgumentTypeError(f"must be a finite number, not {text}")
        if value < low or (above and value == low):
            raise argparse.ArgumentTypeError(
                f"must be {'positive' if above and low == 0 else f'{low:g} or more'}, not "
                f"{text}")
        return value

    return parse


def byte_size(text: str) -> int:
    """A byte count such as ``1048576``, ``256K``, ``1M`` or ``1MiB``."""
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1:] if t[-1:] in units else ""
    try:
        value = int(float(t[: len(t) - len(unit)]) * units[unit])
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"not a byte size: {text!r} (e.g. 1M)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


#: Uncompressed bytes between seek points: past a TiB a random read of a compressed file
#: inflates half a TiB (and sidecars hold the spacing as a 64-bit number).
MAX_SEEK_SPACING = 1 << 40


def seek_spacing(text: str) -> int:
    """``--seek-spacing``: a byte size of at most :data:`MAX_SEEK_SPACING`."""
    value = byte_size(text)
    if value > MAX_SEEK_SPACING:
        raise argparse.ArgumentTypeError(f"must be at most 1T ({MAX_SEEK_SPACING:,} bytes), "
                                         f"not {text}")
    return value


#: ``--retries``: a whole number >= 0.
retry_count = whole(0)
#: ``--timeout``: a positive number of seconds (``inf``: no limit).
seconds = number(0, above=True, finite=False)


def null_policy(text: str) -> Any:
    """``convert --nulls``: ``refuse``, ``drop`` or ``fill:VALUE`` (see
    :func:`ofindex.encode.nulls.parse_cli`)."""
    from ..encode.nulls import parse_cli

    try:
        return parse_cli(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _int_list(text: str) -> list[int]:
    """``--block-sizes``: positive whole numbers separated by commas."""
    each = whole(1, MAX_PLAN_COUNT)
    try:
        values = [each(v.strip()) for v in text.split(",") if v.strip()]
    except argparse.ArgumentTypeError:
        values = []
    if not values:
        raise argparse.ArgumentTypeError(f"expected positive numbers of at most "
                                         f"{MAX_PLAN_COUNT:,} separated by commas: {text!r}")
    return values


def _common(paths: str = "+") -> "_Parser":
    p = _Parser(add_help=False)
    if paths:
        p.add_argument("paths", nargs=paths, metavar="PATH",
                       help="data files, directories, globs or URLs")
    p.add_argument("--format", default="auto", choices=["auto", "tfrecord", "ofrecord"],
                   help="record framing (default: detected from the first record)")
    p.add_argument("--compression", default="auto", choices=["auto", "gzip", "zlib", "none"],
                   help="compression of the data files (TensorFlow's compression_type); "
                   "auto detects GZIP and ZLIB")
    p.add_argument("--index-dir", metavar="DIR",
                   help="where sidecars live (default: DIR.ofindex/ next to the data "
                   "directory DIR, where no glob over DIR finds them; for files named one by "
                   "one without it, or where it cannot be written: ~/.cache/ofindex/indexes/)")
    p.add_argument("-s", "--storage-option", action="append", metavar="KEY=VALUE",
                   help="fsspec storage option (repeatable; VALUE parsed as JSON when it can be)")
    p.add_argument("--allow-missing-shards", action="store_true",
                   help="take a directory or glob whose shards are not all there (names "
                   "saying -of-N with fewer than N, or a writer that did not finish) as it is")
    p.add_argument("--retries", type=retry_count, metavar="N",
                   help="remote requests that fail transiently (reset connections, timeouts, "
                   "HTTP 5xx, 429 and S3 SlowDown, which also slow the reader down) are sent "
                   "again up to N times, with exponential backoff and jitter (default 10; 0: "
                   "none); a connection refused where nothing ever answered is not retried")
    p.add_argument("--timeout", type=seconds, metavar="SECONDS",
                   help="give a remote request up after this long, its retries, backoff and "
                   "waits for a throttled store included (default 60)")
    return p


def _debug() -> "_Parser":
    p = _Parser(add_help=False)
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="print the traceback of an error")
    return p


def build_parser() -> argparse.ArgumentParser:
    """Return the ``ofindex`` argument parser with all its subcommands."""
    fmt = argparse.RawDescriptionHelpFormatter
    parser = _Parser(
        prog="ofindex", description="Index and randomly access TFRecord / OFRecord datasets.",
        epilog=_epilog(*EXAMPLES), formatter_class=fmt, parents=[_debug()],
    )
    parser.add_argument("--version", action="version", version=f"ofindex {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser)

    def add(name: str, help: str, *parents: _Parser) -> argparse.ArgumentParser:
        bases = [*parents, _debug()]
        return sub.add_parser(name, help=help, description=help, epilog=_epilog(name),
                              formatter_class=fmt, parents=bases)

    p = add("build", "scan data files once and write their sidecar indexes", _common())
    p.add_argument("--verify", action="store_true", help="also check every record's data CRC")
    p.add_argument("--checksums", action=argparse.BooleanOptionalAction, default=None,
                   help="store every payload's CRC32C in the sidecar, checked on read (default: "
                        "for OFRecord files, which have no CRC of their own; reads the whole "
                        "file); --checksums also rebuilds fresh sidecars without them")
    p.add_argument("--allow-partial", action="store_true",
                   help="index the valid prefix of a damaged file instead of failing (loudly)")
    p.add_argument("--strict", action="store_true",
                   help="refuse files of a directory or glob that are not record files (a "
                        "README, *.labels.txt) instead of skipping them with a warning")
    p.add_argument("--migrate", action="store_true",
                   help="move sidecars that ofindex 0.2 wrote beside the data files (where "
                        "globs such as part-* return them) to DIR.ofindex/")
    p.add_argument("--workers", type=whole(1, MAX_WORKERS), default=None, metavar="N",
                   help="files scanned at once (default: one per core; 8 for remote files)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    again = p.add_mutually_exclusive_group()
    again.add_argument("--resume", dest="resume", action="store_true", default=True,
                       help="skip files whose sidecar is already fresh (the default): an "
                       "interrupted build redoes only what it had not finished")
    again.add_argument("--force", dest="resume", action="store_false",
                       help="re-index every file, fresh sidecars too")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--dask-scheduler", metavar="ADDRESS",
                       help="index the files on a Dask cluster (tcp://host:8786); the paths "
                       "must be reachable from its workers (needs ofindex[dask])")
    where.add_argument("--ray", metavar="ADDRESS", nargs="?", const="auto",
                       help="index the files on a Ray cluster ('auto' for the running one, "
                       "ray://host:10001; needs ofindex[ray])")
    p.add_argument("--seek-spacing", type=seek_spacing, default=None, metavar="BYTES",
                   help="compressed files: uncompressed bytes between seek points (default "
                        "256K; smaller: faster random reads, larger index)")
    p.add_argument("--columns", default="", metavar="NAME,...",
                   help="also store these scalar features of every record as columns beside "
                        "the index, for `ofindex find` and `get --key` (a record without one "
                        "is null; one holding several values is refused); fresh sidecars are "
                        "kept, their missing columns added")
    p.add_argument("--keys", default="", metavar="NAME,...",
                   help="also write the key index of these columns (some of --columns) beside "
                        "the manifest, for `get --key` in a few page reads; by default a local "
                        "dataset's is written by its first lookup, and a remote dataset's "
                        "lookup asks for it")

    p = add("info", "shards, record counts, sizes and index state (files without an index: "
            "their sizes, framing and the command that indexes them)", _common())
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--schema", nargs="?", type=whole(1), const=256, default=None, metavar="N",
                   help="also infer the records' features from N records sampled across "
                        "all shards (default 256), as `ofindex schema` does")

    p = add("get", "print records by global record number", _common(paths=""))
    p.add_argument("paths", metavar="PATH", help="data file, directory, glob or URL")
    p.add_argument("indices", nargs="*", type=whole(-(2**63), 2**63 - 1), metavar="INDEX",
                   help="record numbers (negative from the end)")
    p.add_argument("--key", action="append", default=[], metavar="COLUMN=VALUE",
                   help="instead of numbers: the records whose COLUMN (built with `build "
                        "--columns`) holds VALUE, found through its key index (repeatable)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--decode", action="store_true",
                     help="decode the payload (Example, or OFRecord for OFRecord files)")
    out.add_argument("--raw", action="store_true", help="write raw payload bytes to stdout")
    p.add_argument("--as", dest="kind", choices=["example", "sequence", "ofrecord"],
                   help="with --decode: the message type (default: by record format)")
    p.add_argument("--no-verify", action="store_true", help="skip CRC checks")

    p = add("find", "the numbers of the records meeting conditions on their columns (built "
            "with `build --columns`), without reading the records", _common())
    p.add_argument("--where", action="append", required=True, metavar="COLUMN=VALUE",
                   help="a condition (repeatable: all must hold): VALUE; for numbers also "
                        "a,b (any of them) or low:high (low <= value < high, either end left "
                        "out); empty: records without a value")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--count", action="store_true", help="print how many records match")
    shown.add_argument("--head", type=whole(0), metavar="N",
                       help="print the first N record numbers (default: all)")

    p = add("schema", "infer the features of the records from a random sample (files not "
            "indexed yet: from the start of up to 16 of them)", _common())
    p.add_argument("--sample", type=whole(1), default=256, metavar="N",
                   help="records sampled across all shards (default 256); files without an "
                        "index are sampled from their start, no index written")
    p.add_argument("--seed", type=whole(0), default=0, help="the sample's seed (0 or more)")
    p.add_argument("--style", choices=["python", "tf", "both"], default="both",
                   help="print ofindex.decode code, a TensorFlow feature_description, or both")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add("head", "print the first records, decoded and cut to a readable size (no index "
            "needed)", _common())
    p.add_argument("-n", type=whole(0), default=5, metavar="N", help="records (default 5)")

    p = add("stats", "records, shards, bytes, record size percentiles, feature presence",
            _common())
    p.add_argument("--sample", type=whole(1), default=256, metavar="N",
                   help="records sampled for feature presence (sizes: 16x as many, from "
                   "the index)")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add("convert", "convert Parquet, a HF dataset, an image folder, .npy/.npz or a "
            "record dataset into sharded TFRecord/OFRecord files with indexes")
    p.add_argument("src", help="Parquet file/dir/glob, HF save_to_disk dir, image folder "
                   "(class/file.jpg), .npy/.npz, or a TFRecord/OFRecord dataset")
    p.add_argument("dst", help="the new dataset's directory (must hold no data files)")
    p.add_argument("--to", default="tfrecord", choices=["tfrecord", "ofrecord"],
                   help="framing of the new files (Examples or OFRecords)")
    p.add_argument("--shard-bytes", type=byte_size, metavar="BYTES",
                   help="target shard size (default 256M when --shard-records is not given)")
    p.add_argument("--shard-records", type=whole(1), metavar="N", help="records per shard")
    p.add_argument("--to-compression", default="none", choices=["none", "gzip", "zlib"],
                   help="compression of the new files")
    p.add_argument("--batch-size", type=whole(1, MAX_BATCH), default=None, metavar="N",
                   help="records encoded at once (default: Parquet and Hugging Face data in "
                   "batches of about 4 MiB of columns, 1,024 to 65,536 records, records above "
                   "4 KiB in batches of about 16 MiB; 1,024 from other sources)")
    p.add_argument("--nulls", type=null_policy, default="refuse", metavar="POLICY",
                   help="a null element inside a list: refuse (default: an error naming the "
                   "column and row), drop (left out of its list) or fill:VALUE (VALUE parsed "
                   "as JSON when it can be); a null cell always leaves the feature out")
    p.add_argument("--float64", default="exact", choices=["exact", "float32"],
                   help="float64 columns in Examples: exact (raw doubles in a bytes value, "
                   "read back equal; default) or float32 (TensorFlow's float_list, rounded)")
    p.add_argument("-s", "--storage-option", action="append", metavar="KEY=VALUE",
                   help="fsspec storage option (repeatable; VALUE parsed as JSON when it can be)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    add("verify", "check indexes and every record's CRC", _common())

    p = add("export-index", "write the text 'offset length' index (DALI, tfrecord2idx)",
            _common())
    p.add_argument("-o", "--output", metavar="PATH",
                   help="output file (one data file; '-' for stdout; a FIFO or a device is "
                   "written in place) or directory (default: <data file>.idx beside the data)")

    p = add("import-index", "turn a text 'offset length' index into a sidecar",
            _common(paths=""))
    p.add_argument("data", help="the data file")
    p.add_argument("text_index", help="the text index file")

    p = add("events", "the runs and tags of a TensorBoard log directory, with their counts and "
            "last steps (its event files indexed, only what is new), or a scalar tag plotted")
    p.add_argument("logdir", metavar="LOGDIR", help="the log directory (local or a URL)")
    p.add_argument("--run", action="append", metavar="RUN",
                   help="only this run (repeatable; default: every run)")
    p.add_argument("--plot", metavar="TAG", help="plot scalar tag TAG of the runs against its "
                   "steps (needs -o; matplotlib: pip install 'ofindex[events]')")
    p.add_argument("-o", "--output", metavar="FILE", help="with --plot: the image to write "
                   "(PNG, SVG, PDF: by its name)")
    p.add_argument("--index-dir", metavar="DIR",
                   help="where the indexes go (default: LOGDIR.ofindex/ beside the log "
                   "directory)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-s", "--storage-option", action="append", metavar="KEY=VALUE",
                   help="fsspec storage option (repeatable; VALUE parsed as JSON when it can be)")

    p = add("plan", "which shuffle block size reaches a throughput under a store's request-"
            "rate limit, and its cost in mixing and requests", _common())
    p.add_argument("--readers", type=whole(1, MAX_PLAN_COUNT), required=True, metavar="N",
                   help="reader processes reading at once (ranks x DataLoader workers)")
    p.add_argument("--target", type=number(0, above=True), required=True,
                   metavar="RECORDS_PER_S",
                   help="records per second wanted, all readers together")
    p.add_argument("--store", choices=["s3", "gcs", "http", "local"],
                   help="the store's limits and prices (default: from the URL)")
    p.add_argument("--reads-per-second", type=number(0, above=True, finite=False), metavar="R",
                   help="the store's read limit per prefix (S3, default 5500) or bucket (GCS, "
                   "default 5000, its starting capacity)")
    p.add_argument("--price", type=number(0, above=False), metavar="DOLLARS",
                   help="price of 1,000 read requests (default 0.0004 for S3 and GCS)")
    p.add_argument("--rtt", type=number(0, above=False), metavar="SECONDS",
                   help="a request's round trip (default 0.02)")
    p.add_argument("--bandwidth", type=number(0, above=True), metavar="BYTES_PER_S",
                   help="bytes per second one reader receives (default 1e9)")
    p.add_argument("--batch-size", type=whole(1, MAX_PLAN_COUNT), default=256, metavar="N",
                   help="records each reader asks for at once (default 256)")
    p.add_argument("--concurrency", type=whole(1, MAX_PLAN_COUNT), default=64, metavar="N",
                   help="requests a reader has in flight (default 64, as ofindex.open)")
    p.add_argument("--window", type=whole(1, MAX_PLAN_COUNT), default=16, metavar="BLOCKS",
                   help="blocks per shuffling window of the block shuffles (default 16)")
    p.add_argument("--block-sizes", type=_int_list, default=[16, 64, 256, 1024, 4096, 16384],
                   metavar="N,N,...", help="block sizes tried (default 16,...,16384)")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add("demo", "generate a small dataset, index it and read random records")
    p.add_argument("--dir", help="where to write the dataset (default: a temporary directory)")
    p.add_argument("--records", type=whole(1, MAX_DEMO_RECORDS), default=100_000,
                   metavar="N", help=f"records to write (default 100,000; at most "
                   f"{MAX_DEMO_RECORDS:,})")
    p.add_argument("--shards", type=whole(1, MAX_DEMO_SHARDS), default=8, metavar="N",
                   help=f"files to write them to (default 8; at most {MAX_DEMO_SHARDS:,})")
    return parser
