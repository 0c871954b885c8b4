"""One record decoded in one compiled call, by a plan made once per spec.

``Decoder(spec)(data)`` and ``decode_example(data)`` spent 13-20 us of Python per record of
three features (the careful walk, then ``convert`` per feature), against ~0.5 us for
protobuf's own ``Example.FromString``. The compiled ``RecordPlan`` (``csrc/onerecord.c``)
reads a record laid out the way writers lay them out, checks every asked-for feature against
its spec and makes the numpy arrays in the same call (numpy's C API): ~0.35 us. It returns
``None`` for anything else (another layout, a feature missing without a default, another
value type or count), and the caller then decodes the record on the careful path, which
gives protobuf's answer or words the error: the compiled path only answers where the careful
path would give the same arrays.

The decoders that use a plan (``Decoder``, ``decode_example``'s) derive from
:data:`RecordCall`: the compiled ``RecordCall`` calls the plan and then, when it gives
``None``, the decoder's ``_careful(data)``, without a Python ``__call__`` (whose frame took
~0.15 us a record, a third of the decode).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ofindex import _accel
from ofindex.decode._values import BYTES, FLOAT32, FLOAT64, INT32, INT64, NP_DTYPES
from ofindex.decode.spec import FixedLen, NormalizedSpec

#: A compiled plan's ``decode``: the record's features, or ``None`` (the careful path's turn).
OneRecord = Callable[[object], "dict[Any, np.ndarray] | None"]

#: Per family: how each list kind stores its values (index: the kind, its oneof field number;
#: 'i': varints read as int32), whether the feature map is wrapped in an Example, and the
#: value type of each kind (index 0: an empty Feature, which decodes to no float32 values).
_FAMILIES: dict[str, tuple[bytes, bool, tuple[str, ...]]] = {
    "example": (b".b4v", True, (FLOAT32, BYTES, FLOAT32, INT64)),
    "ofrecord": (b".b48iv", False, (FLOAT32, BYTES, FLOAT32, FLOAT64, INT32, INT64)),
}
#: Dimensions a FixedLen shape may have on the compiled path (numpy 1.x's limit).
_MAX_DIMS = 32
#: Value types stored as little-endian bytes, copied as they are (on little-endian machines).
_FIXED_WIDTH = (FLOAT32, FLOAT64)


def _features(spec: NormalizedSpec, types: tuple[str, ...]) -> tuple[Any, ...] | None:
    """The plan's features: ``(name, key, kind, count, shape, default)`` each, or ``None``
    when a feature cannot be decoded here."""
    features: list[tuple[Any, ...]] = []
    for name, fs in spec.items():
        if not isinstance(name, str) or not name.isascii():
            return None  # a name the record stores in UTF-8 beyond ASCII: the careful path
        if fs is None:
            features.append((name.encode(), name, 0, -1, None, None))
            continue
        if (fs.dtype in _FIXED_WIDTH and sys.byteorder != "little") or (
                isinstance(fs, FixedLen) and len(fs.shape) > _MAX_DIMS):
            return None
        kind = types.index(fs.dtype, 1)
        if isinstance(fs, FixedLen):
            features.append((name.encode(), name, kind, fs.size, fs.shape, fs.default))
        else:
            features.append((name.encode(), name, kind, -1, None, None))
    return tuple(features)


def record_plan(spec: NormalizedSpec | None, family: str) -> OneRecord | None:
    """The compiled one-record decoder of ``spec``, or ``None`` when there is none (the
    compiled module is not built, or a feature's name is not ASCII).

    Args:
        spec: The normalized spec; ``None`` for every feature as stored.
        family: ``"example"`` or ``"ofrecord"``.

    Returns:
        A callable giving a record's ``{name: array}`` (as the careful path gives it), or
        ``None`` when that record is not decoded there.
    """
    native = _accel.native
    if native is None or family not in _FAMILIES:
        return None
    kinds, wrapped, types = _FAMILIES[family]
    if spec is None:
        features = None
        if sys.byteorder != "little":
            return None
    else:
        features = _features(spec, types)
        if features is None:
            return None
    dtypes = tuple(NP_DTYPES[t] for t in types)
    plan: OneRecord = native.RecordPlan(kinds, wrapped, features, dtypes)
    return plan


class PythonRecordCall:
    """:data:`RecordCall` where the compiled module is not in use: the same calls in Python.

    Attributes:
        _plan: The compiled one-record decoder tried first, or ``None``.
    """

    _plan: OneRecord | None = None

    def __call__(self, data: Any) -> Any:
        """``self._plan(data)``, or ``self._careful(data)`` when that gives ``None``.

        Args:
            data: The serialized record.

        Returns:
            The decoded record.
        """
        plan = self._plan
        got = plan(data) if plan is not None else None
        return got if got is not None else self._careful(data)

    def _careful(self, data: Any) -> Any:
        raise NotImplementedError


_T = TypeVar("_T")


def rebuilt(cls: type[_T]) -> _T:
    """An object of ``cls`` made without ``__init__`` (pickle then sets its state): how a
    decoder deriving from :data:`RecordCall` is pickled, with any protocol.

    Args:
        cls: The class.

    Returns:
        The new object.
    """
    return cls.__new__(cls)


if TYPE_CHECKING:
    RecordCall = PythonRecordCall
else:
    #: The base of one-record decoders (see the module doc): calling one tries its ``_plan``,
    #: then its ``_careful`` method.
    RecordCall = PythonRecordCall if _accel.native is None else _accel.native.RecordCall
