"""Encode a batch of records from columns at once (the mirror of ``BatchDecoder``).

Columns are a mapping ``{name: column}`` with one entry per record along the first axis, or
an Arrow table / record batch. A numeric numpy column ``(batch, *shape)`` is encoded with
numpy, without a Python object per value: each record's map entry is a constant prefix and
the row's bytes (floats) or varints, and when every record has the same layout (fixed-shape
floats, small integers) the whole batch is laid out as one 2-D byte array. Other columns
(bytes, lists of values per record, :class:`~ofindex.decode.Ragged` rows, columns with
missing values) go record by record through the single-record encoder. The bytes are those
:mod:`ofindex.encode.messages` writes for the same values: this is a vectorised pure-Python
(numpy) encoder; there is no compiled one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ofindex.decode.spec import FixedLen, Ragged, Spec
from ofindex.encode.arrow import arrow_columns
from ofindex.encode.kinds import (
    BYTES,
    EXAMPLE_TYPES,
    FLOAT32,
    FLOAT64,
    OFRECORD_TYPES,
    numeric_values,
    where,
)
from ofindex.encode.messages import (
    EXAMPLE_FIELDS,
    OFRECORD_FIELDS,
    FeatureRules,
    feature_message,
    map_entry,
    name_bytes,
)
from ofindex.encode.varints import tag, varint, varints
from ofindex.errors import EncodeError

#: One column's map entries: ``(rows, None)`` a ``(batch, width)`` uint8 array (every
#: record's entry the same size), or ``(None, entries)`` one entry per record (``bytes``, or
#: ``(header, value)`` for a single bytes value, joined without an extra copy).
Entries = tuple[np.ndarray | None, list[bytes | tuple[bytes, bytes]] | None]

_KINDS = {"example": (EXAMPLE_TYPES, EXAMPLE_FIELDS, "Example"),
          "ofrecord": (OFRECORD_TYPES, OFRECORD_FIELDS, "OFRecord")}


def _batch_size(columns: Mapping[str, Any]) -> int:
    sizes = {name: len(column) for name, column in columns.items()}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{name!r}: {n}" for name, n in sizes.items())
        raise EncodeError(f"columns of different lengths ({listed}); every column holds one "
                          "entry per record")
    return next(iter(sizes.values()), 0)


def _prefix(key: bytes, field: int, payload_size: int) -> bytes:
    """A map entry's bytes up to its value list's payload (one payload size)."""
    inner_list = (tag(1) + varint(payload_size)) if payload_size else b""
    feature_size = len(inner_list) + payload_size
    feature = tag(field) + varint(feature_size) + inner_list
    value_size = len(feature) + payload_size
    entry = tag(1) + varint(len(key)) + key + tag(2) + varint(value_size) + feature
    return tag(1) + varint(len(entry) + payload_size) + entry


def _rows_with_prefix(prefix: bytes, payload: np.ndarray) -> np.ndarray:
    rows = np.empty((payload.shape[0], len(prefix) + payload.shape[1]), dtype=np.uint8)
    rows[:, :len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    rows[:, len(prefix):] = payload
    return rows


def _numeric_entries(key: bytes, vtype: str, values: np.ndarray, batch: int,
                     field: int) -> Entries:
    """Map entries of a numeric column: ``values`` flat, ``batch`` rows of equal count."""
    per_row = values.size // batch if batch else 0
    if vtype in (FLOAT32, FLOAT64):
        payload = values.astype("<f4" if vtype == FLOAT32 else "<f8", copy=False)
        raw = payload.view(np.uint8).reshape(batch, -1)
        return _rows_with_prefix(_prefix(key, field, raw.shape[1]), raw), None
    encoded, sizes = varints(values.astype(np.int64, copy=False).view(np.uint64))
    if per_row == 0:
        return _rows_with_prefix(_prefix(key, field, 0), encoded.reshape(batch, 0)), None
    row_sizes = sizes.reshape(batch, per_row).sum(axis=1)
    if bool((row_sizes == row_sizes[0]).all()):
        return _rows_with_prefix(_prefix(key, field, int(row_sizes[0])),
                                 encoded.reshape(batch, -1)), None
    ends = np.cumsum(row_sizes).tolist()
    data = encoded.tobytes()
    entries: list[bytes | tuple[bytes, bytes]] = []
    start = 0
    for end in ends:
        entries.append(_prefix(key, field, end - start) + data[start:end])
        start = end
    return None, entries


def _record_entries(name: str, key: bytes, column: Any, rules: FeatureRules,
                    fields: dict[str, int], first: int) -> Entries:
    """Map entries one record at a time (bytes, lists, ragged rows, missing values)."""
    entries: list[bytes | tuple[bytes, bytes]] = []
    for k in range(len(column)):
        value = column[k]
        if value is None:
            if _required(rules, name):
                rules.check_missing({}, first + k)
            entries.append(b"")
            continue
        if isinstance(value, (bytes, bytearray)) and _bytes_allowed(rules, name):
            entries.append(_single_bytes_entry(key, bytes(value), fields[BYTES]))
            continue
        vtype, values = rules.values(name, value, first + k)
        entries.append(map_entry(key, feature_message(vtype, values, fields)))
    return None, entries


def _bytes_allowed(rules: FeatureRules, name: str) -> bool:
    if rules.spec is None:
        return True
    if name not in rules.spec:
        return False
    fs = rules.spec[name]
    return fs is None or (fs.dtype == BYTES and (not isinstance(fs, FixedLen) or fs.size == 1))


def _single_bytes_entry(key: bytes, value: bytes, field: int) -> tuple[bytes, bytes]:
    """The map entry of one bytes value as ``(header, value)``: the value is not copied
    until the record is joined (big encoded images are copied once)."""
    return _prefix_bytes(key, field, len(value)), value


def _prefix_bytes(key: bytes, field: int, size: int) -> bytes:
    """A map entry's bytes up to a single bytes value of ``size`` bytes."""
    value_head = tag(1) + varint(size)
    list_size = len(value_head) + size
    feature = tag(field) + varint(list_size) + value_head
    feature_size = len(feature) + size
    entry = tag(1) + varint(len(key)) + key + tag(2) + varint(feature_size) + feature
    return tag(1) + varint(len(entry) + size) + entry


