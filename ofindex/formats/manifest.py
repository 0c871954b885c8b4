"""The dataset manifest: one small JSON file listing every shard of a dataset.

From 10,000 shards the builder writes the same columns as the compact, paged
``ofindex-manifest.bin`` instead (:mod:`.manifest_binary`, read by :mod:`.compact_manifest`);
this module is the JSON one, which every release reads.

``ofindex-manifest.json`` holds, per shard: its name (relative to the data directory), record
count, size and fingerprint (ETag / generation / mtime as recorded in its sidecar). Opening a
dataset through it costs one round of requests however many shards there are; each shard's
sidecar is fetched only when the shard is first read (see :mod:`ofindex.read.shards`).

Where the builder writes it (``build_index(..., manifest=None)``, the default):

* the paths name one directory: ``<directory>.ofindex/ofindex-manifest.json`` beside its
  sidecars (see :mod:`ofindex.formats.placement`), or ``<index_dir>/ofindex-manifest.json``
  when sidecars go to a separate ``index_dir`` (a read-only data bucket);
* a glob or a list: no manifest, unless ``manifest=True`` (same place, the files' common
  directory) or ``manifest="<path or URL>"``. ``manifest=False`` never writes one.

Layout (columnar, so 10,000 shards stay a few hundred kB)::

    {"ofindex_manifest": 3, "format": "tfrecord",
     "data_dir": null | "<URL>",      # null: the manifest's own directory
     "index_dir": null | "<URL>",     # null: sidecars beside the data, <name>.ofidx
     "layout": "sibling",             # only in the default place (see below)
     "shards": {"name": [...], "records": [...], "size": [...], "fingerprint": [...],
                "body_crc": [...],        # each sidecar's body CRC (its header field at 40)
                "compression": [...]},    # only when a shard is compressed: "gzip"/"zlib"/""
     "partial": [...],                # only when some shards are indexed partially
     "identity": "0123456789abcdef",  # the dataset's identity (.dataset_identity)
     "crc32c": 1234}                  # CRC32C of the manifest's text without this member

The ``crc32c`` member closes the document: it is the CRC32C of the exact bytes of the JSON
text without it (``json.dumps(doc, separators=(",", ":"))`` of the members before it, in
their order), so a record count or name changed by a bad copy or by hand is refused when
the manifest is read, before any global record number is mapped through it. ``body_crc``
names the version of each sidecar the manifest was written with: a sidecar rebuilt since
(even for a data file of the same size and mtime) disagrees with it, and cached pages of
the old one are never used. Version 1 manifests (ofindex 0.2: no ``crc32c`` and no
``body_crc``) are still read.

A manifest in the default place (version 3), ``train.ofindex/ofindex-manifest.json``, says
``"layout": "sibling"`` instead of naming its directories: the sidecars are beside it and the
data directory is its own directory's name without ``.ofindex`` (a root's ``.ofindex``: the
root), so the two directories can be copied, renamed or uploaded together (to another disk,
a bucket) and still open. Version 2 manifests (no ``layout``) are still read.

The totals a manifest states (and a dataset's, of its shards' counts) are summed by
:func:`exact_sum`, which never wraps as numpy's 64-bit sums do.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Sequence
from typing import Any

import crc32c as _crc32c
import numpy as np

from ..errors import ManifestError
from ..storage import Storage, Storages
from .dataset_identity import is_identity
from .framing import RecordFormat
from .placement import sibling_data_dir
from .sidecar_header import Compression

MANIFEST_NAME = "ofindex-manifest.json"
#: The version this ofindex writes.
VERSION = 3
#: The versions it reads (1: no checksum, no sidecar CRCs; 2: no relative directories).
VERSIONS = (1, 2, 3)
#: The member that closes the document with the CRC32C of the text before it.
CRC_MEMBER = "crc32c"


# -- totals that never wrap: numpy sums 64-bit integers modulo 2^64 (five counts of 2^62 add
# up to 2^62, which would pass a check against a forged total); a manifest's totals (JSON or
# compact) and a dataset's are summed here instead

#: Values summed per step: each is cut into halves of at most 2^32, so that a step's sums of
#: halves stay below 2^62 and fit an int64 whatever the values.
_SUM_STEP = 1 << 30


def exact_sum(values: np.ndarray) -> int:
    """The sum of a 1-d array of integers (any integer dtype up to 64 bits), as a Python
    int: never wrapped, whatever the values and however many.

    Args:
        values: The integers.

    Returns:
        Their exact sum.
    """
    total = 0
    for at in range(0, len(values), _SUM_STEP):
        part = values[at : at + _SUM_STEP]
        if part.dtype.itemsize < 8:  # below 2^32 each: their sum fits an int64
            total += int(part.sum(dtype=np.int64))
        elif part.dtype.kind == "u":
            total += (int((part >> np.uint64(32)).sum(dtype=np.int64)) << 32) + int(
                (part & np.uint64(0xFFFFFFFF)).sum(dtype=np.int64))
        else:  # the arithmetic shift keeps the sign in the high half
            total += (int((part >> 32).sum()) << 32) + int((part & 0xFFFFFFFF).sum())
    return total


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A parsed manifest; ``data_dir``/``index_dir`` are absolute URLs (or ``None``).

    ``body_crcs`` holds each shard's sidecar body CRC (``None`` for a version 1 manifest);
    ``checksummed`` tells whether the manifest carried a checksum (version 2 always does);
    ``identity`` is the dataset's identity (:mod:`.dataset_identity`), ``None`` in manifests
    written by ofindex 0.2.
    """

    format: RecordFormat
    data_dir: str
    index_dir: str | None
    names: list[str]
    records: list[int]
    sizes: list[int]
    fingerprints: list[str]
    partial: tuple[str, ...] = ()
    compressions: list[Compression] = dataclasses.field(default_factory=list)
    body_crcs: list[int] | None = None
    checksummed: bool = True
    identity: str | None = None

    @property
    def compressed(self) -> bool:
        """Whether any shard is compressed."""
        return any(c is not Compression.NONE for c in self.compressions)

    def __len__(self) -> int:
        return len(self.names)


