"""``ofindex.open_tfds``: a TFDS split opened in place, as random-access examples, and the
steps of an RLDS dataset as a random-access view of their own.

The split's files are opened with :func:`ofindex.open` (indexed on first use) and read in
the order ``tfds.as_numpy(builder.as_dataset(split, shuffle_files=False))`` yields them
(:mod:`.splits`); each example is decoded by a :class:`~.plan.DecodePlan`.
"""

import hashlib
import os
import pickle
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import RecordIndexError, SidecarError, StateError, hint
from ..opening import open as open_records
from ..read.dataset import Dataset
from .episodes import (
    StepSlicer,
    build_step_counts,
    load_layout,
    load_step_counts,
    save_layout,
    save_step_counts,
    steps_feature,
    steps_path,
)
from .features import Feature
from .layout import BuilderInfo, read_builder
from .plan import DecodePlan
from .split_strings import CYCLE_LENGTH, file_ranges, interleave_order
from .step_directory import StepDirectory
from .step_layout import LAYOUT_FILE, StepLayout

#: Guards the lazy copy of a split's records read without record checks.
_UNCHECKED_LOCK = threading.Lock()
#: Examples read per batch when iterating.
ITER_BATCH = 64
Key = int | np.integer | slice | Sequence[int] | np.ndarray


