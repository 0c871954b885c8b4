"""Encode one record: ``tf.train.Example``, ``SequenceExample`` or OneFlow ``OFRecord`` bytes.

The wire bytes are written directly (no protobuf message is built): a map entry per feature,
in the order given, and packed lists for numbers, as protobuf itself writes them. TensorFlow's
``tf.io.parse_example`` and protobuf's parser read them; :mod:`ofindex.decode` gives the
values back.
"""

from collections.abc import Mapping
from typing import Any

import numpy as np

from ofindex.decode.spec import FixedLen, Spec, VarLen, normalize_spec
from ofindex.encode.kinds import (
    BYTES,
    EXAMPLE_TYPES,
    FLOAT32,
    FLOAT64,
    NUMPY_TYPES,
    OFRECORD_TYPES,
    Values,
    feature_values,
    where,
)
from ofindex.encode.nulls import REFUSE, Nulls, null_policy
from ofindex.encode.varints import delimited, tag, varint, varints
from ofindex.errors import EncodeError

#: Field number of each value list inside a ``Feature``, per record family.
EXAMPLE_FIELDS = {BYTES: 1, FLOAT32: 2, "int64": 3}
OFRECORD_FIELDS = {BYTES: 1, FLOAT32: 2, FLOAT64: 3, "int32": 4, "int64": 5}
_ENTRY, _KEY, _VALUE = tag(1), tag(1), tag(2)


def packed(vtype: str, values: np.ndarray) -> bytes:
    """The payload of a packed numeric list (little-endian floats, or varints)."""
    if vtype == FLOAT32:
        return values.astype("<f4", copy=False).tobytes()
    if vtype == FLOAT64:
        return values.astype("<f8", copy=False).tobytes()
    encoded, _ = varints(values.astype(np.int64, copy=False).view(np.uint64))
    return encoded.tobytes()


def list_message(vtype: str, values: Values) -> bytes:
    """A ``BytesList`` / ``FloatList`` / … message (its value field 1; empty lists: nothing)."""
    if vtype == BYTES:
        return b"".join(_KEY + varint(len(v)) + v for v in values)
    assert isinstance(values, np.ndarray)
    if values.size == 0:
        return b""
    return delimited(1, packed(vtype, values))


def feature_message(vtype: str, values: Values, fields: dict[str, int]) -> bytes:
    """A ``Feature`` message holding one value list."""
    return delimited(fields[vtype], list_message(vtype, values))


def map_entry(key: bytes, value: bytes) -> bytes:
    """One entry of a ``map<string, …>`` field 1 (key field 1, value field 2)."""
    inner = _KEY + varint(len(key)) + key + _VALUE + varint(len(value)) + value
    return _ENTRY + varint(len(inner)) + inner


def name_bytes(name: object, record: int | None) -> bytes:
    """A feature name as the map key's bytes (UTF-8: the key is a protobuf ``string``, which
    parsers refuse unless it is UTF-8, so a name holding a lone surrogate is refused)."""
    if isinstance(name, bytes):
        return name
    if isinstance(name, str):
        try:
            return name.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise EncodeError(
                f"{where(name, record)}: the name holds a lone surrogate "
                f"(U+{ord(name[exc.start]):04X}, what os.fsdecode makes of a byte that is not "
                "UTF-8); a feature's name is a protobuf string, which readers refuse unless "
                "it is UTF-8: rename the feature") from None
    raise EncodeError(f"{where(name, record)}: feature names are str, not "
                      f"{type(name).__name__}")


def is_null(value: object) -> bool:
    """A null cell: the feature is absent from the record (``None``, ``numpy.ma.masked``)."""
    return value is None or value is np.ma.masked


