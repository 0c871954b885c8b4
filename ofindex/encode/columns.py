"""Encode a batch of records from columns at once (the mirror of ``BatchDecoder``).

Columns are a mapping ``{name: column}`` with one entry per record along the first axis, or
an Arrow table / record batch. Each column is checked and laid out once for the whole batch
(:func:`plan_columns`): numeric numpy columns ``(batch, *shape)`` are converted by numpy
(float32/float64 bytes, or int64 values for varints) without a Python object per value; a
column of single bytes values (encoded images) keeps its ``bytes`` objects; other columns
(lists of values per record, ``str``, :class:`~ofindex.decode.Ragged` rows, missing values)
are encoded record by record into whole map entries by the single-record encoder. The
records themselves are then written by :func:`ofindex.encode.framed.encode_block`, compiled
(or its pure-Python twin), equal byte for byte to what :mod:`ofindex.encode.messages` writes
for each row on its own.
"""

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ofindex.decode.spec import FixedLen, Ragged, Spec
from ofindex.encode.arrow import BinaryColumn, DictionaryColumn, RaggedColumn, arrow_columns
from ofindex.encode.arrow_map import EXACT
from ofindex.encode.framed import (
    BYTES_LISTS,
    ENTRIES,
    GATHER,
    NO_FRAMING,
    ONE_BYTES,
    PACKED,
    PACKED_SPANS,
    SPANS,
    VARINT,
    VARINT_SPANS,
    BatchPlan,
    PlannedColumn,
    encode_block,
)
from ofindex.encode.kinds import (
    BYTES,
    EXAMPLE_TYPES,
    FLOAT32,
    FLOAT64,
    OFRECORD_TYPES,
    default_numeric,
    numeric_values,
    where,
)
from ofindex.encode.messages import (
    EXAMPLE_FIELDS,
    OFRECORD_FIELDS,
    FeatureRules,
    feature_message,
    is_null,
    map_entry,
    name_bytes,
)
from ofindex.encode.nulls import REFUSE, Nulls
from ofindex.errors import EncodeError

_KINDS = {"example": (EXAMPLE_TYPES, EXAMPLE_FIELDS, "Example"),
          "ofrecord": (OFRECORD_TYPES, OFRECORD_FIELDS, "OFRecord")}
#: Bytes of the buffer records are encoded into before they are cut apart (a few MiB: big
#: enough that a call encodes thousands of small records, small enough to stay in cache).
_BLOCK_BYTES = 4 << 20


def _batch_size(columns: Mapping[str, Any]) -> int:
    sizes = {name: len(column) for name, column in columns.items()}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{name!r}: {n}" for name, n in sizes.items())
        raise EncodeError(f"columns of different lengths ({listed}); every column holds one "
                          "entry per record")
    return next(iter(sizes.values()), 0)


def _numeric_column(key: bytes, vtype: str, values: np.ndarray, batch: int, field: int,
                    present: np.ndarray | None) -> PlannedColumn:
    """A numeric column laid out: ``values`` flat, ``batch`` rows of equal count (a row
    that is not ``present`` is left out). No rows: ``(0, 0)`` (numpy cannot tell a row's
    width from no values)."""
    rows = (batch, -1) if batch else (0, 0)
    if vtype in (FLOAT32, FLOAT64):
        payload = values.astype("<f4" if vtype == FLOAT32 else "<f8", copy=False)
        raw = np.ascontiguousarray(payload).view(np.uint8).reshape(rows)
        return PlannedColumn(key, field, PACKED, raw, present)
    ints = np.ascontiguousarray(values.astype(np.int64, copy=False)).reshape(rows)
    return PlannedColumn(key, field, VARINT, ints, present)


def _record_entries(name: str, key: bytes, column: Any, rules: FeatureRules,
                    fields: dict[str, int], first: int) -> PlannedColumn:
    """Map entries made one record at a time (lists, str, ragged rows, missing values)."""
    entries: list[bytes] = []
    for k in range(len(column)):
        value = column[k]
        if is_null(value):
            if _required(rules, name):
                rules.check_missing({}, first + k)
            entries.append(b"")
            continue
        vtype, values = rules.values(name, value, first + k)
        entries.append(map_entry(key, feature_message(vtype, values, fields)))
    return PlannedColumn(key, fields[BYTES], ENTRIES, entries)


