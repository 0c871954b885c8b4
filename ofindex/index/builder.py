"""The index builder: index every data file of a path spec, then write the dataset manifest."""


import concurrent.futures as cf
import dataclasses
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ..columns.collect import check_names, keyed_columns
from ..formats.framing import RecordFormat
from ..formats.location import DatasetLocation, resolve
from ..formats.manifest import manifest_url_for
from ..formats.placement import Layout
from ..formats.sidecar_header import Compression, parse_compression
from ..formats.strays import only_strays, strays_refused, warn_skipped
from ..storage import PathSpec, Storages
from .build_file import BuildResult
from .build_results import BuildResults
from .cluster import FileProgress, run_on_executor
from .job import FileJob
from .key_indexes import write_key_indexes
from .manifest_sink import ManifestSink
from .migrate import drop_legacy_files, move_legacy_sidecars, warn_legacy_layout
from .survey import one_framing, survey_files

#: Remote files indexed at once by default (threads; each holds about two chunks).
REMOTE_WORKERS = 8
#: Remote files looked at at once before a build (a stat and one small read each).
REMOTE_SURVEYS = 32


class BuildOutcome(NamedTuple):
    """What a build did: one result per record file, and the files it skipped.

    Attributes:
        results: One :class:`BuildResult` per record file, in dataset order.
        skipped: URLs of the files found by a directory or glob that are not record files.
    """

    results: list[BuildResult] | BuildResults
    skipped: list[str]


