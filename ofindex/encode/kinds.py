"""Which value list a Python or numpy value becomes, and its values in that list's type.

The mapping follows TensorFlow's tutorial (``bool``/``int`` -> ``int64_list``, ``float`` ->
``float_list``, ``bytes``/``str`` -> ``bytes_list``) and OneFlow's five lists for OFRecord
(``float64`` arrays -> ``double_list``, ``int32`` and smaller integers -> ``int32_list``).
A value is converted only when no information is lost, except float64 -> float32 for an
Example (TensorFlow's own rule: an Example holds no doubles), and then only while every value
stays finite: an int into a float list must be exact, a float never goes into an int list,
an integer out of the list's range is refused. Anything else is an :class:`EncodeError`
naming the feature and the record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ofindex.decode.spec import normalize_dtype
from ofindex.errors import EncodeError

BYTES, FLOAT32, FLOAT64, INT32, INT64 = "bytes", "float32", "float64", "int32", "int64"
#: The value types each record family holds.
EXAMPLE_TYPES = (BYTES, FLOAT32, INT64)
OFRECORD_TYPES = (BYTES, FLOAT32, FLOAT64, INT32, INT64)
NUMPY_TYPES: dict[str, np.dtype[Any]] = {
    FLOAT32: np.dtype("<f4"), FLOAT64: np.dtype("<f8"), INT32: np.dtype("<i4"),
    INT64: np.dtype("<i8"),
}
_INT_RANGE = {INT32: (-(1 << 31), (1 << 31) - 1), INT64: (-(1 << 63), (1 << 63) - 1)}

#: One feature's values: a 1-D numpy array of a numeric value type, or a list of bytes.
Values = np.ndarray | list[bytes]


def where(name: object, record: int | None) -> str:
    """``feature 'x' of record 7`` (or without the record when it is not known)."""
    return f"feature {name!r}" + ("" if record is None else f" of record {record}")


def value_type(dtype: Any, allowed: tuple[str, ...], name: object,
               record: int | None) -> str:
    """A spec's or a caller's dtype as one of the value types ``allowed``.

    Raises:
        EncodeError: The dtype is unknown or not one the record family holds.
    """
    try:
        vtype = normalize_dtype(dtype)
    except ValueError as exc:
        raise EncodeError(f"{where(name, record)}: {exc}") from None
    if vtype not in allowed:
        raise EncodeError(f"{where(name, record)}: a record of this kind holds "
                          f"{', '.join(allowed)}, not {vtype}")
    return vtype


def text_bytes(text: str, name: object, record: int | None) -> bytes:
    """A ``str`` value as its UTF-8 bytes, where U+DC80..U+DCFF (what ``os.fsdecode`` and
    ``errors="surrogateescape"`` make of bytes that are not UTF-8, e.g. in a file name) are
    stored as the bytes they stand for: a bytes list holds any bytes, and a name read from
    the disk is stored as the disk has it (``os.fsdecode`` of the value gives the str back).

    Raises:
        EncodeError: Another lone surrogate (U+D800..U+DC7F, U+DD00..U+DFFF), which stands
            for no byte.
    """
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        char = text[exc.start]
        raise EncodeError(f"{where(name, record)}: {text!r:.60} holds a lone surrogate "
                          f"(U+{ord(char):04X} at {exc.start}) that stands for no byte; "
                          "only U+DC80..U+DCFF (a byte os.fsdecode could not decode) can be "
                          "stored: pass the value as bytes") from None


def _as_bytes(item: object, name: object, record: int | None) -> bytes:
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    if isinstance(item, str):
        return text_bytes(item, name, record)
    raise EncodeError(f"{where(name, record)}: a bytes list cannot hold a "
                      f"{type(item).__name__} value ({item!r:.40})")


def default_numeric(dtype: np.dtype[Any], allowed: tuple[str, ...]) -> str:
    """The list a numeric dtype goes to when nothing says otherwise.

    Args:
        dtype: A numeric numpy dtype.
        allowed: The value types of the record family.

    Returns:
        The value type.
    """
    ofrecord = FLOAT64 in allowed
    if dtype.kind == "f":
        return FLOAT64 if ofrecord and dtype.itemsize == 8 else FLOAT32
    small = dtype.itemsize <= 2 or (dtype.kind == "i" and dtype.itemsize == 4)
    return INT32 if ofrecord and small else INT64


def _holds_every(vtype: str, dtype: np.dtype[Any]) -> bool:
    """Whether an integer list of ``vtype`` holds every value of ``dtype`` (its values need
    no range check: the min and max of 500k rows of token lists cost 25 ms a conversion)."""
    low, high = _INT_RANGE[vtype]
    info = np.iinfo(dtype)
    return low <= int(info.min) and int(info.max) <= high


def _to_ints(array: np.ndarray, vtype: str, name: object, record: int | None) -> np.ndarray:
    if array.dtype.kind == "f":
        nan = " (it holds NaN)" if bool(np.isnan(array).any()) else ""
        raise EncodeError(f"{where(name, record)}: {array.dtype} values{nan} cannot go into "
                          f"an {vtype} list; convert them yourself (e.g. with np.rint and "
                          "astype) or use a float feature")
    if array.dtype.kind not in "biu":
        raise EncodeError(f"{where(name, record)}: {array.dtype} values cannot go into an "
                          f"{vtype} list")
    low, high = _INT_RANGE[vtype]
    if array.size and array.dtype.kind != "b" and not _holds_every(vtype, array.dtype):
        lo, hi = int(array.min()), int(array.max())
        if lo < low or hi > high:
            raise EncodeError(f"{where(name, record)}: value {hi if hi > high else lo} is out "
                              f"of the {vtype} range")
    return array.astype(NUMPY_TYPES[vtype], copy=False)


def _shown(value: int) -> str:
    """An integer for a message (a huge one cut: 10**400 has 401 digits)."""
    digits = str(value)
    return digits if len(digits) <= 24 else f"{digits[:12]}…({len(digits.lstrip('-'))} digits)"


def _inexact(name: object, record: int | None, vtype: str, value: int,
             stored: float) -> EncodeError:
    return EncodeError(f"{where(name, record)}: integer {_shown(value)}: a {vtype} list "
                       f"cannot hold it exactly (it would be stored as {stored!r}); use an int64 "
                       "feature for integers, or make the values floats yourself")


def _to_floats(array: np.ndarray, vtype: str, name: object, record: int | None) -> np.ndarray:
    if array.dtype.kind not in "biuf":
        raise EncodeError(f"{where(name, record)}: {array.dtype} values cannot go into a "
                          f"{vtype} list")
    with np.errstate(over="ignore"):  # overflow is found below, and refused
        out = array.astype(NUMPY_TYPES[vtype], copy=False)
    if array.dtype.kind in "iu" and array.size:
        # exact when the value comes back: cast only what lies inside the integer type's range
        # (a float32 of 2**63 - 1 is 2**63, which no int64 holds)
        info = np.iinfo(array.dtype)
        inside = (out >= info.min) & (out < float(info.max) + 1)
        back = np.where(inside, out, 0).astype(array.dtype)
        bad = ~inside | (back != array)
        if bool(bad.any()):
            k = int(np.argmax(bad))
            raise _inexact(name, record, vtype, int(array[k]), float(out[k]))
    elif (out.dtype.itemsize < array.dtype.itemsize and array.size
          and bool((np.isinf(out) & np.isfinite(array)).any())):
        raise EncodeError(f"{where(name, record)}: values beyond the float32 range; "
                              "an Example holds float32 only")
    return out


def numeric_values(array: np.ndarray, vtype: str | None, allowed: tuple[str, ...],
                   name: object, record: int | None) -> tuple[str, np.ndarray]:
    """A numeric numpy array (any shape, flattened) in the list type ``vtype`` (``None``:
    the one its dtype maps to)."""
    if array.dtype.kind not in "biuf":
        raise EncodeError(f"{where(name, record)}: {array.dtype} values cannot be stored in "
                          "a record (bytes, floats and integers only)")
    vtype = vtype or default_numeric(array.dtype, allowed)
    flat = array.reshape(-1)
    if vtype == BYTES:
        raise EncodeError(f"{where(name, record)}: {array.dtype} values cannot go into a "
                          "bytes list")
    if vtype in (INT32, INT64):
        return vtype, _to_ints(flat, vtype, name, record)
    return vtype, _to_floats(flat, vtype, name, record)


def _bytes_values(items: Any, vtype: str | None, name: object,
                  record: int | None) -> tuple[str, list[bytes]]:
    if vtype not in (None, BYTES):
        raise EncodeError(f"{where(name, record)}: bytes or str values cannot go into a "
                          f"{vtype} list")
    return BYTES, [_as_bytes(item, name, record) for item in items]


def _array_values(array: np.ndarray, vtype: str | None, allowed: tuple[str, ...],
                  name: object, record: int | None) -> tuple[str, Values]:
    if array.dtype.kind in "SU":
        return _bytes_values(array.reshape(-1).tolist(), vtype, name, record)
    if array.dtype.kind == "O":
        items = array.reshape(-1).tolist()
        if all(isinstance(i, (bytes, bytearray, memoryview, str)) for i in items):
            return _bytes_values(items, vtype, name, record)
        odd = next(i for i in items if not isinstance(i, (bytes, bytearray, memoryview, str)))
        if isinstance(odd, int):
            raise EncodeError(f"{where(name, record)}: integer {odd} is out of the int64 "
                              "range")
        raise EncodeError(f"{where(name, record)}: an object array holding a "
                          f"{type(odd).__name__} ({odd!r:.40}); a record holds bytes, str, "
                          "floats and integers")
    return numeric_values(array, vtype, allowed, name, record)


#: The scalars a list of numbers holds (numpy's scalars included).
_NUMBERS = (bool, int, float, np.bool_, np.integer, np.floating)


def _is_int(item: object) -> bool:
    return isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_))


def _number_list(items: list[Any] | tuple[Any, ...], vtype: str | None,
                 allowed: tuple[str, ...], name: object,
                 record: int | None) -> tuple[str, Values]:
    """A list of numbers in its list type, decided by what the items are, not by the type
    numpy would promote them to: any float makes a float list (float32 unless the spec says
    float64), in which every integer must be held exactly; integers alone make an integer
    list, in which each must lie in range (numpy makes ``[1, 2**63]`` a float64 array and
    ``[2**64, 0.5]`` an object array: neither is what the values are)."""
    any_float = any(isinstance(i, (float, np.floating)) for i in items)
    if not (vtype in (FLOAT32, FLOAT64) or (vtype is None and any_float)):
        array = np.asarray(items)
        if not any_float and array.dtype.kind not in "biu":  # ints beyond int64: numpy
            # made them floats or objects
            wide = next(int(i) for i in items if _is_int(i) and not
                        -(1 << 63) <= int(i) < (1 << 63))
            raise EncodeError(f"{where(name, record)}: integer {_shown(wide)} is out of the "
                              "int64 range")
        return _array_values(array, vtype, allowed, name, record)
    vtype = vtype or FLOAT32  # Python floats: float_list, as TensorFlow's and OneFlow's guides
    try:
        array = np.asarray(items, dtype=np.float64)
    except OverflowError:  # an int beyond any float
        wide = next(int(i) for i in items if _is_int(i) and abs(int(i)) >= 1 << 1024)
        raise _inexact(name, record, vtype, wide, float("inf")) from None
    vtype, out = numeric_values(array, vtype, allowed, name, record)
    for k, item in enumerate(items):
        if _is_int(item):
            stored = out[k]
            if not (np.isfinite(stored) and int(stored) == int(item)):
                raise _inexact(name, record, vtype, int(item), float(stored))
    return vtype, out


def feature_values(value: object, vtype: str | None, allowed: tuple[str, ...], name: object,
                   record: int | None) -> tuple[str, Values]:
    """Classify one feature's value and convert it to its list type.

    Args:
        value: A scalar (``bool``, ``int``, ``float``, ``bytes``, ``str``, a numpy scalar),
            a list or tuple of scalars, or a numpy array of any shape (flattened).
        vtype: The value type to store (from a spec), or ``None`` to take it from the value.
        allowed: The value types of the record family.
        name: The feature's name, for messages.
        record: The record's number, for messages (``None``: unknown).

    Returns:
        ``(value type, values)``: a 1-D numpy array of the type's dtype, or a list of bytes.

    Raises:
        EncodeError: The value cannot be stored as asked without losing information (a
            nested dict, an object array, a float into an int list, an integer out of
            range, an empty list whose type nothing gives ...).
    """
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        return _bytes_values([value], vtype, name, record)
    if isinstance(value, Mapping):
        raise EncodeError(f"{where(name, record)}: a nested mapping cannot be stored; a "
                          "feature holds one list of bytes, floats or integers (flatten it "
                          "into features of their own)")
    if isinstance(value, np.ndarray):
        return _array_values(value, vtype, allowed, name, record)
    if isinstance(value, (list, tuple)):
        if not value:
            if vtype is None:
                raise EncodeError(f"{where(name, record)}: an empty list has no type; give "
                                  "one in the spec (VarLen('int64') …) or pass a typed numpy "
                                  "array")
            return vtype, [] if vtype == BYTES else np.empty(0, NUMPY_TYPES[vtype])
        texts = [isinstance(i, (bytes, bytearray, memoryview, str)) for i in value]
        if all(texts):
            return _bytes_values(value, vtype, name, record)
        if any(texts):
            raise EncodeError(f"{where(name, record)}: a list mixing bytes or str with other "
                              "values; a feature holds one type")
        if all(isinstance(i, _NUMBERS) for i in value):
            return _number_list(value, vtype, allowed, name, record)
    if isinstance(value, (bool, int, float)) and not isinstance(value, np.generic):
        return _number_list([value], vtype, allowed, name, record)  # (np.float64 is a float)
    if isinstance(value, (np.generic, list, tuple)):
        try:
            array = np.asarray(value)
        except (ValueError, OverflowError) as exc:
            raise EncodeError(f"{where(name, record)}: {exc}") from None
        if vtype is None and array.dtype.kind == "f" and not isinstance(value, np.generic):
            vtype = FLOAT32  # Python floats: float_list, as TensorFlow's and OneFlow's guides
        return _array_values(array, vtype, allowed, name, record)
    raise EncodeError(f"{where(name, record)}: a {type(value).__name__} value cannot be "
                      "stored; a record holds bytes, str, floats and integers (scalars, "
                      "lists or numpy arrays)")
