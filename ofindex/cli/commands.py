"""Implementations of the ``ofindex`` subcommands (argument parsing lives in :mod:`.parser`).

Each ``cmd_<name>(args, storage_options)`` returns an exit code; errors propagate to
:func:`ofindex.cli.main.main`, which prints them as one line.
"""

import argparse
import concurrent.futures as cf
import json
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from .._accel import implementation
from ..errors import (
    DataFileNotFoundError,
    IndexNotFoundError,
    LeftoverFilesWarning,
    LegacyLayoutWarning,
    MissingShardsWarning,
    OfindexError,
    PartialIndexWarning,
    RecordIndexError,
    SkippedFilesWarning,
)
from ..formats.framing import RecordFormat
from ..formats.location import DatasetLocation, resolve, sidecar_location
from ..formats.sidecar import load_sidecar
from ..formats.sidecar_header import Compression
from ..formats.textindex import export_text
from ..index.build_file import BuildResult
from ..index.builder import build_index
from ..index.textimport import read_text_index, sidecar_from_text
from ..opening import open as open_dataset
from ..read.dataset import Dataset
from ..schema import infer_spec, to_python
from ..storage import Storage, Storages
from ..storage.identity import check_identity
from ..storage.special import descriptor_of
from ..write.leftovers import find_leftovers
from . import queries
from .events_command import cmd_events
from .exitcodes import EXIT_OK, EXIT_PARTIAL, UsageError
from .plan_command import cmd_plan

Options = dict[str, Any]


def _open(args: argparse.Namespace, options: Options, *, verify: bool) -> Dataset:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("ignore", PartialIndexWarning)  # each command reports it
        ds = open_dataset(args.paths, format=args.format, index_dir=args.index_dir,
                          storage_options=options, verify=verify, compression=args.compression,
                          allow_missing_shards=args.allow_missing_shards)
    _print_skipped(caught, others=True)
    return ds


def _print_skipped(caught: list[warnings.WarningMessage], *, others: bool) -> None:
    """Print each :class:`SkippedFilesWarning` caught as one line (and show the ``others``)."""
    for w in caught:
        if issubclass(w.category, (SkippedFilesWarning, LegacyLayoutWarning,
                                   MissingShardsWarning, LeftoverFilesWarning)):
            print(f"WARNING: {w.message}", file=sys.stderr)
        elif others:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def _cluster_executor(args: argparse.Namespace) -> cf.Executor | None:
    """The executor ``--dask-scheduler`` / ``--ray`` name, or ``None`` (local threads)."""
    if getattr(args, "dask_scheduler", None):
        from ..index.cluster import DaskExecutor

        return DaskExecutor(args.dask_scheduler)
    if getattr(args, "ray", None):
        from ..index.cluster import RayExecutor

        return RayExecutor(args.ray)
    return None


def cmd_build(args: argparse.Namespace, options: Options) -> int:
    """``ofindex build``: index files; exit 3 when an index covers only a valid prefix."""
    executor = _cluster_executor(args)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results = build_index(
                args.paths, format=args.format, index_dir=args.index_dir, verify=args.verify,
                allow_partial=args.allow_partial, workers=args.workers,
                storage_options=options, progress=not args.no_progress and sys.stderr.isatty(),
                executor=executor, resume=args.resume, compression=args.compression,
                seek_spacing=args.seek_spacing, checksums=args.checksums, strict=args.strict,
                migrate=args.migrate, allow_missing_shards=args.allow_missing_shards,
                columns=column_names(args.columns),
                keys=column_names(args.keys, flag="--keys"),
            )
    finally:
        if executor is not None:
            executor.shutdown()
    _print_skipped(caught, others=False)  # partial indexes are reported below
    size = sum(r.size for r in results)
    partial = [r for r in results if r.partial]
    for r in partial:
        print(f"WARNING: {r.data_url}: only {r.records} records indexed (PARTIAL): {r.problem}",
              file=sys.stderr)
    print(_build_summary(results, verified=args.verify))
    index = sum(r.index_bytes for r in results)
    if index:
        print(f"index: {index} bytes, {100 * index / size if size else 0:.2f}% of the data")
    return EXIT_PARTIAL if partial else EXIT_OK