class FeatureRules:
    """How a record family stores the features of one spec: the value type of each named
    feature, checked counts, and which features must be there.

    Args:
        spec: ``{name: FixedLen | VarLen | None}`` (the decoding spec), a list of names, or
            ``None``: every feature as its value says.
        allowed: The value types of the record family.
        what: The family's name, for messages.
        nulls: What a null element inside a list becomes (see :mod:`ofindex.encode.nulls`).

    Raises:
        EncodeError: A spec the family cannot hold.
        ValueError: A bad ``nulls``.
    """

    def __init__(self, spec: Spec, allowed: tuple[str, ...], what: str,
                 nulls: Nulls = REFUSE) -> None:
        try:
            self.spec = normalize_spec(spec, allowed, what)
        except ValueError as exc:
            raise EncodeError(str(exc)) from None
        self.allowed = allowed
        self.what = what
        self.nulls = null_policy(nulls)

    def values(self, name: object, value: object, record: int | None) -> tuple[str, Values]:
        """One feature's value type and values, checked against the spec."""
        fs = None if self.spec is None else self.spec.get(name)
        if self.spec is not None and name not in self.spec:
            raise EncodeError(f"{where(name, record)} is not in the spec; add it (e.g. "
                              f"VarLen(...)) or leave it out")
        if isinstance(value, np.ma.MaskedArray):
            value = self.nulls.masked(value, name, record)
        elif isinstance(value, (list, tuple)):
            value = self.nulls.items(value, name, record)
        elif isinstance(value, np.ndarray) and value.dtype.kind == "O":
            value = self.nulls.items(value.reshape(-1).tolist(), name, record)
        vtype, values = feature_values(value, fs.dtype if fs else None, self.allowed, name,
                                       record)
        if isinstance(fs, FixedLen) and len(values) != fs.size:
            raise EncodeError(f"{where(name, record)}: FixedLen{fs.shape} holds {fs.size} "
                              f"values, got {len(values)}")
        return vtype, values

    def check_missing(self, given: Mapping[Any, object], record: int | None) -> None:
        """Features of the spec the record must hold (``FixedLen`` without a default)."""
        if self.spec is None:
            return
        for name, fs in self.spec.items():
            absent = is_null(given.get(name))
            if absent and isinstance(fs, FixedLen) and fs.default is None:
                raise EncodeError(f"{where(name, record)} is missing; its spec is FixedLen "
                                  "without a default (give one, or VarLen)")


def features_payload(features: Mapping[Any, object], rules: FeatureRules,
                     fields: dict[str, int], record: int | None) -> bytes:
    """The map entries of ``features`` (``None`` values are left out: absent features)."""
    if not isinstance(features, Mapping):
        raise EncodeError(f"record {record}: features are a mapping {{name: value}}, not "
                          f"{type(features).__name__}")
    rules.check_missing(features, record)
    parts = []
    for name, value in features.items():
        if is_null(value):
            continue
        vtype, values = rules.values(name, value, record)
        parts.append(map_entry(name_bytes(name, record),
                               feature_message(vtype, values, fields)))
    return b"".join(parts)


def encode_example(features: Mapping[str, object], spec: Spec = None, *,
                   record: int | None = None, nulls: Nulls = REFUSE) -> bytes:
    """Encode one ``tf.train.Example``.

    >>> encode_example({"label": 7, "image": np.zeros((2, 2), np.float32), "name": "cat"})
    ... # doctest: +SKIP

    Args:
        features: ``{name: value}``: ``bool``/``int`` (int64_list), ``float`` (float_list),
            ``bytes``/``str`` (bytes_list, UTF-8), lists of those, or numpy arrays of any
            shape (flattened). ``None`` leaves the feature out.
        spec: The decoding spec the record must fit (``{name: FixedLen | VarLen}``): its
            dtypes decide the lists (an empty list needs one), ``FixedLen`` counts are
            checked and features without a default must be there. ``None``: the values'
            own types.
        record: The record's number, named by errors.
        nulls: What a null element inside a list (``None``, a masked element) becomes:
            ``"refuse"`` (an error), ``"drop"`` or ``("fill", value)``; see
            :mod:`ofindex.encode.nulls`. A ``None`` value leaves the feature out.

    Returns:
        The serialized Example.

    Raises:
        EncodeError: A value that cannot be stored without losing information, or that does
            not fit the spec; the message names the feature and the record.
        ValueError: A bad ``nulls``.
    """
    rules = FeatureRules(spec, EXAMPLE_TYPES, "Example", nulls)
    return delimited(1, features_payload(features, rules, EXAMPLE_FIELDS, record))


