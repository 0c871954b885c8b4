"""One build task: index one data file, unless its sidecar is already fresh.

A :class:`FileJob` is what a build runs for each file, on a local thread or on a cluster
worker (``build_index(..., executor=...)``): its fields (storages, paths, options) pickle, and
its result (:class:`BuildResult`) is small.
"""

import dataclasses
from collections.abc import Callable

from ..formats.framing import RecordFormat
from ..formats.seekpoints import DEFAULT_SPACING
from ..formats.sidecar_header import Compression
from ..storage import FileStamp, Storage
from .build_file import BuildResult, build_file
from .column_pass import add_columns
from .growth import extend_file
from .resume import as_asked, fresh_result
from .scan import RecordSink


@dataclasses.dataclass(frozen=True)
class FileJob:
    """Everything needed to index one data file.

    Attributes:
        storage: Storage of the data file.
        path: The data file.
        format: Its framing, or ``None`` to detect it.
        index_storage: Storage of the sidecar.
        index_path: Where the sidecar goes.
        verify: Also check every payload CRC (a verifying build re-reads every file: it
            does not resume).
        allow_partial: Index the valid prefix of a damaged file instead of failing.
        compression: How the file is compressed, or ``None`` to detect it.
        spacing: Uncompressed bytes between seek points of a compressed file (``None``: the
            default, and a fresh sidecar of any spacing is kept).
        checksums: Store the CRC32C of every payload in the sidecar (``None``: for OFRecord).
        stamp: The file's stamp when the build first looked at it (its framing was detected
            then), or ``None``; a file changed since is refused.
        columns: Features to store as column sidecars (see :mod:`ofindex.columns`).
        existing: What the file's fresh sidecar says, when the job only adds the columns
            that are missing or stale beside it (see :mod:`.column_pass`); else ``None``.
        extend: A file that grew since its sidecar was written is indexed from where the
            sidecar ends, and the sidecar grows (:mod:`.growth`); ``False`` indexes it whole.
        open_tail: The file may still be being written: a record cut short at its end is not
            written yet (the index ends before it, flagged open), and a file that grows while
            it is scanned is indexed as far as it was.
        sink: Sees every record scanned (:class:`~.scan.RecordSink`; a build that needs more
            of the records than their offsets, such as the TensorBoard events index).
    """

    storage: Storage
    path: str
    format: RecordFormat | None
    index_storage: Storage
    index_path: str
    verify: bool = False
    allow_partial: bool = False
    compression: Compression | None = None
    spacing: int | None = None
    checksums: bool | None = None
    stamp: FileStamp | None = None
    columns: tuple[str, ...] = ()
    existing: BuildResult | None = None
    extend: bool = True
    open_tail: bool = False
    sink: RecordSink | None = None

    def fresh(self) -> BuildResult | None:
        """What the file's existing sidecar says, when it is fresh (see :func:`.fresh_result`).

        Returns:
            The :class:`BuildResult` of the fresh sidecar (``skipped=True``), or ``None`` when
            the file must be indexed.
        """
        return fresh_result(self.storage, self.path, self.format, self.index_storage,
                            self.index_path, self.compression, self.checksums, self.spacing)

    def run(self, resume: bool = True,
            progress: Callable[[int], None] | None = None) -> BuildResult:
        """Index the file where this runs (a thread or a cluster worker).

        Args:
            resume: Skip the file when its sidecar is fresh (see :func:`.fresh_result`).
            progress: Called with the number of bytes scanned (or skipped), now and then.

        Returns:
            What was indexed, or what the fresh sidecar holds (``skipped=True``).

        Raises:
            CorruptRecordError, StaleIndexError, FormatDetectionError: As
                :func:`~ofindex.index.build_file.build_file`.
        """
        if self.existing is not None:
            add_columns(self.storage, self.path, self.index_storage, self.index_path,
                        self.columns, self.existing, progress)
            return self.existing
        if resume and not self.verify:
            done = self.fresh()
            if done is not None:
                if self.columns:
                    add_columns(self.storage, self.path, self.index_storage, self.index_path,
                                self.columns, done, progress)
                elif progress is not None:
                    progress(done.size)
                return done
        grown = self.grow(progress)
        if grown is not None:
            if self.columns:  # the columns of a grown file are made again beside it
                add_columns(self.storage, self.path, self.index_storage, self.index_path,
                            self.columns, grown)
            return grown
        return build_file(self.storage, self.path, self.format, self.index_storage,
                          self.index_path, self.verify, self.allow_partial, progress=progress,
                          compression=self.compression,
                          spacing=self.spacing or DEFAULT_SPACING,
                          checksums=self.checksums, expect=self.stamp,
                          columns=self.columns, open_tail=self.open_tail, sink=self.sink)

    def grow(self, progress: Callable[[int], None] | None = None) -> BuildResult | None:
        """Index only what the file gained, when it grew since its sidecar was written and
        that sidecar is what this build asks for (:func:`.resume.as_asked`); ``None`` when it
        must be indexed whole (or ``extend`` is off, or the build verifies every record or
        keeps a damaged file's prefix).

        Raises:
            CorruptRecordError, StaleIndexError: As :func:`.growth.extend_file`.
        """
        if not self.extend or self.verify or self.allow_partial:
            return None
        return extend_file(self.storage, self.path, self.index_storage, self.index_path,
                           stamp=self.stamp, open_tail=self.open_tail, progress=progress,
                           asked=lambda h: as_asked(h, self.format, self.compression,
                                                    self.checksums, self.spacing),
                           sink=self.sink)
