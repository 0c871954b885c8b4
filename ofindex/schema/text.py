"""A schema as Python code for :mod:`ofindex.decode` (:func:`to_python`), as TensorFlow's
``feature_description`` (:func:`to_tf`, its code text with ``as_code=True``), and a
``feature_description`` read back into our spec (:func:`spec_from_tf`)."""

from collections.abc import Mapping
from typing import Any, Literal, overload

from ofindex.decode.spec import FixedLen, VarLen, normalize_dtype
from ofindex.errors import DecodeError, missing_extra
from ofindex.schema.infer import FeatureStats, Schema

_TF_DTYPES = {"bytes": "tf.string", "float32": "tf.float32", "int64": "tf.int64",
              "float64": "tf.float64", "int32": "tf.int32"}


def _spec_code(fs: FixedLen | VarLen) -> str:
    if isinstance(fs, VarLen):
        return f"VarLen({fs.dtype!r})"
    extra = ", allow_missing=True" if fs.allow_missing else ""
    return f"FixedLen({fs.shape!r}, {fs.dtype!r}{extra})"


def _lines(specs: dict[str, FixedLen | VarLen], stats: dict[str, FeatureStats],
           sampled: int, code: Any, left_out: str) -> list[str]:
    lines = []
    for name in sorted(stats):
        fs = specs.get(name)
        note = stats[name].note(sampled)
        if fs is None:
            lines.append(f"    # {name!r}: {left_out} ({note})")
        else:
            lines.append(f"    {name!r}: {code(fs)},  # {note}")
    return lines


def _header(schema: Schema) -> str:
    if schema.records is None or schema.sampled_from:
        return (f"# {schema.kind}: {schema.sampled:,} records sampled by ofindex "
                f"{schema.sampled_from}".rstrip())
    return (f"# {schema.kind}: {schema.sampled:,} of {schema.records:,} records sampled "
            "by ofindex.infer_spec")


def to_python(schema: Schema) -> str:
    """The schema as Python code that builds an ``ofindex.decode`` decoder.

    Args:
        schema: What :func:`~ofindex.schema.infer.infer_spec` gave.

    Returns:
        Code defining ``spec`` (``context_spec`` and ``sequence_spec`` for a
        SequenceExample) and ``decoder``.
    """
    if schema.kind == "raw":
        return f"{_header(schema)}\n# not decodable: {schema.failure}"
    left_out = "left out, no single type"
    lines = [_header(schema), "from ofindex.decode import Decoder, FixedLen, VarLen", ""]
    if schema.kind == "sequence_example":
        lines += ["context_spec = {",
                  *_lines(schema.spec, schema.features, schema.sampled, _spec_code, left_out),
                  "}", "sequence_spec = {",
                  *_lines(schema.sequence_spec, schema.feature_lists, schema.sampled,
                          _spec_code, left_out),
                  "}", 'decoder = Decoder(kind="sequence_example", context_spec=context_spec, '
                  "sequence_spec=sequence_spec)"]
    else:
        lines += ["spec = {",
                  *_lines(schema.spec, schema.features, schema.sampled, _spec_code, left_out),
                  "}", f"decoder = Decoder(spec, kind={schema.kind!r})"]
    return "\n".join(lines)


def _tf_code(fs: FixedLen | VarLen, sequence: bool = False) -> str:
    dtype = _TF_DTYPES[fs.dtype]
    if isinstance(fs, VarLen):
        return f"tf.io.VarLenFeature({dtype})"
    if sequence:
        extra = ", allow_missing=True" if fs.allow_missing else ""
        return f"tf.io.FixedLenSequenceFeature({list(fs.shape)}, {dtype}{extra})"
    return f"tf.io.FixedLenFeature({list(fs.shape)}, {dtype})"


def _tf_code_text(schema: Schema) -> str:
    """The ``feature_description`` as TensorFlow code, each feature's sample noted."""
    if schema.kind in ("raw", "ofrecord"):
        return f"{_header(schema)}\n# TensorFlow has no parser for these records"
    left_out = "left out, no single type"
    lines = [_header(schema), "import tensorflow as tf", ""]
    if schema.kind == "sequence_example":
        lines += ["context_features = {",
                  *_lines(schema.spec, schema.features, schema.sampled, _tf_code, left_out),
                  "}", "sequence_features = {",
                  *_lines(schema.sequence_spec, schema.feature_lists, schema.sampled,
                          lambda fs: _tf_code(fs, True), left_out), "}"]
    else:
        lines += ["feature_description = {",
                  *_lines(schema.spec, schema.features, schema.sampled, _tf_code, left_out),
                  "}"]
    return "\n".join(lines)


