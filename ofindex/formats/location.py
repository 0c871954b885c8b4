"""Where a dataset is: its data files, where each sidecar lives, and its manifest.

A path spec (a file, a directory, a glob, a URL, or a list of them) is resolved once into a
:class:`DatasetLocation`, which the reader and the builder both take. Every storage involved
(the manifest's, the data's, the sidecars') comes from the call's one
:class:`~ofindex.storage.Storages`: one object per protocol, no helper that resolves the same
URL again.

Sidecars live in the data directory's index directory, ``<data dir>.ofindex/<file
name>.ofidx`` (see :mod:`.placement`), with ``index_dir`` (a local directory or another
bucket, for read-only data) in ``<index_dir>/<file name>.ofidx``, and for datasets indexed by
ofindex 0.2 beside their data file (``<file>.ofidx``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from ..errors import DataFileNotFoundError, ManifestError, RangeReadError, SidecarError
from ..storage import (
    DataFiles,
    PathSpec,
    Storage,
    Storages,
    as_list,
    is_glob,
    is_local_url,
    list_data_files,
)
from .compact_manifest import COMPACT_NAME, CompactManifest, open_compact
from .index_cache import cached_index_dir
from .lazy_rows import LazyRows
from .manifest import Manifest, decode_manifest, manifest_url_for, read_manifest
from .manifest_binary import HEADER_SIZE
from .placement import Layout, SidecarPlace, new_index_layout, sibling_index_dir
from .shard_set import check_shard_set
from .sidecar import SUFFIX


def sidecar_place(data_storage: Storage, index_dir: str | os.PathLike[str] | None,
                  storages: Storages, layout: Layout = Layout.SIBLING) -> SidecarPlace:
    """Resolve ``index_dir`` (or ``layout`` without one) once into a :class:`SidecarPlace`."""
    if index_dir is None:
        return SidecarPlace(Layout.SIBLING if layout is Layout.INDEX_DIR else layout)
    storage, directory = storages.for_url(os.fspath(index_dir))
    return SidecarPlace(Layout.INDEX_DIR, storage, directory)


def sidecar_location(storage: Storage, data_path: str, index_dir: str | None,
                     storages: Storages) -> tuple[Storage, str]:
    """Return ``(storage, path)`` of where a new sidecar of one data file, named on its own,
    goes: ``index_dir``; else where its sidecar is now; else where
    :func:`~ofindex.formats.placement.new_index_layout` puts a single file's index."""
    layout = Layout.INDEX_DIR if index_dir is not None else (
        existing_layout(storage, data_path)
        or new_index_layout(storage, storage.dirname(data_path), whole_directory=False))
    return sidecar_place(storage, index_dir, storages, layout).of(storage, data_path)


def existing_layout(storage: Storage, data_path: str) -> Layout | None:
    """The layout the sidecar of ``data_path`` was written with, when it has one: the
    default place is looked at first, then the per-user index cache (local files), then
    beside the data (ofindex 0.2 and earlier)."""
    for layout in (Layout.SIBLING, Layout.USER_CACHE):
        if layout is Layout.USER_CACHE and not storage.is_local:
            continue
        place_storage, path = SidecarPlace(layout).of(storage, data_path)
        if place_storage.exists(path):
            return layout
    if storage.exists(data_path + SUFFIX):
        return Layout.BESIDE
    return None


def _layout(storage: Storage, files: Sequence[str], named: frozenset[str],
            building: bool) -> Layout:
    """The layout of a location's sidecars without ``index_dir``: where the first file's
    sidecar is, else where :func:`~ofindex.formats.placement.new_index_layout` puts new ones
    (also, when ``building``, instead of the per-user cache when the rule puts them
    elsewhere: a directory built as a whole gets its index in its documented place)."""
    whole = any(f not in named for f in files)
    found = existing_layout(storage, files[0])
    if found is not None and not (building and found is Layout.USER_CACHE):
        return found
    rule = new_index_layout(storage, storage.dirname(files[0]), whole_directory=whole)
    return found if found is not None and rule is Layout.USER_CACHE else rule


#: A manifest of either kind: JSON (read whole), or compact (read by pages).
AnyManifest = Manifest | CompactManifest