def column_names(text: str, *, flag: str = "--columns") -> tuple[str, ...]:
    """``--columns`` (or ``flag``): feature names separated by commas, each once (none for
    ``""``).

    Raises:
        UsageError: An empty name, or a name given twice.
    """
    if not text:
        return ()
    names = tuple(name.strip() for name in text.split(","))
    if not all(names) or len(set(names)) != len(names):
        raise UsageError(f"{flag} takes feature names separated by commas, each once, not "
                         f"{text!r}")
    return names


def _build_summary(results: Sequence[BuildResult], *, verified: bool) -> str:
    """One line for a build: what was indexed now, and what was already fresh (skipped)."""
    built = [r for r in results if not r.skipped]
    packed = [r for r in built if r.compression is not Compression.NONE]
    unpacked = (f" ({len(packed)} compressed: {sum(r.size for r in packed)} bytes, "
                f"{sum(r.uncompressed_size for r in packed)} uncompressed)" if packed else "")
    line = (f"indexed {len(built)} files" if not built and len(results) > len(built) else
            f"indexed {len(built)} files, {sum(r.records for r in built)} records, "
            f"{sum(r.size for r in built)} bytes{unpacked}")
    line += " (verified)" if verified and built else ""
    skipped = len(results) - len(built)
    if skipped:
        line += (f"; {skipped} already fresh, skipped ({sum(r.records for r in results)} "
                 f"records, {sum(r.size for r in results)} bytes in all)")
    return line


def cmd_info(args: argparse.Namespace, options: Options) -> int:
    """``ofindex info``: shards, counts, sizes and index state (partial indexes shown; files
    without an index: see :mod:`.unindexed`; hidden files a killed writer left: a warning
    first)."""
    from . import tfds_info

    builder = tfds_info.builder_of(args, options)
    if builder is not None:
        return tfds_info.cmd_info(args, builder)
    for path in args.paths:
        left = find_leftovers(path, args.index_dir)
        if left is not None:
            print(f"WARNING: {left.describe()}", file=sys.stderr)
    try:
        ds = _open(args, options, verify=False)
    except IndexNotFoundError as missing:
        from . import unindexed

        return unindexed.cmd_info(args, options, missing)
    shards = ds.shards
    partial = [s for s in shards if s.partial]
    comps = [c.name.lower() for c in ds.compressions]  # loads every sidecar
    schema = None if args.schema is None else infer_spec(ds, sample=args.schema)
    if args.json:
        print(json.dumps({
            "format": ds.format.name.lower(), "records": len(ds),
            "bytes": sum(s.bytes for s in shards), "identity": ds.identity,
            "loops": implementation(),
            "partial_shards": len(partial),
            "compression": sorted(set(comps)),
            "shards": [{"url": s.url, "records": s.records, "bytes": s.bytes,
                        "index": s.index_url, "partial": s.partial, "compression": c}
                       for s, c in zip(shards, comps, strict=True)],
            **({} if schema is None else {"schema": schema.to_dict()}),
        }, indent=2))
        return EXIT_OK
    print(f"format:  {ds.format.name.lower()}")
    print(f"compression: {', '.join(sorted(set(comps))) or 'none'}")
    print(f"shards:  {len(shards)}")
    print(f"records: {len(ds)}")
    print(f"bytes:   {sum(s.bytes for s in shards)}")
    print(f"identity: {ds.identity}")  # what resume states are checked against
    print(f"loops:   {implementation()}")
    if partial:
        print(f"PARTIAL: {len(partial)} shard(s) indexed only up to damaged data (marked below)")
    width = max(len(str(s.records)) for s in shards) if shards else 1
    for s in shards[:50]:
        mark = "  PARTIAL" if s.partial else ""
        print(f"  {s.records:>{width}}  {s.bytes:>12}  {s.url}{mark}")
    if len(shards) > 50:
        print(f"  … and {len(shards) - 50} more shards")
    if schema is not None:
        print(f"schema ({schema.sampled} records sampled):")
        print(to_python(schema))
    return EXIT_OK


