"""A dataset written by many tasks of an engine (Spark executors, Beam workers), published
once when the job ends.

The driver makes a :class:`WriteJob` (it refuses a directory that holds data, as
:class:`~ofindex.write.ShardedWriter` does, and picks the job's token). Each task makes a
:class:`TaskWriter` from the pickled job: its shards and their sidecars are written under
hidden names carrying the token (``.<token>-<stream>-<n>.writing``, which nothing opens),
and :meth:`TaskWriter.close` reports them (:class:`StagedShard`). The driver's
:meth:`WriteJob.commit` takes the reports of the tasks that succeeded, in task order, and
publishes them as :class:`~ofindex.write.ShardedWriter` publishes its own: the final names
``part-00000-of-N``, the sidecars moved, the manifest written last; then it removes what
failed or repeated task attempts left (hidden files with the token that no report names).
:meth:`WriteJob.abort` removes everything with the token: an aborted job leaves no dataset.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ofindex.decode.spec import Spec
from ofindex.encode.nulls import REFUSE, Nulls
from ofindex.write.sharded import PATTERN, ShardedWriter, ShardStream, WriteSummary, _Staged

__all__ = ["StagedShard", "TaskWriter", "WriteJob"]


@dataclasses.dataclass(frozen=True)
class StagedShard:
    """A shard a task wrote under its hidden name, with its sidecar.

    Attributes:
        path: The hidden data file (a path on the job's storage).
        records: Its records.
        bytes: Its size.
        task: The task that wrote it (shards are published in task order).
        shard: Its place among the task's shards.
    """

    path: str
    records: int
    bytes: int
    task: int
    shard: int


class WriteJob:
    """The settings of a dataset written by many tasks, and its publication (picklable: the
    driver sends it to the tasks).

    Args:
        directory: The dataset's directory, local or a bucket URL; it must hold no data files.
        format: ``"tfrecord"`` or ``"ofrecord"``.
        shard_bytes: A task starts a new shard before one would pass this many bytes
            (default 256 MiB when ``shard_records`` is not given either).
        shard_records: A task starts a new shard after this many records.
        pattern: The shards' final names (``str.format`` fields ``shard`` and ``count``).
        compression: ``"gzip"``, ``"zlib"`` or ``None``.
        spec: The spec feature mappings and columns must fit, or ``None``.
        storage_options: Options for the fsspec filesystem.
        checksums: Per-payload CRC32Cs in the sidecars (default: for OFRecord).
        compression_level: zlib's level.
        nulls: What a null inside a list becomes (see :mod:`ofindex.encode.nulls`).

    Raises:
        DatasetExistsError: ``directory`` already holds data files.
        ValueError: A bad setting (as :class:`~ofindex.write.ShardedWriter` raises it).
    """

    def __init__(self, directory: str | os.PathLike[str], format: str = "tfrecord", *,
                 shard_bytes: int | None = None, shard_records: int | None = None,
                 pattern: str = PATTERN, compression: str | None = None, spec: Spec = None,
                 storage_options: dict[str, Any] | None = None, checksums: bool | None = None,
                 compression_level: int = -1, nulls: Nulls = REFUSE) -> None:
        self.directory = os.fspath(directory)
        self.settings: dict[str, Any] = {
            "format": format, "shard_bytes": shard_bytes, "shard_records": shard_records,
            "pattern": pattern, "compression": compression, "spec": spec,
            "storage_options": storage_options, "checksums": checksums,
            "compression_level": compression_level, "nulls": nulls}
        #: Marks the job's hidden files (the names of no other writer's files carry it).
        self.token = secrets.token_hex(4)
        writer = self.writer()  # checks the settings and the directory now, on the driver
        self.url = writer.url

    def writer(self) -> ShardedWriter:
        """A :class:`~ofindex.write.ShardedWriter` of this job's directory and token.

        Raises:
            DatasetExistsError: The directory holds data files.
        """
        writer = ShardedWriter(self.directory, **self.settings)
        writer.token = self.token
        return writer

    def task(self, task: int) -> TaskWriter:
        """The writer of one task (call it where the task runs).

        Args:
            task: The task's number: its shards are published after those of lower numbers.

        Returns:
            A :class:`TaskWriter`.
        """
        return TaskWriter(self, task)

    def commit(self, reports: Iterable[Sequence[StagedShard]]) -> WriteSummary:
        """Publish the shards the successful tasks reported, with the manifest, and remove
        what other attempts left.

        Args:
            reports: What each successful task's :meth:`TaskWriter.close` returned.

        Returns:
            What was published.

        Raises:
            DatasetExistsError: Data files appeared in the directory meanwhile (nothing is
                published; the job's files are removed).
            ValueError: Two reports name one file (a task counted twice).
        """
        staged = sorted((s for report in reports for s in report),
                        key=lambda s: (s.task, s.shard, s.path))
        paths = [s.path for s in staged]
        if len(set(paths)) != len(paths):
            raise ValueError(f"{self.url}: a shard is reported twice: commit the report of "
                             "each successful task once")
        writer = self.writer()
        stream = writer.stream()
        stream.staged = [_Staged(s.path, s.records, s.bytes) for s in staged]
        stream.closed = True
        summary = writer.close()  # on failure: drops the staged files and the token's
        writer.remove_hidden()  # failed or repeated attempts' files: reported by no one
        return summary

    def abort(self) -> None:
        """Remove every file of the job (its token's hidden files): nothing is published."""
        self.writer().remove_hidden()


class TaskWriter:
    """The shards one task writes (see :class:`WriteJob`); its methods are those of
    :class:`~ofindex.write.ShardStream`.

    Args:
        job: The job.
        task: The task's number.
    """

    def __init__(self, job: WriteJob, task: int) -> None:
        self.task = int(task)
        # a stream number of its own for each attempt: repeated or speculative attempts of
        # one task write beside each other, and commit publishes the reported one only
        self._stream = ShardStream(job.writer(), secrets.randbits(48))

    def __len__(self) -> int:
        return self._stream.records

    def write(self, record: Any) -> None:
        """Write one record: payload bytes, a protobuf message or ``{name: value}``.

        Raises:
            EncodeError: Features that cannot be encoded.
        """
        self._stream.write(record)

    def write_many(self, records: Iterable[Any]) -> int:
        """Write many records.

        Returns:
            How many were written.

        Raises:
            EncodeError: Features that cannot be encoded.
        """
        return self._stream.write_many(records)

    def write_columns(self, columns: Mapping[str, Any] | Any) -> int:
        """Encode and write a batch of columns (``{name: column}`` or an Arrow table).

        Returns:
            How many records were written.

        Raises:
            EncodeError: A column or value that cannot be encoded.
        """
        return self._stream.write_columns(columns)

    def close(self) -> list[StagedShard]:
        """Finish the task's last shard.

        Returns:
            The task's report for :meth:`WriteJob.commit`.
        """
        self._stream.close()
        return [StagedShard(s.path, s.records, s.bytes, self.task, k)
                for k, s in enumerate(self._stream.staged)]

    def abort(self) -> None:
        """Remove what this task wrote."""
        self._stream.abort()