def _bytes_allowed(rules: FeatureRules, name: str) -> bool:
    if rules.spec is None:
        return True
    if name not in rules.spec:
        return False
    fs = rules.spec[name]
    return fs is None or (fs.dtype == BYTES and (not isinstance(fs, FixedLen) or fs.size == 1))


def _one_bytes_column(key: bytes, column: Any, field: int) -> PlannedColumn | None:
    """A column holding one ``bytes`` value per record (encoded images), kept as it is;
    ``None`` when any value is something else."""
    if isinstance(column, np.ndarray):
        if column.dtype.kind not in "OS" or column.ndim != 1:
            return None
        column = column.tolist()
    if not isinstance(column, (list, tuple)):
        return None
    values = list(column)
    if not all(isinstance(v, bytes) for v in values):
        return None
    return PlannedColumn(key, field, ONE_BYTES, values)


def _required(rules: FeatureRules, name: str) -> bool:
    fs = None if rules.spec is None else rules.spec.get(name)
    return isinstance(fs, FixedLen) and fs.default is None


def _first_bad_record(name: str, column: Any, rules: FeatureRules, first: int) -> None:
    """Raise the error of the first record of ``column`` (as the caller gave it: a Python
    float's row is float32, a numpy float64's is not) that cannot be encoded."""
    for k in range(len(column)):
        if not is_null(column[k]):
            rules.values(name, column[k], first + k)


def _check_present(name: str, present: np.ndarray | None, rules: FeatureRules,
                   first: int) -> None:
    """A feature the spec requires (``FixedLen`` without a default) is in every row."""
    if present is not None and _required(rules, name) and not present.all():
        rules.check_missing({}, first + int(np.argmin(present)))


def _masked_column(name: str, column: np.ma.MaskedArray, rules: FeatureRules,
                   first: int) -> tuple[Any, np.ndarray | None]:
    """A masked array as a plain column and the rows present (``None``: all). A masked
    entry of a 1-D column is a null cell (the feature left out of that row); a masked
    element of a longer row is a null element, resolved by the null policy (dropped ones
    leave rows of different lengths, encoded record by record)."""
    mask = np.ma.getmaskarray(column)
    data = np.ma.getdata(column)
    if not mask.any():
        return data, None
    if column.ndim > 1:
        rows = rules.nulls.masked_rows(column, name, first)
        return (rows, None) if rows is not None else (list(column), None)
    if data.dtype.kind not in "biuf":
        return list(column), None  # masked entries are np.ma.masked: null cells
    return np.where(mask, np.zeros((), data.dtype), data), (~mask).view(np.uint8)


def _scalar_column(column: list[Any] | tuple[Any, ...]
                   ) -> tuple[Any, str | None, np.ndarray | None]:
    """A list of one scalar (or ``None``: a null cell) per record as a numpy array, the list
    type its values take when the spec says none, and the rows present (``None``: all), where
    that array encodes each record as the record on its own is encoded: every value of one
    type (Python floats: float32, as one float is), and numpy holding each exactly. Anything
    else (ints and floats mixed, ints beyond int64, numpy scalars of different dtypes) stays
    a list, encoded record by record: numpy would promote the whole column to one dtype
    (``[16777217, 0.5]`` to float64, then float32: 16777216.0) where each record keeps its
    own."""
    kinds = {type(value) for value in column} - {type(None)}
    if len(kinds) != 1:
        return column, None, None
    kind = kinds.pop()
    if kind not in (bool, int, float) and not issubclass(kind, (np.bool_, np.number)):
        return column, None, None
    present = np.array([value is not None for value in column], np.uint8)
    values = column if present.all() else [value for value in column if value is not None]
    array = np.asarray(values)
    if kind is int and array.dtype.kind != "i":  # beyond int64: each record refuses its own
        return column, None, None
    if values is not column:
        full = np.zeros(len(column), array.dtype)
        full[present.view(bool)] = array
        return full, FLOAT32 if kind is float else None, present
    return array, FLOAT32 if kind is float else None, None