def cmd_get(args: argparse.Namespace, options: Options) -> int:
    """``ofindex get``: print records (hex preview, decoded, or raw bytes), by number or by
    ``--key`` (exit 1 when a key is found nowhere)."""
    if bool(args.indices) == bool(args.key):
        raise UsageError("give record numbers, or --key COLUMN=VALUE (not both)")
    ds = _open(args, options, verify=not args.no_verify)
    indices, missing = (queries.keyed_indices(ds, args.key) if args.key
                        else (args.indices, []))
    try:
        records = ds.__getitems__(indices)
    except RecordIndexError as exc:  # a record number the dataset has not: a bad argument
        raise UsageError(str(exc)) from None
    _print_got(args, ds, indices, records)
    return queries.report_missing(missing)


def cmd_find(args: argparse.Namespace, options: Options) -> int:
    """``ofindex find``: the numbers of the records meeting every ``--where`` (see
    :mod:`.queries`)."""
    with _open(args, options, verify=False) as ds:
        return queries.cmd_find(args, ds)


def _print_got(args: argparse.Namespace, ds: Dataset, indices: Sequence[int],
               records: list[bytes]) -> None:
    """Print the records ``get`` read: raw, decoded, or a hex preview, each with its place."""
    for index, payload in zip(indices, records, strict=True):
        if args.raw:
            sys.stdout.buffer.write(payload)
            continue
        shard, local = ds.locate(index)
        text = (_decoded_text(payload, args.kind, ds.format, index) if args.decode
                else _preview(payload))
        print(f"# record {index} (shard {shard}, record {local}, {len(payload)} bytes)")
        print(text)


def _decoded_text(payload: bytes, kind: str | None, fmt: RecordFormat, index: int) -> str:
    from .. import decode

    if kind is None:
        kind = "ofrecord" if fmt is RecordFormat.OFRECORD else "example"
    _check_message_type(payload, kind, index)
    if kind == "example":
        return decode.format_decoded(decode.decode_example(payload))
    if kind == "sequence":
        context, lists = decode.decode_sequence_example(payload)
        return ("context:\n" + decode.format_decoded(context) + "\nfeature_lists:\n"
                + decode.format_decoded(lists))
    return decode.format_decoded(decode.decode_ofrecord(payload))


def _check_message_type(payload: bytes, kind: str, index: int) -> None:
    """Refuse a record that is not a message of ``kind``: protobuf's wire format lets the
    bytes of one message type parse as another (a ``tf.train.Example`` read as an ``OFRecord``
    gives features named by binary junk), so a parse alone proves nothing; feature names
    that are not printable text, or a parse that fails, mean another message type."""
    from google.protobuf.message import DecodeError as ProtobufDecodeError

    from ..errors import DecodeError
    from ..proto import example_pb2, ofrecord_pb2

    try:
        if kind == "ofrecord":
            names = list(ofrecord_pb2.OFRecord.FromString(payload).feature)
        elif kind == "sequence":
            message = example_pb2.SequenceExample.FromString(payload)
            names = [*message.context.feature, *message.feature_lists.feature_list]
        else:
            names = list(example_pb2.Example.FromString(payload).features.feature)
    except (ProtobufDecodeError, UnicodeDecodeError) as exc:
        why = f"it does not parse as one ({exc})"
    else:  # proto2 (OFRecord) hands names that are not UTF-8 over as bytes
        odd = next((name for name in names
                    if not isinstance(name, str) or not name.isprintable()), None)
        if odd is None:
            return
        why = f"it parses only as junk, a feature named {odd[:40]!r}"
    other = "ofrecord" if kind != "ofrecord" else "example"
    raise DecodeError(
        f"record {index} is not a {_MESSAGE_NAMES[kind]}: {why}; decode it as the message "
        f"type it holds (e.g. --as {other}), or print its bytes with --raw")