def build_index(
    paths: PathSpec,
    *,
    format: str = "auto",
    index_dir: str | None = None,
    verify: bool = False,
    allow_partial: bool = False,
    workers: int | None = None,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
    manifest: bool | str | None = None,
    executor: cf.Executor | None = None,
    resume: bool = True,
    compression: str | Compression | None = "auto",
    seek_spacing: int | None = None,
    checksums: bool | None = None,
    strict: bool = False,
    retries: int | None = None,
    timeout: float | None = None,
    migrate: bool = False,
    allow_missing_shards: bool = False,
    columns: Sequence[str] = (),
    keys: bool | Sequence[str] = False,
    growing: bool = False,
) -> list[BuildResult] | BuildResults:
    """Index data files: scan each once and write its sidecar (and the dataset's manifest).

    Every file is looked at before anything is written: a directory or glob may hold files
    that are plainly not record files (a README, TFDS's ``label.labels.txt``), which are
    skipped with one :class:`SkippedFilesWarning`; TFRecord and OFRecord files are never mixed
    in one dataset.

    Works the same in a script (no ``if __name__ == "__main__":`` guard needed), a notebook
    or a worker process: files are scanned on threads, and the scan's inner loops release
    the GIL.

    Args:
        paths: A data file, a directory, a glob, a URL, or a list of them.
        format: ``"tfrecord"``, ``"ofrecord"``, or ``"auto"`` to detect each file's framing.
        index_dir: Where sidecars go (``<index_dir>/<name>.ofidx``; a local directory or
            another bucket, for read-only data). By default they go to a directory beside the
            data directory, ``<data dir>.ofindex/``, so that no glob over the data directory
            returns them (see :mod:`ofindex.formats.placement`); local files named one by one
            whose directory has no such directory, and local data whose index directory cannot
            be written, go to the per-user index cache instead
            (:func:`ofindex.formats.placement.new_index_layout`); sidecars of ofindex 0.2 and
            earlier, beside the data files, are kept there (and rebuilt there) unless
            ``migrate=True``.
        verify: Also check every record's data CRC (the scan otherwise checks the framing
            and the length CRCs).
        allow_partial: Index the valid prefix of a damaged file instead of failing (with a
            warning and a ``partial`` flag that :func:`ofindex.open` reports).
        workers: Files scanned at once (default: one per core for local files, 8 for remote
            ones, each streamed once in 8 MiB requests).
        storage_options: Options for the fsspec filesystem.
        progress: Show a progress bar (bytes scanned).
        manifest: ``None`` writes ``ofindex-manifest.json`` for a directory (in its index
            directory: ``index_dir``, or ``<data dir>.ofindex/``); ``True`` also for a glob or
            list of one directory's files; a path or URL writes it there; ``False`` writes
            none.
        executor: Any ``concurrent.futures.Executor`` runs the per-file tasks instead of
            the local threads, e.g. a Dask cluster's
            (``dask.distributed.Client(address).get_executor()``) or
            :class:`ofindex.index.cluster.RayExecutor`; each task indexes one file where it
            runs and returns a small :class:`BuildResult`, and the manifest is written
            here. Paths must be reachable from the workers (a bucket, or a shared file
            system).
        resume: Skip files whose sidecar is already fresh (same size and fingerprint,
            complete, same format; ``BuildResult.skipped``), so a build interrupted at 90 %
            redoes the remaining 10 %, and index only the bytes a file gained since its
            sidecar was written when it grew by appending (its first bytes unchanged:
            ``BuildResult.appended``; the sidecar grows by a segment, see
            :mod:`ofindex.index.growth`). ``False`` (``ofindex build --force``) re-indexes every
            file whole; a ``verify=True`` build always reads every file.
        checksums: Store the CRC32C of every payload in the sidecars, which reads with
            ``verify=True`` check. ``None`` (the default) stores them for OFRecord files
            (compressed or not), a format without CRCs of its own: 4 bytes per record in the
            sidecar, and a build that reads every payload (locally a second pass over the
            memory-mapped file on threads; a compressed or remote file is summed in the one
            pass that reads it). ``False`` opts out; ``True`` also rebuilds fresh sidecars
            that lack them.
        compression: ``"auto"`` detects GZIP and ZLIB files (TensorFlow's
            ``compression_type``); ``"gzip"``, ``"zlib"`` or ``None`` say what every file
            is. A compressed file is inflated once; its sidecar also holds seek points where
            random reads start inflating.
        seek_spacing: Uncompressed bytes between the seek points of a compressed file
            (default 256 KiB; a resumed build rebuilds a compressed file's sidecar only when it
            was built with another spacing than one given here)
            (smaller: faster random reads, a larger index; each point may store up to a
            32 KiB window, compressed). ``BuildResult.index_fraction`` tells the index size
            as a fraction of the data.
        strict: Refuse files found by a directory or glob that are not record files
            (documents such as ``README.txt`` or ``*.labels.txt``, or files whose first bytes
            fit no record file) instead of skipping them. A file named on its own is never
            skipped.
        retries: Remote requests that fail transiently (connections reset, or refused by a
            store that answered before; timeouts, HTTP 5xx and 429, S3 ``SlowDown``) are sent
            again up to this many times, with exponential backoff and jitter (default 10;
            ``0``: each request is sent once).
        timeout: Seconds after which a remote request is given up, its retries, backoff and
            waits for a throttled store included
            (default 60).
        migrate: Move the sidecars (and manifest) of a dataset indexed by ofindex 0.2 and
            earlier from beside the data files to the default place, ``<data dir>.ofindex/``
            (fresh ones are moved, not rebuilt; ``ofindex build --migrate``).
        allow_missing_shards: Index a directory or glob whose shards are not all there
            (names that say ``-of-N`` with fewer than N of them, or a writer's publication
            that did not finish: see :mod:`ofindex.formats.shard_set`), with a
            ``MissingShardsWarning``; no manifest is written for it, so each later ``open``
            checks again.
        columns: Features to store per record as column sidecars beside the sidecars, for
            queries without reading the records (``ds.where(label=3)``, ``ds.lookup(...)``;
            see docs/columns.md): scalar int64, float or bytes features of Examples,
            SequenceExample contexts or OFRecords, taken in the same scan as the offsets. A
            record without the feature is null; one holding several values is refused. Files
            whose sidecar is fresh keep it: only their missing or stale column sidecars are
            written (their records read once more).
        keys: Columns whose key index (their values sorted over the dataset, for
            ``ds.lookup`` in a few page reads) is written beside the manifest now: ``True``
            for every column of ``columns``, or some of them by name (``ofindex build
            --keys [NAME,...]``). By default none is: a local dataset's is written by its
            first ``ds.lookup`` of the column, a remote dataset's lookup asks for it. Key
            indexes cost more than the columns themselves to build (1 M small Examples,
            label and id: 0.53-0.61 s of CPU with their key indexes, 0.25-0.26 s without,
            0.06 s for the offsets alone).
        growing: The files may still be being written (a training run's TensorBoard logs, a
            collector's output): a record cut short at a file's end is taken as not written
            yet, not as damage (the index ends before it, ``BuildResult.open_tail``, and the
            next build takes it up), and a file that grows while it is scanned is indexed as
            far as it was when the build looked at it. Open such a dataset with
            ``ofindex.open(..., growing=True)``.

    Returns:
        One :class:`BuildResult` per record file, in dataset order: a list, or with an
        ``executor`` a :class:`~ofindex.index.build_results.BuildResults` (a sequence that
        keeps a million results in about 200 bytes each and makes each ``BuildResult`` when
        asked for).

    Raises:
        CorruptRecordError: A bad CRC or impossible length, naming file, offset and record
            (a ``ValueError``; :class:`TruncatedRecordError` for a file cut short).
        FormatDetectionError: A file's framing cannot be detected (pass ``format``); files
            of both framings, or of the other framing than ``format``; with ``strict``,
            files that are not record files. Nothing is written then.
        DataFileNotFoundError: ``paths`` matches no data file, or no record file.
        IncompleteDatasetError: Shards of the directory or glob are missing (unless
            ``allow_missing_shards``); nothing is written then.
        StaleIndexError: A file changed while it was scanned.
        StorageError: Storage cannot be reached (the cause named: a host name that does not
            resolve, a refused connection, a failed TLS handshake, no answer within
            ``timeout``), refuses access, or refuses to store the sidecars (a read-only
            location: pass ``index_dir``).
        ValueError: Two files of one name would share ``index_dir``, or files of several
            directories for one manifest.
        ColumnError: A record holds several values of a column's feature, records store it
            as different types, a column is named twice, or ``keys`` names a column not in
            ``columns``.

    Warns:
        SkippedFilesWarning: Files found by a directory or glob were skipped (once, naming
            them).
        UserWarning: A partial index was written (``allow_partial=True``).
    """
    storages = Storages(storage_options, retries=retries, timeout=timeout)
    location = resolve(paths, index_dir=index_dir, storages=storages, manifest=False,
                       layout=Layout.SIBLING if migrate and index_dir is None else None,
                       allow_missing_shards=allow_missing_shards, building=True)
    moved = move_legacy_sidecars(location) if migrate and index_dir is None else []
    if not migrate:
        warn_legacy_layout(location)
    results, skipped = build_location(
        location, format=format, verify=verify, allow_partial=allow_partial,
        workers=workers, progress=progress, manifest=manifest, executor=executor,
        resume=resume, compression=compression, seek_spacing=seek_spacing,
        checksums=checksums, strict=strict, columns=check_names(columns),
        keys=keyed_columns(columns, keys), growing=growing)
    drop_legacy_files(moved)
    if not results:
        raise only_strays(skipped)
    if skipped:
        warn_skipped(skipped, stacklevel=2)
    for r in results:
        if r.partial:
            warnings.warn(f"{r.data_url}: PARTIAL index of {r.records} records: {r.problem}",
                          stacklevel=2)
    return results


