"""The index builder: index every data file of a path spec, then write the dataset manifest."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
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
) -> list[BuildResult]:
    """Index data files (a path, directory, glob or list of them); returns one result per file.

    Each file is scanned once and gets a sidecar ``<file>.ofidx`` (or one in ``index_dir``,
    local or another bucket, for read-only data). ``verify=True`` also checks every record's
    data CRC. Bad data raises an error naming the file, byte offset and record number;
    ``allow_partial=True`` indexes the valid prefix of such a file instead and warns.
    ``workers`` files are scanned in parallel (processes for local files; threads for remote
    ones, default 8, each streaming its file once in 8 MiB requests).

    ``manifest``: by default a directory gets ``ofindex-manifest.json`` (in ``index_dir`` when
    given, else in the directory); ``True`` writes one for a glob or list too (files of one
    directory), a string writes it there, ``False`` writes none. See
    :mod:`ofindex.formats.manifest`.
    """
    location = resolve(paths, index_dir=index_dir, storage_options=storage_options,
                       manifest=False)
    results = build_location(location, format=format, verify=verify,
                             allow_partial=allow_partial, workers=workers, progress=progress,
                             manifest=manifest)
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
) -> list[BuildResult]:
    """Index the files of a resolved location (see :func:`build_index` for the options)."""
    storage, files = location.storage, location.files
    fmt = None if format == "auto" else RecordFormat.parse(format)
    targets = [location.sidecar_of(f) for f in files]
    default = (os.cpu_count() or 1) if storage.cheap_seeks else REMOTE_WORKERS
    n_workers = max(1, min(workers or default, len(files)))
    bar = _progress_bar(storage, files, progress)
    jobs = [(storage, f, fmt, ist, ipath, verify, allow_partial)
            for f, (ist, ipath) in zip(files, targets, strict=True)]
    try:
        if n_workers == 1:
            update = bar.update if bar is not None else None
            results = [build_file(*job, progress=update) for job in jobs]
        else:
            results = _run_parallel(jobs, n_workers, storage.cheap_seeks, bar)
    finally:
        if bar is not None:
            bar.close()
    results = _settle_empty_files(results, files, targets, storage, fmt)
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


def _run_parallel(jobs, n_workers, local, bar) -> list[BuildResult]:
    if local:  # scanning small records is CPU-bound Python: use processes
        pool: cf.Executor = cf.ProcessPoolExecutor(
            n_workers, mp_context=multiprocessing.get_context("spawn")
        )
    else:
        pool = cf.ThreadPoolExecutor(n_workers)
    with pool:
        futures = {pool.submit(build_file, *job): i for i, job in enumerate(jobs)}
        results: list[BuildResult | None] = [None] * len(jobs)
        try:
            for fut in cf.as_completed(futures):
                res = fut.result()
                results[futures[fut]] = res
                if bar is not None:
                    bar.update(res.size)
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    return results  # type: ignore[return-value]


def _settle_empty_files(results, files, targets, storage, fmt) -> list[BuildResult]:
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
            r = build_file(storage, f, only, ist, ipath, False, False)
        out.append(r)
    return out


def _progress_bar(storage: Storage, files: list[str], enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    total = sum(storage.stamp(f).size for f in files)
    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="indexing")