class ManifestFiles(LazyRows[str]):
    """The data files a compact manifest lists, each path made when asked for."""

    def __init__(self, prefix: str, manifest: CompactManifest) -> None:
        self.prefix, self.manifest = prefix, manifest

    def __len__(self) -> int:
        return len(self.manifest)

    def make(self, k: int) -> str:
        """The path of file ``k``."""
        return self.prefix + self.manifest.name(k)


@dataclasses.dataclass(frozen=True)
class DatasetLocation:
    """A path spec resolved once: what both the reader and the builder work from.

    Attributes:
        storage: Storage of the data files.
        files: Data file paths on ``storage``, in dataset order.
        sidecars: Where each file's sidecar lives.
        manifest: The manifest the files came from, or ``None`` (files listed or named).
        directory: The one data directory the spec named, or ``None`` (files, globs, lists).
        index_dir: ``index_dir`` as the caller gave it (for messages and manifests).
        storages: The call's storages (every storage here came from it).
        named: Files the user named one by one (not found by a directory or glob): never
            skipped as files that are not record files.
        whole: No shard is missing (``False``: some are, and ``allow_missing_shards=True``
            accepted it; no manifest is written for such a set).
    """

    storage: Storage
    files: Sequence[str]
    sidecars: SidecarPlace
    manifest: AnyManifest | None = None
    directory: str | None = None
    index_dir: str | None = None
    storages: Storages = dataclasses.field(default_factory=Storages)
    named: frozenset[str] = frozenset()
    whole: bool = True

    def sidecar_of(self, data_path: str) -> tuple[Storage, str]:
        """Return ``(storage, path)`` of the sidecar of ``data_path``."""
        return self.sidecars.of(self.storage, data_path)

    def url(self, data_path: str) -> str:
        """Return the URL of a data file, as messages show it."""
        return self.storage.url(data_path)

    def subset(self, files: Sequence[str]) -> DatasetLocation:
        """The same location restricted to ``files`` (no manifest, no directory)."""
        return dataclasses.replace(self, files=list(files), manifest=None, directory=None)


def resolve(
    paths: PathSpec,
    *,
    index_dir: str | os.PathLike[str] | None = None,
    storages: Storages | None = None,
    manifest: bool | str = True,
    layout: Layout | None = None,
    allow_missing_shards: bool = False,
    building: bool = False,
) -> DatasetLocation:
    """Resolve a path spec into a :class:`DatasetLocation`.

    Args:
        paths: A file, directory, glob or URL, or a list of them.
        index_dir: Where sidecars live, when not in the default place.
        storages: The call's storages (default: new ones without options).
        layout: Where the sidecars are (or go), without ``index_dir``: ``None`` takes the
            layout of the existing ones (the default place first, then beside the data: see
            :mod:`ofindex.formats.placement`), the default place when there are none.
        manifest: ``True`` uses a directory's ``ofindex-manifest.json`` when there is one (one
            request instead of a listing); ``False`` lists the files; a string names the
            manifest to use.
        allow_missing_shards: Accept a set of shards that is not whole (see
            :mod:`ofindex.formats.shard_set`), with a ``MissingShardsWarning``.
        building: The location is resolved to write its index (``build_index``): sidecars
            found only in the per-user index cache do not keep a directory's index there
            when the placement rule puts it in its sibling.

    Returns:
        The resolved location.

    Raises:
        DataFileNotFoundError: Nothing matches, or a named manifest does not exist.
        IncompleteDatasetError: Names that say ``-of-N`` lack some of the N, or a writer's
            publication in the directory did not finish (unless ``allow_missing_shards``).
        SidecarError: A manifest is invalid.
        ValueError: Files on different storages, or two files of one name sharing
            ``index_dir``.
    """
    index_dir = None if index_dir is None else os.fspath(index_dir)
    storages = storages if storages is not None else Storages()
    found = _find_manifest(paths, index_dir, storages, manifest)
    if found is not None:
        storage, data_dir = storages.for_url(found.data_dir)
        prefix = storage.join(data_dir, "")  # names are relative (checked): one join for all
        files: Sequence[str] = (ManifestFiles(prefix, found)
                                if isinstance(found, CompactManifest)
                                else [prefix + name for name in found.names])
        # a manifest without an index directory is ofindex 0.2's: sidecars beside the data
        place = sidecar_place(storage, found.index_dir, storages, Layout.BESIDE)
        whole = check_shard_set(storage, _manifest_names(found), [],
                                allow=allow_missing_shards, what=_spec_text(paths))
        return DatasetLocation(storage, files, place, found, data_dir, index_dir, storages,
                               whole=whole)
    storage, files, named = _list(paths, storages, allow_missing_shards)
    listed = [f for f in files if f not in named]  # a file named on its own is not checked
    whole = check_shard_set(storage, (storage.basename(f) for f in listed),
                            sorted({storage.dirname(f) for f in listed}),
                            allow=allow_missing_shards, what=_spec_text(paths))
    check_unique_names(storage, files, index_dir)
    if index_dir is None and layout is None:
        layout = _layout(storage, files, named, building)
    return DatasetLocation(
        storage, files, sidecar_place(storage, index_dir, storages, layout or Layout.SIBLING),
        None, _named_directory(paths, storage, storages, files), index_dir, storages, named,
        whole,
    )


