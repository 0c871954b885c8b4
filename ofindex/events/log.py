"""A TensorBoard log directory, indexed by run, tag and step (``ofindex.events(logdir)``).

A *run* is a directory below the log directory (the log directory itself is run ``"."``) that
holds event files (``events.out.tfevents.*``: any file whose name contains ``tfevents``, as
TensorBoard takes them), read in name order. Each event file gets a sidecar and an events
index (:mod:`.index_file`), built in one scan of the file and grown with it
(:mod:`.build`): the first :func:`events` of a log directory reads every file once; later ones
and :meth:`EventLog.refresh` read only what the files gained, and new files. A scalar tag
then loads from the indexes alone; tensors, histograms, images and text from their records
only (one read each, through the sidecar).

The indexes go to ``<logdir>.ofindex/<run>/`` (beside the log directory, so TensorBoard,
which takes any file whose name contains ``tfevents`` for an event file, never sees them), or
to ``index_dir`` (needed when the log directory cannot be written, e.g. on a web server).

Every event is kept as written: TensorBoard's loaders drop the events a restarted run wrote
again (steps that go back), this index does not (the records are there to be read).
"""

import concurrent.futures as cf
import dataclasses
import os
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

import numpy as np

from ..errors import DecodeError, SidecarError, missing_extra
from ..formats.placement import new_index_dir
from ..index.builder import REMOTE_WORKERS
from ..opening import open as open_dataset
from ..proto import event_pb2
from ..read.dataset import Dataset
from ..storage import Storage, Storages
from ..storage.paths import natural_key
from .build import EventFile, Indexed, index_events
from .index_file import ENTRY, SUFFIX, Case
from .values import histogram_of, image_bytes, tensor_to_array, text_of

#: What selects steps: one step, a ``slice`` or ``range`` (``step`` counts from ``start``),
#: or any collection of steps.
Steps = int | slice | range | Sequence[int] | np.ndarray | None
#: Cases that make an entry a scalar of a tag with the scalars plugin (or no plugin).
_SCALAR_CASES = (Case.SIMPLE, Case.TENSOR_SCALAR)
#: What each kind of tag is, by its plugin (TensorFlow 2) or its values' case (TensorFlow 1).
_KINDS = {"scalars": "scalars", "histograms": "histograms", "images": "images",
          "text": "text", "audio": "audio"}
_CASE_KINDS = {Case.SIMPLE: "scalars", Case.HISTOGRAM: "histograms", Case.IMAGE: "images",
               Case.AUDIO: "audio"}


def is_event_file(name: str) -> bool:
    """Whether a file name is an event file's, as TensorBoard takes them (its name contains
    ``tfevents``), and not one of ofindex's index files."""
    return "tfevents" in name and not name.endswith((".ofidx", SUFFIX, ".tmp"))


@dataclasses.dataclass
class _File:
    """One event file, its indexes, and its entries by tag (made on first use)."""

    file: EventFile
    indexed: Indexed
    tags: dict[str, int]
    plugins: list[str]
    by_tag: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, file: EventFile, indexed: Indexed) -> "_File":
        named = indexed.tags()
        return cls(file, indexed, {name: k for k, (name, _) in enumerate(named)},
                   [plugin for _, plugin in named])

    def entries(self, tag: int) -> np.ndarray:
        """The entries of tag number ``tag``, in record order (checked when first read)."""
        got = self.by_tag.get(tag)
        if got is None:
            parts = [part for chunk in self.indexed.chunks
                     if (part := chunk.tag_entries(tag)) is not None]
            got = self.by_tag[tag] = (np.concatenate(parts) if len(parts) > 1 else
                                      parts[0] if parts else np.zeros(0, ENTRY))
        return got


@dataclasses.dataclass
class _Run:
    """One run: its event files in order, and a dataset over them to read records."""

    name: str
    index_dir: str
    files: list[_File]
    dataset: Dataset | None = None