def _required(rules: FeatureRules, name: str) -> bool:
    fs = None if rules.spec is None else rules.spec.get(name)
    return isinstance(fs, FixedLen) and fs.default is None


def _first_bad_record(name: str, column: np.ndarray, rules: FeatureRules, first: int) -> None:
    """Raise the error of the first record of ``column`` that cannot be encoded."""
    for k in range(len(column)):
        rules.values(name, column[k], first + k)


def _column_entries(name: str, column: Any, rules: FeatureRules, fields: dict[str, int],
                    batch: int, first: int) -> Entries:
    key = name_bytes(name, None)
    if isinstance(column, Ragged):
        column = [column[k] for k in range(len(column))]
    if isinstance(column, (list, tuple)) and column and all(
            isinstance(v, (bool, int, float, np.number)) for v in column):
        column = np.asarray(column)
    if not (isinstance(column, np.ndarray) and column.dtype.kind in "biuf"):
        return _record_entries(name, key, column, rules, fields, first)
    if name not in (rules.spec if rules.spec is not None else {name: None}):
        raise EncodeError(f"{where(name, None)} is not in the spec; add it (e.g. VarLen(...)) "
                          "or leave it out")
    fs = None if rules.spec is None else rules.spec.get(name)
    size = math.prod(column.shape[1:])
    if isinstance(fs, FixedLen) and size != fs.size:
        raise EncodeError(f"{where(name, first)}: FixedLen{fs.shape} holds {fs.size} values, "
                          f"the column has {size} per record (shape {column.shape[1:]})")
    try:
        vtype, values = numeric_values(column, fs.dtype if fs else None, rules.allowed, name,
                                       None)
    except EncodeError:
        _first_bad_record(name, column, rules, first)
        raise
    if vtype == BYTES:  # pragma: no cover - numeric_values refuses it
        raise EncodeError(f"{where(name, None)}: numbers cannot go into a bytes list")
    return _numeric_entries(key, vtype, values, batch, fields[vtype])


