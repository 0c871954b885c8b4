"""Hypothesis strategies that write Example, SequenceExample and OFRecord wire bytes by hand,
from the protobuf encoding rules (not through ofindex.decode), in every shape protobuf's parser
meets: fields in any order, repeated and merged messages, packed, unpacked and split lists,
overlong tags, lengths and varints, unknown fields of every wire type at every nesting level
(groups nested in groups, field number 0 inside groups, groups nested up to and past protobuf's
depth limit) — and then mutated byte by byte (bits flipped, bytes set, runs deleted or
duplicated, truncation, unknown fields and groups inserted anywhere).

The expected answer always comes from protobuf itself (see
tests/decode/test_decode_differential.py).
"""

from __future__ import annotations

from hypothesis import strategies as st

VARINT, I64, LEN, SGROUP, EGROUP, I32 = 0, 1, 2, 3, 4, 5
#: protobuf's default recursion limit: the record is level 0, each message or group one more
MAX_DEPTH = 100
#: list kind (oneof field number) -> how its values are stored, per family
EXAMPLE_KINDS = {1: "bytes", 2: "float", 3: "varint"}
OFRECORD_KINDS = {1: "bytes", 2: "float", 3: "double", 4: "varint", 5: "varint"}
#: feature names: ASCII, empty, non-ASCII UTF-8, and bytes that are not UTF-8
NAMES = [b"a", b"b", b"img", b"", "\u00e9".encode()] * 4 + [b"\xff\xfe"]
#: field numbers of unknown fields: small (some are known numbers with another wire type),
#: two-byte tags, the largest one protobuf allows
UNKNOWN_FIELDS = [1, 2, 3, 4, 6, 7, 15, 16, 2047, 2**29 - 1]
VALUES = [0, 1, 127, 128, 300, 2**31 - 1, 2**31, 2**32 + 7, 2**63 - 1, 2**63, 2**64 - 1]