class EventLog:
    """A TensorBoard log directory, indexed by run, tag and step (see the module); made by
    :func:`events`.

    Args:
        logdir: The log directory: a local path or a URL (``s3://…``, ``gs://…``,
            ``https://…``).
        index_dir: Where the indexes go (default ``<logdir>.ofindex/``).
        storage_options: Options for the fsspec filesystem.

    Raises:
        DataFileNotFoundError: ``logdir`` does not exist.
        StorageError: The indexes cannot be written (pass ``index_dir``).
        CorruptRecordError: An event file is damaged.
    """

    def __init__(self, logdir: str | os.PathLike[str], *, index_dir: str | None = None,
                 storage_options: dict[str, Any] | None = None) -> None:
        self._storages = Storages(storage_options)
        self._storage_options = storage_options
        self._storage, self._root = self._storages.for_url(os.fspath(logdir))
        self.logdir = self._storage.url(self._root)
        if index_dir is None:
            self._index_storage = self._storage
            self._index_root = new_index_dir(self._storage, self._root.rstrip("/") or "/")
        else:
            self._index_storage, self._index_root = self._storages.for_url(index_dir)
        self._runs: dict[str, _Run] = {}
        self.refresh()

    # -- keeping up ----------------------------------------------------------------------
    def refresh(self) -> int:
        """Index what the event files gained since, and new files and runs (only their new
        bytes are read).

        Returns:
            The summary values added.

        Raises:
            CorruptRecordError: An event file is damaged (a record still being written at
                its end is left for a later refresh).
            StorageError: The indexes cannot be written (pass ``index_dir``).
        """
        before = self._entries()
        found = self._discover()
        work: list[tuple[_Run, _File | None, str]] = []
        for name, paths in found.items():
            run = self._runs.get(name)
            if run is None:
                run = self._runs[name] = _Run(name, self._run_index_dir(name), [])
            known = {f.file.path: f for f in run.files}
            work += [(run, known.get(path), path) for path in paths]
        done = iter(self._index_all(work))
        for name, paths in found.items():
            run = self._runs[name]
            files = [next(done) for _ in paths]
            if len(files) != len(run.files) or any(
                    new is not old for new, old in zip(files, run.files, strict=False)):
                run.files = files
                if run.dataset is not None:
                    run.dataset.close()
                    run.dataset = None
        self._runs = {name: self._runs[name] for name in sorted(self._runs, key=natural_key)}
        return self._entries() - before

    def _index_all(self, work: list[tuple[_Run, "_File | None", str]]) -> list[_File]:
        """:meth:`_index` of every file, several at once on threads (the scans' inner loops,
        numpy and reads, release the GIL: one thread a core, 8 for remote logs, as a build)."""
        workers = min(len(work), (os.cpu_count() or 1) if self._storage.is_local
                      else REMOTE_WORKERS)
        if workers <= 1:
            return [self._index(run, known, path) for run, known, path in work]
        with cf.ThreadPoolExecutor(workers, thread_name_prefix="ofindex-events") as pool:
            return list(pool.map(lambda item: self._index(*item), work))

    def _entries(self) -> int:
        return sum(len(c.entries) for r in self._runs.values() for f in r.files
                   for c in f.indexed.chunks)

    def _discover(self) -> dict[str, list[str]]:
        """The event files below the log directory, by run, in name order."""
        storage, root = self._storage, self._root
        runs: dict[str, list[str]] = {}
        for path in storage.find(root):
            directory = storage.dirname(path)
            run = _relative(storage, root, directory)
            if is_event_file(storage.basename(path)) and not any(
                    part.endswith(".ofindex") for part in run.split("/")):
                runs.setdefault(run, []).append(path)
        return {run: sorted(paths, key=lambda p: natural_key(storage.basename(p)))
                for run, paths in runs.items()}

    def _run_index_dir(self, run: str) -> str:
        if run == ".":
            return self._index_root
        storage = self._index_storage
        return storage.join(self._index_root, run.replace("/", os.sep) if storage.is_local
                            else run)

    def _index(self, run: _Run, known: _File | None, path: str) -> _File:
        """Bring one event file's indexes up to date."""
        storage, index = self._index_storage, run.index_dir
        name = self._storage.basename(path)
        file = known.file if known is not None else EventFile(
            self._storage, path, storage, storage.join(index, name + ".ofidx"),
            storage.join(index, name + SUFFIX))
        _, indexed = index_events(file, None if known is None else known.indexed)
        if known is not None and (indexed.size, indexed.end) == (known.indexed.size,
                                                                 known.indexed.end):
            return known
        return _File.of(file, indexed)

    # -- what is there -------------------------------------------------------------------
    @property
    def runs(self) -> list[str]:
        """The runs, in name order (``"."``: the log directory itself)."""
        return list(self._runs)

    def tags(self, runs: str | Iterable[str] | None = None) -> Any:
        """Every tag of every run: what it is, how many values it has, and its first and last
        steps.

        Args:
            runs: A run, or runs (default: all).

        Returns:
            A pandas ``DataFrame`` with the columns ``run``, ``tag``, ``kind`` (``scalars``,
            ``histograms``, ``images``, ``text``, ``audio`` or ``tensors``), ``plugin``,
            ``count``, ``first_step`` and ``last_step``.

        Raises:
            MissingDependencyError: pandas is not installed (``pip install 'ofindex[events]'``).
        """
        pandas = _pandas()
        rows = []
        for run in self._selected(runs):
            seen: dict[str, list[Any]] = {}
            for file_no in range(len(run.files)):
                f = run.files[file_no]
                for tag, number in f.tags.items():
                    entries = self._entries_of(run, file_no, number)
                    if not len(entries):
                        continue
                    row = seen.setdefault(tag, [run.name, tag, "", f.plugins[number], 0,
                                                np.iinfo(np.int64).max, np.iinfo(np.int64).min,
                                                set()])
                    row[3] = row[3] or f.plugins[number]
                    row[4] += len(entries)
                    row[5] = min(row[5], int(entries["step"].min()))
                    row[6] = max(row[6], int(entries["step"].max()))
                    row[7].update(np.unique(entries["case"]).tolist())
            for row in seen.values():
                row[2] = _kind(row[3], row.pop())
                rows.append(row)
        return pandas.DataFrame(rows, columns=["run", "tag", "kind", "plugin", "count",
                                               "first_step", "last_step"])

    # -- values --------------------------------------------------------------------------
    def scalars(self, tag: str | None = None, runs: str | Iterable[str] | None = None,
                steps: Steps = None) -> Any:
        """Scalar values, from the indexes alone (no record is read): ``simple_value``
        summaries (TensorFlow 1, PyTorch, tensorboardX) and one-number tensors of the scalars
        plugin (TensorFlow 2), in tbparse's long layout.

        Args:
            tag: A tag (default: every scalar tag).
            runs: A run, or runs (default: all).
            steps: Steps to keep: one, a ``slice`` or ``range``, or a collection of them.

        Returns:
            A pandas ``DataFrame`` with the columns ``run``, ``tag`` (categorical), ``step``
            (int64), ``wall_time`` and ``value`` (float64; TensorBoard's float32 values
            widened), a run's values in the order written.

        Raises:
            MissingDependencyError: pandas is not installed.
        """
        pandas = _pandas()
        parts: list[tuple[str, str, np.ndarray]] = []
        for run in self._selected(runs):
            for file_no, f in enumerate(run.files):
                for name, number in _tags_of(f, tag):
                    entries = self._entries_of(run, file_no, number)
                    plugin = f.plugins[number]
                    keep = (entries["case"] == Case.SIMPLE) | (
                        (entries["case"] == Case.TENSOR_SCALAR) & (plugin in ("scalars", "")))
                    entries = _steps(entries[keep], steps)
                    if len(entries):
                        parts.append((run.name, name, entries))
        return _frame(pandas, parts, {"value": lambda e: e["value"]})

    def tensors(self, tag: str, runs: str | Iterable[str] | None = None,
                steps: Steps = None) -> Any:
        """The tensors of a tag, read from their records (TensorFlow 2 summaries: scalars,
        histograms, images and text as the tensors they are written as).

        Args:
            tag: The tag.
            runs: A run, or runs (default: all).
            steps: Steps to keep (see :meth:`scalars`).

        Returns:
            A pandas ``DataFrame``: ``run``, ``tag``, ``step``, ``wall_time``, ``value`` (a
            numpy array each; strings as ``bytes``).

        Raises:
            MissingDependencyError: pandas is not installed.
            DecodeError: A tensor cannot be read.
        """
        cases = (Case.TENSOR, Case.TENSOR_SCALAR)
        return self._read(tag, runs, steps, cases, (), lambda v: [tensor_to_array(v.tensor)])

    def histograms(self, tag: str, runs: str | Iterable[str] | None = None,
                   steps: Steps = None) -> Any:
        """The histograms of a tag, read from their records: TensorFlow 1's
        ``HistogramProto`` (PyTorch, tensorboardX) and TensorFlow 2's ``[k, 3]`` tensors
        alike.

        Args:
            tag: The tag.
            runs: A run, or runs (default: all).
            steps: Steps to keep (see :meth:`scalars`).

        Returns:
            A pandas ``DataFrame``: ``run``, ``tag``, ``step``, ``wall_time``, ``limits``
            (each bucket's right edge) and ``counts`` (arrays), ``min``, ``max``, ``num``,
            ``sum``, ``sum_squares`` (NaN where TensorFlow 2's histograms do not say).

        Raises:
            MissingDependencyError: pandas is not installed.
            DecodeError: A value is not a histogram.
        """
        frame = self._read(tag, runs, steps, (Case.HISTOGRAM,), ("histograms",),
                           lambda v: [histogram_of(v)])
        pandas = _pandas()
        fields = pandas.DataFrame(list(frame.pop("value")), index=frame.index,
                                  columns=["limits", "counts", "min", "max", "num", "sum",
                                           "sum_squares"])
        return pandas.concat([frame, fields], axis=1)

    def images(self, tag: str, runs: str | Iterable[str] | None = None, steps: Steps = None,
               *, decode: bool = True) -> Any:
        """The images of a tag, read from their records (``Summary.Image``, and TensorFlow
        2's image tensors, which may hold several images a step), decoded by the image stage
        (:func:`ofindex.decode.images.decode_images`: PNG and JPEG, to RGB).

        Args:
            tag: The tag.
            runs: A run, or runs (default: all).
            steps: Steps to keep (see :meth:`scalars`).
            decode: Decode each image to a ``(height, width, 3)`` RGB array (grayscale made
                RGB, an alpha channel dropped); ``False`` keeps its encoded bytes (PNG, JPEG
                …).

        Returns:
            A pandas ``DataFrame``: ``run``, ``tag``, ``step``, ``wall_time``, ``value`` (one
            row per image: several for a step that logged several).

        Raises:
            MissingDependencyError: pandas, or the image stage (``pip install
                'ofindex[images]'``), is not installed.
            DecodeError: An image cannot be decoded.
        """
        if decode:
            try:
                from ..decode.images import decode_images
            except ImportError as exc:
                raise missing_extra("EventLog.images(decode=True)", "images", exc) from exc
            return self._read(tag, runs, steps, (Case.IMAGE,), ("images",),
                              lambda v: [decode_images([b])[0] for b in image_bytes(v)])
        return self._read(tag, runs, steps, (Case.IMAGE,), ("images",), image_bytes)

    def text(self, tag: str, runs: str | Iterable[str] | None = None,
             steps: Steps = None) -> Any:
        """The text of a tag (the text plugin's string tensors), read from its records.

        Args:
            tag: The tag.
            runs: A run, or runs (default: all).
            steps: Steps to keep (see :meth:`scalars`).

        Returns:
            A pandas ``DataFrame``: ``run``, ``tag``, ``step``, ``wall_time``, ``value`` (a
            ``str``, or an array of them for a tensor of several strings).

        Raises:
            MissingDependencyError: pandas is not installed.
            DecodeError: A value holds no text.
        """
        return self._read(tag, runs, steps, (), ("text",), lambda v: [text_of(v)])

    def _read(self, tag: str, runs: str | Iterable[str] | None, steps: Steps,
              cases: tuple[Case, ...], plugins: tuple[str, ...],
              convert: Any) -> Any:
        """A frame of the values of ``tag`` whose case is in ``cases`` or whose tag's plugin
        is in ``plugins``, read from their records and made by ``convert`` (a list of values
        per summary value: a row each)."""
        pandas = _pandas()
        rows: list[tuple[str, str, int, float, Any]] = []
        for run in self._selected(runs):
            for file_no, f in enumerate(run.files):
                number = f.tags.get(tag)
                if number is None:
                    continue
                entries = self._entries_of(run, file_no, number)
                if f.plugins[number] not in plugins:
                    entries = entries[np.isin(entries["case"], [int(c) for c in cases])]
                entries = _steps(entries, steps)
                if len(entries):
                    for entry, value in zip(entries, self._values(run, file_no, entries, tag),
                                            strict=True):
                        rows.extend((run.name, tag, int(entry["step"]),
                                     float(entry["wall_time"]), item) for item in convert(value))
        return pandas.DataFrame(rows, columns=["run", "tag", "step", "wall_time", "value"])

    def _entries_of(self, run: _Run, file_no: int, tag: int) -> np.ndarray:
        """The entries of tag number ``tag`` of a run's file; an events index found damaged
        when they are read is made again from the event file (it is ofindex's own: removed
        first), and the tag's entries read from the new one."""
        f = run.files[file_no]
        try:
            return f.entries(tag)
        except SidecarError:
            f.file.index_storage.remove(f.file.events)
            _, indexed = index_events(f.file)
            run.files[file_no] = fresh = _File.of(f.file, indexed)
            name = next(name for name, number in f.tags.items() if number == tag)
            number = fresh.tags.get(name)
            return fresh.entries(number) if number is not None else np.zeros(0, ENTRY)

    def _values(self, run: _Run, file_no: int, entries: np.ndarray,
                tag: str) -> list[event_pb2.Summary.Value]:
        """The summary values of ``entries`` of one file, read from their records."""
        dataset = self._dataset(run)
        first = 0 if file_no == 0 else int(dataset.cumulative_counts[file_no - 1])
        payloads = dataset[(entries["record"].astype(np.int64) + first).tolist()]
        values = []
        file = run.files[file_no].file
        for payload, entry in zip(payloads, entries, strict=True):
            summary = event_pb2.Event.FromString(payload).summary
            slot = int(entry["slot"])
            if slot >= len(summary.value) or summary.value[slot].tag != tag:
                raise DecodeError(
                    f"{file.storage.url(file.path)}: record {int(entry['record'])} holds no "
                    f"value {slot} of tag {tag!r}: its events index ({file.events}) does not "
                    "describe it; remove that file and open the log directory again")
            values.append(summary.value[slot])
        return values

    def _dataset(self, run: _Run) -> Dataset:
        """A dataset over the run's event files, to read their records."""
        if run.dataset is None:
            storage = self._storage
            run.dataset = open_dataset(
                [storage.url(f.file.path) for f in run.files],
                index_dir=self._index_storage.url(run.index_dir),
                storage_options=self._storage_options, growing=True, manifest=False)
        return run.dataset

    def _selected(self, runs: str | Iterable[str] | None) -> list[_Run]:
        if runs is None:
            return list(self._runs.values())
        names = [runs] if isinstance(runs, str) else list(runs)
        unknown = [n for n in names if n not in self._runs]
        if unknown:
            raise KeyError(f"{self.logdir} has no run {unknown[0]!r} (its runs: "
                           f"{', '.join(self._runs) or 'none'})")
        return [self._runs[n] for n in names]

    def close(self) -> None:
        """Let go of the datasets opened to read records (reopened when needed)."""
        for run in self._runs.values():
            if run.dataset is not None:
                run.dataset.close()
                run.dataset = None

    def __enter__(self) -> "EventLog":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EventLog({self.logdir!r}, {len(self._runs)} runs)"