def _plan_column(name: str, column: Any, rules: FeatureRules, fields: dict[str, int],
                 batch: int, first: int) -> PlannedColumn:
    key = name_bytes(name, None)
    if isinstance(column, DictionaryColumn):
        gathered = _gathered_column(name, column, rules, fields, first)
        if gathered is not None:
            return gathered
        column = column.decode()
    if isinstance(column, BinaryColumn) and _bytes_allowed(rules, name):
        _check_present(name, column.present, rules, first)
        return PlannedColumn(key, fields[BYTES], SPANS, (column.bounds, column.values),
                             column.present)
    if isinstance(column, RaggedColumn):
        planned = _ragged_column(name, key, column, rules, fields, first)
        if planned is not None:
            return planned
        column = [column[k] for k in range(len(column))]  # the spec asks another type
    if isinstance(column, Ragged):
        column = [column[k] for k in range(len(column))]
    default, given, present = None, column, None
    if isinstance(column, np.ma.MaskedArray):
        column, present = _masked_column(name, column, rules, first)
        given = column if present is None else given
    elif isinstance(column, (list, tuple)) and column:
        column, default, present = _scalar_column(column)
    if not (isinstance(column, np.ndarray) and column.dtype.kind in "biuf"):
        planned = (_one_bytes_column(key, column, fields[BYTES])
                   if _bytes_allowed(rules, name) else None)
        return planned or _record_entries(name, key, column, rules, fields, first)
    _check_present(name, present, rules, first)
    return _planned_numbers(name, key, column, given, default, present, rules, fields, batch,
                            first)


def _gathered_column(name: str, column: DictionaryColumn, rules: FeatureRules,
                     fields: dict[str, int], first: int) -> PlannedColumn | None:
    """A dictionary column laid out: the map entry of each dictionary value made once (its
    values planned and encoded as a column of their own), each row's chosen by its index;
    ``None`` when a value cannot be written as the spec asks (the column is then decoded
    and planned row by row, so that the error names the row holding it)."""
    _check_present(name, column.present, rules, first)
    entries = len(column.values)
    try:
        planned = _plan_column(name, column.values, rules, fields, entries, first)
    except EncodeError:
        return None
    bounds, content = _packed_records(BatchPlan((planned,), entries, wrap=False))
    return PlannedColumn(planned.key, planned.field, GATHER,
                         (column.indices, bounds, content), column.present)


def _packed_records(plan: BatchPlan) -> tuple[np.ndarray, bytes]:
    """Every record of a laid-out batch, unframed and back to back: their ``rows + 1``
    bounds and bytes (in a buffer sized to them, not a block: a dictionary of a few values
    is encoded per batch)."""
    out = bytearray(4096)
    sizes = np.empty(plan.rows, np.int64)
    chunks: list[bytes] = []
    start = 0
    while start < plan.rows:
        rows, used = encode_block(plan, start, plan.rows, NO_FRAMING, len(out), out,
                                  sizes[start:])
        if rows == 0:  # one record bigger than the buffer
            out = bytearray(max(used, 2 * len(out)))
            continue
        chunks.append(bytes(memoryview(out)[:used]))
        start += rows
    bounds = np.zeros(plan.rows + 1, np.int64)
    np.cumsum(sizes, out=bounds[1:])
    return bounds, b"".join(chunks)


