"""Implementations of the ``ofindex`` subcommands (argument parsing lives in :mod:`.parser`)."""

from __future__ import annotations

import json
import sys
import warnings

from .._accel import implementation
from ..errors import OfindexError
from ..formats.framing import RecordFormat
from ..formats.location import resolve, sidecar_location
from ..formats.sidecar import load_sidecar
from ..formats.textindex import export_text, import_text
from ..index.build_file import detect_file_format
from ..index.builder import build_index
from ..read.open import open as open_dataset
from ..storage import storage_for
from .exitcodes import EXIT_OK, EXIT_PARTIAL


def cmd_build(args, options) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # partial indexes are reported below
        results = build_index(
            args.paths, format=args.format, index_dir=args.index_dir, verify=args.verify,
            allow_partial=args.allow_partial, workers=args.workers, storage_options=options,
            progress=not args.no_progress and sys.stderr.isatty(), checksums=args.checksums,
        )
    records = sum(r.records for r in results)
    size = sum(r.size for r in results)
    partial = [r for r in results if r.partial]
    for r in partial:
        print(f"WARNING: {r.data_url}: only {r.records} records indexed (PARTIAL): {r.problem}",
              file=sys.stderr)
    print(f"indexed {len(results)} files, {records} records, {size} bytes"
          + (" (verified)" if args.verify else ""))
    return EXIT_PARTIAL if partial else EXIT_OK


def cmd_info(args, options) -> int:
    ds = open_dataset(args.paths, format=args.format, index_dir=args.index_dir,
                      storage_options=options, verify=False)
    shards = ds.shards
    if args.json:
        print(json.dumps({
            "format": ds.format.name.lower(), "records": len(ds),
            "bytes": sum(s.bytes for s in shards), "loops": implementation(),
            "shards": [{"url": s.url, "records": s.records, "bytes": s.bytes,
                        "index": s.index_url} for s in shards],
        }, indent=2))
        return EXIT_OK
    print(f"format:  {ds.format.name.lower()}")
    print(f"shards:  {len(shards)}")
    print(f"records: {len(ds)}")
    print(f"bytes:   {sum(s.bytes for s in shards)}")
    print(f"loops:   {implementation()}")
    width = max(len(str(s.records)) for s in shards) if shards else 1
    for s in shards[:50]:
        print(f"  {s.records:>{width}}  {s.bytes:>12}  {s.url}")
    if len(shards) > 50:
        print(f"  … and {len(shards) - 50} more shards")
    return EXIT_OK


def cmd_get(args, options) -> int:
    ds = open_dataset(args.paths, format=args.format, index_dir=args.index_dir,
                      storage_options=options, verify=not args.no_verify)
    records = ds.__getitems__(args.indices)
    for index, payload in zip(args.indices, records, strict=True):
        if args.raw:
            sys.stdout.buffer.write(payload)
            continue
        shard, local = ds.locate(index)
        print(f"# record {index} (shard {shard}, record {local}, {len(payload)} bytes)")
        if args.decode:
            print(_decoded_text(payload, args.decode, ds.format))
        else:
            print(_preview(payload))
    return EXIT_OK


def _decoded_text(payload: bytes, kind: str, fmt: RecordFormat) -> str:
    from .. import decode

    if kind == "auto":
        kind = "ofrecord" if fmt is RecordFormat.OFRECORD else "example"
    if kind == "example":
        return decode.format_decoded(decode.decode_example(payload))
    if kind == "sequence":
        context, lists = decode.decode_sequence_example(payload)
        return ("context:\n" + decode.format_decoded(context) + "\nfeature_lists:\n"
                + decode.format_decoded(lists))
    return decode.format_decoded(decode.decode_ofrecord(payload))


def _preview(payload: bytes, limit: int = 64) -> str:
    text = payload[:limit].hex(" ")
    return text + (f" … (+{len(payload) - limit} bytes)" if len(payload) > limit else "")


def cmd_verify(args, options) -> int:
    from tqdm.auto import tqdm

    ds = open_dataset(args.paths, format=args.format, index_dir=args.index_dir,
                      storage_options=options, verify=True)
    ds.check_indexes()
    n = 0
    with tqdm(total=len(ds), unit="rec", disable=not sys.stderr.isatty(), desc="verifying") as bar:
        for _ in ds.iter_records():
            n += 1
            if n % 65536 == 0:
                bar.update(65536)
        bar.update(n % 65536)
    print(f"ok: {len(ds.shards)} files, {n} records verified")
    if ds.format is RecordFormat.OFRECORD:
        bare = ds.shards_without_checksums()
        if bare:
            print(f"note: {len(bare)} of {len(ds.shards)} OFRecord files have no checksums in "
                  f"their sidecars (e.g. {bare[0]}): only their framing was checked; rebuild "
                  "with `ofindex build --checksums` to check their payloads too")
    return EXIT_OK


def cmd_export_index(args, options) -> int:
    location = resolve(args.paths, index_dir=args.index_dir, storage_options=options,
                       manifest=False)
    storage, files = location.storage, location.files
    out_storage, out_dir = storage_for(args.output, options) if args.output else (None, None)
    for f in files:
        ist, ipath = location.sidecar_of(f)
        try:
            sc = load_sidecar(ist, ipath)
        except FileNotFoundError:
            raise OfindexError(
                f"{ist.url(ipath)}: no index; run `ofindex build {storage.url(f)}` first"
            ) from None
        sc.check_fresh(storage.stamp(f), storage.url(f))
        text = export_text(sc)
        if out_storage is None:
            target_storage, target = storage, f + ".idx"
        elif len(files) == 1 and not out_storage.is_dir(out_dir):
            target_storage, target = out_storage, out_dir
        else:
            target_storage = out_storage
            target = out_storage.join(out_dir, storage.basename(f) + ".idx")
        target_storage.write_atomic(target, [text])
        print(f"{target_storage.url(target)}: {len(sc)} records")
    return EXIT_OK


def cmd_import_index(args, options) -> int:
    storage, data = storage_for(args.data, options)
    tstorage, tpath = storage_for(args.text_index, options)
    stamp = storage.stamp(data)
    fmt = (detect_file_format(storage, data, stamp.size) if args.format == "auto"
           else RecordFormat.parse(args.format)) or RecordFormat.TFRECORD
    header, body = import_text(tstorage.read_all(tpath), fmt, stamp, path=tstorage.url(tpath),
                               data_url=storage.url(data))
    ist, ipath = sidecar_location(storage, data, args.index_dir, options)
    ist.write_atomic(ipath, [header, body])
    print(f"{ist.url(ipath)}: {(len(body)) // 8} records")
    return EXIT_OK


def cmd_demo(args, options) -> int:
    from .demo import run_demo

    return run_demo(args.dir, args.records, args.shards)


__all__ = ["cmd_build", "cmd_demo", "cmd_export_index", "cmd_get", "cmd_import_index",
           "cmd_info", "cmd_verify"]