def build_location(
    location: DatasetLocation,
    *,
    format: str | RecordFormat = "auto",
    verify: bool = False,
    allow_partial: bool = False,
    workers: int | None = None,
    progress: bool = False,
    manifest: bool | str | None = None,
    executor: cf.Executor | None = None,
    resume: bool = True,
    compression: str | Compression | None = "auto",
    seek_spacing: int | None = None,
    checksums: bool | None = None,
    strict: bool = False,
    columns: tuple[str, ...] = (),
    keys: tuple[str, ...] = (),
    growing: bool = False,
) -> BuildOutcome:
    """Index the files of a resolved location (see :func:`build_index` for the options).

    Every file is surveyed first (:mod:`.survey`); strays are left out (``strict`` refuses
    them) and a mix of framings is refused before any sidecar or manifest is written.

    Returns:
        The results (none when every file is a stray) and the strays skipped; the caller
        warns about them.
    """
    storage, files = location.storage, location.files
    fmt = None if format == "auto" else RecordFormat.parse(format)
    comp = parse_compression(compression)
    if seek_spacing is not None and seek_spacing < 1:
        raise ValueError(f"seek_spacing must be a positive number of bytes, not {seek_spacing}")
    targets = [location.sidecar_of(f) for f in files]
    default = (os.cpu_count() or 1) if storage.is_local else REMOTE_WORKERS
    n_workers = max(1, min(workers or default, len(files)))
    jobs = [FileJob(storage, f, fmt, index_storage, ipath, verify, allow_partial, comp,
                    seek_spacing, checksums, columns=columns, extend=resume, open_tail=growing)
            for f, (index_storage, ipath) in zip(files, targets, strict=True)]
    surveys = survey_files(jobs, location.named, resume,
                           n_workers if storage.is_local else REMOTE_SURVEYS)
    skipped = [s.url for s in surveys if s.stray]
    if skipped and strict:
        raise strays_refused(skipped)
    kept = [(job, s) for job, s in zip(jobs, surveys, strict=True) if not s.stray]
    if not kept:
        return BuildOutcome([], skipped)
    framing = one_framing([s for _, s in kept], fmt)
    # a fresh file is kept, unless columns are asked for: its job then adds those missing
    todo = [dataclasses.replace(job, format=fmt or s.seen or (framing if s.looked else None),
                                compression=s.compression, stamp=s.stamp, existing=s.fresh)
            for job, s in kept if s.fresh is None or columns]
    paths = [job.path for job, _ in kept]
    target = _manifest_target(location, paths, manifest)
    sink = None if target is None else ManifestSink(location, target, framing, paths)
    # a cluster build's results are kept compactly and streamed into the manifest as they
    # arrive (in order); a local build's are a list
    results: list[BuildResult] | BuildResults = BuildResults() if executor is not None else []
    merged = _InOrder([None if columns else s.fresh for _, s in kept], results, sink)
    _run_jobs(todo, n_workers, executor, progress, merged.built)
    merged.close()
    if sink is not None:
        sink.close()
        if keys:
            write_key_indexes(sink.storage, sink.storage.dirname(sink.json_path),
                              [job for job, _ in kept], results, keys)
    return BuildOutcome(results, skipped)


