"""Readable text for decoded records (``ofindex get --decode``)."""

from typing import Any

import numpy as np

from ofindex.decode.spec import Ragged

#: arrays with more values than this are elided to their first and last few
MAX_VALUES = 8
EDGE = 3
#: bytes values longer than this are cut
MAX_BYTES = 40


def _scalar(x: Any) -> str:
    if isinstance(x, (bytes, bytearray)):
        if len(x) > MAX_BYTES:
            return repr(bytes(x[:MAX_BYTES]))[:-1] + f"...' ({len(x)} bytes)"
        return repr(bytes(x))
    if isinstance(x, (float, np.floating)):
        return np.format_float_positional(x, precision=6, trim="-") if np.isfinite(x) \
            else str(float(x))
    return str(x)


def _values(arr: np.ndarray) -> str:
    flat = np.asarray(arr).reshape(-1)
    if arr.ndim == 0:
        return _scalar(flat[0])
    if flat.size > MAX_VALUES:
        head = ", ".join(_scalar(x) for x in flat[:EDGE])
        tail = ", ".join(_scalar(x) for x in flat[-EDGE:])
        return f"[{head}, ..., {tail}]"
    return "[" + ", ".join(_scalar(x) for x in flat) + "]"


def _dtype(arr: Any) -> str:
    dt = arr.dtype
    return "bytes" if dt.kind == "O" else str(dt)


def _describe(value: Any) -> tuple[str, str, str]:
    """(dtype, shape, values) columns for one decoded value."""
    if isinstance(value, Ragged):
        inner = value.values
        depth = 1
        while isinstance(inner, Ragged):
            inner = inner.values
            depth += 1
        lens = value.row_lengths
        shape = f"ragged {len(lens)} rows" + (f" x{depth}" if depth > 1 else "")
        lens_txt = _values(lens)
        return _dtype(inner), shape, f"row_lengths={lens_txt} values={_values(inner)}"
    if isinstance(value, (list, tuple)):
        value = np.asarray(value, dtype=object if value and isinstance(
            value[0], (bytes, bytearray)) else None)
    arr = np.asarray(value)
    return _dtype(arr), str(tuple(arr.shape)), _values(arr)


def _table(decoded: dict[Any, Any], indent: str = "") -> list[str]:
    if not decoded:
        return [indent + "(no features)"]
    rows = [(str(name), *_describe(v)) for name, v in decoded.items()]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return [
        f"{indent}{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}"
        .rstrip()
        for r in rows
    ]


def format_decoded(decoded: dict[str, Any] | tuple[dict[str, Any], dict[str, Any]]) -> str:
    """Render a decoded record (or batch) as readable text, one line per feature.

    Each line holds the feature's name, dtype, shape and values; arrays of more than
    :data:`MAX_VALUES` values are cut to their first and last few, bytes longer than
    :data:`MAX_BYTES` are cut, and a :class:`Ragged` shows its row lengths and values.

    Args:
        decoded: The dict of :func:`decode_example`, :func:`decode_ofrecord` or
            :func:`decode_batch`, or the ``(context, feature_lists)`` pair of
            :func:`decode_sequence_example` / :func:`decode_sequence_batch` (rendered as
            two indented tables under ``context:`` and ``feature_lists:``).

    Returns:
        The text, without a trailing newline; ``"(no features)"`` for an empty dict.
    """
    if isinstance(decoded, tuple):
        context, lists = decoded
        lines = ["context:", *_table(context, "  ")]
        lines += ["feature_lists:", *_table(lists, "  ")]
        return "\n".join(lines)
    return "\n".join(_table(decoded))