def _assemble(parts: list[Entries], batch: int, wrap: bool) -> list[bytes]:
    """Each record's map entries in column order, wrapped in ``Features`` for an Example."""
    if all(rows is not None for rows, _ in parts):
        rows2d = [rows for rows, _ in parts if rows is not None]
        width = sum(r.shape[1] for r in rows2d)
        head = (tag(1) + varint(width)) if wrap else b""
        out = np.empty((batch, len(head) + width), dtype=np.uint8)
        out[:, :len(head)] = np.frombuffer(head, dtype=np.uint8)
        at = len(head)
        for rows in rows2d:
            out[:, at:at + rows.shape[1]] = rows
            at += rows.shape[1]
        whole = out.tobytes()
        step = out.shape[1]
        return [whole[k * step:(k + 1) * step] for k in range(batch)]
    columns: list[list[bytes | tuple[bytes, bytes]]] = [
        list(map(bytes, rows)) if rows is not None else entries or [] for rows, entries in parts]
    records = []
    for pieces in zip(*columns, strict=True) if columns else ([()] * batch):
        flat: list[bytes] = []
        for piece in pieces:
            flat.extend(piece if isinstance(piece, tuple) else (piece,))
        if wrap:
            flat.insert(0, tag(1) + varint(sum(len(p) for p in flat)))
        records.append(b"".join(flat))
    return records


def encode_columns(columns: Mapping[str, Any] | Any, spec: Spec = None,
                   kind: str = "example", *, first_record: int = 0) -> list[bytes]:
    """Encode a batch of records from columns.

    Args:
        columns: ``{name: column}``, each column with one entry per record: a numpy array
            ``(batch, *shape)`` (numbers; a record's values are its row, flattened), a list
            (one value per record, as :func:`~ofindex.encode.encode_example` takes; ``None``
            leaves the feature out of that record), a numpy array of bytes or str, or a
            :class:`~ofindex.decode.Ragged` (rows of any length). An Arrow ``Table`` or
            ``RecordBatch`` works too (nulls leave the feature out).
        spec: The decoding spec the records must fit (its dtypes choose the lists), or
            ``None``: the values' own types.
        kind: ``"example"`` or ``"ofrecord"``.
        first_record: The number of the batch's first record, for error messages.

    Returns:
        One serialized record per row, equal to encoding each row on its own.

    Raises:
        EncodeError: Columns of different lengths, a column that cannot be represented, or a
            value that cannot be stored; the message names the feature and the record.
        ValueError: An unknown ``kind``.
    """
    try:
        allowed, fields, what = _KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown record kind {kind!r}: use 'example' or 'ofrecord' "
                         "(encode SequenceExamples one by one)") from None
    if not isinstance(columns, Mapping):
        columns = arrow_columns(columns)
    rules = FeatureRules(spec, allowed, what)
    batch = _batch_size(columns)
    if rules.spec is not None:
        for name in rules.spec:
            if name not in columns and _required(rules, name):
                raise EncodeError(f"{where(name, None)} has no column; its spec is FixedLen "
                                  "without a default (give one, or VarLen)")
    parts = [_column_entries(name, column, rules, fields, batch, first_record)
             for name, column in columns.items()]
    return _assemble(parts, batch, wrap=kind == "example")


class BatchEncoder:
    """A picklable batch encoder: ``BatchEncoder(spec, kind)(columns)`` is
    :func:`encode_columns` (``kind``: ``"example"`` or ``"ofrecord"``).

    Args:
        spec: The decoding spec the records must fit, or ``None``.
        kind: ``"example"`` or ``"ofrecord"``.

    Raises:
        ValueError: An unknown ``kind``.
        EncodeError: A spec whose dtypes the kind cannot hold.
    """

    def __init__(self, spec: Spec = None, kind: str = "example") -> None:
        if kind not in _KINDS:
            raise ValueError(f"unknown record kind {kind!r}: use 'example' or 'ofrecord'")
        FeatureRules(spec, *_KINDS[kind][::2])
        self.spec = spec
        self.kind = kind

    def __call__(self, columns: Mapping[str, Any] | Any, *,
                 first_record: int = 0) -> list[bytes]:
        """Encode one batch (see :func:`encode_columns`).

        Args:
            columns: ``{name: column}`` or an Arrow table.
            first_record: The number of the batch's first record, for error messages.

        Returns:
            One serialized record per row.

        Raises:
            EncodeError: A column or value that cannot be stored.
        """
        return encode_columns(columns, self.spec, self.kind, first_record=first_record)

    def __repr__(self) -> str:
        return f"BatchEncoder({self.spec!r}, kind={self.kind!r})"
