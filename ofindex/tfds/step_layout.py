"""Where each step's values lie inside its episode's record, found once when the steps are
counted, so that a step is read without parsing its episode.

An RLDS episode is one ``tf.train.Example`` of several MB (every step's camera images); a
globally shuffled batch of 256 steps touches ~256 episodes. Parsing them all (5 ms each with
protobuf's upb, 19 ms decoding every list) costs ~200x the bytes the steps hold. Instead,
the first pass over the records (:func:`.episodes.build_step_counts`) also walks each
record's wire format and keeps, for each feature of a step stored as one flat list:

- a ``float_list`` (packed ``float32``): where the packed values start in the record;
- an ``int64_list`` (packed varints): where each step's first value starts, and its bytes;
- a ``bytes_list`` (one value per step: an image, a text): each value's start and length.

Each step's bytes of each feature get a CRC-32C of their own, so that a step is checked
by reading only its bytes (a record's own CRC covers the whole episode: checking it read
768 MB for a batch of 256 steps of 3 MB episodes). Reading a step is then a few slices of
the memory-mapped record (``Dataset.mapped_spans``), each checked against its sum.
Features not laid out so (a sequence inside a step, optional values, lists written
unpacked) are decoded from the whole record, as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import crc32c
import numpy as np

from ..errors import CorruptRecordError, DecodeError
from .features import Feature, fixed_size
from .plan import stored_type

#: The file the layout is kept in, beside the step counts.
LAYOUT_FILE = "ofindex-tfds-layout-{identity}.npz"


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise DecodeError("truncated varint")
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7


def _lists(record: Any, wanted: set[str]) -> dict[str, tuple[int, int, int]]:
    """``{feature name: (list field, payload start, payload end)}`` of the wanted features
    of a serialized Example (the ``...List`` message of each, its bounds in the record)."""
    buf = memoryview(record).cast("B")
    found: dict[str, tuple[int, int, int]] = {}
    tag, pos = _varint(buf, 0)
    if tag != 0x0A:
        raise DecodeError("no features")
    size, pos = _varint(buf, pos)
    end = pos + size
    while pos < end:
        tag, pos = _varint(buf, pos)
        size, pos = _varint(buf, pos)
        if tag != 0x0A:
            pos += size
            continue
        entry_end = pos + size
        key, feature = "", (0, 0, 0)
        while pos < entry_end:
            tag, pos = _varint(buf, pos)
            size, pos = _varint(buf, pos)
            if tag == 0x0A:
                key = bytes(buf[pos:pos + size]).decode("utf-8", "replace")
            elif tag == 0x12:
                inner_tag, inner = _varint(buf, pos)
                inner_size, inner = _varint(buf, inner)
                feature = (inner_tag >> 3, inner, inner + inner_size)
            pos += size
        if key in wanted:
            found[key] = feature
    return found


def _elements(record: Any, start: int, end: int) -> tuple[list[int], list[int]]:
    """The (start, length) of every value of a ``BytesList`` payload."""
    buf = memoryview(record).cast("B")
    starts, lengths = [], []
    pos = start
    while pos < end:
        tag, pos = _varint(buf, pos)
        if tag != 0x0A:
            raise DecodeError("not a bytes value")
        size, pos = _varint(buf, pos)
        starts.append(pos)
        lengths.append(size)
        pos += size
    return starts, lengths


def _packed(record: Any, start: int, end: int) -> tuple[int, int]:
    """The bounds of a packed numeric list's values (one length-delimited field 1)."""
    buf = memoryview(record).cast("B")
    if start == end:
        return start, start
    tag, pos = _varint(buf, start)
    if tag != 0x0A:
        raise DecodeError("not packed")
    size, pos = _varint(buf, pos)
    if pos + size != end:
        raise DecodeError("more than one packed run")
    return pos, end


def varint_ends(data: np.ndarray) -> np.ndarray:
    """Where each varint of a run of packed varints ends (one past its last byte)."""
    return np.flatnonzero(data < 0x80) + 1


def decode_varints(data: np.ndarray) -> np.ndarray:
    """Packed varints (``uint8``) to int64 values (two's complement, as int64_list)."""
    ends = varint_ends(data)
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    lengths = ends - starts
    values = np.zeros(len(ends), dtype=np.uint64)
    for k in range(int(lengths.max()) if len(lengths) else 0):
        has = lengths > k
        values[has] |= (data[starts[has] + k].astype(np.uint64) & np.uint64(0x7F)) << \
            np.uint64(7 * k)
    return values.view(np.int64)


