"""The events most logs are made of, decoded from their bytes many at once: an event holding
one scalar summary, as PyTorch and tensorboardX write them (``simple_value``) and as
TensorFlow 2 writes them (a float32 scalar tensor, with or without its metadata).

Parsing each such event with protobuf and reading its fields from Python costs about 8 us
(10 s for a log of a million scalars); these shapes are recognized in the raw bytes of a whole
block of records with numpy instead, and every other event (histograms, images, several
values, fields in another order, anything unexpected) goes to protobuf as before, so that
nothing is decoded otherwise than protobuf would. The shape, in protobuf's wire format
(fields in number order, as every writer serializes them)::

    event   := [09 wall_time:f64] [10 step:varint] 2a len summary        (and nothing after)
    summary := 0a len value                                              (one value)
    value   := 0a len tag (15 value:f32 | 42 0a 08 01 12 00 22 04 value:f32) [4a len metadata]

A tag's metadata (its plugin) is parsed by protobuf once per distinct metadata bytes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..proto import event_pb2
from .index_file import Case

#: TensorFlow 2's scalar tensor, up to its value: field 8 (42) of 10 bytes: dtype DT_FLOAT
#: (08 01), an empty shape (12 00), 4 bytes of tensor_content (22 04).
_TENSOR_HEAD = np.frombuffer(bytes.fromhex("420a080112002204"), np.uint8)
#: The longest tag or metadata taken here (longer ones go to protobuf).
_MAX_BYTES = 255


@dataclasses.dataclass
class Scalars:
    """The one-scalar events found in a block.

    Attributes:
        which: Their positions among the records given.
        step: Their steps.
        wall_time: Their wall times.
        value: Their values.
        case: :attr:`Case.SIMPLE` or :attr:`Case.TENSOR_SCALAR`.
        names: The distinct ``(tag, plugin)`` of the block, in the order first met (the
            plugin ``""`` without metadata).
        named: Each event's index into ``names``.
    """

    which: np.ndarray
    step: np.ndarray
    wall_time: np.ndarray
    value: np.ndarray
    case: np.ndarray
    names: list[tuple[str, str]]
    named: np.ndarray


def _gather(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """``buf[pos + k]`` for ``k < width`` (positions past ``buf`` read its last byte)."""
    index = np.minimum(pos[:, None] + np.arange(width), len(buf) - 1)
    gathered: np.ndarray = buf[index]
    return gathered


def _varint(buf: np.ndarray, pos: np.ndarray, most: int) -> tuple[np.ndarray, np.ndarray]:
    """The varints at ``pos`` (of at most ``most`` bytes): their values (uint64) and where
    each ends; a varint longer than ``most`` ends at ``-1``."""
    raw = _gather(buf, pos, most).astype(np.uint64)
    last = raw < 0x80
    done = last.any(axis=1)
    length = np.argmax(last, axis=1) + 1
    keep = np.arange(most) < length[:, None]
    shifts = (7 * np.arange(most)).astype(np.uint64)
    value = ((raw & np.uint64(0x7F)) << shifts) * keep
    return value.sum(axis=1, dtype=np.uint64), np.where(done, pos + length, -1)


def _f32(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The float32 values at ``pos``, widened."""
    values: np.ndarray = _gather(buf, pos, 4).copy().view("<f4").ravel().astype(np.float64)
    return values