def _positions(key: Key, length: int, what: str) -> tuple[np.ndarray, bool]:
    """``key`` as positions in ``[0, length)``, and whether it named one position."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
        position = int(key) + length if key < 0 else int(key)
        if not 0 <= position < length:
            raise RecordIndexError(f"{what} {int(key)} is out of range: there are {length}")
        return np.array([position], dtype=np.int64), True
    if isinstance(key, slice):
        return np.arange(*key.indices(length), dtype=np.int64), False
    positions = np.asarray(key)
    if positions.dtype.kind not in "iu" or positions.ndim != 1:
        raise TypeError(f"{what}s are indexed by an int, a slice or a 1-D list of ints, not "
                        f"{type(key).__name__}")
    positions = positions.astype(np.int64)
    positions = np.where(positions < 0, positions + length, positions)
    bad = (positions < 0) | (positions >= length)
    if bad.any():
        raise RecordIndexError(f"{what} {int(np.asarray(key)[np.flatnonzero(bad)[0]])} is out "
                               f"of range: there are {length}")
    return positions, False


class TfdsDataset:
    """A TFDS split (or splits) of a builder directory, read in place.

    ``len(ds)``, ``ds[i]`` (an example as ``tfds.as_numpy`` yields it; an RLDS episode with
    its steps as a dict of stacked arrays ``(T, ...)``), slices and lists of positions,
    ``ds.__getitems__(positions)``, iteration in TFDS's order. :attr:`steps` is the view of
    every step of an RLDS dataset. Made by :func:`open_tfds`.

    Args:
        info: The builder's metadata.
        split: The split string opened.
        records: The opened files of the split (an :class:`ofindex.Dataset`).
        order: Split position -> record number in ``records``.
        step_counts: Each record's number of steps (RLDS), or ``None``.
        step_layout: Where each step's values lie in its record (read without parsing the
            episode), or ``None``.

    Attributes:
        info: The builder's metadata (splits, counts, :attr:`features`).
        split: The split string opened.
        records: The underlying :class:`ofindex.Dataset` of the split's files.
    """

    def __init__(self, info: BuilderInfo, split: str, records: Dataset,
                 order: np.ndarray, step_counts: np.ndarray | None,
                 step_layout: StepLayout | None = None) -> None:
        self.info = info
        self.split = split
        self.records = records
        self.plan = DecodePlan(info.features)
        #: Position ``i`` of the split -> record number in :attr:`records`.
        self.order = order
        self._step_counts = step_counts
        self.step_layout = step_layout
        self._unchecked: Dataset | None = None

    @property
    def features(self) -> Feature:
        """The feature tree (``ds.features["label"].names`` for a ClassLabel's names)."""
        return self.info.features

    @property
    def identity(self) -> str:
        """What this split is: the records' identity with the split string (resume states
        carry it)."""
        digest = hashlib.sha256(f"{self.records.identity}|{self.split}".encode())
        return digest.hexdigest()[:16]

    def __len__(self) -> int:
        """The number of examples of the split.

        Returns:
            The count ``dataset_info.json`` gives for the split (or its slice).
        """
        return len(self.order)

    def __repr__(self) -> str:
        return (f"TfdsDataset({self.info.name} {self.info.version}, split={self.split!r}, "
                f"{len(self)} examples)")

    def __getitem__(self, key: Key) -> Any:
        """An example, or a list of them.

        Args:
            key: A position (negative from the end), a slice or a list of positions.

        Returns:
            The example (a dict as ``tfds.as_numpy`` yields it), or a list of examples.

        Raises:
            RecordIndexError: A position is out of range (an ``IndexError``).
            DecodeError: A record does not match the features (naming the feature).
        """
        positions, single = _positions(key, len(self), "example")
        examples = self.__getitems__(positions)
        return examples[0] if single else examples

    def __getitems__(self, positions: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """Decode the examples at ``positions`` (one read of all their records).

        Args:
            positions: Positions in the split.

        Returns:
            The examples, in the order asked.
        """
        picked = self.order[np.asarray(positions, dtype=np.int64)]
        return self.plan.decode_batch(self.records.__getitems__(picked))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Every example in TFDS's order, read ``ITER_BATCH`` at a time.

        Yields:
            The examples.
        """
        for start in range(0, len(self), ITER_BATCH):
            yield from self.__getitems__(np.arange(start, min(start + ITER_BATCH, len(self))))

    def __enter__(self) -> "TfdsDataset":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the files and maps of the records."""
        self.records.close()
        if self._unchecked is not None:
            self._unchecked.close()

    def unchecked_records(self) -> Dataset:
        """The records again, without their whole-record checks: the steps read through the
        step layout are checked by their own sums (a copy made once, by pickling).

        Returns:
            A :class:`ofindex.Dataset` of the same files with ``verify=False``.
        """
        with _UNCHECKED_LOCK:  # threads of one process (Grain's) make one copy, not several
            if self._unchecked is None:
                copy: Dataset = pickle.loads(pickle.dumps(self.records))
                copy.verify = False
                self._unchecked = copy
            return self._unchecked

    @property
    def step_counts(self) -> np.ndarray:
        """Each episode's number of steps, in this split's order (RLDS datasets).

        Raises:
            StateError: The dataset has no ``Dataset`` feature.
        """
        if self._step_counts is None:
            raise StateError(f"{self.info.name}: no Dataset feature (RLDS steps) among "
                             f"{', '.join(self.features.children)}; ds[i] gives the examples")
        counts: np.ndarray = self._step_counts[self.order]
        return counts

    @property
    def steps(self) -> "StepsView":
        """Every step of every episode of the split, by global step number (RLDS)."""
        return StepsView(self)


class StepsView:
    """The steps of an RLDS split: ``steps[j]`` is step ``j`` counting through the episodes
    in the split's order, a dict as ``as_dataset(...).flat_map(lambda e: e["steps"])``
    yields (one step's values). ``steps.locate(j)`` gives ``(episode, step)`` in constant
    time on average (:class:`~ofindex.tfds.step_directory.StepDirectory`, from the step counts
    the build stored); :meth:`batch` decodes many steps into stacked
    arrays, reading each episode once.

    Args:
        episodes: The split.
    """

    def __init__(self, episodes: TfdsDataset) -> None:
        self.episodes = episodes
        self.directory = StepDirectory(episodes.step_counts)
        #: ``ends[e]``: the global number one past episode ``e``'s last step.
        self.ends = self.directory.ends
        self.counts = self.directory.counts
        steps = steps_feature(episodes.features)
        assert steps is not None
        self.feature = steps
        self._slicer = StepSlicer(steps, episodes.plan.spec)

    @property
    def identity(self) -> str:
        """The identity of the episodes', marked as their steps."""
        return hashlib.sha256(f"{self.episodes.identity}|steps".encode()).hexdigest()[:16]

    def __len__(self) -> int:
        """The number of steps of all the episodes.

        Returns:
            The sum of the stored step counts.
        """
        return int(self.ends[-1]) if len(self.ends) else 0

    def __repr__(self) -> str:
        return f"StepsView({len(self)} steps of {len(self.counts)} episodes)"

    def locate(self, positions: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where global steps are (see :class:`~ofindex.tfds.step_directory.StepDirectory`).

        Args:
            positions: Global step numbers (in range).

        Returns:
            ``(episodes, steps)``: each step's episode (split position) and its step number
            in that episode.
        """
        return self.directory.locate(np.asarray(positions, dtype=np.int64))

    def __getitem__(self, key: Key) -> Any:
        """A step, or a list of them.

        Args:
            key: A global step number (negative from the end), a slice or a list.

        Returns:
            The step (``{name: value}`` of one step), or a list of steps.

        Raises:
            RecordIndexError: A step number is out of range (an ``IndexError``).
        """
        positions, single = _positions(key, len(self), "step")
        steps = self.__getitems__(positions)
        return steps[0] if single else steps

    def __getitems__(self, positions: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """The steps at ``positions``, one dict each.

        Args:
            positions: Global step numbers.

        Returns:
            The steps, in the order asked.
        """
        batch = self.batch(positions)
        return [_index(batch, k) for k in range(len(positions))]

    def batch(self, positions: Sequence[int] | np.ndarray) -> dict[str, Any]:
        """The steps at ``positions`` stacked: ``{name: array (len(positions), ...)}`` (a
        list of rows for a variable-length sequence inside a step).

        Every episode is read once however many of its steps are asked, and the images of
        all the steps are decoded together.

        Args:
            positions: Global step numbers.

        Returns:
            The steps' values stacked along a first axis of ``len(positions)``.
        """
        episode, step = self.locate(positions)
        unique, inverse = np.unique(episode, return_inverse=True)
        picks = list(zip(inverse.tolist(), step.tolist(), strict=True))
        assert self.feature.item is not None
        raw = self._from_layout(unique, picks)
        if raw is not None:
            batch: dict[str, Any] = self.episodes.plan.decode(raw, self.feature.item,
                                                              (len(picks),))
            return batch
        records = self.episodes.records.__getitems__(self.episodes.order[unique])
        raws = self.episodes.plan.raw_batch(records)
        counts = self.counts[unique]
        raw = self._slicer.take(raws, counts.tolist(), picks)
        batch = self.episodes.plan.decode(raw, self.feature.item, (len(picks),))
        return batch

    def _from_layout(self, unique: np.ndarray,
                     picks: list[tuple[int, int]]) -> dict[str, np.ndarray] | None:
        """The steps' raw values read out of the mapped records through the step layout,
        or ``None`` when they must be decoded from whole records (no layout, a feature of
        the steps it does not cover, records not memory-mapped)."""
        layout = self.episodes.step_layout
        if layout is None or len(layout.keys) != len(self._slicer.keys):
            return None
        records = self.episodes.order[unique]
        spans = self.episodes.unchecked_records().mapped_spans(records)
        if spans is None:
            return None
        return layout.take(spans, records, picks, check=self.episodes.records.verify)

    def history(self, positions: Sequence[int] | np.ndarray, length: int) -> dict[str, Any]:
        """For each step, the ``length`` steps of its episode ending with it, stacked: the
        history a policy conditions on. Before an episode's first step there is nothing:
        those places repeat the first step and ``mask`` marks them ``False``.

        Args:
            positions: Global step numbers (a batch).
            length: Steps per history (1: the steps themselves).

        Returns:
            ``{name: array (len(positions), length, ...)}`` and ``mask``, a bool array
            ``(len(positions), length)``: ``True`` where the step is really there.

        Raises:
            ValueError: ``length`` is not positive.
            RecordIndexError: A position is out of range.
        """
        if length < 1:
            raise ValueError(f"a history has at least one step, not {length}")
        wanted, _ = _positions(np.asarray(positions, dtype=np.int64), len(self), "step")
        _, step = self.locate(wanted)
        back = np.arange(length - 1, -1, -1, dtype=np.int64)  # oldest first
        offsets = np.minimum(back[None, :], step[:, None])  # stay in the episode
        grid = wanted[:, None] - offsets
        flat = self.batch(grid.reshape(-1))
        out: dict[str, Any] = _reshape(flat, (len(wanted), length))
        out["mask"] = back[None, :] <= step[:, None]
        return out

    def window(self, position: int, history: int) -> dict[str, Any]:
        """Steps ``position - history + 1 .. position`` of ``position``'s episode, stacked
        (fewer at the start of an episode): the history a policy sees at that step.

        Args:
            position: A global step number.
            history: The most steps returned.

        Returns:
            The steps stacked, oldest first, ending with ``position``.

        Raises:
            RecordIndexError: ``position`` is out of range.
        """
        positions, _ = _positions(position, len(self), "step")
        _, step = self.locate(positions)
        first = int(positions[0] - min(int(step[0]), history - 1))
        return self.batch(np.arange(first, int(positions[0]) + 1))


def _reshape(tree: Any, lead: tuple[int, int]) -> Any:
    """Every stacked array (or list) of a decoded tree with its first axis cut to ``lead``."""
    if isinstance(tree, dict):
        return {name: _reshape(value, lead) for name, value in tree.items()}
    if isinstance(tree, list):
        return [tree[k * lead[1]:(k + 1) * lead[1]] for k in range(lead[0])]
    return tree.reshape(*lead, *tree.shape[1:])


def _index(tree: Any, k: int) -> Any:
    """Element ``k`` of every stacked array (or list) of a decoded tree."""
    if isinstance(tree, dict):
        return {name: _index(value, k) for name, value in tree.items()}
    return tree[k]


def _record_order(info: BuilderInfo, split: str, records: Dataset,
                  files: list[tuple[str, int]]) -> np.ndarray:
    """Split position -> record number of the opened files, in TFDS's order."""
    ranges = file_ranges(split, {n: s.shard_lengths for n, s in info.splits.items()})
    file_number = {f: k for k, f in enumerate(files)}
    starts = np.concatenate([[0], np.cumsum([s.records for s in records.shards])])
    takes = np.array([r.take for r in ranges], dtype=np.int64)
    bases = np.array([starts[file_number[(r.split, r.shard)]] + r.skip for r in ranges],
                     dtype=np.int64)
    firsts = np.concatenate([[0], np.cumsum(takes)[:-1]]).astype(np.int64)
    by_position = np.repeat(bases - firsts, takes) + np.arange(int(takes.sum()))
    cycle = 1 if info.disable_shuffling else CYCLE_LENGTH
    order: np.ndarray = by_position[interleave_order(takes.tolist(), cycle)]
    return order


def _check_counts(info: BuilderInfo, records: Dataset, files: list[tuple[str, int]]) -> None:
    for (split, shard), found in zip(files, records.shards, strict=True):
        expected = info.splits[split].shard_lengths[shard]
        if found.records != expected:
            raise SidecarError(
                f"{found.url} holds {found.records} records, dataset_info.json says "
                f"{expected}: the files changed since TFDS wrote them (or are partial); "
                "prepare the dataset again")


def open_tfds(path: str, split: str = "train", *, index_dir: str | None = None,
              storage_options: Mapping[str, Any] | None = None, build_missing: bool = True,
              cache_dir: str | None = None, **open_options: Any) -> TfdsDataset:
    """Open a TFDS (or RLDS) dataset in place, without TensorFlow.

    Args:
        path: The builder directory, ``<data_dir>/<name>/<version>``: a local path or a
            ``gs://``, ``s3://`` or ``http(s)://`` URL.
        split: A TFDS split string: ``"train"``, ``"train[:10%]"``, ``"train[100:200]"``,
            ``"train+test"``, ``"all"``.
        index_dir: Where the index (sidecars and step counts) goes and is looked for, for
            data in a place that cannot be written (a read-only bucket). Left out for a
            URL, with ``cache_dir``: a directory of the node cache named by the URL; without
            either, beside the data as :func:`ofindex.open` places it.
        storage_options: Options for the fsspec filesystem (credentials, endpoint ...).
        build_missing: Index the files that have no index yet (the first open of a TFDS
            directory indexes it, and counts the steps of an RLDS dataset).
        cache_dir: A local directory caching remote index pages for every process (and,
            for a URL without ``index_dir``, holding its index).
        **open_options: Other options of :func:`ofindex.open` (``verify``, ``mmap``,
            ``max_concurrency``, ``retries``, ``timeout`` ...).

    Returns:
        A :class:`TfdsDataset`: examples in the order ``tfds.as_numpy(builder.as_dataset(
        split, shuffle_files=False))`` yields them, decoded the same way.

    Raises:
        DataFileNotFoundError: ``path`` is not a TFDS builder directory.
        SourceError: Its metadata is malformed, or it is not stored as TFRecord files.
        DecodeError: Its features hold a type ofindex does not decode yet (the message
            names the feature).
        ValueError: ``split`` is not a split string of the dataset.
        IndexNotFoundError: ``build_missing=False`` and the files are not indexed.
        SidecarError: The files hold other record counts than ``dataset_info.json`` says.
    """
    info = read_builder(path, storage_options)
    ranges = file_ranges(split, {n: s.shard_lengths for n, s in info.splits.items()})
    if not ranges:
        raise ValueError(f"split {split!r} of {info.path} selects no example; name a split "
                         f"with examples ({hint('split=' + repr('train'), '--split train')})")
    files = list(dict.fromkeys((r.split, r.shard) for r in ranges))
    if index_dir is None and cache_dir is not None and "://" in info.path:
        index_dir = node_index_dir(cache_dir, info.path)
    records = open_records([info.shard_path(s, k) for s, k in files], index_dir=index_dir,
                           storage_options=dict(storage_options or {}),
                           build_missing=build_missing, cache_dir=cache_dir,
                           format="tfrecord", **open_options)
    try:
        _check_counts(info, records, files)
        order = _record_order(info, split, records, files)
        counts, layout = _step_counts(info, records, storage_options, build_missing)
    except BaseException:
        records.close()
        raise
    return TfdsDataset(info, split, records, order, counts, layout)


def node_index_dir(cache_dir: str, url: str) -> str:
    """Where a remote builder directory is indexed when only ``cache_dir`` is given: a
    directory of the node cache named by the URL (read-only buckets stay untouched)."""
    name = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]
    return os.path.join(os.path.expanduser(cache_dir), "tfds-index", name)


def _step_counts(info: BuilderInfo, records: Dataset, storage_options: Mapping[str, Any] | None,
                 build_missing: bool) -> tuple[np.ndarray | None, StepLayout | None]:
    """The step counts (and step layout) of an RLDS dataset's records: stored, or counted
    now and stored."""
    steps = steps_feature(info.features)
    if steps is None:
        return None, None
    where = steps_path(records.shards[0].index_url, records.identity)
    layout_path = steps_path(records.shards[0].index_url, records.identity, LAYOUT_FILE)
    counts = load_step_counts(where, len(records), storage_options)
    if counts is not None:
        return counts, load_layout(layout_path, storage_options, counts)
    if not build_missing:
        raise SidecarError(f"{where} not found: the steps of the episodes are not counted "
                           f"yet; open with {hint('build_missing=True', '--build')}")
    counts, layout = build_step_counts(records, steps)
    if layout is not None:
        save_layout(layout_path, layout, storage_options)
    save_step_counts(where, counts, storage_options)
    return counts, layout