class _InOrder:
    """Results of a build in dataset order: fresh files' (known from the survey) between the
    built ones (delivered in order), each kept and handed to the manifest."""

    def __init__(self, fresh: list[BuildResult | None],
                 results: list[BuildResult] | BuildResults, sink: ManifestSink | None) -> None:
        self.fresh, self.results, self.sink = fresh, results, sink
        self.position = 0

    def _keep(self, result: BuildResult) -> None:
        self.results.append(result)
        if self.sink is not None:
            self.sink.add(result)
        self.position += 1

    def _fresh_ones(self) -> None:
        while self.position < len(self.fresh):
            fresh = self.fresh[self.position]
            if fresh is None:
                return
            self._keep(fresh)

    def built(self, result: BuildResult) -> None:
        """The next built file's result."""
        self._fresh_ones()
        self._keep(result)

    def close(self) -> None:
        """Take the fresh files after the last built one."""
        self._fresh_ones()


def _run_jobs(todo: list[FileJob], n_workers: int, executor: cf.Executor | None,
              progress: bool, deliver: Callable[[BuildResult], None]) -> None:
    """Index the files that need it, on ``executor`` or on local threads; ``deliver`` gets
    each result in order."""
    if not todo:
        return
    if executor is not None:
        files_bar = FileProgress(len(todo), progress)
        try:
            run_on_executor(executor, todo, False, files_bar, deliver)
        finally:
            files_bar.close()
        return
    bar = _Progress(todo, progress)
    try:
        results = _run_threads(todo, min(n_workers, len(todo)), bar)
    finally:
        bar.close()
    for result in results:
        deliver(result)


