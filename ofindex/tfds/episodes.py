"""RLDS episodes and their steps: step counts stored by the build, and one step's values cut
out of its episode's stored features.

An RLDS dataset stores each episode as one example whose ``Dataset`` feature (``steps``)
holds every step's values back to back: ``steps/action`` has ``T * 7`` floats,
``steps/observation/image`` ``T`` encoded images. The number of steps of each episode is
counted once, when the dataset is built (:func:`build_step_counts`, one pass reading a
single small feature of every record), and stored beside the index as
``ofindex-tfds-steps-<identity>.npy`` (the identity of the records read: new data, new
file). Opening reads that file: no pass over the data.
"""

from __future__ import annotations

import concurrent.futures
import io
import os
import posixpath
import uuid
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._threads import ProcessPool
from ..decode import VarLen, decode_batch
from ..decode._located import Spans
from ..decode.lists import list_bounds, record_span_sums
from ..errors import DecodeError, SidecarError
from .features import Feature, fixed_size
from .plan import Raw, example_spec, stored_type
from .step_layout import LIST_KINDS, StepLayout

#: The step-count file's name (``{identity}``: the records' dataset identity).
STEPS_FILE = "ofindex-tfds-steps-{identity}.npy"
#: Records read per batch while counting steps (episodes are ~1-10 MB: 64 keep a batch of
#: lists under the reader's in-flight bound).
COUNT_BATCH = 64

#: Threads that walk a batch of episodes in their memory maps while the next batch is
#: checked (the walk's compiled calls run without the GIL): counting and laying out the
#: steps of a DROID-like dataset (1,000 episodes, 2.9 GB) took 1.85 s of CPU when each
#: batch was copied out and walked in the iterating thread, 1.07 s so.
_WALKERS = ProcessPool("ofindex-steps", 2)

#: What the walk of a batch gives: its step counts, and its part of the layout (``None``
#: when a record is not laid out as TFDS writes).
_Layout = tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]],
                dict[str, np.ndarray]]
_Walked = tuple[np.ndarray, _Layout | None]


def steps_feature(root: Feature) -> Feature | None:
    """The RLDS ``steps`` feature: the first top-level ``Dataset`` feature, if any."""
    for child in root.children.values():
        if child.is_dataset:
            return child
    return None


def counting_key(steps: Feature) -> tuple[str, str, int]:
    """The stored feature that tells an episode's step count most cheaply: ``(name, list
    type, values per step)``, the smallest of the steps' fixed-size features.

    Raises:
        DecodeError: No feature of the steps has a fixed number of values per step.
    """
    best: tuple[str, str, int] | None = None
    spec = example_spec(steps)
    for leaf in _direct_leaves(steps):
        kind = stored_type(leaf)
        size = 1 if kind == "bytes" else fixed_size(leaf.shape)
        if leaf.optional or not size or leaf.path not in spec:
            continue
        cost = size * (8 if kind == "bytes" else 1)
        if best is None or cost < best[2] * (8 if best[1] == "bytes" else 1):
            best = (leaf.path, kind, size)
    if best is None:
        raise DecodeError(f"steps feature {steps.path!r}: no feature holds a fixed number of "
                          "values per step, so the steps of an episode cannot be counted")
    return best


def _direct_leaves(steps: Feature) -> list[Feature]:
    """The leaves of one step that are not inside a further sequence."""
    out: list[Feature] = []
    stack = [steps.item] if steps.item is not None else []
    while stack:
        node = stack.pop()
        if node.kind == "FeaturesDict":
            stack.extend(node.children.values())
        elif node.kind not in ("Sequence", "Dataset", "Video"):
            out.append(node)
    return out


