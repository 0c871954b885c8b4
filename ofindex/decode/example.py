"""Decode one serialized ``tf.train.Example`` or OneFlow ``OFRecord`` to numpy arrays."""

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ofindex.decode._plans import OneRecord, RecordCall, record_plan
from ofindex.decode._values import (
    BYTES,
    EXAMPLE_KINDS,
    FLOAT32,
    FLOAT64,
    INT32,
    INT64,
    LIST_NAMES,
    NP_DTYPES,
    OFRECORD_KINDS,
    bytes_array,
    empty,
    list_values,
)
from ofindex.decode._walk import Located, Walked, walk_example, walk_ofrecord
from ofindex.decode._wire import LEN, WireError, as_bytes, iter_fields
from ofindex.decode.spec import (
    FeatureSpec,
    FixedLen,
    NormalizedSpec,
    Ragged,
    Spec,
    VarLen,
    normalize_spec,
)
from ofindex.errors import DecodeError

EXAMPLE_DTYPES = (BYTES, FLOAT32, INT64)
OFRECORD_DTYPES = (BYTES, FLOAT32, FLOAT64, INT32, INT64)

#: A decoded record: feature name -> numpy array (or :class:`Ragged` in batches).
Decoded = dict[str, Any]
#: A serialized record (``bytes`` subclasses such as ``numpy.bytes_`` included).
RecordBytes = bytes | bytearray | memoryview

_W = TypeVar("_W")


def describe_stored(vtype: str | None) -> str:
    """How an error names a stored value list: ``"int64_list (int64)"``, or that there is
    none.

    Args:
        vtype: The stored kind (``"bytes"``, ``"float"``, ``"int64"``), or ``None``.

    Returns:
        The words.
    """
    if vtype is None:
        return "no value list (empty Feature)"
    return f"{LIST_NAMES[vtype]} ({vtype})"


def check_kind(name: str, stored: str | None, asked: str, what: str) -> None:
    """Refuse a feature stored as another kind than the spec asks.

    Args:
        name: The feature.
        stored: The kind the record stores (``None``: no value list, which any kind reads).
        asked: The kind the spec asks.
        what: The record kind, for the message (``"Example"``...).

    Raises:
        DecodeError: ``stored`` is another kind than ``asked``.
    """
    if stored is not None and stored != asked:
        raise DecodeError(
            f"feature {name!r}: asked for {asked}, but the {what} stores it as a "
            f"{describe_stored(stored)}"
        )


def missing(name: Any, fs: FeatureSpec, what: str) -> np.ndarray:
    """The value of a feature absent from the record, or a DecodeError."""
    if isinstance(fs, VarLen):
        return empty(fs.dtype)
    if isinstance(fs, FixedLen) and fs.default is not None:
        default: np.ndarray = fs.default.copy()
        return default
    raise DecodeError(
        f"feature {name!r} is missing from the {what} (and its spec has no default)"
    )


def convert(buf: bytes, name: Any, loc: Located | None, fs: FeatureSpec, kinds: dict[int, str],
            what: str, copy: bool = True) -> np.ndarray:
    """One feature of a walked record -> its decoded value, following the spec ``fs``."""
    if loc is None:
        return missing(name, fs, what)
    stored = kinds.get(loc.kind)
    if stored is None and isinstance(fs, FixedLen):
        # an empty Feature (no list set) counts as absent, as in tf.io.parse_example
        return missing(name, fs, what)
    if fs is None:
        vtype = stored if stored is not None else FLOAT32
    else:
        vtype = fs.dtype
        check_kind(name, stored, vtype, what)
    try:
        values = list_values(buf, loc.regions, vtype, loc.level, copy) if stored else empty(vtype)
    except WireError as exc:
        raise DecodeError(f"feature {name!r}: bad {what} bytes: {exc}") from None
    if isinstance(fs, FixedLen):
        if values.shape[0] != fs.size:
            raise DecodeError(
                f"feature {name!r}: FixedLen shape {fs.shape} needs {fs.size} "
                f"{vtype} values, the {what} has {values.shape[0]}"
            )
        return values.reshape(fs.shape)
    return values


#: The next step when records do not decode as ``what``: they may be of another kind.
OTHER_KINDS = {
    "Example": "if they are OFRecords or SequenceExamples, decode with kind='ofrecord' or "
               "kind='sequence_example'",
    "OFRecord": "if they are tf.train.Examples or SequenceExamples, decode with "
                "kind='example' or kind='sequence_example'",
}


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def kind_hint(error: DecodeError, located: Walked, what: str,
              wanted: Iterable[Any]) -> DecodeError:
    """``error``, with the next step when its record holds none of the ``wanted`` features:
    most likely a record of another kind read as ``what`` (an Example's bytes parse as an
    OFRecord whose only feature has a garbled name, and the other way round)."""
    hint = OTHER_KINDS.get(what)
    if hint is None or any(name in located for name in wanted):
        return error
    held = ", ".join(_short(repr(name)) for name in list(located)[:3])
    holds = f"only {len(located)} other(s): {held}" if located else "no features at all"
    return DecodeError(f"{error}; the record holds none of the spec's features ({holds}) — "
                       f"{hint}, or check the spec")