def events(logdir: str | os.PathLike[str], *, index_dir: str | None = None,
           storage_options: dict[str, Any] | None = None) -> EventLog:
    """Open a TensorBoard log directory, indexed by run, tag and step (see
    :class:`EventLog`): its event files indexed in one scan each the first time, and only
    what they gained afterwards.

    Args:
        logdir: The log directory (local, or a URL).
        index_dir: Where the indexes go (default ``<logdir>.ofindex/``).
        storage_options: Options for the fsspec filesystem.

    Returns:
        The :class:`EventLog`.

    Raises:
        StorageError: The indexes cannot be written (pass ``index_dir``).
        CorruptRecordError: An event file is damaged.
    """
    return EventLog(logdir, index_dir=index_dir, storage_options=storage_options)


def _relative(storage: Storage, root: str, directory: str) -> str:
    """The run name of ``directory`` below ``root`` (``"."`` for the root itself)."""
    if storage.is_local:
        rel = os.path.relpath(directory, root)
        return "." if rel == "." else rel.replace(os.sep, "/")
    base = root.rstrip("/")
    rel = directory.rstrip("/")[len(base):].strip("/") if directory.startswith(base) else ""
    return rel or "."


def _tags_of(f: _File, tag: str | None) -> list[tuple[str, int]]:
    if tag is None:
        return list(f.tags.items())
    number = f.tags.get(tag)
    return [] if number is None else [(tag, number)]


