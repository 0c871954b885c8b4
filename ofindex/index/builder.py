"""The index builder: index every data file of a path spec, then write the dataset manifest."""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
import warnings
from typing import Any

from ..errors import FormatDetectionError
from ..formats.framing import RecordFormat
from ..formats.location import DatasetLocation, resolve
from ..formats.manifest import manifest_url_for, write_manifest
from ..storage import PathSpec, Storage
from .build_file import BuildResult, build_file

#: Remote files indexed at once by default (threads; each holds about two chunks).
REMOTE_WORKERS = 8


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
    checksums: bool = False,
) -> list[BuildResult]:
    """Index data files (a path, directory, glob or list of them); returns one result per file.

    Each file is scanned once and gets a sidecar ``<file>.ofidx`` (or one in ``index_dir``,
    local or another bucket, for read-only data). ``verify=True`` also checks every record's
    data CRC. ``checksums=True`` stores the CRC32C of every payload in the sidecars, which
    reads with ``verify=True`` check for OFRecord, a format without CRCs of its own (this
    reads every payload, like ``verify``). Bad data raises an error naming the file, byte
    offset and record number;
    ``allow_partial=True`` indexes the valid prefix of such a file instead and warns.
    ``workers`` files are scanned at once on threads (default: one per core for local
    files, 8 for remote ones, each streaming its file once in 8 MiB requests).

    ``manifest``: by default a directory gets ``ofindex-manifest.json`` (in ``index_dir`` when
    given, else in the directory); ``True`` writes one for a glob or list too (files of one
    directory), a string writes it there, ``False`` writes none. See
    :mod:`ofindex.formats.manifest`.
    """
    location = resolve(paths, index_dir=index_dir, storage_options=storage_options,
                       manifest=False)
    results = build_location(location, format=format, verify=verify,
                             allow_partial=allow_partial, workers=workers, progress=progress,
                             manifest=manifest, checksums=checksums)
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
    checksums: bool = False,
) -> list[BuildResult]:
    """Index the files of a resolved location (see :func:`build_index` for the options)."""
    storage, files = location.storage, location.files
    fmt = None if format == "auto" else RecordFormat.parse(format)
    targets = [location.sidecar_of(f) for f in files]
    default = (os.cpu_count() or 1) if storage.cheap_seeks else REMOTE_WORKERS
    n_workers = max(1, min(workers or default, len(files)))
    jobs: list[Job] = [(storage, f, fmt, ist, ipath, verify, allow_partial)
                       for f, (ist, ipath) in zip(files, targets, strict=True)]
    bar = _Progress(storage, files, progress)
    try:
        results = _run(jobs, n_workers, bar, checksums)
    finally:
        bar.close()
    results = _settle_empty_files(results, files, targets, storage, fmt, checksums)
    target = _manifest_target(location, manifest)
    if target is not None and results:
        url, data_dir = target
        write_manifest(
            url, results[0].format or RecordFormat.TFRECORD, storage, files, data_dir,
            location.index_dir, [r.records for r in results], [r.size for r in results],
            [r.fingerprint for r in results], location.storage_options,
        )
    return results


def _manifest_target(
    location: DatasetLocation, manifest: bool | str | None
) -> tuple[str, str] | None:
    """``(manifest URL, data directory)`` per the rule in :mod:`ofindex.formats.manifest`."""
    if manifest is False:
        return None
    storage = location.storage
    data_dir = {storage.dirname(f) for f in location.files}
    if isinstance(manifest, (str, os.PathLike)):
        if len(data_dir) != 1:
            raise ValueError("a manifest lists the files of one directory; these are in "
                             f"{len(data_dir)} directories")
        return os.fspath(manifest), data_dir.pop()
    if not (location.directory is not None or manifest is True):
        return None
    if len(data_dir) != 1:
        if manifest is True:
            raise ValueError("manifest=True needs the files of one directory; these are in "
                             f"{len(data_dir)} directories")
        return None
    directory = data_dir.pop()
    where = location.index_dir if location.index_dir is not None else storage.url(directory)
    return manifest_url_for(where), directory


class _Cancelled(Exception):
    """Raised inside a worker thread once another file failed or the caller was interrupted."""


class _Progress:
    """Bytes scanned across all files (a tqdm bar when enabled), and the stop signal that
    lets worker threads end soon after a failure or Ctrl-C."""

    def __init__(self, storage: Storage, files: list[str], enabled: bool) -> None:
        self.bar: Any = None
        if enabled:
            from tqdm.auto import tqdm

            total = sum(storage.stamp(f).size for f in files)
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


Job = tuple[Storage, str, "RecordFormat | None", Storage, str, bool, bool]


def _run(jobs: list[Job], n_workers: int, progress: _Progress,
         checksums: bool) -> list[BuildResult]:
    """Run the jobs, ``n_workers`` files at a time on threads.

    Threads, not processes: a build works the same in a script without a ``__main__`` guard,
    a notebook or a DataLoader worker, and the scan's inner loops release the GIL (the
    compiled header walk, CRC32C, numpy's bulk checks, file reads).
    """
    def run(job: Job) -> BuildResult:
        return build_file(*job, progress=progress.update, checksums=checksums)

    if n_workers == 1:
        return [run(job) for job in jobs]
    pool = cf.ThreadPoolExecutor(n_workers, thread_name_prefix="ofindex-build")
    futures = {pool.submit(run, job): i for i, job in enumerate(jobs)}
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


def _settle_empty_files(
    results: list[BuildResult], files: list[str], targets: list[tuple[Storage, str]],
    storage: Storage, fmt: RecordFormat | None, checksums: bool,
) -> list[BuildResult]:
    """Give empty files (format unknown under ``auto``) the format of their siblings."""
    if all(r.format is not None for r in results):
        return results
    seen = {r.format for r in results if r.format is not None}
    if len(seen) != 1:
        empties = [r.data_url for r in results if r.format is None]
        raise FormatDetectionError(
            f"{empties[0]}: empty file and its format cannot be taken from other files "
            f"(formats seen: {sorted(f.name for f in seen) or 'none'}); pass format='tfrecord' "
            "or format='ofrecord'"
        )
    (only,) = seen
    out = []
    for r, f, (ist, ipath) in zip(results, files, targets, strict=True):
        if r.format is None:
            r = build_file(storage, f, only, ist, ipath, False, False, checksums=checksums)
        out.append(r)
    return out