class StepLayout:
    """The positions of the steps' values in each episode's record.

    Args:
        keys: The stored features laid out, with their list type and values per step:
            ``(name, "float32" | "int64" | "bytes", per_step)``.
        counts: Each record's step count, in the records' order.
        starts: ``{name: per-record start}`` (float32: the packed values).
        steps: ``{name: (per-step start, per-step byte length)}`` (int64 and bytes),
            concatenated over the records in order.
        sums: ``{name: per-step CRC-32C of the step's bytes}`` (uint32), in the same order.
    """

    def __init__(self, keys: Sequence[tuple[str, str, int]], counts: np.ndarray,
                 starts: dict[str, np.ndarray],
                 steps: dict[str, tuple[np.ndarray, np.ndarray]],
                 sums: dict[str, np.ndarray]) -> None:
        self.keys = list(keys)
        self.counts = counts
        self.first_step = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.starts = starts
        self.steps = steps
        self.sums = sums

    @staticmethod
    def plan(steps_feature: Feature, spec: dict[str, Any]) -> list[tuple[str, str, int]]:
        """The stored features of a step that can be laid out (one flat list each, a fixed
        number of values per step, not optional)."""
        keys = []
        for key in spec:
            if not key.startswith(steps_feature.path + "/"):
                continue
            leaf = _leaf(steps_feature, key)
            if leaf is None or leaf.optional or leaf.encoding in ("bytes", "zlib"):
                continue
            kind = stored_type(leaf)
            per = 1 if kind == "bytes" else fixed_size(leaf.shape)
            if per:
                keys.append((key, kind, per))
        return keys

    @classmethod
    def walk(cls, keys: Sequence[tuple[str, str, int]], records: Sequence[Any],
             counts: np.ndarray) -> tuple[dict[str, list[int]],
                                          dict[str, tuple[list[int], list[int]]],
                                          dict[str, list[int]]]:
        """Walk a batch of records: their starts and per-step positions (see the class).

        Raises:
            DecodeError: A record is not laid out as TFDS writes it (the layout is then
                not used).
        """
        starts: dict[str, list[int]] = {k: [] for k, _, _ in keys}
        steps: dict[str, tuple[list[int], list[int]]] = {k: ([], []) for k, _, _ in keys}
        sums: dict[str, list[int]] = {k: [] for k, _, _ in keys}
        wanted = {k for k, _, _ in keys}
        for record, count in zip(records, counts.tolist(), strict=True):
            lists = _lists(record, wanted)
            data = memoryview(record).cast("B")
            for key, kind, per in keys:
                field, lo, hi = lists.get(key, (0, 0, 0))
                if kind == "bytes":
                    offsets, lengths = _elements(record, lo, hi)
                    if len(offsets) != count * per or (count and field != 1):
                        raise DecodeError(f"{key}: {len(offsets)} values for {count} steps")
                    steps[key][0].extend(offsets)
                    steps[key][1].extend(lengths)
                    sums[key].extend(crc32c.crc32c(data[o:o + n])
                                     for o, n in zip(offsets, lengths, strict=True))
                    starts[key].append(0)
                    continue
                begin, end = _packed(record, lo, hi)
                starts[key].append(begin)
                if kind == "float32":
                    if end - begin != 4 * per * count:
                        raise DecodeError(f"{key}: {end - begin} bytes for {count} steps")
                    sums[key].extend(crc32c.crc32c(data[o:o + 4 * per])
                                     for o in range(begin, end, 4 * per))
                    continue
                packed = np.frombuffer(data[begin:end], dtype=np.uint8)
                ends = varint_ends(packed)
                if len(ends) != per * count:
                    raise DecodeError(f"{key}: {len(ends)} values for {count} steps")
                bounds = np.concatenate([[0], ends]).astype(np.int64)
                firsts = bounds[0:len(ends):per] if per else bounds[:0]
                steps[key][0].extend((begin + firsts).tolist())
                steps[key][1].extend((bounds[per::per] - firsts).tolist())
                sums[key].extend(crc32c.crc32c(data[begin + a:begin + b]) for a, b in
                                 zip(firsts.tolist(), bounds[per::per].tolist(), strict=True))
        return starts, steps, sums

    def save(self) -> dict[str, np.ndarray]:
        """The arrays that store it (``numpy.savez``)."""
        out: dict[str, np.ndarray] = {
            "keys": np.array([k for k, _, _ in self.keys], dtype=str),
            "kinds": np.array([kind for _, kind, _ in self.keys], dtype=str),
            "per": np.array([per for _, _, per in self.keys], dtype=np.int64),
            "counts": self.counts}
        for n, (key, _, _) in enumerate(self.keys):
            out[f"start{n}"] = self.starts[key]
            out[f"sum{n}"] = self.sums[key]
            if key in self.steps:
                out[f"offset{n}"], out[f"length{n}"] = self.steps[key]
        return out

    @classmethod
    def load(cls, arrays: Any) -> StepLayout:
        """Made from the arrays :meth:`save` gave."""
        keys = [(str(k), str(kind), int(per)) for k, kind, per in
                zip(arrays["keys"], arrays["kinds"], arrays["per"], strict=True)]
        starts = {k: np.asarray(arrays[f"start{n}"]) for n, (k, _, _) in enumerate(keys)}
        steps = {k: (np.asarray(arrays[f"offset{n}"]), np.asarray(arrays[f"length{n}"]))
                 for n, (k, kind, _) in enumerate(keys) if kind != "float32"}
        sums = {k: np.asarray(arrays[f"sum{n}"]) for n, (k, _, _) in enumerate(keys)}
        return cls(keys, np.asarray(arrays["counts"]), starts, steps, sums)

    def take(self, spans: Any, records: np.ndarray, picks: Sequence[tuple[int, int]],
             check: bool = True) -> dict[str, np.ndarray]:
        """The raw values of the steps ``picks`` (``(row of spans, step)``), read out of the
        mapped records: ``{stored name: values back to back}``.

        Args:
            spans: ``Dataset.mapped_spans`` of the episodes.
            records: The record number of each row of ``spans``.
            picks: The steps, as (row, step in the episode).
            check: Check each step's bytes against their CRC-32C.

        Raises:
            CorruptRecordError: A step's bytes differ from what was indexed (the message
                names the record, the step and the feature).
        """
        rows = np.fromiter((r for r, _ in picks), dtype=np.int64, count=len(picks))
        steps = np.fromiter((s for _, s in picks), dtype=np.int64, count=len(picks))
        which = spans.which[rows]
        base = spans.starts[rows]
        views = [np.frombuffer(m, dtype=np.uint8) for m in spans.maps]
        global_steps = self.first_step[records[rows]] + steps
        out: dict[str, np.ndarray] = {}
        for key, kind, per in self.keys:
            if kind == "float32":
                first = base + self.starts[key][records[rows]] + steps * (4 * per)
                grid = first[:, None] + np.arange(4 * per, dtype=np.int64)[None, :]
                gathered = _gather(views, which, grid)
                if check:
                    self._check(key, [row.tobytes() for row in gathered], records[rows],
                                steps, global_steps)
                out[key] = gathered.view(np.float32).reshape(-1)
                continue
            offsets, lengths = self.steps[key]
            first = base + offsets[global_steps]
            size = lengths[global_steps]
            chunks = [views[w][s:s + n] for w, s, n in
                      zip(which.tolist(), first.tolist(), size.tolist(), strict=True)]
            if check:
                self._check(key, chunks, records[rows], steps, global_steps)
            if kind == "bytes":
                values = np.empty(len(picks), dtype=object)
                values[:] = [chunk.tobytes() for chunk in chunks]
                out[key] = values
            else:
                out[key] = decode_varints(np.concatenate(chunks) if chunks else
                                          np.empty(0, np.uint8))
        return out


    def _check(self, key: str, chunks: Sequence[Any], records: np.ndarray, steps: np.ndarray,
               global_steps: np.ndarray) -> None:
        """Each step's bytes against the CRC-32C stored for them."""
        expected = self.sums[key][global_steps]
        for k, chunk in enumerate(chunks):
            if crc32c.crc32c(chunk) != int(expected[k]):
                raise CorruptRecordError(
                    f"record {int(records[k])}, step {int(steps[k])}: the bytes of {key!r} "
                    "differ from those indexed (CRC-32C mismatch): the data file changed or "
                    "is damaged; prepare the dataset again, or delete its index to index it "
                    "anew", record=int(records[k]))


def _gather(views: list[np.ndarray], which: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Bytes at ``grid`` (one row per pick) from each pick's map, as one uint8 array."""
    out = np.empty(grid.shape, dtype=np.uint8)
    for w in np.unique(which).tolist():
        rows = which == w
        out[rows] = views[w][grid[rows]]
    return out


def _leaf(steps_feature: Feature, key: str) -> Feature | None:
    """The feature stored under ``key`` when it is a direct leaf of a step."""
    node = steps_feature.item
    for part in key[len(steps_feature.path) + 1:].split("/"):
        if node is None or node.kind != "FeaturesDict" or part not in node.children:
            return None
        node = node.children[part]
    if node is None or node.kind in ("FeaturesDict", "Sequence", "Dataset", "Video"):
        return None
    return node