def _ragged_column(name: str, key: bytes, column: RaggedColumn, rules: FeatureRules,
                   fields: dict[str, int], first: int) -> PlannedColumn | None:
    """Rows of any length laid out at once: numbers as one packed list per row (floats as
    they are, integers made varints), bytes as one bytes list per row; ``None`` when the
    spec asks another type than the values have (they then go record by record)."""
    fs = None if rules.spec is None else rules.spec.get(name)
    if rules.spec is not None and name not in rules.spec:
        raise EncodeError(f"{where(name, None)} is not in the spec; add it (e.g. VarLen(...)) "
                          "or leave it out")
    values = column.values
    vtype = BYTES if isinstance(values, BinaryColumn) else default_numeric(values.dtype,
                                                                          rules.allowed)
    if fs is not None and (fs.dtype != vtype or isinstance(fs, FixedLen)):
        return None
    _check_present(name, column.present, rules, first)
    offsets = np.asarray(column.offsets, np.int64)
    if isinstance(values, BinaryColumn):  # the Arrow buffers as they are: no copy here
        return PlannedColumn(key, fields[BYTES], BYTES_LISTS,
                             (offsets, np.asarray(values.bounds, np.int64), values.values),
                             column.present)
    try:  # float64 to float32 is refused where a value overflows (numeric_values' rules)
        vtype, values = numeric_values(values, vtype, rules.allowed, name, None)
    except EncodeError:
        return None  # record by record: the error names the record
    if vtype in (FLOAT32, FLOAT64):
        width = 4 if vtype == FLOAT32 else 8
        raw = np.ascontiguousarray(values).view(np.uint8)
        return PlannedColumn(key, fields[vtype], PACKED_SPANS, (offsets * width, raw),
                             column.present)
    ints = np.ascontiguousarray(values, dtype=np.int64)  # varints made as they are written
    return PlannedColumn(key, fields[vtype], VARINT_SPANS, (offsets, ints), column.present)


def _planned_numbers(name: str, key: bytes, column: np.ndarray, given: Any,
                     default: str | None, present: np.ndarray | None, rules: FeatureRules,
                     fields: dict[str, int], batch: int, first: int) -> PlannedColumn:
    """A numeric column checked against the spec and converted by numpy at once (``given``:
    the column as the caller gave it, for naming the first record that fails)."""
    if name not in (rules.spec if rules.spec is not None else {name: None}):
        raise EncodeError(f"{where(name, None)} is not in the spec; add it (e.g. VarLen(...)) "
                          "or leave it out")
    fs = None if rules.spec is None else rules.spec.get(name)
    size = math.prod(column.shape[1:])
    if isinstance(fs, FixedLen) and size != fs.size:
        raise EncodeError(f"{where(name, first)}: FixedLen{fs.shape} holds {fs.size} values, "
                          f"the column has {size} per record (shape {column.shape[1:]})")
    try:
        vtype, values = numeric_values(column, fs.dtype if fs else default, rules.allowed,
                                       name, None)
    except EncodeError:
        _first_bad_record(name, given, rules, first)
        raise
    if vtype == BYTES:  # pragma: no cover - numeric_values refuses it
        raise EncodeError(f"{where(name, None)}: numbers cannot go into a bytes list")
    return _numeric_column(key, vtype, values, batch, fields[vtype], present)


def plan_columns(columns: Mapping[str, Any] | Any, spec: Spec = None, kind: str = "example",
                 *, first_record: int = 0, nulls: Nulls = REFUSE,
                 float64: str = EXACT) -> BatchPlan:
    """Check a batch of columns and lay it out for :func:`ofindex.encode.framed.encode_block`.

    Args:
        columns: ``{name: column}`` or an Arrow table (see :func:`encode_columns`).
        spec: The decoding spec the records must fit, or ``None``.
        kind: ``"example"`` or ``"ofrecord"``.
        first_record: The number of the batch's first record, for error messages.
        nulls: What a null element inside a list becomes (see :func:`encode_columns`).
        float64: An Arrow table's float64 values in an Example: ``"exact"`` or
            ``"float32"`` (see :mod:`ofindex.encode.arrow_map`).

    Returns:
        The :class:`~ofindex.encode.framed.BatchPlan`.

    Raises:
        EncodeError: Columns of different lengths, a column that cannot be represented, or a
            value that cannot be stored; the message names the feature and the record.
        ValueError: An unknown ``kind`` or a bad ``nulls``.
    """
    try:
        allowed, fields, what = _KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown record kind {kind!r}: use 'example' or 'ofrecord' "
                         "(encode SequenceExamples one by one)") from None
    rules = FeatureRules(spec, allowed, what, nulls)
    if not isinstance(columns, Mapping):
        columns = arrow_columns(columns, rules.nulls, first_record, kind, float64)
    batch = _batch_size(columns)
    if rules.spec is not None:
        for name in rules.spec:
            if name not in columns and _required(rules, name):
                raise EncodeError(f"{where(name, None)} has no column; its spec is FixedLen "
                                  "without a default (give one, or VarLen)")
    planned = tuple(_plan_column(name, column, rules, fields, batch, first_record)
                    for name, column in columns.items())
    return BatchPlan(planned, batch if planned else 0, wrap=kind == "example")