def walk(buf: bytes, walker: Callable[[bytes], _W], what: str) -> _W:
    """Run ``walker`` over a serialized record, turning a wire error into a
    :class:`DecodeError` that names the record kind and the way out.

    Args:
        buf: The serialized record.
        walker: The walk of that record kind (``walk_example``...).
        what: The record kind, for the message.

    Returns:
        What ``walker`` returns.

    Raises:
        DecodeError: The bytes are not a valid record of that kind.
    """
    try:
        return walker(buf)
    except (WireError, IndexError) as exc:
        raise DecodeError(f"bytes are not a valid serialized {what}: {exc} — "
                          f"{OTHER_KINDS.get(what, 'check the kind the decoder was given')}"
                          ) from None


def decode_features(buf: bytes, located: Walked, spec: NormalizedSpec | None,
                    kinds: dict[int, str], what: str) -> Decoded:
    """The features of a walked record, as the spec asks (every feature as stored when it
    is ``None``).

    Args:
        buf: The serialized record.
        located: Where each feature's values lie in ``buf`` (its walk).
        spec: The normalized spec, or ``None``.
        kinds: The value-list kind of each field number.
        what: The record kind, for messages.

    Returns:
        ``{name: numpy array}``.

    Raises:
        DecodeError: A feature is missing, of another kind or shape than the spec says.
    """
    if spec is None:
        return {name: convert(buf, name, loc, None, kinds, what)
                for name, loc in located.items()}
    try:
        return {name: convert(buf, name, located.get(name), fs, kinds, what)
                for name, fs in spec.items()}
    except DecodeError as exc:
        raise kind_hint(exc, located, what, spec) from None


def decode_example(data: RecordBytes, spec: Spec = None) -> Decoded:
    """Decode a serialized ``tf.train.Example`` to ``{name: numpy array}``.

    The result always equals what protobuf's own parser gives for the same bytes.

    Args:
        data: The serialized record (``bytes``, ``bytearray``, ``memoryview`` or anything
            ``bytes()`` accepts).
        spec: ``None`` decodes every feature as stored (bytes_list -> object array of
            ``bytes``, float_list -> float32, int64_list -> int64, 1-D); a list of names
            selects a subset, each as stored; a mapping
            ``{name: FixedLen(...) | VarLen(...) | None}`` also fixes dtypes and shapes.

    Returns:
        ``{name: array}``: ``FixedLen`` features have the spec's shape, the others are 1-D.

    Raises:
        DecodeError: ``data`` is not bytes or not a valid serialized Example, or a feature
            does not match its spec (missing without a default, stored as another type,
            wrong number of values); the message names the feature.
        ValueError: A spec dtype is not one an Example stores (bytes, float32, int64).
        TypeError: A spec entry is not ``FixedLen(...)``, ``VarLen(...)`` or ``None``.
    """
    if spec is None:
        return _EXAMPLE_AS_STORED(data)  # its compiled plan first, then the careful path
    return decode_example_normalized(data, normalize_spec(spec, EXAMPLE_DTYPES, "Example"))


def decode_example_normalized(data: RecordBytes, nspec: NormalizedSpec | None) -> Decoded:
    """:func:`decode_example` with a spec already checked by ``normalize_spec``."""
    return decode_one(data, nspec, "example", None)


#: Per family: its walker, its list kinds and its name in messages.
_WALKERS: dict[str, tuple[Callable[[bytes], Walked], dict[int, str], str]] = {
    "example": (walk_example, EXAMPLE_KINDS, "Example"),
    "ofrecord": (walk_ofrecord, OFRECORD_KINDS, "OFRecord"),
}


def decode_one(data: RecordBytes, nspec: NormalizedSpec | None, family: str,
               plan: OneRecord | None) -> Decoded:
    """One record of ``family`` (``"example"`` or ``"ofrecord"``) decoded with a spec already
    checked by ``normalize_spec``, on the careful path; a record that is bytes-like but not
    ``bytes`` is made ``bytes`` and given to ``plan`` first (the callers give ``bytes`` to
    their compiled decoder themselves, without this call: see :mod:`ofindex.decode._plans`).

    Args:
        data: The serialized record.
        nspec: The normalized spec (``None``: every feature as stored).
        family: ``"example"`` or ``"ofrecord"``.
        plan: The compiled decoder of ``nspec``, or ``None``.

    Returns:
        ``{name: array}``.

    Raises:
        DecodeError: As :func:`decode_example` / :func:`decode_ofrecord`.
    """
    buf = data if type(data) is bytes else as_bytes(data)
    if plan is not None and buf is not data:  # made bytes here: the compiled path's turn
        got = plan(buf)
        if got is not None:
            return got
    walker, kinds, what = _WALKERS[family]
    return decode_features(buf, walk(buf, walker, what), nspec, kinds, what)