def _tf_feature(tf: Any, fs: FixedLen | VarLen, sequence: bool = False) -> Any:
    """One spec as the ``tf.io`` feature ``_tf_code`` writes for it."""
    dtype = tf.dtypes.as_dtype(_TF_DTYPES[fs.dtype].removeprefix("tf."))
    if isinstance(fs, VarLen):
        return tf.io.VarLenFeature(dtype)
    if sequence:
        return tf.io.FixedLenSequenceFeature(list(fs.shape), dtype,
                                             allow_missing=fs.allow_missing)
    return tf.io.FixedLenFeature(list(fs.shape), dtype)


def _tf_description(schema: Schema) -> dict[str, Any]:
    """The ``feature_description`` of an Example or SequenceExample schema."""
    if schema.kind == "raw":
        raise DecodeError(f"the sampled records are not Examples ({schema.failure}): "
                          "tf.io has nothing to parse them with")
    if schema.kind == "ofrecord":
        raise DecodeError("the records are OFRecords, which TensorFlow has no parser for: "
                          "decode them with schema.decoder() (ofindex.decode)")
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise missing_extra("ofindex.schema.to_tf", "tf", exc) from exc
    if schema.kind == "sequence_example":
        return {"context_features": {name: _tf_feature(tf, fs)
                                     for name, fs in schema.spec.items()},
                "sequence_features": {name: _tf_feature(tf, fs, True)
                                      for name, fs in schema.sequence_spec.items()}}
    return {name: _tf_feature(tf, fs) for name, fs in schema.spec.items()}


@overload
def to_tf(schema: Schema, *, as_code: Literal[False] = False) -> dict[str, Any]: ...


@overload
def to_tf(schema: Schema, *, as_code: Literal[True]) -> str: ...


def to_tf(schema: Schema, *, as_code: bool = False) -> dict[str, Any] | str:
    """The schema as TensorFlow's ``feature_description``, for ``tf.io.parse_example``.

    ``FixedLen`` features become ``tf.io.FixedLenFeature``, ``VarLen`` ones
    ``tf.io.VarLenFeature`` (a ``tf.SparseTensor``); a feature seen with more than one type
    is left out. For a SequenceExample the result is ``{"context_features": {...},
    "sequence_features": {...}}``, the keyword arguments of
    ``tf.io.parse_sequence_example(serialized, **to_tf(schema))`` (feature lists as
    ``tf.io.FixedLenSequenceFeature``).

    Args:
        schema: What :func:`~ofindex.schema.infer.infer_spec` gave.
        as_code: Return the description as TensorFlow source code instead, each feature
            commented with what the sample held (what ``ofindex schema --style tf`` prints;
            for OFRecord or raw records a comment saying TensorFlow has no parser).

    Returns:
        ``{name: tf.io.FixedLenFeature | tf.io.VarLenFeature}`` (for a SequenceExample,
        ``{"context_features": ..., "sequence_features": ...}``), or with ``as_code`` the
        code as a ``str``.

    Raises:
        DecodeError: Without ``as_code``: the records are OFRecords or not Examples
            (TensorFlow has no parser for them).
        MissingDependencyError: Without ``as_code``: TensorFlow is not installed.
    """
    if as_code:
        return _tf_code_text(schema)
    return _tf_description(schema)


def _one_from_tf(name: str, feature: Any) -> FixedLen | VarLen:
    kind = type(feature).__name__
    dtype = normalize_dtype(feature.dtype)
    if kind == "VarLenFeature":
        return VarLen(dtype)
    if kind == "RaggedFeature":
        if getattr(feature, "partitions", ()):
            raise ValueError(f"feature {name!r}: a RaggedFeature with partitions has no "
                             "ofindex spec; use VarLen and reshape")
        return VarLen(dtype)
    if kind == "FixedLenFeature":
        return FixedLen(tuple(feature.shape), dtype, default=feature.default_value)
    if kind == "FixedLenSequenceFeature":
        return FixedLen(tuple(feature.shape), dtype, default=feature.default_value,
                        allow_missing=bool(feature.allow_missing))
    raise ValueError(f"feature {name!r}: {kind} has no ofindex spec (FixedLenFeature, "
                     "FixedLenSequenceFeature, VarLenFeature and RaggedFeature do)")


def spec_from_tf(feature_description: Mapping[str, Any]) -> dict[str, FixedLen | VarLen]:
    """Read a TensorFlow ``feature_description`` into an ``ofindex.decode`` spec.

    ``tf.io.FixedLenFeature(shape, dtype, default_value)`` becomes ``FixedLen`` (with the
    default), ``FixedLenSequenceFeature`` ``FixedLen(..., allow_missing=)``,
    ``VarLenFeature`` and ``RaggedFeature`` (without partitions) ``VarLen``.

    Args:
        feature_description: ``{name: tf.io.…Feature}`` as for ``tf.io.parse_example``.

    Returns:
        ``{name: FixedLen | VarLen}``.

    Raises:
        ValueError: A feature type with no ofindex spec (``SparseFeature``, a partitioned
            ``RaggedFeature``) or a dtype records cannot hold.
    """
    return {name: _one_from_tf(name, feature) for name, feature in feature_description.items()}
