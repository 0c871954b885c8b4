"""``ofindex find`` and ``ofindex get --key``: records by what they hold, from the columns a
build with ``--columns`` stored (see docs/columns.md)."""

from __future__ import annotations

import argparse
import sys

from ..columns.conditions import condition_from_text, value_from_text
from ..columns.value_types import ValueType
from ..read.dataset import Dataset
from .exitcodes import EXIT_ERROR, EXIT_OK, UsageError


def split_assignment(text: str, option: str) -> tuple[str, str]:
    """``COLUMN=VALUE`` split at its first ``=``.

    Raises:
        UsageError: No ``=``, or no column before it.
    """
    column, sep, value = text.partition("=")
    if not sep or not column:
        raise UsageError(f"{option} takes COLUMN=VALUE, not {text!r}")
    return column, value


def conditions_of(ds: Dataset, wheres: list[str]) -> dict[str, object]:
    """The conditions of ``--where COLUMN=TEXT`` options, typed by the columns' types.

    Raises:
        UsageError: An option without ``=``, or a column given twice.
        ColumnError: A value of another type than its column's.
    """
    conditions: dict[str, object] = {}
    for text in wheres:
        column, value = split_assignment(text, "--where")
        if column in conditions:
            raise UsageError(f"--where names {column!r} twice; give its values once, "
                             "separated by commas (a,b) or as a range (low:high)")
        vtype = ValueType[ds.column_type(column).upper()]
        conditions[column] = condition_from_text(value, vtype, column)
    return conditions


def cmd_find(args: argparse.Namespace, ds: Dataset) -> int:
    """``ofindex find``: the numbers of the records meeting every ``--where`` (or how many)."""
    found = ds.positions(**conditions_of(ds, args.where))
    if args.count:
        print(len(found))
        return EXIT_OK
    shown = found if args.head is None else found[:args.head]
    sys.stdout.write("".join(f"{n}\n" for n in shown.tolist()))
    return EXIT_OK


def keyed_indices(ds: Dataset, keys: list[str]) -> tuple[list[int], list[str]]:
    """The record numbers holding each ``--key COLUMN=VALUE``, in order, and the keys found
    nowhere.

    Raises:
        UsageError: An option without ``=``.
        ColumnError: A value of another type than its column's.
    """
    out: list[int] = []
    missing = []
    for text in keys:
        column, value = split_assignment(text, "--key")
        vtype = ValueType[ds.column_type(column).upper()]
        found = ds.lookup(column, value_from_text(value, vtype, column))
        if not len(found):
            missing.append(text)
        out += found.tolist()
    return out, missing


def report_missing(missing: list[str]) -> int:
    """Say which ``--key`` values no record holds; the exit code (1 when there are any)."""
    if not missing:
        return EXIT_OK
    print(f"ofindex: error: no record holds {', '.join(missing)}", file=sys.stderr)
    return EXIT_ERROR
