"""A picklable per-record encoder, the mirror of :class:`ofindex.decode.Decoder`."""

from collections.abc import Mapping
from typing import Any

from ofindex.decode.spec import Spec
from ofindex.encode.messages import encode_example, encode_ofrecord, encode_sequence_example
from ofindex.encode.nulls import REFUSE, Nulls, null_policy
from ofindex.errors import EncodeError

KINDS = ("example", "sequence_example", "ofrecord")


class Encoder:
    """Encode one record per call: ``Encoder(spec, kind)(features)`` -> bytes.

    Args:
        spec: The decoding spec records must fit (``{name: FixedLen | VarLen}``), or
            ``None``: each value's own type. For ``kind="sequence_example"``: a
            ``(context_spec, sequence_spec)`` pair.
        kind: ``"example"``, ``"sequence_example"`` or ``"ofrecord"``.
        nulls: What a null element inside a list becomes: ``"refuse"``, ``"drop"`` or
            ``("fill", value)`` (see :mod:`ofindex.encode.nulls`).

    Raises:
        ValueError: An unknown ``kind`` or a bad ``nulls``.
    """

    def __init__(self, spec: Spec | tuple[Spec, Spec] = None, kind: str = "example", *,
                 nulls: Nulls = REFUSE) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown record kind {kind!r}: use one of {', '.join(KINDS)}")
        self.spec = spec
        self.kind = kind
        self.nulls = null_policy(nulls)

    def __call__(self, features: Mapping[str, Any] | tuple[Mapping[str, Any], Mapping[str, Any]],
                 *, record: int | None = None) -> bytes:
        """Encode one record.

        Args:
            features: ``{name: value}``; for ``"sequence_example"`` a
                ``(context, feature_lists)`` pair.
            record: The record's number, named by errors.

        Returns:
            The serialized record.

        Raises:
            EncodeError: A value that cannot be stored, or that does not fit the spec.
        """
        if self.kind == "sequence_example":
            if not (isinstance(features, tuple) and len(features) == 2):
                raise EncodeError(f"record {record}: a SequenceExample is given as a "
                                  "(context, feature_lists) pair")
            context_spec, sequence_spec = self.spec if self.spec is not None else (None, None)
            return encode_sequence_example(features[0], features[1], record=record,
                                           context_spec=context_spec,
                                           sequence_spec=sequence_spec, nulls=self.nulls)
        if isinstance(features, tuple):
            raise EncodeError(f"record {record}: features are a mapping {{name: value}}")
        if self.kind == "ofrecord":
            return encode_ofrecord(features, self.spec, record=record,  # type: ignore[arg-type]
                                   nulls=self.nulls)
        return encode_example(features, self.spec, record=record,  # type: ignore[arg-type]
                              nulls=self.nulls)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(self) == vars(other)

    def __repr__(self) -> str:
        nulls = "" if self.nulls.action == REFUSE else f", nulls={self.nulls!r}"
        return f"Encoder({self.spec!r}, kind={self.kind!r}{nulls})"
