"""``multipart/byteranges`` bodies (RFC 9110 §14.6): the answer to a multi-range GET.

The body is read into one buffer and its parts are cut out as they arrive
(:class:`ByteRangesParser`), so that the first ranges of a long answer can be worked on while
the rest is still on its way. Each part's length is taken from its ``Content-Range``, so the
parser steps from part to part without scanning the data for the boundary; the line break and
boundary after each part are checked before the part is handed out.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Sequence
from typing import NamedTuple

from ..errors import RangeReadError

_BOUNDARY = re.compile(r'boundary="?([^";]+)"?', re.IGNORECASE)
_CONTENT_RANGE = re.compile(rb"content-range:[ \t]*bytes[ \t]+(\d+)-(\d+)/(\d+|\*)",
                            re.IGNORECASE)
#: The most bytes of a preamble or of a part's headers.
_MAX_HEAD = 16 << 10


class Part(NamedTuple):
    """One part of a response: the bytes ``[start, end)`` of the file (whose size its
    ``Content-Range`` gives, or ``None``). A tuple: a batch's answer holds hundreds."""

    start: int
    end: int
    data: memoryview
    size: int | None = None


def malformed(url: str, why: str) -> RangeReadError:
    """The error for a multi-range answer that cannot be parsed."""
    return RangeReadError(f"{url}: the server's multi-range answer is malformed ({why}) — "
                          "refusing to return wrong data")


class ByteRangesParser:
    """Cuts the parts out of a ``multipart/byteranges`` body as it fills a buffer.

    Args:
        body: The buffer the body is read into (its final size).
        content_type: The response's ``Content-Type`` (holds the boundary).
        url: The file, for messages.

    Raises:
        RangeReadError: ``content_type`` names no boundary.
    """

    def __init__(self, body: bytes | bytearray, content_type: str, url: str) -> None:
        got = _BOUNDARY.search(content_type)
        if got is None or not content_type.lower().startswith("multipart/byteranges"):
            raise malformed(url, f"Content-Type {content_type!r} names no boundary")
        self.delimiter = b"--" + got.group(1).strip().encode("latin-1")
        self.body, self.url = body, url
        self.view = memoryview(body)
        self.done = False  # the closing boundary was seen
        self._at: int | None = None  # where the next part's boundary starts, once found
        self._pos = 0

    def feed(self, avail: int) -> list[Part]:
        """The parts completed by the first ``avail`` bytes of the body, not given before.

        Raises:
            RangeReadError: The body is malformed.
        """
        out: list[Part] = []
        while not self.done:
            if self._at is None and not self._find_first_boundary(avail):
                break
            assert self._at is not None
            part = self._next_part(self._at + len(self.delimiter), avail)
            if part is None:
                break
            out.append(part)
        return out

    def _find_first_boundary(self, avail: int) -> bool:
        """Find the first boundary, after an optional preamble; ``False``: not there yet."""
        i = self.body.find(self.delimiter, self._pos, avail)
        if i < 0:
            if avail > _MAX_HEAD:
                raise malformed(self.url, "a part's boundary is missing")
            return False
        self._at = i
        return True

    def _next_part(self, p: int, avail: int) -> Part | None:
        """The part whose boundary ends at ``p``, once all of it is within ``avail`` bytes
        (then the next boundary is noted); ``None`` when it is not complete yet, or the
        closing boundary was reached (:attr:`done`)."""
        body, d = self.body, self.delimiter  # (startswith: no slice copied, ~250 parts a batch)
        if avail < p + 2:
            return None
        if body.startswith(b"--", p):
            self.done = True
            return None
        while p < avail and body[p] in (32, 9):  # transport padding (RFC 2046)
            p += 1
        if avail < p + 2:
            return None
        if not body.startswith(b"\r\n", p):
            raise malformed(self.url, f"no line break after the boundary at byte {p}")
        head_end = body.find(b"\r\n\r\n", p, avail)
        if head_end < 0:
            if avail - p > _MAX_HEAD or avail == len(body):
                raise malformed(self.url, f"the headers of the part at byte {p} do not end")
            return None
        a, b, size = self._content_range(p, head_end)
        start = head_end + 4
        stop = start + (b - a + 1)
        after = stop + 2 + len(d)
        if b < a or after > len(body):
            raise malformed(self.url, self._cut(p, a, b))
        if avail < after:
            return None
        if not body.startswith(b"\r\n", stop):
            raise malformed(self.url, self._cut(p, a, b))
        if not body.startswith(d, stop + 2):
            raise malformed(self.url, f"no boundary after the part at byte {p}")
        self._at = stop + 2
        return Part(a, b + 1, self.view[start:stop], size)

    @staticmethod
    def _cut(p: int, a: int, b: int) -> str:
        return (f"the part at byte {p} (bytes {a}-{b}) is cut short or longer than its "
                "Content-Range")

    def _content_range(self, p: int, head_end: int) -> tuple[int, int, int | None]:
        """The first and last byte of the part whose headers are ``[p, head_end)``, and the
        file's size (``None`` when not given)."""
        found = _CONTENT_RANGE.search(self.body, p, head_end + 2)
        if found is None:
            raise malformed(self.url, f"the part at byte {p} has no Content-Range")
        size = None if found.group(3) == b"*" else int(found.group(3))
        return int(found.group(1)), int(found.group(2)), size

    def finish(self) -> None:
        """Check that the whole body was parsed.

        Raises:
            RangeReadError: The closing boundary is missing.
        """
        self.feed(len(self.body))
        if not self.done:
            raise malformed(self.url, "the closing boundary is missing")


def parse_byteranges(body: bytes | bytearray, content_type: str, url: str) -> list[Part]:
    """The parts of a whole ``multipart/byteranges`` body, in the order sent.

    Raises:
        RangeReadError: The body is not a well-formed ``multipart/byteranges`` body.
    """
    parser = ByteRangesParser(body, content_type, url)
    parts = parser.feed(len(body))
    parser.finish()
    return parts


def pick(parts: Sequence[Part], spans: Sequence[tuple[int, int]]) -> list[memoryview | None]:
    """The bytes of each ``[start, end)`` span cut from the part that holds it (``None`` for a
    span that no part holds)."""
    ordered = sorted(parts, key=lambda p: (p.start, -p.end))
    firsts = [p.start for p in ordered]
    reach = list(itertools.accumulate((p.end for p in ordered), max))
    out: list[memoryview | None] = []
    for a, b in spans:
        j = bisect.bisect_right(firsts, a) - 1
        while j >= 0 and reach[j] >= b and ordered[j].end < b:
            j -= 1  # an earlier part may reach further
        part = ordered[j] if j >= 0 and ordered[j].end >= b else None
        out.append(None if part is None else part.data[a - part.start : b - part.start])
    return out
