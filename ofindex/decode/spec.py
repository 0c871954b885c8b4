"""Feature specs (familiar to ``tf.io`` users) and the :class:`Ragged` result type.

- :class:`FixedLen` — like ``tf.io.FixedLenFeature``: a fixed ``shape``, a ``dtype`` and an
  optional ``default`` used when the feature is missing. Decodes to an array of that shape
  (batched: ``(batch, *shape)``).
- :class:`VarLen` — like ``tf.io.VarLenFeature``/``RaggedFeature``: any number of values.
  Decodes to a 1-D array (batched: :class:`Ragged` ``(values, row_lengths)``).

A spec is a mapping ``{name: FixedLen | VarLen | None}`` (``None``: whatever is stored,
as a 1-D array), or a list of names (a subset, each as stored), or ``None`` (everything).

dtypes are ``"bytes"``, ``"float32"``, ``"int64"`` (Example), plus ``"float64"`` and
``"int32"`` (OFRecord). numpy dtypes, ``float``/``int``/``bytes``/``str`` and the common
aliases (``"float"``, ``"string"``, ``"double"``, ...) are accepted. Bytes come back as
numpy ``object`` arrays of ``bytes``.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ofindex.decode._values import BYTES, FLOAT32, FLOAT64, INT32, INT64, NP_DTYPES
from ofindex.errors import DecodeError

#: The most bytes a record holds: protobuf refuses messages of 2 GiB or more.
MAX_RECORD_BYTES = (1 << 31) - 1
#: The fewest bytes one value takes in a record: a packed varint 1, a packed float its width,
#: a bytes value its tag and length.
MIN_VALUE_BYTES = {BYTES: 2, FLOAT32: 4, FLOAT64: 8, INT32: 1, INT64: 1}
#: A batch's FixedLen array at least this big is made only once the records could fill it
#: (smaller ones are made at once, and each record's own check names the count it holds).
CHECKED_ARRAY_BYTES = 1 << 20


def check_batch_room(name: object, fs: "FixedLen", bufs: Sequence[Any],
                     record: int | None) -> None:
    """Refuse, before the ``(len(bufs), *fs.shape)`` array is made, a ``FixedLen`` without a
    default that none of ``bufs`` can hold, when that array is big.

    Raises:
        DecodeError: Naming the feature and ``record``.
    """
    if fs.default is None and bufs and (
            len(bufs) * fs.size * NP_DTYPES[fs.dtype].itemsize >= CHECKED_ARRAY_BYTES):
        check_fixed_room(name, fs, max(len(buf) for buf in bufs), record)

_ALIASES = {
    "bytes": BYTES, "string": BYTES, "str": BYTES, "byte": BYTES, "object": BYTES,
    "tf.string": BYTES, "binary": BYTES,
    "float32": FLOAT32, "float": FLOAT32, "f4": FLOAT32, "<f4": FLOAT32, "tf.float32": FLOAT32,
    "float64": FLOAT64, "double": FLOAT64, "f8": FLOAT64, "<f8": FLOAT64, "tf.float64": FLOAT64,
    "int32": INT32, "i4": INT32, "<i4": INT32, "tf.int32": INT32,
    "int64": INT64, "int": INT64, "i8": INT64, "<i8": INT64, "tf.int64": INT64, "long": INT64,
}


def normalize_dtype(dtype: Any) -> str:
    """Map a user-supplied dtype to one of the five value types a record can store.

    Args:
        dtype: A numpy dtype or scalar type, a ``tf.DType``, one of the Python types
            ``bytes``/``str`` (bytes), ``float`` (float32) and ``int`` (int64), or a name
            such as ``"float32"``, ``"float"``, ``"double"``, ``"int"``, ``"string"`` or
            ``"tf.int64"``.

    Returns:
        ``"bytes"``, ``"float32"``, ``"float64"``, ``"int32"`` or ``"int64"``.

    Raises:
        ValueError: ``dtype`` names no type, or one that records cannot store (e.g. ``uint8``).
    """
    if dtype is bytes or dtype is str:
        return BYTES
    if dtype is float:
        return FLOAT32
    if dtype is int:
        return INT64
    name = getattr(dtype, "name", None)  # tf.DType and np.dtype have .name
    if isinstance(name, str) and name.lower() in ("string", "bytes"):
        return BYTES
    if isinstance(dtype, str):
        key = dtype.lower()
    else:
        try:
            dt = np.dtype(dtype)
        except TypeError:
            if isinstance(name, str):
                key = name.lower()
            else:
                raise ValueError(f"unsupported dtype {dtype!r}") from None
        else:
            key = "bytes" if dt.kind in "OSU" else dt.name
    try:
        return _ALIASES[key]
    except KeyError:
        raise ValueError(
            f"unsupported dtype {dtype!r}: use bytes, float32, float64, int32 or int64"
        ) from None


def check_fixed_room(name: object, fs: "FixedLen", longest: int,
                     record: int | None = None) -> None:
    """Refuse, before anything is allocated for it, a ``FixedLen`` no record of ``longest``
    bytes can hold (``MAX_RECORD_BYTES``: no record at all).

    Args:
        name: The feature's name, for the message (``None``: a default being made).
        fs: Its spec.
        longest: The bytes of the longest record that could hold it.
        record: The record named by the message (``None``: none).

    Raises:
        DecodeError: ``fs`` asks for more values than ``longest`` bytes can hold.
    """
    least = fs.size * MIN_VALUE_BYTES[fs.dtype]
    if least <= longest:
        return
    where = "" if record is None else f"record {record}: "
    what = "a FixedLen with a default" if name is None else f"feature {name!r}"
    beyond = ("more than any record holds (protobuf's limit is 2 GiB)"
              if longest >= MAX_RECORD_BYTES else f"and no record here is longer than "
              f"{longest:,} bytes")
    raise DecodeError(f"{where}{what}: FixedLen{fs.shape} asks for {fs.size:,} "
                      f"{fs.dtype} values per record, at least {least:,} bytes, {beyond}; "
                      "check the spec's shape (VarLen reads any count)")


def _shape(shape: Any) -> tuple[int, ...]:
    if shape is None:
        return ()
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    out = tuple(int(d) for d in shape)
    if any(d < 0 for d in out):
        raise ValueError(f"FixedLen shape {out} has a negative dimension; use VarLen")
    return out


@dataclass(frozen=True, init=False)
class FixedLen:
    """A feature with a fixed number of values, decoded to an array of ``shape``.

    Like ``tf.io.FixedLenFeature``. Batched, the feature decodes to one array
    ``(batch, *shape)``.

    Args:
        shape: The decoded shape: a tuple of non-negative ints, an int (one dimension) or
            ``None``/``()`` (a scalar, i.e. exactly one value).
        dtype: The value type, anything :func:`normalize_dtype` accepts.
        default: The value used when the feature is missing (or an empty Feature): a
            scalar (broadcast to ``shape``) or anything with ``shape``'s number of values.
            Stored as a read-only array. Without one, a missing feature is a
            :class:`~ofindex.errors.DecodeError`.
        allow_missing: For SequenceExample feature lists only: a missing list decodes to
            zero steps instead of being an error.

    Raises:
        ValueError: ``dtype`` is not supported, ``shape`` has a negative dimension, or
            ``default`` has neither one value nor ``shape``'s number of values.
        DecodeError: ``shape`` with a ``default`` asks for more values than a record holds
            (a ``ValueError``; checked before the default is made).
    """

    shape: tuple[int, ...]
    dtype: str
    default: Any
    allow_missing: bool

    def __init__(self, shape: Any = (), dtype: Any = "float32", default: Any = None,
                 allow_missing: bool = False) -> None:
        vtype = normalize_dtype(dtype)
        shp = _shape(shape)
        object.__setattr__(self, "shape", shp)
        object.__setattr__(self, "dtype", vtype)
        object.__setattr__(self, "allow_missing", bool(allow_missing))
        if default is not None:
            check_fixed_room(None, self, MAX_RECORD_BYTES)  # before the default is made
            arr = np.asarray(default, dtype=NP_DTYPES[vtype])
            size = math.prod(shp)
            if arr.size == 1:
                arr = np.full(shp, arr.reshape(()).item(), dtype=NP_DTYPES[vtype])
            elif arr.size == size:
                arr = arr.reshape(shp)
            else:
                raise ValueError(
                    f"FixedLen default has {arr.size} values, shape {shp} needs {size}"
                )
            arr.setflags(write=False)
            default = arr
        object.__setattr__(self, "default", default)

    @property
    def size(self) -> int:
        """The number of values a record must hold: the product of ``shape``."""
        return math.prod(self.shape)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FixedLen):
            return NotImplemented
        same_default = (self.default is None and other.default is None) or (
            self.default is not None and other.default is not None
            and np.array_equal(self.default, other.default)
        )
        return (self.shape, self.dtype, self.allow_missing) == (
            other.shape, other.dtype, other.allow_missing) and same_default

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype, self.allow_missing))

    def __repr__(self) -> str:
        extra = "" if self.default is None else f", default={self.default.tolist()!r}"
        if self.allow_missing:
            extra += ", allow_missing=True"
        return f"FixedLen(shape={self.shape}, dtype={self.dtype!r}{extra})"


@dataclass(frozen=True, init=False)
class VarLen:
    """A feature with any number of values: a 1-D array (batched: :class:`Ragged`).

    Like ``tf.io.VarLenFeature``. A missing feature decodes to an empty array.

    Args:
        dtype: The value type, anything :func:`normalize_dtype` accepts.

    Raises:
        ValueError: ``dtype`` is not supported.
    """

    dtype: str

    def __init__(self, dtype: Any = "float32") -> None:
        object.__setattr__(self, "dtype", normalize_dtype(dtype))

    def __repr__(self) -> str:
        return f"VarLen(dtype={self.dtype!r})"


#: How one feature is decoded: ``None`` means as stored (a 1-D array of its own type).
FeatureSpec = FixedLen | VarLen | None
#: A spec: ``{name: FeatureSpec}``, a list of names (each as stored) or ``None`` (everything).
Spec = Mapping[str, FeatureSpec] | Sequence[str] | None
#: A checked spec, ``{name: FeatureSpec}`` (names are ``str``, or ``bytes`` for OFRecord
#: names that are not UTF-8).
NormalizedSpec = dict[Any, FeatureSpec]


def normalize_spec(spec: Spec, allowed: tuple[str, ...], what: str) -> NormalizedSpec | None:
    """Check a user spec and bring it to one form.

    Args:
        spec: A :data:`Spec`; a single ``str`` name is taken as a list of one name.
        allowed: The value types the record family stores (e.g. Example's three).
        what: The record family's name, for error messages (``"Example"``...).

    Returns:
        ``{name: FixedLen | VarLen | None}``, or ``None`` when ``spec`` is ``None``
        (decode every feature as stored).

    Raises:
        TypeError: A feature's spec is not ``FixedLen(...)``, ``VarLen(...)`` or ``None``.
        ValueError: A feature's dtype is not one of ``allowed``.
        DecodeError: A ``FixedLen`` asks for more values than any record holds (a
            ``ValueError``, naming the feature).
    """
    if spec is None:
        return None
    if isinstance(spec, (str, bytes)):
        spec = [spec]
    items = list(spec.items()) if isinstance(spec, Mapping) else [(name, None) for name in spec]
    out: NormalizedSpec = {}
    for name, fs in items:
        if fs is not None and not isinstance(fs, (FixedLen, VarLen)):
            raise TypeError(
                f"feature {name!r}: spec must be FixedLen(...), VarLen(...) or None, "
                f"got {fs!r}"
            )
        if fs is not None and fs.dtype not in allowed:
            raise ValueError(
                f"feature {name!r}: {what} features hold {', '.join(allowed)}; "
                f"dtype {fs.dtype} cannot be stored"
            )
        if isinstance(fs, FixedLen):
            check_fixed_room(name, fs, MAX_RECORD_BYTES)
        out[name] = fs
    return out


class Ragged:
    """Variable-length rows: ``values`` concatenated and ``row_lengths`` (one per row).

    The batched form of :class:`VarLen` features (and of features without a spec).
    ``values`` may itself be a :class:`Ragged` (two ragged dimensions, e.g. a batch of
    SequenceExample VarLen features: records -> steps -> values). Indexing gives a row.
    Equality compares row lengths, dtypes and values (NaN equal to NaN); instances are not
    hashable.

    Args:
        values: The rows' values back to back: an array (its first axis is split into rows)
            or a :class:`Ragged`.
        row_lengths: The number of values (first-axis entries) in each row; stored as an
            int64 array.
    """

    __slots__ = ("row_lengths", "values")

    def __init__(self, values: Any, row_lengths: Any) -> None:
        self.values = values
        self.row_lengths = np.asarray(row_lengths, dtype=np.int64)

    @property
    def row_splits(self) -> np.ndarray:
        """Row boundaries: row ``i`` is ``values[row_splits[i]:row_splits[i + 1]]``.

        Returns:
            An int64 array of ``len(self) + 1`` offsets starting at 0.
        """
        splits = np.zeros(len(self.row_lengths) + 1, dtype=np.int64)
        np.cumsum(self.row_lengths, out=splits[1:])
        return splits

    @property
    def dtype(self) -> np.dtype[Any]:
        """The dtype of ``values`` (of the innermost values for nested Ragged)."""
        dtype: np.dtype[Any] = self.values.dtype
        return dtype

    def __len__(self) -> int:
        """The number of rows."""
        return len(self.row_lengths)

    def __getitem__(self, i: int) -> Any:
        """One row.

        Args:
            i: The row number; negative numbers count from the end.

        Returns:
            The row's slice of ``values`` (an array), or a :class:`Ragged` of the row's
            inner rows when ``values`` is itself a :class:`Ragged`.

        Raises:
            IndexError: ``i`` is out of range.
        """
        n = len(self.row_lengths)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"row {i} out of range for {n} rows")
        start = int(self.row_lengths[:i].sum())
        stop = start + int(self.row_lengths[i])
        if isinstance(self.values, Ragged):
            inner = self.values
            return Ragged(
                _slice_ragged_values(inner, start, stop), inner.row_lengths[start:stop]
            )
        return self.values[start:stop]

    def to_padded(self, pad_value: Any = 0) -> np.ndarray:
        """A dense array with short rows filled up with ``pad_value``.

        Args:
            pad_value: The value placed after the end of each row shorter than the longest.

        Returns:
            An array ``(rows, longest row, *inner shape)`` of the values' dtype.

        Raises:
            ValueError: ``values`` is itself a :class:`Ragged` (only one ragged dimension
                can be padded).
        """
        if isinstance(self.values, Ragged):
            raise ValueError("to_padded needs a single ragged dimension")
        values = np.asarray(self.values)
        longest = int(self.row_lengths.max()) if len(self.row_lengths) else 0
        out = np.full((len(self.row_lengths), longest, *values.shape[1:]), pad_value,
                      dtype=values.dtype)
        mask = np.arange(longest) < self.row_lengths[:, None]
        out[mask] = values
        return out

    def to_list(self) -> list[Any]:
        """The rows as nested Python lists (one list per row, recursively for nested Ragged).

        Returns:
            A list of ``len(self)`` lists of Python values.
        """
        rows = []
        for i in range(len(self)):
            row = self[i]
            rows.append(row.to_list() if isinstance(row, Ragged) else row.tolist())
        return rows

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ragged):
            return NotImplemented
        if not np.array_equal(self.row_lengths, other.row_lengths):
            return False
        if isinstance(self.values, Ragged) or isinstance(other.values, Ragged):
            same: bool = self.values == other.values
            return same
        a, b = np.asarray(self.values), np.asarray(other.values)
        return a.shape == b.shape and a.dtype == b.dtype and bool(
            np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        )

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, tuple[Any, np.ndarray]]:
        return (Ragged, (self.values, self.row_lengths))

    def __repr__(self) -> str:
        return f"Ragged(values={self.values!r}, row_lengths={self.row_lengths!r})"


def _slice_ragged_values(inner: Ragged, start: int, stop: int) -> Any:
    a = int(inner.row_lengths[:start].sum())
    b = a + int(inner.row_lengths[start:stop].sum())
    if isinstance(inner.values, Ragged):
        return _slice_ragged_values(inner.values, a, b)
    return inner.values[a:b]