def count_steps(records: Sequence[Any], key: tuple[str, str, int]) -> np.ndarray:
    """The step count of each of ``records`` (serialized episodes).

    Raises:
        DecodeError: A record holds a number of values that is not whole steps.
    """
    name, kind, size = key
    decoded = decode_batch(records, {name: VarLen(kind)})
    assert isinstance(decoded, dict)
    lengths: np.ndarray = decoded[name].row_lengths
    if (lengths % size).any():
        bad = int(np.flatnonzero(lengths % size)[0])
        raise DecodeError(f"episode {bad} of the batch stores {int(lengths[bad])} values of "
                          f"{name!r}, not a whole number of steps of {size}")
    return (lengths // size).astype(np.int64)


def build_step_counts(records: Any, steps: Feature) -> tuple[np.ndarray, StepLayout | None]:
    """Count the steps of every record of an opened record dataset (``ofindex.open``), and
    find where each step's values lie in its record (:mod:`.step_layout`).

    Args:
        records: The dataset of serialized episodes.
        steps: Its ``steps`` feature.

    Returns:
        One int64 count per record, in the dataset's order, and the layout (``None`` when
        no feature of a step can be laid out, or a record is not laid out as TFDS writes).
    """
    key = counting_key(steps)
    keys = StepLayout.plan(steps, example_spec(steps))
    walked = _walk_in_maps(records, key, keys)
    if walked is not None:
        return _joined(keys, walked)
    counts = np.empty(len(records), dtype=np.int64)
    parts: list[_Walked] = []
    done, walking = 0, bool(keys)
    for batch in records.iter_batches(COUNT_BATCH):
        counts[done:done + len(batch)] = batch_counts = count_steps(batch, key)
        layout = _walked_part(keys, batch, batch_counts, None, None)[0] if walking else None
        walking = layout is not None  # one batch laid out otherwise: no layout
        parts.append((batch_counts, layout))
        done += len(batch)
    return _joined(keys, parts)


def _walked_part(keys: Sequence[tuple[str, str, int]], records: Sequence[Any],
                 counts: np.ndarray, spans: Spans | None, bounds: np.ndarray | None
                 ) -> tuple[_Layout | None, np.ndarray | None]:
    """A batch's part of the layout and its records' CRC-32Cs, or ``(None, None)`` when a
    record is not laid out as TFDS writes (its steps are then read from whole records)."""
    try:
        starts, steps, sums, whole = StepLayout.walk(keys, records, counts, spans, bounds)
    except DecodeError:
        return None, None
    return (starts, steps, sums), whole


def _walk_in_maps(records: Any, key: tuple[str, str, int],
                  keys: Sequence[tuple[str, str, int]]) -> list[_Walked] | None:
    """Count and walk the records where they lie, in their memory maps (checked in place
    there, not copied out), a batch on a walker thread while the next one is checked;
    ``None`` when they are not memory-mapped (or another layout asks for the careful
    count: :func:`count_steps`). Each record's own CRC is checked from the walk's pass over
    it, which sums the steps: one read of the data where a check of its own read it twice
    (counting and laying out a DROID-like dataset's steps, 1,000 episodes, 2.9 GB: 1.14 s
    of CPU so, 0.98 s this way; medians of 5 fresh processes)."""
    names = [name for name, _, _ in keys]
    if key[0] not in names or not len(records):
        return None
    slot, per = names.index(key[0]), key[2]
    expected = LIST_KINDS[key[1]]

    def walk(spans: Any) -> _Walked | None:
        held = (spans.which, spans.starts, spans.ends)
        bounds = list_bounds(spans.maps, names, held)
        if bounds is None:
            return None
        kinds, values = bounds[:, slot, 0], bounds[:, slot, 5]
        if ((kinds != expected) & (values > 0)).any() or (values % per).any():
            return None  # the careful count words the error
        counts = values // per
        layout, whole = _walked_part(keys, spans.maps, counts, held, bounds)
        if spans.deferred is not None:  # the CRCs fill left to this pass
            if whole is None:  # not laid out: each record summed whole
                nothing = np.zeros(len(counts), np.int64)
                whole = record_span_sums(spans.maps, nothing, nothing[:0], nothing[:0],
                                         held)[1]
            records.check_deferred(spans, whole)
        return counts, layout

    pool = _WALKERS.get()
    pending: list[Any] = []
    try:
        for lo in range(0, len(records), COUNT_BATCH):
            spans = records.mapped_spans(np.arange(lo, min(lo + COUNT_BATCH, len(records))),
                                         defer_crcs=True)
            if spans is None:
                return None
            pending.append(pool.submit(walk, spans) if pool is not None else walk(spans))
    finally:  # no walk still reads the maps when this returns (or raises)
        if pool is not None:
            concurrent.futures.wait(pending)
    walked = [item.result() if pool is not None else item for item in pending]
    return None if any(part is None for part in walked) else walked


def _joined(keys: Sequence[tuple[str, str, int]], parts: Sequence[_Walked]
            ) -> tuple[np.ndarray, StepLayout | None]:
    """The counts and the layout of the batches' parts, in order."""
    counts = (np.concatenate([part[0] for part in parts]).astype(np.int64) if parts
              else np.empty(0, np.int64))
    layouts = [part[1] for part in parts]
    if not keys or any(layout is None for layout in layouts):
        return counts, None
    found = [layout for layout in layouts if layout is not None]

    def joined(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(arrays).astype(dtype) if arrays else np.empty(0, dtype)

    names = [name for name, _, _ in keys]
    starts = {name: joined([part[0][name] for part in found], np.int64) for name in names}
    sums = {name: joined([part[2][name] for part in found], np.uint32) for name in names}
    per_step = {name: (joined([part[1][name][0] for part in found], np.int64),
                       joined([part[1][name][1] for part in found], np.int64))
                for name, kind, _ in keys if kind != "float32"}
    return counts, StepLayout(keys, counts, starts, per_step, sums)


def load_layout(path: str, storage_options: Mapping[str, Any] | None,
                counts: np.ndarray) -> StepLayout | None:
    """The stored step layout, or ``None`` (none stored, or not of these records)."""
    from ..transport.clients import filesystem_for

    fs = filesystem_for(path, storage_options)
    try:
        with fs.open(path, "rb") as f:
            data: bytes = f.read()
    except FileNotFoundError:
        return None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            layout = StepLayout.load(arrays)
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile):
        return None  # damaged: the steps are read from whole records
    return layout if np.array_equal(layout.counts, counts) else None


def save_layout(path: str, layout: StepLayout, storage_options: Mapping[str, Any] | None) -> None:
    """Store a step layout as :func:`save_step_counts` stores the counts."""
    buffer = io.BytesIO()
    arrays: dict[str, Any] = layout.save()
    np.savez(buffer, **arrays)
    _store(path, buffer.getvalue(), storage_options)


def steps_path(index_url: str, identity: str, template: str = STEPS_FILE) -> str:
    """Where the step counts (or, with ``template=LAYOUT_FILE``, the step layout) of records
    of ``identity`` are kept: beside the first shard's sidecar (``index_url``)."""
    name = template.format(identity=identity)
    if "://" in index_url:
        return posixpath.join(posixpath.dirname(index_url), name)
    return os.path.join(os.path.dirname(index_url), name)


def load_step_counts(path: str, records: int,
                     storage_options: Mapping[str, Any] | None) -> np.ndarray | None:
    """The stored step counts, or ``None`` when there are none.

    Raises:
        SidecarError: The file is damaged or holds another number of episodes.
    """
    from ..transport.clients import filesystem_for

    fs = filesystem_for(path, storage_options)
    try:
        with fs.open(path, "rb") as f:
            data: bytes = f.read(16 * (records + 16) + 4096)
    except FileNotFoundError:
        return None
    try:
        counts: np.ndarray = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise SidecarError(f"{path}: damaged step counts ({exc}); delete the file and open "
                           "again to count the steps anew") from None
    if counts.dtype != np.int64 or counts.shape != (records,) or (counts < 0).any():
        raise SidecarError(f"{path} holds {counts.dtype} {counts.shape}, not one step count "
                           f"for each of the {records} episodes; delete it and open again")
    return counts


def save_step_counts(path: str, counts: np.ndarray,
                     storage_options: Mapping[str, Any] | None) -> None:
    """Store step counts (a local file under a temporary name first, then renamed)."""
    buffer = io.BytesIO()
    np.save(buffer, counts.astype(np.int64), allow_pickle=False)
    _store(path, buffer.getvalue(), storage_options)


def _store(path: str, data: bytes, storage_options: Mapping[str, Any] | None) -> None:
    if "://" not in path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        temp = f"{path}.{uuid.uuid4().hex}.writing"
        try:
            with open(temp, "wb") as f:
                f.write(data)
            os.replace(temp, path)
        finally:
            if os.path.exists(temp):
                os.unlink(temp)
        return
    from ..transport.clients import filesystem_for

    fs = filesystem_for(path, storage_options)
    fs.pipe_file(path, data)  # an object store replaces an object whole


class StepSlicer:
    """Cuts chosen steps out of episodes' raw stored features (``{name: 1-D array}``).

    Args:
        steps: The ``steps`` feature.
        spec: The stored features of the whole example (:func:`.plan.example_spec`).

    Raises:
        DecodeError: A step holds sequences nested deeper than ofindex cuts yet.
    """

    def __init__(self, steps: Feature, spec: Mapping[str, Any]) -> None:
        prefix = steps.path + "/"
        self.keys = [k for k in spec if k.startswith(prefix)]
        self.ragged: dict[str, str] = {}  # flat values -> their per-step row lengths
        for key in self.keys:
            if key.endswith("/ragged_row_lengths_1"):
                raise DecodeError(f"steps feature {key.rsplit('/', 1)[0]!r}: sequences nested "
                                  "twice inside a step are not cut by ofindex yet")
            if key.endswith("/ragged_flat_values"):
                self.ragged[key] = key.replace("/ragged_flat_values", "/ragged_row_lengths_0")

    def take(self, episodes: Sequence[Raw], counts: Sequence[int],
             picks: Sequence[tuple[int, int]]) -> dict[str, np.ndarray]:
        """The raw features of the steps ``picks`` (``(episode number, step)`` pairs,
        episodes numbered in ``episodes``), back to back as one sequence of
        ``len(picks)`` steps.

        Raises:
            DecodeError: An episode holds values that are not whole steps.
        """
        out: dict[str, np.ndarray] = {}
        for key in self.keys:
            if key in self.ragged.values():
                continue
            parts = []
            lengths_key = self.ragged.get(key)
            for episode, step in picks:
                values = episodes[episode][key]
                if lengths_key is not None:
                    lengths = episodes[episode][lengths_key]
                    start = int(lengths[:step].sum())
                    parts.append(values[start:start + int(lengths[step])])
                    continue
                total = int(counts[episode])
                per = len(values) // total if total else 0
                if per * total != len(values):
                    raise DecodeError(f"{key!r} holds {len(values)} values over {total} "
                                      "steps")
                parts.append(values[step * per:(step + 1) * per])
            out[key] = np.concatenate(parts) if parts else np.empty(0)
            if lengths_key is not None:
                out[lengths_key] = np.array(
                    [episodes[e][lengths_key][s] for e, s in picks], dtype=np.int64)
        return out
