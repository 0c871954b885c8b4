"""The plain-text ``offset length`` index of vahidk's ``tfrecord2idx`` and NVIDIA DALI.

One line per record: the byte offset of its framing and the framed length (header, payload
and footer), two decimal numbers separated by a space.

Importing one trusts nothing in it: :func:`parse_text` refuses a line that is not two whole
numbers of at most ``2**63 - 1``, :func:`check_spans` a span that does not start where the
previous one ends (from byte 0), is shorter than the framing or runs past the data file, and
:func:`check_framing` a span that disagrees with the record framing found in the data file.
Each names the text index, the line and the next step (:class:`~ofindex.errors.SidecarError`,
or :class:`~ofindex.errors.StaleIndexError` when the index does not describe the data file).
"""

from __future__ import annotations

import io
import re

import numpy as np

from ..errors import CorruptRecordError, SidecarError, StaleIndexError, hint
from .framing import RecordFormat
from .sidecar import Sidecar

#: The largest offset or length a line may give (readers hold them as int64).
MAX_VALUE = 2**63 - 1
#: A whole text index as tfrecord2idx and DALI write it (numbers of up to 18 digits are below
#: MAX_VALUE): parsed in one numpy call; anything else is read line by line.
_PLAIN = re.compile(rb"(?:[0-9]{1,18} [0-9]{1,18}\n)*(?:[0-9]{1,18} [0-9]{1,18}\n?)?")
_SHOWN = 80  # characters of a bad line quoted in a message


def export_text(sidecar: Sidecar) -> bytes:
    """The text index for an opened sidecar.

    Args:
        sidecar: The sidecar of an uncompressed data file.

    Returns:
        One ``offset length`` line per record.
    """
    starts = sidecar.offsets.astype(np.int64)
    ends = np.empty_like(starts)
    if len(starts):
        ends[:-1] = starts[1:]
        ends[-1] = sidecar.header.indexed_end
    table = np.stack([starts, ends - starts], axis=1)
    out = io.BytesIO()
    np.savetxt(out, table, fmt="%d", delimiter=" ")
    return out.getvalue()


def _next_step(data_url: str | None) -> str:
    """What to do about a text index that cannot be used, in the caller's terms."""
    if data_url is None:
        return "regenerate the text index from its data file"
    build = hint(f"ofindex.build_index({data_url!r})", f"`ofindex build {data_url}`")
    return f"regenerate the text index from {data_url}, or index that file itself with {build}"


def _bad_line(path: str, number: int, line: bytes, problem: str,
              data_url: str | None) -> SidecarError:
    shown = line[:_SHOWN] + (b"..." if len(line) > _SHOWN else b"")
    return SidecarError(f"{path}, line {number}: {problem} ({shown!r}); each line must be "
                        f"'<offset> <length>' in decimal — {_next_step(data_url)}")


def _value(field: bytes, what: str, path: str, number: int, line: bytes,
           data_url: str | None) -> int:
    if not field.isdigit():  # ASCII digits only: no sign, no point, no spaces inside
        raise _bad_line(path, number, line, f"the {what} {field[:_SHOWN]!r} is not a whole "
                        "number of at least 0", data_url)
    if len(field.lstrip(b"0")) > 19 or int(field) > MAX_VALUE:
        raise _bad_line(path, number, line, f"the {what} is larger than 2**63 - 1, past the "
                        "end of any file", data_url)
    return int(field)


