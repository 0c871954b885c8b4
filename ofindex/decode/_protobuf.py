"""Records of different byte layouts decoded through protobuf's compiled parser (upb).

Records that share a byte layout are decoded together with numpy (``_template``); the rest
are decoded one by one. Walking each record's wire format in Python costs tens of
microseconds (a ``tf.train.Example`` with a JPEG and four ints: ~60 us); protobuf's compiled
parser does the same in a few. It is used here only where its answer is plainly the one the
careful path would give: every record parses, every asked-for feature is present with the
asked-for value type and, for ``FixedLen``, the right number of values. For anything else
(bad bytes, a missing feature, a default to fill in, another value type) this returns
``None`` and the careful path decodes the records and words the error.

Numeric lists come out of protobuf one Python number per value, so long numeric features
stay on the careful path (which reads them as one numpy buffer each). So do all float
features: a float32 NaN passed through a Python float can change its payload bits (a
signalling NaN comes back quiet), and the careful path returns the stored bits exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ofindex.decode._values import BYTES, INT32, INT64, LIST_NAMES, NP_DTYPES
from ofindex.decode.spec import FixedLen, NormalizedSpec, check_batch_room

#: Integer FixedLen features of at most this many values go through protobuf.
MAX_NUMERIC_VALUES = 64
#: The numeric value types that go through protobuf (floats do not: see the module doc).
_INTEGERS = (INT32, INT64)

#: Column of a batch part: ("fixed", array) or ("ragged", values, row lengths).
Column = tuple[Any, ...]


#: The first protobuf whose parser follows the rules of the careful path: protobuf 6 accepts a
#: length or tag in more than 5 bytes and refuses field number 0 inside a group, so a batch
#: decoded through it accepted records that decode_example refuses.
FIRST_MAJOR = 7


def _message_class(family: str) -> Any:
    """The generated message class of ``family``, or ``None`` when protobuf is not upb or is
    older than :data:`FIRST_MAJOR`."""
    from google.protobuf import __version__ as protobuf_version
    from google.protobuf.internal import api_implementation

    if api_implementation.Type() != "upb" or int(protobuf_version.split(".")[0]) < FIRST_MAJOR:
        return None
    if family == "example":
        from ofindex.proto import example_pb2

        return example_pb2.Example
    from ofindex.proto import ofrecord_pb2

    return ofrecord_pb2.OFRecord


def eligible(spec: NormalizedSpec | None) -> bool:
    """Whether every feature of ``spec`` can take the compiled path (see the module doc).

    Args:
        spec: The normalized spec (``None``: every feature, types unknown: not eligible).

    Returns:
        ``True`` when each feature is named by a ``str`` and is a ``bytes`` feature or an
        integer ``FixedLen`` of at most :data:`MAX_NUMERIC_VALUES` values.
    """
    if not spec:
        return False
    for name, fs in spec.items():
        if not isinstance(name, str) or fs is None:
            return False
        if fs.dtype != BYTES and not (isinstance(fs, FixedLen) and fs.dtype in _INTEGERS
                                      and fs.size <= MAX_NUMERIC_VALUES):
            return False
    return True


def decode_parsed(bufs: list[bytes], spec: NormalizedSpec, family: str
                  ) -> dict[Any, Column] | None:
    """Decode ``bufs`` record by record with protobuf's compiled parser.

    Args:
        bufs: The serialized records.
        spec: A spec that :func:`eligible` accepted.
        family: ``"example"`` or ``"ofrecord"``.

    Returns:
        ``{name: ("fixed", array) | ("ragged", values, lengths)}`` as the careful path gives,
        or ``None`` when a record needs the careful path (which then decodes or reports it).
    """
    cls = _message_class(family)
    if cls is None:
        return None
    items = list(spec.items())
    n = len(bufs)
    # per feature: its oneof list name, its number of values (-1: VarLen), and where its
    # values go (the FixedLen array seen as (records, values), or the VarLen rows)
    plan: list[tuple[Any, str, int, Any]] = []
    fixed: dict[Any, np.ndarray] = {}
    ragged: dict[Any, list[Any]] = {}
    for name, fs in items:
        if isinstance(fs, FixedLen):
            check_batch_room(name, fs, bufs, None)
            fixed[name] = np.empty((n, *fs.shape), NP_DTYPES[fs.dtype])
            plan.append((name, LIST_NAMES[fs.dtype], fs.size, fixed[name].reshape(n, -1)))
        else:  # eligible(): a VarLen bytes feature
            ragged[name] = []
            plan.append((name, LIST_NAMES[BYTES], -1, ragged[name]))
    parse = cls.FromString
    for j, buf in enumerate(bufs):
        try:
            msg = parse(buf)
        except Exception:  # any parse failure: the careful path words it
            return None
        features = msg.features.feature if family == "example" else msg.feature
        for name, list_name, size, dest in plan:
            if name not in features:
                return None
            feature = features[name]
            if feature.WhichOneof("kind") != list_name:
                return None
            values = getattr(feature, list_name).value
            if size < 0:
                dest.append(values)
            elif len(values) != size:
                return None
            elif size == 1:
                dest[j, 0] = values[0]
            else:
                dest[j] = list(values)
    out: dict[Any, Column] = {name: ("fixed", arr) for name, arr in fixed.items()}
    for name, rows in ragged.items():
        lengths = np.fromiter(map(len, rows), np.int64, len(rows))
        values = np.empty(int(lengths.sum()), NP_DTYPES[BYTES])
        values[:] = [v for row in rows for v in row]
        out[name] = ("ragged", values, lengths)
    return {name: out[name] for name, _ in items}