def encode_ofrecord(features: Mapping[str, object], spec: Spec = None, *,
                    record: int | None = None, nulls: Nulls = REFUSE) -> bytes:
    """Encode one OneFlow ``OFRecord`` (its five lists: bytes, float32, float64, int32,
    int64; numpy dtypes choose them, Python ``float`` is float32 and ``int`` int64).

    Args:
        features: ``{name: value}`` as for :func:`encode_example`.
        spec: The decoding spec the record must fit, or ``None``.
        record: The record's number, named by errors.
        nulls: What a null element inside a list becomes (see :func:`encode_example`).

    Returns:
        The serialized OFRecord.

    Raises:
        EncodeError: A value that cannot be stored, or that does not fit the spec.
        ValueError: A bad ``nulls``.
    """
    rules = FeatureRules(spec, OFRECORD_TYPES, "OFRecord", nulls)
    return features_payload(features, rules, OFRECORD_FIELDS, record)


def _empty_untyped(step: object, rules: FeatureRules, name: object) -> bool:
    typed = rules.spec is not None and rules.spec.get(name) is not None
    return isinstance(step, (list, tuple)) and not step and not typed


def _steps(name: object, steps: object, rules: FeatureRules, record: int | None) -> bytes:
    if isinstance(steps, (bytes, str, Mapping)) or not hasattr(steps, "__len__"):
        raise EncodeError(f"{where(name, record)}: a feature list is a sequence of steps "
                          f"(one value per step), not {type(steps).__name__}")
    typed: list[tuple[str, Values] | None] = []
    list_type = None
    for step in steps:  # type: ignore[attr-defined]
        if _empty_untyped(step, rules, name):
            typed.append(None)  # an empty step takes the type of the list's other steps
            continue
        vtype, values = rules.values(name, step, record)
        if list_type not in (None, vtype):
            raise EncodeError(f"{where(name, record)}: steps of one feature list hold one "
                              f"type, here {list_type} and {vtype}")
        list_type = vtype
        typed.append((vtype, values))
    if list_type is None and typed:
        raise EncodeError(f"{where(name, record)}: every step is an empty list, which has no "
                          "type; give it in sequence_spec (VarLen('int64') …)")
    parts = []
    for item in typed:
        vtype, values = item if item is not None else (
            str(list_type), [] if list_type == BYTES else np.empty(0, NUMPY_TYPES[str(list_type)]))
        parts.append(delimited(1, feature_message(vtype, values, EXAMPLE_FIELDS)))
    return b"".join(parts)


def encode_sequence_example(context: Mapping[str, object],
                            feature_lists: Mapping[str, object], *,
                            context_spec: Spec = None, sequence_spec: Spec = None,
                            record: int | None = None, nulls: Nulls = REFUSE) -> bytes:
    """Encode one ``tf.train.SequenceExample``.

    Args:
        context: ``{name: value}`` as for :func:`encode_example`.
        feature_lists: ``{name: steps}``: each a sequence with one value per step (a 2-D
            array gives one row per step).
        context_spec: The spec the context must fit, or ``None``.
        sequence_spec: The spec each step of a feature list must fit (``FixedLen`` counts per
            step), or ``None``.
        record: The record's number, named by errors.
        nulls: What a null element inside a list becomes (see :func:`encode_example`).

    Returns:
        The serialized SequenceExample.

    Raises:
        EncodeError: A value that cannot be stored, or that does not fit the spec.
        ValueError: A bad ``nulls``.
    """
    ctx_rules = FeatureRules(context_spec, EXAMPLE_TYPES, "SequenceExample", nulls)
    seq_rules = FeatureRules(sequence_spec, EXAMPLE_TYPES, "SequenceExample", nulls)
    lists = []
    for name, steps in feature_lists.items():
        if is_null(steps):
            continue
        lists.append(map_entry(name_bytes(name, record), _steps(name, steps, seq_rules, record)))
    return (delimited(1, features_payload(context, ctx_rules, EXAMPLE_FIELDS, record))
            + delimited(2, b"".join(lists)))


__all__ = ["FixedLen", "VarLen", "encode_example", "encode_ofrecord", "encode_sequence_example"]