def parse_text(text: bytes, *, path: str,
               data_url: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Read a text index.

    Args:
        text: The text index's bytes.
        path: Its URL (for messages).
        data_url: The data file it is for (for the next step in messages).

    Returns:
        ``(offsets, lengths)``: uint64 arrays, one item per line.

    Raises:
        SidecarError: A line is not two whole numbers between 0 and ``2**63 - 1`` separated
            by whitespace (blank lines are refused too, except at the end).
    """
    if _PLAIN.fullmatch(text):  # whole numbers only, checked: numpy reads them in C
        values = np.fromstring(text, dtype=np.uint64, sep=" ").reshape(-1, 2)
        return values[:, 0].copy(), values[:, 1].copy()
    rows = text.split(b"\n")
    while rows and not rows[-1].strip():
        rows.pop()
    offsets = np.empty(len(rows), dtype=np.uint64)
    lengths = np.empty(len(rows), dtype=np.uint64)
    for i, line in enumerate(rows):
        parts = line.split()
        if len(parts) != 2:
            raise _bad_line(path, i + 1, line, f"{len(parts)} fields instead of 2", data_url)
        offsets[i] = _value(parts[0], "offset", path, i + 1, line, data_url)
        lengths[i] = _value(parts[1], "length", path, i + 1, line, data_url)
    return offsets, lengths


def check_spans(offsets: np.ndarray, lengths: np.ndarray, fmt: RecordFormat, size: int, *,
                path: str, data_url: str) -> None:
    """Check that the spans of a text index tile a data file of ``size`` bytes, in order.

    Args:
        offsets: The offsets read by :func:`parse_text` (uint64).
        lengths: The lengths read by :func:`parse_text` (uint64).
        fmt: The data file's record framing.
        size: The data file's size.
        path: The text index's URL (for messages).
        data_url: The data file's URL (for messages).

    Raises:
        SidecarError: A span is shorter than the framing of one record.
        StaleIndexError: A span runs past the end of the data file, does not start where the
            previous one ends (the first at byte 0), or the spans stop before the end of the
            file: the text index is not for this file as it is now.
    """
    n = len(offsets)
    starts = np.zeros(n, dtype=np.uint64)  # where each span should start
    past = (offsets > size) | (lengths > size)  # from here on sums cannot wrap in uint64
    ends = np.where(past, np.uint64(size + 1), offsets + np.where(past, 0, lengths))
    starts[1:] = ends[:-1]
    bad = past | (ends > size) | (offsets != starts) | (lengths < fmt.overhead)
    if bad.any():
        i = int(np.argmax(bad))
        offset, length, start = int(offsets[i]), int(lengths[i]), int(starts[i])
        where = f"{path}, line {i + 1} ('{offset} {length}')"
        if offset > size:
            problem = f"starts past the end of {data_url} ({size} bytes)"
        elif offset != start and i == 0:
            problem = "does not start at byte 0, where the first record of a file starts"
        elif offset < start:
            problem = (f"overlaps the record of line {i} (it starts before byte {start}, where "
                       "that one ends): the lines are out of order or overlap")
        elif offset > start:
            problem = f"leaves bytes {start} to {offset} of {data_url} out of every record"
        elif length < fmt.overhead:
            raise SidecarError(
                f"{where}: a record of {length} bytes is shorter than the {fmt.overhead} bytes "
                f"of {fmt.name} framing around a payload — {_next_step(data_url)}")
        else:
            problem = f"runs past the end of {data_url} ({size} bytes)"
        raise StaleIndexError(f"{where}: the span {problem}; the text index does not describe "
                              f"{data_url} — {_next_step(data_url)}")
    end = int(ends[-1]) if n else 0
    if end != size:
        where = f"its last line (line {n}) ends at byte {end}" if n else "it has no lines"
        raise StaleIndexError(
            f"{path}: {where} but {data_url} has {size} bytes: records are missing; the text "
            f"index is stale or for another file — {_next_step(data_url)}")


def check_framing(offsets: np.ndarray, lengths: np.ndarray, framed: np.ndarray,
                  framed_end: int, problem: str | None, *, path: str, data_url: str) -> None:
    """Check the spans of a text index (already through :func:`check_spans`) against the
    record framing found in the data file.

    Args:
        offsets: The text index's offsets (uint64).
        lengths: Its lengths (uint64).
        framed: Where the data file's headers put each record (uint64), up to the first
            damaged one.
        framed_end: Where the last of those records ends.
        problem: What is wrong with the record at ``framed_end``, if the scan stopped there.
        path: The text index's URL (for messages).
        data_url: The data file's URL (for messages).

    Raises:
        StaleIndexError: The first line whose span is not the record the framing finds at
            its offset, naming both.
        CorruptRecordError: The lines agree with the framing up to a damaged record; names
            the line that points at it.
    """
    n, m = len(offsets), len(framed)
    ends = offsets + lengths
    framed_ends = np.empty(m, dtype=np.uint64)
    framed_ends[:-1] = framed[1:]
    if m:
        framed_ends[-1] = framed_end
    k = min(n, m)
    differ = np.flatnonzero(ends[:k] != framed_ends[:k])
    if not len(differ) and n <= m:
        return
    i = int(differ[0]) if len(differ) else k  # the first line that disagrees
    offset = int(offsets[i])
    where = f"{path}, line {i + 1} ('{offset} {int(lengths[i])}')"
    if i == m:  # the lines agree up to the damage: the data file is at fault
        raise CorruptRecordError(
            f"{where}: the record at byte {offset} of {data_url} is damaged: "
            f"{problem or 'its framing ends before the file does'}",
            path=data_url, offset=offset, record=i)
    found = int(framed_ends[i]) - int(framed[i])
    raise StaleIndexError(
        f"{where}: the header of the record at byte {offset} of {data_url} frames {found} "
        f"bytes, not {int(lengths[i])}; the text index does not describe {data_url} — "
        f"{_next_step(data_url)}")