class _AsStored(RecordCall):
    """Every feature of a record of ``family`` as stored (``decode_example(data)``,
    ``decode_ofrecord(data)``): its compiled plan first, then the careful path."""

    def __init__(self, family: str) -> None:
        self.family = family
        self._plan = record_plan(None, family)

    if TYPE_CHECKING:  # the call itself is RecordCall's (no Python frame): its types
        def __call__(self, data: RecordBytes) -> Decoded: ...

    def _careful(self, data: RecordBytes) -> Decoded:
        return decode_one(data, None, self.family, self._plan)


_EXAMPLE_AS_STORED = _AsStored("example")
_OFRECORD_AS_STORED = _AsStored("ofrecord")


def top_fields(data: RecordBytes) -> set[int]:
    """The field numbers at the top level of a serialized message that hold something: an
    Example holds only 1 (its features); a SequenceExample holds 1 (its context) and 2 (its
    feature lists), which an Example's parser skips without a word. A length-delimited field
    of no bytes (an empty message) holds nothing.

    Args:
        data: The serialized record.

    Returns:
        The field numbers present with content.

    Raises:
        DecodeError: ``data`` is not a valid protobuf message.
    """
    buf = data if type(data) is bytes else as_bytes(data)

    def fields(b: bytes) -> set[int]:
        return {field for field, wire, start, stop in iter_fields(b, 0, len(b))
                if wire != LEN or stop > start}

    return walk(buf, fields, "Example")


def decode_ofrecord(data: RecordBytes, spec: Spec = None) -> Decoded:
    """Decode a serialized OneFlow ``OFRecord`` to ``{name: numpy array}``.

    Like :func:`decode_example`, with all five list kinds: bytes, float32, float64, int32
    and int64.

    Args:
        data: The serialized record (``bytes``, ``bytearray``, ``memoryview`` or anything
            ``bytes()`` accepts).
        spec: As for :func:`decode_example`.

    Returns:
        ``{name: array}``. A feature name that is not UTF-8 stays ``bytes``.

    Raises:
        DecodeError: ``data`` is not bytes or not a valid serialized OFRecord, or a feature
            does not match its spec; the message names the feature.
        ValueError: A spec dtype is not one of the five an OFRecord stores.
        TypeError: A spec entry is not ``FixedLen(...)``, ``VarLen(...)`` or ``None``.
    """
    if spec is None:
        return _OFRECORD_AS_STORED(data)  # its compiled plan first, then the careful path
    return decode_ofrecord_normalized(
        data, normalize_spec(spec, OFRECORD_DTYPES, "OFRecord"))


def decode_ofrecord_normalized(data: RecordBytes, nspec: NormalizedSpec | None) -> Decoded:
    """:func:`decode_ofrecord` with a spec already checked by ``normalize_spec``."""
    return decode_one(data, nspec, "ofrecord", None)


# ---- conversions from protobuf message objects (reference / interop) -------------------

def _message_values(feature: Any, vtype: str) -> np.ndarray:
    values = getattr(feature, LIST_NAMES[vtype]).value
    if vtype == BYTES:
        return bytes_array(list(values))
    return np.array(values, dtype=NP_DTYPES[vtype])


def from_message(message: Any) -> Decoded:
    """Decode an already-parsed Example or OFRecord message with natural dtypes.

    Slow (a Python object per value); meant for interop and tests.

    Args:
        message: A ``tf.train.Example`` (ours from :mod:`ofindex.proto` or TensorFlow's),
            or an ``OFRecord`` message.

    Returns:
        ``{name: 1-D array}`` as :func:`decode_example` / :func:`decode_ofrecord` with
        ``spec=None`` give; a Feature with no list set decodes to an empty float32 array.
    """
    features = message.features.feature if hasattr(message, "features") else message.feature
    out: Decoded = {}
    for name, feature in features.items():
        which = feature.WhichOneof("kind")
        vtype = next((k for k, v in LIST_NAMES.items() if v == which), None)
        out[name] = _message_values(feature, vtype) if vtype else empty(FLOAT32)
    return out


__all__ = ["Ragged", "decode_example", "decode_ofrecord", "from_message"]
