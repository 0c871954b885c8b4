"""What a dataset holds: its record kind and, per feature, type, length and presence, from a
bounded random sample of records (:func:`infer_spec`).

Records are sampled uniformly across the whole dataset (all shards), at most ``sample`` of
them, fetched in one batched read: never the whole dataset. Each is parsed with protobuf
(``SequenceExample`` for TFRecord files, which an Example also parses as; ``OFRecord`` for
OFRecord files); a record that does not parse makes the kind ``"raw"`` (bytes of another
message, e.g. TensorBoard events). Per feature: its value type (bytes/float32/int64 in an
Example; OFRecord's five), the number of values per record (per step for a feature list),
and in how many sampled records it occurs. A feature whose count never varies and that every
sampled record holds becomes ``FixedLen`` (one value: a scalar), any other ``VarLen``.
"""

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError as ProtobufDecodeError

from ofindex.decode import Decoder
from ofindex.decode.spec import FeatureSpec, FixedLen, VarLen
from ofindex.proto import example_pb2, ofrecord_pb2
from ofindex.read.dataset import Dataset

#: Default number of records :func:`infer_spec` samples.
SAMPLE = 256
_LIST_TYPES = {"bytes_list": "bytes", "float_list": "float32", "double_list": "float64",
               "int32_list": "int32", "int64_list": "int64"}


@dataclasses.dataclass
class FeatureStats:
    """One feature as seen in the sample.

    Attributes:
        dtype: Its value type, or ``None`` when only empty features (no list) were seen.
        present: Sampled records that hold it.
        min_count: Fewest values in a record (a step, for feature lists).
        max_count: Most values in a record (a step).
        other_dtypes: Value types some records store it as besides ``dtype`` (then no spec is
            inferred for it).
        min_steps: For feature lists: fewest steps in a record that holds it.
        max_steps: For feature lists: most steps.
    """

    dtype: str | None = None
    present: int = 0
    min_count: int = -1
    max_count: int = 0
    other_dtypes: tuple[str, ...] = ()
    min_steps: int = -1
    max_steps: int = 0

    def add(self, dtype: str | None, count: int) -> None:
        """Count one value list (of one record, or one step).

        Args:
            dtype: Its value type (``None``: an empty feature without a list).
            count: Its number of values.
        """
        if dtype is not None:
            if self.dtype is None:
                self.dtype = dtype
            elif dtype != self.dtype and dtype not in self.other_dtypes:
                self.other_dtypes += (dtype,)
        self.min_count = count if self.min_count < 0 else min(self.min_count, count)
        self.max_count = max(self.max_count, count)

    def add_steps(self, steps: int) -> None:
        """Count the steps of one record's feature list.

        Args:
            steps: Its number of steps.
        """
        self.min_steps = steps if self.min_steps < 0 else min(self.min_steps, steps)
        self.max_steps = max(self.max_steps, steps)

    def spec(self, sampled: int, *, feature_list: bool = False) -> FeatureSpec:
        """The spec this feature decodes with.

        Args:
            sampled: Records sampled (a feature some of them lack is ``VarLen``).
            feature_list: The feature is a SequenceExample's feature list (its counts are
                per step).

        Returns:
            ``FixedLen``, ``VarLen``, or ``None`` when no single type was seen.
        """
        if self.dtype is None or self.other_dtypes:
            return None
        fixed = self.min_count == self.max_count
        if feature_list:
            return (FixedLen(() if self.max_count == 1 else (self.max_count,), self.dtype,
                             allow_missing=self.present < sampled) if fixed
                    else VarLen(self.dtype))
        if fixed and self.present == sampled:
            return FixedLen(() if self.max_count == 1 else (self.max_count,), self.dtype)
        return VarLen(self.dtype)

    def note(self, sampled: int) -> str:
        """A short description: counts and presence.

        Args:
            sampled: Records sampled.

        Returns:
            E.g. ``"784 values, in 100% of records"``.
        """
        counts = (str(self.min_count) if self.min_count == self.max_count
                  else f"{self.min_count}-{self.max_count}")
        text = f"{counts} value{'s' if counts != '1' else ''}"
        if self.max_steps:
            steps = (str(self.min_steps) if self.min_steps == self.max_steps
                     else f"{self.min_steps}-{self.max_steps}")
            text += f" per step, {steps} steps"
        text += f", in {self.present / sampled:.0%} of records" if sampled else ""
        if self.dtype is None:
            text += "; always empty: no type"
        if self.other_dtypes:
            text += f"; stored as {', '.join((str(self.dtype), *self.other_dtypes))}"
        return text


