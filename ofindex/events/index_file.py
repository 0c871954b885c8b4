"""The events index of one TensorBoard event file: ``<name>.ofevents``, beside its sidecar.

Every summary value the file holds is one *entry* (40 bytes): the number of its record (its
event) in the file, the value's position in the event's summary (``slot``), its tag, step,
wall time, what the value holds (:class:`Case`) and, for a scalar, the value itself. So a
scalar tag loads from the index alone, and any other value is read from its record through
the file's sidecar (one record, whatever the file's size).

The file is a header and *chunks*, appended as the event file grows, like a sidecar's growth
segments (a chunk being appended, past the end of the file, is not one; nothing before it is
rewritten)::

    header (32 bytes): magic "OFEVENTS", uint32 version 1, uint32 header size 32,
                       12 bytes zero, uint32 CRC32C of the 32 bytes with this field zero
    chunk (64-byte header, then its body):
        0  8s  magic "OFEVCHNK"
        8  Q   body bytes (a multiple of 8)
        16 Q   first record: the records before it are in earlier chunks
        24 Q   records: the event file's records indexed once this chunk is read
        32 Q   entries in this chunk
        40 I   tags this chunk names (their numbers follow the earlier chunks')
        44 I   rows of this chunk's tag directory
        48 I   CRC32C of the body's tags and directory (the entries have their own CRCs)
        52 I   CRC32C of the 64 header bytes with this field zero
        56 I   the body CRC of the sidecar state the chunk goes with (its record count's)
        60 I   reserved, zero
    body: the new tags as JSON ``[[name, plugin], ...]`` (UTF-8, zero-padded to 8 bytes),
          the directory (24 bytes a row: uint32 tag, uint32 CRC32C of the tag's entries,
          uint64 first entry, uint64 entries: the chunk's entries of each tag, in tag order),
          the entries (:data:`ENTRY`, grouped by tag as the directory says, in record order in
          a tag).

A reader refuses (:class:`~ofindex.errors.SidecarError`) a header, tags or directory that
fail their CRC, a chunk that does not start where the records before it end, or a directory
that does not cover the entries in order; and, when it first reads a tag's entries (one
tag's values are read without touching the others': a scalar tag of a 1 GB log loads from a
few MB), entries that fail their row's CRC or whose record or tag is out of range.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import struct

import crc32c as _crc32c
import numpy as np

from ..errors import SidecarError
from ..formats.framing import Buffer

MAGIC = b"OFEVENTS"
CHUNK_MAGIC = b"OFEVCHNK"
VERSION = 1
SUFFIX = ".ofevents"
_HEADER = struct.Struct("<8sII12xI")
HEADER_BYTES = _HEADER.size
_CHUNK = struct.Struct("<8sQQQQIIIII4x")
CHUNK_BYTES = _CHUNK.size
assert (HEADER_BYTES, CHUNK_BYTES) == (32, 64)

#: One summary value.
ENTRY = np.dtype([("record", "<u8"), ("step", "<i8"), ("wall_time", "<f8"), ("value", "<f8"),
                  ("tag", "<u4"), ("slot", "<u2"), ("case", "u1"), ("pad", "u1")])
_DIRECTORY = np.dtype([("tag", "<u4"), ("crc", "<u4"), ("start", "<u8"), ("count", "<u8")])
assert ENTRY.itemsize == 40 and _DIRECTORY.itemsize == 24
#: More tags than this in one event file can only come from a corrupt index.
MAX_TAGS = 1 << 24


class Case(enum.IntEnum):
    """What a summary value holds (``Summary.Value``'s ``value`` field)."""

    #: ``simple_value``: a float (TensorFlow 1, PyTorch, tensorboardX scalars).
    SIMPLE = 0
    #: A tensor of one number (TensorFlow 2 scalars): ``value`` holds it.
    TENSOR_SCALAR = 1
    #: Any other tensor (TensorFlow 2 histograms, images, text …).
    TENSOR = 2
    #: ``histo``: a :class:`HistogramProto`.
    HISTOGRAM = 3
    #: ``image``: an encoded image.
    IMAGE = 4
    #: ``audio``: encoded audio.
    AUDIO = 5
    #: No value, or an obsolete one.
    OTHER = 6


@dataclasses.dataclass(frozen=True)
class Chunk:
    """What one chunk adds: its entries (grouped by tag) and the tags it names.

    Attributes:
        first: Its first record.
        records: The records indexed with it.
        sidecar_crc: The body CRC of the sidecar state it goes with.
        tags: ``(name, plugin)`` of the tags it names.
        directory: Its tag directory.
        entries: Its entries, unchecked (:meth:`tag_entries` checks a tag's).
        end: Where it ends in the index file.
        path: The index file, for messages.
        at: Where it starts.
    """

    first: int
    records: int
    sidecar_crc: int
    tags: list[tuple[str, str]]
    directory: np.ndarray
    entries: np.ndarray
    end: int
    path: str = ""
    at: int = 0

    def tag_entries(self, tag: int) -> np.ndarray | None:
        """The entries of tag number ``tag`` in this chunk, checked (their CRC, records and
        tag), or ``None`` when it has none.

        Raises:
            SidecarError: They are corrupt.
        """
        k = int(np.searchsorted(self.directory["tag"], tag))
        if k >= len(self.directory) or int(self.directory["tag"][k]) != tag:
            return None
        row = self.directory[k]
        start, count = int(row["start"]), int(row["count"])
        got: np.ndarray = self.entries[start : start + count]
        if _crc32c.crc32c(got.tobytes()) != int(row["crc"]):
            raise _corrupt(self.path, self.at, f"the entries of tag {tag} fail their CRC")
        if count and (int(got["record"].min()) < self.first
                      or int(got["record"].max()) >= self.records
                      or bool(np.any(got["tag"] != tag))):
            raise _corrupt(self.path, self.at, f"an entry of tag {tag} is out of range")
        return got


def header() -> bytes:
    """The 32 bytes a new events index starts with."""
    head = bytearray(_HEADER.pack(MAGIC, VERSION, HEADER_BYTES, 0))
    struct.pack_into("<I", head, 28, _crc32c.crc32c(head))
    return bytes(head)


def encode_chunk(first: int, records: int, sidecar_crc: int, new_tags: list[tuple[str, str]],
                 entries: np.ndarray) -> bytes:
    """A chunk holding ``entries`` (any order) and naming ``new_tags``.

    Args:
        first: The first record it indexes.
        records: The event file's records indexed with it (``first`` + the records it covers).
        sidecar_crc: The body CRC of the sidecar state of ``records`` records.
        new_tags: ``(name, plugin)`` of the tags it names.
        entries: Its entries (:data:`ENTRY`).

    Returns:
        The chunk's bytes, to append at the end of the index (a multiple of 8).
    """
    order = np.lexsort((entries["slot"], entries["record"], entries["tag"]))
    grouped = np.ascontiguousarray(entries[order], dtype=ENTRY)
    tags, starts, counts = np.unique(grouped["tag"], return_index=True, return_counts=True)
    directory = np.zeros(len(tags), dtype=_DIRECTORY)
    directory["tag"], directory["start"], directory["count"] = tags, starts, counts
    raw = grouped.tobytes()
    size = ENTRY.itemsize
    directory["crc"] = [_crc32c.crc32c(raw[size * a : size * (a + n)])
                        for a, n in zip(starts.tolist(), counts.tolist(), strict=True)]
    names = json.dumps([list(t) for t in new_tags], ensure_ascii=False).encode("utf-8")
    head_part = names + bytes(-len(names) % 8) + directory.tobytes()
    body = head_part + raw
    head = bytearray(_CHUNK.pack(CHUNK_MAGIC, len(body), first, records, len(grouped),
                                 len(new_tags), len(directory), _crc32c.crc32c(head_part), 0,
                                 sidecar_crc))
    struct.pack_into("<I", head, 52, _crc32c.crc32c(head))
    return bytes(head) + body


def _corrupt(path: str, at: int, why: str) -> SidecarError:
    return SidecarError(f"{path}: the events index is corrupt at byte {at} ({why}); it is "
                        "rebuilt by ofindex.events(...) once removed")


def parse(buf: Buffer, *, path: str) -> list[Chunk]:
    """The whole chunks of an events index, checked.

    Args:
        buf: The index's bytes.
        path: It, for messages.

    Returns:
        Its chunks, in order (a chunk running past ``buf``, being appended, is left out).

    Raises:
        SidecarError: A bad header, or a corrupt chunk.
    """
    if len(buf) < HEADER_BYTES or bytes(buf[:8]) != MAGIC:
        raise _corrupt(path, 0, "not an events index")
    head = bytearray(buf[:HEADER_BYTES])
    stored = struct.unpack_from("<I", head, 28)[0]
    struct.pack_into("<I", head, 28, 0)
    _magic, version, size, _ = _HEADER.unpack(head)
    if _crc32c.crc32c(head) != stored or version != VERSION or size != HEADER_BYTES:
        raise _corrupt(path, 0, f"header of version {version} fails its checks")
    chunks: list[Chunk] = []
    at, records, tags = HEADER_BYTES, 0, 0
    while at < len(buf):
        if not CHUNK_MAGIC.startswith(bytes(buf[at : min(at + 8, len(buf))])):
            raise _corrupt(path, at, "bytes that are not a chunk")
        chunk = _chunk(buf, at, records, tags, path)
        if chunk is None:
            break  # being appended
        chunks.append(chunk)
        at, records, tags = chunk.end, chunk.records, tags + len(chunk.tags)
    return chunks


def parse_chunk(buf: Buffer, at: int, records: int, tags: int, *, path: str) -> Chunk | None:
    """The chunk at byte ``at`` of ``buf``, checked, that follows ``records`` records and
    ``tags`` tags (see :func:`parse`); ``None`` when it runs past ``buf``.

    Raises:
        SidecarError: It is corrupt.
    """
    return _chunk(buf, at, records, tags, path)


def _chunk(buf: Buffer, at: int, records: int, tags: int, path: str) -> Chunk | None:
    if len(buf) - at < CHUNK_BYTES:
        return None
    head = bytearray(buf[at : at + CHUNK_BYTES])
    (_, body_bytes, first, count, n, new, rows, body_crc, stored,
     sidecar_crc) = _CHUNK.unpack(head)
    struct.pack_into("<I", head, 52, 0)
    if _crc32c.crc32c(head) != stored:
        raise _corrupt(path, at, "its header fails its CRC")
    if body_bytes > len(buf) - at - CHUNK_BYTES:
        return None
    body = memoryview(buf)[at + CHUNK_BYTES : at + CHUNK_BYTES + body_bytes]
    if first != records or count < first or new > MAX_TAGS or body_bytes % 8:
        raise _corrupt(path, at, f"records [{first}, {count}) do not follow {records}")
    tail = 24 * rows + ENTRY.itemsize * n
    if tail > body_bytes:
        raise _corrupt(path, at, f"{n} entries cannot fit {body_bytes} bytes")
    if _crc32c.crc32c(body[: body_bytes - ENTRY.itemsize * n]) != body_crc:
        raise _corrupt(path, at, "its tags or directory fail their CRC")
    try:
        named = json.loads(bytes(body[: body_bytes - tail]).rstrip(b"\0").decode("utf-8"))
        new_tags = [(str(name), str(plugin)) for name, plugin in named]
    except (ValueError, TypeError) as exc:
        raise _corrupt(path, at, f"its tags are not readable ({exc})") from None
    if len(new_tags) != new:
        raise _corrupt(path, at, f"{len(new_tags)} tags named, {new} stated")
    directory = np.frombuffer(body, _DIRECTORY, rows, body_bytes - tail)
    entries = np.frombuffer(body, ENTRY, n, body_bytes - ENTRY.itemsize * n)
    _check_directory(directory, n, tags + new, path, at)
    return Chunk(first, count, sidecar_crc, new_tags, directory, entries,
                 at + CHUNK_BYTES + body_bytes, path, at)


def _check_directory(directory: np.ndarray, entries: int, tags: int, path: str,
                     at: int) -> None:
    """Refuse a directory that does not cover a chunk's ``entries`` in tag order, or names
    a tag out of range (the entries are checked when read: :meth:`Chunk.tag_entries`)."""
    starts, counts = directory["start"].astype(np.int64), directory["count"].astype(np.int64)
    ends = np.cumsum(counts)
    covered = (len(directory) == 0 and entries == 0) or (
        len(directory) > 0 and int(starts[0]) == 0 and int(ends[-1]) == entries
        and bool(np.all(starts[1:] == ends[:-1])) and bool(np.all(np.diff(
            directory["tag"].astype(np.int64)) > 0)) and int(directory["tag"][-1]) < tags)
    if not covered:
        raise _corrupt(path, at, "its tag directory does not cover its entries")
