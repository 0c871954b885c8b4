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

from ..decode._located import Spans
from ..decode._values import EXAMPLE_KINDS
from ..decode.lists import bytes_value_spans, list_bounds, record_span_sums, record_views
from ..errors import CorruptRecordError, DecodeError
from .features import Feature, fixed_size
from .plan import stored_type

#: The list kind (the Feature oneof's field number) each laid-out type is stored in.
LIST_KINDS = {value_type: kind for kind, value_type in EXAMPLE_KINDS.items()}
#: The file the layout is kept in, beside the step counts.
LAYOUT_FILE = "ofindex-tfds-layout-{identity}.npz"


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
             counts: np.ndarray, spans: Spans | None = None,
             bounds: np.ndarray | None = None
             ) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]],
                        dict[str, np.ndarray], np.ndarray]:
        """Walk a batch of records: their starts and per-step positions (see the class),
        as arrays to be concatenated over the batches in order, and each record's own
        CRC-32C.

        The lists are found and a bytes list's values walked by :mod:`ofindex.decode.lists`
        and every feature's steps summed with the whole record by
        :func:`ofindex.decode.lists.record_span_sums`, one compiled call a batch each
        (without the GIL): the first open of a DROID-like dataset (1,000 episodes, 200k
        steps, 2.9 GB) spent 9.0 s here when its records were walked one value at a time
        in Python, 3.5 s with a call per record. The records' CRCs let a first open check
        the records it walks in place without reading them again.

        Args:
            keys: The features laid out (:meth:`plan`).
            records: The serialized episodes, or with ``spans`` the buffers (memory maps)
                they lie in.
            counts: Each record's step count.
            spans: ``(which, starts, ends)``: record ``i`` is
                ``records[which[i]][starts[i]:ends[i]]``.
            bounds: ``list_bounds(records, keys' names, spans)`` when already found.

        Raises:
            DecodeError: A record is not laid out as TensorFlow writes it (the layout is then
                not used).
        """
        starts: dict[str, np.ndarray] = {}
        steps: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        summed: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        if bounds is None:
            bounds = list_bounds(records, [k for k, _, _ in keys], spans)
        if bounds is None:
            raise DecodeError("an episode is not laid out as TensorFlow writes Examples")
        for j, (key, kind, per) in enumerate(keys):
            fields, values = bounds[:, j, 0], counts * per
            if ((values > 0) & (fields != LIST_KINDS[kind])).any():
                raise DecodeError(f"{key}: not a {kind} list")
            if kind == "bytes":
                found = bytes_value_spans(records, bounds[:, j, 1], bounds[:, j, 2], values,
                                          spans)
                if found is None:
                    raise DecodeError(f"{key}: not one bytes value per step")
                starts[key] = np.zeros(len(counts), dtype=np.int64)
                steps[key] = found
                summed[key] = (values, found[0], found[0] + found[1])
                continue
            starts[key] = begins = bounds[:, j, 3].copy()
            if kind == "float32":
                sizes = bounds[:, j, 4] - begins
                if (sizes != 4 * values).any():
                    bad = int(np.flatnonzero(sizes != 4 * values)[0])
                    raise DecodeError(f"{key}: {int(sizes[bad])} bytes for "
                                      f"{int(counts[bad])} steps")
                firsts = np.repeat(begins, counts) + _within(counts) * (4 * per)
                summed[key] = (counts, firsts, firsts + 4 * per)
                continue
            steps[key] = _varint_steps(key, record_views(records, spans), begins,
                                       bounds[:, j, 4], counts, per)
            summed[key] = (counts, steps[key][0], steps[key][0] + steps[key][1])
        sums, whole = _summed(records, bounds[:, :, 1], summed, spans)
        return starts, steps, sums, whole

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


def _summed(records: Sequence[Any], places: np.ndarray,
            summed: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
            spans: Spans | None) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every feature's step sums and each record's own CRC-32C, in one pass over each record
    (:func:`~ofindex.decode.lists.record_span_sums`): the features' spans put in their
    records' order (each feature's spans lie in order inside its list, so a record's
    features are ordered by where their lists start: sorting the spans themselves cost
    0.25 s of a DROID-like first open), summed, and given back to their features.

    Args:
        records: The records, or with ``spans`` the buffers they lie in.
        places: ``(records, features)``: where each feature's list starts in each record.
        summed: ``{name: (spans per record, starts, ends)}``, a record's spans in order.
        spans: ``(which, starts, ends)`` of the records in ``records``.

    Returns:
        ``{name: uint32 sums}``, and one CRC-32C per record.
    """
    names = list(summed)
    per = np.stack([summed[name][0] for name in names], axis=1).astype(np.int64)
    begins = np.concatenate([summed[name][1] for name in names]).astype(np.int64)
    ends = np.concatenate([summed[name][2] for name in names]).astype(np.int64)
    totals = per.sum(axis=0)
    # where each (record, feature)'s spans start among all the features' spans
    blocks = np.cumsum(per, axis=0) - per + (np.cumsum(totals) - totals)[None, :]
    order = np.argsort(places, axis=1, kind="stable")
    firsts = np.take_along_axis(blocks, order, axis=1).ravel()
    lengths = np.take_along_axis(per, order, axis=1).ravel()
    gather = (np.repeat(firsts - (np.cumsum(lengths) - lengths), lengths)
              + np.arange(int(lengths.sum()), dtype=np.int64))
    try:
        sums, whole = record_span_sums(records, per.sum(axis=1), begins[gather], ends[gather],
                                       spans)
    except ValueError as error:  # features' lists overlapping: not as TensorFlow writes
        raise DecodeError(f"an episode's features overlap: {error}") from error
    unsorted = np.empty_like(sums)
    unsorted[gather] = sums
    bounds = np.concatenate([[0], np.cumsum(totals)])
    return ({name: unsorted[bounds[n]:bounds[n + 1]] for n, name in enumerate(names)},
            whole)


def _within(counts: np.ndarray) -> np.ndarray:
    """Each item's place within its record: 0..counts[i]-1 for every record, back to back."""
    total = int(counts.sum())
    firsts = np.repeat(np.cumsum(counts) - counts, counts)
    within: np.ndarray = np.arange(total, dtype=np.int64) - firsts
    return within


def _varint_steps(key: str, records: Sequence[Any], begins: np.ndarray, ends: np.ndarray,
                  counts: np.ndarray, per: int) -> tuple[np.ndarray, np.ndarray]:
    """Each step's first byte and byte length in runs of packed varints (``per`` values a
    step), the records' steps back to back."""
    firsts, lengths = [], []
    for record, begin, end, count in zip(records, begins.tolist(), ends.tolist(),
                                         counts.tolist(), strict=True):
        packed = np.frombuffer(memoryview(record).cast("B")[begin:end], dtype=np.uint8)
        bounds = np.concatenate([[0], varint_ends(packed)]).astype(np.int64)
        if len(bounds) - 1 != per * count:
            raise DecodeError(f"{key}: {len(bounds) - 1} values for {count} steps")
        first = bounds[0:per * count:per] if per else bounds[:0]
        firsts.append(begin + first)
        lengths.append(bounds[per::per] - first)
    return (np.concatenate(firsts) if firsts else np.empty(0, np.int64),
            np.concatenate(lengths) if lengths else np.empty(0, np.int64))


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
