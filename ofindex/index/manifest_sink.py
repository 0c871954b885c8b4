"""Where a build's results go as they arrive, to become its manifest.

A build writes its manifest (:mod:`ofindex.formats.manifest`) from one result per file, in
dataset order. :class:`ManifestSink` takes them one at a time: into a compact manifest's
writer, which encodes a page at a time (a million-file cluster build never holds every row),
or into the columns of a JSON manifest (small datasets). :meth:`ManifestSink.close` writes
the file and, when it has a standard name (``ofindex-manifest.json`` or
``ofindex-manifest.bin``, in the default place or named by the caller), removes the other
kind's file in the same directory: readers look for the compact one first, so an older one
left beside a new JSON manifest would be read in its place.
"""

from __future__ import annotations

from ..formats.compact_manifest import COMPACT_NAME, CompactManifestFile, writes_compact
from ..formats.dataset_identity import dataset_identity
from ..formats.framing import RecordFormat
from ..formats.location import DatasetLocation
from ..formats.manifest import MANIFEST_NAME, write_manifest
from ..storage import Storage
from .build_file import BuildResult


class ManifestSink:
    """The manifest of a build, fed one result per file in dataset order.

    Args:
        location: What is built.
        target: ``(manifest URL, data directory, named)`` (``named``: the caller chose the
            place; else the URL is the JSON manifest's default place).
        framing: The dataset's record framing.
        paths: The data files, in dataset order.
    """

    def __init__(self, location: DatasetLocation, target: tuple[str, str, bool],
                 framing: RecordFormat, paths: list[str]) -> None:
        url, self.data_dir, self.named = target
        self.location, self.framing, self.paths = location, framing, paths
        storage, storages = location.storage, location.storages
        index_dir = location.sidecars.index_dir_of(storage, self.data_dir)
        self.index_url = None if index_dir is None else index_dir[0].url(index_dir[1])
        self.storage, self.json_path = storages.for_url(url)
        self.compact_path = self.storage.join(self.storage.dirname(self.json_path), COMPACT_NAME)
        self.url = url
        self.compact: CompactManifestFile | None = None
        self.rows: list[BuildResult] = []
        if writes_compact(url, len(paths), self.named):
            self.compact = CompactManifestFile(
                url if self.named else self.storage.url(self.compact_path), framing, storage,
                self.data_dir, self.index_url, storages, len(paths))
        self.added = 0
        written = self.json_path if self.compact is None or self.named else self.compact_path
        #: The other kind's manifest this one replaces, or ``None`` (another name)
        self.other = _other_kind(self.storage, written)

    def add(self, result: BuildResult) -> None:
        """The next file's result."""
        path = self.paths[self.added]
        self.added += 1
        if self.compact is None:
            self.rows.append(result)
            return
        self.compact.add(path, result.records, result.size, result.fingerprint,
                         result.body_crc, result.compression, result.partial, result.content)

    def close(self) -> None:
        """Write the manifest (and, under a standard name, remove the other kind's file in
        its directory)."""
        if self.compact is not None:
            self.compact.close()
        else:
            rows = self.rows
            crcs = [r.body_crc for r in rows]
            identity = dataset_identity([r.records for r in rows], [r.size for r in rows],
                                        [r.content for r in rows], crcs)
            write_manifest(
                self.url, self.framing, self.location.storage, self.paths, self.data_dir,
                self.index_url, [r.records for r in rows], [r.size for r in rows],
                [r.fingerprint for r in rows], self.location.storages,
                partial=[r.partial for r in rows], compressions=[r.compression for r in rows],
                body_crcs=None if None in crcs else [c for c in crcs if c is not None],
                identity=identity)
        if self.other is not None:
            self.storage.remove(self.other)


def _other_kind(storage: Storage, path: str) -> str | None:
    """The other kind's manifest beside a manifest written at ``path`` under a standard name
    (``ofindex-manifest.json`` and ``ofindex-manifest.bin``), or ``None`` for another name."""
    other = {MANIFEST_NAME: COMPACT_NAME, COMPACT_NAME: MANIFEST_NAME}.get(
        storage.basename(path))
    return None if other is None else storage.join(storage.dirname(path), other)
