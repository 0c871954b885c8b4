"""The column map: ``ofindex-columns.json``, beside the manifest, says how a dataset written
from Arrow data (``ofindex convert`` of Parquet or a Hugging Face dataset, an Arrow table given
to ``ShardedWriter.write_columns``) maps its columns to features, and holds the Arrow schema to
read them back exactly (docs/format.md, "Column map").

Layout::

    {"ofindex_columns": 1,
     "format": "tfrecord" | "ofrecord",
     "float64": "exact" | "float32",
     "columns": [{"name": "...", "kind": "value" | "list" | "struct", ...}, ...],
     "arrow_schema": "<base64 of the Arrow IPC schema message>",
     "crc32c": 1234}

``crc32c`` is the CRC32C of the compact JSON text of the members before it, as the manifest's.
This module reads and writes the document; :mod:`ofindex.encode.arrow_map` makes its members.
"""

from __future__ import annotations

import json
from typing import Any

import crc32c as _crc32c

from ..errors import ManifestError

#: The file's name, in the dataset's index directory (beside the manifest).
COLUMN_MAP_NAME = "ofindex-columns.json"
VERSION = 1
#: The members, in their order (``crc32c`` closes the document).
MEMBERS = ("ofindex_columns", "format", "float64", "columns", "arrow_schema")
#: The most bytes a column map may have (a schema of thousands of columns stays far below).
MAX_BYTES = 64 << 20


def _text(members: dict[str, Any]) -> str:
    return json.dumps(members, separators=(",", ":"))


def dump_column_map(format: str, float64: str, columns: list[dict[str, Any]],
                    arrow_schema: str) -> bytes:
    """The document's bytes.

    Args:
        format: ``"tfrecord"`` or ``"ofrecord"``.
        float64: How an Example holds float64 values: ``"exact"`` or ``"float32"``.
        columns: Each column's description, in the dataset's column order.
        arrow_schema: The Arrow schema, IPC-serialized, in base64.

    Returns:
        UTF-8 JSON.
    """
    members = {"ofindex_columns": VERSION, "format": format, "float64": float64,
               "columns": columns, "arrow_schema": arrow_schema}
    text = _text(members)
    crc = _crc32c.crc32c(text.encode())
    return (text[:-1] + f',"crc32c":{crc}}}').encode()


def load_column_map(data: bytes, where: str) -> dict[str, Any]:
    """Read and check a column map.

    Args:
        data: The file's bytes.
        where: Its URL, for messages.

    Returns:
        The document without ``crc32c``.

    Raises:
        ManifestError: Not a column map this release reads, or its checksum does not match.
    """
    if len(data) > MAX_BYTES:
        raise ManifestError(f"{where}: {len(data):,} bytes, more than a column map holds "
                            f"({MAX_BYTES:,}); rewrite the dataset")
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise ManifestError(f"{where}: not a column map ({exc}); rewrite the dataset, or "
                            "remove the file to read the records without it") from None
    if not isinstance(doc, dict) or doc.get("ofindex_columns") != VERSION:
        raise ManifestError(f"{where}: not a column map of version {VERSION}; upgrade "
                            "ofindex, or remove the file to read the records without it")
    crc = doc.pop("crc32c", None)
    if tuple(doc) != MEMBERS or _crc32c.crc32c(_text(doc).encode()) != crc:
        raise ManifestError(f"{where}: its checksum does not match its content (changed by "
                            "hand or damaged); rewrite the dataset, or remove the file to "
                            "read the records without it")
    if doc["format"] not in ("tfrecord", "ofrecord") or not isinstance(doc["columns"], list) \
            or not isinstance(doc["arrow_schema"], str):
        raise ManifestError(f"{where}: members of the wrong kind; rewrite the dataset")
    return doc
