"""What a null becomes when it is written: the one null policy of every encoder, of
:func:`ofindex.convert` and of ``ofindex convert --nulls`` (decided here, nowhere else).

There are two kinds of null, and an Example or OFRecord can hold exactly one of them:

- a null **cell** — a record's whole value is missing: ``None`` as a feature's value or as an
  entry of a column, an Arrow null, ``numpy.ma.masked`` (a masked entry of a 1-D column). The
  feature is left out of that record, which is how a record says "missing": a reader's
  ``FixedLen(default=…)`` fills it, ``VarLen`` reads it as empty, and a ``FixedLen`` without a
  default in the writer's spec refuses it. This holds under every policy;
- a null **element** inside a list — ``[1.5, None]``, a null inside an Arrow list, a masked
  element of an array. A value list has no place for it (numpy would make it NaN, ``False`` or
  fail), so the policy decides, for every path alike:

  - ``"refuse"`` (the default): an :class:`~ofindex.errors.EncodeError` naming the feature
    (column), the record (row) and the element;
  - ``"drop"``: the element is left out, the list is shorter (a ``FixedLen`` of the spec then
    refuses the record);
  - ``("fill", value)``: the element is replaced by ``value``; a typed column (Arrow, numpy)
    takes only a value its type holds exactly (``0.5`` cannot fill an int64 column, ``0`` a
    string column). ``("fill", {feature: value, …})`` gives each feature its own value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from ofindex.encode.kinds import where
from ofindex.errors import EncodeError, hint

REFUSE, DROP, FILL = "refuse", "drop", "fill"


@dataclasses.dataclass(frozen=True)
class NullPolicy:
    """What a null element inside a list becomes (see the module's text).

    Attributes:
        action: ``"refuse"``, ``"drop"`` or ``"fill"``.
        fill: The value that replaces a null element (``"fill"`` only), or a mapping
            ``{feature: value}`` (a feature not in it refuses its null elements).
    """

    action: str = REFUSE
    fill: object = None

    def refused(self, name: object, record: int | None, element: int) -> EncodeError:
        """The error for null element ``element`` of the list of ``name`` in ``record``."""
        drop = hint("nulls='drop'", "--nulls drop")
        fill = hint("nulls=('fill', 0)", "--nulls fill:0")
        return EncodeError(f"{where(name, record)}: element {element} of its list is null, "
                           "which a value list cannot hold; leave such elements out "
                           f"({drop}) or replace them ({fill})")

    def fill_for(self, name: object, record: int | None) -> object:
        """The value that fills the null elements of feature ``name``.

        Raises:
            EncodeError: ``fill`` is a mapping without ``name``.
        """
        if not isinstance(self.fill, Mapping):
            return self.fill
        if name not in self.fill:
            add = hint(f"nulls=('fill', {{{name!r}: …}})", f'--nulls \'fill:{{"{name}": …}}\'')
            raise EncodeError(f"{where(name, record)}: a null element and no fill value for "
                              f"this feature; add one ({add})")
        return self.fill[name]

    def items(self, items: list[Any] | tuple[Any, ...], name: object,
              record: int | None) -> list[Any] | tuple[Any, ...]:
        """A Python list's ``None`` elements resolved (the list itself when it has none).

        Raises:
            EncodeError: A null element under ``"refuse"``.
        """
        if not any(item is None or item is np.ma.masked for item in items):
            return items
        nulls = [k for k, item in enumerate(items) if item is None or item is np.ma.masked]
        if self.action == REFUSE:
            raise self.refused(name, record, nulls[0])
        if self.action == DROP:
            return [item for item in items if item is not None and item is not np.ma.masked]
        fill = self.fill_for(name, record)
        return [fill if item is None or item is np.ma.masked else item for item in items]

    def masked(self, array: np.ma.MaskedArray, name: object,
               record: int | None) -> np.ndarray:
        """A masked array's masked elements resolved: a plain array (flattened when elements
        were dropped).

        Raises:
            EncodeError: A masked element under ``"refuse"``, or a fill value the array's
                dtype cannot hold exactly.
        """
        mask = np.ma.getmaskarray(array)
        data = np.ma.getdata(array)
        if not mask.any():
            return data
        if self.action == REFUSE:
            raise self.refused(name, record, int(np.argmax(mask.reshape(-1))))
        if self.action == DROP:
            return data[~mask]
        return np.where(mask, self.typed_fill(data.dtype, name, record), data)

    def masked_rows(self, column: np.ma.MaskedArray, name: object,
                    first: int) -> np.ndarray | None:
        """A masked column of rows (``(batch, …)``) whose masked elements are null elements,
        resolved at once: a plain array, or ``None`` under ``"drop"`` (the rows' lengths then
        differ: each row is resolved on its own).

        Raises:
            EncodeError: A masked element under ``"refuse"`` (naming its row), or a fill
                value the column's dtype cannot hold exactly.
        """
        mask = np.ma.getmaskarray(column)
        if self.action == REFUSE:
            rows = mask.reshape(len(column), -1)
            row = int(np.argmax(rows.any(axis=1)))
            raise self.refused(name, first + row, int(np.argmax(rows[row])))
        if self.action == DROP:
            return None
        data = np.ma.getdata(column)
        return np.where(mask, self.typed_fill(data.dtype, name, None), data)

    def typed_fill(self, dtype: np.dtype[Any], name: object, record: int | None) -> Any:
        """The fill value as a scalar of ``dtype``.

        Raises:
            EncodeError: ``dtype`` cannot hold the fill value exactly.
        """
        fill = self.fill_for(name, record)
        try:
            with np.errstate(all="ignore"):
                value = np.asarray(fill).astype(dtype)
            exact = bool(value == np.asarray(fill)) or (
                value.dtype.kind == "f" and bool(np.isnan(value)) and fill != fill)
        except (TypeError, ValueError, OverflowError):
            exact = False
        if not exact:
            raise EncodeError(f"{where(name, record)}: the fill value {fill!r} does not "
                              f"fit its {dtype} values; give one it holds exactly")
        return value

    def nested(self, name: object, record: int | None, element: int, what: str) -> EncodeError:
        """The error for a null list or struct (``what``) inside a list: refused, or asked to
        be filled (only values are filled: such an element is dropped or refused)."""
        drop = hint("nulls='drop'", "--nulls drop")
        filled = " (a fill value replaces null values only)" if self.action == FILL else ""
        return EncodeError(f"{where(name, record)}: element {element} of its list is a null "
                           f"{what}, which a record cannot hold{filled}; leave such elements "
                           f"out ({drop})")

    def arrow_fill(self, arrow_type: Any, name: object, record: int) -> Any:
        """The fill value as an Arrow scalar of ``arrow_type`` (numbers: held exactly).

        Raises:
            EncodeError: ``arrow_type`` cannot hold it exactly.
        """
        import pyarrow as pa

        if pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or \
                pa.types.is_boolean(arrow_type):
            value = self.typed_fill(np.dtype(arrow_type.to_pandas_dtype()), name, record)
            return pa.scalar(value.item(), arrow_type)
        fill = self.fill_for(name, record)
        try:
            return pa.scalar(fill, arrow_type)
        except (pa.ArrowException, TypeError, ValueError):
            raise EncodeError(f"{where(name, record)}: the fill value {fill!r} does not "
                              f"fit its Arrow type {arrow_type}; give one it holds "
                              "exactly") from None


#: What ``nulls=`` takes.
Nulls = str | tuple[str, object] | NullPolicy


def null_policy(nulls: Nulls) -> NullPolicy:
    """Read ``nulls=``: ``"refuse"``, ``"drop"``, ``("fill", value)`` or a :class:`NullPolicy`.

    Raises:
        ValueError: Anything else.
    """
    if isinstance(nulls, NullPolicy):
        return nulls
    if nulls in (REFUSE, DROP):
        return NullPolicy(str(nulls))
    if isinstance(nulls, tuple) and len(nulls) == 2 and nulls[0] == FILL:
        if nulls[1] is None:
            raise ValueError("nulls=('fill', value) takes a value to fill with, not None")
        return NullPolicy(FILL, nulls[1])
    raise ValueError(f"nulls={nulls!r}: use 'refuse', 'drop' or ('fill', value)")


def parse_cli(text: str) -> NullPolicy:
    """``--nulls refuse | drop | fill:VALUE`` (VALUE read as JSON when it can be: ``fill:0``,
    ``fill:0.5``, ``fill:"n/a"``, ``fill:{"score": 0, "tags": ""}`` per feature; else taken as
    text: ``fill:n/a``).

    Raises:
        ValueError: Another word.
    """
    import json

    if text in (REFUSE, DROP):
        return NullPolicy(text)
    if text.startswith(FILL + ":") and len(text) > len(FILL) + 1:
        raw = text[len(FILL) + 1:]
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        return null_policy((FILL, value))
    raise ValueError(f"--nulls {text}: use refuse, drop or fill:VALUE (e.g. fill:0)")