def varint(value: int, pad: int = 0) -> bytes:
    """``value`` (mod 2**64) as a varint, with ``pad`` redundant continuation bytes."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if value or pad:
            out.append(byte | 0x80)
            if not value:
                pad -= 1
        else:
            out.append(byte)
            return bytes(out)


#: redundant bytes of a tag or length: mostly none; 4 is still read, 5 makes it too long
PADS = st.sampled_from([0] * 40 + [1, 4, 5])


@st.composite
def tag(draw: st.DrawFn, field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type, draw(PADS))


@st.composite
def delimited(draw: st.DrawFn, field: int, body: bytes) -> bytes:
    """A length-delimited field: tag, length, body."""
    return draw(tag(field, LEN)) + varint(len(body), draw(PADS)) + body


@st.composite
def unknown_field(draw: st.DrawFn, level: int, in_group: bool = False) -> bytes:
    """An unknown field of a message (or group) at nesting ``level``."""
    field = draw(st.sampled_from(UNKNOWN_FIELDS + ([0] if in_group else [])))
    wire_type = draw(st.sampled_from([VARINT, I64, LEN, SGROUP, I32] * 8 + [6, 7, EGROUP]))
    if wire_type == VARINT:
        return draw(tag(field, wire_type)) + varint(draw(st.sampled_from(VALUES)),
                                                    draw(st.sampled_from([0] * 6 + [2, 9])))
    if wire_type in (I64, I32):
        width = 8 if wire_type == I64 else 4
        return draw(tag(field, wire_type)) + draw(st.binary(min_size=width, max_size=width))
    if wire_type == LEN:
        return draw(delimited(field, draw(st.binary(max_size=6))))
    if wire_type != SGROUP:  # an invalid wire type or a stray end-group tag
        return draw(tag(field, wire_type))
    if draw(st.integers(0, 30)) == 0:  # nested to the depth limit, or one past it
        depth = MAX_DEPTH - level + draw(st.sampled_from([0, 1]))
        return (b"".join(varint(field << 3 | SGROUP) for _ in range(depth))
                + b"".join(varint(field << 3 | EGROUP) for _ in range(depth)))
    inside = b""
    if level < 4:
        inside = b"".join(draw(st.lists(unknown_field(level + 1, in_group=True), max_size=3)))
    end = field if draw(st.integers(0, 40)) else draw(st.sampled_from([0, 5, field + 1]))
    return draw(tag(field, SGROUP)) + inside + draw(tag(end, EGROUP))


@st.composite
def message(draw: st.DrawFn, fields: list[bytes], level: int) -> bytes:
    """A message at nesting ``level`` made of ``fields``, maybe reordered, with unknown fields
    in between."""
    fields = list(fields)
    if len(fields) > 1 and draw(st.integers(0, 3)) == 0:
        fields = draw(st.permutations(fields))
    out = []
    for part in fields:
        if draw(st.integers(0, 6)) == 0:
            out.append(draw(unknown_field(level)))
        out.append(part)
    if draw(st.integers(0, 6)) == 0:
        out.append(draw(unknown_field(level)))
    return b"".join(out)


@st.composite
def list_message(draw: st.DrawFn, how: str, level: int) -> bytes:
    """A BytesList / FloatList / DoubleList / Int32List / Int64List at nesting ``level``:
    values packed, unpacked or both, in one or several packed runs."""
    count = draw(st.integers(0, 5))
    if how == "bytes":
        values = [draw(st.binary(max_size=5)) for _ in range(count)]
        return draw(message([draw(delimited(1, v)) for v in values], level))
    if how in ("float", "double"):
        width, wire_type = (4, I32) if how == "float" else (8, I64)
        items = [draw(st.binary(min_size=width, max_size=width)) for _ in range(count)]
    else:
        wire_type = VARINT
        items = [varint(draw(st.sampled_from(VALUES)), draw(st.sampled_from([0] * 8 + [1])))
                 for _ in range(count)]
    fields = []
    pos = 0
    while pos < len(items):
        stop = draw(st.integers(pos + 1, len(items)))
        if draw(st.booleans()):
            fields.append(draw(delimited(1, b"".join(items[pos:stop]))))
        else:
            fields.extend(draw(tag(1, wire_type)) + item for item in items[pos:stop])
        pos = stop
    if draw(st.integers(0, 8)) == 0:
        fields.append(draw(delimited(1, b"")))  # an empty packed run
    return draw(message(fields, level))


@st.composite
def feature(draw: st.DrawFn, kinds: dict[int, str], level: int) -> bytes:
    """A Feature at nesting ``level``: no list, one, or several (a oneof: the last kind
    wins, lists of one kind merge)."""
    fields = []
    for _ in range(draw(st.sampled_from([0, 1, 1, 1, 1, 2]))):
        kind = draw(st.sampled_from(sorted(kinds)))
        fields.append(draw(delimited(kind, draw(list_message(kinds[kind], level + 1)))))
    return draw(message(fields, level))


@st.composite
def feature_map(draw: st.DrawFn, kinds: dict[int, str], level: int) -> bytes:
    """A Features message (or an OFRecord) at nesting ``level``: entries of its
    ``map<string, Feature>``, keys maybe repeated, missing, or given twice in an entry."""
    entries = []
    for _ in range(draw(st.integers(0, 4))):
        fields = []
        if draw(st.integers(0, 15)):
            fields.append(draw(delimited(1, draw(st.sampled_from(NAMES)))))
        if draw(st.integers(0, 15)):
            fields.append(draw(delimited(2, draw(feature(kinds, level + 2)))))
        if fields and draw(st.integers(0, 15)) == 0:
            fields.append(fields[0])
        entries.append(draw(delimited(1, draw(message(fields, level + 1)))))
    return draw(message(entries, level))


@st.composite
def ofrecord(draw: st.DrawFn) -> bytes:
    return draw(feature_map(OFRECORD_KINDS, 0))


@st.composite
def example(draw: st.DrawFn) -> bytes:
    parts = [draw(delimited(1, draw(feature_map(EXAMPLE_KINDS, 1))))
             for _ in range(draw(st.sampled_from([0, 1, 1, 1, 2])))]
    return draw(message(parts, 0))


@st.composite
def sequence_example(draw: st.DrawFn) -> bytes:
    parts = [draw(delimited(1, draw(feature_map(EXAMPLE_KINDS, 1))))
             for _ in range(draw(st.sampled_from([0, 1, 1, 2])))]
    for _ in range(draw(st.sampled_from([0, 1, 1, 2]))):  # FeatureLists
        entries = []
        for _ in range(draw(st.integers(0, 3))):
            fields = []
            if draw(st.integers(0, 15)):
                fields.append(draw(delimited(1, draw(st.sampled_from(NAMES)))))
            if draw(st.integers(0, 15)):
                steps = [draw(delimited(1, draw(feature(EXAMPLE_KINDS, 4))))
                         for _ in range(draw(st.integers(0, 3)))]
                fields.append(draw(delimited(2, draw(message(steps, 3)))))
            entries.append(draw(delimited(1, draw(message(fields, 2)))))
        parts.append(draw(delimited(2, draw(message(entries, 1)))))
    return draw(message(parts, 0))


RECORDS = {"example": example, "sequence": sequence_example, "ofrecord": ofrecord}


@st.composite
def mutated(draw: st.DrawFn, raw: bytes, at_most: int = 3) -> bytes:
    """``raw`` with up to ``at_most`` byte-level mutations."""
    buf = bytearray(raw)
    for _ in range(draw(st.integers(0, at_most))):
        how = draw(st.sampled_from(["flip", "set", "delete", "duplicate", "truncate",
                                    "insert"]))
        at = draw(st.integers(0, len(buf)))
        if how == "flip" and at < len(buf):
            buf[at] ^= 1 << draw(st.integers(0, 7))
        elif how == "set" and at < len(buf):
            buf[at] = draw(st.integers(0, 255))
        elif how == "delete":
            del buf[at : at + draw(st.integers(1, 3))]
        elif how == "duplicate":
            buf[at:at] = buf[at : at + draw(st.integers(1, 6))]
        elif how == "truncate":
            del buf[at:]
        elif how == "insert":
            buf[at:at] = draw(unknown_field(0))
    return bytes(buf)


def records(kind: str) -> st.SearchStrategy[bytes]:
    """Hand-written records of ``kind``, half of them mutated."""
    return RECORDS[kind]().flatmap(
        lambda raw: st.one_of(st.just(raw), mutated(raw)))