@dataclasses.dataclass
class Schema:
    """The inferred schema of a dataset (see :mod:`ofindex.schema.infer`).

    Attributes:
        kind: ``"example"``, ``"sequence_example"``, ``"ofrecord"`` or ``"raw"``.
        records: Records in the dataset (``None``: not known, the files have no index).
        sampled: Records sampled.
        features: Per feature (the context for a SequenceExample): :class:`FeatureStats`.
        feature_lists: Per feature list of a SequenceExample.
        failure: For ``"raw"``: why a sampled record is not of the format's message.
        sampled_from: Where the sample was taken when not uniformly across the dataset
            (e.g. ``"from the start of 16 of 1,000 files"``), else ``""``.
    """

    kind: str
    records: int | None
    sampled: int
    features: dict[str, FeatureStats] = dataclasses.field(default_factory=dict)
    feature_lists: dict[str, FeatureStats] = dataclasses.field(default_factory=dict)
    failure: str = ""
    sampled_from: str = ""

    @property
    def spec(self) -> dict[str, FixedLen | VarLen]:
        """The spec of the features (the context of a SequenceExample), for
        ``ofindex.decode``: features seen with one type only."""
        out = {name: st.spec(self.sampled) for name, st in sorted(self.features.items())}
        return {name: fs for name, fs in out.items() if fs is not None}

    @property
    def sequence_spec(self) -> dict[str, FixedLen | VarLen]:
        """The spec of a SequenceExample's feature lists."""
        out = {name: st.spec(self.sampled, feature_list=True)
               for name, st in sorted(self.feature_lists.items())}
        return {name: fs for name, fs in out.items() if fs is not None}

    def decoder(self) -> Decoder:
        """A decoder for this schema's kind and specs.

        Returns:
            A :class:`ofindex.decode.Decoder`.

        Raises:
            ValueError: The records are ``"raw"`` (no message to decode).
        """
        if self.kind == "raw":
            raise ValueError("the records are not Examples or OFRecords: nothing to decode")
        if self.kind == "sequence_example":
            return Decoder(kind=self.kind, context_spec=self.spec,
                           sequence_spec=self.sequence_spec)
        return Decoder(self.spec, kind=self.kind)

    def to_dict(self) -> dict[str, Any]:
        """The schema as JSON-ready data.

        Returns:
            ``{"kind", "records", "sampled", "features", "feature_lists"}`` (and
            ``"failure"`` for raw records, ``"sampled_from"`` for a sample not taken across
            the dataset), per feature its :class:`FeatureStats` fields.
        """
        return {"kind": self.kind, "records": self.records, "sampled": self.sampled,
                "features": {n: dataclasses.asdict(s) for n, s in self.features.items()},
                "feature_lists": {n: dataclasses.asdict(s)
                                  for n, s in self.feature_lists.items()},
                **({"failure": self.failure} if self.failure else {}),
                **({"sampled_from": self.sampled_from} if self.sampled_from else {})}


def _stats_of(features: Any, table: dict[str, FeatureStats]) -> None:
    for name, feature in features.items():
        kind = feature.WhichOneof("kind")
        values = getattr(feature, kind).value if kind else ()
        stats = table.setdefault(name, FeatureStats())
        stats.present += 1
        stats.add(_LIST_TYPES[kind] if kind else None, len(values))