def find_scalars(block: memoryview, starts: np.ndarray, ends: np.ndarray) -> Scalars:
    """The events of the shape above among the payloads ``[starts, ends)`` of ``block``.

    Args:
        block: The scanned block.
        starts: Where each payload starts in it (int64).
        ends: Where each ends.

    Returns:
        The ones found (those not found are for protobuf).
    """
    if not len(starts):
        empty = np.zeros(0, np.int64)
        return Scalars(empty, empty, empty.astype(np.float64), empty.astype(np.float64),
                       empty, [], empty)
    buf = np.frombuffer(block, np.uint8, count=int(ends.max()))
    p, ends = starts.astype(np.int64), ends.astype(np.int64)
    ok = ends - p >= 8
    has_wall = ok & (_gather(buf, p, 1)[:, 0] == 0x09)
    wall = np.where(has_wall, _gather(buf, p + 1, 8).copy().view("<f8").ravel(), 0.0)
    p = np.where(has_wall, p + 9, p)
    has_step = _gather(buf, p, 1)[:, 0] == 0x10
    step, after = _varint(buf, p + 1, 10)
    ok &= ~has_step | (after > 0)
    step = np.where(has_step, step, 0).view(np.int64)
    p = np.where(has_step, after, p)
    ok &= _gather(buf, p, 1)[:, 0] == 0x2A  # the summary, last
    summary, p = _varint(buf, p + 1, 5)
    ok &= (p > 0) & (p + summary.astype(np.int64) == ends)
    ok &= _gather(buf, p, 1)[:, 0] == 0x0A  # its one value, to its end
    length, p = _varint(buf, p + 1, 5)
    ok &= (p > 0) & (p + length.astype(np.int64) == ends)
    ok &= _gather(buf, p, 1)[:, 0] == 0x0A  # the tag
    tag_len, tag_at = _varint(buf, p + 1, 2)
    tag_len = tag_len.astype(np.int64)
    ok &= (tag_at > 0) & (tag_len <= _MAX_BYTES)
    p = tag_at + tag_len
    simple = _gather(buf, p, 1)[:, 0] == 0x15
    tensor = np.all(_gather(buf, p, len(_TENSOR_HEAD)) == _TENSOR_HEAD, axis=1)
    value = np.where(simple, _f32(buf, p + 1), _f32(buf, p + len(_TENSOR_HEAD)))
    p = np.where(simple, p + 5, p + len(_TENSOR_HEAD) + 4)
    ok &= (simple | tensor) & (p <= ends)
    meta_at, meta_len = p, ends - p
    ok &= (meta_len == 0) | ((_gather(buf, p, 1)[:, 0] == 0x4A) & (meta_len <= _MAX_BYTES))
    which = np.flatnonzero(ok)
    tags, tag_of = _distinct(buf, tag_at[which], tag_len[which])
    metas, meta_of = _distinct(buf, meta_at[which], meta_len[which])
    names, named = _names([t.decode("utf-8") for t in tags], [_plugin(m) for m in metas],
                          tag_of, meta_of)
    return Scalars(which, step[which], wall[which], value[which],
                   np.where(simple[which], int(Case.SIMPLE), int(Case.TENSOR_SCALAR)),
                   names, named)


def _distinct(buf: np.ndarray, at: np.ndarray, length: np.ndarray) -> tuple[list[bytes],
                                                                          np.ndarray]:
    """The distinct byte strings at ``at`` of ``length`` bytes, and each one's index: rows
    hashed to 64 bits and grouped by hash (a sort of the rows' bytes took 0.5 s a block of
    100,000), every row then checked equal to its group's first.

    Raises:
        ValueError: Two strings share a hash (never seen: the caller decodes the block by
            protobuf then).
    """
    if not len(at):
        return [], np.zeros(0, np.int64)
    width = int(length.max()) or 1
    rows = _gather(buf, at, width) * (np.arange(width) < length[:, None])
    weights = _WEIGHTS[:width]
    with np.errstate(over="ignore"):
        hashed = rows.astype(np.uint64) @ weights + length.astype(np.uint64) * _WEIGHTS[-1]
    _, first, inverse = np.unique(hashed, return_index=True, return_inverse=True)
    inverse = inverse.ravel().astype(np.int64)
    if not np.array_equal(rows, rows[first[inverse]]) or not np.array_equal(
            length, length[first[inverse]]):
        raise ValueError("two strings of one hash")
    return [bytes(rows[k, : int(length[k])]) for k in first], inverse


#: Odd 64-bit multipliers, one per byte position (and one for the length): a string's hash
#: is the sum of its bytes times them (wrapping), different strings almost never agree.
_WEIGHTS = np.random.default_rng(49).integers(1, 2**63, _MAX_BYTES + 2,
                                              dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def _plugin(blob: bytes) -> str:
    """The plugin a value's metadata field (``4a len …``, or nothing) names."""
    if not blob:
        return ""
    value = event_pb2.Summary.Value.FromString(blob)
    return value.metadata.plugin_data.plugin_name if value.HasField("metadata") else ""


def _names(tags: list[str], plugins: list[str], tag_of: np.ndarray,
           plugin_of: np.ndarray) -> tuple[list[tuple[str, str]], np.ndarray]:
    """The distinct ``(tag, plugin)`` pairs in the order first met, and each event's."""
    pair = tag_of * max(len(plugins), 1) + plugin_of
    unique, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    names = [(tags[int(unique[k]) // max(len(plugins), 1)],
              plugins[int(unique[k]) % max(len(plugins), 1)]) for k in order]
    return names, rank[inverse.ravel()]
