"""A build's first look at every file, before it writes anything.

Each file is looked at once, by name, by its fresh sidecar (a resumed build) or by its first
bytes, so that the build can skip the files that are plainly not record files (see
:mod:`ofindex.formats.strays`), refuse a mix of TFRecord and OFRecord files, and give empty
files the dataset's framing, all before any sidecar or manifest is written.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
from collections.abc import Callable
from typing import Literal

from ..errors import FormatDetectionError, hint
from ..formats.detect import FORMAT_HINT, HEAD_BYTES, detect_layout, may_hold_records, sniff_framing
from ..formats.framing import RecordFormat
from ..formats.sidecar_header import Compression
from ..formats.strays import looks_like_shard, name_pattern, shown
from ..storage import FileStamp, is_document_name
from .build_file import BuildResult
from .job import FileJob


@dataclasses.dataclass(frozen=True)
class FileSurvey:
    """What a first look at one data file tells.

    Attributes:
        url: The file.
        stray: ``"name"`` or ``"bytes"`` when it is plainly not a record file by that
            (skipped), else ``""``.
        fresh: Its existing sidecar is fresh: nothing to index (resumed build).
        stamp: Its size and fingerprint when it was looked at.
        compression: How it is compressed (``None``: not looked at, indexing detects it).
        seen: The framing its first bytes (or its fresh sidecar) show, or ``None`` when they
            show none (an empty stream, or compressed bytes that do not inflate).
        looked: Its first bytes were read (a build of one file named on its own leaves that
            to the indexing, which reads them anyway).
    """

    url: str
    stray: Literal["", "name", "bytes"] = ""
    fresh: BuildResult | None = None
    stamp: FileStamp | None = None
    compression: Compression | None = Compression.NONE
    seen: RecordFormat | None = None
    looked: bool = True


def survey_file(job: FileJob, *, named: bool, resume: bool, look: bool = True) -> FileSurvey:
    """Look at one file: a stray, fresh, or its compression and framing.

    Args:
        job: The file's build job (its ``format`` and ``compression`` as asked for).
        named: The user named the file on its own: it is never a stray.
        resume: Take a fresh sidecar's word for the file (unless the job verifies).
        look: Read its first bytes (``False`` only for a named file).

    Returns:
        What the file is.

    Raises:
        FormatDetectionError: A file that is not a stray fits no framing, or is not the
            compression asked for.
        DataFileNotFoundError, StorageError: The file cannot be read.
    """
    storage, path = job.storage, job.path
    url = storage.url(path)
    if not named and is_document_name(storage.basename(path)):
        return FileSurvey(url, stray="name")
    if resume and not job.verify:
        done = job.fresh()
        if done is not None:
            return FileSurvey(url, fresh=done, compression=done.compression, seen=done.format)
    if not look:
        return FileSurvey(url, compression=job.compression, looked=False)
    stamp = storage.stamp(path)
    head = storage.read(path, 0, min(stamp.size, HEAD_BYTES)) if stamp.size else b""
    if not named and not may_hold_records(head, stamp.size):
        return FileSurvey(url, stray="bytes")
    compression, _ = detect_layout(head, stamp.size, path=url, compression=job.compression,
                                   fmt=job.format)
    return FileSurvey(url, stamp=stamp, compression=compression,
                      seen=sniff_framing(head, stamp.size, compression))


def survey_files(jobs: list[FileJob], named: frozenset[str], resume: bool,
                 workers: int) -> list[FileSurvey]:
    """:func:`survey_file` for every job, ``workers`` at a time on threads (results in job
    order; on the first error the surveys not started are cancelled and it is raised).

    A file whose first bytes fit no record file but whose name is a shard's (named like the
    record files beside it, :func:`~ofindex.formats.strays.looks_like_shard`) is a damaged
    shard, not a stray: it is looked at again as if named (an error, or indexed as asked).
    One file named on its own is not read here: nothing can be skipped or mixed, and
    indexing reads its first bytes anyway.
    """
    look = not (len(jobs) == 1 and jobs[0].path in named)
    surveys = _map(lambda job: survey_file(job, named=job.path in named, resume=resume,
                                           look=look), jobs, workers)
    patterns = {name_pattern(job.storage.basename(job.path))
                for job, s in zip(jobs, surveys, strict=True) if not s.stray}
    return [survey_file(job, named=True, resume=False)
            if s.stray == "bytes" and looks_like_shard(job.storage.basename(job.path), patterns)
            else s for job, s in zip(jobs, surveys, strict=True)]


def _map(survey: Callable[[FileJob], FileSurvey], jobs: list[FileJob],
         workers: int) -> list[FileSurvey]:
    if workers <= 1 or len(jobs) <= 1:
        return [survey(job) for job in jobs]
    pool = cf.ThreadPoolExecutor(min(workers, len(jobs)), thread_name_prefix="ofindex-survey")
    try:
        futures = [pool.submit(survey, job) for job in jobs]
        return [f.result() for f in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


_ARG = {RecordFormat.TFRECORD: hint("format='tfrecord'", "--format tfrecord"),
        RecordFormat.OFRECORD: hint("format='ofrecord'", "--format ofrecord")}


def one_framing(surveys: list[FileSurvey], fmt: RecordFormat | None) -> RecordFormat:
    """The framing of a dataset's files, refusing files of the other framing.

    Args:
        surveys: The record files (no strays).
        fmt: The framing asked for, or ``None`` (auto).

    Returns:
        ``fmt``, else the one framing the files show (TFRecord when none shows one: empty
        files hold zero records of either): what files that show none are indexed as.

    Raises:
        FormatDetectionError: Files of both framings (under auto), or files that show the
            other framing than ``fmt``, named with their counts.
    """
    if fmt is not None:
        other = [s.url for s in surveys if s.seen is not None and s.seen is not fmt]
        if other:
            raise FormatDetectionError(_not_of(fmt, other))
        return fmt
    tf = [s.url for s in surveys if s.seen is RecordFormat.TFRECORD]
    of = [s.url for s in surveys if s.seen is RecordFormat.OFRECORD]
    if tf and of:
        raise FormatDetectionError(
            f"TFRecord and OFRecord files in one dataset: {len(tf)} TFRecord ({shown(tf)}) and "
            f"{len(of)} OFRecord ({shown(of)}); build each kind as its own dataset (a glob or "
            f"a list of its files), or pass {FORMAT_HINT} if detection is wrong"
        )
    return RecordFormat.OFRECORD if of else RecordFormat.TFRECORD


def _not_of(fmt: RecordFormat, urls: list[str]) -> str:
    """Why files of the other framing than ``fmt`` are refused, and what to do."""
    one = len(urls) == 1
    count = f"{len(urls)} file{'' if one else 's'}"
    if fmt is RecordFormat.TFRECORD:
        return (f"{_ARG[fmt]} was given but {count} {'does' if one else 'do'} not start with a "
                f"valid TFRecord header: {shown(urls)}; they look like OFRecord files (build "
                f"them as their own dataset with {_ARG[RecordFormat.OFRECORD]}) or are damaged "
                "at their first record (re-copy them)")
    return (f"{_ARG[fmt]} was given but {count} start{'s' if one else ''} with a valid TFRecord "
            f"header: {shown(urls)}; they are TFRecord files: build them as their own dataset "
            f"with {_ARG[RecordFormat.TFRECORD]}")