def _lists_of(feature_lists: Any, table: dict[str, FeatureStats]) -> None:
    for name, feature_list in feature_lists.items():
        stats = table.setdefault(name, FeatureStats())
        stats.present += 1
        stats.add_steps(len(feature_list.feature))
        for feature in feature_list.feature:
            kind = feature.WhichOneof("kind")
            stats.add(_LIST_TYPES[kind] if kind else None,
                      len(getattr(feature, kind).value) if kind else 0)


def schema_of_records(records: Iterable[bytes], fmt: str, total: int | None,
                      sampled_from: str = "") -> Schema:
    """Infer the schema of some records of a dataset.

    Args:
        records: Sampled payloads.
        fmt: ``"tfrecord"`` or ``"ofrecord"`` (the dataset's framing).
        total: Records in the dataset (``None`` when not known).
        sampled_from: Where the sample was taken, when not uniformly across the dataset.

    Returns:
        A :class:`Schema`.
    """
    records = list(records)
    features: dict[str, FeatureStats] = {}
    lists: dict[str, FeatureStats] = {}
    message = ofrecord_pb2.OFRecord if fmt == "ofrecord" else example_pb2.SequenceExample
    for k, data in enumerate(records):
        what = "an OFRecord" if fmt == "ofrecord" else "an Example or SequenceExample"
        try:
            parsed = message.FromString(bytes(data))
        except (ProtobufDecodeError, RuntimeError) as exc:
            return Schema("raw", total, len(records),
                          failure=f"sampled record {k} is not {what} ({exc})",
                          sampled_from=sampled_from)
        parsed.DiscardUnknownFields()
        if parsed.ByteSize() != len(data):  # it held fields the message does not have
            return Schema("raw", total, len(records),
                          failure=f"sampled record {k} is not {what} (it holds other fields)",
                          sampled_from=sampled_from)
        if isinstance(parsed, ofrecord_pb2.OFRecord):
            _stats_of(parsed.feature, features)
        else:
            _stats_of(parsed.context.feature, features)
            _lists_of(parsed.feature_lists.feature_list, lists)
    kind = "ofrecord" if fmt == "ofrecord" else ("sequence_example" if lists else "example")
    return Schema(kind, total, len(records), features, lists, sampled_from=sampled_from)


def sample_indices(total: int, sample: int, seed: int) -> np.ndarray:
    """``min(sample, total)`` distinct record numbers drawn uniformly, in increasing order."""
    n = min(max(sample, 0), total)
    rng = np.random.default_rng(seed)
    if n == total:
        return np.arange(total, dtype=np.int64)
    return np.sort(rng.choice(total, size=n, replace=False)).astype(np.int64)


def infer_spec(ds: Dataset, sample: int = SAMPLE, *, seed: int = 0) -> Schema:
    """Infer what a dataset's records hold from a bounded random sample.

    >>> schema = ofindex.infer_spec(ofindex.open("data/"))      # doctest: +SKIP
    >>> decoder = schema.decoder()                               # doctest: +SKIP

    Args:
        ds: An open dataset (``ofindex.open``).
        sample: Records to sample, uniformly across all shards (all of them when the
            dataset has fewer); fetched in one batched read.
        seed: The sample's seed (the same seed samples the same records).

    Returns:
        A :class:`Schema`: the kind, per-feature statistics, ``.spec`` /
        ``.sequence_spec`` for :mod:`ofindex.decode`, and text as Python code or a
        TensorFlow ``feature_description`` (:mod:`ofindex.schema.text`).

    Raises:
        OfindexError: A sampled record cannot be read.
    """
    indices = sample_indices(len(ds), sample, seed)
    records: Sequence[bytes] = ds.__getitems__(indices) if len(indices) else []
    return schema_of_records(records, ds.format.name.lower(), len(ds))