_MESSAGE_NAMES = {"example": "tf.train.Example", "sequence": "tf.train.SequenceExample",
                  "ofrecord": "OneFlow OFRecord"}


def _preview(payload: bytes, limit: int = 64) -> str:
    text = payload[:limit].hex(" ")
    return text + (f" … (+{len(payload) - limit} bytes)" if len(payload) > limit else "")


def cmd_verify(args: argparse.Namespace, options: Options) -> int:
    """``ofindex verify``: check every sidecar and record CRC; exit 3 for a partial index.

    Each PATH is verified as a dataset of its own (``verify a/ b/`` checks two datasets, and
    says so), the exit code is the worst of them."""
    codes = [_verify_one(argparse.Namespace(**{**vars(args), "paths": path}), options,
                         name=path if len(args.paths) > 1 else None)
             for path in args.paths]
    return max(codes)


def _verify_one(args: argparse.Namespace, options: Options, name: str | None) -> int:
    from tqdm.auto import tqdm

    ds = _open(args, options, verify=True)
    ds.check_indexes()
    n = 0
    with tqdm(total=len(ds), unit="rec", disable=not sys.stderr.isatty(),
              desc="verifying") as bar:
        for batch in ds.iter_batches(65536, as_buffer=True):  # no object per record
            n += len(batch)
            bar.update(len(batch))
    partial = [s for s in ds.shards if s.partial]
    for s in partial:
        print(f"PARTIAL: {s.url}: only its first {s.records} records are indexed; the rest of "
              "the file is damaged (re-copy it and run `ofindex build` again)", file=sys.stderr)
    print(f"{'partial' if partial else 'ok'}: {f'{name}: ' if name else ''}{len(ds.shards)} "
          f"files, {n} records verified")
    if ds.format is RecordFormat.OFRECORD:
        bare = ds.shards_without_checksums()
        if bare:
            print(f"note: {len(bare)} of {len(ds.shards)} OFRecord files have no checksums in "
                  f"their sidecars (e.g. {bare[0]}): only their framing was checked; rebuild "
                  "with `ofindex build --checksums --force` to check their payloads too")
    return EXIT_PARTIAL if partial else EXIT_OK


def cmd_export_index(args: argparse.Namespace, options: Options) -> int:
    """``ofindex export-index``: write DALI / tfrecord2idx text indexes (``-o -``: to stdout;
    a device, a FIFO or ``/dev/stdout`` is written in place, never replaced)."""
    storages = Storages(options)
    location = resolve(args.paths, index_dir=args.index_dir, storages=storages, manifest=False,
                       allow_missing_shards=args.allow_missing_shards)
    storage, files = location.storage, location.files
    to_stdout = args.output == "-"
    out = storages.for_url(args.output) if args.output and not to_stdout else None
    into_directory = out is not None and out[0].is_dir(out[1])
    if len(files) > 1 and (to_stdout or (out is not None and not into_directory)):
        raise UsageError(f"-o {args.output} takes the text index of one data file, but "
                         f"{len(files)} are named ({storage.url(files[0])} …): name one file, "
                         "or a directory for -o")
    for f in files:
        text, records = _text_index(storage, location, f, args.compression)
        if to_stdout:
            sys.stdout.buffer.write(text)
            sys.stdout.flush()
            print(f"-: {records} records", file=sys.stderr)
            continue
        if out is None:
            target_storage, target = storage, f + ".idx"
        elif into_directory:
            target_storage = out[0]
            target = out[0].join(out[1], storage.basename(f) + ".idx")
        else:
            target_storage, target = out
        target_storage.write_atomic(target, [text])
        # a summary beside the index in the same stream would spoil it
        said = sys.stderr if target_storage.is_local and descriptor_of(target) == 1 else None
        print(f"{target_storage.url(target)}: {records} records", file=said)
    return EXIT_OK


