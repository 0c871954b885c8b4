"""The protobuf wire-format walker for Example, SequenceExample and OFRecord.

It locates each feature's value list inside the serialized bytes without building
protobuf objects; :mod:`ofindex.decode._values` then turns the located bytes into numpy
arrays (``numpy.frombuffer`` for packed floats and doubles, vectorised varint decoding for
integers). The walker follows protobuf's own parsing rules, so that the result always
equals what ``ParseFromString`` would give:

- fields may come in any order; unknown fields (any wire type, groups included) are
  skipped; a known field number with an unexpected wire type is an unknown field;
- a sub-message that occurs twice is merged: two ``features`` fields of an Example
  concatenate their maps, two lists of the same kind in a Feature concatenate, a list of
  another kind replaces the earlier one (``oneof``);
- a map key that occurs twice keeps the last entry; a map entry without key has key
  ``""``, one without value has an empty Feature; a map entry with an unknown field is
  left out of the map (upb, the default Python protobuf backend, keeps it aside as an
  unknown field; TensorFlow's Python protos are upb-backed too);
- proto3 string keys must be UTF-8 (proto2 OFRecord keys that are not stay ``bytes``);
- malformed wire data is an error exactly where protobuf finds one (see :mod:`._wire`:
  truncated varints, lengths running past the end, overlong tags and lengths, groups
  left open or nested too deeply), including inside unknown fields and groups.

A located feature is a :class:`Located`: the Feature's kind (its oneof field number, 0
when none is set), the list-message regions ``(start, end)`` that make it up and their
nesting level (which bounds the groups inside them: see :mod:`._wire`).
"""

from __future__ import annotations

from typing import Any

from ofindex.decode._values import EXAMPLE_KINDS, OFRECORD_KINDS, list_values
from ofindex.decode._wire import LEN, WireError, iter_fields, read_length


class Located:
    """A feature found in the bytes: its kind (oneof field number, 0 = none set), the
    regions of its list message(s) and their nesting level in the record."""

    __slots__ = ("kind", "level", "regions")

    def __init__(self, level: int, kind: int = 0,
                 regions: list[tuple[int, int]] | None = None) -> None:
        self.level = level
        self.kind = kind
        self.regions = regions if regions is not None else []

    def merge_feature(self, buf: bytes, start: int, end: int, max_kind: int) -> None:
        """Merge one serialized Feature message (a region of buf, one level above the
        lists) into this one."""
        for field, wt, s, e in iter_fields(buf, start, end, self.level - 1):
            if wt != LEN or field > max_kind:
                continue  # unknown field
            if field == self.kind:
                self.regions.append((s, e))
            else:
                discard(buf, self, max_kind)
                self.kind = field
                self.regions = [(s, e)]

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Located(level={self.level}, kind={self.kind}, regions={self.regions})"


#: A walked record: feature name (``str``; ``bytes`` for an OFRecord name that is not UTF-8)
#: -> where its value list lies.
Walked = dict[Any, Located]


def discard(buf: bytes, located: Located, max_kind: int) -> None:
    """Validate a list that protobuf parses but then drops (replaced oneof, overwritten
    map entry, entry with unknown fields): protobuf rejects the record if it is corrupt."""
    if located.kind and located.regions:
        kinds = EXAMPLE_KINDS if max_kind == 3 else OFRECORD_KINDS
        list_values(buf, located.regions, kinds[located.kind], located.level)


def _utf8(buf: bytes, start: int, end: int) -> None:
    try:
        buf[start:end].decode("utf-8")
    except UnicodeDecodeError:
        raise WireError("feature name is not valid UTF-8") from None


def _map_entry(buf: bytes, start: int, end: int, max_kind: int, proto3: bool,
               level: int) -> tuple[str | bytes, Located] | None:
    """Parse a map entry (at nesting ``level``); None if it has unknown fields (upb then
    keeps the whole entry as an unknown field of the container instead of putting it in
    the map)."""
    key_region = None
    located = Located(level + 2)
    unknown = False
    for field, wt, s, e in iter_fields(buf, start, end, level):  # walks all: validates
        if wt != LEN or field > 2:
            unknown = True
        elif field == 1:
            key_region = (s, e)
            if proto3:  # every occurrence is checked, not only the last one
                _utf8(buf, s, e)
        else:
            located.merge_feature(buf, s, e, max_kind)
    if key_region is None:
        key: str | bytes = ""
    else:
        key = _feature_name(buf[key_region[0]:key_region[1]], proto3)
    if unknown:
        discard(buf, located, max_kind)
        return None
    return key, located


def _feature_name(raw: bytes, proto3: bool) -> str | bytes:
    """A map key as text; invalid UTF-8 is an error in proto3 and kept as bytes in proto2
    (as protobuf's own parsers do)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        if proto3:
            raise WireError("feature name is not valid UTF-8") from None
        return raw


def _len_at(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read a length varint at pos (< end); return (length, position after it)."""
    if pos + 1 < end:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        c = buf[pos + 1]
        if c < 0x80:
            return (b & 0x7F) | c << 7, pos + 2
    return read_length(buf, pos, end)


