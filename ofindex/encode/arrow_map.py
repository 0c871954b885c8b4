"""Arrow types and Example / OFRecord features: the one mapping, both ways.

Every column of an Arrow table (a Parquet file, a Hugging Face dataset, an Arrow table given to
``encode_columns`` or ``ShardedWriter.write_columns``) is stored by the rules of this module,
and read back by the same rules (:mod:`ofindex.encode.arrow` writes, :mod:`ofindex.encode.
arrow_back` reads); the table of docs/writing.md ("How Arrow types are stored") is
:data:`TABLE`. A column's :class:`Node` tree says which features it writes:

- a **value** (a number, a string, a date …) is one feature named after its place, holding
  one value per row in the list :func:`leaf_of` gives (see :data:`TABLE`);
- a **list** puts its values into the features of its items, row after row; a
  variable-length list inside another list adds ``<place>/lengths_<k>`` (``k`` = 1 for the
  first such level below the row, then 2 …): how many items each of its lists holds, the
  row lengths of ``tf.io.RaggedFeature``'s partitions. The row's own list needs none: its
  length is the count of what its items wrote. A fixed-size list adds nothing (its size is
  in the metadata);
- a **struct** is one place per field, ``<place>/<field>`` (a struct inside a list: each
  field's values in a list of their own, as Hugging Face's ``Sequence`` of a dict);
- a **dictionary** (categorical) column is stored as its values (decoded); an **extension**
  type (Hugging Face's ``Array2D`` …) as its storage type; a **map** as the list of its
  ``struct<key, value>`` entries (``<place>/key``, ``<place>/value``).

Nulls follow :mod:`ofindex.encode.nulls`: a null cell — a row's value, or a field of a row's
struct — leaves its features out of the record, and one whose features can all be left out
by a value that is not null (a variable-length list, which may be empty, and a struct, whose
fields may all be null) also writes ``<place>/null``, an int64 ``1``, so that reading back
tells a null from an empty list; a null inside a list is a null element (refused, dropped
or filled by the policy). The Arrow schema itself (types, field names, Hugging Face
features, pandas metadata) is written beside the data (docs/format.md, "Column map").
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ofindex.encode.kinds import BYTES, FLOAT32, FLOAT64, INT32, INT64
from ofindex.errors import EncodeError

#: How a value is held in its list (the ``encoding`` of docs/format.md's column map).
PLAIN = "plain"      # the number itself (integers widened, exact)
BOOL = "bool"        # 0 or 1
BITS = "bits"        # uint64 as the int64 of the same 64 bits (two's complement)
WIDENED = "widened"  # float16 as the float32 of the same value (exact)
RAW = "raw"          # float64 in an Example: each row's values as little-endian IEEE 754
#                      doubles, back to back, in one bytes value
ROUNDED = "rounded"  # float64 in an Example's float_list, when asked (float64="float32")
UTF8 = "utf8"        # a string's UTF-8 bytes
BINARY = "binary"    # the bytes as they are
TEXT = "text"        # a decimal as its text ("-12.50"): exact, any precision
COUNT = "count"      # a date, time, timestamp or duration as its int64 count of units
NOTHING = "nothing"  # the null type: nothing is written

#: The mapping of value types: ``(Arrow types, Example list, OFRecord list, encoding)``, the
#: first row that names a type applies. docs/writing.md shows this table.
TABLE: tuple[tuple[str, str, str, str], ...] = (
    ("bool", INT64, INT32, BOOL),
    ("int8, int16, int32, uint8, uint16", INT64, INT32, PLAIN),
    ("int64, uint32", INT64, INT64, PLAIN),
    ("uint64", INT64, INT64, BITS),
    ("float16", FLOAT32, FLOAT32, WIDENED),
    ("float32", FLOAT32, FLOAT32, PLAIN),
    ("float64", BYTES, FLOAT64, RAW),
    ("string, large_string, string_view", BYTES, BYTES, UTF8),
    ("binary, large_binary, fixed_size_binary, binary_view", BYTES, BYTES, BINARY),
    ("decimal32, decimal64, decimal128, decimal256", BYTES, BYTES, TEXT),
    ("date32 (days), date64 (ms), time32, time64, timestamp, duration", INT64, INT64, COUNT),
    ("null", "-", "-", NOTHING),
)
#: ``float64=`` of convert: store Arrow float64 exactly (an Example: raw doubles in a bytes
#: value) or as TensorFlow's float_list (rounded to float32; an OFRecord keeps doubles).
EXACT, AS_FLOAT32 = "exact", "float32"


def _pa() -> Any:
    import pyarrow

    return pyarrow


@dataclasses.dataclass(frozen=True)
class Leaf:
    """How one value type is stored.

    Attributes:
        stored: The value list it goes into: ``"bytes"``, ``"float32"``, ``"float64"``,
            ``"int32"`` or ``"int64"`` (``""``: nothing is stored).
        encoding: How a value is held there (:data:`PLAIN`, :data:`RAW` …).
    """

    stored: str
    encoding: str


def storage_type(arrow_type: Any) -> Any:
    """The type a value of ``arrow_type`` is stored as: an extension type's storage type, a
    dictionary's value type, a map's list of ``struct<key, value>`` entries (recursively)."""
    pa = _pa()
    while True:
        if isinstance(arrow_type, pa.ExtensionType):
            arrow_type = arrow_type.storage_type
        elif pa.types.is_dictionary(arrow_type):
            arrow_type = arrow_type.value_type
        elif pa.types.is_map(arrow_type):
            return pa.list_(pa.struct([arrow_type.key_field, arrow_type.item_field]))
        else:
            return arrow_type


def _numeric_leaf(arrow_type: Any, ofrecord: bool, float64: str) -> Leaf | None:
    pa = _pa()
    types = pa.types
    if types.is_boolean(arrow_type):
        return Leaf(INT32 if ofrecord else INT64, BOOL)
    if types.is_integer(arrow_type):
        small = arrow_type.bit_width <= 16 or (arrow_type.bit_width == 32
                                               and types.is_signed_integer(arrow_type))
        if arrow_type.bit_width == 64 and types.is_unsigned_integer(arrow_type):
            return Leaf(INT64, BITS)
        return Leaf(INT32 if ofrecord and small else INT64, PLAIN)
    if types.is_float16(arrow_type):
        return Leaf(FLOAT32, WIDENED)
    if types.is_float32(arrow_type):
        return Leaf(FLOAT32, PLAIN)
    if types.is_float64(arrow_type):
        if ofrecord:
            return Leaf(FLOAT64, PLAIN)
        return Leaf(FLOAT32, ROUNDED) if float64 == AS_FLOAT32 else Leaf(BYTES, RAW)
    return None


def _temporal(arrow_type: Any) -> bool:
    types = _pa().types
    return bool(types.is_date(arrow_type) or types.is_time(arrow_type)
                or types.is_timestamp(arrow_type) or types.is_duration(arrow_type))


def is_text(arrow_type: Any) -> bool:
    """A string type (stored as UTF-8 bytes)."""
    types = _pa().types
    return bool(types.is_string(arrow_type) or types.is_large_string(arrow_type)
                or getattr(types, "is_string_view", lambda t: False)(arrow_type))


def is_binary(arrow_type: Any) -> bool:
    """A binary type (stored as it is)."""
    types = _pa().types
    return bool(types.is_binary(arrow_type) or types.is_large_binary(arrow_type)
                or types.is_fixed_size_binary(arrow_type)
                or getattr(types, "is_binary_view", lambda t: False)(arrow_type))


def leaf_of(arrow_type: Any, kind: str, float64: str = EXACT) -> Leaf | None:
    """How a value of ``arrow_type`` is stored in a record of ``kind`` (:data:`TABLE`).

    Args:
        arrow_type: A value type (not a list or struct; dictionaries and extension types are
            taken as their value or storage type).
        kind: ``"example"`` or ``"ofrecord"``.
        float64: :data:`EXACT` or :data:`AS_FLOAT32` (an Example's float64 values).

    Returns:
        The :class:`Leaf`, or ``None`` for a type that is no value (a list, a struct, a map,
        a union …).
    """
    pa = _pa()
    arrow_type = storage_type(arrow_type)
    leaf = _numeric_leaf(arrow_type, kind == "ofrecord", float64)
    if leaf is not None:
        return leaf
    if is_text(arrow_type):
        return Leaf(BYTES, UTF8)
    if is_binary(arrow_type):
        return Leaf(BYTES, BINARY)
    if pa.types.is_decimal(arrow_type):
        return Leaf(BYTES, TEXT)
    if _temporal(arrow_type):
        return Leaf(INT64, COUNT)
    if pa.types.is_null(arrow_type):
        return Leaf("", NOTHING)
    return None


def list_like(arrow_type: Any) -> bool:
    """A list, large list or fixed-size list type."""
    types = _pa().types
    return bool(types.is_list(arrow_type) or types.is_large_list(arrow_type)
                or types.is_fixed_size_list(arrow_type)
                or getattr(types, "is_list_view", lambda t: False)(arrow_type)
                or getattr(types, "is_large_list_view", lambda t: False)(arrow_type))


@dataclasses.dataclass(frozen=True)
class Node:
    """Where a column's values go: a tree following its Arrow type.

    Attributes:
        kind: ``"value"``, ``"list"`` or ``"struct"``.
        place: The node's place: a value's feature name; derived names start with it.
        arrow_type: The type at this node, as the schema has it.
        leaf: A value's :class:`Leaf`.
        size: A fixed-size list's size (``None``: any length).
        lengths: The feature holding a list's lengths (``None``: none is needed).
        items: A list's item node, or a struct's field nodes.
        names: A struct's field names.
        marker: The feature marking a null of this cell (``None``: absence says it).
    """

    kind: str
    place: str
    arrow_type: Any
    leaf: Leaf | None = None
    size: int | None = None
    lengths: str | None = None
    items: tuple[Node, ...] = ()
    names: tuple[str, ...] = ()
    marker: str | None = None

    def features(self) -> dict[str, str]:
        """Every feature this node writes and its value list, in the order written."""
        out: dict[str, str] = {}
        if self.marker is not None:
            out[self.marker] = INT64
        if self.lengths is not None:
            out[self.lengths] = INT64
        if self.kind == "value" and self.leaf is not None and self.leaf.stored:
            out[self.place] = self.leaf.stored
        for item in self.items:
            out.update(item.features())
        return out

    def describe(self) -> dict[str, Any]:
        """The node as docs/format.md's column map writes it (JSON)."""
        out: dict[str, Any] = {"kind": self.kind, "arrow": str(self.arrow_type)}
        if self.kind == "value" and self.leaf is not None:
            out.update(feature=self.place, list=self.leaf.stored or None,
                       encoding=self.leaf.encoding)
        if self.kind == "list":
            out.update(size=self.size, lengths=self.lengths, item=self.items[0].describe())
        if self.kind == "struct":
            out["fields"] = {name: item.describe()
                             for name, item in zip(self.names, self.items, strict=True)}
        if self.marker is not None:
            out["null"] = self.marker
        return out


class _Planner:
    """Builds the :class:`Node` tree of one column."""

    def __init__(self, column: str, kind: str, float64: str) -> None:
        self.column, self.kind, self.float64 = column, kind, float64

    def refused(self, place: str, arrow_type: Any, why: str) -> EncodeError:
        where = "" if place == self.column else f" (at {place!r})"
        return EncodeError(f"column {self.column!r} of Arrow type {arrow_type}{where} cannot be "
                           f"represented: {why}")

    def node(self, place: str, arrow_type: Any, in_list: bool, level: int) -> Node:
        pa = _pa()
        stored = storage_type(arrow_type)
        if list_like(stored):
            return self.list_node(place, arrow_type, stored, in_list, level)
        if pa.types.is_struct(stored):
            if stored.num_fields == 0:
                raise self.refused(place, arrow_type, "a struct without fields holds nothing")
            names = tuple(stored.field(k).name for k in range(stored.num_fields))
            items = tuple(self.node(f"{place}/{name}", stored.field(k).type, in_list, level)
                          for k, name in enumerate(names))
            return Node("struct", place, arrow_type, items=items, names=names,
                        marker=None if in_list else f"{place}/null")
        leaf = leaf_of(stored, self.kind, self.float64)
        if leaf is None:
            raise self.refused(place, arrow_type, "a union or interval has no mapping to "
                               "features (make it a struct, or cast it)")
        if leaf.encoding == NOTHING and in_list:
            raise self.refused(place, arrow_type, "a list of the null type holds only nulls")
        return Node("value", place, arrow_type, leaf=leaf)

    def list_node(self, place: str, arrow_type: Any, stored: Any, in_list: bool,
                  level: int) -> Node:
        pa = _pa()
        if not (pa.types.is_list(stored) or pa.types.is_large_list(stored)
                or pa.types.is_fixed_size_list(stored)):
            raise self.refused(place, arrow_type, "list views have no mapping (cast the "
                               "column to a list)")
        size = stored.list_size if pa.types.is_fixed_size_list(stored) else None
        if size == 0:
            raise self.refused(place, arrow_type, "a fixed-size list of size 0 holds nothing")
        lengths = None
        if size is None and in_list:
            level += 1
            lengths = f"{place}/lengths_{level}"
        item = self.node(place, stored.value_type, True, level)
        marker = f"{place}/null" if size is None and not in_list else None
        return Node("list", place, arrow_type, size=size, lengths=lengths, items=(item,),
                    marker=marker)


def plan_column(name: str, arrow_type: Any, kind: str, float64: str = EXACT) -> Node:
    """The :class:`Node` tree of a column.

    Args:
        name: The column's name.
        arrow_type: Its Arrow type.
        kind: ``"example"`` or ``"ofrecord"``.
        float64: :data:`EXACT` or :data:`AS_FLOAT32` (see :func:`leaf_of`).

    Returns:
        The tree.

    Raises:
        EncodeError: A type with no mapping (a map, a union, an empty struct …), naming the
            column.
    """
    return _Planner(name, kind, float64).node(name, arrow_type, False, 0)


def plan_schema(schema: Any, kind: str, float64: str = EXACT) -> list[Node]:
    """The trees of every column of an Arrow schema, checked to write no feature twice.

    Args:
        schema: A ``pyarrow.Schema``.
        kind: ``"example"`` or ``"ofrecord"``.
        float64: :data:`EXACT` or :data:`AS_FLOAT32`.

    Returns:
        One tree per column, in the schema's order.

    Raises:
        EncodeError: A column with no mapping, or two places giving one feature name (a
            column ``a/b`` beside a struct ``a`` with a field ``b``, a field named ``null``).
    """
    if kind not in ("example", "ofrecord"):
        raise ValueError(f"unknown record kind {kind!r}: use 'example' or 'ofrecord'")
    if float64 not in (EXACT, AS_FLOAT32):
        raise ValueError(f"float64={float64!r}: use {EXACT!r} or {AS_FLOAT32!r}")
    nodes = [plan_column(field.name, field.type, kind, float64) for field in schema]
    seen: dict[str, str] = {}
    for field, node in zip(schema, nodes, strict=True):
        for feature in node.features():
            if feature in seen:
                raise EncodeError(
                    f"columns {seen[feature]!r} and {field.name!r} both give the feature "
                    f"{feature!r} (a struct's fields, list lengths and null marks are named "
                    "<column>/<field>, <column>/lengths_<k>, <column>/null): rename one "
                    "column")
            seen[feature] = field.name
    return nodes


def schema_text(schema: Any) -> str:
    """An Arrow schema as the column map holds it: its IPC message in base64."""
    import base64

    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def schema_of(text: str) -> Any:
    """The Arrow schema :func:`schema_text` wrote (extension types registered in this process,
    such as Hugging Face's ``Array2D``, come back as themselves)."""
    import base64

    import pyarrow.ipc

    return pyarrow.ipc.read_schema(pyarrow.py_buffer(base64.b64decode(text)))


def describe_schema(schema: Any, kind: str, float64: str = EXACT) -> list[dict[str, Any]]:
    """Each column's description for the column map: its name and :meth:`Node.describe`.

    Raises:
        EncodeError: As :func:`plan_schema`.
    """
    return [{"name": field.name, **node.describe()}
            for field, node in zip(schema, plan_schema(schema, kind, float64), strict=True)]


def same_columns(schema: Any, other: Any) -> str | None:
    """What differs between two schemas' columns (names, order, types), or ``None``."""
    if schema.names != other.names:
        return f"columns {other.names} where the first batch had {schema.names}"
    for field, was in zip(other, schema, strict=True):
        if not field.type.equals(was.type):
            return f"column {field.name!r} of type {field.type} where it was {was.type}"
    return None
