"""``ofindex info``, ``head`` and ``schema`` on files that have no index yet: what the start of
the files holds (:mod:`ofindex.read.sequential.peek`), with no index read or written, and the
command that indexes them. A look at files you were given costs a few reads, not a scan of the whole
dataset, and works where you may not write (someone else's bucket)."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any

import numpy as np

from .._accel import implementation
from ..errors import FormatDetectionError, IndexNotFoundError
from ..formats.framing import RecordFormat
from ..formats.location import resolve
from ..formats.sidecar_header import parse_compression
from ..formats.strays import ListedStrays, warn_skipped
from ..read.sequential.peek import PeekedFile, peek_file
from ..schema import Schema, to_python
from ..schema.infer import schema_of_records
from ..storage import Storage
from ..storage.registry import Storages
from .exitcodes import EXIT_OK

Options = dict[str, Any]

#: Files whose first records ``schema`` reads, spread evenly over the dataset's files.
SCHEMA_FILES = 16


class Files:
    """The dataset's files as the command line names them, and what their starts hold.

    Args:
        args: The parsed command line (``paths``, ``index_dir``, ``format``,
            ``compression``).
        options: fsspec storage options.
    """

    def __init__(self, args: argparse.Namespace, options: Options) -> None:
        location = resolve(args.paths, index_dir=args.index_dir, storages=Storages(options),
                           allow_missing_shards=args.allow_missing_shards)
        self.storage: Storage = location.storage
        self.files = list(location.files)
        self.fmt = None if args.format == "auto" else RecordFormat[args.format.upper()]
        self.compression = parse_compression(args.compression)
        self._seen: tuple[str, RecordFormat] | None = None
        #: Which listed files are plainly not record files (a README beside the shards).
        self.stray = ListedStrays(self.storage, self.files, location.named)
        self._reported = 0

    def report_skipped(self) -> None:
        """Print one warning line naming the files left out since the last report, if any."""
        new = self.stray.skipped[self._reported:]
        if new:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                warn_skipped(new)
            print(f"WARNING: {caught[0].message}", file=sys.stderr)
            self._reported += len(new)

    @property
    def count(self) -> int:
        """The listed files, less those found to be strays."""
        return len(self.files) - len(self.stray.skipped)

    def peek(self, path: str, count: int, *, verify: bool) -> PeekedFile | None:
        """The first ``count`` records of ``path``.

        Args:
            path: One of :attr:`files`.
            count: Records to read at most.
            verify: Check TFRecord payload CRCs.

        Returns:
            What the start of the file holds; ``None`` for a stray (:meth:`stray`).

        Raises:
            FormatDetectionError: Its framing is not that of the files read before it.
            OfindexError: As :func:`~ofindex.read.sequential.peek.peek_file` raises.
        """
        if self.stray(path):
            return None
        got = peek_file(self.storage, path, count, fmt=self.fmt, compression=self.compression,
                        verify=verify)
        if got.format is not None:
            url = self.storage.url(path)
            if self._seen is None:
                self._seen = (url, got.format)
            elif got.format is not self._seen[1]:
                raise FormatDetectionError(
                    f"{url} holds {got.format.name} records but {self._seen[0]} holds "
                    f"{self._seen[1].name}: one dataset has one framing (name fewer files, "
                    "or pass --format tfrecord or --format ofrecord)")
        return got

    @property
    def format(self) -> RecordFormat:
        """The framing of the files read (TFRecord when every one read was empty)."""
        return self._seen[1] if self._seen is not None else RecordFormat.TFRECORD


def _note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr)


def spread(count: int, wanted: int) -> list[int]:
    """``min(count, wanted)`` file numbers spread evenly from the first file to the last.

    Args:
        count: Files in the dataset.
        wanted: Files to take.

    Returns:
        Increasing file numbers.
    """
    if count <= wanted:
        return list(range(count))
    return sorted({int(k) for k in np.linspace(0, count - 1, wanted).round()})


def sample_schema(files: Files, sample: int) -> Schema:
    """The schema of the first records of up to :data:`SCHEMA_FILES` files spread over the
    dataset, about ``sample`` records in all.

    Args:
        files: The dataset's files.
        sample: Records to read in all.

    Returns:
        The schema (``records`` is ``None``: the files have no index to count them).

    Raises:
        OfindexError: A file cannot be read (see :meth:`Files.peek`).
    """
    chosen = spread(len(files.files), SCHEMA_FILES)
    each = max(1, -(-max(0, sample) // max(1, len(chosen))))
    records: list[bytes] = []
    read = 0
    for k in chosen:
        got = files.peek(files.files[k], each, verify=False)
        records.extend(got.records if got is not None else ())
        read += got is not None
    files.report_skipped()
    where = (f"from the start of {read:,} of {files.count:,} files" if read < files.count
             else f"from the start of each of the {read:,} files")
    return schema_of_records(records, files.format.name.lower(), None, sampled_from=where)


def cmd_schema(args: argparse.Namespace, options: Options, missing: IndexNotFoundError) -> int:
    """``ofindex schema`` where the files have no index.

    Args:
        args: The parsed command line.
        options: fsspec storage options.
        missing: The error opening them raised (it names the command that indexes them).

    Returns:
        The exit code.
    """
    files = Files(args, options)
    schema = sample_schema(files, args.sample)
    _note(f"{missing.cli_message()}. Sampled the first records {schema.sampled_from} "
          "instead; with the index the sample is taken across every record")
    from .inspection import print_schema

    print_schema(args, schema)
    return EXIT_OK


def cmd_head(args: argparse.Namespace, options: Options, missing: IndexNotFoundError) -> int:
    """``ofindex head`` where the files have no index: the first records, read from the
    start of the files in order.

    Args:
        args: The parsed command line.
        options: fsspec storage options.
        missing: The error opening them raised (it names the command that indexes them).

    Returns:
        The exit code.
    """
    from .inspection import print_records

    files = Files(args, options)
    records: list[bytes] = []
    for path in files.files:
        if len(records) >= args.n:
            break
        got = files.peek(path, args.n - len(records), verify=True)
        records.extend(got.records if got is not None else ())
    files.report_skipped()
    _note(f"{missing.cli_message()}. Read the records from the start of the files instead")
    kind = schema_of_records(records[:16], files.format.name.lower(), None).kind
    print_records(records, kind)
    return EXIT_OK


def cmd_info(args: argparse.Namespace, options: Options, missing: IndexNotFoundError) -> int:
    """``ofindex info`` where some files have no index: the files and their sizes, the first
    file's framing and compression, and the command that indexes them.

    Args:
        args: The parsed command line.
        options: fsspec storage options.
        missing: The error opening them raised (its message is the index state shown).

    Returns:
        The exit code.
    """
    files = Files(args, options)
    shown = [p for p in files.files[:50] if not files.stray(p)]
    first = files.peek(shown[0], 0, verify=False) if shown else None
    sizes = [files.storage.stamp(p).size for p in shown]
    state = missing.cli_message()
    schema = None if args.schema is None else sample_schema(files, args.schema)
    fmt = first.format.name.lower() if first is not None and first.format else "unknown"
    comp = first.compression.name.lower() if first is not None else "unknown"
    files.report_skipped()
    if args.json:
        print(json.dumps({
            "format": fmt, "compression_of_first_file": comp, "records": None,
            "index": state, "loops": implementation(),
            "shards": [{"url": files.storage.url(p), "bytes": n}
                       for p, n in zip(shown, sizes, strict=True)],
            **({} if schema is None else {"schema": schema.to_dict()}),
        }, indent=2))
        return EXIT_OK
    print(f"format:  {fmt} (first file)")
    print(f"compression: {comp} (first file)")
    print(f"shards:  {files.count}")
    print("records: unknown: not indexed")
    print(f"index:   {state}")
    print(f"loops:   {implementation()}")
    for path, size in zip(shown, sizes, strict=True):
        print(f"  {size:>12}  {files.storage.url(path)}")
    if len(files.files) > 50:
        print(f"  … and {len(files.files) - 50} more shards")
    if schema is not None:
        print(f"schema ({schema.sampled} records sampled {schema.sampled_from}):")
        print(to_python(schema))
    return EXIT_OK