def _canonical_entry(buf: bytes, pos: int, end: int, max_kind: int,
                     level: int) -> tuple[bytes, Located] | None:
    """Fast path for the usual map entry layout ``key, value{one list}``.

    Returns (key bytes, Located) or None when the entry is laid out otherwise (the caller
    then uses the general parser, which also diagnoses malformed data).
    """
    if pos + 2 > end or buf[pos] != 0x0A:
        return None
    n, p = _len_at(buf, pos + 1, end)
    ke = p + n
    if ke + 2 > end or buf[ke] != 0x12:
        return None
    raw = buf[p:ke]
    n, vs = _len_at(buf, ke + 1, end)
    if vs + n != end:
        return None
    if vs == end:
        return raw, Located(level + 2)
    tag = buf[vs]
    kind = tag >> 3
    if tag & 7 != LEN or kind == 0 or kind > max_kind or tag >= 0x80:
        return None
    n, q = _len_at(buf, vs + 1, end)
    if q + n != end:
        return None
    return raw, Located(level + 2, kind, [(q, end)])


def walk_feature_map(
    buf: bytes, start: int, end: int, out: Walked, max_kind: int, proto3: bool, level: int
) -> None:
    """Walk a ``map<string, Feature>`` container message (Features or OFRecord) at nesting
    ``level``.

    The map is field 1 of the container; entries are added to ``out`` (last key wins).
    """
    pos = start
    while pos < end:
        if buf[pos] != 0x0A:  # not a map entry: let the general parser handle the rest
            for field, wt, s, e in iter_fields(buf, pos, end, level):
                if field == 1 and wt == LEN:
                    entry = _map_entry(buf, s, e, max_kind, proto3, level + 1)
                    if entry is not None:
                        if entry[0] in out:
                            discard(buf, out[entry[0]], max_kind)
                        out[entry[0]] = entry[1]
            return
        n, s = _len_at(buf, pos + 1, end)
        e = s + n
        if e > end:
            raise WireError("map entry runs past the end of its message")
        fast = _canonical_entry(buf, s, e, max_kind, level + 1)
        if fast is None:
            entry = _map_entry(buf, s, e, max_kind, proto3, level + 1)
            pos = e
            if entry is None:
                continue
            key, located = entry
        else:
            raw, located = fast
            key = _feature_name(raw, proto3)
        if key in out:
            discard(buf, out[key], max_kind)
        out[key] = located
        pos = e


def walk_example(buf: bytes) -> Walked:
    """Map each feature name of a serialized Example to its :class:`Located`."""
    out: Walked = {}
    for field, wt, s, e in iter_fields(buf, 0, len(buf)):
        if field == 1 and wt == LEN:
            walk_feature_map(buf, s, e, out, 3, True, 1)
    return out


def walk_ofrecord(buf: bytes) -> Walked:
    """Map each feature name of a serialized OFRecord to its :class:`Located`."""
    out: Walked = {}
    walk_feature_map(buf, 0, len(buf), out, 5, False, 0)
    return out


def _feature_list(buf: bytes, start: int, end: int, steps: list[Located],
                  level: int) -> list[Located]:
    """Append the steps of a FeatureList message (at nesting ``level``) to ``steps``."""
    for field, wt, s, e in iter_fields(buf, start, end, level):
        if field == 1 and wt == LEN:
            located = Located(level + 2)
            located.merge_feature(buf, s, e, 3)
            steps.append(located)
    return steps


def walk_sequence_example(buf: bytes) -> tuple[Walked, dict[str, list[Located]]]:
    """Return (context name -> Located, feature-list name -> list of Located per step)."""
    context: Walked = {}
    lists: dict[str, list[Located]] = {}
    for field, wt, s, e in iter_fields(buf, 0, len(buf)):
        if wt != LEN:
            continue
        if field == 1:
            walk_feature_map(buf, s, e, context, 3, True, 1)
        elif field == 2:
            for f2, wt2, s2, e2 in iter_fields(buf, s, e, 1):
                if f2 != 1 or wt2 != LEN:
                    continue
                key_region = None
                steps: list[Located] = []
                unknown = False
                for f3, wt3, s3, e3 in iter_fields(buf, s2, e2, 2):
                    if wt3 != LEN or f3 > 2:
                        unknown = True  # upb keeps such an entry out of the map
                    elif f3 == 1:
                        key_region = (s3, e3)
                        _utf8(buf, s3, e3)
                    else:
                        _feature_list(buf, s3, e3, steps, 3)  # a repeated value merges
                if key_region is None:
                    key = ""
                else:
                    try:
                        key = buf[key_region[0]:key_region[1]].decode("utf-8")
                    except UnicodeDecodeError:
                        raise WireError("feature list name is not valid UTF-8") from None
                for step in (steps if unknown else lists.get(key, ())):
                    discard(buf, step, 3)
                if not unknown:
                    lists[key] = steps
    return context, lists