def _kind(plugin: str, cases: set[int]) -> str:
    """What a tag is: by its plugin, else by its values' cases."""
    if plugin in _KINDS:
        return _KINDS[plugin]
    kinds = {_CASE_KINDS.get(Case(c), "tensors") for c in cases}
    return kinds.pop() if len(kinds) == 1 else "tensors"


def _steps(entries: np.ndarray, steps: Steps) -> np.ndarray:
    """The entries whose step ``steps`` selects."""
    if steps is None or not len(entries):
        return entries
    step = entries["step"]
    if isinstance(steps, (int, np.integer)):
        picked: np.ndarray = entries[step == int(steps)]
        return picked
    if isinstance(steps, (slice, range)):
        lo = steps.start if steps.start is not None else np.iinfo(np.int64).min
        keep = step >= lo
        if steps.stop is not None:
            keep &= step < steps.stop
        if steps.step not in (None, 1):
            keep &= (step - lo) % steps.step == 0
        return entries[keep]
    return entries[np.isin(step, np.asarray(steps, dtype=np.int64))]


def _frame(pandas: Any, parts: list[tuple[str, str, np.ndarray]], columns: dict[str, Any]) -> Any:
    """A long frame of ``parts`` (``(run, tag, entries)``) with categorical runs and tags."""
    counts = [len(e) for _, _, e in parts]
    runs = sorted({run for run, _, _ in parts}, key=natural_key)
    tags = sorted({tag for _, tag, _ in parts})
    run_codes = np.repeat([runs.index(run) for run, _, _ in parts], counts).astype(np.int32)
    tag_codes = np.repeat([tags.index(tag) for _, tag, _ in parts], counts).astype(np.int32)
    entries = (np.concatenate([e for _, _, e in parts]) if parts
               else np.zeros(0, ENTRY))
    data = {"run": pandas.Categorical.from_codes(run_codes, categories=runs),
            "tag": pandas.Categorical.from_codes(tag_codes, categories=tags),
            "step": entries["step"].astype(np.int64),
            "wall_time": entries["wall_time"].astype(np.float64)}
    for name, column in columns.items():
        data[name] = np.asarray(column(entries), dtype=np.float64)
    return pandas.DataFrame(data)


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as exc:
        raise missing_extra("ofindex.events", "events", exc) from exc
    return pandas