def _dir_of(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[0] if "/" in url.rstrip("/") else "."


def _same_place(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def stored_directories(manifest_url: str, data_dir: str,
                       index_dir: str | None) -> tuple[str | None, str | None, bool]:
    """How a manifest at ``manifest_url`` names its directories: ``(data_dir, index_dir,
    sibling)``, a directory equal to the manifest's own stored as ``None``, and both as
    ``None`` with ``sibling`` in the default place (see the module's notes)."""
    here = _dir_of(manifest_url)
    sibling = (index_dir is not None and _same_place(index_dir, here)
               and _same_place(data_dir, sibling_data_dir(here) or ""))
    return (None if sibling or _same_place(data_dir, here) else data_dir,
            None if index_dir is None or sibling else index_dir, sibling)


def resolved_directories(data_dir: str | None, index_dir: str | None, sibling: bool,
                         manifest_url: str) -> tuple[str, str | None]:
    """The data directory and index directory a manifest at ``manifest_url`` names, from
    what it stores (the inverse of :func:`stored_directories`)."""
    here = _dir_of(manifest_url)
    if sibling:
        return sibling_data_dir(here) or here, here
    return data_dir or here, index_dir


def encode_manifest(
    fmt: RecordFormat, manifest_url: str, data_dir: str, index_dir: str | None,
    names: list[str], records: list[int], sizes: list[int], fingerprints: list[str],
    partial: tuple[str, ...] = (),
    compressions: list[Compression] | None = None,
    body_crcs: list[int] | None = None,
    identity: str | None = None,
) -> bytes:
    """The manifest's bytes; directories equal to the manifest's own are stored as ``null``;
    ``partial`` names the shards whose index covers only a valid prefix; ``body_crcs`` gives
    each sidecar's body CRC. The text ends with its own checksum (see the module's notes)."""
    shards: dict[str, Any] = {"name": names, "records": records, "size": sizes,
                              "fingerprint": fingerprints}
    if body_crcs is not None:
        shards["body_crc"] = body_crcs
    if compressions and any(c is not Compression.NONE for c in compressions):
        shards["compression"] = ["" if c is Compression.NONE else c.name.lower()
                                 for c in compressions]
    stored_data, stored_index, sibling = stored_directories(manifest_url, data_dir, index_dir)
    doc: dict[str, Any] = {
        "ofindex_manifest": VERSION,
        "format": fmt.name.lower(),
        "data_dir": stored_data,
        "index_dir": stored_index,
    }
    if sibling:
        doc["layout"] = "sibling"
    doc["shards"] = shards
    if partial:
        doc["partial"] = sorted(partial)
    if identity is not None:
        doc["identity"] = identity
    text = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    return text[:-1] + b',"%s":%d}' % (CRC_MEMBER.encode(), _crc32c.crc32c(text))


def _check_sum(doc: dict[str, Any], manifest_url: str) -> None:
    """Check the ``crc32c`` member of a version 2 manifest against the rest of its text."""
    stored = doc.pop(CRC_MEMBER, None)
    text = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    if type(stored) is not int or stored != _crc32c.crc32c(text):
        why = "has no checksum" if stored is None else "fails its checksum"
        raise ManifestError(
            f"{manifest_url}: the manifest {why} (edited, or damaged by a bad copy): its shard "
            "list and record counts cannot be trusted; rebuild it with "
            "`ofindex build <dataset directory>`"
        )


#: Record counts and sizes at most this large (and the sum of the counts): larger ones are
#: not from a real dataset.
_MAX_COUNT = 1 << 62


def _column(shards: dict[str, Any], key: str, kind: type) -> list[Any]:
    values = shards[key]
    if type(values) is not list or not set(map(type, values)) <= {kind}:  # bool is no int
        raise TypeError(f"shards.{key} must be a list of {kind.__name__}")
    return values


#: A shard name: a path relative to the data directory whose parts are neither empty (so no
#: leading "/" and no "://") nor "." or "..", without backslashes or NULs.
_GOOD_NAME = re.compile(r"(?!\.\.?(?:/|$))[^/\\\x00]+(?:/(?!\.\.?(?:/|$))[^/\\\x00]+)*")


def good_name(name: str) -> bool:
    """Whether a manifest's shard name is a file of its data directory (see above)."""
    return _GOOD_NAME.fullmatch(name) is not None


def _directories(doc: dict[str, Any], manifest_url: str) -> tuple[str, str | None]:
    """The data directory and index directory a manifest at ``manifest_url`` names (see the
    module's notes).

    Raises:
        TypeError: A directory that is not a string or null.
        ValueError: An unknown ``layout``.
    """
    for key in ("data_dir", "index_dir"):
        if doc.get(key) is not None and type(doc[key]) is not str:
            raise TypeError(f"{key} must be a string or null")
    layout = doc.get("layout")
    if layout is not None and layout != "sibling":
        raise ValueError('layout must be "sibling" when given')
    return resolved_directories(doc.get("data_dir"), doc.get("index_dir"), layout is not None,
                                manifest_url)


def decode_manifest(raw: bytes, manifest_url: str) -> Manifest:
    """Parse and check a manifest read from ``manifest_url``.

    Raises:
        ManifestError: Not a manifest, another version, or contents that cannot describe a
            dataset: columns of other types or lengths, a shard listed twice, counts or sizes
            out of range, or a shard name that would lead outside the data directory.
    """
    try:
        doc = json.loads(raw)
        if type(doc) is not dict or type(doc.get("shards")) is not dict:
            raise TypeError("not a JSON object with a 'shards' object")
        version = doc["ofindex_manifest"]
        if type(version) is int and version >= 2:  # checksummed since version 2
            _check_sum(doc, manifest_url)
        shards = doc["shards"]
        names = _column(shards, "name", str)
        records = _column(shards, "records", int)
        sizes = _column(shards, "size", int)
        fps = _column(shards, "fingerprint", str)
        comp_names = (_column(shards, "compression", str) if "compression" in shards
                      else [""] * len(names))
        body_crcs = _column(shards, "body_crc", int) if "body_crc" in shards else None
        parsed = {c: Compression.parse(c) for c in set(comp_names)}  # a few distinct names
        comps = [parsed[c] for c in comp_names]
        if type(doc["format"]) is not str:
            raise TypeError("format must be a string")
        fmt = RecordFormat.parse(doc["format"])
        data_dir, index_dir = _directories(doc, manifest_url)
        partial = tuple(_column(doc, "partial", str)) if "partial" in doc else ()
        identity = doc.get("identity")
        if identity is not None and not is_identity(identity):
            raise ValueError("identity must be 16 hexadecimal digits")
    except ManifestError:
        raise
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ManifestError(
            f"{manifest_url}: not a valid ofindex manifest ({type(exc).__name__}: "
            f"{str(exc)[:200]}); rebuild it with `ofindex build <dataset directory>`"
        ) from None
    if version not in VERSIONS or type(version) is not int:
        raise ManifestError(
            f"{manifest_url}: manifest version {str(version)[:20]} is not supported (this "
            f"ofindex reads versions {', '.join(map(str, VERSIONS))}); rebuild with `ofindex "
            "build` or upgrade ofindex"
        )
    if not (len(names) == len(records) == len(sizes) == len(fps) == len(comps)) or (
            body_crcs is not None and len(body_crcs) != len(names)):
        raise ManifestError(f"{manifest_url}: manifest columns differ in length; rebuild it")
    if body_crcs is not None and body_crcs and not 0 <= min(body_crcs) <= max(body_crcs) < 2**32:
        raise ManifestError(f"{manifest_url}: impossible sidecar CRC; rebuild it")
    if len(set(names)) != len(names):
        raise ManifestError(f"{manifest_url}: manifest lists a shard twice; rebuild it")
    if not all(map(good_name, names)):
        bad = next(n for n in names if not _GOOD_NAME.fullmatch(n))
        raise ManifestError(f"{manifest_url}: shard name {bad[:80]!r} is not a file of the data "
                           "directory (absolute, '..', a URL or empty); rebuild the manifest")
    if records and (min(records) < 0 or min(sizes) < 0 or max(sizes) > _MAX_COUNT
                    or sum(records) > _MAX_COUNT):
        raise ManifestError(f"{manifest_url}: impossible record count or size; rebuild it")
    if not set(partial) <= set(names):
        raise ManifestError(f"{manifest_url}: manifest marks unknown shards partial; rebuild it")
    return Manifest(fmt, data_dir, index_dir, names, records, sizes, fps, partial,
                    comps, body_crcs, checksummed=version >= 2, identity=identity)


def read_manifest(url: str, storages: Storages) -> Manifest | None:
    """The manifest at ``url``, or ``None`` when there is none (one request).

    Raises:
        ManifestError: It is not a valid manifest.
    """
    storage, path = storages.for_url(url)
    try:
        raw = storage.read_all(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    return decode_manifest(raw, storage.url(path))


def write_manifest(
    url: str, fmt: RecordFormat, data_storage: Storage, data_files: list[str], data_dir: str,
    index_dir: str | None, records: list[int], sizes: list[int], fingerprints: list[str],
    storages: Storages, partial: list[bool] | None = None,
    compressions: list[Compression] | None = None, body_crcs: list[int] | None = None,
    identity: str | None = None,
) -> str:
    """Write the manifest of ``data_files`` (all inside ``data_dir``) to ``url``; returns it."""
    storage, path = storages.for_url(url)
    if storage.is_local:  # local paths are stored absolute
        path = os.path.abspath(path)
    manifest_url = storage.url(path)
    names = relative_names(data_storage, data_files, data_dir)
    data_url, index_url = absolute_directories(data_storage, data_dir, index_dir, storages)
    marked = tuple(n for n, p in zip(names, partial or [False] * len(names), strict=True) if p)
    raw = encode_manifest(fmt, manifest_url, data_url, index_url, names, records, sizes,
                          fingerprints, marked, compressions, body_crcs, identity)
    storage.write_atomic(path, [raw])
    return manifest_url


def relative_names(data_storage: Storage, data_files: Sequence[str], data_dir: str) -> list[str]:
    """The names a manifest stores for ``data_files``: relative to ``data_dir``.

    Raises:
        ValueError: A file is not inside ``data_dir``.
    """
    local = data_storage.is_local
    prefix = (os.path.abspath(data_dir) if local else data_dir).rstrip("/") + "/"
    names = []
    for f in data_files:
        f = os.path.abspath(f) if local else f
        if not f.startswith(prefix):
            raise ValueError(
                f"{data_storage.url(f)} is not inside {data_storage.url(data_dir)}: a manifest "
                "lists the files of one directory"
            )
        names.append(f[len(prefix):])
    return names


def absolute_directories(data_storage: Storage, data_dir: str, index_dir: str | None,
                         storages: Storages) -> tuple[str, str | None]:
    """The data and index directories as a manifest names them (absolute URLs or paths)."""
    if data_storage.is_local:
        data_dir = os.path.abspath(data_dir)
    return (data_storage.url(data_dir.rstrip("/")),
            None if index_dir is None else _absolute(index_dir, storages))


def _absolute(url: str, storages: Storages) -> str:
    storage, path = storages.for_url(url)
    if storage.is_local:
        return os.path.abspath(path)
    return storage.url(path).rstrip("/")


def manifest_url_for(directory_url: str) -> str:
    """Where the manifest of a dataset directory lives."""
    return directory_url.rstrip("/") + "/" + MANIFEST_NAME