def _manifest_target(
    location: DatasetLocation, files: list[str], manifest: bool | str | None
) -> tuple[str, str, bool] | None:
    """``(manifest URL, data directory, named)`` of the manifest of ``files`` (the record
    files of ``location``), per the rule in :mod:`ofindex.formats.manifest`; ``named``: the
    caller named it (else the URL is the JSON manifest's default place)."""
    if manifest is False or not location.whole:  # a set lacking shards gets no manifest
        return None
    storage = location.storage
    data_dir = {storage.dirname(f) for f in files}
    if isinstance(manifest, (str, os.PathLike)):
        if len(data_dir) != 1:
            raise ValueError("a manifest lists the files of one directory; these are in "
                             f"{len(data_dir)} directories")
        return os.fspath(manifest), data_dir.pop(), True
    if not (location.directory is not None or manifest is True):
        return None
    if len(data_dir) != 1:
        if manifest is True:
            raise ValueError("manifest=True needs the files of one directory; these are in "
                             f"{len(data_dir)} directories")
        return None
    directory = data_dir.pop()
    index_dir = location.sidecars.index_dir_of(storage, directory)
    where = (storage.url(directory) if index_dir is None
             else index_dir[0].url(index_dir[1]))
    return manifest_url_for(where), directory, False


class _Cancelled(Exception):
    """Raised inside a worker thread once another file failed or the caller was interrupted."""


class _Progress:
    """Bytes scanned across all files (a tqdm bar when enabled), and the stop signal that
    lets worker threads end soon after a failure or Ctrl-C."""

    def __init__(self, jobs: list[FileJob], enabled: bool) -> None:
        self.bar: Any = None
        if enabled:
            from tqdm.auto import tqdm

            total = sum((job.stamp or job.storage.stamp(job.path)).size for job in jobs)
            self.bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                            desc="indexing")
        self.stopped = threading.Event()
        self._lock = threading.Lock()

    def update(self, nbytes: int) -> None:
        """Count ``nbytes`` scanned; raise :class:`_Cancelled` once the build is stopping."""
        if self.stopped.is_set():
            raise _Cancelled
        if self.bar is not None:
            with self._lock:
                self.bar.update(nbytes)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()




def _run_threads(jobs: list[FileJob], n_workers: int, progress: _Progress) -> list[BuildResult]:
    """Run the jobs (files the survey found not fresh), ``n_workers`` files at a time on
    threads.

    Threads, not processes: a build works the same in a script without a ``__main__`` guard,
    a notebook or a DataLoader worker, and the scan's inner loops release the GIL (the
    compiled header walk, CRC32C, numpy's bulk checks, file reads).
    """
    if n_workers == 1:
        return [job.run(False, progress.update) for job in jobs]
    pool = cf.ThreadPoolExecutor(n_workers, thread_name_prefix="ofindex-build")
    futures = {pool.submit(job.run, False, progress.update): i for i, job in enumerate(jobs)}
    results: list[BuildResult | None] = [None] * len(jobs)
    try:
        for fut in cf.as_completed(futures):
            results[futures[fut]] = fut.result()
    except BaseException:
        progress.stopped.set()  # running scans stop at their next block
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return [r for r in results if r is not None]