def encode_planned(plan: BatchPlan) -> list[bytes]:
    """Every record of a laid-out batch, unframed.

    Args:
        plan: From :func:`plan_columns`.

    Returns:
        One serialized record per row.
    """
    out = bytearray(_BLOCK_BYTES)
    sizes = np.empty(plan.rows, np.int64)
    records: list[bytes] = []
    start = 0
    while start < plan.rows:
        rows, used = encode_block(plan, start, plan.rows, NO_FRAMING, len(out), out,
                                  sizes[start:])
        if rows == 0:  # one record bigger than the buffer
            out = bytearray(used)
            continue
        view = memoryview(out)
        at = 0
        for size in sizes[start:start + rows].tolist():
            records.append(bytes(view[at:at + size]))
            at += size
        start += rows
    return records


def encode_columns(columns: Mapping[str, Any] | Any, spec: Spec = None,
                   kind: str = "example", *, first_record: int = 0,
                   nulls: Nulls = REFUSE, float64: str = EXACT) -> list[bytes]:
    """Encode a batch of records from columns.

    Args:
        columns: ``{name: column}``, each column with one entry per record: a numpy array
            ``(batch, *shape)`` (numbers; a record's values are its row, flattened), a list
            (one value per record, as :func:`~ofindex.encode.encode_example` takes; ``None``
            leaves the feature out of that record), a numpy array of bytes or str, a masked
            array (``numpy.ma``: a masked entry of a 1-D column leaves the feature out, a
            masked element of a row is a null element), or a
            :class:`~ofindex.decode.Ragged` (rows of any length). An Arrow ``Table`` or
            ``RecordBatch``, or a Hugging Face dataset, works too (a null cell leaves the
            feature out).
        spec: The decoding spec the records must fit (its dtypes choose the lists), or
            ``None``: the values' own types.
        kind: ``"example"`` or ``"ofrecord"``.
        first_record: The number of the batch's first record, for error messages.
        nulls: What a null element inside a list becomes: ``"refuse"`` (an EncodeError
            naming the column and the row), ``"drop"`` (left out) or ``("fill", value)``;
            see :mod:`ofindex.encode.nulls`.
        float64: An Arrow table's float64 values in an Example: ``"exact"`` (raw doubles in
            a bytes value, the default) or ``"float32"`` (TensorFlow's float_list, rounded);
            see :mod:`ofindex.encode.arrow_map`.

    Returns:
        One serialized record per row, equal to encoding each row on its own.

    Raises:
        EncodeError: Columns of different lengths, a column that cannot be represented, or a
            value that cannot be stored; the message names the feature and the record.
        ValueError: An unknown ``kind`` or a bad ``nulls``.
    """
    return encode_planned(plan_columns(columns, spec, kind, first_record=first_record,
                                       nulls=nulls, float64=float64))


class BatchEncoder:
    """A picklable batch encoder: ``BatchEncoder(spec, kind)(columns)`` is
    :func:`encode_columns` (``kind``: ``"example"`` or ``"ofrecord"``).

    Args:
        spec: The decoding spec the records must fit, or ``None``.
        kind: ``"example"`` or ``"ofrecord"``.
        nulls: What a null element inside a list becomes (see :func:`encode_columns`).

    Raises:
        ValueError: An unknown ``kind`` or a bad ``nulls``.
        EncodeError: A spec whose dtypes the kind cannot hold.
    """

    def __init__(self, spec: Spec = None, kind: str = "example", *,
                 nulls: Nulls = REFUSE) -> None:
        if kind not in _KINDS:
            raise ValueError(f"unknown record kind {kind!r}: use 'example' or 'ofrecord'")
        self.nulls = FeatureRules(spec, *_KINDS[kind][::2], nulls).nulls
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
        return encode_columns(columns, self.spec, self.kind, first_record=first_record,
                              nulls=self.nulls)

    def __repr__(self) -> str:
        nulls = "" if self.nulls.action == REFUSE else f", nulls={self.nulls!r}"
        return f"BatchEncoder({self.spec!r}, kind={self.kind!r}{nulls})"