def _list(paths: PathSpec, storages: Storages, allow_missing_shards: bool) -> DataFiles:
    """The data files ``paths`` names; a directory without any whose writer's publication did
    not finish says so (:class:`IncompleteDatasetError`) rather than "no data files"."""
    try:
        return list_data_files(paths, storages)
    except DataFileNotFoundError:
        spec = _single(paths)
        if spec is None or allow_missing_shards:
            raise
        storage, path = storages.for_url(spec)
        if is_glob(storage, path):
            raise
        # a directory holding only a writer's hidden files and its claim: say so
        check_shard_set(storage, [], [path.rstrip("/")], allow=False, what=spec)
        raise


def _manifest_names(found: AnyManifest) -> list[str]:
    """The file names of a manifest whose set of shards is to be checked: a JSON manifest's
    (ofindex 0.2 wrote them over half-published directories; under 10,000 names, a few
    milliseconds). A compact manifest's are not: no released ofindex wrote one, ofindex writes
    none for a set that lacks shards, and the check costs about 1 s per million names."""
    return [] if isinstance(found, CompactManifest) else list(found.names)


def _spec_text(paths: PathSpec) -> str:
    """A path spec as messages show it."""
    items = as_list(paths)
    return items[0] if len(items) == 1 else f"{items[0]} … ({len(items)} paths)"


def _single(paths: PathSpec) -> str | None:
    items = as_list(paths)
    return items[0] if len(items) == 1 else None


def _named_directory(paths: PathSpec, storage: Storage, storages: Storages,
                     files: list[str]) -> str | None:
    """The directory a single, non-glob spec names, or ``None``."""
    spec = _single(paths)
    if spec is None:
        return None
    _, path = storages.for_url(spec)
    if is_glob(storage, path):
        return None
    if storage.is_local:
        is_directory = os.path.isdir(path)
    elif getattr(storage, "protocol", "") in ("http", "https"):
        is_directory = spec.endswith("/")
    else:
        is_directory = not (len(files) == 1 and files[0].rstrip("/") == path.rstrip("/"))
    return path.rstrip("/") if is_directory else None


def _find_manifest(
    paths: PathSpec, index_dir: str | None, storages: Storages, manifest: bool | str,
) -> AnyManifest | None:
    if manifest is False:
        return None
    if isinstance(manifest, str):
        return _required_manifest(manifest, storages)
    spec = _single(paths)
    if spec is None:
        return None
    spec_storage, spec_path = storages.for_url(spec)  # an unknown protocol: for the URL given
    if spec.endswith(".json") or spec.rstrip("/").rsplit("/", 1)[-1] == COMPACT_NAME:
        return _required_manifest(spec, storages)
    if is_glob(spec_storage, spec_path):
        return None
    if is_local_url(spec) and not os.path.isdir(spec_path):
        return None
    found = _directory_manifest(spec, index_dir, storages)
    if found is None:
        return None
    where, m = found
    # a manifest found (not named) must describe this directory and this index directory:
    # a tampered one must not send reads elsewhere
    here = _canonical_url(spec, storages)
    if _canonical_url(m.data_dir, storages) != here:
        if index_dir is not None:
            return None  # the index directory's manifest is of another data directory
        raise SidecarError(
            f"{manifest_url_for(spec)}: this manifest lists the files of {m.data_dir}, not of "
            f"{spec}; open it by name (manifest=...) if that is meant, or run "
            f"`ofindex build {spec}` again"
        )
    sidecars = _canonical_url(m.index_dir, storages) if m.index_dir is not None else here
    expected = (_canonical_url(index_dir, storages) if index_dir is not None
                else _canonical_url(where, storages) if where != spec else here)
    if sidecars != expected:
        raise SidecarError(
            f"{manifest_url_for(where)}: this manifest puts the sidecars in {m.index_dir}, "
            f"not in {index_dir or spec}; open it by name (manifest=...) if that is meant, or "
            f"run `ofindex build` again"
        )
    return m


