"""The spec of a decoder whose every feature has a dtype and a shape (a mapping of ``FixedLen``
and ``VarLen``): what frameworks with typed columns or tensors need to know before the first
batch is read (TensorFlow's element signature, Hugging Face ``Features``)."""

from ..decode import BatchDecoder, FixedLen, VarLen


def feature_specs(decoder: BatchDecoder) -> dict[str, FixedLen | VarLen]:
    """The features of ``decoder``, checked for a ``tf.data`` element: a mapping of
    ``FixedLen`` and ``VarLen`` of Examples or OFRecords (their dtypes then fix the
    element's signature).

    Args:
        decoder: A :class:`~ofindex.decode.BatchDecoder`.

    Returns:
        ``{name: FixedLen | VarLen}`` in the spec's order.

    Raises:
        TypeError: ``decoder`` is not a ``BatchDecoder``.
        ValueError: It decodes SequenceExamples, or its spec is not a mapping of
            ``FixedLen``/``VarLen`` (a ``None`` entry or a list of names has no dtype).
    """
    if not isinstance(decoder, BatchDecoder):
        raise TypeError(f"decoder must be an ofindex.decode.BatchDecoder, got "
                        f"{type(decoder).__name__}")
    if decoder.kind == "sequence_example":
        raise ValueError("SequenceExample batches have no typed signature here: decode "
                         "Examples or OFRecords (kind='example' or 'ofrecord')")
    spec = decoder.spec
    if not isinstance(spec, dict) or not spec:
        raise ValueError(f"decoder spec {spec!r} has no dtypes: give a mapping "
                         "{name: FixedLen(...) | VarLen(...)}")
    untyped = [name for name, feature in spec.items()
               if not isinstance(feature, (FixedLen, VarLen))]
    if untyped:
        raise ValueError(f"features {untyped} have no dtype (None in the spec): give each a "
                         "FixedLen(shape, dtype) or VarLen(dtype)")
    return {str(name): feature for name, feature in spec.items()}
