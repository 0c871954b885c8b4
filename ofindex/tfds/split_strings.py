"""TFDS split strings (``train[:10%]+test``) and the order ``as_dataset`` reads examples in.

:func:`file_ranges` turns a split string into ranges of records of the split's files, as
``tfds`` does (percentages rounded to the closest example, ``shard`` units, negative
bounds, ``all``). :func:`interleave_order` is the order ``builder.as_dataset(split,
shuffle_files=False)`` yields them in: TFDS reads the files through
``tf.data.Dataset.interleave`` with 16 files open at once and 16 examples from each in turn
(``ReadConfig``'s defaults), unless the builder was written with ``disable_shuffling``,
which reads the files one after the other.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import hint

_SUB_SPEC = re.compile(r"^(?P<name>[\w-]+)(\[(?P<selector>[\d\w%:.-]+)\])?$")
_SLICE = re.compile(r"^((?P<val>-?[\d_.]+)(?P<unit>%|shard)?)?$")
_PLUS = re.compile(r"\s*\+\s*")
#: ``ReadConfig.interleave_cycle_length`` / ``interleave_block_length`` as TFDS sets them
#: for ``shuffle_files=False`` on a builder that shuffled its examples when writing.
CYCLE_LENGTH = 16
BLOCK_LENGTH = 16


@dataclasses.dataclass(frozen=True)
class FileRange:
    """Records ``[skip, skip + take)`` of one file of a split.

    Attributes:
        split: The split's name.
        shard: The file's number in the split.
        skip: The first record read.
        take: How many records are read.
    """

    split: str
    shard: int
    skip: int
    take: int


def _bad(spec: str, why: str) -> ValueError:
    return ValueError(f"split {spec!r}: {why}; write it as TFDS does, e.g. "
                      f"{hint(repr('train[:10%]+test'), 'train[:10%]+test')}")


def _bound(text: str | None, unit: str, spec: str) -> float | int | None:
    if text is None:
        return None
    try:
        return float(text) if unit == "%" else int(text)
    except ValueError:
        raise _bad(spec, f"{text!r} is not a number") from None


def _absolute(part: str, lengths: Mapping[str, Sequence[int]]) -> tuple[str, int, int]:
    """One ``name[from:to]`` as ``(name, first, stop)`` in examples, as TFDS computes it."""
    match = _SUB_SPEC.match(part)
    if not match:
        raise _bad(part, "not a split name with an optional [from:to]")
    name, selector = match["name"], match["selector"]
    if name not in lengths:
        raise _bad(part, f"no split {name!r} (the dataset has {', '.join(lengths)})")
    shards = list(lengths[name])
    total = sum(shards)
    if selector is None:
        return name, 0, total
    slices = [_SLICE.match(x) for x in selector.split(":")]
    if not all(slices) or not any(s[0] for s in slices if s) or len(slices) > 2:
        raise _bad(part, "the selector is not [from:to]")
    if len(slices) == 1:
        raise _bad(part, "a single position is only allowed in shards ([3shard])") if (
            slices[0] and slices[0]["unit"] != "shard") else _bad(part, "use [from:to]")
    first_match, stop_match = slices
    assert first_match is not None and stop_match is not None
    unit = first_match["unit"] or stop_match["unit"] or "abs"
    first = _bound(first_match["val"], unit, part)
    stop = _bound(stop_match["val"], unit, part)
    if unit == "%":
        first = 0 if first is None else round(first * total / 100.0)
        stop = total if stop is None else round(stop * total / 100.0)
    elif unit == "shard":
        first = 0 if first is None else sum(shards[:int(first)])
        if stop is not None and stop <= 0:
            stop = len(shards) + int(stop)
        stop = total if stop is None else sum(shards[:int(stop)])
    first = 0 if first is None else int(first)
    stop = total if stop is None else int(stop)
    if abs(first) > total or abs(stop) > total:
        raise _bad(part, f"the slice [{first}:{stop}] is outside its {total} examples")
    return name, first + total if first < 0 else first, stop + total if stop < 0 else stop


def file_ranges(spec: str, lengths: Mapping[str, Sequence[int]]) -> list[FileRange]:
    """The records a split string selects, file by file, in TFDS's order.

    Args:
        spec: A TFDS split string: ``"train"``, ``"train[:10%]"``, ``"train[100:200]"``,
            ``"train[-5%:]"``, ``"train[:2shard]"``, ``"train+test"``, ``"all"``.
        lengths: Each split's record count per file (``shardLengths``), in the order
            ``dataset_info.json`` lists the splits.

    Returns:
        The non-empty file ranges.

    Raises:
        ValueError: ``spec`` is not a split string of this dataset.
    """
    parts = _PLUS.split(spec.strip())
    ranges: list[FileRange] = []
    for part in parts:
        names = [(n, 0, sum(lengths[n])) for n in lengths] if part == "all" else [
            _absolute(part, lengths)]
        for name, first, stop in names:
            ranges.extend(_ranges_of(name, lengths[name], first, stop))
    return ranges


def _ranges_of(name: str, shards: Sequence[int], first: int, stop: int) -> list[FileRange]:
    out = []
    start = 0
    for shard, count in enumerate(shards):
        lo, hi = max(first, start), min(stop, start + count)
        if hi > lo:
            out.append(FileRange(name, shard, lo - start, hi - lo))
        start += count
    return out


def interleave_order(takes: Sequence[int], cycle_length: int = CYCLE_LENGTH,
                     block_length: int = BLOCK_LENGTH) -> np.ndarray:
    """The order ``tf.data.Dataset.interleave`` yields the records of files in.

    Records are numbered file after file (file ``f``'s ``k``-th record is
    ``sum(takes[:f]) + k``). Up to ``cycle_length`` files are open at once; each in turn
    gives up to ``block_length`` records; a file that ends leaves its place empty until the
    turn comes back to it, when the next file opens there (deterministic ``interleave``).

    Args:
        takes: Records of each file, in order.
        cycle_length: Files open at once (1: the files one after the other).
        block_length: Records taken from a file per turn.

    Returns:
        An int64 array: position ``i`` holds the number of the ``i``-th record yielded.
    """
    starts = np.concatenate([[0], np.cumsum(takes, dtype=np.int64)])
    total = int(starts[-1])
    if cycle_length <= 1 or len(takes) <= 1:
        return np.arange(total, dtype=np.int64)
    order = np.empty(total, dtype=np.int64)
    slots: list[list[int] | None] = [None] * cycle_length  # [file, next record]
    next_file, written, slot = 0, 0, 0
    while written < total:
        current = slots[slot]
        if current is None and next_file < len(takes):
            current = slots[slot] = [next_file, 0]
            next_file += 1
        if current is not None:
            file, done = current
            count = min(block_length, takes[file] - done)
            first = int(starts[file]) + done
            order[written:written + count] = np.arange(first, first + count)
            written += count
            current[1] += count
            if current[1] >= takes[file]:
                slots[slot] = None
        slot = (slot + 1) % cycle_length
    return order