def _directory_manifest(spec: str, index_dir: str | None,
                        storages: Storages) -> tuple[str, AnyManifest] | None:
    """The manifest of the data directory ``spec`` and the directory it was found in:
    ``index_dir``'s, else the default index directory's, else the per-user index cache's
    (local data), else (ofindex 0.2 and earlier) the data directory's own; ``None`` when
    there is none. In each, the compact manifest is
    looked for first (see :func:`manifest_in`)."""
    if index_dir is not None:
        places = [index_dir]
    else:
        storage, path = storages.for_url(spec)
        sibling = sibling_index_dir(storage, path.rstrip("/"))
        cached = [cached_index_dir(path)] if storage.is_local else []
        places = [storage.url(sibling), *cached, spec]
    for where in places:
        m = manifest_in(where, storages)
        if m is not None:
            return where, m
    return None


def manifest_in(directory: str, storages: Storages) -> AnyManifest | None:
    """The manifest of a directory, in one round of two requests: the compact manifest's
    header and the JSON manifest. The compact one wins when both exist (the builder removes
    the other kind when it writes one).

    Raises:
        ManifestError: The manifest found is invalid (a compact one cut short: truncated).
    """
    storage, json_path = storages.for_url(manifest_url_for(directory))
    compact_path = storage.join(storage.dirname(json_path), COMPACT_NAME)
    absent = (FileNotFoundError, IsADirectoryError, NotADirectoryError)
    (header,), (raw,), _, _ = storage.fetch_round([(compact_path, 0, HEADER_SIZE)],
                                                  [json_path])
    if isinstance(header, RangeReadError):  # shorter than a header
        raise ManifestError(f"{storage.url(compact_path)}: the compact manifest is truncated "
                            "(shorter than its header); rebuild it with `ofindex build "
                            "<dataset directory>`")
    if not isinstance(header, absent):
        if isinstance(header, BaseException):
            raise header
        return open_compact(storage, compact_path, header)
    if isinstance(raw, absent):
        return None
    if isinstance(raw, BaseException):
        raise raw
    return decode_manifest(raw, storage.url(json_path))


def _canonical_url(url: str, storages: Storages) -> str:
    """A directory's URL in one spelling (local paths absolute, links resolved), to compare
    two of them."""
    try:
        storage, path = storages.for_url(url)
    except (ValueError, ImportError):  # an unknown protocol: no place of ours
        return url
    return (os.path.realpath(path) if storage.is_local else storage.url(path)).rstrip("/")


def _required_manifest(url: str, storages: Storages) -> AnyManifest:
    """The manifest named by ``url``: compact when its name or first bytes say so."""
    m: AnyManifest | None
    if url.rstrip("/").rsplit("/", 1)[-1] == COMPACT_NAME:
        storage, path = storages.for_url(url)
        try:
            m = open_compact(storage, path)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            m = None
    else:
        m = read_manifest(url, storages)
    if m is None:
        raise DataFileNotFoundError(f"{url}: manifest not found")
    return m


def check_unique_names(storage: Storage, paths: list[str], index_dir: str | None) -> None:
    """Refuse two data files of one name when they would share a sidecar in ``index_dir``.

    Raises:
        ValueError: Two files have the same name.
    """
    if index_dir is None:
        return
    seen: dict[str, str] = {}
    for p in paths:
        name = storage.basename(p)
        if name in seen:
            raise ValueError(
                f"{storage.url(seen[name])} and {storage.url(p)} have the same name, so their "
                f"sidecars would collide in index_dir={index_dir!r}; index them separately or "
                "keep sidecars beside the data"
            )
        seen[name] = p