def _text_index(storage: Storage, location: DatasetLocation, path: str,
                compression: str) -> tuple[bytes, int]:
    """The text index of the data file ``path`` from its sidecar, and its number of records.

    Raises:
        IndexNotFoundError: The file has no sidecar.
        StaleIndexError: The file changed since it was indexed.
        OfindexError: The file is compressed (a text index gives offsets into the file).
    """
    ist, ipath = location.sidecar_of(path)
    try:
        sc = load_sidecar(ist, ipath)
    except FileNotFoundError:
        raise IndexNotFoundError(
            f"{ist.url(ipath)}: no index; run `ofindex build {storage.url(path)}` first"
        ) from None
    check_identity(storage, path, sc.header.stamp, storage.stamp(path), ist.url(ipath))
    if sc.compressed or compression in ("gzip", "zlib"):
        raise OfindexError(
            f"{storage.url(path)}: the file is {sc.compression.name.lower()}-compressed; a "
            "text index gives offsets into the file itself, which DALI and tfrecord2idx "
            "read uncompressed — decompress it (gunzip / zlib) and index that copy"
        )
    return export_text(sc), len(sc)


def cmd_import_index(args: argparse.Namespace, options: Options) -> int:
    """``ofindex import-index``: turn a text index into a sidecar, checked line by line against
    the data file (its size and its record framing). The text index is read up to a bound
    set by the data file's size (a FIFO or a device as a stream, never past it)."""
    storages = Storages(options)
    storage, data = storages.for_url(args.data)
    if storage.is_local and not os.path.isfile(data):
        raise DataFileNotFoundError(
            f"{data}: not a data file (missing, a directory or a special file); name the "
            "record file the text index describes")
    tstorage, tpath = storages.for_url(args.text_index)
    given = None if args.format == "auto" else RecordFormat.parse(args.format)
    text = read_text_index(tstorage, tpath, storage.stamp(data).size, data_url=storage.url(data))
    header, body, records = sidecar_from_text(storage, data, text, text_url=tstorage.url(tpath),
                                              fmt=given)
    ist, ipath = sidecar_location(storage, data, args.index_dir, storages)
    ist.write_atomic(ipath, [header, body])
    print(f"{ist.url(ipath)}: {records} records")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace, options: Options) -> int:
    """``ofindex demo``: generate a small dataset, index it, read it with timings."""
    from .demo import run_demo

    return run_demo(args.dir, args.records, args.shards)


__all__ = [
    "cmd_build",
    "cmd_demo",
    "cmd_events",
    "cmd_export_index",
    "cmd_get",
    "cmd_import_index",
    "cmd_info",
    "cmd_plan",
    "cmd_verify",
]


def cmd_schema(args: argparse.Namespace, options: Options) -> int:
    """``ofindex schema`` (see :mod:`.inspection`; a TFDS builder directory: its
    ``features.json``, :mod:`.tfds_info`)."""
    from . import inspection, tfds_info, unindexed

    builder = tfds_info.builder_of(args, options)
    if builder is not None:
        return tfds_info.cmd_schema(args, builder)

    try:
        ds = _open(args, options, verify=False)
    except IndexNotFoundError as missing:
        return unindexed.cmd_schema(args, options, missing)
    with ds:
        return inspection.cmd_schema(args, options, ds)


def cmd_head(args: argparse.Namespace, options: Options) -> int:
    """``ofindex head`` (see :mod:`.inspection`)."""
    from . import inspection, unindexed

    try:
        ds = _open(args, options, verify=True)
    except IndexNotFoundError as missing:
        return unindexed.cmd_head(args, options, missing)
    with ds:
        return inspection.cmd_head(args, options, ds)


def cmd_stats(args: argparse.Namespace, options: Options) -> int:
    """``ofindex stats`` (see :mod:`.inspection`)."""
    from . import inspection

    with _open(args, options, verify=False) as ds:
        return inspection.cmd_stats(args, options, ds)


def cmd_convert(args: argparse.Namespace, options: Options) -> int:
    """``ofindex convert`` (see :mod:`.inspection`)."""
    from . import inspection

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SkippedFilesWarning)
        warnings.simplefilter("always", LeftoverFilesWarning)
        code = inspection.cmd_convert(args, options)
    _print_skipped(caught, others=True)
    return code
